"""The content detectors (serving.policy): each on positives and hard negatives, checksums one digit
off, spans on non-ASCII text, findings that hold no text, bad input, 1 MB inputs, and the floors the
shipped labelled set must reach. The forms of the hardening issue, normalisation, ordinary prompts and
adversarial inputs per detector: tests/test_detector_forms.py."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.pii_synthetic import generate, read
from evaluation.detection import score, wilson
from serving.policy import DETECTORS, Finding, any_detected, detect
from serving.policy import _detectors as detectors
from tests.conftest import ROOT
from tests.test_detector_forms import EXTRA as FORMS_EXTRA
from tests.test_detector_forms import FORMS, MIB

LABELLED = ROOT / "data" / "policy" / "pii_labelled.jsonl"


def found(text: str, names=None) -> list[tuple[str, str]]:
    return [(f.detector, text[f.start : f.end]) for f in detect(text, names)]


POSITIVES = [
    ("email", "write to mira.tasvo@kalo-net.de before noon", "mira.tasvo@kalo-net.de"),
    ("email", "(cc: r.sol+news@post.lin-mar.co.uk)", "r.sol+news@post.lin-mar.co.uk"),
    ("phone", "call +44 20 7946 0123 today", "+44 20 7946 0123"),
    ("phone", "Tel. +44 (0)20 7946 0123.", "+44 (0)20 7946 0123"),
    ("phone", "ring (212) 555-0143 or", "(212) 555-0143"),
    ("phone", "cell 646.555.0199", "646.555.0199"),
    ("phone", "Ruf an: 030 1234567", "030 1234567"),
    ("phone", "appelle le 06 12 34 56 78 !", "06 12 34 56 78"),
    ("phone", "E.164 +14155550143", "+14155550143"),
    ("payment_card", "card 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111"),
    ("payment_card", "amex 3782 822463 10005 ok", "3782 822463 10005"),
    ("payment_card", "mc 5555-5555-5555-4444", "5555-5555-5555-4444"),
    ("payment_card", "card 4111 1111 1111 1111 12/29 cvv", "4111 1111 1111 1111"),
    ("iban", "IBAN DE89 3704 0044 0532 0130 00, BIC COBADEFFXXX", "DE89 3704 0044 0532 0130 00"),
    ("iban", "pay GB82WEST12345698765432 now", "GB82WEST12345698765432"),
    ("iban", "lower: gb82west12345698765432", "gb82west12345698765432"),
    ("national_id", "SSN 123-45-6789 on file", "123-45-6789"),
    ("national_id", "my ssn is 123456789", "123456789"),
    ("national_id", "NINO AB 12 34 56 C", "AB 12 34 56 C"),
    ("national_id", "NI number JG103759A", "JG103759A"),
    ("national_id", "DNI 12345678Z", "12345678Z"),
    ("national_id", "NIE X1234567L", "X1234567L"),
    ("national_id", "Mijn BSN is 111222333.", "111222333"),
    ("credential", "key AKIAQWERTYUIOPASDFGH here", "AKIAQWERTYUIOPASDFGH"),
    ("credential", "token ghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9),
    ("credential", "glpat-abcdefghij0123456789 is mine", "glpat-abcdefghij0123456789"),
    ("credential", "bot xoxb-1234567890-abcdefABCDEF", "xoxb-1234567890-abcdefABCDEF"),
    ("credential", "stripe sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("credential", "OPENAI_KEY sk-proj-" + "Ab3" * 15, "sk-proj-" + "Ab3" * 15),
    ("credential", 'db_password = "Tr0ub4dor&3"', "Tr0ub4dor&3"),
    ("credential", "API_KEY=Zx81kqP0wL3mn", "Zx81kqP0wL3mn"),
    ("credential", '{"client_secret": "q8R!x2Lm"}', "q8R!x2Lm"),
    ("ip_address", "ssh root@192.0.2.17 failed", "192.0.2.17"),
    ("ip_address", "from 10.0.0.1.", "10.0.0.1"),
]
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\n-----END RSA PRIVATE KEY-----"
POSITIVES += [("credential", f"Authorization: Bearer {JWT}", JWT), ("credential", f"key:\n{PEM}\nthanks", PEM)]

NEGATIVES = [
    # a space or dash inside an IBAN-shaped run, where its groups are not of four: not an IBAN, whatever
    # its mod-97 arithmetic says (each of these passed it by chance before iban_valid refused such a run)
    "ref DE3337040044 532013000 end, ref DE07370400440532-13000 end, ref DE433704-0440532013000 end",
    "jane@example.com and bob@mail.example.org are samples; so is root@localhost.test",
    "git clone git@github.com:org/repo.git",
    "assets: logo@2x.png, icon@3x.webp",
    "dates 01-02-2024 10:30 and 15/03/2024, at 2024-03-15T10:30:00Z",
    "math: 123 - 45 - 6 = 72, 2^10 = 1024, 3 + 4 + 5",
    "version 4.19.2.10, v1.2.3.4, Windows 10.0.19041.1",
    "ISBN 978-3-16-148410-0 and 9783161484100",
    "order 4111111111111112 (Luhn fails)",
    "20 digits 4111 1111 1111 1111 1111 in groups",
    "IBAN DE88 3704 0044 0532 0130 00 has the wrong check digits",
    "SSN 000-12-3456, 666-12-3456, 912-34-5678, 123-00-4567, 123-45-0000",
    "NINO QQ123456C, GB123456A, AB123456E",
    "DNI 12345678A has the wrong letter",
    "BSN 111222334 fails the 11-test; invoice 111222333 is not named",
    "request 123e4567-e89b-12d3-a456-426614174000, sha 9fceb02d0ae598e95dc970b74dd2b3f3e3c0d2f1",
    "decode SGVsbG8gd29ybGQgdGhpcyBpcyBub3QgYSBrZXk=",
    "pk_live_4eC39HqLyjWDarjtT1zdp7dc is publishable; AKIAIOSFODNN7EXAMPLE is AWS's sample",
    'password = "<your password here>"; api_key = os.environ["API_KEY"]; token = "${TOKEN}"',
    "def login(user: str, password: str) -> bool: return check(password=password)",
    "if password == 'hunter2long': pass",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n-----END PUBLIC KEY-----",
    "IPs 256.1.1.1, 1.2.3, 01.02.03.04 and 1.2.3.4.5",
    "the product code is 5551234567, zip 90210, room 4.12",
    "branch sk-feature-make-the-router-faster-and-smaller-again",
]


@pytest.mark.parametrize(("name", "text", "value"), POSITIVES)
def test_each_detector_finds_its_values_with_their_exact_span(name, text, value):
    assert found(text) == [(name, value)]
    assert found(text, [name]) == [(name, value)]


@pytest.mark.parametrize("text", NEGATIVES)
def test_hard_negatives_find_nothing(text):
    assert found(text) == []


@pytest.mark.parametrize(
    ("name", "valid", "one_digit_off"),
    [
        ("payment_card", "pay with 4111111111111111", "pay with 4111111111111121"),
        ("payment_card", "pay with 378282246310005", "pay with 378282246310015"),
        ("iban", "to DE89370400440532013000", "to DE89370400440532013001"),
        ("iban", "to NL91ABNA0417164300", "to NL91ABNA0417164301"),
        ("national_id", "BSN 111222333", "BSN 111222343"),
        ("national_id", "DNI 12345678Z", "DNI 12345679Z"),
    ],
)
def test_checksums_accept_the_valid_value_and_refuse_it_one_digit_off(name, valid, one_digit_off):
    assert [d for d, _ in found(valid)] == [name]
    assert found(one_digit_off) == []


def test_spans_are_string_indices_on_non_ascii_text():
    text = "🙏 Grüße — 请联系 ana.vo@lin-mar.fr，或者 +33 6 12 34 56 78。卡号4111111111111111。"
    for value in ("ana.vo@lin-mar.fr", "+33 6 12 34 56 78", "4111111111111111"):
        start = text.index(value)
        assert any(f.start == start and f.end == start + len(value) for f in detect(text)), value
    assert [f.detector for f in detect(text)] == ["email", "phone", "payment_card"]


def test_findings_hold_no_text():
    text = "mail ana.vo@lin-mar.fr, card 4111 1111 1111 1111, password='Tr0ub4dor&3'"
    findings = detect(text)
    assert len(findings) == 3
    shown = repr(findings) + str(findings) + "".join(map(str, findings))
    for secret in ("ana.vo", "lin-mar", "4111", "Tr0ub4dor"):
        assert secret not in shown
    assert set(vars(type(findings[0]))["__slots__"]) == {"detector", "start", "end"}


def test_a_finding_inside_a_longer_one_is_left_out():
    """The card number is part of the secret: one finding, the secret; asked alone, the card is found."""
    text = 'secret = "4111 1111 1111 1111!"'
    assert found(text) == [("credential", "4111 1111 1111 1111!")]
    assert found(text, ["payment_card"]) == [("payment_card", "4111 1111 1111 1111")]
    text = 'password = "4111111111111111"'  # the same span: both are true, both are kept
    assert found(text) == [("credential", "4111111111111111"), ("payment_card", "4111111111111111")]


def test_values_next_to_each_other_are_all_found():
    text = "DE89370400440532013000 GB82WEST12345698765432 4111111111111111 4012888888881881"
    assert [d for d, _ in found(text)] == ["iban", "iban", "payment_card", "payment_card"]


def test_any_detected_matches_detect_and_respects_the_names():
    assert any_detected("call +44 20 7946 0123") is True
    assert any_detected("call +44 20 7946 0123", ["email", "iban"]) is False
    assert any_detected("call +44 20 7946 0123", ["phone"]) is True
    for text in [*NEGATIVES, *(t for _, t, _ in POSITIVES)]:
        assert any_detected(text) is bool(detect(text)), text


def test_bad_input_names_what_was_wrong():
    with pytest.raises(TypeError, match="text must be str, got bytes"):
        detect(b"ana@x.de")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be str, got NoneType"):
        any_detected(None, ["email"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown detector 'passport'; known detectors: email, phone"):
        detect("x", ["email", "passport"])
    with pytest.raises(TypeError, match="names must be a list of detector names or None, got str"):
        detect("x", "email")
    with pytest.raises(TypeError, match="detector names must be str, got int"):
        any_detected("x", [3])  # type: ignore[list-item]
    assert detect("") == [] and any_detected("") is False


def test_a_megabyte_prompt_is_scanned_to_its_end():
    """1 MB of prose with values, and inputs built to make a backtracking scan slow, all return; the
    values at the very end are found (no scan limit). Not timed: `make pii-eval` measures speed."""
    unit = "The committee met on 2024-03-15 about order 2024-5581 (v3.2.1) and 12.5% margins. "
    text = unit * (1_000_000 // len(unit)) + "ana.vo@lin-mar.fr 4111 1111 1111 1111"
    assert found(text) == [("email", "ana.vo@lin-mar.fr"), ("payment_card", "4111 1111 1111 1111")]
    hostile = ["7" * 1_000_000, "1234 " * 200_000, "a@" * 500_000, "eyJ" * 333_334, "DE12 " * 200_000]
    hostile += ["+1 2" * 250_000, "password=" * 111_112, "1.2." * 250_000, "a" * 1_000_000]
    for text in hostile:
        assert isinstance(detect(text), list)
        assert isinstance(any_detected(text), bool)


def test_the_shipped_set_is_what_the_seeded_generator_writes():
    lines = read(LABELLED)
    assert lines == json.loads(json.dumps(generate()))  # `python -m pipelines.pii_set` rewrites it
    for line in lines:
        for label in line["labels"]:
            assert label["detector"] in DETECTORS
            assert 0 <= label["start"] < label["end"] <= len(line["text"])
            assert line["text"][label["start"] : label["end"]].strip() == line["text"][label["start"] : label["end"]]


# Floors under the measured figures (docs/policies.md#content-detectors; `make pii-eval`), by a margin of
# four to six points: the set and the detectors are deterministic, so these fail only when a detector or
# the set changes. Recall counts the set's known-miss forms (obfuscated emails, unnamed DNIs, ...), hence
# email 0.863, iban 0.908 and national_id 0.795 measured.
PRECISION_FLOOR = 0.95
RECALL_FLOORS = {
    "email": 0.82,
    "phone": 0.92,
    "payment_card": 0.9,
    "iban": 0.86,
    "national_id": 0.74,
    "credential": 0.88,
    "ip_address": 0.95,
}


def test_the_labelled_set_reaches_the_stated_floors():
    counts, _ = score(read(LABELLED))
    overlap = counts["overlap"]
    assert set(overlap) == set(RECALL_FLOORS) == set(DETECTORS)
    for name, c in overlap.items():
        assert c.labelled >= 40 and c.found >= 40, name
        assert c.found_right / c.found >= PRECISION_FLOOR, (name, c)
        assert c.labels_recalled / c.labelled >= RECALL_FLOORS[name], (name, c)
        exact = counts["exact"][name]
        assert exact.labels_recalled >= c.labels_recalled - 2, (name, exact, c)


def test_the_negatives_of_the_set_are_counted_against_precision():
    """A detector firing on every digit run would have full recall: the set's negatives must sink it."""
    import re

    from serving.policy._detectors import fold

    lines = read(LABELLED)

    def every_digit_run(text: str) -> list[Finding]:
        folded = fold(text)  # the same normalisation as the detectors', so that it reads every form
        runs = re.finditer(r"[0-9][0-9\s./_-]{11,}[0-9]", folded.text)
        return [Finding("payment_card", *folded.span(*m.span())) for m in runs]

    counts, _ = score(lines, every_digit_run, ["payment_card"])
    c = counts["overlap"]["payment_card"]
    assert c.labels_recalled / c.labelled > 0.9
    assert c.found_right / c.found < 0.8


def test_wilson_interval():
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(50, 50)
    assert hi == 1.0 and 0.92 < lo < 0.93  # 0.9287
    lo, hi = wilson(45, 50)
    assert 0.78 < lo < 0.79 and 0.95 < hi < 0.96  # 0.7864, 0.9565


@pytest.mark.real_data
def test_nothing_is_found_in_the_benchmark_prompts(real_data_dir):
    """The RouteLLM logs' prompts (MMLU, GSM8K, MT-Bench questions: numbers, arithmetic, code, dates,
    no personal data) give no finding: the real prompts' side of precision."""
    from data.logs import load_logs

    prompts = sorted({row["prompt"] for row in load_logs([real_data_dir]).rows})
    assert len(prompts) > 10_000
    assert [p[:120] for p in prompts if any_detected(p)] == []


@pytest.mark.parametrize(
    ("check", "off", "detector"),
    [
        ("luhn_valid", lambda digits: True, "payment_card"),
        ("iban_valid", lambda iban: True, "iban"),
        ("bsn_valid", lambda digits: len(digits) == 9, "national_id"),
        ("dni_valid", lambda number, letter: True, "national_id"),
        ("valid_ssn", lambda area, group, serial: True, "national_id"),
        ("_NINO_UNUSED_PREFIXES", frozenset(), "national_id"),
    ],
)
def test_each_check_is_needed_on_the_labelled_set(monkeypatch, check, off, detector):
    """Switched off, each check lets the set's values that fail it through: precision falls under the floor."""
    import serving.policy._detectors as detectors

    monkeypatch.setattr(detectors, check, off)
    c = score(read(LABELLED))[0]["overlap"][detector]
    assert c.found_right / c.found < PRECISION_FLOOR


# ---- long texts, a window at a time -------------------------------------------------------------

FILLER = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 8  # nothing to find, no digits
# Each detector's own examples, and those read through normalisation (tests/test_detector_forms.py).
WINDOWED_POSITIVES = [*POSITIVES, *((name, text, value) for _, name, text, value in FORMS), *FORMS_EXTRA]
WINDOWED_POSITIVES += [("ip_address", "to 255.255.255.255.", "255.255.255.255")]  # a rule's longest match
# Findings whose check reads the text around the value (a name before it, "am" after it, one more
# group of digits after it, a path after it): kept or refused as in the whole text.
WINDOWED_NEGATIVES = [
    *NEGATIVES,
    "version 10.2.1.3",
    "ping 10.10.10.10 am",
    "DNA: 12345678Z",
    "4111 1111 1111 1111 4111",
    "git@github.com:org/repo.git",
    # the longest match a rule allows, refused by what its look-ahead reads just past it
    "255.255.255.255.1",
    "255.255.255.255 am",
    "123-45-6789-0",
    "41111111111111111111",
]


@contextlib.contextmanager
def windows(chars: int, translate_chars: int | None = None):
    """The detectors' windows (serving.policy._detectors.WINDOW_CHARS, TRANSLATE_CHARS) set to `chars`."""
    saved = detectors.WINDOW_CHARS, detectors.TRANSLATE_CHARS
    detectors.WINDOW_CHARS, detectors.TRANSLATE_CHARS = chars, translate_chars or chars
    try:
        yield
    finally:
        detectors.WINDOW_CHARS, detectors.TRANSLATE_CHARS = saved


def placed(text: str, before: int) -> str:
    """text after `before` characters of FILLER (and a space), FILLER after it: past any small window."""
    return f"{FILLER[:before]} {text} {FILLER[:40]}"


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("abc", 3),
        ("a(?=bcd)", 4),  # a look-ahead reads past the match
        ("(?<=xyz)a", 1),  # a look-behind reads before it
        ("a{2,5}\\b", 7),  # \b reads the next character: two, for $ and \Z
        ("(ab|c)\\1", 4),
        ("(?:x[0-9]{1,3}){3}(?![0-9])", 13),
        ("[0-9](?<![0-9][0-9])(?:[0-9]{12,18}(?![0-9])|[0-9]{3})", 20),
    ],
)
def test_reach_is_how_far_past_its_start_a_match_reads(pattern, expected):
    assert detectors.reach(re.compile(pattern)) == expected


def test_reach_refuses_a_repetition_without_a_bound():
    with pytest.raises(ValueError, match="repeats without a bound"):
        detectors.reach(re.compile("a+b"))


@pytest.mark.parametrize("window", [1, 16, 61])
def test_each_value_straddling_every_window_boundary_is_found_once(window):
    """Each detector's examples at every offset from a window's boundary (offsets 0 to window - 1 of
    the value's start, so that a boundary falls at every character of it): each found once, with its
    span, by detect(), by its detector alone and by any_detected(); the negatives, among them those
    decided by the text around the value, found nowhere. The windows are far smaller than the values
    here (64 Ki characters in use): every value straddles boundaries."""
    with windows(window, translate_chars=max(1, window // 4)):
        for offset in range(window):
            before = 2 * window + offset
            for name, text, value in WINDOWED_POSITIVES:
                where = placed(text, before)
                assert found(where) == [(name, value)], (window, offset, text)
                assert found(where, [name]) == [(name, value)], (window, offset, text)
                assert any_detected(where, [name]) is True
            for text in WINDOWED_NEGATIVES:
                assert found(placed(text, before)) == [], (window, offset, text)


def test_the_longest_matches_straddling_windows_are_found_whole():
    """The rules' longest matches (a JWT of three 8,000-character parts, an email of the longest local
    part and domain) straddling the boundaries of small windows: each found whole, once."""
    jwt = "eyJ" + "a" * 8000 + ".eyJ" + "b" * 8000 + "." + "c" * 8000
    local, domain = "m" * 64, ".".join(["d" * 63] * 7) + ".lin-mar.de"
    email = f"{local}@{domain}"
    assert detectors.reach(detectors._EMAIL) >= len(email)
    with windows(4096, translate_chars=512):
        for offset in (0, 1, 2047, 4093, 4095):
            assert found(placed(f"token {jwt} end", 4096 + offset)) == [("credential", jwt)]
            assert found(placed(f"mail {email}", 4096 + offset)) == [("email", email)]


FRAGMENTS = [
    *(value for _, _, value in WINDOWED_POSITIVES),
    *"0123456789 .-+@:=/_\n\t'\"()",
    *["DE", "89", "4111", "1234 ", "eyJ", "sk-", "AKIA", "DNI ", "BSN ", "SSN ", "version ", " am", "x", "ab"],
    *["password", "api_key", "-----BEGIN RSA PRIVATE KEY-----", "\u200b", "\u00a0", "\u00ad", "\u2013", "\ufb01"],
    *[chr(0xFF10 + i) for i in range(10)],
    *[chr(0xFF21 + i) for i in range(26)],
    "\uff20",
    "\u2026",
]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    parts=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=60),
    window=st.integers(min_value=1, max_value=40),
)
def test_windowed_scans_find_what_whole_text_scans_find(parts, window):
    """On random texts built of values, their pieces, separators, names, invisible and full-width
    characters: every detector's spans, detect() and any_detected() with small windows (and fold()'s
    text) are those of one scan of the whole text."""
    text = "".join(parts)
    with windows(10**9):
        whole = (detectors.fold(text).text, {n: d.spans(text) for n, d in DETECTORS.items()}, detect(text))
        anything = any_detected(text)
    with windows(window, translate_chars=max(1, window // 3)):
        assert (detectors.fold(text).text, {n: d.spans(text) for n, d in DETECTORS.items()}, detect(text)) == whole
        assert any_detected(text) is anything


def longest_pause(work) -> float:
    """The longest a thread that asks for the GIL every millisecond waited while `work()` ran."""
    pauses: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            pauses.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        work()
    finally:
        done.set()
        ticker.join()
    return max(pauses)


PAUSE_WITHIN_S = 0.1  # one window's call takes 1-7 ms; the longest pause here, 9-40 ms on this loaded machine


def test_a_long_scan_lets_other_threads_run():
    """Python hands the GIL to another thread only between calls: one regular expression over a whole
    4 MiB prompt kept it 0.17-0.24 s (the card pattern over "DE12 DE12 ..."), fold()'s str.translate
    over 2 Mi full-width characters 0.19-0.24 s. A window at a time, another thread waits about one
    window's call: 9-40 ms here (the proxy's event loop, while its routing thread scans a prompt:
    tests/test_proxy_hardening.py). The better of two runs, so that one stall of a loaded machine does
    not decide; each run of a scan that keeps the GIL has the long pause."""
    ascii_groups = ("DE12 " * MIB)[: 4 * MIB]
    full_width = "".join(
        chr(0xFF21 + i % 26) + chr(0xFF21 + i * 7 % 26) + chr(0xFF10 + i % 10) + " " for i in range(130)
    )
    full_width = (full_width * (2 * MIB // len(full_width)))[: 2 * MIB]
    slow = ["phone", "payment_card", "national_id"]  # the longest single calls; iban's are short and many
    for text in (ascii_groups, full_width):
        scan = functools.partial(any_detected, text, slow)
        assert min(longest_pause(scan) for _ in range(2)) < PAUSE_WITHIN_S
