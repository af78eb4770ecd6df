"""What the commands that read logged traffic refuse, and how: a propensity below the floor of
the off-policy estimates, promotion figures that are not finite or rest on too few rows, logs
kept without text, and training logs without rows that know both outcomes. Each refusal says
what is missing and what to do, exits non-zero without a traceback, and changes nothing."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import QUICK_ACCEPTANCE_ROUNDS, ROOT, config_for, invoke_command

MODEL = "edge-cloud-router"


@pytest.fixture(scope="module")
def registry(small_routellm, encoder_cache, tmp_path_factory):
    """Two bundles registered in one MLflow store (sqlite, in a tmp folder): `first`, and a
    weaker `second` (three boosting rounds), both fitted on GSM8K."""
    from training.engines.base import train

    tmp = tmp_path_factory.mktemp("registry")
    store = f"sqlite:///{tmp}/mlflow.db"
    options = dict(
        mlflow={"tracking_uri": store},
        routing={"min_rows_per_tag": 20},
        acceptance={"rounds": QUICK_ACCEPTANCE_ROUNDS},
    )
    first = train(config_for(tmp / "first", small_routellm / "gsm8k", encoder_cache, **options))
    second = train(
        config_for(
            tmp / "second",
            small_routellm / "gsm8k",
            encoder_cache,
            boosting={"rounds": 3, "early_stopping_rounds": 1},
            **options,
        )
    )
    return SimpleNamespace(store=store, first=first, second=second)


def gsm8k_prompts(small_routellm, n: int):
    from data.logs import load_logs
    from data.prepare import merge_duplicates

    return merge_duplicates(load_logs([small_routellm / "gsm8k"]).frame()).sample(n=n, random_state=0)


@pytest.fixture(scope="module")
def traffic(registry, small_routellm, tmp_path_factory) -> Path:
    """600 GSM8K prompts replayed through the first bundle with 20% exploration; feedback gives
    the outcome of the side that ran first, and nothing else (pipelines.replay)."""
    from pipelines.replay import replay

    folder = tmp_path_factory.mktemp("traffic") / "outcomes"
    replay(gsm8k_prompts(small_routellm, 600), registry.first.bundle, folder, explore_rate=0.2, seed=0)
    return folder


@pytest.fixture(scope="module")
def private_log(registry, small_routellm, tmp_path_factory) -> Path:
    """100 prompts replayed with OutcomeLog(store_prompts=False): token ids, no text."""
    from pipelines.replay import replay

    folder = tmp_path_factory.mktemp("private") / "outcomes"
    replay(
        gsm8k_prompts(small_routellm, 100), registry.first.bundle, folder, explore_rate=0.2, seed=0, store_prompts=False
    )
    return folder


def command(module: str, *args, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m <module> args`, as make runs it, with a wide terminal (no wrapped messages)."""
    env = {**os.environ, "COLUMNS": "400", "HF_HUB_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)  # the bundle's manifest names its store
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def crown(registry, version: str) -> None:
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=registry.store).set_registered_model_alias(MODEL, "champion", version)


def champion(registry) -> str:
    from mlflow.tracking import MlflowClient

    return str(MlflowClient(tracking_uri=registry.store).get_model_version_by_alias(MODEL, "champion").version)


def printed_json(stdout: str) -> dict:
    """The figures `make promote` prints after its verdict line."""
    return json.loads(stdout[stdout.index("{") :])


def log_lines(folder: Path) -> list[tuple[Path, int, dict]]:
    return [
        (file, number, json.loads(line))
        for file in sorted(folder.glob("outcomes-*.jsonl"))
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1)
        if line.strip()
    ]


def rewrite(source: Path, dest: Path, change) -> Path:
    """A copy of an outcome-log folder with each record passed through `change` (None drops it)."""
    dest.mkdir(parents=True)
    for file in sorted(source.glob("outcomes-*.jsonl")):
        kept = [change(json.loads(line)) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        (dest / file.name).write_text("".join(json.dumps(r) + "\n" for r in kept if r is not None), encoding="utf-8")
    return dest


def agreeing_request(registry, folder: Path) -> tuple[Path, int, dict]:
    """A logged request on whose first side both bundles agree: its weight enters both estimates."""
    from serving import Router

    routers = [Router.load(r.bundle, strict=True) for r in (registry.first, registry.second)]
    for file, number, record in log_lines(folder):
        if record["type"] == "request" and all(
            r.route(record["prompt"], precision=record["precision"]).target == record["target"] for r in routers
        ):
            return file, number, record
    raise AssertionError("no request on which both bundles pick the logged side")


# --- the propensity floor of the off-policy estimates -----------------------------------------


@pytest.fixture(scope="module")
def below_floor(registry, traffic, tmp_path_factory) -> SimpleNamespace:
    """The request the floor tests log below the floor (agreeing_request: its weight enters both
    bundles' estimates), and what a dry-run promotion of `second` against `first` decides on the
    log without it, figures included: the decision the corrupt log must lead to (computed once
    for the tests that compare with it)."""
    from training.promotion import promote

    file, line, chosen = agreeing_request(registry, traffic)
    without = rewrite(
        traffic,
        tmp_path_factory.mktemp("below_floor") / "without",
        lambda r: None if r["request_id"] == chosen["request_id"] else r,
    )
    crown(registry, registry.first.model_version)
    expected = promote(registry.second.bundle, logs=[str(without)], full_logs=[], dry_run=True)
    return SimpleNamespace(file=file, line=line, chosen=chosen, expected=expected)


def promote_command(*args):
    """`make promote` (pipelines.promote's command) in this process, with a wide terminal (no
    wrapped messages); its exit code and printed output are in the result."""
    import pipelines.promote as promote_cli

    return invoke_command(promote_cli.main, args, env={"COLUMNS": "400"})


@pytest.mark.real_data
@pytest.mark.slow
@pytest.mark.parametrize("propensity", [1e-300, 5e-324])
def test_a_propensity_below_the_floor_is_a_reject_not_a_weight(registry, traffic, below_floor, tmp_path, propensity):
    """One row logged with propensity 1e-300 made IPS 2.5e297 and `make promote` report "quality
    +7.4e295" and move the alias; at 5e-324 (1/p overflows) the estimates were NaN and
    promotion decided on NaN. Below the floor (evaluation.off_policy.MIN_PROPENSITY, 0.01)
    the row is a reject with its file, line and reason; the figures are those of the log
    without it, and the decision too."""
    file, line, chosen, expected = below_floor.file, below_floor.line, below_floor.chosen, below_floor.expected
    corrupt = rewrite(
        traffic,
        tmp_path / "corrupt",
        lambda r: (
            {**r, "propensity": propensity} if r["request_id"] == chosen["request_id"] and r["type"] == "request" else r
        ),
    )
    crown(registry, registry.first.model_version)

    done = promote_command("--bundle", registry.second.bundle, "--logs", corrupt)
    assert done.exit_code == 0, (done.stderr[-3000:], done.exception)
    assert f"{corrupt / file.name} line {line}: propensity {propensity!r} is below the floor 0.01" in done.stdout
    figures = printed_json(done.stdout)
    for side in ("challenger", "champion"):
        for key in ("quality", "cloud_share"):
            assert math.isfinite(figures[side]["logged"][key])
            assert figures[side]["logged"][key] == pytest.approx(expected[side]["logged"][key], rel=1e-9, abs=1e-12)
        assert figures[side]["logged"]["requests"] == expected[side]["logged"]["requests"]
    verdict = "promote:" if expected["promote"] else "keep the champion:"
    assert done.stdout.startswith(verdict)
    moved = expected["promote"]
    assert champion(registry) == (registry.second if moved else registry.first).model_version


def test_the_estimator_itself_refuses_a_propensity_below_its_floor():
    """evaluation.off_policy.off_policy is the last line: any propensity below `min_propensity`
    is an error, never a weight (callers leave such rows out first and report them)."""
    from evaluation.off_policy import MIN_PROPENSITY, off_policy

    row = dict(
        routed_to=["edge", "cloud"],
        reward=[1.0, 0.0],
        target=["edge", "edge"],
        p_edge=[0.5, 0.5],
        p_cloud=[0.5, 0.5],
        rounds=10,
    )
    for tiny in (1e-300, 5e-324, MIN_PROPENSITY / 2):
        with pytest.raises(ValueError, match=r"propensity in \[0.01, 1\]"):
            off_policy(propensity=[tiny, 0.5], **row)
    figures = off_policy(propensity=[MIN_PROPENSITY, 0.5], **row)
    assert all(math.isfinite(figures["quality"][name]["estimate"]) for name in ("ips", "snips", "dr"))


@pytest.mark.real_data
@pytest.mark.slow
def test_make_evaluate_leaves_out_requests_below_the_propensity_floor_and_lists_them(
    registry, traffic, below_floor, tmp_path
):
    """`make evaluate` on outcome logs: a request logged below the floor is left out of the
    off-policy estimates and listed (request id, reason) in metrics.json and the report."""
    from evaluation.config import EvalConfig
    from pipelines.evaluate import run

    chosen = below_floor.chosen
    corrupt = rewrite(
        traffic,
        tmp_path / "corrupt",
        lambda r: (
            {**r, "propensity": 1e-300} if r["request_id"] == chosen["request_id"] and r["type"] == "request" else r
        ),
    )
    result = run(
        EvalConfig(
            bundle=str(registry.second.bundle),
            logs=[str(corrupt)],
            out=str(tmp_path / "report"),
            split="all",
            mlflow=False,
        )
    )
    ope = result.metrics["off_policy"]
    assert ope["below_min_propensity"]["rows"] == 1 and ope["below_min_propensity"]["request_ids"] == [
        chosen["request_id"]
    ]
    assert ope["requests"] == 599
    assert all(
        math.isfinite(ope["quality"][name]["estimate"]) and abs(ope["quality"][name]["estimate"]) < 2
        for name in ("ips", "snips", "dr")
    )
    assert chosen["request_id"] in (tmp_path / "report" / "report.md").read_text()


# --- promotion: every figure it compares is finite and rests on enough rows -------------------


@pytest.mark.real_data
@pytest.mark.slow
def test_promotion_refuses_figures_that_rest_on_too_few_rows(registry, traffic, tmp_path):
    """Thirty logged requests, or --full-logs without one prompt that knows both outcomes
    (an outcome log given as --full-logs): promotion refuses with the reason and exit code 2,
    the alias stays, and nothing is recorded. --min-rows sets the minimum."""
    from mlflow.tracking import MlflowClient

    def recorded() -> tuple:
        run = MlflowClient(tracking_uri=registry.store).get_run(registry.second.run_id)
        return run.data.tags.get("promotion.decision"), run.data.metrics

    requests = [r["request_id"] for _, _, r in log_lines(traffic) if r["type"] == "request"][:30]
    few = rewrite(traffic, tmp_path / "few", lambda r: r if r["request_id"] in requests else None)
    crown(registry, registry.first.model_version)
    before = recorded()

    done = command("pipelines.promote", "--bundle", registry.second.bundle, "--logs", few)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "30 logged requests" in done.stderr and "fewer than the 200 required (--min-rows)" in done.stderr
    assert champion(registry) == registry.first.model_version

    done = command("pipelines.promote", "--bundle", registry.second.bundle, "--full-logs", traffic)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "0 prompts with both outcomes" in done.stderr and "--logs" in done.stderr
    assert champion(registry) == registry.first.model_version

    assert recorded() == before

    done = command(
        "pipelines.promote", "--bundle", registry.second.bundle, "--logs", few, "--min-rows", 20, "--dry-run"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert printed_json(done.stdout)["challenger"]["logged"]["requests"] == 30


def test_promotion_refuses_a_figure_that_is_not_finite():
    """Whatever produced it, a NaN or infinite figure is never compared: the refusal names it."""
    from training.promotion import PromotionRefused, decide

    good = {"logged": {"quality": 0.8, "cloud_share": 0.4, "requests": 500}}
    for bad in (float("nan"), float("inf")):
        broken = {"logged": {**good["logged"], "quality": bad}}
        with pytest.raises(PromotionRefused, match=f"quality is {bad}, not a finite number"):
            decide(broken, good, margin=0.005)
        with pytest.raises(PromotionRefused, match=f"quality is {bad}, not a finite number"):
            decide(good, broken, margin=0.005)
        with pytest.raises(PromotionRefused, match=f"quality is {bad}, not a finite number"):
            decide(broken, None, margin=0.005)  # even the first champion's figures are recorded
    assert decide(good, good, margin=0.005)[0]


# --- logs kept without text -------------------------------------------------------------------


@pytest.mark.real_data
@pytest.mark.slow
@pytest.mark.parametrize("split", ["test", "all"])
def test_make_evaluate_on_a_log_without_text_says_what_is_missing(registry, private_log, tmp_path, split):
    """store_prompts=False: every row lacks the text the evaluation routes. Exit code 2, no
    traceback, and the message says what is missing, why, and what to do."""
    done = command(
        "pipelines.evaluate",
        "--bundle",
        registry.first.bundle,
        "--logs",
        private_log,
        "--out",
        tmp_path / "report",
        "--split",
        split,
        "--set",
        "mlflow=false",
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    message = " ".join(done.stderr.split())
    assert "100 rows logged without their text (OutcomeLog(store_prompts=False))" in message
    assert "routes prompts from their text" in message and "logs kept with their text" in message
    assert "try --split all" not in message


@pytest.mark.real_data
@pytest.mark.slow
def test_make_promote_on_a_log_without_text_says_what_is_missing(registry, private_log):
    done = command("pipelines.promote", "--bundle", registry.first.bundle, "--logs", private_log, "--dry-run")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    message = " ".join(done.stderr.split())
    assert "100 of them logged without their text (OutcomeLog(store_prompts=False))" in message
    assert "logs kept with their text" in message


# --- training on one-outcome traffic alone ----------------------------------------------------


@pytest.mark.real_data
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["local", "dask"])
def test_make_train_on_an_outcome_log_alone_says_what_is_missing(traffic, encoder_cache, tmp_path, engine):
    """Feedback for the served side only: no validation or test row knows both outcomes, and
    the fallback thresholds, the familiarity reference, the figures and the parity check
    need them. Exit code 2 without a traceback, saying how many there are, how many are
    needed and what to add; no bundle written. The local engine stops before fitting."""
    bundle = tmp_path / "bundle"
    done = command(
        "pipelines.train",
        "--data",
        traffic,
        "--bundle",
        bundle,
        "--engine",
        engine,
        "--set",
        f"mlflow.tracking_uri=sqlite:///{tmp_path}/mlflow.db",
        "--set",
        f"mlflow.artifact_root={tmp_path}/art",
        "--set",
        f"cache_dir={encoder_cache}",
        "--set",
        f"reports_dir={tmp_path}/reports",
        "--set",
        "engine.dask_workers=1",
        "--set",
        "routing.min_rows_per_tag=20",
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    message = " ".join(done.stderr.split())
    assert "too few rows with both outcomes" in message
    assert "the validation split has 0" in message and "the test split 0" in message
    assert "at least 10 in each half" in message and "--data" in message and "shadow_rate" in message
    assert not bundle.exists()
    if engine == "local":
        assert "LightGBM" not in done.stdout  # stopped before fitting


def test_the_familiarity_reference_says_how_many_rows_it_needs():
    """The check inside training.novelty.fit_novelty: a DataQualityError with the counts, not
    a bare ValueError("too few validation rows (1)")."""
    from data.logs import DataQualityError
    from training.featurize import TokenRows
    from training.novelty import fit_novelty

    prompts = [f"question {i}" for i in range(5)]
    tokens = TokenRows.from_padded(np.ones((5, 3), np.int64), np.ones((5, 3), np.int64))
    with pytest.raises(DataQualityError, match=r"5 validation rows with both outcomes \(\d and \d in the two halves"):
        fit_novelty(prompts, tokens, np.zeros((5, 4)), vocabulary=10, share=0.05, min_unseen_share=0.5)


def test_make_train_prints_a_data_quality_error_without_a_traceback(tmp_path):
    """Bad data stops `make train` with the reason and exit code 2, as `make evaluate` does."""
    logs = tmp_path / "logs.jsonl"
    logs.write_text('{"prompt": "p", "edge_quality": 7}\n', encoding="utf-8")
    done = command(
        "pipelines.train",
        "--data",
        logs,
        "--bundle",
        tmp_path / "bundle",
        "--set",
        f"reports_dir={tmp_path}/reports",
        "--set",
        f"mlflow.tracking_uri=sqlite:///{tmp_path}/m.db",
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "no valid rows" in done.stderr and not (tmp_path / "bundle").exists()
