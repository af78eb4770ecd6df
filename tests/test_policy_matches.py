"""A policy's `matches` expressions run with RE2 (serving.policy._rules): in time linear in the
prompt whatever the expression, case-insensitive, on the prompt or its first `head_chars`
characters; an expression RE2 cannot run, or would read otherwise than Python's re, is refused at
load with a PolicyFileError naming the rule and the key."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from serving import Router
from serving.endpoints._record import parse_endpoints, read_spec_document
from serving.policy import PolicyFileError, PolicySet
from serving.routing._rule_table import as_policy
from tests.conftest import ROOT

# The expression: nested quantifiers, which Python's re backtracks through exponentially
# when the prompt has no ':' after the words (4.5 s for these 24 words; each word doubles it).
EVIL = r"account\s*(\w+\s?)+:"
EVIL_PROMPT = "account " + " ".join(["ab"] * 24)


def rule(matches: object, name: str = "r") -> dict:
    return {"name": name, "when": {"matches": matches}, "then": "forbid", "endpoint": "cloud"}


def router_with(tmp_path: Path, *rules: dict) -> Router:
    return Router.load(tmp_path / "no-bundle", policy=PolicySet.from_dict({"rules": list(rules)}))


def test_nested_quantifiers_run_in_bounded_time_on_any_prompt(tmp_path):
    """The guarantee is the bound itself: route() with the issue's expression on its prompt took
    4.5 s with Python's re (6.9 s on this 2-core machine); with RE2 it is well under a millisecond,
    and a 2 MB prompt of such words is searched whole in a few milliseconds."""
    router = router_with(tmp_path, rule(EVIL))
    started = time.perf_counter()
    assert router.route(EVIL_PROMPT).rule is None
    assert time.perf_counter() - started < 1.0
    long_prompt = ("account " + "ab cd " * 60) * 5000  # 1.8 MB, many near-matches, no ':'
    started = time.perf_counter()
    assert router.route(long_prompt).rule is None
    assert router.route(long_prompt + " account ab cd:").rule == "r"  # found at its very end
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        (r"(a)\1", "invalid escape sequence: \\1"),  # a backreference
        (r"contract(?=s)", "invalid perl operator: (?="),  # lookahead
        (r"(?<!sub)contract", "invalid perl operator: (?<!"),  # lookbehind
        (r"contract\Z", "invalid escape sequence: \\Z"),  # RE2 spells it \z
        (r"a++", "bad repetition operator"),  # possessive
        (r"(?>a)", "invalid perl operator: (?>"),  # atomic group
        (r"(?x) a b", "invalid perl operator: (?x"),  # verbose mode
        (r"a{,5}", "write {0,5}"),  # Python: up to 5; RE2: the text "a{,5}"
        (r"a{4294967295}", "counts over 1000"),  # Python: OverflowError; RE2: the text
        (r"a{1001}", "counts over 1000"),
        ("(unclosed", "missing )"),
    ],
)
def test_an_expression_re2_cannot_run_is_refused_at_load_naming_the_rule(expression, says):
    with pytest.raises(PolicyFileError) as caught:
        PolicySet.from_dict({"rules": [rule("fine", "first"), rule(["lease", expression], "second")]})
    message = str(caught.value)
    assert message.startswith("<policy>: rules[1] ('second'), key 'when.matches': expression ")
    assert "(2 of 2) is not a regular expression RE2 runs" in message and says in message
    assert "\n" not in message and len(message) < 600


def test_a_repetition_written_as_text_to_both_engines_is_accepted(tmp_path):
    """Braces that are text to Python's re are text to RE2: escaped, in a class, or no count."""
    router = router_with(tmp_path, rule([r"\{,5\}", "[{,]x", "a{}", r"\d{1,3}-\d{4}"]))
    assert router.route("write {,5} here").rule == "r" and router.route("a{} b").rule == "r"
    assert router.route("call 555-0199").rule == "r" and router.route("nothing").rule is None


@pytest.mark.parametrize(
    ("matches", "prompt", "found"),
    [
        ("ÉTÉ", "un été chaud", True),  # case-insensitive beyond ASCII
        ("straße", "STRASSE", False),  # simple case folding, as Python's re: no ß -> ss
        (r"\bmüller\b", "Herr MÜLLER schreibt", True),
        (r"\pL+stra\pL+", "Gartenstraße 5", True),  # RE2 syntax: Unicode classes
        ({"pattern": "secret", "head_chars": 9}, "éééééé s secret", False),  # characters, not bytes
        ({"pattern": "secret", "head_chars": 15}, "éééééé s secret", True),
        ("secret", "\ud800 a lone surrogate, then the secret", True),  # not UTF-8: still searched
        ({"pattern": "^only", "head_chars": 4}, "only", True),
    ],
)
def test_matches_is_case_insensitive_and_reads_characters_on_any_text(tmp_path, matches, prompt, found):
    assert (router_with(tmp_path, rule(matches)).route(prompt).rule == "r") is found


def test_the_shipped_policies_and_specs_load():
    """The policy examples, the rule table as a policy (its `matches` with head_chars) and the
    endpoint specs of data/ load with RE2 and the strict YAML loader."""
    assert len(PolicySet.load(ROOT / "data/policy/example.json").rules) == 3
    for spec_file in ("four.yaml", "four-mild.yaml"):  # simulations: an endpoint spec and skills
        spec = read_spec_document(ROOT / "data/endpoints" / spec_file)
        assert len(parse_endpoints({"endpoints": spec["endpoints"]})) == 4
    names = [endpoint["name"] for endpoint in spec["endpoints"]]
    example = PolicySet.load(ROOT / "data/policy/endpoints-example.json", endpoints=names)
    assert [r.name for r in example.rules if r.pattern is not None] == ["legal-to-mid"]
    assert example.evaluate("Is this lease clause enforceable?", 8, None).preferred.name == "legal-to-mid"
    table = PolicySet.from_dict(as_policy())
    assert [r.name for r in table.rules if r.pattern is not None] == ["rule-table-cloud", "rule-table-domain"]
