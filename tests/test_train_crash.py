"""Training runs killed or run side by side: BUNDLE always holds a complete, verified bundle
(or the previous one), every registered version is the bundle its own run verified, and no
MLflow run is left RUNNING once the next training has started."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from serving.bundle._bundle import read_bundle
from tests.conftest import seed_store

pytestmark = pytest.mark.slow

# The training processes are forked by multiprocessing's fork server, which has imported what
# `make train` imports (PRELOAD) and does nothing else: each is `python -m pipelines.train` run
# to its end, or SIGKILLed, like any other, without the imports a new interpreter spent before
# its first stage (6-13 s of wall time on 2 loaded cores; a run's CPU time 14.5 s -> 6.2 s).
# The server only imports, so no thread of its own is copied mid-lock. A name missing here
# only makes the runs slower (the server skips modules it cannot import).
PRELOAD = [
    "numpy",
    "pandas",
    "pyarrow",
    "pyarrow.pandas_compat",
    "scipy.stats",
    "sklearn.decomposition",
    "sklearn.linear_model",
    "lightgbm",
    "onnx",
    "onnxruntime",
    "onnxmltools",
    "onnxmltools.convert.lightgbm",
    "tokenizers",
    "git",
    "alembic.command",
    "alembic.config",
    "sqlalchemy.dialects.sqlite",
    "opentelemetry.sdk.metrics",
    "mlflow",
    "mlflow.tracking",
    "mlflow.tracing.export",
    "mlflow.tracing.processor.otel",
    "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.store.tracking.sqlalchemy_workspace_store",
    "mlflow.store.model_registry.sqlalchemy_store",
    "mlflow.store.model_registry.sqlalchemy_workspace_store",
    "typer",
    "rich.console",
    "rich.status",
    "data.logs",
    "data.location",
    "data.prepare",
    "evaluation.headline",
    "evaluation.policies",
    "serving.bundle._bundle",
    "serving.scoring._scorer",
    "training.config",
    "training.engines.base",
    "training.engines.local",
    "training.featurize",
    "training.lexical",
    "training.model",
    "training.labels",
    "training.novelty",
    "training.partial",
    "training.token_rows",
    "training.held_out",
    "training.acceptance",
    "training.drift_reference",
    "training.export",
    "training.provenance",
    "training.tracking",
    "training.writer",
    "tests.test_train_crash",  # the processes' target, train_command
]


def train_command(args: list[str], log: str, env: dict) -> None:
    """`python -m pipelines.train ARGS` in this (forked) process, its output in `log`."""
    import runpy

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.update(env)
    sys.argv = ["pipelines.train", *args]
    try:
        runpy.run_module("pipelines.train", run_name="__main__", alter_sys=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


class Trainings:
    """Starts training processes (train_command) from the fork server and reaps them."""

    def __init__(self):
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(PRELOAD)  # before the server starts: the first start()

    def start(self, args: list[str], log: Path, env: dict | None = None):
        # not daemonic: a training may start processes of its own (featurizing), as `make train` does
        process = self.context.Process(target=train_command, args=(args, str(log), env or {}))
        process.start()
        return process

    @staticmethod
    def wait(process) -> int:
        """The process's exit code (-9: SIGKILL)."""
        process.join(timeout=600)
        assert process.exitcode is not None, f"training {process.pid} still running after 10 minutes"
        return process.exitcode

    def run(self, args: list[str], log: Path, env: dict | None = None) -> None:
        """Run a training to its end; it must succeed (its output in the message if not)."""
        code = self.wait(self.start(args, log, env))
        assert code == 0, log.read_text()


@pytest.fixture(scope="module")
def trainings():
    return Trainings()


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
    """The options of `make train` (python -m pipelines.train) on MMLU rows, single split: logs
    without edge answers fit no acceptance check, which cut a run from 30 s to 18 s on 2 cores."""
    return [
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


# Where a run is, in order: what its stage log (training.stages, ROUTER_STAGE_LOG: a line as
# each stage ends), its temporary bundle folder and BUNDLE show. A kill is counted in the stage
# its run was in when it died, read from what the run left.
STAGES = (
    "start, reading and merging the logs",  # no stage ended, or read_validate
    "featurizing",  # merge ended
    "lexical evidence",
    "fitting the heads",
    "acceptance check, thresholds and familiarity reference",
    "starting the MLflow run",  # familiarity ended: tracked_run, a RUNNING run
    "exporting the bundle's files",  # ONNX export, familiarity, drift reference
    "the bundle written in its temporary folder and checked (the bundle's lock held)",
    "published at BUNDLE, logging and registering it in MLflow",
    "registered: the run's last metrics and run.json",  # every stage ended
)


PUBLISHED = 8  # from this stage on, BUNDLE is the run's own

# The stage log's lines of a whole run, in order (training.stages: a line as each ends): what
# Watch.stage reads STAGES from. A run whose stages differ fails the test here, not a kill count.
ENDED = (
    "read_validate",
    "merge",
    "featurize",
    "lexical",
    "fit",
    "acceptance",
    "thresholds",
    "familiarity",
    "mlflow",  # the run started
    "export_parity",
    "mlflow",  # published and registered
)


@dataclass
class Watch:
    """One training's progress, from outside, in a few system calls (polled every few ms)."""

    work: Path
    stage_log: Path
    temps_before: set[str]
    bundle_before: int | None  # BUNDLE's inode: a publish swaps in another folder
    log_size: int = 0
    ended: int = 0  # stages ended (whole lines in the stage log)

    @staticmethod
    def of(work: Path, stage_log: Path) -> Watch:
        return Watch(work, stage_log, temp_folders(work), bundle_inode(work))

    def stage(self) -> int:
        """The index in STAGES of where the run is (or was when it died)."""
        try:
            size = os.stat(self.stage_log).st_size
        except FileNotFoundError:
            size = 0
        if size != self.log_size:
            lines = self.stage_log.read_bytes().split(b"\n")[:-1]  # whole lines: a stage that ended
            names = tuple(json.loads(line)["stage"] for line in lines)
            assert names == ENDED[: len(names)], f"the run's stages {names} are not {ENDED}: update STAGES"
            self.log_size, self.ended = size, len(names)
        ended = self.ended
        if ended >= 9:  # the bundle is touched from export_parity (the 10th stage) on, not before
            if bundle_inode(self.work) != self.bundle_before:
                return PUBLISHED + 1 if ended >= 11 else PUBLISHED
            if ended >= 10 or temp_folders(self.work) - self.temps_before:
                return PUBLISHED - 1
        # 9 ended: export_parity runs; 8: the first "mlflow"; 5-7: acceptance, thresholds, familiarity
        return {9: 6, 8: 5, 7: 4, 6: 4, 5: 4, 4: 3, 3: 2, 2: 1}.get(ended, 0)


def temp_folders(work: Path) -> set[str]:
    return {name for name in os.listdir(work) if name.startswith(".bundle.tmp-")}


def bundle_inode(work: Path) -> int | None:
    try:
        return os.stat(work / "bundle").st_ino
    except FileNotFoundError:
        return None


def bundle_run(work: Path) -> str:
    return json.loads((work / "bundle" / "manifest.json").read_text())["mlflow"]["run_id"]


# Between looks at a run: often enough to land in a 60 ms stage, seldom enough that watching
# costs little CPU (a look and a sleep: ~0.2 ms on 2 loaded cores); farther from the stage
# aimed at, seldom.
NEAR, FAR = 0.004, 0.05


def stage_starts(trainings, args, work: Path, stage_log: Path, log: Path) -> list[float]:
    """Run a training to its end, watching it: when each STAGES entry was first seen (seconds
    after its start), and last when it ended."""
    watch, started = Watch.of(work, stage_log), time.monotonic()
    process = trainings.start(args, log, {"ROUTER_STAGE_LOG": str(stage_log)})
    seen = [0.0] + [None] * len(STAGES)
    while process.is_alive():
        at = watch.stage()
        for stage in range(at + 1):
            seen[stage] = time.monotonic() - started if seen[stage] is None else seen[stage]
        time.sleep(NEAR)
    seen[-1] = time.monotonic() - started
    assert trainings.wait(process) == 0, log.read_text()
    assert watch.stage() == len(STAGES) - 1
    return seen


def kill_in(
    trainings, args, work: Path, stage_log: Path, log: Path, target: int, delay: float
) -> tuple[int, int | None]:
    """Start a training, SIGKILL it `delay` seconds into STAGES[target] (at once when it gets
    past it first): its pid and the stage it died in (None: it ended before the kill)."""
    watch = Watch.of(work, stage_log)
    process = trainings.start(args, log, {"ROUTER_STAGE_LOG": str(stage_log)})
    kill_at = None
    while process.is_alive():
        at = watch.stage()
        if at == target and kill_at is None:
            kill_at = time.monotonic() + delay
        if at > target or (kill_at is not None and time.monotonic() >= kill_at):
            os.kill(process.pid, signal.SIGKILL)
            break
        time.sleep(NEAR if at >= target - 1 else FAR)
    killed = trainings.wait(process) == -signal.SIGKILL
    return process.pid, watch.stage() if killed else None


def registered_versions_match_their_runs(work) -> int:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    versions = client.search_model_versions("name='edge-cloud-router'")
    for version in versions:
        folder = client.download_artifacts(version.run_id, "bundle", str(work / f"download-{version.version}"))
        bundle = read_bundle(folder)  # every checksum verified
        assert bundle.manifest.mlflow["run_id"] == version.run_id
    return len(versions)


def runs_where(work, filter_string: str) -> list[str]:
    """The ids of the store's runs (every experiment) that match `filter_string`."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return [r.info.run_id for r in client.search_runs(experiments, filter_string=filter_string)]


def running_runs(work) -> list[str]:
    return runs_where(work, "attributes.status = 'RUNNING'")


def run_of_process(work, pid: int) -> str:
    """The MLflow run a training process started (training.tracking's owner tag)."""
    (run,) = runs_where(work, f"tags.`router.owner` = '{socket.gethostname()}:{pid}'")
    return run


def test_sigkill_at_random_points_never_leaves_a_broken_or_wrong_bundle(
    trainings, mmlu_logs, static_encoder_cache, tmp_path
):
    """Real training processes are SIGKILLed in every stage of a run (STAGES), each at a random
    point of the stage: one kill per stage, again when a kill lands in a later stage than the
    one aimed at or after the run ended, until every stage has had its kill. The stages' lengths
    come from a first run, watched to its end. The MLflow store starts as a copy of an empty one
    (conftest.seed_store): the first run then takes as long as the killed runs after it, which
    find the store made. Creating a store from nothing is the race below's and test_commands'
    `make train MLRUNS=`."""
    work, encoder_cache = tmp_path, static_encoder_cache
    seed_store(f"sqlite:///{work / 'mlflow.db'}", encoder_cache)
    args = command(work, mmlu_logs, encoder_cache)
    seen = stage_starts(trainings, args, work, work / "stages-first.jsonl", work / "first.log")
    lengths = [b - a for a, b in zip(seen, seen[1:])]
    first = bundle_run(work)
    rng = random.Random(7)
    landed: dict[int, int] = {}  # stage -> kills that landed in it
    kills = 0
    for target in range(len(STAGES)):
        delay = rng.uniform(0.0, lengths[target])
        while target not in landed:
            assert kills < 2 * len(STAGES), f"no kill landed in {STAGES[target]!r} in {kills} kills: {landed}"
            before, log, stage_log = bundle_run(work), work / f"kill-{kills}.log", work / f"stages-{kills}.jsonl"
            pid, stage = kill_in(trainings, args, work, stage_log, log, target, delay)
            kills += 1
            delay = 0.0  # again: at once when it gets there
            bundle = read_bundle(work / "bundle")  # complete and verified: the previous one or a new one
            assert bundle.manifest.mlflow["run_id"]
            if stage is not None:
                landed[stage] = landed.get(stage, 0) + 1
            if stage is None or stage >= PUBLISHED:  # the killed run's own bundle, checked by it
                assert bundle.manifest.mlflow["run_id"] == run_of_process(work, pid)
            else:  # not published: the previous one
                assert bundle.manifest.mlflow["run_id"] == before
    print(f"stages seen at {[round(t, 2) for t in seen]} s; {kills} kills, landed {landed}")
    assert sorted(landed) == list(range(len(STAGES)))
    versions = registered_versions_match_their_runs(work)
    assert versions >= 1
    trainings.run(args, work / "last.log")
    assert running_runs(work) == []  # the killed runs were marked FAILED by the next start
    assert read_bundle(work / "bundle").manifest.mlflow["run_id"] != first
    assert registered_versions_match_their_runs(work) == versions + 1
    assert not list(work.glob(".bundle.tmp-*")) and not list(work.glob(".bundle.old-*"))


def test_two_trainings_on_one_bundle_path_each_register_their_own_bundle(trainings, mmlu_logs, encoder_cache, tmp_path):
    args = command(tmp_path, mmlu_logs, encoder_cache)
    logs = [tmp_path / f"run-{i}.log" for i in range(2)]
    processes = [trainings.start(args, log) for log in logs]  # both at once, on a store neither has made
    for process, log in zip(processes, logs):
        assert trainings.wait(process) == 0, log.read_text()
    assert registered_versions_match_their_runs(tmp_path) == 2
    read_bundle(tmp_path / "bundle")
    assert running_runs(tmp_path) == []
