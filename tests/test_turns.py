"""MT-Bench second turns with and without the first turn's outcome (evaluation.turns, issue 47): on the
real MT-Bench files (the real_data_dir fixture fails when ROUTER_DATA_DIR is set but missing; a
RouteLLM folder without mt_bench/ is an error) and on a synthetic case the measurement must see."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import numpy as np
import pytest

from evaluation.turns import CARRY, PAIRS, PREDICTORS, Conversations, compare, features, out_of_fold, read_conversations
from tests.conftest import ROOT
from training.config import Label
from training.labels import cloud_needed

_EDGE = "mistralai/Mixtral-8x7B-Instruct-v0.1"
LABEL = functools.partial(cloud_needed, margin_binary=Label().margin_binary, margin_graded=Label().margin_graded)


@pytest.fixture(scope="module")
def conv(real_data_dir) -> Conversations:
    return read_conversations(real_data_dir / "mt_bench", LABEL)


@pytest.fixture(scope="module")
def fitted(conv):
    return out_of_fold(conv, folds=5, repeats=3, seed=0)


def test_the_label_counts_are_the_judgements(conv, real_data_dir):
    """Counted here from the raw files: GPT-4's judge score beats Mixtral's by more than the
    project's graded margin (0.1 of the 1-10 scale scaled to [0, 1], i.e. 0.9 points)."""
    lines = (real_data_dir / "mt_bench" / "judgements.jsonl").read_text(encoding="utf-8").splitlines()
    score = {(r["question_id"], r["turn"], r["model"]): float(r["score"]) for r in map(json.loads, lines)}
    questions = sorted({q for q, _, _ in score})
    assert len(questions) == len(conv.ids) == 80
    wins = {
        turn: {q for q in questions if score[q, turn, "gpt-4-1106-preview"] - score[q, turn, _EDGE] > 0.9}
        for turn in (1, 2)
    }
    needed = {int(i.rsplit("/", 1)[1]) for i, n in zip(conv.ids, conv.needed[:, 0]) if n}
    assert needed == wins[1]
    assert {int(i.rsplit("/", 1)[1]) for i, n in zip(conv.ids, conv.needed[:, 1]) if n} == wins[2]
    assert (len(wins[1]), len(wins[2]), len(wins[1] & wins[2])) == (24, 28, 11)
    assert len(set(conv.category)) == 7 and conv.category.count("writing/roleplay") == 20


def test_a_and_b_are_fitted_and_scored_on_the_same_folds(conv, fitted):
    """Every repeat's folds partition the conversations, stratified by the turn-2 label; refitting
    A and B on the returned folds gives their out-of-fold scores, so the comparison is paired."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    scores, fold = fitted
    assert fold.shape == (3, 80) and set(np.unique(fold)) == set(range(5))
    y = conv.needed[:, 1]
    for r in range(3):
        assert sorted(np.bincount(fold[r])) == [16] * 5
        assert set(np.bincount(fold[r], weights=y)) <= {5, 6}  # 28 positives over 5 folds
    groups = features(conv)
    for name in ("A", "B"):
        assert not np.isnan(scores[name]).any()
        x = np.hstack([groups[g] for g in PREDICTORS[name]])
        for k in range(5):
            test = fold[1] == k
            model = make_pipeline(StandardScaler(), LogisticRegression(solver="newton-cg"))
            again = model.fit(x[~test], y[~test]).predict_proba(x[test])[:, 1]
            np.testing.assert_allclose(scores[name][1, test], again, atol=1e-6)
    np.testing.assert_array_equal(scores[CARRY][0], conv.needed[:, 0])


def test_every_interval_holds_its_point_and_differences_are_paired(conv, fitted):
    result = compare(conv, fitted[0], draws=300, seed=0)
    assert set(result["differences"]) == {f"{b} - {a}" for b, a in PAIRS}
    for section in ("predictors", "differences"):
        for name, figures in result[section].items():
            for metric, f in figures.items():
                assert f["low"] <= f["point"] <= f["high"], (section, name, metric, f)
    for b, a in PAIRS:
        for metric, f in result["differences"][f"{b} - {a}"].items():
            expected = result["predictors"][b][metric]["point"] - result["predictors"][a][metric]["point"]
            assert f["point"] == pytest.approx(expected)
    # The carry-over rule is fitted to nothing: its figures are turn 1's labels read as decisions.
    carry = result["predictors"][CARRY]
    assert carry["cloud_share"]["point"] == pytest.approx(24 / 80)


def test_when_turn_2_repeats_turn_1_b_beats_a_clearly():
    """Synthetic: 80 conversations of random text whose turn-2 outcomes are copies of turn 1's.
    The text says nothing, the turn-1 outcome says everything: B's AUC must be near 1 and B - A's
    interval well above 0; the carry-over rule is exact."""
    rng = np.random.default_rng(7)
    words = np.array(["alpha", "beta", "gamma", "delta", "sum", "poem", "code", "why", "list", "2"])
    prompts = [" ".join(rng.choice(words, rng.integers(5, 60))) + "?" * int(rng.integers(0, 3)) for _ in range(80)]
    edge = (rng.integers(1, 11, 80) - 1) / 9
    cloud = np.clip(edge + rng.choice([-2, -1, 0, 1, 2, 3, 4], 80) / 9, 0, 1)
    q_edge, q_cloud = np.column_stack([edge, edge]), np.column_stack([cloud, cloud])
    needed = np.column_stack([LABEL(edge, cloud)] * 2)
    assert 15 <= needed[:, 1].sum() <= 65
    conv = Conversations(
        ids=[f"s/{i}" for i in range(80)],
        category=["x"] * 80,
        prompt2=prompts,
        q_edge=q_edge,
        q_cloud=q_cloud,
        needed=needed,
    )
    scores, _ = out_of_fold(conv, repeats=3)
    result = compare(conv, scores, draws=300)
    assert result["predictors"]["B"]["auc"]["point"] > 0.9
    assert result["predictors"][CARRY]["auc"]["point"] == 1.0
    assert result["differences"]["B - A"]["auc"]["low"] > 0.15
    assert result["differences"]["B - A"]["apgr"]["low"] > 0.1


def test_the_command_prints_the_table_and_writes_the_json(real_data_dir, tmp_path):
    out = tmp_path / "turns.json"
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.mt_bench_turns", "--data", str(real_data_dir), "--out", str(out)]
        + ["--repeats", "2", "--draws", "100"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "B - A" in done.stdout and "80 conversations" in done.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["labels"]["turn2_needed_when_turn1_needed"] == [11, 24]
    assert set(report["predictors"]) == {*PREDICTORS, CARRY}


def test_a_folder_without_mt_bench_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="MT-Bench file missing"):
        read_conversations(tmp_path / "mt_bench", LABEL)
