"""The stages of a training run, timed one after another: wall time and this process's peak
memory of each, so that a slow or large run says where its time and memory went.

`StageClock` is the run's one timer. `begin(name)` ends the running stage and starts `name`: its
`<stage>_s` and `peak_mb[<stage>]` go into the run's `timings` (MLflow: `time.<stage>_s`,
`memory.<stage>_peak_mb`); on Linux each stage's peak is its own (VmHWM reset through
/proc/self/clear_refs), elsewhere the peak so far (ru_maxrss). With `ROUTER_STAGE_LOG` naming a
file, each stage is appended to it as a JSON line with its start and end, which `make scale`
(training.profiling) matches with the memory of the whole process tree. `span(name)` times a
figure MLflow has logged since before the stages (`lightgbm_s`, `load_s`, `features_s`): wall time
only, in no stage log; `total_s` is the run's wall time since run_timings() (`end_run`).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
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


def return_freed_memory() -> None:
    """Give the memory the C heap holds free back to the system (glibc's malloc_trim; a
    no-op elsewhere). Freed blocks stay in glibc's heap, counted in the process's RSS: the
    Dask client's samples arrive as many partitions of a few MB each, and once the frames
    built from them were dropped its RSS stayed ~0.4 GB higher through the rest of the run;
    the local engine's featurizing leaves ~0.4 GB so (both measured at a million rows)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def run_timings() -> dict:
    """A training run's timings, started now: every StageClock of the run fills it, and the
    last one's end_run() sets its total."""
    return {"start": time.perf_counter()}


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
            record = dict(stage=name, start=started_at, end=started_at + wall, wall_s=wall, peak_rss_mb=peak)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    def end_run(self) -> None:
        """End the running stage and set `total_s`: the run's wall time since the start that
        run_timings() took (cross-validation's folds, any engine's fit and the finish included)."""
        self.end()
        self.timings["total_s"] = time.perf_counter() - self.timings["start"]

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        """Time the block into `timings["<name>_s"]` (added up if timed again) without
        beginning or ending a stage: stages begun inside it run and are timed as usual."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings[f"{name}_s"] = self.timings.get(f"{name}_s", 0.0) + time.perf_counter() - started


def read_stage_log(path: Path) -> list[dict]:
    """The stages a run appended to its stage log (STAGE_LOG_ENV), in order; [] when it wrote
    none. Each: stage, start and end (epoch seconds), wall_s, peak_rss_mb."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def metrics_of(timings: dict) -> dict[str, float]:
    """The MLflow metrics of a run's timings: `time.<key>` and `memory.<stage>_peak_mb`."""
    out = {f"time.{k}": v for k, v in timings.items() if k not in ("start", "peak_mb")}
    out.update({f"memory.{stage}_peak_mb": v for stage, v in timings.get("peak_mb", {}).items()})
    return out
