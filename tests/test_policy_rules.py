"""Policy rules (serving.policy._rules): loading and its errors, how matching rules combine, each
condition, what a Decision and the outcome log say, reloading, and the privacy guarantee: a
request a rule keeps on the edge never reaches the cloud, in execute(), aexecute(), RoutedChat
and the proxy, fallbacks, exploration and shadow runs included. The HTTP tests run against stub
servers on 127.0.0.1 that record what they received (serving.testing.StubUpstream).

The router here is the rule table (no bundle), so the model's zone is known: a short prompt is
edge first, a long one (over 1024 tokens) goes to the cloud. The policy acts on any Decision alike.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import sys
import threading

import httpx2
import pytest

from serving import PolicyWatcher, Router
from serving._contract import PRECISIONS, ZONES
from serving.chat import Endpoint, RoutedChat
from serving.features._tokenizer import FastTokenizer
from serving.monitoring._outcome_log import OutcomeLog
from serving.policy import (
    DETECTORS,
    FallbackForbidden,
    NoFeasibleEndpoint,
    PolicyFileError,
    PolicySet,
    Rule,
)
from serving.policy._budgets import Spending, window
from serving.policy._rules import _Facts
from serving.proxy._app import build_app
from serving.proxy._config import ConfigError, ProxyConfig, add_arguments
from serving.proxy._serve import watchers_for
from serving.routing._rule_table import RuleRouter, as_policy
from serving.testing import Behaviour, LocalServer, StubUpstream
from tests.chat_stubs import fresh_stubs, stubs  # noqa: F401  (fixtures: edge and cloud stubs, reset per test)

EMAIL = "ana.vo@lin-mar.fr"
IBAN = "DE89 3704 0044 0532 0130 00"
PII_PROMPT = f"Please draft a reply to {EMAIL} confirming the transfer."
IBAN_PROMPT = f"Is the IBAN {IBAN} valid for a SEPA transfer?"
PLAIN = "What is 2 + 2?"
LONG = "word " * 1500  # the rule table sends it to the cloud
CLOUDY = "Our mortgage contract terms: " + LONG  # long, a domain keyword: with exact precision, score 1.0

PII_RULE = {"name": "pii-stays-local", "when": {"detected": ["email", "iban"]}, "then": "force", "endpoint": "edge"}
POLICY = {
    "rules": [
        PII_RULE,
        {"name": "local-only", "when": {"metadata": {"privacy": "local"}}, "then": "forbid", "endpoint": "cloud"},
        {
            "name": "research",
            "when": {"metadata": {"feature": ["research", "deep"]}},
            "then": "force",
            "endpoint": "cloud",
        },
        {"name": "exact-prefers-cloud", "when": {"precision": "exact"}, "then": "prefer", "endpoint": "cloud"},
    ]
}


def policy(*rules: dict) -> PolicySet:
    return PolicySet.from_dict({"rules": list(rules)})


@pytest.fixture()
def router(tmp_path) -> Router:
    return Router.load(tmp_path / "no-bundle", policy=PolicySet.from_dict(POLICY))


# --- loading and its errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "where", "says"),
    [
        ({**PII_RULE, "colour": "red"}, "key 'colour'", "unknown key"),
        ({**PII_RULE, "when": {"detected": ["email"], "sender": "x"}}, "key 'when.sender'", "unknown condition"),
        ({**PII_RULE, "when": {"detected": ["passport"]}}, "key 'when.detected'", "unknown detector 'passport'"),
        ({**PII_RULE, "when": {"detected": "email"}}, "key 'when.detected'", "list of detector names"),
        ({**PII_RULE, "endpoint": "gpu-box"}, "key 'endpoint'", "unknown endpoint 'gpu-box'; the endpoints are edge"),
        ({**PII_RULE, "then": "send"}, "key 'then'", "force, forbid, prefer, route"),
        ({**PII_RULE, "then": "route"}, "key 'zone'", "a route rule sets a zone"),
        ({"name": "r", "then": "route", "zone": "cloud", "endpoint": "cloud"}, "key 'endpoint'", "names a zone"),
        ({**PII_RULE, "zone": "cloud"}, "key 'zone'", "only route rules set a zone"),
        ({**PII_RULE, "when": {"matches": "(unclosed"}}, "key 'when.matches'", "not a regular expression"),
        ({**PII_RULE, "when": {"matches": []}}, "key 'when.matches'", "non-empty list"),
        ({**PII_RULE, "when": {"matches": {"pattern": "x", "head": 5}}}, "key 'when.matches.head'", "unknown key"),
        ({**PII_RULE, "when": {"matches": {"pattern": "x", "head_chars": -1}}}, "when.matches.head_chars", ">= 0"),
        ({**PII_RULE, "when": {"budget": {"key": "user", "limit": 1}}}, "key 'when.budget.period'", "hour, day, month"),
        ({**PII_RULE, "when": {"budget": {"key": "", "limit": 1, "period": "day"}}}, "when.budget.key", "required"),
        ({**PII_RULE, "when": {"budget": {"key": "u", "limit": -1, "period": "day"}}}, "when.budget.limit", ">= 0"),
        (
            {**PII_RULE, "when": {"budget": {"key": "u", "limit": 1, "period": "day", "cap": 2}}},
            "when.budget.cap",
            "unknown",
        ),
        ({**PII_RULE, "when": {"budget": 5}}, "key 'when.budget'", "must be an object"),
        ({**PII_RULE, "when": {"min_tokens": "10"}}, "key 'when.min_tokens'", "whole number"),
        ({**PII_RULE, "when": {"max_chars": True}}, "key 'when.max_chars'", "whole number"),
        ({**PII_RULE, "when": {"min_tokens": 10, "max_tokens": 5}}, "key 'when.min_tokens'", "never matches"),
        ({**PII_RULE, "when": {"metadata": {"tier": 3}}}, "key 'when.metadata.tier'", "string or a non-empty list"),
        ({**PII_RULE, "when": {"precision": "sloppy"}}, "key 'when.precision'", "unknown precision 'sloppy'"),
        ({**PII_RULE, "when": []}, "key 'when'", "object of conditions"),
        ({**PII_RULE, "name": "has spaces"}, "key 'name'", "1-64 letters"),
    ],
)
def test_a_bad_rule_is_named_by_index_name_and_key(rule, where, says):
    with pytest.raises(PolicyFileError) as caught:
        PolicySet.from_dict({"rules": [{"name": "first", "then": "forbid", "endpoint": "cloud"}, rule]})
    message = str(caught.value)
    assert "rules[1]" in message and where in message and says in message
    if isinstance(rule.get("name"), str) and " " not in rule["name"]:
        assert f"rules[1] ({rule['name']!r})" in message


def test_file_level_errors_name_the_problem(tmp_path):
    with pytest.raises(PolicyFileError, match="also the name of rules\\[0\\]"):
        PolicySet.from_dict({"rules": [PII_RULE, PII_RULE]})
    with pytest.raises(PolicyFileError, match="unknown key 'rule'"):
        PolicySet.from_dict({"rule": []})
    with pytest.raises(PolicyFileError, match="'rules' must be a list"):
        PolicySet.from_dict({"rules": {}})
    bad = tmp_path / "policy.json"
    bad.write_text('{"rules": [')
    with pytest.raises(PolicyFileError, match="policy.json is not valid JSON"):
        PolicySet.load(bad)
    with pytest.raises(PolicyFileError, match="cannot read policy file"):
        PolicySet.load(tmp_path / "missing.json")
    (tmp_path / "policy.txt").write_text("{}")
    with pytest.raises(PolicyFileError, match="name it .json"):
        PolicySet.load(tmp_path / "policy.txt")


def test_a_json_file_loads_and_a_bad_one_stops_the_router_even_when_not_strict(tmp_path):
    good = tmp_path / "policy.json"
    good.write_text(json.dumps(POLICY))
    loaded = PolicySet.load(good)
    assert [r.name for r in loaded.rules] == ["pii-stays-local", "local-only", "research", "exact-prefers-cloud"]
    assert loaded.source == str(good) and len(loaded.version) == 12
    assert Router.load(tmp_path / "no-bundle", policy=good).route(PII_PROMPT).rule == "pii-stays-local"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rules": [{**PII_RULE, "endpoint": "moon"}]}))
    with pytest.raises(PolicyFileError, match="unknown endpoint 'moon'"):
        Router.load(tmp_path / "no-bundle", policy=bad)  # strict=False: no silent routing without the rules


def test_yaml_files_load_with_pyyaml_and_name_the_extra_without_it(tmp_path, monkeypatch):
    path = tmp_path / "policy.yaml"
    path.write_text(
        "rules:\n  - name: pii-stays-local\n    when: {detected: [email]}\n    then: force\n    endpoint: edge\n...\n"
    )
    assert PolicySet.load(path).rules[0].detectors == (DETECTORS["email"],)
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if PyYAML were not installed
    with pytest.raises(
        PolicyFileError, match=r"needs PyYAML, the `yaml` extra \(pip install 'edge-cloud-router\[yaml\]'\)"
    ):
        PolicySet.load(path)


# --- how matching rules combine ---------------------------------------------------------------


def test_the_first_matching_force_wins(tmp_path):
    rules = policy(
        {"name": "a", "when": {"metadata": {"feature": "x"}}, "then": "force", "endpoint": "cloud"},
        {"name": "b", "when": {}, "then": "force", "endpoint": "edge"},
    )
    router = Router.load(tmp_path / "none", policy=rules)
    assert (router.route(PLAIN, metadata={"feature": "x"}).rule, router.route(PLAIN).rule) == ("a", "b")
    assert router.route(PLAIN, metadata={"feature": "x"}).zone == "cloud"


def test_a_forbid_holds_wherever_it_stands_and_a_force_against_it_leaves_nothing(tmp_path):
    rules = policy(
        {"name": "research", "when": {"metadata": {"feature": "research"}}, "then": "force", "endpoint": "cloud"},
        {"name": "pii", "when": {"detected": ["email"]}, "then": "forbid", "endpoint": "cloud"},
    )
    router = Router.load(tmp_path / "none", policy=rules)
    with pytest.raises(NoFeasibleEndpoint, match="'research' forces cloud, which policy 'pii' forbids") as caught:
        router.route(PII_PROMPT, metadata={"feature": "research"})
    assert caught.value.rules == ("research", "pii")
    assert router.route(PLAIN, metadata={"feature": "research"}).target == "cloud"


def test_every_endpoint_forbidden_is_an_error_never_a_fallback(tmp_path):
    rules = policy(
        {"name": "no-cloud", "when": {"detected": ["iban"]}, "then": "forbid", "endpoint": "cloud"},
        {"name": "no-edge", "when": {"min_chars": 10}, "then": "forbid", "endpoint": "edge"},
    )
    router = Router.load(tmp_path / "none", policy=rules)
    with pytest.raises(NoFeasibleEndpoint, match="'no-cloud', 'no-edge' forbid every endpoint") as caught:
        router.route(IBAN_PROMPT)
    assert caught.value.rules == ("no-cloud", "no-edge")
    assert router.route(PLAIN).forbidden == ("edge",)


def test_prefer_applies_without_a_force_and_skips_a_forbidden_endpoint(tmp_path):
    rules = policy(
        {"name": "prefer-cloud", "when": {"precision": "exact"}, "then": "prefer", "endpoint": "cloud"},
        {"name": "prefer-edge", "when": {}, "then": "prefer", "endpoint": "edge"},
        {"name": "local", "when": {"metadata": {"privacy": "local"}}, "then": "forbid", "endpoint": "cloud"},
    )
    router = Router.load(tmp_path / "none", policy=rules)
    exact = router.route(PLAIN, precision="exact")
    assert (exact.rule, exact.zone, exact.forbidden) == ("prefer-cloud", "cloud", ())
    long = router.route(LONG)  # the model says cloud; a preferred edge runs first, the cloud as fallback
    assert (long.rule, long.zone) == ("prefer-edge", "edge_with_cloud_fallback")
    local = router.route(PLAIN, precision="exact", metadata={"privacy": "local"})
    assert (local.rule, local.zone, local.forbidden) == ("local", "edge", ("cloud",))
    assert local.reason.startswith("policy 'local': forbids cloud; policy 'prefer-edge' prefers edge; model: ")


def test_no_matching_rule_leaves_the_models_decision_as_it_was(tmp_path, router):
    plain = Router.load(tmp_path / "no-bundle")  # the same path: the degraded reason names it
    for prompt in (PLAIN, LONG):
        assert router.route(prompt) == plain.route(prompt)
    assert router.route(PLAIN).rule is None and router.route(PLAIN).forbidden == ()


# --- conditions ------------------------------------------------------------------------------


def test_metadata_conditions_match_a_value_or_one_of_a_list(router):
    assert router.route(LONG, metadata={"privacy": "local"}).rule == "local-only"
    assert router.route(PLAIN, metadata={"feature": "deep"}).rule == "research"
    assert router.route(PLAIN, metadata={"feature": "chat"}).rule is None
    assert router.route(PLAIN, metadata={"privacy": "LOCAL"}).rule is None  # values compare exactly
    assert router.route(PLAIN, metadata={}).rule is None


@pytest.mark.parametrize("metadata", [{"tier": 1}, {1: "a"}, ["privacy", "local"], "privacy=local"])
def test_metadata_must_be_str_to_str(router, metadata):
    with pytest.raises(TypeError, match="metadata"):
        router.route(PLAIN, metadata=metadata)


def test_detected_content_conditions(router):
    for prompt in (PII_PROMPT, IBAN_PROMPT):
        decision = router.route(prompt)
        assert (decision.rule, decision.target, decision.zone, decision.forbidden) == (
            "pii-stays-local",
            "edge",
            "edge",
            ("cloud",),
        )
    # one digit off: the IBAN fails its check and nothing is detected
    assert router.route(IBAN_PROMPT.replace("DE89", "DE88")).rule is None


@pytest.mark.parametrize(
    ("when", "prompt", "matches"),
    [
        ({"min_tokens": 1000}, LONG, True),
        ({"min_tokens": 1000}, PLAIN, False),
        ({"max_tokens": 10}, PLAIN, True),
        ({"max_tokens": 10}, LONG, False),
        ({"min_chars": len(PLAIN)}, PLAIN, True),
        ({"min_chars": len(PLAIN) + 1}, PLAIN, False),
        ({"max_chars": len(PLAIN)}, PLAIN, True),
        ({"max_chars": len(PLAIN) - 1}, PLAIN, False),
        ({"min_tokens": 1, "max_chars": 100, "detected": ["email"]}, PII_PROMPT, True),
        ({"min_tokens": 1, "max_chars": 10, "detected": ["email"]}, PII_PROMPT, False),
    ],
)
def test_size_conditions_are_inclusive_and_all_conditions_must_hold(tmp_path, when, prompt, matches):
    router = Router.load(
        tmp_path / "none", policy=policy({"name": "r", "when": when, "then": "prefer", "endpoint": "cloud"})
    )
    assert (router.route(prompt).rule == "r") is matches


@pytest.mark.parametrize(
    ("matches", "prompt", "found"),
    [
        ("contract", "Review this CONTRACT clause", True),  # case-insensitive
        (["lease", r"\bcontract\b"], "a contractor's quote", False),  # any of a list; a regular expression
        (["lease", r"\bcontract\b"], "the lease ends in May", True),
        ({"pattern": "secret", "head_chars": 10}, "0123456789 secret", False),  # only the head is searched
        ({"pattern": "secret", "head_chars": 20}, "0123456789 secret", True),
    ],
)
def test_matches_finds_an_expression_in_the_prompt_or_its_head(tmp_path, matches, prompt, found):
    rules = policy({"name": "r", "when": {"matches": matches}, "then": "forbid", "endpoint": "cloud"})
    decision = Router.load(tmp_path / "none", policy=rules).route(prompt)
    assert (decision.rule == "r") is found


def test_a_route_rule_sets_the_zone_within_what_is_allowed(tmp_path):
    rules = policy(
        {"name": "local", "when": {"metadata": {"privacy": "local"}}, "then": "forbid", "endpoint": "cloud"},
        {"name": "quotes-checked", "when": {"matches": "quote"}, "then": "route", "zone": "edge_with_cloud_fallback"},
        {"name": "long-cloud", "when": {"min_tokens": 1025}, "then": "route", "zone": "cloud"},
        {"name": "rest-edge", "then": "route", "zone": "edge"},
    )
    router = Router.load(tmp_path / "none", policy=rules)
    quoted = router.route("quote " * 1500)  # the first matching route rule decides, not the later long-cloud
    assert (quoted.rule, quoted.zone, quoted.target) == ("quotes-checked", "edge_with_cloud_fallback", "edge")
    assert quoted.reason.startswith("policy 'quotes-checked': routes edge_with_cloud_fallback; model: ")
    assert (router.route(LONG).rule, router.route(LONG).zone) == ("long-cloud", "cloud")
    assert (router.route(PLAIN).rule, router.route(PLAIN).zone) == ("rest-edge", "edge")
    private = router.route(LONG, metadata={"privacy": "local"})  # routed to the cloud, which is forbidden
    assert (private.rule, private.zone, private.forbidden) == ("local", "edge", ("cloud",))
    assert "policy 'long-cloud' routes cloud" in private.reason


def test_route_rules_belong_to_the_two_endpoint_router():
    with pytest.raises(PolicyFileError, match="key 'then': route sets a zone of the two-endpoint router"):
        PolicySet.from_dict(
            {"rules": [{"name": "r", "then": "route", "zone": "edge"}]}, endpoints=("edge", "onprem", "cloud")
        )


def rule_table_cases(prompts: list[str]) -> list[tuple[str, str | None]]:
    """Real prompts under every precision, and long prompts with and without a domain keyword,
    inside and past the rule table's head (all three signals at once included)."""
    long_plain, long_finance = "word " * 1500, "word " * 1500 + " mortgage rates"
    keyword_late = "x" * 3000 + " the patient's diagnosis"  # past the first 2,048 characters
    extra = [long_plain, long_finance, "mortgage " + long_plain, keyword_late, "", "   "]
    return [(prompt, precision) for prompt in [*prompts, *extra] for precision in (None, *PRECISIONS)]


@pytest.mark.real_data
def test_the_rule_table_as_a_policy_file_gives_the_rule_tables_zones(bundle, trained_small, tmp_path):
    """serving.routing._rule_table.as_policy() on the learned router: each decision's zone is the rule table's
    (same tokenizer and head) on the test prompts of the real logs and constructed edge cases."""
    path = tmp_path / "rule_table.json"
    path.write_text(json.dumps(as_policy()))
    learned = Router.load(bundle, strict=True, policy=path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    table = RuleRouter(FastTokenizer(bundle / "tokenizer.json"), max_chars=manifest["feature_spec"]["max_chars"])
    cases = rule_table_cases(list(trained_small[1].held_out["prompt"].drop_duplicates()[:300]))
    zones = collections.Counter()
    for prompt, precision in cases:
        got, want = learned.route(prompt, precision=precision), table.route(prompt, precision=precision)
        assert (got.zone, got.n_tokens) == (want.zone, want.n_tokens), (prompt[:80], precision, got.reason, want.reason)
        assert got.rule is not None and got.rule.startswith("rule-table-")
        zones[got.zone] += 1
    assert set(zones) == set(ZONES)  # every zone was reached


def test_precision_conditions_include_none_declared(tmp_path):
    rules = policy({"name": "r", "when": {"precision": [None, "tolerant"]}, "then": "prefer", "endpoint": "cloud"})
    router = Router.load(tmp_path / "none", policy=rules)
    assert [router.route(PLAIN, precision=p).rule for p in (None, "tolerant", "exact")] == ["r", "r", None]


class CountingDetector:
    def __init__(self, name: str, found: bool) -> None:
        self.name, self.found, self.calls = name, found, 0

    def found_in(self, text: str) -> bool:
        self.calls += 1
        return self.found


def test_each_named_detector_runs_at_most_once_a_request_and_after_the_cheap_conditions():
    email, phone = CountingDetector("email", False), CountingDetector("phone", True)
    rules = [
        Rule(0, "a", "forbid", "cloud", detectors=(email,)),
        Rule(1, "b", "forbid", "edge", metadata=(("tier", frozenset({"free"})),), detectors=(phone,)),
        Rule(2, "c", "prefer", "edge", detectors=(email, phone)),
    ]
    verdict = PolicySet(rules).evaluate("text", 1, None, {})
    assert (email.calls, phone.calls) == (1, 1)  # "b" failed on metadata before running its detector
    assert verdict.preferred is not None and verdict.preferred.name == "c" and not verdict.forbidden_by
    assert PolicySet.from_dict(POLICY).detectors == ("email", "iban")
    request = _Facts(PII_PROMPT, 10, None, None)
    assert request.detected((DETECTORS["email"],)) and request.found == {"email": True}


def test_a_policy_reads_the_request_record_as_it_reads_the_facts_given_one_by_one():
    from serving import Request
    from serving.endpoints._capabilities import Needs

    policy = PolicySet.from_dict(POLICY)
    cases = [
        Request(PII_PROMPT),
        Request("Summarise our Q3 numbers", precision="exact", metadata={"tier": "free"}),
        Request("Describe this picture", needs=Needs(images=True)),
    ]
    for request in cases:
        by_record = policy.evaluate(request, 12)
        by_fields = policy.evaluate(request.text, 12, request.precision, request.metadata, None, request.needs)
        assert by_record == by_fields
    with pytest.raises(TypeError, match="in the Request"):
        policy.evaluate(cases[1], 12, "exact")


# --- what a decision and the outcome log say -------------------------------------------------


def test_the_decision_records_the_rule_in_reason_and_rule(router):
    decision = router.route(PII_PROMPT)
    assert decision.reason.startswith("policy 'pii-stays-local': forced edge; model: rule table score")
    assert decision.to_dict()["rule"] == "pii-stays-local" and decision.to_dict()["forbidden"] == [
        "cloud"
    ]  # its JSON form
    assert EMAIL not in decision.reason
    forced = router.route(PLAIN, metadata={"feature": "research"})
    assert (forced.target, forced.zone, forced.forbidden) == ("cloud", "cloud", ("edge",))
    assert forced.reason.startswith("policy 'research': forced cloud; model: ")
    batch = router.route_batch([PII_PROMPT, PLAIN], metadata=[None, {"feature": "research"}])
    assert [d.rule for d in batch] == ["pii-stays-local", "research"]


@pytest.mark.parametrize("privacy", ["text", "token_ids"])
def test_the_outcome_log_records_the_rule_and_never_the_detected_text(tmp_path, privacy):
    log = OutcomeLog(tmp_path / "logs", privacy=privacy)
    router = Router.load(tmp_path / "none", log=log, policy=PolicySet.from_dict(POLICY))
    router.execute(PII_PROMPT, edge=lambda p: "ok", cloud=lambda p: "cloud")
    router.execute(PLAIN, edge=lambda p: "ok", cloud=lambda p: "cloud")
    log.close()
    lines = [json.loads(line) for f in sorted(log.folder.glob("*.jsonl")) for line in f.read_text().splitlines()]
    (pii, plain) = [r for r in lines if r["type"] == "request"]
    assert (pii["rule"], pii["forbidden"], pii["served_by"]) == ("pii-stays-local", ["cloud"], "edge")
    assert (plain["rule"], plain["forbidden"]) == (None, [])
    if privacy == "text":  # the prompt is kept as the mode says; no other field quotes what was found
        assert EMAIL not in json.dumps({k: v for k, v in pii.items() if k != "prompt"})
    else:
        assert all(EMAIL not in f.read_text() for f in log.folder.glob("*.jsonl"))


# --- reloading -------------------------------------------------------------------------------


def test_the_watcher_reloads_a_changed_file_and_keeps_the_policy_when_the_new_file_is_bad(tmp_path, caplog):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"rules": [PII_RULE]}))
    router = Router.load(tmp_path / "none", policy=path)
    watcher = PolicyWatcher(router, path, interval_s=60)
    assert watcher.check_now() is None  # the file the router runs on
    path.write_text(json.dumps({"rules": [{**PII_RULE, "name": "pii-v2"}]}))
    reload = watcher.check_now()
    assert reload is not None and reload.reloaded and router.route(PII_PROMPT).rule == "pii-v2"
    good_version = router.policy.version
    path.write_text(json.dumps({"rules": [{**PII_RULE, "when": {"detected": ["passport"]}}]}))
    with caplog.at_level(logging.WARNING, logger="serving"):
        reload = watcher.check_now()
    assert reload is not None and not reload.reloaded and "unknown detector 'passport'" in reload.reason
    assert f"keeping version {good_version}" in caplog.text and "unknown detector 'passport'" in caplog.text
    assert router.policy.version == good_version and router.route(PII_PROMPT).rule == "pii-v2"
    assert watcher.check_now() is None  # the same bad file is reported once
    path.unlink()
    reload = watcher.check_now()
    assert reload is not None and not reload.reloaded and "cannot read" in reload.reason
    assert router.route(PII_PROMPT).rule == "pii-v2"


# --- privacy through fallbacks: execute(), aexecute(), exploration, shadow runs ---------------


def caller(stub: StubUpstream):
    """A plain edge or cloud callable: one chat call to the stub, raising on an HTTP error."""

    def call(prompt: str) -> str:
        body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
        response = httpx2.post(f"{stub.url}/chat/completions", json=body, timeout=5)
        response.raise_for_status()
        return response.json()["choices"][0]["message"]["content"]

    return call


def acaller(stub: StubUpstream):
    async def call(prompt: str) -> str:
        body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
        async with httpx2.AsyncClient(timeout=5) as client:
            response = await client.post(f"{stub.url}/chat/completions", json=body)
        response.raise_for_status()
        return response.json()["choices"][0]["message"]["content"]

    return call


def received_text(stub: StubUpstream) -> str:
    return json.dumps([r.body for r in stub.received])


def test_execute_serves_a_private_prompt_from_the_edge(router, stubs):
    edge, cloud = stubs
    execution = router.execute(IBAN_PROMPT, caller(edge), caller(cloud))
    assert execution.served_by == "edge" and execution.decision.rule == "pii-stays-local"
    assert IBAN in received_text(edge) and cloud.received == []


@pytest.mark.parametrize(
    ("failure", "options", "status"),
    [
        ("error", {}, "error"),
        ("timeout", {"edge_timeout_s": 0.2}, "timeout"),
        ("rejected", {"accept": lambda answer: False, "verify_edge_zone": True}, "rejected"),
    ],
)
def test_when_the_edge_fails_the_cloud_is_never_called_and_the_rule_is_named(router, stubs, failure, options, status):
    edge, cloud = stubs
    if failure == "error":
        edge.behaviour.status = 503
    elif failure == "timeout":
        edge.behaviour.delay_s = 1.0
    with pytest.raises(
        FallbackForbidden, match="policy 'pii-stays-local' forbids cloud, and no allowed endpoint served"
    ) as caught:
        router.execute(PII_PROMPT, caller(edge), caller(cloud), **options)
    error = caught.value
    assert (error.rule, error.endpoint, error.decision.rule) == ("pii-stays-local", "cloud", "pii-stays-local")
    assert [(s.name, s.status) for s in error.steps][-1] == ("edge" if status != "rejected" else "accept", status)
    assert len(edge.received) == 1 and cloud.received == []
    assert EMAIL not in str(error)
    # the same request without the email falls back to the cloud as before: the stubs do record it
    router.execute(PLAIN, caller(edge), caller(cloud), **options)
    assert len(cloud.received) == 1


def test_over_the_edge_context_a_private_prompt_calls_neither(router, stubs):
    edge, cloud = stubs
    with pytest.raises(FallbackForbidden, match="exceeds the context limit"):
        router.execute(PII_PROMPT + " " + LONG, caller(edge), caller(cloud))
    assert edge.received == [] and cloud.received == []


def test_aexecute_keeps_the_private_prompt_off_the_cloud(router, stubs):
    edge, cloud = stubs
    edge.behaviour.status = 500

    async def run() -> None:
        with pytest.raises(FallbackForbidden) as caught:
            await router.aexecute(PII_PROMPT, acaller(edge), acaller(cloud))
        assert caught.value.rule == "pii-stays-local"

    asyncio.run(run())
    assert len(edge.received) == 1 and cloud.received == []


def test_metadata_that_forbids_the_cloud_holds_for_a_cloud_first_prompt(router, stubs):
    edge, cloud = stubs
    with pytest.raises(FallbackForbidden, match="'local-only'"):  # LONG is over the edge context
        router.execute(LONG, caller(edge), caller(cloud), metadata={"privacy": "local"})
    execution = router.execute(PLAIN, caller(edge), caller(cloud), metadata={"privacy": "local"})
    assert execution.served_by == "edge" and cloud.received == []


def test_exploration_never_goes_to_a_forbidden_endpoint(tmp_path, stubs):
    edge, cloud = stubs
    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(tmp_path / "none", log=log, explore_rate=1.0, seed=0, policy=PolicySet.from_dict(POLICY))
    execution = router.execute(PII_PROMPT, caller(edge), caller(cloud))
    assert execution.served_by == "edge" and cloud.received == []
    explored = router.execute(PLAIN, caller(edge), caller(cloud))  # without a rule, every request is explored
    assert explored.served_by == "cloud" and explored.decision.reason.startswith("explored")
    log.close()
    requests = [json.loads(line) for f in log.folder.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert [(r["explored"], r["propensity"]) for r in requests] == [(False, 1.0), (True, 1.0)]


def _join_shadow_threads() -> None:
    for thread in threading.enumerate():
        if thread.name == "router-shadow":
            thread.join(10)


def test_no_shadow_run_calls_a_forbidden_endpoint(tmp_path, stubs):
    edge, cloud = stubs
    log = OutcomeLog(tmp_path / "logs")
    router = Router.load(tmp_path / "none", log=log, shadow_rate=1.0, seed=0, policy=PolicySet.from_dict(POLICY))
    router.execute(PII_PROMPT, caller(edge), caller(cloud))
    _join_shadow_threads()  # a shadow run's thread starts before execute() returns
    assert cloud.received == []
    router.execute(PLAIN, caller(edge), caller(cloud))  # without a rule the cloud is shadowed
    _join_shadow_threads()
    assert len(cloud.received) == 1 and EMAIL not in received_text(cloud)
    log.close()


# --- RoutedChat and the proxy ----------------------------------------------------------------


def chat_for(router: Router, stubs) -> RoutedChat:
    edge, cloud = stubs
    return RoutedChat(
        router,
        edge=Endpoint(edge.url, "edge-model", timeout_s=2),
        cloud=Endpoint(cloud.url, "cloud-model", timeout_s=2),
    )


def test_routed_chat_keeps_private_prompts_on_the_edge_even_when_it_fails(router, stubs):
    edge, cloud = stubs
    messages = [{"role": "user", "content": PII_PROMPT}]
    with chat_for(router, stubs) as chat:
        completion = chat.create(messages)
        assert completion.routing.served_by == "edge" and completion.routing.decision.rule == "pii-stays-local"
        edge.behaviour.status = 503
        with pytest.raises(FallbackForbidden, match="pii-stays-local"):
            chat.create(messages)
        with pytest.raises(FallbackForbidden):
            chat.create(messages, stream=True)

        async def run() -> None:
            with pytest.raises(FallbackForbidden):
                await chat.acreate(messages)
            await chat.aclose()

        asyncio.run(run())
        assert len(edge.received) == 4 and cloud.received == []
        edge.behaviour.status = 200
        research = chat.create([{"role": "user", "content": PLAIN}], metadata={"feature": "research"})
        assert research.routing.served_by == "cloud" and len(edge.received) == 4
        assert "metadata" not in cloud.received[-1].body  # the policy's input stays in the router


@pytest.fixture()
def proxy(router, stubs):
    edge, cloud = stubs
    config = ProxyConfig(
        bundle="(loaded by the test)",
        edge=Endpoint(edge.url, "edge-model", timeout_s=2),
        cloud=Endpoint(cloud.url, "cloud-model", timeout_s=2),
    )
    chat = chat_for(router, stubs)
    server = LocalServer(build_app(chat, config), name="proxy", lifespan="on").start()
    try:
        yield f"http://127.0.0.1:{server.port}/v1/chat/completions"
    finally:
        server.stop()
        chat.close()


def ask(url: str, content: str, **body: object) -> httpx2.Response:
    return httpx2.post(url, json={"messages": [{"role": "user", "content": content}], **body}, timeout=10)


def test_the_proxy_keeps_private_prompts_on_the_edge_even_when_it_fails(proxy, stubs):
    edge, cloud = stubs
    answer = ask(proxy, PII_PROMPT)
    assert answer.status_code == 200 and answer.headers["x-router-served-by"] == "edge"
    assert answer.headers["x-router-rule"] == "pii-stays-local"
    edge.behaviour.status = 503
    failed = ask(proxy, IBAN_PROMPT)
    assert failed.status_code == 502 and failed.headers["x-router-rule"] == "pii-stays-local"
    assert failed.json()["error"]["code"] == "fallback_forbidden" and IBAN not in failed.text
    streamed = ask(proxy, PII_PROMPT, stream=True)
    assert streamed.status_code == 502 and streamed.json()["error"]["code"] == "fallback_forbidden"
    edge.behaviour = Behaviour(delay_s=3)  # past the edge endpoint's 2 s timeout
    timed_out = ask(proxy, PII_PROMPT)
    assert timed_out.status_code == 504 and timed_out.json()["error"]["code"] == "fallback_forbidden"
    assert len(edge.received) == 4 and cloud.received == []


def test_the_proxy_reads_metadata_from_the_body_and_never_forwards_it(proxy, stubs):
    edge, cloud = stubs
    served = ask(proxy, PLAIN, metadata={"feature": "research"})
    assert served.headers["x-router-served-by"] == "cloud" and served.headers["x-router-rule"] == "research"
    assert edge.received == [] and "metadata" not in cloud.received[-1].body
    edge.behaviour.status = 503
    refused = ask(proxy, PLAIN, metadata={"privacy": "local"})
    assert refused.status_code == 502 and refused.headers["x-router-rule"] == "local-only"
    assert len(cloud.received) == 1
    both = ask(proxy, PII_PROMPT, metadata={"feature": "research"})  # force cloud; pii forces edge first
    assert both.headers["x-router-rule"] == "pii-stays-local" and len(cloud.received) == 1
    bad = ask(proxy, PLAIN, metadata={"tier": 3})
    assert bad.status_code == 400 and "metadata" in bad.json()["error"]["message"]


def test_the_proxy_answers_403_when_the_policy_leaves_no_endpoint(tmp_path, stubs):
    rules = policy(
        {"name": "pii", "when": {"detected": ["email"]}, "then": "forbid", "endpoint": "cloud"},
        {"name": "no-edge", "when": {"metadata": {"tier": "free"}}, "then": "forbid", "endpoint": "edge"},
    )
    router = Router.load(tmp_path / "none", policy=rules)
    edge, cloud = stubs
    config = ProxyConfig(
        bundle="(test)", edge=Endpoint(edge.url, "edge-model"), cloud=Endpoint(cloud.url, "cloud-model")
    )
    with chat_for(router, stubs) as chat:
        server = LocalServer(build_app(chat, config), name="proxy", lifespan="on").start()
        try:
            answer = ask(f"http://127.0.0.1:{server.port}/v1/chat/completions", PII_PROMPT, metadata={"tier": "free"})
        finally:
            server.stop()
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "no_feasible_endpoint"
    assert answer.headers["x-router-rule"] == "pii" and EMAIL not in answer.text
    assert edge.received == [] and cloud.received == []


def test_the_proxy_command_takes_a_policy_file_and_watches_it(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"rules": [PII_RULE]}))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    serve = ["--bundle", "b", "--edge-url", "http://127.0.0.1:9/v1", "--edge-model", "e"]
    serve += ["--cloud-url", "http://127.0.0.1:9/v1", "--cloud-model", "c", "--policy", str(path)]
    config = ProxyConfig.from_args(parser.parse_args([*serve, "--policy-interval-s", "0.5"]), environ={})
    assert (config.policy, config.policy_interval_s) == (str(path), 0.5)
    with pytest.raises(ConfigError, match="policy_interval_s=0"):
        ProxyConfig.from_args(parser.parse_args([*serve, "--policy-interval-s", "0"]), environ={})
    router = Router.load(tmp_path / "no-bundle", policy=config.policy)
    (watcher,) = watchers_for(router, config)
    assert watcher.path == path
    watcher.stop()
    path.write_text(json.dumps({"rules": [{**PII_RULE, "name": "pii-v2"}]}))
    assert watcher.check_now().reloaded and router.route(PII_PROMPT).rule == "pii-v2"
    assert watchers_for(router, ProxyConfig.from_args(parser.parse_args(serve[:-2]), environ={})) == []


# --- budgets -------------------------------------------------------------------------------------

BUDGET = {
    "name": "free-daily-budget",
    "when": {"metadata": {"tier": "free"}, "budget": {"key": "user", "limit": 0.5, "period": "day"}},
    "then": "forbid",
    "endpoint": "cloud",
}


def test_spending_counts_per_holder_and_window_and_starts_again_in_the_next():
    spending, day = Spending(), 86_400.0
    noon = 20_000 * day + day / 2  # a UTC noon
    spending.add({"user": "ana", "tier": "free"}, 0.25, keys={"user"}, now=noon)
    spending.add({"user": "ana"}, 0.5, keys={"user"}, now=noon + 3_600)
    spending.add({"user": "bo"}, 1.0, keys={"user"}, now=noon)
    spending.add({"team": "x"}, 9.0, keys={"user"}, now=noon)  # names no holder under `user`: not counted
    assert spending.spent("user", "ana", "day", now=noon + 7_200) == 0.75
    assert spending.spent("user", "ana", "hour", now=noon + 3_700) == 0.5
    assert spending.spent("user", "bo", "day", now=noon) == 1.0
    assert spending.spent("user", "ana", "day", now=noon + day) == 0.0  # the next day
    assert window("month", noon) == window("month", noon + 2 * day)  # 2024-10-04 and -06
    assert spending.spent("user", "ana", "month", now=noon + 2 * day) == 0.75
    assert spending.spent("tier", "free", "day", now=noon) == 0.0
    for bad in (-1, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="finite number >= 0"):
            spending.add({"user": "ana"}, bad, keys={"user"})


def test_a_full_ledger_drops_past_windows_first_then_the_least_recently_charged():
    spending, hour = Spending(max_holders=6), 3_600.0
    spending.add({"user": "old"}, 1.0, keys={"user"}, now=0.0)  # 3 entries: hour, day, month
    spending.add({"user": "a"}, 1.0, keys={"user"}, now=100 * 86_400.0)
    spending.add({"user": "b"}, 1.0, keys={"user"}, now=100 * 86_400.0 + hour / 2)  # over: old's windows are past
    assert len(spending) == 6 and spending.spent("user", "a", "day", now=100 * 86_400.0) == 1.0


def test_a_budget_rule_forbids_the_cloud_once_the_holder_has_spent_it(tmp_path):
    router = Router.load(tmp_path / "none", policy=policy(BUDGET))
    free = {"tier": "free", "user": "ana"}

    def forbids(metadata) -> bool:
        decision = router.route(CLOUDY, precision="exact", metadata=metadata)
        assert decision.zone == ("edge" if decision.forbidden else "cloud")  # the rule table says cloud
        return decision.rule == "free-daily-budget" and decision.forbidden == ("cloud",)

    assert not forbids(free)  # nothing spent yet
    router.record_spend(free, 0.3)
    assert not forbids(free)
    router.record_spend(free, 0.2)  # 0.5 spent: the limit
    assert forbids(free)
    assert not forbids({"tier": "free", "user": "bo"})  # another holder
    assert not forbids({"tier": "paid", "user": "ana"})  # the rule's metadata condition
    assert not forbids({"tier": "free"})  # no holder named: no budget
    router.policy = policy(BUDGET)  # a reloaded policy keeps what was spent
    assert forbids(free)
    with pytest.raises(ValueError, match="finite number >= 0"):
        router.record_spend(free, -0.1)
    Router.load(tmp_path / "none").record_spend(free, 1.0)  # no policy: nothing to count, no error


def test_routed_chat_counts_each_answers_cost_streams_at_their_end(router, stubs):
    edge, cloud = stubs
    router.policy = policy(BUDGET)
    free = {"tier": "free", "user": "ana"}
    long = [{"role": "user", "content": CLOUDY}]
    priced = Endpoint(cloud.url, "cloud-model", timeout_s=2, input_price_per_1m=100.0, output_price_per_1m=100.0)
    with RoutedChat(router, edge=Endpoint(edge.url, "edge-model", timeout_s=2), cloud=priced) as chat:
        first = chat.create(long, metadata=free, precision="exact")
        assert first.routing.served_by == "cloud" and first.routing.estimated_cost > 0
        assert router.spending.spent("user", "ana", "day") == pytest.approx(first.routing.estimated_cost)
        while router.spending.spent("user", "ana", "day") < 0.5:  # streams count at their end
            with chat.create(
                long, metadata=free, precision="exact", stream=True, stream_options={"include_usage": True}
            ) as stream:
                assert stream.routing.served_by == "cloud"
                list(stream)
        calls = len(cloud.received)
        with pytest.raises(FallbackForbidden, match="'free-daily-budget' forbids cloud.*exceeds the context limit"):
            chat.create(long, metadata=free, precision="exact")  # too long for the edge, and over budget
        short = [{"role": "user", "content": "Is this mortgage contract clause standard?"}]
        over = chat.create(short, metadata=free, precision="exact")
        assert (over.routing.decision.rule, over.routing.served_by) == ("free-daily-budget", "edge")
        assert len(cloud.received) == calls  # the cloud was not called once the budget was spent
