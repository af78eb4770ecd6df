"""`make compare`: what changes for the traffic when one bundle replaces another, on a fixed
sample of logged prompts."""

from __future__ import annotations

import json

import pytest

from evaluation.agreement import agreement
from pipelines import compare
from serving import Router
from tests.conftest import invoke_command


def test_a_bundle_agrees_with_itself_and_moves_are_counted_against_another(bundle, trained_full, small_routellm):
    prompts, precisions = compare.sample([str(small_routellm)], 400)
    assert len(prompts) == 400 == len(set(prompts))
    small, full = Router.load(bundle, strict=True), Router.load(trained_full.bundle, strict=True)
    same = agreement(small, small, prompts, precisions)
    assert (same["zones_equal"], same["first_side_equal"], same["moves"]) == (1.0, 1.0, {})
    assert same["max_score_difference"] == 0.0

    other = agreement(small, full, prompts, precisions)
    moved = sum(other["moves"].values())
    assert 0 < moved < 400 and other["zones_equal"] == pytest.approx(1 - moved / 400)
    # Edge and edge-with-fallback both run the edge first: equal zones imply an equal first side.
    assert other["first_side_equal"] >= other["zones_equal"]
    across = sum(n for move, n in other["moves"].items() if changes_first_side(move))
    assert other["first_side_equal"] == pytest.approx(1 - across / 400)


def changes_first_side(move: str) -> bool:
    before, after = move.split(" -> ")
    return (before == "cloud") != (after == "cloud")


def test_the_sample_does_not_depend_on_the_order_of_the_files(small_routellm):
    forward = compare.sample([str(small_routellm / "gsm8k"), str(small_routellm / "mt_bench")], 100)
    backward = compare.sample([str(small_routellm / "mt_bench"), str(small_routellm / "gsm8k")], 100)
    assert forward == backward


def test_the_command_prints_and_writes_the_figures(bundle, trained_full, small_routellm, tmp_path):
    out = tmp_path / "compare.json"
    result = invoke_command(
        compare.main,
        [
            "--old",
            str(bundle),
            "--new",
            str(trained_full.bundle),
            "--logs",
            str(small_routellm / "gsm8k"),
            "--rows",
            "200",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["prompts"] == 200 and f"zones equal {figures['zones_equal']:.1%}" in result.output
