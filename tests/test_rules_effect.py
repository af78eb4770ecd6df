"""`make evaluate POLICY=...`: a policy file's per-rule counts and effect on logged traffic
(evaluation.rules_effect), checked against the SDK applying the same policy request by request, on
the slice bundle and the test rows of the real RouteLLM slice."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from evaluation.fallback import fallback_quality
from evaluation.rows import Rows
from evaluation.rules_effect import rules_effect
from serving import Router
from serving._contract import CLOUD, EDGE, FALLBACK
from serving.policy import NoFeasibleEndpoint, PolicySet
from tests.conftest import ROOT, make_env

pytestmark = pytest.mark.real_data

POLICY = {
    "rules": [
        {
            "name": "autocomplete-local",
            "when": {"metadata": {"feature": "autocomplete"}},
            "then": "force",
            "endpoint": "edge",
        },
        # long prompts may not run on the edge; long questions may not run in the cloud either
        {"name": "long-not-edge", "when": {"min_tokens": 80}, "then": "forbid", "endpoint": "edge"},
        {
            "name": "calc-not-cloud",
            "when": {"matches": r"\?", "min_tokens": 80},
            "then": "forbid",
            "endpoint": "cloud",
        },
        {"name": "math-to-cloud", "when": {"matches": r"\d+\s*[-+*/]\s*\d+"}, "then": "route", "zone": "cloud"},
        {"name": "exact-edge-first", "when": {"precision": "exact"}, "then": "prefer", "endpoint": "edge"},
    ]
}


@pytest.fixture(scope="module")
def routed(bundle, small_routellm):
    """The slice's rows (every outcome known) routed by the slice bundle, as `make evaluate` routes them."""
    from rich.console import Console

    from evaluation.config import EvalConfig
    from pipelines.evaluate import load_rows

    router = Router.load(bundle, strict=True)
    config = EvalConfig(bundle=str(bundle), logs=[str(small_routellm)], policies=["learned"], mlflow=False)
    frame, _, _, _ = load_rows(config, router.manifest, Console(quiet=True))
    frame = frame[frame["edge_quality"].notna() & frame["cloud_quality"].notna()].sample(n=600, random_state=0)
    return router, Rows.route(router, frame)


def test_counts_and_zones_equal_the_sdk_applying_the_policy(routed, bundle, tmp_path):
    router, rows = routed
    policy = PolicySet.from_dict(POLICY)
    effect = rules_effect(rows, policy)
    # The SDK, one request at a time, with the same policy.
    governed = Router.load(bundle, strict=True, policy=policy)
    fired, zones, closed = [], [], 0
    for prompt, precision in zip(rows.prompts, rows.precisions):
        try:
            decision = governed.route(prompt, precision=precision)
        except NoFeasibleEndpoint:
            closed += 1
            continue
        fired.append(decision.rule)
        zones.append(decision.zone)
    assert effect["no_feasible_endpoint"]["requests"] == closed > 0
    assert effect["no_feasible_endpoint"]["by_rules"] == {"long-not-edge + calc-not-cloud": closed}
    for name, counts in effect["rules"].items():
        assert counts["requests"] == fired.count(name), name
    assert effect["no_rule"] == fired.count(None)
    assert effect["rules"]["autocomplete-local"]["requests"] == 0  # no metadata given
    assert all(effect["rules"][name]["requests"] > 0 for name in ("long-not-edge", "math-to-cloud", "exact-edge-first"))
    assert effect["zones"]["with_rules"] == {z: zones.count(z) for z in (EDGE, FALLBACK, CLOUD)}
    assert sum(effect["zones"]["without_rules"].values()) == effect["servable_rows"] == len(rows) - closed
    # A route-to-cloud rule moves requests into the cloud zone only.
    moves = effect["rules"]["math-to-cloud"]["zone_changes"]
    assert moves and all(move.endswith("->cloud") for move in moves)


def test_metadata_stands_for_every_request_and_figures_are_exact_expectations(routed):
    _, rows = routed
    effect = rules_effect(rows, PolicySet.from_dict(POLICY), metadata={"feature": "autocomplete"}, catch_rate=0.5)
    # The force decides every request: every one stays on the edge alone (no feasible-endpoint clash:
    # a force of the edge against a forbid of the edge clashes, so long prompts have no endpoint).
    forced = effect["rules"]["autocomplete-local"]
    long_rows = int((rows.n_tokens >= 80).sum())
    assert forced["requests"] == len(rows) - long_rows
    assert effect["no_feasible_endpoint"]["requests"] == long_rows
    assert effect["zones"]["with_rules"] == {EDGE: effect["servable_rows"], FALLBACK: 0, CLOUD: 0}
    servable = rows.n_tokens < 80
    figures = effect["figures"]
    assert figures["quality_with_fallback"]["with_rules"] == pytest.approx(rows.q_edge[servable].mean(), abs=1e-12)
    assert figures["cloud_first_share"]["with_rules"] == 0.0
    # Without the rules: each zone's exact expectation, recomputed here.
    zones = np.asarray(rows.zones, dtype=object)[servable]
    qe, qc = rows.q_edge[servable], rows.q_cloud[servable]
    expected = np.where(zones == CLOUD, qc, np.where(zones == FALLBACK, fallback_quality(qe, qc, 0.5), qe)).mean()
    assert figures["quality_with_fallback"]["without_rules"] == pytest.approx(expected, abs=1e-12)
    low, high = figures["quality_with_fallback"]["interval"]
    assert low <= figures["quality_with_fallback"]["difference"] <= high


def test_make_evaluate_with_a_policy_file(bundle, small_routellm, tmp_path):
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(POLICY))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "pipelines.evaluate", "--bundle", str(bundle), "--logs", str(small_routellm)]
    command += [
        "--out",
        str(out),
        "--policies",
        "learned,oracle",
        "--set",
        "mlflow=false",
        "--policy",
        str(policy_file),
    ]

    def evaluate(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([*command, *extra], cwd=ROOT, env=make_env(), capture_output=True, text=True, timeout=600)

    done = evaluate("--metadata", "feature=chat")
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["rules"]["metadata"] == {"feature": "chat"}
    assert set(metrics["rules"]["rules"]) == {rule["name"] for rule in POLICY["rules"]}
    report = (out / "report.md").read_text()
    assert "## Policy rules" in report and "long-not-edge + calc-not-cloud" in report
    # A bad policy file fails before any routing, naming the file and the rule; so does bad metadata.
    policy_file.write_text(json.dumps({"rules": [{"name": "x", "then": "force", "endpoint": "moon"}]}))
    done = evaluate()
    assert done.returncode == 2 and "policy.json" in done.stderr and "moon" in done.stderr
    done = evaluate("--metadata", "feature")
    assert done.returncode == 2 and "KEY=VALUE" in done.stderr
