"""BundleURLWatcher: bundles published over HTTP on 127.0.0.1 are downloaded into a private staging
folder, verified by Router.update, and the staging folder removed; hostile or broken publications
are refused without touching the running bundle or anything outside the staging folder."""
from __future__ import annotations

import json
import shutil
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from serving import Router
from serving.bundle import manifest_digest
from serving.bundle_download import DownloadError
from serving.watcher import BundleURLWatcher

pytestmark = pytest.mark.real_data  # the session's trained test bundle


class Site:
    """A folder served over HTTP on 127.0.0.1, remembering the paths asked for."""

    def __init__(self, folder: Path):
        self.folder, self.paths, self.redirect = folder, [], None
        site = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self):
                site.paths.append(self.path)
                if site.redirect:
                    self.send_response(302)
                    self.send_header("Location", site.redirect)
                    self.end_headers()
                    return
                super().do_GET()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(folder)))
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/live"

    def publish(self, bundle: Path) -> None:
        live = self.folder / "live"
        shutil.rmtree(live, ignore_errors=True)
        shutil.copytree(bundle, live)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site(tmp_path):
    (tmp_path / "site").mkdir()
    served = Site(tmp_path / "site")
    yield served
    served.close()


def reseal(folder: Path, **changes) -> Path:
    """Edit a bundle's manifest and seal it again (a valid bundle with other values)."""
    path = folder / "manifest.json"
    manifest = {**json.loads(path.read_text()), **changes}
    manifest["manifest_sha256"] = manifest_digest(manifest)
    path.write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def newer(bundle, tmp_path) -> Path:
    """The test bundle as a later version: another model_version, a later created_at."""
    return reseal(shutil.copytree(bundle, tmp_path / "newer"), model_version="edge-cloud-router@run:newer",
                  created_at="2999-01-01T00:00:00+00:00")


@pytest.fixture
def watcher(bundle, site, tmp_path):
    (tmp_path / "staging").mkdir()
    return BundleURLWatcher(Router.load(bundle, strict=True), site.url, interval_s=0.1,
                            staging_root=tmp_path / "staging")


def test_a_newly_published_bundle_is_downloaded_verified_and_loaded(watcher, site, newer, tmp_path):
    site.publish(newer)
    update = watcher.check_now()
    assert update.updated and watcher.router.model_version == "edge-cloud-router@run:newer"
    assert sorted(site.paths) == sorted(["/live/manifest.json", "/live/manifest.sig"] +
                                        [f"/live/{name}" for name in json.loads((newer / "manifest.json").read_text())["files"]])
    assert list((tmp_path / "staging").iterdir()) == []  # loaded from memory; the staging folder is gone
    site.paths.clear()
    assert watcher.check_now() is None and site.paths == ["/live/manifest.json"]  # nothing new: nothing fetched


def test_the_running_bundle_is_not_downloaded_again(watcher, site, bundle):
    site.publish(bundle)
    assert watcher.check_now() is None and site.paths == ["/live/manifest.json"]


def test_a_tampered_bundle_is_refused_once_and_the_running_one_stays(watcher, site, newer, tmp_path):
    before = watcher.router.model_version
    (newer / "model.onnx").write_bytes(b"not the model")
    site.publish(newer)
    update = watcher.check_now()
    assert not update.updated and "does not match its checksum" in update.reason
    assert watcher.router.model_version == before and not watcher.router.degraded
    site.paths.clear()
    assert watcher.check_now() is None and site.paths == ["/live/manifest.json"]  # reported once, not fetched again
    assert list((tmp_path / "staging").iterdir()) == []


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/passwd", ".hidden", "sub/dir.onnx"])
def test_a_manifest_naming_paths_is_refused_before_any_download(watcher, site, newer, tmp_path, name):
    manifest = json.loads((newer / "manifest.json").read_text())
    reseal(newer, files={**manifest["files"], name: "0" * 64})
    site.publish(newer)
    with pytest.raises(DownloadError, match="plain file names"):
        watcher.check_now()
    assert site.paths == ["/live/manifest.json"] and list((tmp_path / "staging").iterdir()) == []
    assert not (tmp_path / "escape.txt").exists()


def test_downloads_are_bounded(watcher, site, newer, tmp_path, monkeypatch):
    import serving.bundle_download as download

    monkeypatch.setattr(download, "MAX_FILE_BYTES", 1000)
    site.publish(newer)
    with pytest.raises(DownloadError, match="over the limit of 1,000"):
        watcher.check_now()
    assert list((tmp_path / "staging").iterdir()) == []


def test_a_failed_download_is_retried_at_the_next_poll(watcher, site, newer):
    site.publish(newer)
    (site.folder / "live" / "tokenizer.json").unlink()
    with pytest.raises(DownloadError, match="tokenizer.json: HTTP 404"):
        watcher.check_now()
    shutil.copy(newer / "tokenizer.json", site.folder / "live")
    assert watcher.check_now().updated


def test_only_http_is_followed(watcher, site, bundle):
    site.publish(bundle)
    site.redirect = "ftp://127.0.0.1/manifest.json"
    with pytest.raises(DownloadError, match="only http and https"):
        watcher.check_now()
    site.redirect = "file:///etc/passwd"
    with pytest.raises(DownloadError, match="not allowed"):  # urllib's own refusal
        watcher.check_now()
    for url in ("file:///tmp/bundle", "ftp://host/bundle", "http://host/b?x=1"):
        with pytest.raises(ValueError):
            BundleURLWatcher(watcher.router, url)


def test_a_pinned_key_holds_for_downloaded_bundles(bundle, site, newer, tmp_path):
    from training.keys import generate, sign

    private, public = generate(tmp_path / "keys")
    signed = reseal(shutil.copytree(bundle, tmp_path / "signed"), created_at="2000-01-01T00:00:00+00:00")
    (signed / "manifest.sig").write_bytes(sign(json.loads((signed / "manifest.json").read_text()), private))
    router = Router.load(signed, public_key=public, strict=True)
    watcher = BundleURLWatcher(router, site.url)
    site.publish(newer)  # unsigned
    update = watcher.check_now()
    assert not update.updated and "unsigned" in update.reason
    live = reseal(site.folder / "live", created_at="2999-01-02T00:00:00+00:00")  # published again, signed
    (live / "manifest.sig").write_bytes(sign(json.loads((live / "manifest.json").read_text()), private))
    assert watcher.check_now().updated and router.model_version == "edge-cloud-router@run:newer"


def test_the_polling_thread_picks_up_a_publication(watcher, site, newer):
    watcher.start()
    try:
        site.publish(newer)
        deadline = time.monotonic() + 10
        while watcher.router.model_version != "edge-cloud-router@run:newer" and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watcher.stop()
    assert watcher.router.model_version == "edge-cloud-router@run:newer" and watcher.last_update.updated
