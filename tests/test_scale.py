"""`make scale`'s measuring: peak memory over a whole process tree (a Dask run's client,
scheduler and worker processes), wall time and exit code."""
from __future__ import annotations

import sys

from pipelines.scale import measure

# A parent holding ~100 MB and a child holding ~300 MB at the same time.
TREE = """
import subprocess, sys, time
held = bytearray(100 * 2**20)
child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(300 * 2**20); time.sleep(1.5)"])
child.wait()
sys.exit(3)
"""


def test_measure_sums_the_process_tree_and_keeps_the_exit_code(tmp_path):
    figures = measure([sys.executable, "-c", TREE], tmp_path / "log.txt", interval=0.05)
    assert figures["exit_code"] == 3
    assert figures["wall_s"] >= 1.5
    assert 300 <= figures["peak_rss_largest_mb"] < 420
    assert figures["peak_rss_total_mb"] >= figures["peak_rss_largest_mb"] + 90  # parent and child together
