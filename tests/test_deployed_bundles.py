"""Bundles already deployed keep deciding exactly as they do: an earlier SDK, run from git in a
subprocess, and today's decide alike on the same bundles (two-endpoint and N-endpoint), with and
without a policy, in batches and one prompt at a time. Every field the earlier SDK wrote must be
equal; a two-endpoint decision's `endpoint` and `cascade`, which the earlier SDK left empty, must
say what its target and zone said."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from serving import Router
from serving.policy import NoFeasibleEndpoint
from tests.conftest import ROOT
from tests.test_endpoint_bundle import HARD, TOPICS
from tests.test_endpoint_bundle import trained as trained  # noqa: F401  # the session's N-endpoint bundle
from tests.test_endpoint_record import in_the_earlier_spelling

# The SDK before the one routing core (issue 46), and before N-endpoint bundles.
BEFORE_CORE = "5adae27"
BEFORE_N_ENDPOINTS = "80a72ca"
PRECISIONS = [None, "exact", "standard", "tolerant"]
# Each prompt's metadata, in turn: none, and one that each policy below reads (one rule each, so
# that no forbid and prefer match together: that case's reason now names the prefer too).
METADATA = [None, {"tier": "free"}, {"privacy": "local"}, {"feature": "offline"}]

OLD_SDK = """
import json, sys
import serving
from serving import Router
request = json.load(sys.stdin)
assert serving.__file__.startswith(request["old"]), serving.__file__
router = Router.load(request["bundle"], strict=True, **({"policy": request["policy"]} if request["policy"] else {}))
def one(prompt, precision, metadata):
    try:
        return router.route(prompt, precision=precision, **({"metadata": metadata} if metadata else {})).to_dict()
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error)}
single = [one(*case) for case in zip(request["prompts"], request["precisions"], request["metadata"])]
batch = None if request["policy"] else [d.to_dict() for d in router.route_batch(request["prompts"], request["precisions"])]
json.dump({"batch": batch, "single": single}, sys.stdout)
"""


def two_endpoint_policy(folder: Path) -> Path:
    path = folder / "policy.json"
    rules = [
        {"name": "free-tier-edge", "then": "prefer", "endpoint": "edge", "when": {"metadata": {"tier": "free"}}},
        {
            "name": "private-stays-local",
            "then": "forbid",
            "endpoint": "cloud",
            "when": {"metadata": {"privacy": "local"}},
        },
        {"name": "offline", "then": "force", "endpoint": "edge", "when": {"metadata": {"feature": "offline"}}},
        {
            "name": "ibans-local",
            "then": "forbid",
            "endpoint": "cloud",
            "when": {"matches": ["[A-Z]{2}[0-9]{2} ?[0-9]{4}"]},
        },
    ]
    path.write_text(json.dumps({"rules": rules}))
    return path


def n_endpoint_policy(folder: Path, names: tuple[str, ...]) -> Path:
    path = folder / "policy.json"
    device, cloud = names[0], names[-1]
    rules = [
        {"name": "free-tier-first", "then": "prefer", "endpoint": names[1], "when": {"metadata": {"tier": "free"}}},
        {
            "name": "private-stays-local",
            "then": "forbid",
            "endpoint": cloud,
            "when": {"metadata": {"privacy": "local"}},
        },
        {"name": "offline", "then": "force", "endpoint": device, "when": {"metadata": {"feature": "offline"}}},
    ]
    path.write_text(json.dumps({"rules": rules}))
    return path


def old_sdk(commit: str, folder: Path) -> Path:
    """The SDK at `commit`, from git, in `folder`; fails loudly without the history (a shallow clone)."""
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    assert found.returncode == 0, f"commit {commit} is not in this clone's history: clone it whole, not shallow"
    folder.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "serving"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def without_familiarity(folder: Path) -> Path:
    """The N-endpoint bundle in `folder` as bundles were deployed before N-endpoint bundles had a
    familiarity reference: its manifest without `novelty` (re-digested; the graph's novelty output is
    then read by nobody). The earlier SDK would read it and decide as without it; today's would give
    unfamiliar prompts the unfamiliar policy (tests/test_bundle_kinds.py)."""
    from serving.bundle._bundle import manifest_digest

    data = json.loads((folder / "manifest.json").read_text())
    data.pop("novelty")
    data["manifest_sha256"] = manifest_digest(data)
    (folder / "manifest.json").write_text(json.dumps(data, indent=2))
    return folder


def decided_by(old: Path, bundle: Path, policy: Path | None, prompts, precisions, metadata) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", OLD_SDK],
        input=json.dumps(
            {
                "bundle": str(bundle),
                "policy": str(policy) if policy else None,
                "prompts": prompts,
                "precisions": precisions,
                "metadata": metadata,
                "old": str(old),
            }
        ),
        capture_output=True,
        text=True,
        cwd=old,
        env={"PYTHONPATH": str(old), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        check=True,
    )
    return json.loads(run.stdout)


def decided_now(router: Router, prompts, precisions, metadata) -> list[dict]:
    out = []
    for prompt, precision, given in zip(prompts, precisions, metadata):
        try:
            out.append(router.route(prompt, precision=precision, metadata=given).to_dict())
        except NoFeasibleEndpoint as error:
            out.append({"error": type(error).__name__, "message": str(error)})
    return out


def assert_same(before: dict, now: dict, *, two_endpoints: bool) -> None:
    """Every field the earlier SDK wrote is equal (a two-endpoint decision's empty endpoint and
    cascade aside, which must now say its target and zone)."""
    if "error" in before:
        assert now.get("error") == before["error"], (before, now)
        return
    skipped = ("endpoint", "cascade") if two_endpoints else ()
    assert {k: now.get(k) for k in before if k not in skipped} == {k: v for k, v in before.items() if k not in skipped}
    if two_endpoints:
        assert now["endpoint"] == now["target"]
        assert now["cascade"] in ([["edge", "cloud"], ["edge"]] if now["target"] == "edge" else [["cloud"]])


def cases(prompts: list[str]) -> tuple[list[str], list[str | None], list[dict | None]]:
    return prompts, [PRECISIONS[i % 4] for i in range(len(prompts))], [METADATA[i % 4] for i in range(len(prompts))]


@pytest.mark.real_data
@pytest.mark.parametrize("with_policy", [False, True], ids=["no policy", "policy"])
def test_two_endpoint_bundles_decide_as_before_the_one_routing_core(bundle, trained_small, tmp_path, with_policy):
    old = old_sdk(BEFORE_CORE, tmp_path / "old")
    prompts, precisions, metadata = cases([str(p) for p in trained_small[1].test.prompts[:300]] + HARD)
    policy = two_endpoint_policy(tmp_path) if with_policy else None
    before = decided_by(old, bundle, policy, prompts, precisions, metadata)
    router = Router.load(bundle, strict=True, policy=policy)
    now = decided_now(router, prompts, precisions, metadata)
    if policy is not None:
        assert {d.get("rule") for d in now} >= {None, "free-tier-edge", "private-stays-local", "offline"}
    else:
        batch = [d.to_dict() for d in router.route_batch(prompts, precisions)]
        for new, old_decision in zip(batch, before["batch"]):
            assert_same(old_decision, new, two_endpoints=True)
    assert {d["zone"] for d in now} >= {"edge", "cloud"}
    for new, old_decision in zip(now, before["single"]):
        assert_same(old_decision, new, two_endpoints=True)


@pytest.mark.parametrize("with_policy", [False, True], ids=["no policy", "policy"])
def test_n_endpoint_bundles_decide_as_before_the_one_routing_core(trained, tmp_path, with_policy):  # noqa: F811
    made, public = trained
    old = old_sdk(BEFORE_CORE, tmp_path / "old")
    prompts, precisions, metadata = cases([f"{topic} ({i})" for i in range(40) for topic in TOPICS] + HARD)
    names = Router.load(made.folder, strict=True, public_key=public).endpoint_names
    policy = n_endpoint_policy(tmp_path, names) if with_policy else None
    # as a deployed bundle's manifest says its prices (per 1k tokens; the writer now says per 1M,
    # which the earlier SDK does not read): tests/test_endpoint_record.py
    deployed = without_familiarity(in_the_earlier_spelling(made.folder, tmp_path / "deployed"))
    before = decided_by(old, deployed, policy, prompts, precisions, metadata)
    router = Router.load(deployed, strict=True, policy=policy)
    now = decided_now(router, prompts, precisions, metadata)
    if policy is None:
        batch = [d.to_dict() for d in router.route_batch(prompts, precisions)]
        for new, old_decision in zip(batch, before["batch"]):
            assert_same(old_decision, new, two_endpoints=False)
    assert len({d["endpoint"] for d in now if "endpoint" in d}) >= 2
    for new, old_decision in zip(now, before["single"]):
        assert_same(old_decision, new, two_endpoints=False)


@pytest.mark.real_data
def test_two_endpoint_bundles_decide_as_before_n_endpoint_bundles(bundle, trained_small, tmp_path):
    """The same zone, target, score and every other field as the SDK before N-endpoint bundles."""
    old = old_sdk(BEFORE_N_ENDPOINTS, tmp_path / "old")
    prompts, precisions, _ = cases([str(p) for p in trained_small[1].test.prompts[:300]] + HARD)
    before = decided_by(old, bundle, None, prompts, precisions, [None] * len(prompts))
    router = Router.load(bundle, strict=True)
    batch = [d.to_dict() for d in router.route_batch(prompts, precisions)]
    for new, old_decision in [
        *zip(batch, before["batch"]),
        *zip(decided_now(router, prompts, precisions, [None] * len(prompts)), before["single"]),
    ]:
        assert new["expected"] == {"edge": new["p_edge"], "cloud": new["p_cloud"]}
        assert_same(old_decision, new, two_endpoints=True)
