"""README commands that are not covered elsewhere: `make ui` serves the tracking store."""
from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request

import pytest

from tests.conftest import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_make_ui_serves_the_registry(tmp_path):
    port = free_port()
    proc = subprocess.Popen(["make", "-s", "ui", f"PORT={port}", f"MLRUNS={tmp_path}"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline, body = time.monotonic() + 120, None
        while time.monotonic() < deadline and body is None:
            if proc.poll() is not None:
                pytest.fail(f"make ui exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=5"
                with urllib.request.urlopen(url, timeout=2) as response:
                    body = json.loads(response.read())
            except OSError:
                time.sleep(1)
        assert body is not None, "the MLflow UI did not answer within 120 s"
        assert "experiments" in body
    finally:
        import os
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
