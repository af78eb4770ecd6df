"""Measuring training from outside and from inside: training.profiling samples a command's
whole process tree (memory, CPU, a time limit) and attributes the samples to the stages the
run logs; training.stages.StageClock is the run's one timer (stages, spans, the total), and
the engines' MLflow timing metrics keep their names; training.floors scales a stage's floor
to a run. Real child processes, real files; no assertion on how long anything took beyond
what the code under test waits for itself."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from training.floors import best_of, stage_floors
from training.profiling import measure, profile_training, stage_figures, unfinished_stage
from training.stages import STAGE_LOG_ENV, StageClock, read_stage_log, run_timings

# A parent holding ~100 MB and a child holding ~300 MB at the same time.
TREE = """
import subprocess, sys, time
held = bytearray(100 * 2**20)
child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(300 * 2**20); time.sleep(1.5)"])
child.wait()
sys.exit(3)
"""

# A run of two stages, 'big' holding ~300 MB and 'small' nothing, each about 0.5 s.
TWO_STAGES = (
    "import time; from training.stages import StageClock; t = {}; c = StageClock(t); c.begin('big'); "
    "x = bytearray(300 * 2**20); x[::4096] = b'1' * len(x[::4096]); time.sleep(0.5); del x; "
    "c.begin('small'); time.sleep(0.5); c.end(); print(t)"
)

# A run that logs one stage, then is stuck in the next one.
STUCK = (
    "import time; from training.stages import StageClock; c = StageClock({}); c.begin('read_validate'); "
    "time.sleep(0.3); c.begin('fit'); time.sleep(60)"
)


def test_measure_sums_the_process_tree_and_keeps_the_exit_code(tmp_path):
    figures = measure([sys.executable, "-c", TREE], tmp_path / "log.txt", interval=0.05)
    assert figures["exit_code"] == 3 and not figures["timed_out"]
    assert figures["wall_s"] >= 1.5
    assert 300 <= figures["peak_rss_largest_mb"] < 420
    assert figures["peak_rss_total_mb"] >= figures["peak_rss_largest_mb"] + 90  # parent and child together
    assert figures["cpu_s"] > 0
    stopped = measure(
        [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "log2.txt", interval=0.05, time_limit=0.5
    )
    assert stopped["timed_out"] and stopped["wall_s"] < 20


def test_stage_clock_records_each_stages_time_and_its_own_peak(tmp_path):
    """Each stage's peak is its own (the high-water mark is reset when a stage begins), the
    stage log says when each ran, and its memory samples are attributed to them."""
    log = tmp_path / "stages.jsonl"
    figures = measure(
        [sys.executable, "-c", TWO_STAGES],
        tmp_path / "out.txt",
        interval=0.05,
        env={**os.environ, STAGE_LOG_ENV: str(log)},
    )
    stages = read_stage_log(log)
    assert [s["stage"] for s in stages] == ["big", "small"]
    by_name = stage_figures(stages, figures["samples"])
    assert by_name["big"]["peak_rss_main_mb"] > 300 > by_name["small"]["peak_rss_main_mb"]
    assert by_name["big"]["peak_rss_total_mb"] > 300 > by_name["small"]["peak_rss_total_mb"]
    assert all(s["wall_s"] >= 0.5 for s in by_name.values())


def test_profile_training_attributes_the_samples_to_the_logged_stages(tmp_path):
    """The stage log is started empty (an earlier run's lines would count twice) and is the
    command's, through the environment; the figures are measure()'s without the samples."""
    stage_log = tmp_path / "stages.jsonl"
    stage_log.write_text(json.dumps({"stage": "stale", "start": 0, "end": 1, "wall_s": 1, "peak_rss_mb": 1}) + "\n")
    profile = profile_training([sys.executable, "-c", TWO_STAGES], tmp_path / "out.txt", stage_log, interval=0.05)
    assert profile.figures["exit_code"] == 0 and "samples" not in profile.figures and profile.samples
    assert list(profile.stages) == ["big", "small"] and profile.unfinished is None
    assert profile.stages["big"]["peak_rss_main_mb"] > 300 > profile.stages["small"]["peak_rss_main_mb"]
    assert STAGE_LOG_ENV not in os.environ  # set for the command only


def test_a_stopped_run_says_which_stage_was_running_and_its_peaks(tmp_path):
    profile = profile_training(
        [sys.executable, "-c", STUCK], tmp_path / "out.txt", tmp_path / "stages.jsonl", interval=0.05, time_limit=3.0
    )
    assert profile.figures["timed_out"] and profile.figures["exit_code"] != 0
    assert list(profile.stages) == ["read_validate"]  # 'fit' never ended: not in the log
    assert profile.unfinished["after_stage"] == "read_validate"
    assert 0 < profile.unfinished["wall_s"] <= profile.figures["wall_s"]
    assert profile.unfinished["peak_rss_total_mb"] >= profile.unfinished["peak_rss_largest_mb"] > 5


def test_stage_figures_add_up_repeated_stages_and_take_the_nearest_sample_of_a_short_one():
    samples = [(10.0, 100.0, 60.0), (11.0, 400.0, 300.0), (12.0, 200.0, 150.0), (13.0, 120.0, 80.0)]
    stages = [
        {"stage": "fit", "start": 10.5, "end": 11.5, "wall_s": 1.0, "peak_rss_mb": 250.0},
        {"stage": "mlflow", "start": 12.4, "end": 12.45, "wall_s": 0.05, "peak_rss_mb": 90.0},
        {"stage": "fit", "start": 12.9, "end": 13.1, "wall_s": 0.2, "peak_rss_mb": 70.0},
    ]
    by_name = stage_figures(stages, samples)
    assert by_name["fit"] == {
        "wall_s": pytest.approx(1.2),
        "peak_rss_main_mb": 250.0,
        "peak_rss_total_mb": 400.0,
        "peak_rss_largest_mb": 300.0,
    }
    # No sample inside 12.4-12.45 s: the nearest one (12.0 s) stands for it.
    assert by_name["mlflow"]["peak_rss_total_mb"] == 200.0 and by_name["mlflow"]["peak_rss_largest_mb"] == 150.0
    assert unfinished_stage(stages[:2], samples) == {
        "after_stage": "mlflow",
        "wall_s": pytest.approx(0.55),
        "peak_rss_total_mb": 120.0,
        "peak_rss_largest_mb": 80.0,
    }
    assert unfinished_stage([], samples)["after_stage"] is None
    assert unfinished_stage([], samples)["peak_rss_total_mb"] == 400.0  # stopped in its first stage: every sample


def test_spans_time_around_stages_without_being_stages(tmp_path, monkeypatch):
    """A span adds `<name>_s` to the timings (twice: the sum) and contains the stages begun
    inside it; it writes nothing to the stage log. end_run() sets the run's total."""
    log = tmp_path / "stages.jsonl"
    monkeypatch.setenv(STAGE_LOG_ENV, str(log))
    timings = run_timings()
    clock = StageClock(timings)
    with clock.span("load"):
        clock.begin("read_validate")
        time.sleep(0.01)
        clock.begin("merge")
    with clock.span("lightgbm"):
        clock.begin("fit")
    with clock.span("lightgbm"):
        pass
    clock.end_run()
    assert [s["stage"] for s in read_stage_log(log)] == ["read_validate", "merge", "fit"]
    assert timings["load_s"] >= timings["read_validate_s"] > 0
    assert timings["lightgbm_s"] > 0 and "lightgbm" not in timings["peak_mb"]
    assert timings["total_s"] >= timings["load_s"] + timings["lightgbm_s"]
    with pytest.raises(RuntimeError):
        with clock.span("failed"):
            raise RuntimeError("a stage that fails")
    assert timings["failed_s"] >= 0  # timed on the way out too
    assert read_stage_log(tmp_path / "absent.jsonl") == []


@pytest.mark.real_data
@pytest.mark.slow
def test_a_training_run_logs_the_same_timing_metrics_from_the_one_clock(trained_small):
    """MLflow gets time.<stage>_s and memory.<stage>_peak_mb of every stage, and the figures
    it has logged since before the stages: time.load_s, time.features_s, time.lightgbm_s,
    time.total_s. The spans sit where they are documented (training.stages)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    cfg, result = trained_small
    mlflow.set_tracking_uri(cfg.mlflow.tracking_uri)
    logged = MlflowClient().get_run(result.run_id).data.metrics
    stages = ("read_validate", "merge", "featurize", "fit", "thresholds", "export_parity", "mlflow")
    for name in ("load", "features", "lightgbm", "total", *stages):
        assert logged[f"time.{name}_s"] == pytest.approx(result.timings[f"{name}_s"]) and logged[f"time.{name}_s"] > 0
    assert all(f"memory.{name}_peak_mb" in logged for name in stages)
    t = result.timings
    # The load span holds the read_validate stage (which ends when merge begins, inside the span;
    # merge itself runs on until featurize begins, after the span: no relation to assert there).
    assert t["read_validate_s"] <= t["load_s"]
    assert t["lightgbm_s"] <= t["fit_s"] and t["features_s"] <= t["featurize_s"]  # spans inside one stage
    assert t["total_s"] >= sum(t[f"{name}_s"] for name in stages)


def test_stage_floors_scale_per_row_figures_to_the_run():
    per_row = {
        "read_validate_s_per_row": 1e-5,
        "merge_s_per_row": 2e-6,
        "featurize_s_per_row": 4e-5,
        "fit_s_per_row_tree": 1e-8,
    }
    floors = stage_floors(
        per_row,
        {"export_parity": 0.5, "mlflow": 1.5},
        rows=80_000,
        rows_read=100_000,
        train_rows=70_000,
        trees=200,
        cores=2,
    )
    assert floors == pytest.approx(
        {"read_validate": 0.5, "merge": 0.2, "featurize": 1.6, "fit": 0.14, "export_parity": 0.5, "mlflow": 1.5}
    )
    assert "fit" not in stage_floors(per_row, {}, rows=10, rows_read=10, train_rows=7, trees=0, cores=1)


def test_best_of_warms_up_once_then_keeps_the_fastest_call():
    calls = []
    assert best_of(3, lambda: calls.append(1)) >= 0
    assert len(calls) == 4
