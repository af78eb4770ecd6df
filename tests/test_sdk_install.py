"""`pip install .` alone gives a working SDK: numpy, onnxruntime and tokenizers, nothing heavier."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.real_data, pytest.mark.slow]


def test_sdk_installs_and_routes_on_its_own(bundle, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(ROOT)], capture_output=True,
                         text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "pip"), "list", "--format=freeze"], capture_output=True,
                            text=True, check=True).stdout.lower()
    for heavy in ("torch", "lightgbm", "scikit-learn", "mlflow", "datasets", "pandas", "sentence-transformers"):
        assert f"\n{heavy}==" not in "\n" + listed, f"{heavy} was installed with the SDK"
    code = ("from serving import Router\n"
            f"r = Router.load({str(bundle)!r}, strict=True)\n"
            "print(r.route('What is 2 + 2?', precision='exact').zone)")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)  # not the repo: the installed package must suffice
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() in ("edge", "edge_with_cloud_fallback", "cloud")
