"""`make data`, and `make train` on a fresh clone that has no logs, against a local HTTP
server laid out like the upstream repositories."""

from __future__ import annotations

import csv
import functools
import hashlib
import http.server
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from data.fetch import CHECKSUMS_ENV, PINNED_SHA256, DownloadError, fetch, file_plan
from data.logs import load_logs
from data.routellm import SUBJECT_DOMAIN
from tests.conftest import ROOT, seed_store


@dataclass
class Upstream:
    """The local server: its folder (delete a file there for a 404) and the paths it cuts short."""

    root: Path
    routellm_url: str
    fastchat_url: str
    truncated: set[str] = field(default_factory=set)

    @property
    def urls(self) -> dict[str, str]:
        return {"routellm_url": self.routellm_url, "fastchat_url": self.fastchat_url}

    @property
    def digests(self) -> dict[str, str]:
        """SHA-256 of each file as this server holds it (the shared copies differ from upstream's:
        rows are kept back), by its path in the plan; a file deleted from the server has none."""
        served = {
            relative: self.root / urllib.parse.urlsplit(url).path.lstrip("/")
            for relative, url in file_plan(self.routellm_url, self.fastchat_url)
        }
        return {
            relative: hashlib.sha256(path.read_bytes()).hexdigest()
            for relative, path in served.items()
            if path.exists()
        }

    @property
    def env(self) -> dict[str, str]:
        """The environment variables that point `make train` and `make data` at this server, and
        replace the pinned digests with what it serves."""
        checksums = self.root.parent / "served_sha256.json"
        checksums.write_text(json.dumps(self.digests))
        return {
            "ROUTER_ROUTELLM_URL": self.routellm_url,
            "ROUTER_FASTCHAT_URL": self.fastchat_url,
            CHECKSUMS_ENV: str(checksums),
        }


def lay_out(real_data_dir: Path, root: Path, rows: int | None = None) -> None:
    """The real files under the upstream paths (RouteLLM and FastChat) in `root`; with `rows`,
    the MMLU and GSM8K files cut to their first `rows` rows (a quicker training)."""
    evals = root / "RouteLLM" / "routellm" / "evals"
    copies = {
        real_data_dir / "mmlu" / f"mmlu_{s}.csv": evals / "mmlu" / "responses" / f"mmlu_{s}.csv" for s in SUBJECT_DOMAIN
    }
    copies[real_data_dir / "gsm8k" / "gsm8k_responses.csv"] = evals / "gsm8k" / "gsm8k_responses.csv"
    for source, target in copies.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        if rows is None:
            shutil.copy(source, target)
        else:
            with (
                open(source, newline="", encoding="utf-8") as whole,
                open(target, "w", newline="", encoding="utf-8") as cut,
            ):
                csv.writer(cut).writerows(itertools.islice(csv.reader(whole), rows + 1))
    (evals / "mt_bench").mkdir()
    shutil.copy(real_data_dir / "mt_bench" / "judgements.jsonl", evals / "mt_bench")
    shutil.copy(real_data_dir / "LICENSE", root / "RouteLLM" / "LICENSE")
    questions = root / "FastChat" / "fastchat" / "llm_judge" / "data" / "mt_bench"
    questions.mkdir(parents=True)
    shutil.copy(real_data_dir / "mt_bench" / "question.jsonl", questions)


def serve(root: Path):
    """An HTTP server on 127.0.0.1 for the files in `root`; yields its Upstream."""
    truncated: set[str] = set()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path not in truncated:
                return super().do_GET()
            body = (root / self.path.lstrip("/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])  # then the connection closes: a cut download

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    yield Upstream(root, f"{base}/RouteLLM", f"{base}/FastChat", truncated)
    server.shutdown()
    server.server_close()


@pytest.fixture()
def upstream(real_data_dir, tmp_path):
    """The real files, served as upstream lays them out."""
    lay_out(real_data_dir, tmp_path / "www")
    yield from serve(tmp_path / "www")


@pytest.fixture()
def small_upstream(real_data_dir, tmp_path):
    """The same files with MMLU and GSM8K cut to 40 rows each (2,600 rows in all)."""
    lay_out(real_data_dir, tmp_path / "www", rows=40)
    yield from serve(tmp_path / "www")


def leftovers(folder: Path) -> list[Path]:
    """Anything a failed fetch left under `folder` (it should leave nothing)."""
    return sorted(folder.rglob("*")) if folder.exists() else []


def test_fetch_lays_out_loadable_logs(upstream, tmp_path):
    dest = tmp_path / "raw" / "routellm"
    written = fetch(dest, checksums=upstream.digests, **upstream.urls)
    assert len(written) == len(file_plan()) == 57 + 4
    loaded = load_logs([dest])
    assert loaded.rejects == [] and {r["source"] for r in loaded.rows} == {"mmlu", "gsm8k", "mt_bench"}
    assert fetch(dest, **upstream.urls) == []  # present files are kept
    assert len(fetch(dest, force=True, checksums=upstream.digests, **upstream.urls)) == 61
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == ["routellm"]  # no staging folder left


def test_unreachable_server_is_a_clear_error(tmp_path):
    with pytest.raises(DownloadError, match="could not download http://127.0.0.1:9/.*offline"):
        fetch(tmp_path / "routellm", routellm_url="http://127.0.0.1:9", fastchat_url="http://127.0.0.1:9")
    assert leftovers(tmp_path) == []


def test_a_missing_file_leaves_no_partial_logs(upstream, tmp_path):
    """A 404 after 55 good files: nothing is left where training would take it for logs."""
    served = upstream.digests
    (upstream.root / "RouteLLM" / "routellm" / "evals" / "mmlu" / "responses" / "mmlu_virology.csv").unlink()
    with pytest.raises(DownloadError, match="could not download http://127.0.0.1:.*mmlu_virology.csv.*404"):
        fetch(tmp_path / "raw" / "routellm", checksums=served, **upstream.urls)
    assert leftovers(tmp_path / "raw") == []


def test_a_cut_download_is_an_error(upstream, tmp_path):
    """The server announces the file's length and closes the connection halfway: urllib returns
    the half without complaint, so the fetch checks the length itself."""
    upstream.truncated.add("/RouteLLM/routellm/evals/gsm8k/gsm8k_responses.csv")
    size = (upstream.root / "RouteLLM" / "routellm" / "evals" / "gsm8k" / "gsm8k_responses.csv").stat().st_size
    with pytest.raises(DownloadError, match=f"gsm8k_responses.csv.*incomplete: {size // 2} of {size} bytes"):
        fetch(tmp_path / "raw" / "routellm", checksums=upstream.digests, **upstream.urls)
    assert leftovers(tmp_path / "raw") == []


def test_each_file_is_checked_against_its_pinned_sha256(upstream, real_data_dir, tmp_path):
    digests = {
        relative: hashlib.sha256((real_data_dir / relative).read_bytes()).hexdigest() for relative, _ in file_plan()
    }
    assert len(fetch(tmp_path / "good", checksums=digests, **upstream.urls)) == 61
    wrong = {**digests, "mt_bench/judgements.jsonl": "0" * 64}
    with pytest.raises(
        DownloadError,
        match=f"mt_bench/judgements.jsonl.*SHA-256 {digests['mt_bench/judgements.jsonl']}.*pinned {'0' * 64}",
    ):
        fetch(tmp_path / "bad", checksums=wrong, **upstream.urls)
    assert leftovers(tmp_path / "bad") == [] and not (tmp_path / "bad.part").exists()


def test_every_planned_file_is_pinned_and_the_unaltered_shared_copies_match(real_data_dir):
    """The pins were read from the upstream repositories at the pinned commits. The shared copies
    of the MT-Bench files and the licence are upstream's bytes (only MMLU and GSM8K rows are kept
    back), so they must match; the cut files must not."""
    assert set(PINNED_SHA256) == {relative for relative, _ in file_plan()}
    assert all(len(digest) == 64 and int(digest, 16) >= 0 for digest in PINNED_SHA256.values())
    same = {
        relative
        for relative, digest in PINNED_SHA256.items()
        if hashlib.sha256((real_data_dir / relative).read_bytes()).hexdigest() == digest
    }
    assert same == {"mt_bench/judgements.jsonl", "mt_bench/question.jsonl", "LICENSE"}


def test_the_pins_reject_a_mirror_serving_other_bytes_unless_told(upstream, tmp_path, monkeypatch):
    """By default every download must match its pin: the shared copies (rows kept back) do not,
    and nothing is kept. ROUTER_LOGS_SHA256 names the digests a deliberately different mirror serves."""
    with pytest.raises(
        DownloadError, match=rf"mmlu_\w+\.csv.*SHA-256 [0-9a-f]{{64}}, not the pinned [0-9a-f]{{64}}.*{CHECKSUMS_ENV}"
    ):
        fetch(tmp_path / "pinned", **upstream.urls)
    assert leftovers(tmp_path / "pinned") == [] and not (tmp_path / "pinned.part").exists()
    for key, value in upstream.env.items():
        monkeypatch.setenv(key, value)
    assert len(fetch(tmp_path / "told", **upstream.urls)) == 61
    (tmp_path / "bad.json").write_text('{"LICENSE": "not-a-digest"}')
    monkeypatch.setenv(CHECKSUMS_ENV, str(tmp_path / "bad.json"))
    with pytest.raises(DownloadError, match=f"{CHECKSUMS_ENV}=.*bad.json: must be a JSON object"):
        fetch(tmp_path / "bad", **upstream.urls)


def test_plan_is_pinned_to_one_commit():
    urls = [url for _, url in file_plan()]
    assert all("0b64fdafe049e596a3f5657c219329f24af24198" in u for u in urls if "RouteLLM" in u)
    assert Path("mmlu/mmlu_anatomy.csv") in {Path(rel) for rel, _ in file_plan()}


def fresh_clone_train(clone: Path, upstream: Upstream, *args: str) -> subprocess.CompletedProcess:
    """`python -m pipelines.train` run from `clone`, a folder with no data/raw/routellm and no
    ../shared, without ROUTER_DATA_DIR, fetching from the local server."""
    clone.mkdir(exist_ok=True)
    assert not (clone.parent / "shared").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("ROUTER_DATA_DIR", "MLFLOW_TRACKING_URI")}
    env.update(upstream.env, PYTHONPATH=str(ROOT), COLUMNS="400", HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "pipelines.train", *args],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_train_on_a_fresh_clone_fetches_the_pinned_logs(small_upstream, encoder_cache, tmp_path):
    upstream = small_upstream
    clone = tmp_path / "clone"
    seed_store(f"sqlite:///{tmp_path}/m.db", encoder_cache)  # the subject is the fetch, not making a store
    done = fresh_clone_train(
        clone,
        upstream,
        "--bundle",
        str(tmp_path / "bundle"),
        "--set",
        f"cache_dir={encoder_cache}",
        "--set",
        f"tracking_uri=sqlite:///{tmp_path}/m.db",
        "--set",
        f"artifact_root={tmp_path}/art",
        "--set",
        "min_rows_per_tag=20",
        "--set",
        "cv_folds=0",
    )  # the subject is the fetch: one fit, not six
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert (
        "no outcome logs in" in said
        and f"downloading the pinned public RouteLLM logs from {upstream.routellm_url}" in said
        and "61 files" in said
        and "61 matching their pinned SHA-256" in said
    )
    fetched = clone / "data" / "raw" / "routellm"
    assert sorted(str(p.relative_to(fetched)) for p in fetched.rglob("*") if p.is_file()) == sorted(
        relative for relative, _ in file_plan()
    )
    assert not (clone / "data" / "raw" / "routellm.part").exists()
    prompts = {row["prompt"] for row in load_logs([fetched]).rows}
    assert f"logs: {len(prompts)} prompts" in done.stdout  # the training read what was fetched
    assert (tmp_path / "bundle" / "manifest.json").exists() and "APGR" in done.stdout


def test_train_says_what_it_tried_when_the_fetch_fails(upstream, tmp_path):
    (upstream.root / "RouteLLM" / "LICENSE").unlink()
    clone = tmp_path / "clone"
    done = fresh_clone_train(clone, upstream, "--bundle", str(tmp_path / "bundle"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    error = " ".join(done.stderr.split())
    for searched in (
        "ROUTER_DATA_DIR is not set",
        "data/raw/routellm",
        "../shared/data/routellm",
        f"{upstream.routellm_url}/LICENSE",
        "404",
        "--data PATH",
        "make data",
    ):
        assert searched in error, (searched, error)
    assert leftovers(clone / "data" / "raw") == []


def test_train_never_fetches_instead_of_the_data_it_was_given(upstream, tmp_path):
    clone = tmp_path / "clone"
    done = fresh_clone_train(clone, upstream, "--data", "missing/logs", "--bundle", str(tmp_path / "bundle"))
    assert done.returncode != 0 and "missing/logs" in done.stderr
    assert "downloading" not in done.stdout + done.stderr and not (clone / "data").exists()
