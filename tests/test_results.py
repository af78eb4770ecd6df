"""README's headline table is what a fresh `make train` measures: the same figures, to the digit."""
from __future__ import annotations

import subprocess
import sys

from evaluation import headline
from pipelines.results import readme_table
from tests.conftest import ROOT


def test_readme_headline_table_is_what_training_measures(trained_full):
    in_readme = readme_table((ROOT / "README.md").read_text(encoding="utf-8"))
    assert in_readme is not None, "README.md has no results block"
    assert in_readme == headline.markdown(trained_full.metrics["test"]), "run `make results` and commit README.md"


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
