"""BundleURLWatcher: bundles published over HTTP on 127.0.0.1 are downloaded into a private staging
folder, verified by Router.update, and the staging folder removed; hostile or broken publications
are refused without touching the running bundle or anything outside the staging folder."""

from __future__ import annotations

import datetime
import ipaddress
import json
import shutil
import ssl
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from serving import Router
from serving.bundle._bundle import manifest_digest
from serving.bundle._download import DownloadError
from serving.bundle._watcher import BundleURLWatcher
from tests.dripping import DrippingServer, elapsed

pytestmark = pytest.mark.real_data  # the session's trained test bundle


class Site:
    """A folder served over HTTP (or HTTPS, given a TLS context) on 127.0.0.1, remembering the
    paths asked for and the headers that came with each; `redirect` sends every request
    elsewhere, `redirects` {path: location} only those paths; `cut` {path: n} sends only the first
    n bytes of those files, with the whole file's Content-Length, and closes the connection."""

    def __init__(self, folder: Path, tls: ssl.SSLContext | None = None):
        self.folder, self.paths, self.headers, self.redirect, self.redirects = folder, [], [], None, {}
        self.cut: dict[str, int] = {}
        site = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self):
                site.paths.append(self.path)
                site.headers.append(dict(self.headers))
                location = site.redirects.get(self.path, site.redirect)
                if location:
                    self.send_response(302)
                    self.send_header("Location", location)
                    self.end_headers()
                    return
                if self.path in site.cut:
                    content = (site.folder / self.path.lstrip("/")).read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(content)))
                    self.end_headers()
                    self.wfile.write(content[: site.cut[self.path]])
                    self.close_connection = True
                    return
                super().do_GET()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(folder)))
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.port = self.server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/live"

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
    return reseal(
        shutil.copytree(bundle, tmp_path / "newer"),
        model_version="edge-cloud-router@run:newer",
        created_at="2999-01-01T00:00:00+00:00",
    )


@pytest.fixture
def watcher(bundle, site, tmp_path):
    (tmp_path / "staging").mkdir()
    return BundleURLWatcher(
        Router.load(bundle, strict=True), site.url, interval_s=0.1, staging_root=tmp_path / "staging"
    )


def test_a_newly_published_bundle_is_downloaded_verified_and_loaded(watcher, site, newer, tmp_path):
    site.publish(newer)
    update = watcher.check_now()
    assert update.updated and watcher.router.model_version == "edge-cloud-router@run:newer"
    assert sorted(site.paths) == sorted(
        ["/live/manifest.json", "/live/manifest.sig"]
        + [f"/live/{name}" for name in json.loads((newer / "manifest.json").read_text())["files"]]
    )
    assert list((tmp_path / "staging").iterdir()) == []  # loaded from memory; the staging folder is gone
    site.paths.clear()
    assert watcher.check_now() is None and site.paths == ["/live/manifest.json"]  # nothing new: nothing fetched


def test_the_running_bundle_is_not_downloaded_again(watcher, site, bundle):
    site.publish(bundle)
    assert watcher.check_now() is None and site.paths == ["/live/manifest.json"]


def test_a_refused_bundle_is_reported_once_and_the_running_one_stays(watcher, site, bundle, tmp_path):
    """A bundle Router.update refuses (here: older than the running one) is not fetched again
    until another is published."""
    before = watcher.router.model_version
    older = reseal(shutil.copytree(bundle, tmp_path / "older"), created_at="2000-01-01T00:00:00+00:00")
    site.publish(older)
    update = watcher.check_now()
    assert not update.updated and "older" in update.reason
    assert watcher.router.model_version == before and not watcher.router.degraded
    site.paths.clear()
    assert watcher.check_now() is None and site.paths == ["/live/manifest.json"]  # reported once, not fetched again
    assert list((tmp_path / "staging").iterdir()) == []


def test_a_file_that_is_not_the_manifests_is_fetched_again_until_it_is(watcher, site, newer, tmp_path):
    """A store holding a file other than the one its manifest lists (tampered with, or a bundle
    caught while it is uploaded file by file, manifest first): a DownloadError naming the file,
    the running bundle stays, and the next poll fetches it again, so the bundle loads once the
    store holds it whole. Refusing it for good would skip that publication forever."""
    before = watcher.router.model_version
    site.publish(newer)
    (site.folder / "live" / "model.onnx").write_bytes(b"half a model")
    with pytest.raises(DownloadError, match=r"/live/model.onnx: SHA-256 [0-9a-f]{12}\.\.\., the manifest lists"):
        watcher.check_now()
    assert watcher.router.model_version == before and list((tmp_path / "staging").iterdir()) == []
    site.paths.clear()
    with pytest.raises(DownloadError, match="still being published"):
        watcher.check_now()
    assert "/live/model.onnx" in site.paths  # fetched again
    shutil.copy(newer / "model.onnx", site.folder / "live")
    assert watcher.check_now().updated and watcher.router.model_version == "edge-cloud-router@run:newer"


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
    import serving.bundle._download as download

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


def test_a_body_shorter_than_its_content_length_is_refused(watcher, site, newer, tmp_path):
    """A connection closed before the Content-Length is complete: http.client ends the read there,
    without an error. A cut manifest read as "nothing new", a cut file was handed to the verifier,
    which refused the bundle as tampered and never fetched it again. Both are a DownloadError
    now (the bundle is fetched again at the next poll)."""
    site.publish(newer)
    site.cut["/live/manifest.json"] = 100
    with pytest.raises(
        DownloadError,
        match=r"manifest.json: the connection closed after 100 of its [0-9,]+ "
        r"bytes \(Content-Length\)",
    ):
        watcher.check_now()
    site.cut = {"/live/model.onnx": 1000}
    with pytest.raises(DownloadError, match=r"model.onnx: the connection closed after 1,000 of its"):
        watcher.check_now()
    assert list((tmp_path / "staging").iterdir()) == []
    site.cut = {}
    assert watcher.check_now().updated and watcher.router.model_version == "edge-cloud-router@run:newer"


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


# --- a hostile or slow store: its credentials stay with it, and every request has a deadline ---


STORE_HEADERS = {"Authorization": "Bearer store-token-SECRET", "X-Store-Key": "store-key-SECRET"}


@pytest.fixture
def any_router(tmp_path):
    """A router on the rule table: these tests end before a downloaded bundle would be loaded."""
    return Router.load(tmp_path / "no-bundle")


def served(folder: Path, tls: ssl.SSLContext | None = None) -> Site:
    folder.mkdir()
    return Site(folder, tls)


def carries_credentials(headers: dict) -> bool:
    return any(name.lower() in ("authorization", "x-store-key") for name in headers)


@pytest.mark.parametrize("target", ["same origin", "another port", "another host"])
def test_the_store_credentials_go_to_its_origin_only(any_router, tmp_path, target):
    """The headers given to the watcher (a store's token) follow a redirect within the store's
    origin, never to another port or host a redirect names (urllib copies them to any)."""
    store, other = served(tmp_path / "store"), served(tmp_path / "other")
    try:
        store.redirects["/live/manifest.json"] = {
            "same origin": "/moved/manifest.json",
            "another port": f"http://127.0.0.1:{other.port}/moved/manifest.json",
            "another host": f"http://localhost:{store.port}/moved/manifest.json",
        }[target]
        with pytest.raises(DownloadError, match="HTTP 404"):  # nothing is published there
            BundleURLWatcher(any_router, store.url, headers=STORE_HEADERS, timeout_s=5).check_now()
    finally:
        store.close()
        other.close()
    assert store.paths[0] == "/live/manifest.json" and carries_credentials(store.headers[0])
    (redirected,) = other.headers if target == "another port" else store.headers[1:]
    assert carries_credentials(redirected) == (target == "same origin")


def self_signed_tls(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """(a server context, its certificate's file): a certificate for 127.0.0.1 signed by its own key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file


def test_a_redirect_from_https_down_to_http_is_refused(any_router, tmp_path, monkeypatch):
    """An https store that redirects to plain http would send the token, and take the bundle,
    in clear text: refused, and nothing is sent to the http address."""
    tls, cert_file = self_signed_tls(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))  # the client trusts this certificate alone
    store, plain = served(tmp_path / "store", tls), served(tmp_path / "plain")
    try:
        (store.folder / "live").mkdir()
        (store.folder / "live" / "manifest.json").write_text("{}")
        watcher = BundleURLWatcher(any_router, store.url, headers=STORE_HEADERS, timeout_s=5)
        assert watcher.check_now() is None  # over TLS, trusted: a manifest without a digest is no bundle
        assert store.paths == ["/live/manifest.json"] and carries_credentials(store.headers[0])
        store.redirect = f"http://127.0.0.1:{plain.port}/live/manifest.json?X-Signature=abc"
        with pytest.raises(
            DownloadError,
            match="redirects to http://127.0.0.1:[0-9]+/live/manifest.json: a "
            "redirect from https down to http is refused",
        ) as refused:
            watcher.check_now()
    finally:
        store.close()
        plain.close()
    assert plain.paths == [] and "X-Signature" not in str(refused.value)


@pytest.mark.parametrize("drip", ["headers", "body"])
def test_timeout_s_is_the_deadline_of_a_whole_request(any_router, drip):
    """A store that sends a byte every 0.3 s never trips a per-read timeout of 2 s; the deadline
    ends the request at 2 s however the bytes come (before this, check_now waited 12 s and more)."""
    with DrippingServer(b'{"manifest_sha256": "not a bundle, slowly"}', drip=drip, interval_s=0.3) as store:
        watcher = BundleURLWatcher(any_router, f"{store.url}/live", timeout_s=2)
        took, outcome = elapsed(watcher.check_now)
    assert isinstance(outcome, DownloadError), outcome
    assert "manifest.json: not complete within timeout_s=2 s" in str(outcome)
    assert took < 6
    for bad in (0, -1, float("inf"), float("nan"), "2", True, 10**400):
        with pytest.raises(ValueError, match="timeout_s=.*positive number of seconds"):
            BundleURLWatcher(any_router, "http://127.0.0.1:9/live", timeout_s=bad)
