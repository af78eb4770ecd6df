"""Signed bundles: with a pinned public key, only bundles that key signed are loaded; a forger
who can rewrite files and checksums, swap manifests or sign with another key is refused."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import subprocess
import sys

import pytest

from serving import BundleError, Router
from serving.bundle._bundle import manifest_digest
from tests.conftest import ROOT, config_for
from training.keys import generate, sign


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def signed(small_routellm, encoder_cache, keys, tmp_path_factory):
    """A bundle `make train SIGNING_KEY=...` wrote."""
    from training.engines.base import train

    private, _ = keys
    config = config_for(
        tmp_path_factory.mktemp("signed"),
        small_routellm / "mt_bench",
        encoder_cache,
        routing={"min_rows_per_tag": 20},
        bundle={"signing_key": str(private)},
    )
    return train(config).bundle


def copy(bundle, tmp_path, name):
    return shutil.copytree(bundle, tmp_path / name)


def assert_refused(folder, public_key, why):
    router = Router.load(folder, public_key=public_key)
    assert router.degraded and why in router.degraded_reason, router.degraded_reason
    assert router.route("What is 2+2?").degraded
    with pytest.raises(BundleError, match=why):
        Router.load(folder, public_key=public_key, strict=True)


def test_keys_are_written_private_and_never_overwritten(keys):
    private, public = keys
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert b"PUBLIC KEY" in public.read_bytes()
    with pytest.raises(FileExistsError):
        generate(private.parent)


def test_a_bundle_training_signed_loads_under_its_key(signed, keys):
    _, public = keys
    assert (signed / "manifest.sig").is_file() and "manifest.sig" not in json.loads(
        (signed / "manifest.json").read_text()
    )["files"]
    for key in (public, public.read_bytes()):
        router = Router.load(signed, public_key=key, strict=True)
        assert not router.degraded
    assert not Router.load(signed).degraded  # no pinned key: as before


def test_an_unsigned_bundle_under_a_pinned_key_is_tampered(bundle, keys, tmp_path):
    assert_refused(bundle, keys[1], "unsigned")


def test_another_key_is_refused(signed, tmp_path):
    _, other = generate(tmp_path / "other")
    assert_refused(signed, other, "not a signature of this manifest")


def test_rewritten_file_and_checksums_break_the_signature(signed, keys, tmp_path):
    folder = copy(signed, tmp_path, "forged")
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "tokenizer.json").write_bytes((folder / "tokenizer.json").read_bytes().replace(b'"[UNK]"', b'"[UNX]"'))
    manifest["files"]["tokenizer.json"] = hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
    del manifest["manifest_sha256"]
    manifest["manifest_sha256"] = manifest_digest(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert not Router.load(folder).degraded  # checksums alone do not see the forgery...
    assert_refused(folder, keys[1], "not a signature of this manifest")  # ...the signature does


def test_a_swapped_manifest_is_refused(signed, bundle, keys, tmp_path):
    folder = copy(signed, tmp_path, "swapped")
    shutil.copy(bundle / "manifest.json", folder / "manifest.json")
    for name in json.loads((bundle / "manifest.json").read_text())["files"]:
        shutil.copy(bundle / name, folder / name)
    assert_refused(folder, keys[1], "not a signature of this manifest")


def test_a_key_that_is_not_a_key_degrades_with_the_reason(signed, tmp_path):
    junk = tmp_path / "junk.pub"
    junk.write_text("not a key")
    assert_refused(signed, junk, "not an Ed25519 public key")


def test_the_signature_covers_exactly_what_training_wrote(signed, keys):
    manifest = json.loads((signed / "manifest.json").read_text())
    assert (signed / "manifest.sig").read_bytes() == sign(manifest, keys[0])  # Ed25519 is deterministic


def test_make_keys(tmp_path):
    from tests.conftest import make_env

    done = subprocess.run(
        ["make", "-s", "keys", f"KEYS={tmp_path / 'k'}"],
        cwd=ROOT,
        env=make_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "k" / "router.key").is_file() and (tmp_path / "k" / "router.pub").is_file()
    again = subprocess.run(
        [sys.executable, "-m", "pipelines.keys", "--out", str(tmp_path / "k")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**make_env(), "COLUMNS": "400"},
    )
    assert again.returncode != 0 and "refusing to replace" in again.stderr
