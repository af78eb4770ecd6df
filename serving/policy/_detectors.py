"""Content detectors: personal data, national ids and credentials in a prompt, found locally.

`detect(text, names)` returns every `Finding`; `any_detected(text, names)` stops at the first one.
Each detector's rules are precompiled regular expressions proposing candidates, each accepted or not
by a check. Every detector reads the text folded by `fold` (inside `Detector.spans` and `found_in`,
so no caller can skip it), its findings mapped back to the original's indices. Scans are linear in
the text's length, with no cap, a window of WINDOW_CHARS at a time. What each detector finds,
normalisation, speed and measured precision: docs/policies.md#content-detectors.
"""

from __future__ import annotations

import functools
import importlib
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from serving.policy._checksums import IBAN_LENGTHS, bsn_valid, dni_valid, iban_valid, luhn_valid
from serving.routing._validation import check_prompt

Span = tuple[int, int]
Accept = Callable[[str, "re.Match[str]"], "Span | None"]

# Characters of text a regular-expression call starts matches in (a long text is scanned in windows of
# this size), and that fold() reads or folds a call: a call keeps the GIL ~1-7 ms at this size.
WINDOW_CHARS = 1 << 16
TRANSLATE_CHARS = 1 << 12  # str.translate with a dict is ~60x slower a character than a regex scan


@dataclass(frozen=True, slots=True)
class Finding:
    """Where a detector found something: its name and the span [start, end) in the text. It holds no
    text, so that logging a finding cannot leak what was found."""

    detector: str
    start: int
    end: int


# ---- normalisation ----------------------------------------------------------------------------------

# Dashes NFKC leaves alone that people type between groups of digits: hyphen, non-breaking hyphen, figure
# dash, en dash, minus sign (the em dash and the horizontal bar stay: they separate clauses, not digits).
_DASHES = frozenset("\u2010\u2011\u2012\u2013\u2212")
# Default-ignorable characters outside category Cf (Unicode's DerivedCoreProperties): combining grapheme
# joiner, Hangul and Khmer fillers, Mongolian and other variation selectors. Invisible, so dropped too.
_IGNORABLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180f\u3164\uffa0"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)
FOLD_CACHE_SIZE = 20_000  # characters whose folding is remembered, the most recently folded


def _fold_simple(ch: str) -> str:
    """fold_char but for NFKC; any other character as it is."""
    if ch < "\x80":
        return ch
    if ch in _DASHES:
        return "-"
    category = unicodedata.category(ch)
    if category == "Cf" or ch in _IGNORABLE:
        return ""
    if category == "Nd":
        return str(unicodedata.decimal(ch))
    if category == "Zs":
        return " "
    if category in ("Zl", "Zp") or ch == "\x85":
        return "\n"
    return ch


@functools.lru_cache(maxsize=FOLD_CACHE_SIZE)
def fold_char(ch: str) -> str:
    """What one character becomes before the detectors read it: "" for an invisible one (category Cf, such
    as a zero-width space or a soft hyphen, and the other default-ignorables), "-" for a dash, " " or "\\n"
    for white space, 0-9 for a decimal digit of any script, else its NFKC form (full-width letters, digits
    and "@" become ASCII), whose characters are folded the same way. Folding a folded character changes
    nothing (tests/test_detector_forms.py checks every code point)."""
    folded = _fold_simple(ch)
    if folded == ch:
        nfkc = unicodedata.normalize("NFKC", ch)
        if nfkc != ch:
            folded = "".join(map(_fold_simple, nfkc))
    return folded


class Folded:
    """A text as the detectors read it (`text`), and the way back to the original's string indices."""

    __slots__ = ("text", "original", "_lengths", "_ends")

    def __init__(self, text: str, original: str, lengths: dict[int, int] | None = None) -> None:
        self.text = text
        self.original = original
        self._lengths = lengths  # code point -> folded length, for the characters that do not fold to one
        self._ends: npt.NDArray[np.int64] | None = None

    @property
    def same_indices(self) -> bool:
        return self._lengths is None

    def span(self, start: int, end: int) -> Span:
        """The original's span of the folded text's [start, end): from the character start came from to
        the one end - 1 came from, so that invisible characters inside a value belong to its span."""
        return self.spans([(start, end)])[0]

    def spans(self, spans: list[Span]) -> list[Span]:
        """span() of each, in one pass."""
        if self._lengths is None or not spans:
            return spans
        if self._ends is None:
            # ends[i]: the folded text's length after the original's first i + 1 characters (C speed: a
            # 4 MiB text takes ~0.2 s, and only when something was found in it)
            points = np.frombuffer(self.original.encode("utf-32-le", "surrogatepass"), dtype="<u4")
            keys = np.array(sorted(self._lengths), dtype="<u4")
            values = np.array([self._lengths[k] for k in keys.tolist()], dtype=np.int64)
            at = np.minimum(np.searchsorted(keys, points), len(keys) - 1)
            self._ends = np.cumsum(np.where(keys[at] == points, values[at], 1))
        bounds = np.array(spans, dtype=np.int64)
        firsts = np.searchsorted(self._ends, bounds[:, 0], side="right")
        lasts = np.searchsorted(self._ends, bounds[:, 1] - 1, side="right") + 1
        return list(zip(firsts.tolist(), lasts.tolist()))


# Characters that fold to themselves, every one of them assigned, so that Unicode's normalization
# stability policy keeps them so in every later version: the letters of common alphabets (Latin-1 and
# Latin Extended-A but for ĳ, Ŀ, ŉ, ſ; Greek, Cyrillic, Hebrew, Arabic, Devanagari, Thai), kana, CJK
# ideographs, Hangul syllables, quotes, CJK brackets, the em dash, emoji (tests/test_detector_forms.py
# checks both on every code point). Any other non-ASCII character may fold, and is looked up.
_FOLDS_TO_ITSELF = (
    "\u00ab\u00bb\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u0131\u0134-\u013e\u0141-\u0148\u014a-\u017e"
    "\u0391-\u03a1\u03a3-\u03a9\u03b1-\u03c9\u0400-\u045f\u05d0-\u05ea\u0621-\u063a\u0641-\u064a"
    "\u0905-\u0939\u0e01-\u0e30\u2014\u2018\u2019\u201c\u201d\u2022\u3001\u3002\u300c-\u300f"
    "\u3041-\u3096\u30a1-\u30fa\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3\U0001f300-\U0001f64f"
    "\U00020000-\U0002a6df"
)
_MAY_FOLD = re.compile(f"[^\x00-\x7f{_FOLDS_TO_ITSELF}]")
FOLD_STABLE_SIZE = 50_000  # other characters remembered to fold to themselves
_stable: set[str] = set()
REPLACE_AT_MOST = 32  # distinct characters to fold replaced one by one (str.replace); more: str.translate


def fold(text: str) -> Folded:
    """The text the detectors read: each character folded by fold_char, exactly, whatever the Unicode
    version. Free on ASCII text; otherwise linear, in C but for one cached look-up per distinct character,
    a window at a time (each character folds alone, so the windows need no overlap)."""
    if text.isascii():
        return Folded(text, text)
    size, window = len(text), WINDOW_CHARS
    may_fold: set[str] = set()
    for start in range(0, size, window):  # one window: text[0:size] is text itself, not a copy
        may_fold.update(_MAY_FOLD.findall(text, start, start + window))
    table: dict[str, str] = {}
    for ch in may_fold:
        if ch in _stable:  # a membership test per character: _stable itself is never iterated
            continue
        folded = fold_char(ch)
        if folded != ch:
            table[ch] = folded
        elif len(_stable) < FOLD_STABLE_SIZE:
            _stable.add(ch)
    if not table:
        return Folded(text, text)
    if len(table) <= REPLACE_AT_MOST:
        result = "".join([_replaced(text[start : start + window], table) for start in range(0, size, window)])
    else:
        mapping, window = {ord(ch): folded for ch, folded in table.items()}, TRANSLATE_CHARS
        result = "".join([text[start : start + window].translate(mapping) for start in range(0, size, window)])
    lengths = {ord(ch): len(folded) for ch, folded in table.items() if len(folded) != 1}
    return Folded(result, text, lengths or None)


def _replaced(text: str, table: dict[str, str]) -> str:
    for ch, folded in table.items():
        text = text.replace(ch, folded)
    return text


def whole(text: str, match: re.Match[str]) -> Span | None:
    return match.span()


# The regular-expression parser: re._parser since Python 3.11, sre_parse before (its name since 3.11 warns).
try:
    _parser: Any = importlib.import_module("re._parser")
except ImportError:  # pragma: no cover - Python 3.10
    _parser = importlib.import_module("sre_parse")
_ONE_CHARACTER = frozenset({_parser.LITERAL, _parser.NOT_LITERAL, _parser.ANY, _parser.IN})
_REPEATS = frozenset({_parser.MAX_REPEAT, _parser.MIN_REPEAT})


def reach(pattern: re.Pattern[str]) -> int:
    """How far past where a match of `pattern` starts the regex engine may read: its longest match and
    the look-aheads and anchors after it, so a match starting at p is the same in text[:p + reach] as
    in the whole text. ValueError for a repetition without a bound (none here: that keeps scans linear)."""
    groups: dict[int, int] = {}

    def sequence(items: Any) -> tuple[int, int]:  # (longest advance, furthest read)
        advance = furthest = 0
        for op, av in items:
            step, read = element(op, av)
            furthest, advance = max(furthest, advance + read), advance + step
        return advance, furthest

    def element(op: Any, av: Any) -> tuple[int, int]:
        if op in _ONE_CHARACTER:
            return 1, 1
        if op is _parser.SUBPATTERN:
            step, read = sequence(av[-1])
            if av[0] is not None:
                groups[av[0]] = step
            return step, read
        if op is _parser.BRANCH:
            steps, reads = zip(*(sequence(branch) for branch in av[1]))
            return max(steps), max(reads)
        if op in _REPEATS:
            _, most, body = av
            if most == _parser.MAXREPEAT:
                raise ValueError(f"{pattern.pattern!r} repeats without a bound")
            step, read = sequence(body)
            return (step * most, step * (most - 1) + read) if most else (0, 0)
        if op in (_parser.ASSERT, _parser.ASSERT_NOT):
            return (0, sequence(av[1])[1]) if av[0] > 0 else (0, 0)  # a look-behind reads before
        if op is _parser.AT:
            return 0, 2
        if op is _parser.GROUPREF:
            return groups[av], groups[av]
        raise ValueError(f"{pattern.pattern!r}: no reach known for {op}")

    return sequence(_parser.parse(pattern.pattern, pattern.flags))[1]


@dataclass(frozen=True)
class Rule:
    """A pattern proposing candidates and the check that accepts one (returning the span to report)."""

    pattern: re.Pattern[str]
    accept: Accept = whole
    needs: str = ""  # a literal every match contains: without it in the text the rule is skipped
    reach: int = field(init=False, repr=False, compare=False)  # reach(pattern)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reach", reach(self.pattern))

    def spans(self, text: str) -> Iterator[Span]:
        """Each span accepted, in text order. Matches start in a window of WINDOW_CHARS at a time,
        the search reading `reach` characters past it, so a match it finds there is the whole text's."""
        if self.needs not in text:
            return
        size, window, reach, search = len(text), WINDOW_CHARS, self.reach, self.pattern.search
        pos, end = 0, window
        while True:
            if end < size:
                match = search(text, pos, end + reach)
                if match is None or match.start() >= end:  # nothing starts in [pos, end): the next window
                    pos, end = end, end + window
                    continue
            elif (match := search(text, pos)) is None:
                return
            span = self.accept(text, match)
            if span is None:  # a rejected candidate may hide a good one starting inside it
                pos = match.start() + 1
            else:
                yield span
                pos = max(span[1], match.start() + 1)
            if pos >= end:
                end = pos + window


@dataclass(frozen=True)
class Detector:
    name: str
    description: str
    rules: tuple[Rule, ...]

    def spans(self, text: str) -> list[Span]:
        """Every span any rule accepts in the folded text, overlapping ones merged, in text order, in `text`."""
        folded = fold(text)
        return folded.spans(self.folded_spans(folded.text))

    def found_in(self, text: str | Folded) -> bool:
        """Whether any rule accepts anything in the folded text: of `text`, or what fold() made of it (a
        Folded, not folded again: several detectors asking about one prompt fold it once)."""
        folded = (text if isinstance(text, Folded) else fold(text)).text
        return any(next(rule.spans(folded), None) is not None for rule in self.rules)

    def folded_spans(self, folded: str) -> list[Span]:
        """spans() on a text fold() has already folded, in its indices."""
        found = sorted(span for rule in self.rules for span in rule.spans(folded))
        merged: list[Span] = []
        for start, end in found:
            if merged and start < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged


def compile_ascii(pattern: str) -> re.Pattern[str]:
    """\\d, \\w, \\s and \\b mean their ASCII classes: the patterns read folded text, whose digits are
    0-9; what a non-ASCII letter next to a value means is `glued_to_a_word`'s decision."""
    return re.compile(pattern, re.ASCII)


# Scripts written without spaces between words: Thai, Lao, Myanmar, Khmer, kana, CJK ideographs. A value
# or a name next to one of their characters stands apart ("卡号4111111111111111" holds a card number).
_UNSPACED = (
    r"\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff"
)
# A word character for the names looked for near a value (Unicode-aware: "versión" is a word, CJK is not).
WORD = rf"[^\W{_UNSPACED}]"
# A letter or digit of a script written with spaces, other than ASCII (the patterns look at ASCII
# neighbours themselves): "Größe12345678Z" holds no id.
_SPACED_WORD_CHAR = re.compile(rf"[^\W_\x00-\x7f{_UNSPACED}]")


def glued_to_a_word(text: str, start: int, end: int) -> bool:
    """Whether [start, end) touches a letter or digit of a script written with spaces (Unicode-aware
    word boundaries for the detectors whose checks are weak: phone, national_id, ip_address)."""
    return (start > 0 and _SPACED_WORD_CHAR.match(text, start - 1) is not None) or (
        _SPACED_WORD_CHAR.match(text, end) is not None
    )


def standalone(accept: Accept) -> Accept:
    """accept, and the span it accepts must not touch a word (glued_to_a_word)."""

    def accept_standalone(text: str, match: re.Match[str]) -> Span | None:
        span = accept(text, match)
        return None if span is None or glued_to_a_word(text, *span) else span

    return accept_standalone


# ---- email ------------------------------------------------------------------------------------------

_EMAIL = compile_ascii(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}"
    r"@(?P<domain>(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24})(?![A-Za-z0-9-]|\.[A-Za-z0-9])"
)
_RESERVED_TLDS = frozenset({"test", "example", "invalid", "localhost", "local"})  # RFC 2606, RFC 6762
_RESERVED_DOMAINS = ("example.com", "example.org", "example.net")
_ASSET_SUFFIXES = frozenset({"png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp", "css", "js"})
_SCP_PATH = compile_ascii(r":[\w~/.-]")  # git@github.com:org/repo.git is an address, not a mailbox


def accept_email(text: str, match: re.Match[str]) -> Span | None:
    domain = match["domain"].lower()
    tld = domain.rsplit(".", 1)[1]
    if tld in _RESERVED_TLDS or tld in _ASSET_SUFFIXES:
        return None
    if any(domain == d or domain.endswith("." + d) for d in _RESERVED_DOMAINS):
        return None
    if _SCP_PATH.match(text, match.end()):
        return None
    return match.span()


# ---- phone ------------------------------------------------------------------------------------------

_PHONE_INTERNATIONAL = compile_ascii(
    r"\+(?<![0-9A-Za-z+]\+)(?:[1-9][0-9]{6,14}"
    r"|[1-9][0-9]{0,3}(?:[ .-]?\(0?[0-9]{0,4}\))?[ .-]?[0-9]{1,5}(?:[ .-][0-9]{1,8}){0,6})"
    r"(?![0-9]|[ .-][0-9])"
)
_PHONE_NANP = compile_ascii(
    r"[(2-9](?<![0-9A-Za-z+(./-][(2-9])"
    r"(?:(?<=\()[2-9][0-9]{2}\) ?[2-9][0-9]{2}[ .-][0-9]{4}|(?<=[2-9])[0-9]{2}([ .-])[2-9][0-9]{2}\1[0-9]{4})"
    r"(?![0-9]|[ .-][0-9])"
)
_PHONE_TRUNK = compile_ascii(
    r"[(0](?<![0-9A-Za-z+./-][(0])(?<![0-9][ -][(0])"  # not a group of a longer number (an IBAN's tail)
    r"(?:(?<=0)[1-9][0-9]{0,4}([ /-])[0-9]{2,8}(?:\1[0-9]{2,8}){0,3}"
    r"|(?<=\()0[1-9][0-9]{0,4}\) ?[0-9]{2,8}(?:[ -][0-9]{2,8}){0,3}"
    r"|(?<=0)[1-9](?:\.[0-9]{2}){4})"
    r"(?![0-9]|[ ./-][0-9])"
)
_DATE_SHAPE = compile_ascii(r"[0-3][0-9][ ./-][01][0-9][ ./-](?:19|20)[0-9]{2}")


def digit_count(value: str) -> int:
    return sum(ch.isdigit() for ch in value)


def accept_international_phone(text: str, match: re.Match[str]) -> Span | None:
    return match.span() if 8 <= digit_count(match[0].replace("(0)", "")) <= 15 else None


def accept_trunk_phone(text: str, match: re.Match[str]) -> Span | None:
    if _DATE_SHAPE.match(match[0]):
        return None
    return match.span() if 10 <= digit_count(match[0]) <= 12 else None


# ---- payment_card -----------------------------------------------------------------------------------

# Compact (13-19 digits, not inside a longer run; other numbers may follow), or grouped: a first group of
# four not right after another group. Between groups: one to three spaces, tabs or line breaks, or one of
# - . / _ with a space either side or none (the pattern lets any three of these characters through, which
# keeps it as fast as a single separator; accept_card holds them to this). "4111 1111 1111 1111 12/29"
# (expiry after the number) is a grouped candidate that accept_card cuts back to its first four groups.
# A card may be glued to a word ("card4111111111111111"): Luhn and the issuer table carry its precision.
_CARD_SEPARATOR = r"(?:[ \t\r\n]{1,3}|[ ]?[-./_][ ]?)"
# Not right after a group and a separator (accept_card checks that exactly; these look-behinds spare it
# the common cases). After a line ending in digits, a grouped card may start if its own separators are
# not line breaks: "1234\n4111 1111 1111 1111" (a postcode, then a card) but not a column of numbers.
_NOT_AFTER_A_GROUP = (
    r"(?<![0-9][ \t./_-][0-9])(?<![0-9][ \t]{2}[0-9])(?<![0-9][ \t]{3}[0-9])"
    r"(?<![0-9] [-./_][0-9])(?<![0-9][-./_] [0-9])(?<![0-9] [-./_] [0-9])"
    r"(?:(?<![0-9][\r\n][0-9])(?<![0-9]\r\n[0-9])|(?=[0-9]{3}(?:[ \t]{1,3}[0-9]|[ ]?[-./_])))"
)
_CARD = compile_ascii(
    r"[0-9](?<![0-9][0-9])"
    r"(?:[0-9]{12,18}(?![0-9])|" + _NOT_AFTER_A_GROUP + r"[0-9]{3}(?:[ \t\r\n./_-]{0,3}[0-9]){9,15}(?![0-9]))"
)
_SEPARATOR = compile_ascii(_CARD_SEPARATOR)
_DIGIT_RUNS = compile_ascii(r"[0-9]+")
_GROUP_BEFORE = compile_ascii(r"[0-9](" + _CARD_SEPARATOR + r")\Z")  # searched in the few characters before
_GROUP_AFTER = compile_ascii(r"(" + _CARD_SEPARATOR + r")[0-9]{4}")
_WORD_BEFORE = compile_ascii(r"[A-Za-z0-9]{1,32}\Z")
_WORD_AFTER = compile_ascii(r"[A-Za-z0-9]{1,32}")
# Issuer identification number ranges: (first, last, digits compared, card lengths).
_IIN_RANGES: tuple[tuple[int, int, int, frozenset[int]], ...] = (
    (4, 4, 1, frozenset({13, 16, 19})),  # Visa
    (51, 55, 2, frozenset({16})),  # Mastercard
    (2221, 2720, 4, frozenset({16})),  # Mastercard 2-series
    (34, 34, 2, frozenset({15})),  # American Express
    (37, 37, 2, frozenset({15})),
    (6011, 6011, 4, frozenset(range(16, 20))),  # Discover
    (644, 649, 3, frozenset(range(16, 20))),
    (65, 65, 2, frozenset(range(16, 20))),
    (3528, 3589, 4, frozenset(range(16, 20))),  # JCB
    (300, 305, 3, frozenset(range(14, 20))),  # Diners Club
    (36, 36, 2, frozenset(range(14, 20))),
    (38, 39, 2, frozenset(range(16, 20))),
    (62, 62, 2, frozenset(range(16, 20))),  # UnionPay
    (2200, 2204, 4, frozenset(range(16, 20))),  # Mir
    (50, 50, 2, frozenset(range(13, 20))),  # Maestro
    (56, 58, 2, frozenset(range(13, 20))),
    (63, 63, 2, frozenset(range(13, 20))),
    (67, 67, 2, frozenset(range(13, 20))),
)
_CARD_GROUPINGS = ((4, 6, 5), (4, 6, 4))  # American Express, Diners; every other grouping is by fours


def known_issuer(digits: str) -> bool:
    return any(
        first <= int(digits[:width]) <= last and len(digits) in lengths for first, last, width, lengths in _IIN_RANGES
    )


def valid_card(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and known_issuer(digits) and luhn_valid(digits)


def separator_kind(separator: str) -> str:
    """ "space" (spaces and tabs), "newline" (white space with a line break), the punctuation mark, or ""
    when it is not a separator between a card's groups."""
    if _SEPARATOR.fullmatch(separator) is None:
        return ""
    mark = separator.strip(" \t\r\n")
    if mark:
        return mark
    return "newline" if "\n" in separator or "\r" in separator else "space"


def glued_to_a_code(text: str, start: int, end: int) -> bool:
    """Whether the letters glued to a value on either side hold digits too, or run on for 32 characters:
    then it is part of a code or a hash (a3f94111111111111111c2), not a word it was typed against."""
    before = _WORD_BEFORE.search(text, max(0, start - 32), start)
    after = _WORD_AFTER.match(text, end)
    return any(w is not None and (len(w[0]) == 32 or digit_count(w[0]) > 0) for w in (before, after))


def accept_card(text: str, match: re.Match[str]) -> Span | None:
    """One kind of separator or none (a line break may stand for a space: a wrapped line); grouped by
    fours or several fours (or Amex / Diners 4-6-5 / 4-6-4); the longest run of whole groups from the
    start that is a valid card, not glued to a code, and neither right after nor followed by one more
    group joined the same way (then it is part of a longer grouped number)."""
    start = match.start()
    groups = [(start + g.start(), start + g.end()) for g in _DIGIT_RUNS.finditer(match[0])]
    kinds = [separator_kind(text[a[1] : b[0]]) for a, b in zip(groups, groups[1:])]
    kind = next((k for k in kinds if k != "newline"), "newline")
    for i, k in enumerate(kinds):
        if not k or (k != kind and not (k == "newline" and kind == "space")):
            groups = groups[: i + 1]
            break
    if len(groups) > 1:
        before = _GROUP_BEFORE.search(text, max(0, start - 4), start)
        if before is not None and separator_kind(before[1]) == kind:
            groups = groups[:1]  # a group of a longer grouped number: only a compact card may start here
    for n in range(len(groups), 0, -1):
        sizes = tuple(e - s for s, e in groups[:n])
        end = groups[n - 1][1]
        if n > 1:
            # by fours; a group may be several fours run together (an invisible separator was dropped)
            by_fours = all(g % 4 == 0 for g in sizes[:-1])
            if not (by_fours or sizes in _CARD_GROUPINGS):
                continue
            after = _GROUP_AFTER.match(text, end)
            if after is not None and separator_kind(after[1]) == kind:
                continue
        if valid_card("".join(text[s:e] for s, e in groups[:n])) and not glued_to_a_code(text, start, end):
            return (start, end)
    return None


# ---- iban -------------------------------------------------------------------------------------------

_IBAN = compile_ascii(
    r"[0-9](?<=(?<![A-Za-z0-9])[A-Za-z]{2}[0-9])[0-9](?:[ -]?[A-Za-z0-9]){11,30}"
)  # at the check digits
_ALNUM = compile_ascii(r"[A-Za-z0-9]")


def accept_iban(text: str, match: re.Match[str]) -> Span | None:
    """The candidate may run on into the next word: it is cut at its country's length (compact, or in
    groups of four after the first, separated by spaces or by dashes), which must end a word."""
    start = match.start() - 2  # the country code, looked behind
    length = IBAN_LENGTHS.get(text[start : start + 2].upper())
    if length is None:
        return None
    separator = text[start + 4 : start + 5]
    grouped = separator in (" ", "-")
    end = start + length + ((length - 1) // 4 if grouped else 0)
    value = text[start:end]
    if end > match.end() or _ALNUM.match(text, end):
        return None
    if grouped and any(len(g) != 4 for g in value.split(separator)[:-1]):
        return None
    compact = value.replace(separator, "") if grouped else value
    return (start, end) if len(compact) == length and iban_valid(compact.upper()) else None


# ---- national_id ------------------------------------------------------------------------------------

_SSN = compile_ascii(r"([0-9](?<![0-9A-Za-z-][0-9])[0-9]{2})([ -])([0-9]{2})\2([0-9]{4})(?![0-9A-Za-z]|\2[0-9])")
_NINO = compile_ascii(
    r"([A-CEGHJ-PR-TW-Z](?<![A-Za-z0-9][A-Z])[A-CEGHJ-NPR-TW-Z])( ?)[0-9]{2}\2[0-9]{2}\2[0-9]{2}\2[A-D](?![A-Za-z0-9])"
)
_NINO_UNUSED_PREFIXES = frozenset({"BG", "GB", "NK", "KN", "TN", "NT", "ZZ"})
_DNI = compile_ascii(r"([0-9XYZ](?<![A-Za-z0-9][0-9XYZ])[0-9]{7})-?([A-Z])(?![A-Za-z0-9])")
# Nine plain digits (a BSN, also written 1234.56.789; an SSN without dashes) count only named just before.
_NINE_DIGITS = compile_ascii(r"[0-9](?<![0-9A-Za-z.][0-9])[0-9]{3}(\.?)[0-9]{2}\1[0-9]{3}(?![0-9A-Za-z]|\.[0-9])")
_BSN_NAME = re.compile(rf"(?i)(?<!{WORD})(?:bsn|burgerservicenummer|sofi-?nummer)(?!{WORD})")
_SSN_NAME = re.compile(rf"(?i)(?<!{WORD})(?:ssn|social security(?: number| no\.?)?)(?!{WORD})")
# A DNI (eight digits and its letter) counts only after one of these: eight digits and a letter are also
# sample, part and reference numbers ("DNA: 12345678Z"), and one letter in 23 is the right one.
_DNI_NAME = re.compile(
    rf"(?i)(?<!{WORD})(?:dni|d\.n\.i|nif|n\.i\.f|nie|n\.i\.e|documento|identidad|identificaci[oó]n|carn[eé]t?"
    rf"|national id|id card|id number|identity|spanish id)(?!{WORD})"
)
NAME_BEFORE_CHARS = 40  # how close after its name a nine-digit number or a DNI must be


def valid_ssn(area: str, group: str, serial: str) -> bool:
    """Never issued: area 000, 666 or 900-999, group 00, serial 0000."""
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def accept_ssn(text: str, match: re.Match[str]) -> Span | None:
    return match.span() if valid_ssn(match[1], match[3], match[4]) else None


def accept_nino(text: str, match: re.Match[str]) -> Span | None:
    return None if match[1] in _NINO_UNUSED_PREFIXES else match.span()


def accept_dni(text: str, match: re.Match[str]) -> Span | None:
    """An NIE (X, Y or Z and seven digits) and its control letter; or eight digits and their control
    letter named within NAME_BEFORE_CHARS before ("DNI", "NIF", "documento", "identidad", ...)."""
    if not dni_valid(match[1], match[2]):
        return None
    if match[1][0] in "XYZ" or _DNI_NAME.search(text, max(0, match.start() - NAME_BEFORE_CHARS), match.start()):
        return match.span()
    return None


def accept_nine_digits(text: str, match: re.Match[str]) -> Span | None:
    """A BSN passing the 11-test after "BSN" (or its long names), or a valid SSN after "SSN" / "social
    security", within NAME_BEFORE_CHARS before it."""
    digits = match[0].replace(".", "")
    before = max(0, match.start() - NAME_BEFORE_CHARS)
    if bsn_valid(digits) and _BSN_NAME.search(text, before, match.start()):
        return match.span()
    if "." not in match[0] and valid_ssn(digits[:3], digits[3:5], digits[5:]):
        return match.span() if _SSN_NAME.search(text, before, match.start()) else None
    return None


# ---- credential -------------------------------------------------------------------------------------

_TOKEN_END = r"(?![A-Za-z0-9_-])"


def token_pattern(prefix: str, body: str) -> re.Pattern[str]:
    """prefix (fixed width) + body, not inside a longer token on either side."""
    return compile_ascii(rf"{prefix}(?<![A-Za-z0-9_-]{prefix}){body}{_TOKEN_END}")


_AWS_KEY_ID = compile_ascii(
    r"A(?<![A-Za-z0-9]A)(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|PKA|ROA|SCA)[A-Z2-7]{16}(?![A-Za-z0-9])"
)
_PREFIXED_TOKENS = (
    (token_pattern("gh[pousr]_", "[A-Za-z0-9]{36}"), "_"),  # GitHub
    (token_pattern("github_pat_", "[A-Za-z0-9_]{82}"), "github_pat_"),
    (token_pattern("glpat-", "[A-Za-z0-9_-]{20}"), "glpat-"),  # GitLab
    (token_pattern("xox[abposr]-", "[A-Za-z0-9-]{10,200}"), "xox"),  # Slack
    (token_pattern("[sr]k_(?:live|test)_", "[A-Za-z0-9]{24,99}"), "k_"),  # Stripe secret and restricted keys
    (token_pattern("AIza", "[A-Za-z0-9_-]{35}"), "AIza"),  # Google API key
    (token_pattern("eyJ", r"[A-Za-z0-9_-]{10,8000}\.eyJ[A-Za-z0-9_-]{10,8000}\.[A-Za-z0-9_-]{10,8000}"), "eyJ"),  # JWT
)
_SK_TOKEN = token_pattern("sk-", "[A-Za-z0-9_-]{32,300}")  # OpenAI, Anthropic
_SLACK_WEBHOOK = compile_ascii(r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,12}/B[A-Z0-9]{6,12}/[A-Za-z0-9]{16,32}")
_PEM = compile_ascii(r"-----BEGIN (?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = compile_ascii(r"-----END (?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?-----")
PEM_MAX_CHARS = 20_000  # the longest key body looked through for its END line (RSA 8192 is ~6,400)
# A secret assigned: the value after "=" or ":" (found first), the name just before it (looked back at).
_ASSIGNED_VALUE = compile_ascii(
    r"[=:](?<![=:!<>][=:])(?!=)[ \t]{0,5}(?:\"([^\"\n]{4,200})\"|'([^'\n]{4,200})'|([^\s\"',;)}\]]{8,200}))"
)
_SECRET_NAME = compile_ascii(
    r"(?i)(?<![A-Za-z0-9])(?:password|passwd|pwd|passphrase|secret|client[_-]?secret|api[_-]?key|apikey"
    r"|access[_-]?key|secret[_-]?key|private[_-]?key|access[_-]?token|auth[_-]?token|bearer[_-]?token)"
    r"[\"']?[ \t]{0,5}\Z"
)
SECRET_NAME_CHARS = 40  # the longest name and spacing looked back at before "=" or ":"
_PLACEHOLDER = compile_ascii(r"(?i)^[<{$%*\[(]|your|example|placeholder|redacted|dummy|xxx|\.\.\.|^(?:none|null|nil)$")
_IDENTIFIER = compile_ascii(r"[A-Za-z_][A-Za-z_.]*")  # `password=password`, `api_key=settings.API_KEY`


def accept_aws_key_id(text: str, match: re.Match[str]) -> Span | None:
    return None if "EXAMPLE" in match[0] else match.span()  # AWS's documentation key, AKIAIOSFODNN7EXAMPLE


def accept_sk_token(text: str, match: re.Match[str]) -> Span | None:
    return match.span() if any(ch.isdigit() for ch in match[0]) else None  # not sk-a-long-branch-name


def accept_pem(text: str, match: re.Match[str]) -> Span | None:
    end = _PEM_END.search(text, match.end(), match.end() + PEM_MAX_CHARS)
    return (match.start(), end.end() if end else match.end())


def accept_assignment(text: str, match: re.Match[str]) -> Span | None:
    if not _SECRET_NAME.search(text, max(0, match.start() - SECRET_NAME_CHARS), match.start()):
        return None
    group = next(g for g in (1, 2, 3) if match[g] is not None)
    value = match[group]
    if _PLACEHOLDER.search(value) or len(set(value)) == 1:
        return None
    if group == 3 and ("(" in value or "[" in value or _IDENTIFIER.fullmatch(value)):
        return None
    return match.span(group)


# ---- ip_address -------------------------------------------------------------------------------------

_IPV4 = compile_ascii(r"[0-9](?<![0-9A-Za-z.][0-9])[0-9]{0,2}(?:\.[0-9]{1,3}){3}(?![0-9A-Za-z]|\.[0-9])")
# Four dotted numbers that are not an address: a version ("version 4.19.2.10", "versión 10.2.1.3"), a
# section of a document ("section 2.3.1.4", "§ 4.1.2.3"), right before them; a time ("10.10.10.10 am")
# right after them. Names in English, German, French, Spanish, Italian, Portuguese, Dutch and Russian.
_VERSION_BEFORE = re.compile(
    rf"(?i)(?<!{WORD})(?:v|ver|version|versi[oó]n[e]?|vers[aã]o|versie|верси[яи]|release|build|firmware|fw|patch"
    r"|section|sect|sec|chapter|ch|clause|article|art|paragraph|para|step|item|figure|fig|table|tab|appendix"
    r"|annex|rule|requirement|req|abschnitt|kapitel|absatz|ziffer|punkt|secci[oó]n|cap[ií]tulo|art[ií]culo"
    r"|apartado|punto|chapitre|paragraphe|hoofdstuk|artikel|paragraaf|sezione|capitolo|se[cç][aã]o|раздел"
    rf"|пункт|глава)\.?[ \t]{{0,3}}(?:n[o°º]\.?[ \t]{{0,2}})?\Z|§[ \t]{{0,3}}\Z"
)
_TIME_AFTER = re.compile(rf"(?i)[ \t]{{0,2}}(?:[ap]\.?m\.?|h|hrs?|uhr|o'clock|heures?|horas?|ore)(?!{WORD})")
VERSION_BEFORE_CHARS = 16  # the longest name and spacing looked back at


def accept_ipv4(text: str, match: re.Match[str]) -> Span | None:
    """Four octets 0-255 without leading zeros, not right after a version's or a section's name, not
    right before "am" or "pm" (or "h", "Uhr", ...)."""
    if not all(int(o) <= 255 and (o == "0" or o[0] != "0") for o in match[0].split(".")):
        return None
    if _VERSION_BEFORE.search(text, max(0, match.start() - VERSION_BEFORE_CHARS), match.start()):
        return None
    return None if _TIME_AFTER.match(text, match.end()) else match.span()


DETECTORS: dict[str, Detector] = {
    d.name: d
    for d in (
        Detector(
            "email",
            "email addresses (not RFC 2606 reserved domains, not git@host:path)",
            (Rule(_EMAIL, accept_email, needs="@"),),
        ),
        Detector(
            "phone",
            "+country numbers (8-15 digits); US/Canada (NXX) NXX-XXXX; trunk-0 national numbers with separators",
            (
                Rule(_PHONE_INTERNATIONAL, standalone(accept_international_phone), needs="+"),
                Rule(_PHONE_NANP, standalone(whole)),
                Rule(_PHONE_TRUNK, standalone(accept_trunk_phone)),
            ),
        ),
        Detector(
            "payment_card", "13-19 digit card numbers of a known issuer that pass Luhn", (Rule(_CARD, accept_card),)
        ),
        Detector(
            "iban",
            "IBANs of the registry's countries at their length, mod-97 valid, any case",
            (Rule(_IBAN, accept_iban),),
        ),
        Detector(
            "national_id",
            "US SSN, UK NINO, Spanish DNI (named) / NIE (control letter), Dutch BSN (11-test, named)",
            (
                Rule(_SSN, standalone(accept_ssn)),
                Rule(_NINE_DIGITS, standalone(accept_nine_digits)),
                Rule(_NINO, standalone(accept_nino)),
                Rule(_DNI, standalone(accept_dni)),
            ),
        ),
        Detector(
            "credential",
            "cloud and SaaS key formats, JWTs, private key PEM blocks, secret assignments with a value",
            (
                Rule(_AWS_KEY_ID, accept_aws_key_id),
                *(Rule(pattern, needs=needs) for pattern, needs in _PREFIXED_TOKENS),
                Rule(_SK_TOKEN, accept_sk_token, needs="sk-"),
                Rule(_SLACK_WEBHOOK, needs="hooks.slack.com"),
                Rule(_PEM, accept_pem, needs="PRIVATE KEY"),
                Rule(_ASSIGNED_VALUE, accept_assignment),
            ),
        ),
        Detector(
            "ip_address",
            "IPv4 addresses in dotted-quad form (not versions, sections or times)",
            (Rule(_IPV4, standalone(accept_ipv4), needs="."),),
        ),
    )
}


def chosen(names: Iterable[str] | None) -> list[Detector]:
    """The detectors named (all when None), or a clear error naming what was wrong."""
    if names is None:
        return list(DETECTORS.values())
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(f"names must be a list of detector names or None, got {type(names).__name__}")
    picked = []
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"detector names must be str, got {type(name).__name__}")
        if name not in DETECTORS:
            raise ValueError(f"unknown detector {name!r}; known detectors: {', '.join(DETECTORS)}")
        picked.append(DETECTORS[name])
    return picked


def detect(text: str, names: Iterable[str] | None = None) -> list[Finding]:
    """Every finding of the named detectors (all when None) in text, ordered by position. A finding inside
    another detector's finding is dropped: the larger one explains that text (the digits of an IBAN's
    tail are not also a phone number); equal spans of two detectors are both kept."""
    check_prompt(text, "text")
    folded = fold(text)
    findings = [Finding(d.name, start, end) for d in chosen(names) for start, end in d.folded_spans(folded.text)]
    findings.sort(key=lambda f: (f.start, -f.end, f.detector))
    kept: list[Finding] = []
    for f in findings:
        # sorted by start, longest first: a finding can only lie inside one kept before it
        if not any(k.start <= f.start and f.end <= k.end and k.end - k.start > f.end - f.start for k in kept[-8:]):
            kept.append(f)
    if folded.same_indices:
        return kept
    spans = folded.spans([(f.start, f.end) for f in kept])
    return [Finding(f.detector, start, end) for f, (start, end) in zip(kept, spans)]


def any_detected(text: str, names: Iterable[str] | None = None) -> bool:
    """Whether any of the named detectors (all when None) finds anything: stops at the first finding."""
    check_prompt(text, "text")
    folded = fold(text)
    return any(d.found_in(folded) for d in chosen(names))
