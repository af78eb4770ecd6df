"""`make evaluate` on a slice of the real RouteLLM logs: outputs, agreement with the training
pipeline, MLflow, the CLI (partial RouteLLM folder, bad options), clear errors, leave-one-source-out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from evaluation.config import EvalConfig
from pipelines.evaluate import run
from tests.conftest import ROOT, make_env
from training.tracking import log_evaluation

ALL_POLICIES = [
    "learned",
    "rule_table",
    "rule_table_inferred",
    "tuned_rule_table",
    "reference",
    "random",
    "all_edge",
    "all_cloud",
    "oracle",
]


def strict_json(text: str) -> dict:
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def evaluated(bundle, small_routellm, encoder_cache, tmp_path_factory):
    """One evaluation of the slice bundle on the slice, test split, with MT-Bench held out once."""
    out = tmp_path_factory.mktemp("evaluate") / "report"
    config = EvalConfig(
        bundle=str(bundle),
        logs=[str(small_routellm)],
        out=str(out),
        leave_one_source_out=True,
        holdout_sources=["mt_bench"],
        cache_dir=str(encoder_cache),
        loso_overrides={"routing": {"min_rows_per_tag": 50}},
    )
    return run(config)


@pytest.mark.real_data
@pytest.mark.slow
def test_run_writes_report_metrics_and_plots(evaluated):
    out = evaluated.out
    assert {p.name for p in evaluated.files} == {
        "report.md",
        "metrics.json",
        "quality_vs_cloud_share.png",
        "misroute_by_domain.png",
        "reliability.png",
        "acceptance_roc.png",
    }
    report = (out / "report.md").read_text()
    assert report.startswith("# Offline evaluation")
    headline = report.index("| policy | cloud share | misroute (under / over) |")
    assert headline < report.index("\n## ")  # the headline table comes first
    for label in (
        "learned router",
        "hand rule table (label domain)",
        "hand rule table (inferred domain)",
        "tuned rule table",
        "reference (TF-IDF + logistic regression)",
        "random (matched share)",
        "all-edge",
        "all-cloud",
        "oracle",
    ):
        assert f"| {label} |" in report
    metrics = strict_json((out / "metrics.json").read_text())
    assert list(metrics["figures"]["policies"]) == ALL_POLICIES
    for name in ("quality_vs_cloud_share.png", "misroute_by_domain.png", "reliability.png", "acceptance_roc.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(data) < 200_000


@pytest.mark.real_data
@pytest.mark.slow
def test_acceptance_is_measured_through_the_sdk(evaluated, trained_small):
    """metrics.json `acceptance` on the test split's answers equals training's own test figures
    (the SDK acceptor on raw text), and the fallback figures use those verdicts."""
    metrics = strict_json((evaluated.out / "metrics.json").read_text())
    acceptance, trained = metrics["acceptance"], trained_small[1].manifest.acceptance["test"]
    for key in ("auc", "catch_rate", "false_reject_rate", "rows"):
        assert acceptance[key] == pytest.approx(trained[key], abs=1e-6), key
    assert set(acceptance["per_source"]) == {"gsm8k", "mt_bench"}
    assert len(acceptance["roc"]["catch_rate"]) == len(acceptance["roc"]["false_reject_rate"]) > 2
    rates = metrics["figures"]["fallback_rates"]
    assert rates["measured_rows"] > 0 and rates["assumed_rows"] > 0 and rates["assumed_catch_rate"] == 0.5
    report = (evaluated.out / "report.md").read_text()
    assert "## Acceptance check" in report and "a catch rate of 0.5" in report
    assert "acceptance's verdict" not in report and "acceptance check's verdict on that answer" in report


@pytest.mark.real_data
@pytest.mark.slow
def test_sdk_figures_match_the_training_pipeline(evaluated, trained_small):
    """Scored through the SDK, the test split gives the figures `make train` computed in-process."""
    trained = trained_small[1].metrics["test"]
    figures = evaluated.metrics["figures"]
    assert figures["rows"] == trained["rows"]
    assert figures["all_cloud_quality"] == pytest.approx(trained["all_cloud_quality"])
    for policy in ("learned", "rule_table"):
        for key in ("apgr", "auc", "cloud_share", "misroute_rate", "quality_with_fallback", "fallback_share"):
            assert figures["policies"][policy][key] == pytest.approx(trained[policy][key], abs=2e-3), (policy, key)


@pytest.mark.real_data
@pytest.mark.slow
def test_policies_breakdowns_and_calibration_are_sane(evaluated):
    m = evaluated.metrics
    f, p = m["figures"], m["figures"]["policies"]
    assert p["oracle"]["misroute_rate"] == 0.0 and p["oracle"]["quality"] == pytest.approx(f["oracle_quality"])
    assert p["all_edge"]["under_routing"] == pytest.approx(f["cloud_needed_share"])
    assert p["random"]["apgr"] == pytest.approx(0.5) and p["random"]["cloud_share"] == p["learned"]["cloud_share"]
    assert p["learned"]["apgr"] > p["random"]["apgr"]
    for name in ("learned", "rule_table", "tuned_rule_table", "random"):
        assert p[name]["at_matched_share"]["cloud_share"] == pytest.approx(p["learned"]["cloud_share"])
        assert p[name]["cost"]["fp8"]["per_request"] <= 0.003 + 1e-12
        assert p[name]["latency"]["phone"]["p95_ms"] in (120.0, 250.0, 370.0)
    assert m["tuned_rule_table"]["fit"]["rows"] == m["setup"]["rows_per_split"]["train"]
    assert set(m["breakdowns"]["source"]) == {"gsm8k", "mmlu", "mt_bench"}
    assert {"legal", "math", "medical"} <= set(m["breakdowns"]["domain"])
    assert sum(g["rows"] for g in m["breakdowns"]["length"].values()) == f["rows"]
    assert set(m["calibration"]) == {"P(edge good)", "P(cloud good)"}
    for table in m["calibration"].values():
        assert 0.0 <= table["ece"] < 0.2
        assert sum(b["rows"] for b in table["bins"]) == f["rows"]


@pytest.mark.real_data
@pytest.mark.slow
def test_the_reference_is_fitted_on_the_train_split_and_shown_next_to_the_router(evaluated):
    """The ten-minute baseline in every report: fitted on the bundle's train rows, thresholded on
    its val rows for the bundle's own target, in the headline table, the breakdowns and the plot."""
    m = evaluated.metrics
    reference, per_split = m["reference"], m["setup"]["rows_per_split"]
    assert reference["trained_on_rows"] == {"edge": per_split["train"], "cloud": per_split["train"], "without_text": 0}
    assert reference["fit"]["rows"] == per_split["val"] and reference["target"] == "quality"
    assert reference["fit_seconds"] > 0 and reference["lo"] <= reference["hi"]
    p = m["figures"]["policies"]["reference"]
    assert p["apgr"] > m["figures"]["policies"]["random"]["apgr"] + 0.05
    assert p["at_matched_share"]["cloud_share"] == pytest.approx(m["figures"]["policies"]["learned"]["cloud_share"])
    assert 0.0 < p["cloud_share"] < 1.0 and p["fallback_share"] > 0.0
    assert all("reference" in group for group in m["breakdowns"]["source"].values())
    report = (evaluated.out / "report.md").read_text()
    assert "## Reference\n\nThe baseline a learned router must beat" in report
    assert "| reference APGR |" in report and "fitted on " in report


@pytest.mark.real_data
@pytest.mark.slow
def test_logged_to_mlflow_under_the_bundle_run(evaluated, trained_small):
    from mlflow.tracking import MlflowClient

    cfg, result = trained_small
    assert evaluated.mlflow_run_id == result.run_id
    client = MlflowClient(tracking_uri=cfg.mlflow.tracking_uri)
    logged = client.get_run(result.run_id).data.metrics
    assert logged["evaluate.test.policies.learned.apgr"] == pytest.approx(
        evaluated.metrics["figures"]["policies"]["learned"]["apgr"]
    )
    assert "evaluate.test.breakdowns.length.up to 64 tokens.learned.misroute_rate" in logged
    assert "evaluate.test.leave_one_source_out.mt_bench.policies.learned.apgr" in logged
    artifacts = {a.path for a in client.list_artifacts(result.run_id, "evaluation")}
    assert {f"evaluation/{p.name}" for p in evaluated.files} == artifacts


@pytest.mark.real_data
@pytest.mark.slow
def test_leave_one_source_out_on_the_slice(evaluated):
    loso = evaluated.metrics["leave_one_source_out"]
    assert list(loso) == ["mt_bench"]
    held = loso["mt_bench"]
    assert held["rows"] == 160  # every MT-Bench row (80 questions x 2 turns), none seen in training
    assert held["trained_on_rows"] == evaluated.metrics["setup"]["prompts"] - 160
    assert set(held["policies"]) == {"learned", "rule_table", "rule_table_inferred", "reference", "random", "oracle"}
    assert held["policies"]["reference"]["apgr"] is not None  # fitted on the other sources' rows
    assert 0.0 <= held["policies"]["learned"]["auc"] <= 1.0
    assert held["in_distribution_apgr"] == evaluated.metrics["breakdowns"]["source"]["mt_bench"]["learned"]["apgr"]
    assert "## Leave-one-source-out" in (evaluated.out / "report.md").read_text()


def cli(*args: str, cwd=ROOT):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "pipelines.evaluate", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


@pytest.mark.real_data
@pytest.mark.slow
def test_cli_with_a_partial_routellm_folder(bundle, partial_routellm, tmp_path):
    done = cli(
        "--bundle",
        str(bundle),
        "--logs",
        str(partial_routellm),
        "--out",
        str(tmp_path / "out"),
        "--policies",
        "rule_table,tuned_rule_table,oracle",
        "--catch-rate",
        "0.8",
        "--set",
        "mlflow=false",
        "--set",
        "cloud_cost.fp8=0.004",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "APGR" in done.stdout and "tuned rule" in done.stdout and "not logged to MLflow" in done.stdout
    metrics = strict_json((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["setup"]["logs"] == [str(partial_routellm)] and metrics["setup"]["catch_rate"] == 0.8
    assert metrics["setup"]["cost"]["cloud"] == {"fp8": 0.004, "fp16": 0.008}
    assert set(metrics["breakdowns"]["source"]) == {"gsm8k", "mt_bench"}
    assert list(metrics["figures"]["policies"]) == ["learned", "rule_table", "tuned_rule_table", "oracle"]


def test_cli_help_and_bad_options_quoting_them(tmp_path):
    done = cli("--help")
    assert done.returncode == 0 and "--leave-one-source-out" in done.stdout and "--catch-rate" in done.stdout
    done = cli("--bundle", str(tmp_path), "--policies", "learned,magic")
    assert done.returncode == 2 and "'magic'" in done.stderr
    done = cli("--bundle", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "nowhere" in done.stderr and "no bundle folder" in done.stderr


@pytest.mark.real_data
def test_empty_and_unusable_logs_are_clear_errors(bundle, tmp_path):
    from data.logs import DataQualityError

    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataQualityError, match="no valid rows"):
        run(EvalConfig(bundle=str(bundle), logs=[str(tmp_path / "empty.jsonl")], out=str(tmp_path / "o")))
    with pytest.raises(FileNotFoundError, match="missing_logs"):
        run(EvalConfig(bundle=str(bundle), logs=[str(tmp_path / "missing_logs")], out=str(tmp_path / "o")))


@pytest.fixture(scope="module")
def test_split_only_logs(bundle, small_routellm, tmp_path_factory):
    """Canonical JSONL of MT-Bench rows that all fall in the bundle's test split (no train rows)."""
    from data.logs import load_logs
    from data.prepare import assign_splits, merge_duplicates
    from serving.bundle._bundle import read_manifest

    split = read_manifest(bundle).split
    frame = merge_duplicates(load_logs([small_routellm / "mt_bench"]).frame())
    frame = frame[
        assign_splits(
            frame["prompt"],
            val_share=split["val_share"],
            test_share=split["test_share"],
            salt=split["salt"],
            offset=split.get("offset", 0.0),
        )
        == "test"
    ]
    path = tmp_path_factory.mktemp("canonical") / "test_rows.jsonl"
    frame.to_json(path, orient="records", lines=True)
    return path, len(frame)


@pytest.mark.real_data
def test_logs_without_train_rows_skip_the_tuned_rule_table(bundle, test_split_only_logs, tmp_path):
    path, n = test_split_only_logs
    result = run(EvalConfig(bundle=str(bundle), logs=[str(path)], out=str(tmp_path / "out"), mlflow=False))
    assert result.metrics["figures"]["rows"] == n > 5
    assert "tuned_rule_table" not in result.metrics["figures"]["policies"]
    assert "train split" in result.metrics["tuned_rule_table"]["skipped"]
    assert "reference" not in result.metrics["figures"]["policies"]
    assert "no rows in the bundle's train and val split" in result.metrics["reference"]["skipped"]
    assert "Skipped: the logs have no rows in the bundle's train split" in (tmp_path / "out" / "report.md").read_text()
    with pytest.raises(ValueError, match="no rows of split 'val'"):
        run(EvalConfig(bundle=str(bundle), logs=[str(path)], out=str(tmp_path / "o2"), split="val", mlflow=False))


def test_mlflow_is_skipped_with_a_reason_for_a_bundle_from_elsewhere(bundle, tmp_path):
    import dataclasses

    from serving.bundle._bundle import read_manifest

    metrics = {"setup": {"split": "test"}, "figures": {"rows": 3}}
    store = tmp_path / "absent.db"
    elsewhere = dataclasses.replace(
        read_manifest(bundle), mlflow={"run_id": "abc", "tracking_uri": f"sqlite:///{store}"}
    )
    run_id, why_not = log_evaluation(elsewhere, metrics, [])
    assert run_id is None and not store.exists() and "does not exist" in why_not
    run_id, why_not = log_evaluation(dataclasses.replace(elsewhere, mlflow={}), metrics, [])
    assert run_id is None and "names no MLflow run" in why_not


def test_config_errors_quote_the_value():
    with pytest.raises(ValueError, match="'bogus'"):
        EvalConfig(split="bogus")
    for rate in (2, True, float("nan")):  # True is not a rate of 1
        with pytest.raises(ValueError, match=f"catch_rate={rate!r}: must be a number in"):
            EvalConfig(catch_rate=rate)
    with pytest.raises(ValueError, match="'colour'"):
        EvalConfig.from_options(colour="red")
    with pytest.raises(ValueError, match="-0.5"):
        EvalConfig(network_ms=-0.5)
    merged = EvalConfig.from_options(edge_ms={"phone": 200})
    assert merged.edge_ms == {"phone": 200, "laptop": 50.0}
    single = EvalConfig.from_options(policies="random,oracle", logs="logs/a.jsonl")
    assert single.policies == ["learned", "random", "oracle"] and single.logs == ["logs/a.jsonl"]


def test_make_evaluate_target():
    done = subprocess.run(
        ["make", "-n", "evaluate", "BUNDLE=some/bundle", "ARGS=--split all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=make_env(),
    )
    assert done.returncode == 0, done.stderr
    expected = "pipelines.evaluate --bundle some/bundle --engine local --leave-one-source-out --split all"
    assert f".venv/bin/python -m {expected}" in done.stdout


@pytest.mark.real_data
@pytest.mark.slow
def test_the_assumed_catch_rate_is_checked_against_the_measured_verdicts(evaluated):
    acceptance = strict_json((evaluated.out / "metrics.json").read_text())["acceptance"]
    check = acceptance["assumption_check"]
    assert 0 < check["rows"] <= acceptance["rows"]  # requests with a checked answer (a prompt may repeat)
    for version in ("measured", "assumed"):
        assert 0 <= check[version]["fallback_fires"] <= check[version]["expected_cloud_calls"] <= 1
    assert check["measured"] != check["assumed"]
    assert "the assumed catch rate would have claimed" in (evaluated.out / "report.md").read_text()
