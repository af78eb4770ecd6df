"""The stages of a training run, timed one after another: wall time and this process's peak
memory of each, so that a slow or large run says where its time and memory went.

`StageClock.begin(name)` ends the running stage and starts `name`; the figures go into the
run's `timings` (`<stage>_s`, logged to MLflow as `time.<stage>_s`; `peak_mb[<stage>]`,
logged as `memory.<stage>_peak_mb`). When `ROUTER_STAGE_LOG` names a file, each stage is
also appended to it as a JSON line with its start and end (epoch seconds): `make scale`
matches them with the memory it samples over the whole process tree (Dask workers, the
local engine's featurizing processes), which this process alone cannot see.

Peak memory per stage: Linux lets a process reset its own high-water mark (VmHWM, by
writing 5 to /proc/self/clear_refs), so each stage's peak is its own, not the run's so far.
Elsewhere the figure is the peak so far (ru_maxrss).
"""
from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from typing import Iterator

STAGE_LOG_ENV = "ROUTER_STAGE_LOG"


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """This process's peak resident memory since the last reset, in MB."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class StageClock:
    """Times consecutive stages into `timings` (module doc); a stage begun twice adds up."""

    def __init__(self, timings: dict):
        self.timings = timings
        self.timings.setdefault("peak_mb", {})
        self.current: tuple[str, float, float] | None = None

    def begin(self, name: str) -> None:
        self.end()
        _reset_peak()
        self.current = (name, time.time(), time.perf_counter())

    def end(self) -> None:
        if self.current is None:
            return
        name, started_at, started = self.current
        self.current = None
        wall, peak = time.perf_counter() - started, peak_rss_mb()
        self.timings[f"{name}_s"] = self.timings.get(f"{name}_s", 0.0) + wall
        self.timings["peak_mb"][name] = max(self.timings["peak_mb"].get(name, 0.0), peak)
        path = os.environ.get(STAGE_LOG_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"stage": name, "start": started_at, "end": started_at + wall,
                                     "wall_s": wall, "peak_rss_mb": peak}) + "\n")

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.begin(name)
        try:
            yield
        finally:
            self.end()


def metrics_of(timings: dict) -> dict[str, float]:
    """The MLflow metrics of a run's timings: `time.<key>` and `memory.<stage>_peak_mb`."""
    out = {f"time.{k}": v for k, v in timings.items() if k not in ("start", "peak_mb")}
    out.update({f"memory.{stage}_peak_mb": v for stage, v in timings.get("peak_mb", {}).items()})
    return out
