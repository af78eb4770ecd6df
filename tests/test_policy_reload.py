"""A policy file caught half-written is never loaded (serving.bundle._watcher.PolicyWatcher,
PolicySet.parse): the first part of a YAML policy is often valid YAML with fewer rules, so a YAML
policy file must end with the line `...`; a JSON document cut short never parses. The file here
is rewritten in place in two halves, with the watcher's polling thread running, and requests
with privacy=local are routed in between: in the router, and through the real proxy process
(`python -m serving serve --policy`) in front of two stub upstreams on 127.0.0.1 that record
what they receive. Before, the watcher loaded the first half, and through the proxy 65 requests
with privacy=local reached the cloud before the next poll."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import httpx2
import pytest

from serving import PolicyWatcher, Router
from serving.policy import PolicyFileError, PolicySet
from tests.chat_stubs import fresh_stubs, stubs  # noqa: F401  (fixtures: edge and cloud stubs, reset per test)
from tests.conftest import ROOT

# Every request goes to the cloud first, unless it is declared private. The rewrite adds a rule
# before the privacy rule, so its first half is a valid policy without the privacy rule.
CLOUD_FIRST = "- name: cloud-first\n  then: prefer\n  endpoint: cloud\n"
EXACT = "- name: exact-cloud\n  when: {precision: exact}\n  then: prefer\n  endpoint: cloud\n"
LOCAL_ONLY = "- name: local-only\n  when:\n    metadata: {privacy: local}\n  then: forbid\n  endpoint: cloud\n"
BEFORE = "rules:\n" + CLOUD_FIRST + LOCAL_ONLY + "...\n"
AFTER = "description: the same, and exact answers from the cloud\nrules:\n" + CLOUD_FIRST + EXACT + LOCAL_ONLY + "...\n"
FIRST_HALF = AFTER[: AFTER.index("- name: local-only")]
PRIVATE = {"privacy": "local"}
HALF_VERSION = hashlib.sha256(FIRST_HALF.encode()).hexdigest()[:12]  # what a PolicySet of it would be
AFTER_VERSION = hashlib.sha256(AFTER.encode()).hexdigest()[:12]


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.01)


def test_the_first_half_is_a_valid_yaml_policy_without_the_privacy_rule_and_is_refused(tmp_path):
    """What makes the case: without the end marker the half would load, one rule short."""
    import yaml

    half = yaml.safe_load(FIRST_HALF)
    assert [rule["name"] for rule in half["rules"]] == ["cloud-first", "exact-cloud"]
    assert [r.name for r in PolicySet.from_dict(half).rules] == ["cloud-first", "exact-cloud"]
    with pytest.raises(PolicyFileError, match=r"policy.yaml: a YAML policy file ends with the line `\.\.\.`"):
        PolicySet.parse(FIRST_HALF.encode(), source=str(tmp_path / "policy.yaml"))
    assert len(PolicySet.parse(AFTER.encode(), source="policy.yaml").rules) == 3
    assert len(PolicySet.parse(AFTER.replace("...\n", "... # end\n\n").encode(), source="p.yml").rules) == 3


def test_the_watcher_never_loads_a_yaml_policy_caught_half_written(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(BEFORE)
    router = Router.load(tmp_path / "no-bundle", policy=path)
    assert router.route("hello", metadata=PRIVATE).forbidden == ("cloud",)
    watcher = PolicyWatcher(router, path, interval_s=0.01).start()
    try:
        with path.open("w") as file:  # truncated, then written in two parts
            file.write(FIRST_HALF)
            file.flush()
            wait_for(  # refused, or (before) loaded
                lambda: HALF_VERSION in (router.policy.version, getattr(watcher.last_reload, "file_version", None)),
                "the watcher read the first half",
            )
            for _ in range(50):  # the polling thread reads the same half meanwhile
                decision = router.route("hello", metadata=PRIVATE)
                assert decision.forbidden == ("cloud",) and decision.target == "edge", decision.reason
            assert not watcher.last_reload.reloaded and "ends with the line `...`" in watcher.last_reload.reason
            file.write(AFTER[len(FIRST_HALF) :])
        wait_for(lambda: watcher.last_reload.reloaded, "the watcher loaded the whole file")
    finally:
        watcher.stop()
    assert [r.name for r in router.policy.rules] == ["cloud-first", "exact-cloud", "local-only"]
    assert router.route("hello", metadata=PRIVATE).forbidden == ("cloud",)
    assert router.route("hello").target == "cloud"


class ServingProcess:
    """`python -m serving serve` on an ephemeral port of 127.0.0.1, its stderr read line by line
    on a thread (`lines`)."""

    def __init__(self, args: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "serving", "serve", "--port", "0", "--no-access-log", *args],
            cwd=ROOT,
            env={**os.environ, "ROUTER_PROXY_TOKEN": ""},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        try:
            wait_for(lambda: self.port is not None or self.process.poll() is not None, "serving on ...", 60)
        except BaseException:
            self.process.kill()
            raise
        assert self.port is not None, "".join(self.lines)

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    @property
    def port(self) -> int | None:
        found = [re.search(r"serving on http://127\.0\.0\.1:(\d+)/v1", line) for line in self.lines]
        return next((int(match.group(1)) for match in found if match), None)

    def said(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def test_through_the_proxy_no_private_request_reaches_the_cloud_while_the_policy_is_half_written(tmp_path, stubs):
    edge, cloud = stubs
    path = tmp_path / "policy.yaml"
    path.write_text(BEFORE)
    upstreams = ["--edge-url", edge.url, "--edge-model", "edge-model", "--cloud-url", cloud.url, "--cloud-model", "c"]
    proxy = ServingProcess(
        ["--bundle", str(tmp_path / "none"), *upstreams, "--policy", str(path), "--policy-interval-s", "0.01"]
    )
    url = f"http://127.0.0.1:{proxy.port}/v1/chat/completions"

    def ask(metadata: dict[str, str] | None = None) -> str:
        body = {"model": "router", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}
        response = httpx2.post(url, json={**body, **({"metadata": metadata} if metadata else {})}, timeout=20)
        assert response.status_code == 200, response.text
        return response.headers["x-router-served-by"]

    try:
        assert ask() == "cloud" and len(cloud.received) == 1  # the stubs see where requests go
        cloud.received.clear()
        with path.open("w") as file:
            file.write(FIRST_HALF)
            file.flush()
            wait_for(lambda: proxy.said(HALF_VERSION), "the proxy's watcher read the first half (refused or loaded)")
            served = [ask(PRIVATE) for _ in range(40)]
            file.write(AFTER[len(FIRST_HALF) :])
        wait_for(lambda: proxy.said(f"version {AFTER_VERSION}, 3 rules"), "the proxy loaded the whole file")
        served += [ask(PRIVATE) for _ in range(10)]
        leaked = f"{served.count('cloud')} of 50 private requests served by the cloud; the proxy said:\n"
        assert served == ["edge"] * 50 and cloud.received == [], leaked + "".join(proxy.lines)
        assert len(edge.received) == 50
        (kept,) = [line for line in proxy.lines if f"(file version {HALF_VERSION})" in line]
        assert "policy not reloaded, keeping version" in kept and "ends with the line `...`" in kept
        assert proxy.said("3 rules (were 2)") == 1
        assert ask() == "cloud" and json.dumps(cloud.received[-1].body).count("privacy") == 0
    finally:
        proxy.stop()
