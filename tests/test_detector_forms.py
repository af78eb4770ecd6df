"""The content detectors on the forms of the "Hardening, round three" issue: card numbers separated by
no-break or narrow no-break spaces, tabs, dots, slashes, double spaces, line breaks, en dashes or
underscores, glued to a word, with zero-width characters or soft hyphens inside; IBANs with dashes or
no-break spaces; emails with a full-width "@" or zero-width characters. The normalisation that reads them
(serving.policy._detectors.fold), the two false positives the issue names, the known misses, linear time
on adversarial inputs of each detector, and the eval's floors on the shipped set (docs/policies.md#content-detectors)."""

from __future__ import annotations

import re
import time

import pytest

from data.pii_synthetic import read
from serving.policy import DETECTORS, detect
from tests.conftest import ROOT

# Imported where used (data.pii_synthetic's form tables, serving.policy._detectors' fold), so that each
# test of a form fails on its own on the code before the hardening, rather than the module failing to load.

LABELLED = ROOT / "data" / "policy" / "pii_labelled.jsonl"


def found(text: str, names=None) -> list[tuple[str, str]]:
    return [(f.detector, text[f.start : f.end]) for f in detect(text, names)]


# (form, detector, prompt, the value as written in it)
FORMS = [
    (
        "card_nbsp",
        "payment_card",
        "card 4111\u00a01111\u00a01111\u00a01111 thanks",
        "4111\u00a01111\u00a01111\u00a01111",
    ),
    (
        "card_narrow_nbsp",
        "payment_card",
        "Carte : 5555\u202f5555\u202f5555\u202f4444.",
        "5555\u202f5555\u202f5555\u202f4444",
    ),
    ("card_tab", "payment_card", "number\t4111\t1111\t1111\t1111\texp", "4111\t1111\t1111\t1111"),
    ("card_dots", "payment_card", "it is 4111.1111.1111.1111 right?", "4111.1111.1111.1111"),
    ("card_slashes", "payment_card", "pay with 5555/5555/5555/4444 now", "5555/5555/5555/4444"),
    ("card_double_space", "payment_card", "card  4111  1111  1111  1111  ok", "4111  1111  1111  1111"),
    ("card_newline", "payment_card", "my card is 4111 1111\n1111 1111, exp 12/29", "4111 1111\n1111 1111"),
    (
        "card_en_dash",
        "payment_card",
        "Karte 4111\u20131111\u20131111\u20131111 bitte",
        "4111\u20131111\u20131111\u20131111",
    ),
    ("card_underscore", "payment_card", "ref 4111_1111_1111_1111 here", "4111_1111_1111_1111"),
    ("card_glued", "payment_card", "use Visa4111111111111111 please", "4111111111111111"),
    (
        "card_zero_width",
        "payment_card",
        "pay 4111\u200b1111\u200d1111\u20601111 now",
        "4111\u200b1111\u200d1111\u20601111",
    ),
    (
        "card_soft_hyphen",
        "payment_card",
        "card 4111\u00ad1111\u00ad1111\u00ad1111.",
        "4111\u00ad1111\u00ad1111\u00ad1111",
    ),
    ("iban_dashes", "iban", "IBAN DE89-3704-0044-0532-0130-00, BIC X", "DE89-3704-0044-0532-0130-00"),
    (
        "iban_nbsp",
        "iban",
        "IBAN\u00a0: FR76\u00a03000\u00a06000\u00a00112\u00a03456\u00a07890\u00a0189 merci",
        "FR76\u00a03000\u00a06000\u00a00112\u00a03456\u00a07890\u00a0189",
    ),
    ("email_fullwidth_at", "email", "write to mira.tasvo\uff20kalo-net.de today", "mira.tasvo\uff20kalo-net.de"),
    ("email_zero_width", "email", "write to mira.tas\u200bvo@kalo-net.de today", "mira.tas\u200bvo@kalo-net.de"),
]
# Read by the same normalisation, though the issue does not name them.
EXTRA = [
    ("payment_card", "カード番号：４１１１ １１１１ １１１１ １１１１です", "４１１１ １１１１ １１１１ １１１１"),
    ("payment_card", "رقم البطاقة ٤١١١ ١١١١ ١١١١ ١١١١ شكرا", "٤١١١ ١١١١ ١١١١ ١١١١"),
    ("phone", "call +44\u00a020\u00a07946\u00a00123 today", "+44\u00a020\u00a07946\u00a00123"),
    ("national_id", "SSN 123\u201345\u20136789 on file", "123\u201345\u20136789"),
    ("ip_address", "サーバー１９２．０．２．１７に接続", "１９２．０．２．１７"),
    ("national_id", "mi DNI es 12345678-Z, gracias", "12345678-Z"),
]


def test_the_table_covers_every_form_the_issue_names():
    from data.pii_synthetic import NAMED_FORMS

    assert sorted(form for form, *_ in FORMS) == sorted(NAMED_FORMS)


@pytest.mark.parametrize(("form", "name", "text", "value"), FORMS, ids=[f[0] for f in FORMS])
def test_each_form_the_issue_names_is_found_with_its_span(form, name, text, value):
    assert found(text) == [(name, value)]
    assert found(text, [name]) == [(name, value)]
    start = text.index(value)
    assert DETECTORS[name].spans(text) == [(start, start + len(value))]  # the detector alone folds too
    assert DETECTORS[name].found_in(text) is True  # what policy rules call


@pytest.mark.parametrize(("name", "text", "value"), EXTRA)
def test_other_forms_normalisation_reads(name, text, value):
    assert found(text) == [(name, value)]


def test_a_policy_rule_reads_the_folded_text():
    """Rules ask Detector.found_in (serving.policy._rules): the normalisation is inside it, not in detect()."""
    from serving.policy._rules import _Facts

    request = _Facts("mail mira.tasvo\uff20kalo-net.de", 8, None, None)
    assert request.detected((DETECTORS["email"],)) is True


def test_a_rule_naming_several_detectors_folds_the_prompt_once(monkeypatch):
    """Each detector folded the prompt itself (Detector.found_in): a rule naming all seven folded a
    non-ASCII prompt seven times (~5 us each on ~128 tokens). The request folds it once and hands the
    Folded to each detector, which does not fold it again."""
    import serving.policy._detectors as detectors
    import serving.policy._rules as rules
    from serving.policy import PolicySet

    folded: list[str] = []
    fold = detectors.fold

    def counting_fold(text: str) -> detectors.Folded:
        folded.append(text)
        return fold(text)

    monkeypatch.setattr(rules, "fold", counting_fold, raising=False)  # (rules did not fold before)
    monkeypatch.setattr(detectors, "fold", counting_fold)
    rule = {"name": "pii", "when": {"detected": list(DETECTORS)}, "then": "forbid", "endpoint": "cloud"}
    policy = PolicySet.from_dict({"rules": [rule]})
    prompt = "Bonjour\u00a0! Où en est la commande n\u00b0\u00a02024\u20115581\u202f? Merci\u00a0!"
    assert not policy.evaluate(prompt, 20, None, {}).forbidden_by  # every detector ran, none found anything
    assert folded == [prompt]
    assert policy.evaluate("mail mira.tasvo\uff20kalo-net.de", 8, None, {}).forbidden_by  # the folded text read


# ---- false positives ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "10.10.10.10 am",  # a time, not an address
        "DNA: 12345678Z",  # a sample's id, not a DNI: eight digits and a letter count after an id's name
        "La versión 10.2.1.3 del firmware no arranca",  # a version, named in Spanish
        "See section 2.3.1.4 of the spec",
        "Per § 4.1.2.3, who pays?",
        "сервер10.0.0.1 не отвечает",  # glued to a word of a script written with spaces
        "Sample 87654321X failed QC",
    ],
)
def test_ordinary_prompts_the_issue_flagged_are_not_flagged(text):
    assert detect(text) == []


@pytest.mark.parametrize(
    ("text", "value", "name"),
    [
        ("ssh 10.10.10.10 and", "10.10.10.10", "ip_address"),
        ("DNI: 12345678Z", "12345678Z", "national_id"),
        ("NIE X1234567L", "X1234567L", "national_id"),  # an NIE's shape is its own: no name needed
        ("服务器10.0.0.1无法连接", "10.0.0.1", "ip_address"),  # CJK is written without spaces
        ("1234\n4111 1111 1111 1111", "4111 1111 1111 1111", "payment_card"),  # a postcode's line, then a card
        ("4111 1111 1111 1111\n1234 Main Street", "4111 1111 1111 1111", "payment_card"),
    ],
)
def test_what_the_context_rules_keep(text, value, name):
    assert found(text) == [(name, value)]


@pytest.mark.parametrize(
    "text",
    [
        "1234\n4111\n1111\n1111\n1111",  # a column of numbers, one group a line: not a card
        "x 1234  4111  1111  1111  1111",  # a group of a longer grouped number
        "git a3f94111111111111111c2d7",  # digits glued to a hash, not a word
        "4111-1111 1111.1111",  # mixed separators (a known miss)
    ],
)
def test_card_shapes_that_are_not_cards(text):
    assert found(text, ["payment_card"]) == []


# ---- known misses (docs/policies.md lists them) ----------------------------------------------------


@pytest.mark.parametrize(
    ("form", "text"),
    [
        ("card_mixed_separators", "card 4111-1111 1111.1111 thanks"),
        ("card_digit_by_digit", "card 4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 thanks"),
        ("email_obfuscated", "mail mira.tasvo [at] kalo-net [dot] de"),
        ("iban_homoglyph_country", "IBAN D\u041589 3704 0044 0532 0130 00"),  # a Cyrillic Е
        ("dni_unnamed", "Mis datos: 12345678Z, gracias"),
    ],
)
def test_the_known_misses_are_still_missed(form, text):
    """The forms left alone on purpose (docs/policies.md#content-detectors says why): catching one is a
    change to make on purpose, with the docs and the set's known-miss forms."""
    from data.pii_synthetic import KNOWN_MISS_FORMS

    assert form in KNOWN_MISS_FORMS
    assert detect(text) == []


# ---- normalisation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ch", "folded"),
    [
        ("\u00a0", " "),  # no-break space
        ("\u202f", " "),  # narrow no-break space
        ("\u3000", " "),  # ideographic space
        ("\u2028", "\n"),  # line separator
        ("\u200b", ""),  # zero-width space
        ("\u200d", ""),  # zero-width joiner
        ("\u00ad", ""),  # soft hyphen
        ("\ufeff", ""),  # byte order mark
        ("\ufe0f", ""),  # variation selector
        ("\u2013", "-"),  # en dash
        ("\u2011", "-"),  # non-breaking hyphen
        ("\uff20", "@"),  # full-width commercial at
        ("\uff14", "4"),  # full-width digit
        ("\u0664", "4"),  # Arabic-Indic digit
        ("\u096a", "4"),  # Devanagari digit
        ("\ufb01", "fi"),  # ligature (NFKC)
        ("\u2026", "..."),  # ellipsis (NFKC)
        ("\u2014", "\u2014"),  # em dash: stays
        ("é", "é"),
        ("中", "中"),
    ],
)
def test_fold_char(ch, folded):
    from serving.policy._detectors import fold_char

    assert fold_char(ch) == folded


def test_folding_is_idempotent_on_every_code_point():
    """A folded character folds to itself: one pass of fold() is the fixed point, no second pass can
    reveal a value the first one hid."""
    from serving.policy._detectors import fold_char

    unstable = []
    for cp in range(0x110000):
        folded = fold_char(chr(cp))
        if folded != chr(cp) and any(fold_char(c) != c for c in folded):
            unstable.append(hex(cp))
    assert unstable == []


def test_every_character_that_folds_is_looked_up():
    """fold() looks up only the characters _MAY_FOLD matches: every character that folds must be one of
    them, and the ones it skips must all be assigned (Unicode's normalization stability policy then keeps
    them folding to themselves in later versions)."""
    import unicodedata

    from serving.policy._detectors import _FOLDS_TO_ITSELF, _MAY_FOLD, fold_char

    assert [hex(cp) for cp in range(0x110000) if fold_char(chr(cp)) != chr(cp) and not _MAY_FOLD.match(chr(cp))] == []
    skipped = re.compile(f"[{_FOLDS_TO_ITSELF}]")
    unassigned = [
        hex(cp) for cp in range(0x80, 0x110000) if skipped.match(chr(cp)) and unicodedata.category(chr(cp)) == "Cn"
    ]
    assert unassigned == []


def test_ascii_text_is_not_copied():
    from serving.policy._detectors import fold

    text = "card 4111 1111 1111 1111, mail ana.vo@lin-mar.fr"
    assert fold(text).text is text and fold(text).same_indices


def test_spans_are_the_originals_when_characters_are_dropped_or_expanded():
    """Dropped characters (zero-width) and expanded ones (… is three dots, ﬁ two letters) before and inside
    values shift the folded text's indices: findings come back in the original's."""
    text = "\u2026\ufb01\u200b\u00ad mail an\u200ba.vo@lin-mar.fr \u2026 card 4111\u00ad1111 1111 1111 \ufb01n \u2026"
    assert found(text) == [("email", "an\u200ba.vo@lin-mar.fr"), ("payment_card", "4111\u00ad1111 1111 1111")]


def test_many_distinct_characters_to_fold(monkeypatch):
    """Past REPLACE_AT_MOST distinct characters to fold, fold() takes one str.translate instead of a
    str.replace each: both give the same text, and the finding's span is the original's."""
    import serving.policy._detectors as detectors

    fullwidth = "".join(chr(0xFF21 + i) for i in range(26)) + "".join(chr(0xFF10 + i) for i in range(10))
    text = fullwidth + "\u2026\u200b\u00a0mail mira.tasvo\uff20kalo-net.de \ufb01n"
    expected = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789... mail mira.tasvo@kalo-net.de fin"
    assert len(set(text) - set(expected)) > detectors.REPLACE_AT_MOST  # the translate path
    assert detectors.fold(text).text == expected
    monkeypatch.setattr(detectors, "REPLACE_AT_MOST", 1000)  # the replace path
    assert detectors.fold(text).text == expected
    assert found(text) == [("email", "mira.tasvo\uff20kalo-net.de")]


# ---- linear time: a 1 MiB adversarial input of each detector, a 4 MiB prompt ----------------------

MIB = 2**20
ADVERSARIAL = {
    "email": ["a@" * (MIB // 2), "a\uff20" * (MIB // 2), "a.b-" * (MIB // 4) + "@x"],
    "phone": ["+1 2" * (MIB // 4), "(0" * (MIB // 2), "012 " * (MIB // 4)],
    "payment_card": ["1234\n" * (MIB // 5), "4111\u00a0" * (MIB // 5), "4\u200b" * (MIB // 2), "1 2 " * (MIB // 4)],
    "iban": ["DE12-" * (MIB // 5), "DE12 " * (MIB // 5), "de1" * (MIB // 3)],
    "national_id": ["12345678Z " * (MIB // 10), "AB12 " * (MIB // 5), "DNI 1" * (MIB // 5)],
    "credential": ["eyJ" * (MIB // 3), "password=" * (MIB // 9), "sk-" * (MIB // 3)],
    "ip_address": ["1.2." * (MIB // 4), "version 1.1.1.1 " * (MIB // 16), "1.1.1.1 am " * (MIB // 11)],
}
SECONDS_PER_MIB = 10.0  # generous: the slowest takes ~0.5 s on a shared 2-core machine; backtracking, hours


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_each_detector_scans_an_adversarial_mebibyte_quickly(name):
    for text in ADVERSARIAL[name]:
        start = time.perf_counter()
        detect(text, [name])
        elapsed = time.perf_counter() - start
        assert elapsed < SECONDS_PER_MIB * len(text) / MIB, (name, text[:12], elapsed)


def test_a_four_mebibyte_prompt_needing_normalisation_is_scanned_to_its_end():
    unit = "Le comité s\u2019est réuni le 15\u00a0mars\u00a0: commande 2024\u20115581, marge 12,5\u202f%\u200b. "
    text = unit * (4 * MIB // len(unit)) + " mira.tasvo\uff20kalo-net.de 4111\u200b1111\u00a01111\u00a01111"
    start = time.perf_counter()
    result = found(text)
    assert time.perf_counter() - start < 4 * SECONDS_PER_MIB
    assert result == [("email", "mira.tasvo\uff20kalo-net.de"), ("payment_card", "4111\u200b1111\u00a01111\u00a01111")]


# ---- the eval's figures on the shipped set -------------------------------------------------------

# Floors under the measured figures (docs/policies.md#content-detectors; `make pii-eval`), with a margin:
# measured 320/320 over the named forms and 20/20 on each, 0 of 300 ordinary prompts flagged.
NAMED_FORMS_RECALL_FLOOR = 0.95
EACH_NAMED_FORM_RECALL_FLOOR = 0.85
ORDINARY_FLAGGED_CEILING = 0.02


def test_the_set_holds_every_form_and_the_ordinary_prompts():
    from data.pii_synthetic import NAMED_FORMS

    lines = read(LABELLED)
    forms = [line["form"] for line in lines]
    for form in NAMED_FORMS:
        assert forms.count(form) >= 20, form
    ordinary = [line for line in lines if line["form"].startswith("ordinary:")]
    assert len(ordinary) >= 300 and all(line["labels"] == [] for line in ordinary)


def test_the_eval_figures_meet_the_stated_floors():
    from data.pii_synthetic import NAMED_FORMS
    from pipelines.pii_eval import form_figures, named_forms_recall, ordinary_false_positives

    lines = read(LABELLED)
    assert named_forms_recall(lines)["recall"]["value"] >= NAMED_FORMS_RECALL_FLOOR
    per_form = form_figures(lines)
    for form in NAMED_FORMS:
        assert per_form[form]["all"]["recall"]["value"] >= EACH_NAMED_FORM_RECALL_FLOOR, form
        assert per_form[form]["all"]["precision"]["value"] >= 0.95, form
    flagged = ordinary_false_positives(lines)["prompts_flagged"]
    assert flagged["n"] >= 300 and flagged["value"] <= ORDINARY_FLAGGED_CEILING, flagged
