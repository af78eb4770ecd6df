"""The session's trainings are built once for all of `make test`'s workers (conftest.built_once):
processes that ask at the same time get one build and the same value; a build that failed is
made again by the next to ask."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from tests.conftest import built_once


def _build(folder: Path) -> dict:
    with (folder.parent / "builds.log").open("a") as log:
        log.write("built\n")
    time.sleep(0.5)  # the other processes ask while this one builds
    (folder / "made").write_text("x")
    return {"folder": str(folder), "rows": [1, 2, 3]}


def _ask(root: Path, answers) -> None:
    answers.put(built_once(root, "training", _build))


def test_processes_asking_at_once_share_one_build(tmp_path):
    forked = multiprocessing.get_context("fork")
    answers = forked.Queue()
    asking = [forked.Process(target=_ask, args=(tmp_path, answers)) for _ in range(3)]
    for process in asking:
        process.start()
    got = [answers.get(timeout=60) for _ in asking]
    for process in asking:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert (tmp_path / "builds.log").read_text() == "built\n"
    assert got == [{"folder": str(tmp_path / "training"), "rows": [1, 2, 3]}] * 3
    assert (tmp_path / "training" / "made").read_text() == "x"


def test_a_failed_build_is_made_again_from_an_empty_folder(tmp_path):
    def failing(folder):
        (folder / "half").write_text("written before the failure")
        raise RuntimeError("training failed")

    with pytest.raises(RuntimeError, match="training failed"):
        built_once(tmp_path, "training", failing)
    assert built_once(tmp_path, "training", lambda folder: sorted(p.name for p in folder.iterdir())) == []
    assert built_once(tmp_path, "training", lambda folder: "not asked again") == []
