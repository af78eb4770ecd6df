"""The Python SDK's policy layer on the JS SDK's two bundles, as JSON, so that the JS SDK can be held to
it (clients/js/test/policy-parity.test.js and the browser tests):

    .venv/bin/python clients/js/scripts/policy_vectors.py --bundle artifacts/js/bundle \\
        --endpoint-bundle artifacts/js/endpoint-bundle --out artifacts/js/policy-vectors.json

What it writes:
- `policies`: the policy files of clients/js/test/policies/ and data/policy/, and the rule table as a
  policy (serving.routing._rule_table.as_policy), each with its text (the JS tests load the same bytes);
- `scenarios`: a policy on a bundle (two endpoints, or the four-endpoint one), optionally with
  endpoint capabilities, and its steps in order: a spend recorded (Router.record_spend) or a request
  routed (prompt, precision, metadata, needs) with the Python SDK's Decision.to_dict() or its
  NoFeasibleEndpoint (message, rules);
- `load_errors`: policy files the Python loader refuses, with its PolicyFileError's message;
- `matches`: RE2 expressions and texts, with whether a `matches` condition holds (or the refusal);
- `detectors`: texts (the labelled set data/policy/pii_labelled.jsonl, the tests' values and negatives,
  random texts of their fragments) with detect()'s findings and each detector's found_in;
- `unicode`: the digests of the tables clients/js/src/policy/unicode-data.js must hold
  (scripts/policy_unicode.py writes that module).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if importlib.util.find_spec("serving") is None:  # PYTHONPATH may name another checkout of the SDK
    sys.path.insert(0, str(ROOT))
else:  # the repository's other packages (pipelines, tests), after the SDK found first
    sys.path.append(str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))

FORMAT = 1
POLICIES = ROOT / "clients/js/test/policies"
PRECISIONS = (None, "exact", "standard", "tolerant")


def policy_files() -> list[dict]:
    """Every policy the scenarios use: id, the source name errors give, its text, its bundle."""
    import serving.routing._rule_table

    out = []
    for path in sorted(POLICIES.glob("*.json")):
        kind = "n" if path.stem == "endpoints" else "two"
        out.append({"id": path.stem, "source": f"{path.stem}.json", "text": path.read_text(), "bundle": kind})
    for name, kind in (("example", "two"), ("endpoints-example", "n")):
        text = (ROOT / "data/policy" / f"{name}.json").read_text()
        out.append({"id": f"data-{name}", "source": f"{name}.json", "text": text, "bundle": kind})
    table = json.dumps(serving.routing._rule_table.as_policy(), indent=1)
    out.append({"id": "rule-table", "source": "rule_table.json", "text": table, "bundle": "two"})
    return out


# ---- prompts -------------------------------------------------------------------------------------

PLAIN = [
    "What is 2+2?",
    "hi",
    "hello there, how are you today?",
    "Bonjour, pouvez-vous m'aider avec une question simple ?",
    "Explain the difference between a contract and a lease in plain words.",
    "Compute the integral of x^2 from 0 to 3 and show every step.",
    "Summarise the liability clauses of this agreement for a small business owner.",
    "Ο Σωκράτης και η ΣΟΦΙΑ: τι είναι η αρετή;",
    "請問這段中文是什麼意思？我想學習更多。",
    "A1234! is the code on the box",
    "Talk to Herr Müller about the invoice, and Mr Moller too",
    "The answer is a.b*c, trust me",
    "ÉTÉ 2024 plans: beach, books and the straße near Köln",
    "Emoji time 😀 and more 🎉 here",
    "version 4.19.2.10 was released; section 2.3.1.4 explains it",
    "the build is done.  ",
    "the build is done.\n",
    "x",
    "",
    "   ",
    "Write a detailed essay on the causes of the First World War, covering the alliance system, militarism, "
    "imperialism and nationalism, with a conclusion that weighs their relative importance. " * 3,
    "Prove that there are infinitely many primes, then derive 17 * 23 + 4 step by step. " * 4,
    "tell me a joke",
]

PII = [
    "Please email me at ana.vo@lin-mar.fr about the order",
    "Call +44 (0)20 7946 0123 tomorrow",
    "My card is 4111 1111 1111 1111, expiry 12/29",
    "IBAN DE89 3704 0044 0532 0130 00 for the transfer",
    "My SSN is 123-45-6789",
    "DNI: 12345678Z and NIE X1234567L",
    "AWS key AKIAZ5GMHYJKLQ7F3QWE in the config",
    "password = \"hunter2-is-bad\"",
    "ping 192.168.10.25 from the gateway",
    "ping 10.10.10.10 am",
    "card ４１１１ １１１１ １１１１ １１１１ please",  # full-width digits
    "call +44\u00a020\u00a07946\u00a00123",  # no-break spaces
    "mail ana\u200b.vo@lin-mar.fr",  # a zero-width space inside
    "رقم البطاقة ٤١١١١١١١١١١١١١١١",  # Arabic-Indic digits
    "卡号4111111111111111。",
    "服务器10.0.0.1",
    "сервер10.0.0.1",
    "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 leaked",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\n-----END RSA PRIVATE KEY-----",
    "SSN – 123–45–6789 with en dashes",
]


def detector_texts() -> list[str]:
    """The labelled set, the Python tests' values and negatives (when importable), random texts of
    their fragments, and the PII prompts above."""
    texts = [json.loads(line)["text"] for line in (ROOT / "data/policy/pii_labelled.jsonl").read_text().splitlines() if line]
    fragments: list[str] = ["4111", "1111", "DE89", "@", "ana.vo", "lin-mar.fr", " ", "-", ".", "\u200b", "\u00a0", "\uff11", "😀", "é"]
    try:  # the Python tests' lists, when this checkout's tests import
        sys.path.insert(0, str(ROOT))
        from tests import test_detectors as tests

        texts += [text for _, text, _ in tests.POSITIVES] + list(tests.NEGATIVES)
        fragments = list(tests.FRAGMENTS) + ["😀", "é", "\U00020000", "Ⅻ", "ǅ"]
    except Exception as exc:  # noqa: BLE001 - any import failure: the labelled set still stands
        print(f"policy_vectors: tests.test_detectors not imported ({exc!r}); random texts from a short list", file=sys.stderr)
    rng = random.Random(46)
    texts += ["".join(rng.choice(fragments) for _ in range(rng.randint(1, 60))) for _ in range(400)]
    return list(dict.fromkeys(texts + PII + PLAIN))


def detector_cases() -> list[dict]:
    from serving.policy import DETECTORS, detect

    out = []
    for text in detector_texts():
        found = [[f.detector, f.start, f.end] for f in detect(text)]
        out.append({"text": text, "findings": found, "found_in": [n for n, d in DETECTORS.items() if d.found_in(text)]})
    return out


# ---- matches ---------------------------------------------------------------------------------------

MATCH_PATTERNS = [
    "\\bcontract\\b", "ÉTÉ", "straße", "ΣΟΦΙΑ", "σοφια", "\\pL+\\d", "\\p{Greek}+", "\\p{Han}", "\\p{Cyrillic}{2}",
    "[[:alpha:]]{3}\\d", "[[:^alpha:]]{3}", "\\Qa.b*c\\E", "\\x{1F600}", "😀", "\\w+ller\\b", "\\bm\\w+ller\\b",
    "^hello", "done\\.?\\s*\\z", "(?s)a.b", "a.b", "(?m)^second", "\\d{3}-\\d{2}-\\d{4}", "[\\d.]+%", "\\#tag",
    "(?P<word>foo)bar", "x*", "(?i)K", "k", "s", "\\bk\\b", "[^a-z ]", "\\S+@\\S+", "\\s{2,}", ".", "^.$",
    "(?U)a+", "a{2,5}b", "(a|ab)(c|bcd)(d*)", "\\v", "\\pN", "\\p{Lu}", "[\\p{Lu}\\d]{2}", "\\PL{4}",
]
MATCH_TEXTS = [
    "", "a", "the contract", "contracts", "été à Paris", "STRASSE", "Straße", "σοφια", "ΣΟΦΙΑ", "Ωmega5", "中文",
    "Бо", "abc1", "...", "a.b*c", "a.bbc", "😀", "Müller", "mueller", "Moller", "hello world", "say hello",
    "done.", "done.\n", "all done.  \n", "a\nb", "axb", "first\nsecond", "123-45-6789", "3.5%", "#tag", "foobar",
    "\u212a", "\u017f", "K", "k\u212a", "\u212a ok", "x\u212a", "line\x0bbreak", "Ⅻ", "٣", "ǅ", "ß", "ẞ",
    "\ud800", "a\udc00b", "tabs\t\tand  spaces", "A1234!", "abcd", "ac", "abbcd",
]
# Expressions RE2 refuses (or the Python loader, first): the JS loader must refuse them too.
MATCH_REFUSED = [
    "(a)\\1", "(?=a)", "(?!a)", "(?<=a)b", "(?<!a)b", "a++", "(?>a)", "a\\Z", "a{,5}", "a{1001}", "a{4294967295}",
    "(", "[a", "a**", "\\p{Klingon}", "(?P=n)", "\\8", "\\e", "(?x)a", "(a{10}){101}", "\ud800", "",
]


def match_cases() -> dict:
    """Whether a rule's `matches` holds for each expression and text, and the expressions refused."""
    from serving.policy import PolicyFileError, PolicySet

    def policy(matches: object) -> PolicySet:
        rule = {"name": "m", "when": {"matches": matches}, "then": "forbid", "endpoint": "cloud"}
        return PolicySet.from_dict({"rules": [rule]}, source="matches.json")

    found = []
    for pattern in MATCH_PATTERNS:
        checked = policy(pattern)
        found.append([bool(checked.evaluate(text, 0, None).forbidden_by) for text in MATCH_TEXTS])
    heads = []
    for head in (0, 1, 3, 8):
        checked = policy({"pattern": "\\p{Han}|é", "head_chars": head})
        heads.append({"head_chars": head, "found": [bool(checked.evaluate(t, 0, None).forbidden_by) for t in MATCH_TEXTS]})
    refused = []
    for pattern in MATCH_REFUSED:
        try:
            policy(pattern)
            refused.append({"pattern": pattern, "error": None})
        except PolicyFileError as exc:
            refused.append({"pattern": pattern, "error": str(exc)})
    return {"patterns": MATCH_PATTERNS, "texts": MATCH_TEXTS, "found": found, "heads": heads, "refused": refused}


# ---- policy files the loader refuses -----------------------------------------------------------------

def _rule(**fields: object) -> dict:
    return {"name": "r", "then": "forbid", "endpoint": "cloud", **fields}


BAD_POLICIES: list[object] = [
    [],
    {"rules": {}},
    {"rules": [], "colour": "red"},
    {"rules": [1]},
    {"rules": [_rule(name="bad name")]},
    {"rules": [_rule(name="needs:images")]},
    {"rules": [_rule(name="x" * 65)]},
    {"rules": [_rule(then="allow")]},
    {"rules": [_rule(endpoint="gpu")]},
    {"rules": [_rule(then="route")]},
    {"rules": [_rule(then="route", zone="edge")]},
    {"rules": [{"name": "r", "then": "route", "zone": "somewhere"}]},
    {"rules": [_rule(zone="edge")]},
    {"rules": [_rule(description=5)]},
    {"rules": [_rule(when=[])]},
    {"rules": [_rule(when={"colour": "red"})]},
    {"rules": [_rule(when={"metadata": {}})]},
    {"rules": [_rule(when={"metadata": {"tier": 1}})]},
    {"rules": [_rule(when={"metadata": {"tier": []}})]},
    {"rules": [_rule(when={"detected": "email"})]},
    {"rules": [_rule(when={"detected": ["passport"]})]},
    {"rules": [_rule(when={"min_tokens": "10"})]},
    {"rules": [_rule(when={"min_tokens": True})]},
    {"rules": [_rule(when={"min_chars": -1})]},
    {"rules": [_rule(when={"min_tokens": 1.5})]},
    {"rules": [_rule(when={"min_tokens": 10, "max_tokens": 5})]},
    {"rules": [_rule(when={"precision": "perfect"})]},
    {"rules": [_rule(when={"precision": []})]},
    {"rules": [_rule(when={"matches": ""})]},
    {"rules": [_rule(when={"matches": {"pattern": "a", "flags": "i"}})]},
    {"rules": [_rule(when={"matches": {"pattern": "a", "head_chars": -2}})]},
    {"rules": [_rule(when={"matches": "a" * 5000})]},
    {"rules": [_rule(when={"matches": ["ok", "(?=x)"]})]},
    {"rules": [_rule(when={"budget": 5})]},
    {"rules": [_rule(when={"budget": {"key": "user", "limit": 1, "period": "week"}})]},
    {"rules": [_rule(when={"budget": {"key": "", "limit": 1, "period": "day"}})]},
    {"rules": [_rule(when={"budget": {"key": "user", "limit": -1, "period": "day"}})]},
    {"rules": [_rule(when={"budget": {"key": "user", "limit": "1", "period": "day"}})]},
    {"rules": [_rule(when={"budget": {"key": "user", "limit": 10**400, "period": "day"}})]},
    {"rules": [_rule(when={"budget": {"key": "user", "limit": 1, "period": "day", "cap": 2}})]},
    {"rules": [_rule(when={"needs": "audio"})]},
    {"rules": [_rule(when={"needs": []})]},
    {"rules": [_rule(), _rule()]},
    {"rules": [_rule(name="a-very-long-rule-name-" + "y" * 40, when={"metadata": {"k": ["v" * 200, 1, 2, 3, 4, 5]}})]},
]
# Texts that are not a valid policy document (the JS message after "is not valid JSON: " is its own).
BAD_TEXTS = [
    '{"rules": [], "rules": []}',
    '{"rules": [{"name": "a", "name": "b"}]}',
    "[" * 40 + "]" * 40,
    '{"rules": [',
    "\xff\xfe",
]


def load_errors() -> list[dict]:
    from serving.policy import PolicyFileError, PolicySet

    out = []
    for data in BAD_POLICIES:
        text = json.dumps(data)
        try:
            PolicySet.parse(text.encode(), source="bad.json")
            error = None
        except PolicyFileError as exc:
            error = str(exc)
        out.append({"text": text, "error": error, "json_error": False})
    for text in BAD_TEXTS:
        raw = text.encode("latin-1") if text.startswith("\xff") else text.encode()
        try:
            PolicySet.parse(raw, source="bad.json")
            error = None
        except PolicyFileError as exc:
            error = str(exc)
        out.append({"text": raw.decode("latin-1"), "latin1": True, "error": error, "json_error": True})
    yaml = "rules:\n- name: a\n  then: forbid\n  endpoint: cloud\n...\n"
    out.append({"text": yaml, "source": "policy.yaml", "error": "yaml", "json_error": True})
    return out


# ---- scenarios -----------------------------------------------------------------------------------

def needs_of(spec: dict | None):
    from serving.endpoints._capabilities import Needs

    return None if spec is None else Needs(**spec)


def capabilities_of(spec: dict | None):
    from serving.endpoints._record import Capabilities

    if spec is None:
        return None
    return {name: None if caps is None else Capabilities(**{k: tuple(v) if k == "languages" else v for k, v in caps.items()})
            for name, caps in spec.items()}


def routed(router, prompt: str, precision, metadata, needs, capabilities) -> dict:
    from serving.policy import NoFeasibleEndpoint

    try:
        decision = router.route(prompt, precision=precision, metadata=metadata, needs=needs_of(needs),
                                capabilities=capabilities_of(capabilities))
    except NoFeasibleEndpoint as exc:
        return {"error": "NoFeasibleEndpoint", "message": str(exc), "rules": list(exc.rules)}
    return {"decision": decision.to_dict()}


TWO_METADATA = [None, {"tier": "free"}, {"tier": "trial"}, {"privacy": "local"}, {"feature": "research"}, {"user": "guest"},
                {"feature": "audit"}, {"user": "guest", "feature": "audit"}, {"user_tier": "free"}, {"strict": "yes"}]
CLASH_METADATA = [None, {"edge": "off"}, {"cloud": "off"}, {"edge": "off", "cloud": "off"}, {"want": "edge"}, {"want": "cloud"},
                  {"want": "both"}, {"want": "edge", "edge": "off"}, {"want": "cloud", "edge": "off"}, {"lean": "edge"},
                  {"lean": "cloud"}, {"lean": "edge", "edge": "off"}, {"lean": "cloud", "cloud": "off"}]
N_METADATA = [None, {"tier": "free"}, {"site": "factory"}, {"tier": "free", "site": "factory"}, {"user_tier": "free"}]
NEEDS = [None, {"images": True}, {"tools": True}, {"json": True}, {"images": True, "tools": True}, {"language": "pt"},
         {"json": True, "language": "pt-BR"}]
CAPABILITY_SETS = [
    None,
    {"edge": {}, "cloud": {"images": True, "tools": True, "json": True}},
    {"edge": {"json": True, "languages": ["en"]}, "cloud": {"images": True, "languages": ["en", "pt"]}},
    {"edge": None, "cloud": {}},
]
N_CAPABILITIES = [
    None,
    {"phone-3b": {"languages": ["en"]}, "onprem-8b": {"tools": True, "languages": ["en", "de"]},
     "cloud-mid": {"images": True, "json": True}, "frontier": {"images": True, "tools": True, "json": True, "languages": ["pt"]}},
]


def prompt_list(cases: list[str]) -> list[str]:
    return list(dict.fromkeys(PLAIN + PII + cases))


def scenarios(two: Path, n: Path, policies: list[dict], prompts: list[str]) -> list[dict]:
    from serving import Router
    from serving.policy import PolicySet

    index = {p["id"]: k for k, p in enumerate(policies)}
    out = []
    with tempfile.TemporaryDirectory(prefix="policy-vectors-") as tmp:

        def router_for(policy_id: str):
            policy = policies[index[policy_id]]
            bundle = n if policy["bundle"] == "n" else two
            router = Router.load(bundle, strict=True)
            path = Path(tmp) / policy["source"]
            path.write_text(policy["text"])
            router.policy = PolicySet.load(path, endpoints=router.policy_endpoints)
            return router

        def plain(policy_id: str, metadatas, precisions=PRECISIONS, needs=(None,), capabilities=None, texts=None) -> dict:
            router = router_for(policy_id)
            steps = []
            for prompt in texts if texts is not None else prompts:
                for metadata in metadatas:
                    for precision in precisions:
                        for need in needs:
                            request = {"prompt": prompt, "precision": precision, "metadata": metadata, "needs": need}
                            steps.append({"route": request, **routed(router, prompt, precision, metadata, need, capabilities)})
            return {"policy": index[policy_id], "capabilities": capabilities, "steps": steps}

        out.append(plain("privacy", TWO_METADATA[:6]))
        out.append(plain("routes", TWO_METADATA, precisions=(None, "exact")))
        out.append(plain("clashes", CLASH_METADATA, precisions=(None,)))
        out.append(plain("matches", [None], precisions=(None, "standard")))
        out.append(plain("rule-table", [None], precisions=PRECISIONS))
        out.append(plain("data-example", [None, {"user_tier": "free"}], precisions=(None, "exact")))
        short = PLAIN[:8] + PII[:4]
        for capabilities in CAPABILITY_SETS:
            out.append(plain("needs", [None, {"strict": "yes"}], precisions=(None,), needs=NEEDS, capabilities=capabilities, texts=short))
        out.append(plain("endpoints", N_METADATA, precisions=PRECISIONS))
        out.append(plain("data-endpoints-example", [None, {"user_tier": "free"}], precisions=(None, "exact")))
        for capabilities in N_CAPABILITIES:
            out.append(plain("endpoints", [None, {"tier": "free"}, {"language": "de"}], precisions=(None,), needs=NEEDS,
                             capabilities=capabilities, texts=short))
        out.append(budget_scenario(router_for("budgets"), index["budgets"], "two"))
        out.append(budget_scenario(router_for("endpoints"), index["endpoints"], "n"))
    return out


LONG_HOLDER = "holder-" + "z" * 100  # kept as its digest by the ledger


def budget_scenario(router, policy: int, kind: str) -> dict:
    """Spends and requests in order: each user's and team's budget reached, the tightest limit first."""
    steps = []
    users = ["ana", "bob", LONG_HOLDER]
    plan = [("route", "ana", "free", "t1"), ("spend", "ana", 0.03, "t1"), ("route", "ana", "free", "t1"),
            ("spend", "ana", 0.03, "t1"), ("route", "ana", "free", "t1"), ("route", "ana", "pro", "t1"),
            ("route", "bob", "free", "t2"), ("spend", LONG_HOLDER, 0.25, "t2"), ("route", LONG_HOLDER, "pro", "t2"),
            ("spend", "bob", 0.5, "t1"), ("spend", "bob", 0.6, "t1"), ("route", "carol", "pro", "t1"),
            ("route", "bob", "free", "t2"), ("route", "dan", "blocked", "t3"), ("spend", "eve", 0.0, "t3"),
            ("route", "eve", "free", "t3"), ("route", None, "free", None)]
    prompts = ["What is 2+2?", "Explain the difference between a contract and a lease in plain words.", "tell me a joke"]
    for k, (what, user, value, team) in enumerate(plan):
        metadata = {key: v for key, v in (("user", user), ("team", team)) if v is not None}
        if what == "spend":
            router.record_spend(metadata, value)
            steps.append({"spend": {"metadata": metadata, "amount": value}})
            continue
        metadata["tier"] = value
        prompt = prompts[k % len(prompts)]
        for precision in (None, "exact", "tolerant"):
            request = {"prompt": prompt, "precision": precision, "metadata": metadata, "needs": None}
            steps.append({"route": request, **routed(router, prompt, precision, metadata, None, None)})
    assert users
    return {"policy": policy, "capabilities": None, "steps": steps, "budget": kind}


def languages(prompts: list[str]) -> dict[str, str | None]:
    """What the Python SDK's language detector (py3langid) reads in each prompt: the JS tests give their
    routers a languageDetector that answers the same (this SDK has no detector of its own)."""
    from serving.features._language import shared_detector

    detector = shared_detector()
    return {prompt: detector.language(prompt) for prompt in dict.fromkeys(prompts + PLAIN + PII)}


def main() -> None:
    from pipelines.vectors import hard_cases
    from policy_unicode import digests, tables
    from serving.bundle._bundle import read_bundle

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True, help="a two-endpoint bundle (artifacts/js/bundle)")
    parser.add_argument("--endpoint-bundle", type=Path, required=True, help="an N-endpoint bundle (artifacts/js/endpoint-bundle)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    policies = policy_files()
    cases = [p for _, p in hard_cases() if len(p) <= 4000][:40]
    prompts = prompt_list(cases)
    document = {
        "format": FORMAT,
        "bundles": {
            "two": read_bundle(args.bundle).manifest.manifest_sha256,
            "n": read_bundle(args.endpoint_bundle).manifest.manifest_sha256,
        },
        "unicode": digests(tables()),
        "policies": policies,
        "scenarios": scenarios(args.bundle, args.endpoint_bundle, policies, prompts),
        "load_errors": load_errors(),
        "matches": match_cases(),
        "detectors": detector_cases(),
        "languages": languages(prompts),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document))
    steps = [s for scenario in document["scenarios"] for s in scenario["steps"] if "route" in s]
    errors = sum("error" in s for s in steps)
    rules = {s["decision"]["rule"] for s in steps if "decision" in s} - {None}
    print(
        f"wrote {args.out}: {len(policies)} policies, {len(document['scenarios'])} scenarios, {len(steps)} decisions "
        f"({errors} NoFeasibleEndpoint, {len(rules)} rules deciding), {len(document['load_errors'])} refused files, "
        f"{len(MATCH_PATTERNS)} x {len(MATCH_TEXTS)} matches, {len(document['detectors'])} detector texts"
    )


if __name__ == "__main__":
    main()
