"""`make data` against a local HTTP server laid out like the upstream repositories."""
from __future__ import annotations

import functools
import http.server
import shutil
import threading
from pathlib import Path

import pytest

from data.logs import load_logs
from data.routellm import SUBJECT_DOMAIN
from pipelines.fetch_data import DownloadError, fetch, file_plan


@pytest.fixture()
def upstream(real_data_dir, tmp_path):
    """Serve the real files under the upstream paths (RouteLLM and FastChat) on 127.0.0.1."""
    root = tmp_path / "www"
    evals = root / "RouteLLM" / "routellm" / "evals"
    for subject in SUBJECT_DOMAIN:
        target = evals / "mmlu" / "responses" / f"mmlu_{subject}.csv"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(real_data_dir / "mmlu" / f"mmlu_{subject}.csv", target)
    (evals / "gsm8k").mkdir()
    shutil.copy(real_data_dir / "gsm8k" / "gsm8k_responses.csv", evals / "gsm8k")
    (evals / "mt_bench").mkdir()
    shutil.copy(real_data_dir / "mt_bench" / "judgements.jsonl", evals / "mt_bench")
    shutil.copy(real_data_dir / "LICENSE", root / "RouteLLM" / "LICENSE")
    questions = root / "FastChat" / "fastchat" / "llm_judge" / "data" / "mt_bench"
    questions.mkdir(parents=True)
    shutil.copy(real_data_dir / "mt_bench" / "question.jsonl", questions)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    yield {"routellm_url": f"{base}/RouteLLM", "fastchat_url": f"{base}/FastChat"}
    server.shutdown()


def test_fetch_lays_out_loadable_logs(upstream, tmp_path):
    dest = tmp_path / "raw" / "routellm"
    written = fetch(dest, **upstream)
    assert len(written) == len(file_plan()) == 57 + 4
    loaded = load_logs([dest])
    assert loaded.rejects == [] and {r["source"] for r in loaded.rows} == {"mmlu", "gsm8k", "mt_bench"}
    assert fetch(dest, **upstream) == []  # present files are kept
    assert len(fetch(dest, force=True, **upstream)) == 61
    assert not list(dest.rglob("*.part"))


def test_unreachable_server_is_a_clear_error(tmp_path):
    with pytest.raises(DownloadError, match="could not download http://127.0.0.1:9/.*offline"):
        fetch(tmp_path, routellm_url="http://127.0.0.1:9", fastchat_url="http://127.0.0.1:9")
    assert not list(tmp_path.rglob("*.part"))


def test_plan_is_pinned_to_one_commit():
    urls = [url for _, url in file_plan()]
    assert all("0b64fdafe049e596a3f5657c219329f24af24198" in u for u in urls if "RouteLLM" in u)
    assert Path("mmlu/mmlu_anatomy.csv") in {Path(rel) for rel, _ in file_plan()}
