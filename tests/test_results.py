"""README's headline table is what a fresh `make train` measures: the same figures, to the
digit, on the machine that wrote it; within the spread between CPUs elsewhere."""
from __future__ import annotations

import re
import subprocess
import sys

from evaluation import headline
from pipelines.results import readme_table
from tests.conftest import ROOT

# Training is deterministic on one machine, but the learned models' figures move between
# CPUs (float results differ in the last bits, trees then split elsewhere, and the operating
# point chosen on validation moves with them). Measured with the same pinned install on three
# machines of this workplace: AUC 0.620 / 0.623 / 0.628, APGR 0.709 / 0.709 / 0.716, quality
# before fallback 0.777 / 0.786, cloud share at the operating point 45.0% / 46.5% / 49.0%,
# fallback-zone share 54.1% / 48.9% (docs/training.md#reproducibility). The spread below covers
# the largest of these moves; the title's data figures do not move and are checked exactly.
# A cross-validated interval per figure replaces this measured spread (issue 26).
SPREAD = {"ratio": 0.010, "percent": 6.0}


def _figures(table: str) -> list[tuple[str, list[str]]]:
    return [(cells[0], cells[1:]) for cells in (
        [c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:])]


def _close(written: str, measured: str) -> bool:
    number = re.compile(r"^[+-]?\d+(\.\d+)?%?$")
    if not (number.match(written) and number.match(measured)):
        return written == measured
    spread = SPREAD["percent" if written.endswith("%") else "ratio"]
    return abs(float(written.rstrip("%")) - float(measured.rstrip("%"))) <= spread + 1e-9


def test_readme_headline_table_is_what_training_measures(trained_full):
    in_readme = readme_table((ROOT / "README.md").read_text(encoding="utf-8"))
    assert in_readme is not None, "README.md has no results block"
    measured = headline.markdown(trained_full.metrics["test"])
    assert in_readme.splitlines()[:2] == measured.splitlines()[:2], "run `make results` and commit README.md"
    for (label, written), (label_now, now) in zip(_figures(in_readme), _figures(measured), strict=True):
        assert label == label_now, "run `make results` and commit README.md"
        for policy, in_readme_cell, measured_cell in zip(("learned", "rule table"), written, now, strict=True):
            assert _close(in_readme_cell, measured_cell), \
                f"{label}: {policy} {in_readme_cell} in README, {measured_cell} measured (make results)"


def test_a_stale_readme_figure_is_caught():
    """The spread is not a blanket: a figure off by more than it, or a cell that is no number, fails."""
    assert _close("0.709", "0.716") and _close("54.1%", "48.9%")
    assert not _close("0.620", "0.632") and not _close("27.5%", "21.3%") and not _close("0.62", "n/a")


def test_the_same_training_twice_gives_the_same_figures(trained_full, real_data_dir, encoder_cache, tmp_path):
    """Deterministic end to end: a second run (warm embedding cache) gives identical figures."""
    from tests.conftest import config_for
    from training.engines.base import train

    again = train(config_for(tmp_path, real_data_dir, encoder_cache, min_rows_per_tag=200))
    assert again.metrics["test"] == trained_full.metrics["test"]


def test_results_command_checks_and_writes_the_block(trained_full, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# title\n\n<!-- results: written by `make results` -->\nold\n<!-- /results -->\n\nrest\n")
    command = [sys.executable, "-m", "pipelines.results", "--bundle", str(trained_full.bundle)]
    stale = subprocess.run([*command, "--check", str(readme)], cwd=ROOT, capture_output=True, text=True)
    assert stale.returncode == 1 and "make results" in stale.stderr
    subprocess.run([*command, "--write", str(readme)], cwd=ROOT, check=True, capture_output=True)
    assert readme_table(readme.read_text()) == headline.markdown(trained_full.metrics["test"])
    assert readme.read_text().endswith("\n\nrest\n")
    subprocess.run([*command, "--check", str(readme)], cwd=ROOT, check=True, capture_output=True)
