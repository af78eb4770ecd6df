"""`make test`'s own set-up of the Debian packages the suites drive (scripts/install_system_packages.sh):
the README's two commands work on a bare machine, and a user who may not install is told what to
install before the suite starts instead of meeting failed browser tests at its end."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, make_env

SCRIPT = ROOT / "scripts" / "install_system_packages.sh"
NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


def test_make_test_and_make_test_js_set_up_the_packages_their_suites_drive():
    """`make -n` prints what the targets would run: both install chromium when it is missing."""
    for target in ("test", "test-js"):
        planned = subprocess.run(
            ["make", "-n", target], cwd=ROOT, env=make_env(), capture_output=True, text=True, check=True
        ).stdout
        assert "scripts/install_system_packages.sh chromium" in planned, target


def test_nothing_is_installed_when_the_commands_are_there():
    """A present command ('sh') needs no apt-get, so the script answers at once and says nothing."""
    done = subprocess.run([str(SCRIPT), "sh"], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to act as nobody")
def test_a_user_who_may_not_install_gets_one_line_naming_the_package():
    """As an unprivileged user without passwordless sudo: exit 1 and one line with the apt-get command."""
    done = subprocess.run(
        [*NOBODY, str(SCRIPT), "sh", "no-such-package-for-the-tests"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install no-such-package-for-the-tests" in lines[0], done.stderr
    assert "sh " not in lines[0].split("install", 1)[1]  # only what is missing is named
