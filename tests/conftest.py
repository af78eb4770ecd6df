"""Shared fixtures. Real-data tests read ROUTER_DATA_DIR (CI sets it) and fail loudly when
it is set but missing; without it they fall back to ../shared/data/routellm."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from training.engines import passive_openmp_waits

ROOT = Path(__file__).resolve().parents[1]

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

# `make test` runs on every core (pytest-xdist, --dist loadgroup). A session fixture is built
# once per worker that needs it, so the test files of the two trainings on all the real logs
# (trained_full, trained_readme: minutes each) go to one worker, which trains each once; every
# other test goes wherever a worker is free. (xdist's own xdist_group markers do not group under
# pytest 9, whose node ids no longer read the `_nodeid` xdist rewrites; a scheduler does.)
# tests/test_layout.py checks that this list names every file that uses those fixtures.
WHOLE_LOG_TRAININGS = frozenset({"trained_full", "trained_readme"})
WHOLE_LOG_FILES = frozenset(
    {
        "test_acceptance.py",
        "test_compare.py",
        "test_crossval.py",
        "test_novelty.py",
        "test_results.py",
        "test_train_pipeline.py",
    }
)


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WholeLogTrainingsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "whole-log trainings" if Path(nodeid.split("::", 1)[0]).name in WHOLE_LOG_FILES else nodeid

    return WholeLogTrainingsTogether(config, log)


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


@pytest.fixture(scope="session")
def small_routellm(real_data_dir, tmp_path_factory) -> Path:
    """A RouteLLM-layout slice of the real logs: a few MMLU subjects, GSM8K and MT-Bench."""
    dest = tmp_path_factory.mktemp("routellm_slice")
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


@pytest.fixture(scope="session")
def encoder_cache(tmp_path_factory) -> Path:
    """One cache folder per test session: the static table is distilled once, then reused."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def static_encoder_cache(encoder_cache) -> Path:
    """encoder_cache with the static tier's table already distilled: for tests that time a
    training run, which should not count the once-per-session distillation."""
    from training.encoders import build_encoder

    build_encoder("static", encoder_cache / "encoders")
    return encoder_cache


def config_for(tmp: Path, data: Path, cache: Path, **extra):
    """A TrainConfig that writes everything (bundle, MLflow, reports) under `tmp`. It trains on
    the quick single split (cv_folds=0, one fit instead of one per fold and a final one): a test
    of cross-fitting asks for its folds in `extra`."""
    from training.config import TrainConfig

    options = dict(
        data=[str(data)],
        bundle=str(tmp / "bundle"),
        cache_dir=str(cache),
        tracking_uri=f"sqlite:///{tmp}/mlruns/mlflow.db",
        artifact_root=str(tmp / "mlruns" / "art"),
        reports_dir=str(tmp / "reports"),
        min_rows_per_tag=50,
        cv_folds=0,
    )
    config = TrainConfig(**{**options, **extra})
    seed_store(config.tracking_uri, cache)
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
    if not empty.exists():
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        making = empty.with_name("mlflow-empty.making.db")
        making.unlink(missing_ok=True)
        SqlAlchemyStore(f"sqlite:///{making}", (empty.parent / "mlflow-empty-artifacts").as_uri()).engine.dispose()
        making.rename(empty)
    store.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(empty, store)


@pytest.fixture(scope="session")
def trained_small(small_routellm, encoder_cache, tmp_path_factory):
    """(config, TrainResult) of one `make train` run on the real-data slice, shared by the session."""
    from training.engines.base import train as run

    cfg = config_for(tmp_path_factory.mktemp("train"), small_routellm, encoder_cache)
    return cfg, run(cfg)


@pytest.fixture(scope="session")
def trained_small_again(small_routellm, encoder_cache, tmp_path_factory):
    """TrainResult of trained_small's run made a second time (its own folder and store, the
    encoder table already distilled): what the determinism tests compare with the first, one
    retraining for all of them."""
    from training.engines.base import train

    return train(config_for(tmp_path_factory.mktemp("train_again"), small_routellm, encoder_cache))


@pytest.fixture(scope="session")
def trained_full(real_data_dir, encoder_cache, tmp_path_factory):
    """TrainResult of `make train` on all the real logs, single split (config_for), otherwise its defaults."""
    from training.engines.base import train

    cfg = config_for(tmp_path_factory.mktemp("train_full"), real_data_dir, encoder_cache, min_rows_per_tag=200)
    return train(cfg)


@pytest.fixture(scope="session")
def trained_readme(real_data_dir, encoder_cache, tmp_path_factory):
    """TrainResult of `make train` as the README's quick start runs it (default options, among
    them five-fold cross-fitting), on all the real logs: the README check's training, and the
    session's one cross-fitted bundle (its tests assert on it instead of fitting another)."""
    from training.config import TrainConfig
    from training.engines.base import train

    defaults = TrainConfig()
    return train(
        config_for(
            tmp_path_factory.mktemp("train_readme"),
            real_data_dir,
            encoder_cache,
            min_rows_per_tag=defaults.min_rows_per_tag,
            cv_folds=defaults.cv_folds,
        )
    )


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
