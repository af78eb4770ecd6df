"""Training runs killed or run side by side: BUNDLE always holds a complete, verified bundle
(or the previous one), every registered version is the bundle its own run verified, and no
MLflow run is left RUNNING once the next training has started."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving.bundle import read_bundle
from tests.conftest import ROOT, seed_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mmlu_logs(small_routellm, tmp_path_factory) -> Path:
    """The slice's MMLU subjects but its largest (professional law, half the slice's MMLU
    prompts): 1,117 prompts. What these tests kill and race is the run's bundle writing and
    MLflow bookkeeping, which every run does the same way; fewer rows make each run, and with
    it every wait for a kill, shorter (a run: 26 s -> 17 s on 2 cores under load)."""
    folder = tmp_path_factory.mktemp("mmlu_logs") / "mmlu"
    folder.mkdir()
    for subject in (small_routellm / "mmlu").iterdir():
        if subject.name != "mmlu_professional_law.csv":
            (folder / subject.name).symlink_to(subject)
    return folder


def command(work, logs, cache) -> list[str]:
    """`make train` on MMLU rows, single split: logs without edge answers fit no acceptance
    check, which cut a run from 30 s to 18 s on 2 cores."""
    return [
        sys.executable,
        "-m",
        "pipelines.train",
        "--data",
        str(logs),
        "--bundle",
        str(work / "bundle"),
        "--set",
        f"cache_dir={cache}",
        "--set",
        f"reports_dir={work / 'reports'}",
        "--set",
        f"tracking_uri=sqlite:///{work / 'mlflow.db'}",
        "--set",
        f"artifact_root={work / 'artifacts'}",
        "--set",
        "min_rows_per_tag=50",
        "--set",
        "cv_folds=0",
    ]


def registered_versions_match_their_runs(work) -> int:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    versions = client.search_model_versions("name='edge-cloud-router'")
    for version in versions:
        folder = client.download_artifacts(version.run_id, "bundle", str(work / f"download-{version.version}"))
        bundle = read_bundle(folder)  # every checksum verified
        assert bundle.manifest.mlflow["run_id"] == version.run_id
    return len(versions)


def running_runs(work) -> list[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return [r.info.run_id for r in client.search_runs(experiments, filter_string="attributes.status = 'RUNNING'")]


def test_sigkill_at_random_points_never_leaves_a_broken_or_wrong_bundle(mmlu_logs, static_encoder_cache, tmp_path):
    """The MLflow store starts as a copy of an empty one (conftest.seed_store): the run timed
    below is then as long as the killed runs after it, which find the store made, so the kills
    fall across their stages (timed with the store's creation, the last 6-9 s of the range
    killed runs that had already finished). Creating a store from nothing is the race below's
    and test_commands' `make train MLRUNS=`."""
    work, encoder_cache = tmp_path, static_encoder_cache
    seed_store(f"sqlite:///{work / 'mlflow.db'}", encoder_cache)
    start = time.monotonic()  # a run's length, the distillation done: the kills fall across its stages
    subprocess.run(command(work, mmlu_logs, encoder_cache), cwd=ROOT, check=True, capture_output=True)
    duration = time.monotonic() - start
    first = json.loads((work / "bundle" / "manifest.json").read_text())["mlflow"]["run_id"]
    rng = random.Random(7)
    for _ in range(10):
        process = subprocess.Popen(
            command(work, mmlu_logs, encoder_cache), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(rng.uniform(0.3, duration))
        process.send_signal(signal.SIGKILL)
        process.wait()
        bundle = read_bundle(work / "bundle")  # complete and verified: the previous one or a new one
        assert bundle.manifest.mlflow["run_id"]
    versions = registered_versions_match_their_runs(work)
    assert versions >= 1
    subprocess.run(command(work, mmlu_logs, encoder_cache), cwd=ROOT, check=True, capture_output=True)
    assert running_runs(work) == []  # the killed runs were marked FAILED by the next start
    assert read_bundle(work / "bundle").manifest.mlflow["run_id"] != first
    assert registered_versions_match_their_runs(work) == versions + 1
    assert not list(work.glob(".bundle.tmp-*")) and not list(work.glob(".bundle.old-*"))


def test_two_trainings_on_one_bundle_path_each_register_their_own_bundle(mmlu_logs, encoder_cache, tmp_path):
    runs = [
        subprocess.Popen(
            command(tmp_path, mmlu_logs, encoder_cache),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for process in runs:
        _, err = process.communicate(timeout=900)
        assert process.returncode == 0, err
    assert registered_versions_match_their_runs(tmp_path) == 2
    read_bundle(tmp_path / "bundle")
    assert running_runs(tmp_path) == []
