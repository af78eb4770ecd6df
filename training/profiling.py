"""What a training command costs, measured from outside (`make scale`, pipelines/scale.py): run it
as a child process, sample its whole process tree's memory and CPU, and attribute the samples to
the stages its stage log names (training.stages, ROUTER_STAGE_LOG). From outside, because a run's
memory is spread over processes it cannot see (a LocalCluster's scheduler and workers, the
featurizing pool), and a run stopped for taking too long still says where it was. psutil comes
with the training extra and is imported on use.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from training.stages import STAGE_LOG_ENV, read_stage_log

# One memory sample: (epoch seconds, the tree's summed RSS in MB, its largest process's RSS in MB).
Sample = tuple[float, float, float]


def _each(processes, do) -> list:
    """`do(p)` of each psutil process still there (one that exited since it was listed is passed over)."""
    import psutil

    out = []
    for p in processes:
        try:
            out.append(do(p))
        except psutil.Error:
            pass
    return out


def _tree(process) -> list:
    return [process, *process.children(recursive=True)]


def tree_rss(process) -> tuple[int, int]:
    """(sum, max) RSS in bytes over a psutil process and all its descendants."""
    sizes = _each(_tree(process), lambda p: p.memory_info().rss)
    return sum(sizes), max(sizes, default=0)


def _record_tree_cpu(process, seen: dict[int, float]) -> None:
    """Record each live process's CPU seconds so far into `seen` by pid: a process that has
    exited keeps the last figure read, so short-lived children still count."""
    seen.update(_each(_tree(process), lambda p: (p.pid, sum(p.cpu_times()[:2]))))  # user + system


def _stop_tree(process) -> None:
    """Terminate a process and its descendants, then kill whatever is left after 15 s."""
    import psutil

    tree = _tree(process)
    _each(tree, lambda p: p.terminate())
    psutil.wait_procs(tree, timeout=15)
    _each(tree, lambda p: p.kill())
    process.wait()


def measure(
    command: list[str],
    log_path: Path,
    *,
    interval: float = 0.2,
    env: dict | None = None,
    time_limit: float | None = None,
) -> dict:
    """Run `command` with its output in `log_path`, sampling its process tree's memory and CPU
    every `interval` seconds. Past `time_limit` seconds the tree is stopped and `timed_out`
    says so. Returns exit_code, wall_s, timed_out, cpu_s (the tree's; a process that exited
    counts with its last reading, one that lived less than `interval` may be missed), the
    peaks of the summed and the largest RSS in MB, and the samples (Sample)."""
    import psutil

    start, samples, cpu = time.perf_counter(), [], {}
    timed_out = False
    with open(log_path, "w", encoding="utf-8") as log:
        process = psutil.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        while process.poll() is None:
            total, largest = tree_rss(process)
            samples.append((time.time(), total / 2**20, largest / 2**20))
            _record_tree_cpu(process, cpu)
            if time_limit is not None and time.perf_counter() - start > time_limit:
                timed_out = True
                _stop_tree(process)
                break
            time.sleep(interval)
    return {
        "exit_code": process.returncode,
        "wall_s": time.perf_counter() - start,
        "timed_out": timed_out,
        "cpu_s": sum(cpu.values()),
        "peak_rss_total_mb": max((s[1] for s in samples), default=0.0),
        "peak_rss_largest_mb": max((s[2] for s in samples), default=0.0),
        "samples": samples,
    }


def stage_figures(stages: list[dict], samples: list[Sample]) -> dict[str, dict]:
    """Per stage of a stage log (a stage logged twice adds up): wall time, the training
    process's own peak (VmHWM), and the peaks of the tree's summed RSS and of its largest
    process among the samples taken while it ran (the nearest sample when the stage was
    shorter than the sampling interval, so that no stage is left without a figure)."""
    out: dict[str, dict] = {}
    for stage in stages:
        inside = [s for s in samples if stage["start"] <= s[0] <= stage["end"]]
        if not inside and samples:
            inside = [min(samples, key=lambda s: abs(s[0] - (stage["start"] + stage["end"]) / 2))]
        figures = out.setdefault(
            stage["stage"],
            {"wall_s": 0.0, "peak_rss_main_mb": 0.0, "peak_rss_total_mb": 0.0, "peak_rss_largest_mb": 0.0},
        )
        figures["wall_s"] += stage["wall_s"]
        figures["peak_rss_main_mb"] = max(figures["peak_rss_main_mb"], stage["peak_rss_mb"])
        figures["peak_rss_total_mb"] = max([figures["peak_rss_total_mb"], *(s[1] for s in inside)])
        figures["peak_rss_largest_mb"] = max([figures["peak_rss_largest_mb"], *(s[2] for s in inside)])
    return out


def unfinished_stage(logged: list[dict], samples: list[Sample]) -> dict:
    """A stopped run: how long the stage that was running had run, and the memory peaks since
    the last logged stage ended. That stage is in no stage log (it never ended), so this is
    the only figure it gets; `after_stage` names the last one that did end."""
    since = max((s["end"] for s in logged), default=samples[0][0] if samples else 0.0)
    after = [s for s in samples if s[0] >= since] or samples[-1:]
    return {
        "after_stage": logged[-1]["stage"] if logged else None,
        "wall_s": (samples[-1][0] - since) if samples else 0.0,
        "peak_rss_total_mb": max((s[1] for s in after), default=0.0),
        "peak_rss_largest_mb": max((s[2] for s in after), default=0.0),
    }


@dataclass
class Profile:
    """A profiled command: `figures` as measure() returns them (without the samples), its
    stages (stage_figures) and, when it was stopped, the unfinished stage (else None)."""

    figures: dict
    stages: dict[str, dict]
    unfinished: dict | None = None
    samples: list[Sample] = field(default_factory=list, repr=False)


def profile_training(
    command: list[str],
    log_path: Path,
    stage_log: Path,
    *,
    interval: float = 0.2,
    time_limit: float | None = None,
    env: dict | None = None,
) -> Profile:
    """Run a training command (measure()) with its stage log at `stage_log`, which is started
    empty, and attribute the samples to the stages it logged."""
    stage_log.unlink(missing_ok=True)
    env = {**(os.environ if env is None else env), STAGE_LOG_ENV: str(stage_log)}
    figures = measure(command, log_path, interval=interval, env=env, time_limit=time_limit)
    samples = figures.pop("samples")
    logged = read_stage_log(stage_log)
    return Profile(
        figures,
        stage_figures(logged, samples),
        unfinished_stage(logged, samples) if figures["timed_out"] else None,
        samples,
    )
