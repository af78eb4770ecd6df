"""Shared fixtures. Real-data tests read ROUTER_DATA_DIR (CI sets it) and fail loudly when
it is set but missing; without it they fall back to ../shared/data/routellm."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

# OpenBLAS's threads (numpy's and scipy's: PCA, the lexical regressions, LU and QR) sleep as soon
# as they run out of work instead of spinning for ~2^28 cycles first. Spinning on 2 cores shared
# with the other xdist worker, a PCA of 800 x 384 embeddings (every training's projection) took
# 0.8-3.0 s instead of 0.03 s, a training of the crash tests' 1,117 prompts 5.4-26 s instead of
# 3.4-16 s. The thread count and the way work is split are unchanged, so the results are the same
# bits (OPENBLAS_NUM_THREADS=1 would change them). OpenBLAS reads it when it loads: before the
# first numpy import (training.engines imports it), so here; the commands the tests run inherit it.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import pytest

from training.engines import passive_openmp_waits

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

# OpenMP threads wait for work sleeping, not spinning (training.engines.passive_openmp_waits),
# from the start of the session: each OpenMP runtime (LightGBM's, scikit-learn's, torch's)
# reads the policy once, when it loads, and tests load some before any training chooses an
# engine, which is where the engines set it. Spinning, a 300-round acceptance booster took
# 4.2 s instead of 1.5 s on these 2 cores under load; the trees are the same. The commands
# the tests run inherit it.
passive_openmp_waits()

# The acceptance check's boosting rounds in the trainings whose subject is something else
# (`make compare-configs`, the Dask engine's folds, outcome logs, the training CLI, a capped
# sample, the registry the promotion tests fill): the check is fitted there as in every
# training, on the same answers, in 50 rounds instead of the default 300; it was six 300-round
# boosters a fit, a fold or a run, about 8 s of each on 2 cores. The tests of the check itself,
# and the session's trainings (trained_small, trained_full, trained_readme), keep the default.
QUICK_ACCEPTANCE_ROUNDS = 50

# `make test` runs on every core (pytest-xdist, --dist loadgroup), dealing the tests by this
# file's scheduler. The session fixtures are built once whatever the dealing (once_per_session:
# a worker that needs one another is building waits for it). Each test file is one unit of work,
# so its module-scoped fixtures (a file's own trainings) are built once, by the worker that runs
# it; except the tests of the cross-fitted training on all the logs (trained_readme: six fits,
# the session's longest piece of work), one unit together, dealt first. The files that take
# longest (SLOWEST_FILES, slowest first, from `make test ARGS=--durations=40`) are dealt next and
# the rest after them in their order, so the short ones fill in at the end and the workers finish
# together. tests/test_layout.py checks that README_TRAINING_TESTS names every test that uses
# trained_readme and that SLOWEST_FILES names test files. (xdist's own xdist_group markers do not
# group under pytest 9, whose node ids no longer read the `_nodeid` xdist rewrites; a scheduler does.)
README_TRAINING_TESTS = (
    "tests/test_crossval.py::test_make_train_cross_fits_the_bundle_on_every_row",
    "tests/test_results.py::test_readme_headline_table_is_what_training_measures",
)
SLOWEST_FILES = (
    "test_dask_engine.py",
    "test_train_crash.py",
    "test_traffic.py",
    "test_traffic_refusals.py",
    "test_lexical.py",
    "test_acceptance.py",
    "test_crossval.py",
    "test_evaluate_pipeline.py",
    "test_router_update.py",
    "test_train_pipeline.py",
    "test_vectors.py",
    "test_outcome_log.py",
    "test_scale.py",
    "test_sdk_install.py",
    "test_fetch_data.py",
    "test_commands.py",
    "test_results.py",
    "test_hf_datasets.py",
    "test_reference.py",
    "test_training_sample.py",
)


def _dealing_rank(nodeid: str) -> int:
    if nodeid in README_TRAINING_TESTS:
        return 0
    name = Path(nodeid.split("::", 1)[0]).name
    return 1 + (SLOWEST_FILES.index(name) if name in SLOWEST_FILES else len(SLOWEST_FILES))


def pytest_collection_modifyitems(config, items):
    """In an xdist worker: the collection in dealing order (the scheduler deals units in the
    order the workers collected them). A run without workers keeps the files' order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: _dealing_rank(item.nodeid))


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneUnitPerFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "trained_readme" if nodeid in README_TRAINING_TESTS else nodeid.split("::", 1)[0]

    config.option.loadscopereorder = False  # deal in the collection's order, not the largest units first
    return OneUnitPerFile(config, log)


@pytest.fixture(scope="session", autouse=True)
def _offline():
    """Nothing loads from a model or dataset hub, even when the tests run outside `make test`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    configured = os.environ.get("ROUTER_DATA_DIR")
    if configured:
        path = Path(configured)
        if not (path / "mmlu").is_dir():
            pytest.fail(f"ROUTER_DATA_DIR={configured} is set but holds no RouteLLM logs (no mmlu/ folder)")
        return path
    path = ROOT.parent / "shared" / "data" / "routellm"
    if not path.is_dir():
        pytest.skip("no RouteLLM logs: set ROUTER_DATA_DIR to run the real-data tests")
    return path


def shared_root(tmp_path_factory) -> Path:
    """The folder every process of this test session sees: under pytest-xdist the session's
    base folder, whose popen-gwN subfolders are the workers' own; without xdist the base folder."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def exclusive(lock: Path):
    """Holds an exclusive lock on the file `lock` (fcntl.flock) across the session's processes."""
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def built_once(root: Path, name: str, build: Callable[[Path], T]) -> T:
    """build(root/name) once for every process that asks: the first builds it holding the lock
    root/name.lock and leaves its value pickled beside it; one that asks meanwhile waits for the
    lock instead of building it again, then reads the value. A build that raised is made again
    by the next to ask. What `build` writes into its folder is shared, so read-only."""
    folder, value = root / name, root / f"{name}.pickle"
    with exclusive(root / f"{name}.lock"):
        if not value.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            built = build(folder)
            making = value.with_suffix(".making")
            making.write_bytes(pickle.dumps(built))
            making.replace(value)
            return built
    return pickle.loads(value.read_bytes())


def once_per_session(tmp_path_factory, name: str, build: Callable[[Path], T]) -> T:
    """built_once in shared_root: one build per test session, whatever the number of xdist
    workers that need it. The session's trainings are built so: a worker that needs one another
    worker is training waits for it rather than training it a second time on the same cores."""
    return built_once(shared_root(tmp_path_factory), f"shared-{name}", build)


@pytest.fixture(scope="session")
def small_routellm(real_data_dir, tmp_path_factory) -> Path:
    """A RouteLLM-layout slice of the real logs: a few MMLU subjects, GSM8K and MT-Bench (one
    copy for the session's workers: read-only)."""

    def copy(dest: Path) -> Path:
        (dest / "mmlu").mkdir()
        for subject in (
            "professional_law",
            "high_school_mathematics",
            "anatomy",
            "marketing",
            "college_physics",
            "high_school_us_history",
            "professional_accounting",
            "virology",
        ):
            shutil.copy(real_data_dir / "mmlu" / f"mmlu_{subject}.csv", dest / "mmlu")
        shutil.copytree(real_data_dir / "gsm8k", dest / "gsm8k")
        shutil.copytree(real_data_dir / "mt_bench", dest / "mt_bench")
        return dest

    return once_per_session(tmp_path_factory, "routellm_slice", copy)


@pytest.fixture(scope="session")
def encoder_cache(tmp_path_factory) -> Path:
    """One cache folder per test process. Its encoders/ folder is the session's, shared by its
    workers: the static tier's table is distilled into it once (24 s alone, about a minute
    beside the other worker on 2 cores), before any test uses it, then reused; or, when
    `make train` has distilled it into the project's cache already (the README's quick start
    runs it first), copied from there: the file's name is its content (MiniLM's weights and the
    distillation's version), and distilling is deterministic, so it is the same table bit for
    bit. A fresh clone (CI) distills it. The embedding cache (SQLite) and the empty MLflow store
    beside it are each worker's own, so that no two workers write to one database."""
    from training.encoders import build_encoder, static_table_path

    def distilled(encoders: Path) -> Path:
        made = static_table_path(ROOT / "data" / "cache" / "encoders")
        if made.is_file():
            encoders.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(made, static_table_path(encoders))
        build_encoder("static", encoders)
        return encoders

    cache = tmp_path_factory.mktemp("cache")
    (cache / "encoders").symlink_to(once_per_session(tmp_path_factory, "encoders", distilled), target_is_directory=True)
    return cache


@pytest.fixture(scope="session")
def static_encoder_cache(encoder_cache) -> Path:
    """encoder_cache with the static tier's table already distilled: for tests that time a
    training run, which should not count the once-per-session distillation. (encoder_cache
    distills it now: the name says what these tests rely on.)"""
    return encoder_cache


def config_for(tmp: Path, data: Path, cache: Path, **extra):
    """A TrainConfig that writes everything (bundle, MLflow, reports) under `tmp`. It trains on
    the quick single split (split.cv_folds=0, one fit instead of one per fold and a final one): a
    test of cross-fitting asks for its folds in `extra` (options by group: split={"cv_folds": 5})."""
    from training.config import TrainConfig

    options = dict(
        data=[str(data)],
        bundle={"path": str(tmp / "bundle")},
        cache_dir=str(cache),
        mlflow={"tracking_uri": f"sqlite:///{tmp}/mlruns/mlflow.db", "artifact_root": str(tmp / "mlruns" / "art")},
        reports_dir=str(tmp / "reports"),
        routing={"min_rows_per_tag": 50},
        split={"cv_folds": 0},
    )
    config = TrainConfig.of(options, extra)
    seed_store(config.mlflow.tracking_uri, cache)
    return config


def seed_store(tracking_uri: str, cache: Path) -> None:
    """A new SQLite MLflow store starts as a copy of an empty one, made once per cache folder by
    MLflow itself: its schema migrations take 6-9 s per new store on 2 cores, which each training
    in the suite paid again. A store that exists is left alone; some commands the tests run as
    processes (`make train MLRUNS=`, the race of two trainings) still create theirs from nothing."""
    if not tracking_uri.startswith("sqlite:///"):
        return
    store = Path(tracking_uri.removeprefix("sqlite:///"))
    if store.exists():
        return
    empty = Path(cache) / "mlflow-empty.db"
    empty.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(empty.with_name("mlflow-empty.lock")):  # processes that seed from one cache at once
        if not empty.exists():
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

            making = empty.with_name("mlflow-empty.making.db")
            making.unlink(missing_ok=True)
            SqlAlchemyStore(f"sqlite:///{making}", (empty.parent / "mlflow-empty-artifacts").as_uri()).engine.dispose()
            making.rename(empty)
    store.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(empty, store)


def _train(config):
    from training.engines.base import train

    return train(config)


@pytest.fixture(scope="session")
def trained_small(small_routellm, encoder_cache, tmp_path_factory):
    """(config, TrainResult) of one `make train` run on the real-data slice, shared by the
    session (once_per_session: one training for all its workers)."""

    def run(folder: Path):
        cfg = config_for(folder, small_routellm, encoder_cache)
        return cfg, _train(cfg)

    return once_per_session(tmp_path_factory, "train", run)


@pytest.fixture(scope="session")
def trained_small_again(small_routellm, encoder_cache, tmp_path_factory):
    """TrainResult of trained_small's run made a second time (its own folder and store, the
    encoder table already distilled): what the determinism tests compare with the first, one
    retraining for all of them."""
    return once_per_session(
        tmp_path_factory, "train_again", lambda folder: _train(config_for(folder, small_routellm, encoder_cache))
    )


@pytest.fixture(scope="session")
def trained_full(real_data_dir, encoder_cache, tmp_path_factory):
    """TrainResult of `make train` on all the real logs, single split (config_for), otherwise its defaults."""
    return once_per_session(
        tmp_path_factory,
        "train_full",
        lambda folder: _train(config_for(folder, real_data_dir, encoder_cache, routing={"min_rows_per_tag": 200})),
    )


@dataclass(frozen=True)
class ReadmeTraining:
    """What the README's training gives its tests: the bundle and the run's figures."""

    bundle: Path
    metrics: dict


@pytest.fixture(scope="session")
def trained_readme(real_data_dir, encoder_cache, tmp_path_factory) -> ReadmeTraining:
    """`make train` as the README's quick start runs it (default options, among them five-fold
    cross-fitting) on all the real logs: the README check's training, and the session's one
    cross-fitted bundle (its tests assert on it instead of fitting another). When `make train`
    ran before the suite from the same source, packages, logs and options (its
    reports/train/run.json, training.provenance), that run is the one: its bundle is copied and
    its figures read, instead of training the same thing again for 1.5-2.5 minutes."""
    from training.config import TrainConfig
    from training.provenance import RUN_FILE, matching_run

    defaults = TrainConfig()

    def build(folder: Path) -> ReadmeTraining:
        config = config_for(
            folder,
            real_data_dir,
            encoder_cache,
            routing={"min_rows_per_tag": defaults.routing.min_rows_per_tag},
            split={"cv_folds": defaults.split.cv_folds},
        )
        made = matching_run(ROOT / defaults.reports_dir / RUN_FILE, config)
        if made is not None:
            shutil.copytree(made["bundle"], folder / "bundle")
            return ReadmeTraining(folder / "bundle", made["metrics"])
        result = _train(config)
        return ReadmeTraining(result.bundle, result.metrics)

    return once_per_session(tmp_path_factory, "train_readme", build)


@pytest.fixture(scope="session")
def bundle(trained_small) -> Path:
    return trained_small[1].bundle


@pytest.fixture(scope="session")
def partial_routellm(small_routellm, tmp_path_factory) -> Path:
    """A RouteLLM-style folder that holds only some of the sources: GSM8K and MT-Bench, no MMLU."""
    dest = tmp_path_factory.mktemp("routellm_partial")
    for part in ("gsm8k", "mt_bench"):
        shutil.copytree(small_routellm / part, dest / part)
    return dest


def invoke_command(main: Callable, args, **options):
    """A pipelines command (its typer `main`) run in this process through typer's CliRunner: its
    exit code and printed output are in the result. `options` go to CliRunner.invoke (env, ...)."""
    import typer
    from typer.testing import CliRunner

    app = typer.Typer()
    app.command()(main)
    return CliRunner().invoke(app, [str(a) for a in args], **options)


def make_env() -> dict:
    """The environment for running `make` from a test, without what the outer `make test`
    passes down (its flags, and its command-line variables such as ARGS=...)."""
    inherited = (
        "MAKEFLAGS",
        "MFLAGS",
        "MAKELEVEL",
        "ARGS",
        "BUNDLE",
        "TIER",
        "ENGINE",
        "CONFIG",
        "N",
        "OUT",
        "PORT",
        "MLRUNS",
        "ROWS",
        "MLFLOW_TRACKING_URI",
        "SIGNING_KEY",
        "KEYS",
    )
    return {k: v for k, v in os.environ.items() if k not in inherited}
