"""A request's language as a capability (serving.features._language, serving.endpoints._capabilities): the detector on
the shipped labelled prompts (data/languages/labelled.jsonl, pipelines/language_eval.py), unknown
below its confidence floor; an N-endpoint bundle's choice (serving.routing._chooser.Chooser
on a spec whose endpoints declare languages) rules out an endpoint whose languages lack the
request's, declared (Needs.language, metadata) before detected, names needs:language=xx in the
decision and in what execute() raises, detects nothing when no endpoint declares languages, and
fails to load with the extra named when the detector is missing."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import serving.features._language as language
from pipelines.language_eval import DATA, UNKNOWN, at_floor, detections, read_labelled, scores
from serving.bundle._manifest import EndpointsSection
from serving.endpoints._capabilities import Needs, rule_name, with_language
from serving.endpoints._record import Capabilities, parse_endpoints
from serving.execution._execute import execute, tried_text
from serving.features._language import CONFIDENCE_FLOOR, LanguageDetector, LanguageDetectorMissing, serves
from serving.policy import FallbackForbidden, NoFeasibleEndpoint
from serving.routing._chooser import Choice, Chooser
from serving.routing._request import Request
from serving.routing._router import Router
from serving.scoring._scorer import Scores
from tests.test_endpoint_bundle import NAMES as BUNDLE_NAMES
from tests.test_endpoint_bundle import trained  # noqa: F401  (the N-endpoint bundle fixture)

# make language-eval at the floor: macro recall 0.932, macro precision 1.000, no wrong language
# (22 of 325 unknown); the tests hold the detector to those, less a margin
MACRO_RECALL_FLOOR = 0.88
MACRO_PRECISION_FLOOR = 0.95

GERMAN = "Kannst du mir bitte erklären, wie eine Wärmepumpe im Winter funktioniert?"
ENGLISH = "Can you please explain how a heat pump works in the winter?"
NAMES = ("phone-3b", "onprem-8b", "frontier")


def spec(phone=("en",), onprem=("en", "de", "fr"), frontier=None):
    """Three endpoints, cheapest first; each declares `languages` unless None."""

    def endpoint(name, where, price, languages):
        caps = {} if languages is None else {"languages": list(languages)}
        return {
            "name": name,
            "where": where,
            "price": price,
            "latency_ms": 100,
            "context_tokens": 100_000,
            "capabilities": caps,
        }

    return parse_endpoints(
        {
            "endpoints": [
                endpoint("phone-3b", "device", {"per_call": 0}, phone),
                endpoint("onprem-8b", "device", {"per_call": 0.0001}, onprem),
                endpoint("frontier", "cloud", {"per_call": 0.003}, frontier),
            ]
        }
    )


def chooser(endpoints=None) -> Chooser:
    section = EndpointsSection(endpoints or spec(), output_tokens=200.0, rule="cheapest_within", parameter=0.05)
    return Chooser(tuple(section.spec), Choice(section), model_version="test", max_chars=2000)


def decide(made: Chooser, prompts, *, needs=None, metadata=None, capabilities=None):
    """Decisions with each costlier endpoint expected to do a little better, all within the rule's
    margin: the cheapest feasible endpoint first, then each costlier one."""
    expected = np.tile([0.9, 0.92, 0.94], (len(prompts), 1))
    n = len(prompts)
    requests = [
        Request(p, needs=w, metadata=m, capabilities=capabilities)
        for p, w, m in zip(prompts, needs or [None] * n, metadata or [None] * n)
    ]
    return made.decisions(requests, Scores([20.0] * n, expected=expected))


# --- the detector ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def labelled():
    return read_labelled(DATA)


def test_the_labelled_set_has_twelve_languages_of_twenty_five_prompts_short_ones_included(labelled):
    by_language: dict[str, list[str]] = {}
    for row in labelled:
        by_language.setdefault(row.language, []).append(row.prompt)
    assert len(by_language) >= 12 and all(len(prompts) >= 25 for prompts in by_language.values())
    assert all(any(len(p) <= 20 for p in prompts) for prompts in by_language.values())  # short ones
    assert all(
        any(len(p) >= 40 for p in prompts) for prompts in by_language.values()
    )  # and longer (CJK: ~1 token a character)


def test_the_detector_finds_the_labelled_languages_and_says_unknown_rather_than_wrong(labelled):
    detector = language.shared_detector()
    found = detections(detector, labelled)
    gold = [row.language for row in labelled]
    at = scores(gold, at_floor(found, detector.floor))
    assert at["macro_recall"] > MACRO_RECALL_FLOOR and at["macro_precision"] > MACRO_PRECISION_FLOOR
    assert at["wrong"] <= 0.02 * len(labelled)
    assert all(s["recall"] > 0.7 for s in at["per_language"].values())
    anything = scores(gold, at_floor(found, 0.0))  # no floor: more found, and more of them wrong
    assert anything["macro_recall"] >= at["macro_recall"] and anything["wrong"] >= at["wrong"]
    assert anything["unknown"] == 0 and at["unknown"] > 0
    assert UNKNOWN in at["confusion"][next(g for g, s in at["per_language"].items() if s["unknown"])]


def test_a_bad_labelled_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"language": "de", "prompt": "Hallo"}\n{"language": "german", "prompt": "Hallo"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: language must be an ISO 639-1 code"):
        read_labelled(path)


class Identifier:
    """A py3langid stand-in answering `answer`, recording what it was given."""

    def __init__(self, answer):
        self.answer, self.seen = answer, []

    def classify(self, text):
        self.seen.append(text)
        return self.answer


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (("de", 0.95), "de"),
        (("de", CONFIDENCE_FLOOR - 0.01), None),  # below the floor: unknown
        (("ary", 0.9), "ar"),  # a variety: its ISO 639-1 language
        (("yue", 0.9), "zh"),
        (("zxx", 0.99), None),  # no language at all
    ],
)
def test_a_detection_below_the_floor_or_of_no_language_is_unknown(answer, expected):
    identifier = Identifier(answer)
    detector = LanguageDetector(identifier, max_chars=10)
    assert detector.language("x" * 50) == expected
    assert identifier.seen == ["x" * 10]  # the first max_chars characters only


def test_short_or_languageless_prompts_are_unknown_and_clear_ones_are_found():
    detector = language.shared_detector()
    assert detector.language(GERMAN) == "de" and detector.language(ENGLISH) == "en"
    assert detector.language("hi") is None and detector.language("12345 67890") is None


# --- what a language needs of an endpoint ------------------------------------------------------


def test_a_declared_language_is_checked_and_kept_as_its_primary_subtag():
    assert Needs(language="pt-BR").language == "pt" and Needs(language="pt-BR")
    with pytest.raises(
        ValueError, match=r"Needs.language must be a language code such as 'en' or 'pt-BR', got 'english'"
    ):
        Needs(language="english")


def test_an_endpoint_declaring_languages_lacks_the_others_and_one_declaring_none_lacks_none():
    some = Capabilities(languages=("en", "pt-br"))
    assert Needs(language="pt").lacking(some) == () and serves(("pt-br",), "pt-PT")
    assert Needs(language="de").lacking(some) == ("language=de",)
    assert Needs(language="de").lacking(Capabilities()) == ()  # no languages declared: every language
    assert Needs(images=True, language="de").lacking(some) == ("images", "language=de")
    assert rule_name({"phone": ("language=de",)}) == "needs:language=de"
    assert rule_name({"phone": ("language=de",), "big": ("images",)}) == "needs:images"  # the flags first


# --- an N-endpoint bundle's choice -------------------------------------------------------------


def test_an_endpoint_whose_languages_lack_the_requests_is_ruled_out_by_name():
    german, english = decide(chooser(), [GERMAN, ENGLISH])
    assert german.endpoint == "onprem-8b" and "phone-3b" not in german.cascade
    assert german.rule == "needs:language=de" and "phone-3b" in german.forbidden
    assert german.reason.startswith("needs:language=de: phone-3b lacks language=de;")
    assert english.endpoint == "phone-3b" and english.rule is None and english.forbidden == ()


def test_an_unknown_language_rules_nothing_out():
    (decision,) = decide(chooser(), ["ok"])
    assert decision.endpoint == "phone-3b" and decision.rule is None and decision.forbidden == ()


def test_a_declared_language_overrides_detection():
    made = chooser()
    (japanese,) = decide(made, [ENGLISH], needs=[Needs(language="ja")])
    assert japanese.cascade == ("frontier",) and japanese.rule == "needs:language=ja"
    assert japanese.forbidden == ("phone-3b", "onprem-8b")
    (french,) = decide(made, [ENGLISH], metadata=[{"language": "fr"}])  # the chat client's and proxy's way
    assert french.endpoint == "onprem-8b" and french.rule == "needs:language=fr"
    (english,) = decide(made, [GERMAN], needs=[Needs(language="en")], metadata=[{"language": "fr"}])
    assert english.endpoint == "phone-3b" and english.rule is None  # Needs first, then metadata
    detector = made.detector
    assert detector is not None  # other needs keep the detected language
    assert with_language(Needs(json=True), GERMAN, None, detector) == Needs(json=True, language="de")
    with pytest.raises(ValueError, match=r"metadata.language must be a language code"):
        decide(made, [ENGLISH], metadata=[{"language": "French"}])


def test_no_endpoint_serving_the_language_is_a_clear_error_naming_the_rule():
    with pytest.raises(NoFeasibleEndpoint) as caught:
        decide(chooser(spec(frontier=("en",))), [GERMAN], needs=[Needs(language="ja")])
    assert tuple(caught.value.rules) == ("needs:language=ja",)
    assert "phone-3b lacks language=ja; onprem-8b lacks language=ja; frontier lacks language=ja" in str(caught.value)


def test_execute_names_the_language_rule_when_no_endpoint_left_serves():
    (decision,) = decide(chooser(), [GERMAN])
    made = []

    def failing(name):
        def call(prompt):
            made.append(name)
            raise ConnectionError("down")

        return call

    with pytest.raises(FallbackForbidden) as caught:
        execute(decision, GERMAN, endpoints={name: failing(name) for name in NAMES})
    assert made == ["onprem-8b", "frontier"]  # phone-3b never called
    assert caught.value.rule == "needs:language=de" and caught.value.endpoint == "phone-3b"
    assert tried_text(caught.value.tried) == "onprem-8b=error:ConnectionError,frontier=error:ConnectionError"
    served = execute(decision, GERMAN, endpoints={name: (lambda prompt, n=name: n) for name in NAMES})
    assert served.served_by == "onprem-8b" and tried_text(served.tried) == "onprem-8b=served"


def test_nothing_is_detected_when_no_endpoint_declares_languages(monkeypatch):
    def no_detection(*args):
        raise AssertionError("a language was detected")

    monkeypatch.setattr(LanguageDetector, "language", no_detection)
    monkeypatch.setattr(language, "shared_detector", no_detection)
    made = chooser(spec(phone=None, onprem=None))
    assert made.detector is None
    (decision,) = decide(made, [GERMAN])
    assert decision.endpoint == "phone-3b" and decision.rule is None
    (declared,) = decide(made, [GERMAN], needs=[Needs(language="de")])  # declared: still no constraint
    assert declared.endpoint == "phone-3b" and declared.rule is None


def test_a_trained_bundles_router_rules_out_by_language_declared_or_detected(trained):  # noqa: F811
    made, public = trained
    router = Router.load(made.folder, strict=True, public_key=public)
    english_only = {name: Capabilities(languages=("en",)) if name == "phone-3b" else None for name in BUNDLE_NAMES}
    assert router.route(GERMAN).rule is None  # the bundle's specs declare no languages
    german = router.route(GERMAN, capabilities=english_only)
    assert german.rule == "needs:language=de" and "phone-3b" in german.forbidden
    assert "phone-3b" not in german.cascade and german.endpoint in BUNDLE_NAMES
    assert router.route(ENGLISH, capabilities=english_only).rule is None
    declared = router.route(ENGLISH, capabilities=english_only, metadata={"language": "fr"})
    assert declared.rule == "needs:language=fr" and "phone-3b" not in declared.cascade
    batch = router.route_batch([GERMAN, ENGLISH], capabilities=english_only)
    assert [d.rule for d in batch] == ["needs:language=de", None]


def test_languages_declared_only_in_the_specs_given_to_execute_apply_without_other_needs(trained):  # noqa: F811
    """RoutedChat's specs= and the proxy's --endpoints file reach the router as Router.execute's
    `specs`: languages declared there rule an endpoint out though the request needs nothing else."""
    import dataclasses

    made, public = trained
    router = Router.load(made.folder, strict=True, public_key=public)
    chosen = router.route(GERMAN).endpoint  # what the bundle's own specs, declaring no languages, run first
    specs = {
        e.name: dataclasses.replace(e, capabilities=Capabilities(languages=("en",))) if e.name == chosen else e
        for e in router.manifest.endpoints.spec
    }
    called = []
    calls = {name: (lambda prompt, n=name: called.append(n) or n) for name in BUNDLE_NAMES}
    served = router.execute(GERMAN, endpoints=calls, specs=specs)
    assert chosen not in called and served.served_by != chosen and called == [served.served_by]
    assert served.decision.rule == "needs:language=de" and chosen in served.decision.forbidden


def test_capabilities_given_per_call_that_declare_languages_are_applied():
    made = chooser(spec(phone=None, onprem=None))
    given = {"phone-3b": Capabilities(languages=("en",)), "onprem-8b": None, "frontier": None}
    (decision,) = decide(made, [GERMAN], capabilities=given)
    assert decision.endpoint == "onprem-8b" and decision.rule == "needs:language=de"


def test_without_the_extra_a_spec_declaring_languages_fails_to_load_naming_it(monkeypatch):
    monkeypatch.setattr(language, "_shared", None)
    monkeypatch.setitem(sys.modules, "py3langid.langid", None)  # as if not installed
    with pytest.raises(LanguageDetectorMissing, match=r"pip install 'edge-cloud-router\[languages\]' \(py3langid\)"):
        chooser()
    assert chooser(spec(phone=None, onprem=None)).detector is None  # no languages declared: loads as ever
