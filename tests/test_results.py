"""README's headline table is what a fresh `make train` measures: the same figures, to the
digit, on the machine that wrote it; within the spread between CPUs elsewhere."""

from __future__ import annotations

import math
import re
import subprocess
import sys

from evaluation import headline
from pipelines.results import readme_table
from tests.conftest import ROOT

# Training is deterministic on one machine, but the learned models' figures move between CPUs
# (float results differ in the last bits, trees then split elsewhere, and the operating point
# chosen on out-of-fold scores moves with them). The README's figures are cross-validated means
# with 95% intervals; a figure written there agrees with a fresh training when its mean is
# within a quarter of the measured interval's width (half its half-width): far more than CPUs
# move a five-fold mean (docs/training.md#reproducibility), far less than a stale figure from
# another model or configuration. The half-width is the folds' spread, itself estimated from
# n = folds x repeats values, so n - 1 degrees of freedom: two estimates of one spread differ by
# a factor up to sqrt(F(0.975; n - 1, n - 1)) in 95% of pairs even when independent (3.1 for
# five folds). A step figure (a CPT, a paired difference of two) does move that much when fold
# figures move a step, as between two machines of this class: CPT(50%) router - reference
# +0.1% [-4.1%, +4.2%] written on one, +0.1% [-2.7%, +2.8%] measured on the next; CPT(80%) of
# the router 53.2% [50.2%, 56.2%] written, 53.3% [47.1%, 59.6%] measured on a third.
SHARE_OF_WIDTH = 0.25
CELL = re.compile(r"^(?P<mean>[+-]?\d+(\.\d+)?)%? \[(?P<low>[+-]?\d+(\.\d+)?)%?, (?P<high>[+-]?\d+(\.\d+)?)%?\]$")


def _figures(table: str) -> list[tuple[str, list[str]]]:
    return [
        (cells[0], cells[1:])
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:])
    ]


def half_width_ratio(values: int) -> float:
    """How far apart two estimates of one spread from `values` fold figures each may be (above)."""
    from scipy.stats import f

    return math.sqrt(f.ppf(0.975, values - 1, values - 1))


def _close(written: str, measured: str, values: int = 5) -> bool:
    """Same text, or both 'mean [low, high]' with means within SHARE_OF_WIDTH of the measured
    width and half-widths within half_width_ratio(values) of each other."""
    w, m = CELL.match(written), CELL.match(measured)
    if not (w and m):
        return written == measured
    (w_mean, w_low, w_high), (m_mean, m_low, m_high) = ([float(c[k]) for k in ("mean", "low", "high")] for c in (w, m))
    width = m_high - m_low
    if width == 0 or w_high - w_low == 0:
        return written == measured
    ratio, bound = (w_high - w_low) / width, half_width_ratio(values)
    return abs(w_mean - m_mean) <= SHARE_OF_WIDTH * width + 1e-9 and 1 / bound <= ratio <= bound


def test_readme_headline_table_is_what_training_measures(trained_readme):
    in_readme = readme_table((ROOT / "README.md").read_text(encoding="utf-8"))
    assert in_readme is not None, "README.md has no results block"
    measured = headline.markdown(trained_readme.metrics)
    assert in_readme.splitlines()[1:2] == measured.splitlines()[1:2], "run `make results` and commit README.md"
    assert in_readme.splitlines()[0].split("|")[2:] == measured.splitlines()[0].split("|")[2:]
    cv = trained_readme.metrics["cv"]
    for (label, written), (label_now, now) in zip(_figures(in_readme), _figures(measured), strict=True):
        assert label == label_now, "run `make results` and commit README.md"
        for column, in_readme_cell, measured_cell in zip(
            headline.heads(trained_readme.metrics), written, now, strict=True
        ):
            assert _close(in_readme_cell, measured_cell, cv["folds"] * cv["repeats"]), (
                f"{label}: {column} {in_readme_cell} in README, {measured_cell} measured (make results)"
            )


def test_a_stale_readme_figure_is_caught():
    """The tolerance is not a blanket: a mean off by more than it, an interval more than about three
    times as wide or narrow (five folds), or a cell that is no number, fails."""
    assert _close("0.709 [0.680, 0.738]", "0.712 [0.682, 0.742]") and _close(
        "54.1% [50.0%, 58.2%]", "53.0% [49.5%, 57.0%]"
    )
    assert _close("+0.1% [-4.1%, +4.2%]", "+0.1% [-2.7%, +2.8%]")  # fold CPTs moved a step
    assert _close("53.2% [50.2%, 56.2%]", "53.3% [47.1%, 59.6%]")  # more steps, on another CPU
    assert 3.0 < half_width_ratio(5) < 3.2 and 1.5 < half_width_ratio(15) < 1.8
    assert not _close("53.2% [50.2%, 56.2%]", "53.3% [47.1%, 59.6%]", 15)  # fifteen folds: a closer match
    assert not _close("0.690 [0.680, 0.738]", "0.712 [0.682, 0.742]")
    assert not _close("0.709 [0.600, 0.818]", "0.712 [0.682, 0.742]")
    assert not _close("0.709 [0.702, 0.716]", "0.712 [0.682, 0.742]") and not _close("0.62", "n/a")


def test_the_same_training_twice_gives_the_same_figures(trained_small, trained_small_again):
    """Deterministic end to end on one machine: a second run (warm embedding cache) gives
    identical figures."""
    assert trained_small_again.metrics["test"] == trained_small[1].metrics["test"]


def test_results_command_checks_and_writes_the_block(trained_full, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# title\n\n<!-- results: written by `make results` -->\nold\n<!-- /results -->\n\nrest\n")
    command = [sys.executable, "-m", "pipelines.results", "--bundle", str(trained_full.bundle)]
    stale = subprocess.run([*command, "--check", str(readme)], cwd=ROOT, capture_output=True, text=True)
    assert stale.returncode == 1 and "make results" in stale.stderr
    subprocess.run([*command, "--write", str(readme)], cwd=ROOT, check=True, capture_output=True)
    assert readme_table(readme.read_text()) == headline.markdown(trained_full.metrics)
    assert readme.read_text().endswith("\n\nrest\n")
    subprocess.run([*command, "--check", str(readme)], cwd=ROOT, check=True, capture_output=True)
