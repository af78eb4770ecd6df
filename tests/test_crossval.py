"""Cross-validation (training.crossval, `make evaluate CV=K`, `make compare-configs`): folds by
prompt hash that cover every prompt once, every stage refit per fold, intervals that widen for
the folds' overlap, and paired differences on the same folds."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from data.prepare import assign_splits
from evaluation.figures import KeyFigures, Population, SplitSummary
from tests.conftest import QUICK_ACCEPTANCE_ROUNDS, config_for, make_env
from training.crossval import REFERENCE_QUALITIES, CrossValidation, FoldResult, compare, fold_config, interval


def test_the_folds_cover_every_prompt_once_and_fold_zero_is_the_plain_split():
    prompts = pd.Series([f"prompt {i}" for i in range(3000)])
    tests = [assign_splits(prompts, val_share=0.15, test_share=0.2, offset=k / 5) == "test" for k in range(5)]
    assert (np.sum(tests, axis=0) == 1).all()
    assert all(abs(t.mean() - 0.2) < 0.03 for t in tests)
    for k in range(5):
        split = assign_splits(prompts, val_share=0.15, test_share=0.2, offset=k / 5)
        assert abs((split == "val").mean() - 0.15) < 0.03 and not ((split == "val") & tests[k]).any()
    plain = assign_splits(prompts, val_share=0.15, test_share=0.15)
    assert list(assign_splits(prompts, val_share=0.15, test_share=0.15, offset=0.0)) == list(plain)
    with pytest.raises(ValueError, match="offset"):
        assign_splits(prompts, val_share=0.15, test_share=0.2, offset=1.0)


def test_a_fold_config_changes_only_the_split(tmp_path):
    from training.config import TrainConfig
    from training.options import dotted

    base = TrainConfig(reports_dir=str(tmp_path), split={"cv_folds": 5, "salt": "s"})
    fold = fold_config(base, folds=5, fold=3, repeat=0)
    assert (fold.split.test_share, fold.split.offset, fold.split.salt, fold.split.cv_folds) == (0.2, 0.6, "s", 0)
    changed = ("split.test_share", "split.offset", "split.cv_folds")
    assert {k: v for k, v in dotted(fold).items() if k not in changed} == {
        k: v for k, v in dotted(base).items() if k not in changed
    }
    assert fold_config(base, folds=5, fold=0, repeat=2).split.salt != "s"
    with pytest.raises(ValueError, match="fold 5"):
        fold_config(base, folds=5, fold=5)


def test_the_interval_is_the_corrected_t_interval_and_skips_undefined_folds():
    values = [0.70, 0.74, 0.68, np.nan, 0.72, 0.71]
    est = interval(values, test_over_train=0.3)
    finite = np.array([0.70, 0.74, 0.68, 0.72, 0.71])
    naive_half = 2.776 * finite.std(ddof=1) / math.sqrt(5)  # t(4) = 2.776
    assert est["n"] == 5 and est["undefined"] == 1
    assert est["mean"] == pytest.approx(finite.mean())
    assert est["low"] < est["mean"] < est["high"]
    # the correction for overlapping training sets: sqrt(1/n + 0.3) / sqrt(1/n) wider than naive
    assert (est["high"] - est["mean"]) == pytest.approx(naive_half * math.sqrt((1 / 5 + 0.3) * 5), rel=1e-3)
    single = interval([0.7], test_over_train=0.3)
    assert single["n"] == 1 and math.isnan(single["low"])


def _summary(policies: dict[str, dict[str, float]]) -> SplitSummary:
    """Fold figures set by hand: the figures given, NaN for the rest (as a fold lacking them)."""
    population = Population(100, **dict.fromkeys(REFERENCE_QUALITIES, 0.5), fallback_rates=None)
    blank = dict.fromkeys(KeyFigures.names(), float("nan"))
    return SplitSummary(population, {name: KeyFigures(**{**blank, **given}) for name, given in policies.items()})


def _fold(fold: int, apgr: float) -> FoldResult:
    return FoldResult(0, fold, 100, 300, _summary({"learned": {"apgr": apgr}}), {}, {"edge": 10, "cloud": 10}, 1.0)


def test_paired_comparison_is_b_minus_a_on_the_same_folds():
    """The pairing itself, on fold figures set by hand: B - A fold by fold, then the interval."""
    from training.config import TrainConfig

    config = TrainConfig(reports_dir="/tmp/unused")
    a = CrossValidation(config, 3, 1, [_fold(k, v) for k, v in enumerate((0.60, 0.70, 0.65))])
    b = CrossValidation(config, 3, 1, [_fold(k, v) for k, v in enumerate((0.62, 0.71, 0.68))])
    diff = compare(a, b)["apgr"]
    assert diff["mean"] == pytest.approx(0.02) and diff["n"] == 3
    # the folds' own spread (sd 0.05) cancels in the pairing: the interval is that of 0.02, 0.01, 0.03
    assert diff["high"] - diff["low"] < 0.25 * (
        a.estimate("learned", "apgr")["high"] - a.estimate("learned", "apgr")["low"]
    )
    with pytest.raises(ValueError, match="not cut the same way"):
        compare(a, CrossValidation(config, 4, 1, b.results))


@pytest.mark.real_data
def test_the_folds_partition_the_rows_with_both_outcomes(small_routellm, encoder_cache, tmp_path):
    from training.engines.local import prepare_frame
    from training.partial import both_known

    config = config_for(tmp_path, small_routellm, encoder_cache)
    seen, both = None, None
    for k in range(3):
        frame = prepare_frame(fold_config(config, folds=3, fold=k)).frame
        both = both_known(frame) if both is None else both
        seen = np.zeros(len(frame), dtype=int) if seen is None else seen
        seen += (frame["split"].to_numpy() == "test") & both
    assert (seen[both] == 1).all()


@pytest.mark.real_data
def test_the_logs_read_once_give_each_fold_what_reading_them_for_it_gives(small_routellm, encoder_cache, tmp_path):
    from training.engines.local import prepare_frame, resplit

    config = config_for(tmp_path, small_routellm, encoder_cache)
    once = prepare_frame(config)
    fold = fold_config(config, folds=3, fold=2)
    direct, reused = prepare_frame(fold), resplit(once, fold)
    pd.testing.assert_frame_equal(direct.frame, reused.frame)
    pd.testing.assert_frame_equal(direct.responses, reused.responses)
    assert direct.report == reused.report and reused.report is not once.report


@pytest.fixture(scope="module")
def compared(real_data_dir, encoder_cache, tmp_path_factory):
    """`make compare-configs` (pipelines.crossval --compare) of the defaults and a configuration
    without precision dropout, 3 folds of the GSM8K and MT-Bench logs: compare.json. The
    acceptance check, fitted in every fold, is not what is compared: QUICK_ACCEPTANCE_ROUNDS."""
    tmp = tmp_path_factory.mktemp("compare")
    (tmp / "a.yaml").write_text("{}\n")
    (tmp / "b.yaml").write_text("model: {precision_dropout: 0.0}\n")
    cmd = [
        sys.executable,
        "-m",
        "pipelines.crossval",
        "--folds",
        "3",
        "--compare",
        str(tmp / "a.yaml"),
        "--compare",
        str(tmp / "b.yaml"),
        "--data",
        str(real_data_dir / "gsm8k"),
        "--data",
        str(real_data_dir / "mt_bench"),
        "--out",
        str(tmp / "out"),
        "--set",
        f"cache_dir={encoder_cache}",
        "--set",
        f"reports_dir={tmp / 'r'}",
        "--set",
        "routing.min_rows_per_tag=50",
        "--set",
        f"acceptance.rounds={QUICK_ACCEPTANCE_ROUNDS}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=make_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp / "out" / "compare.json").read_text()), tmp


@pytest.mark.real_data
def test_cross_validation_estimates_every_policy_with_an_interval(compared):
    result, tmp = compared
    summary = result["summaries"][str(tmp / "a.yaml")]
    assert summary["folds"] == 3 and "Nadeau" in summary["interval"] and len(summary["per_fold"]) == 3
    assert all(n > 100 for n in summary["rows"]["test_per_fold"])
    for policy in ("learned", "reference", "rule_table", "tuned_rule_table", "random", "oracle"):
        apgr = summary["policies"][policy]["apgr"]
        assert apgr["n"] == 3 and apgr["low"] <= apgr["mean"] <= apgr["high"], policy
    policies = summary["policies"]
    assert policies["oracle"]["apgr"]["mean"] > policies["learned"]["apgr"]["mean"] > 0.55  # random: 0.5
    per_fold = [f["figures"]["learned"]["apgr"] - f["figures"]["reference"]["apgr"] for f in summary["per_fold"]]
    assert summary["differences"]["learned - reference"]["apgr"]["mean"] == pytest.approx(np.mean(per_fold))
    assert set(summary["by_source"]) == {"gsm8k", "mt_bench"}


def test_make_evaluate_cv_prints_and_writes_the_estimates(tmp_path, monkeypatch, capsys):
    """The command's part (tables, cv.json) on fold figures set by hand: the folds themselves
    are trained in the tests above."""
    import pipelines.crossval as command

    folds = [
        FoldResult(
            0,
            k,
            100,
            300,
            _summary({"learned": {"apgr": v, "cpt50": 0.3}, "reference": {"apgr": v - 0.02}}),
            {"gsm8k": _summary({"learned": {"apgr": v + 0.1}, "reference": {"apgr": 0.5}})},
            {"edge": 10},
            1.0,
        )
        for k, v in enumerate((0.68, 0.70, 0.66))
    ]
    monkeypatch.setattr("training.crossval.cross_validate", lambda config, **_: CrossValidation(config, 3, 1, folds))
    command.main(
        folds=3,
        repeats=1,
        config=None,
        compare=None,
        data=None,
        engine=None,
        out=tmp_path,
        set_=[f"reports_dir={tmp_path}"],
    )
    written = json.loads((tmp_path / "cv.json").read_text())
    assert written["policies"]["learned"]["apgr"]["mean"] == pytest.approx(0.68)
    assert written["differences"]["learned - reference"]["apgr"]["mean"] == pytest.approx(0.02)
    shown = capsys.readouterr().out
    assert "0.680 [" in shown and "+0.020 [" in shown and "Nadeau" in shown
    assert "APGR per source" in shown and "0.780 [" in shown  # gsm8k: 0.1 above the fold figures


@pytest.mark.real_data
def test_make_compare_configs_pairs_b_with_a_fold_by_fold(compared):
    result, tmp = compared
    a, b = (result["summaries"][str(tmp / name)] for name in ("a.yaml", "b.yaml"))
    diff = result["differences"][f"{tmp / 'b.yaml'} - {tmp / 'a.yaml'}"]["apgr"]
    per_fold = [
        fb["figures"]["learned"]["apgr"] - fa["figures"]["learned"]["apgr"]
        for fa, fb in zip(a["per_fold"], b["per_fold"], strict=True)
    ]
    assert diff["n"] == 3 and diff["mean"] == pytest.approx(np.mean(per_fold))
    assert [f["test_rows"] for f in a["per_fold"]] == [f["test_rows"] for f in b["per_fold"]]  # the same rows


def test_make_evaluate_cv_refuses_bad_folds_naming_the_option(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.crossval", "--folds", "2", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=make_env(),
        timeout=120,
    )
    assert done.returncode != 0 and "folds=2" in done.stderr


@pytest.mark.real_data
def test_make_train_cross_fits_the_bundle_on_every_row(trained_readme, real_data_dir, encoder_cache, tmp_path):
    """split.cv_folds=K (the README's default training, shared with its check): the folds' estimates
    are the figures, the bundle's heads see every row for the folds' median rounds, and its
    thresholds come from every row's out-of-fold score."""
    from serving import Router
    from serving.bundle._bundle import read_manifest
    from training.config import TrainConfig

    result, folds = trained_readme, TrainConfig().split.cv_folds
    manifest = read_manifest(result.bundle)
    cv, metrics = manifest.metrics["cv"], result.metrics
    assert folds >= 3 and cv["folds"] == folds and manifest.split["cv_folds"] == folds
    tested = sum(cv["rows"]["test_per_fold"])
    assert manifest.metrics["test"]["cross_validated"] and manifest.metrics["test"]["rows"] == tested
    assert manifest.metrics["test"]["learned"]["apgr"] == pytest.approx(cv["policies"]["learned"]["apgr"]["mean"])
    assert metrics["val"]["rows"] == tested  # the thresholds' rows: every row, each scored out of fold
    for head, trees in metrics["trees"].items():
        assert trees == int(np.median(cv["trees"][head])), head
    assert metrics["parity_max_abs_diff"] <= 1e-5
    router = Router.load(result.bundle, strict=True)
    assert router.route("What is 17 * 23?").zone in ("edge", "edge_with_cloud_fallback", "cloud")
    # make evaluate on logs it was trained on (its GSM8K and MT-Bench logs) says its figures there are in sample
    from evaluation.config import EvalConfig
    from pipelines.evaluate import run

    logs = [str(real_data_dir / source) for source in ("gsm8k", "mt_bench")]
    evaluated = run(
        EvalConfig(
            bundle=str(result.bundle), logs=logs, out=str(tmp_path / "eval"), mlflow=False, cache_dir=str(encoder_cache)
        )
    )
    assert any("cross-fitted" in note and "in sample" in note for note in evaluated.metrics["notes"])
