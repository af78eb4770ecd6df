"""`pip install .` alone gives a working SDK: numpy, onnxruntime and tokenizers, nothing heavier,
and one top-level package, `serving` (no `data`, `training`, ... to collide with an app's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.real_data, pytest.mark.slow]


def clean_copy(dest):
    """The checkout's files as a fresh clone has them (tracked, or new and not ignored): a build
    in the checkout itself would also pack whatever an earlier build left in build/."""
    import shutil

    listed = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def test_sdk_installs_and_routes_on_its_own(bundle, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    source = clean_copy(tmp_path / "clone")
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(source)], capture_output=True, text=True, timeout=900
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    listed = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout.lower()
    for heavy in ("torch", "lightgbm", "scikit-learn", "mlflow", "datasets", "pandas", "sentence-transformers"):
        assert f"\n{heavy}==" not in "\n" + listed, f"{heavy} was installed with the SDK"
    landed = (
        "import importlib.metadata as m\n"
        "files = m.distribution('edge-cloud-router').files\n"
        "print(sorted({f.parts[0] for f in files if not f.parts[0].endswith('.dist-info') and f.parts[0] != '..'}))"
    )
    top_level = subprocess.run(
        [str(venv / "bin" / "python"), "-c", landed],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=True,
    ).stdout.strip()
    assert top_level == "['serving']", top_level
    for name in ("data", "evaluation", "training", "pipelines"):
        missing = subprocess.run(
            [str(venv / "bin" / "python"), "-c", f"import {name}"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert missing.returncode != 0 and "ModuleNotFoundError" in missing.stderr, name
    code = (
        "from serving import Router\n"
        f"r = Router.load({str(bundle)!r}, strict=True)\n"
        "print(r.route('What is 2 + 2?', precision='exact').zone)"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )  # not the repo: the installed package must suffice
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() in ("edge", "edge_with_cloud_fallback", "cloud")
    doubles = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import serving.testing"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )  # the test doubles serve with uvicorn, which only the server extra installs
    assert doubles.returncode != 0 and "pip install 'edge-cloud-router[server]'" in doubles.stderr, doubles.stderr
