"""The Unicode tables the JS SDK's content detectors read (clients/js/src/policy/unicode-data.js),
taken from the Python SDK itself, so that both read every code point alike whatever Unicode
version each runtime ships (Python 3.11's unicodedata is Unicode 14; Node 20 and Chromium ship
newer ICU tables, and each browser its own):

- FOLD: serving.policy._detectors.fold_char of every code point that does not fold to itself
  (NFKC per character, invisible characters dropped, dashes, spaces and digits made ASCII);
- WORD: the code points Python's `re` reads as `\\w` in a str pattern (str.isalnum() and "_"),
  which the detectors' names and word boundaries use.

    .venv/bin/python clients/js/scripts/policy_unicode.py > clients/js/src/policy/unicode-data.js

clients/js/scripts/policy_vectors.py writes the same tables' digests into the vectors, and
test/policy-detectors.test.js checks the module against them: a Python whose tables differ fails
the JS tests, naming this command.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path

if importlib.util.find_spec("serving") is None:  # PYTHONPATH may name another checkout of the SDK
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

SURROGATES = range(0xD800, 0xE000)


def fold_table() -> dict[int, str]:
    """code point -> what fold_char makes of it, for every code point it changes."""
    from serving.policy._detectors import fold_char

    table = {}
    for cp in range(0x80, 0x110000):
        if cp in SURROGATES:
            continue
        folded = fold_char(chr(cp))
        if folded != chr(cp):
            table[cp] = folded
    return table


def word_ranges(pattern: str = r"\w") -> list[tuple[int, int]]:
    """The code points a one-character Python `re` pattern matches (default \\w, str patterns):
    inclusive ranges."""
    word = re.compile(pattern)
    ranges: list[tuple[int, int]] = []
    start = None
    for cp in range(0x110001):
        hit = cp < 0x110000 and cp not in SURROGATES and word.match(chr(cp)) is not None
        if hit and start is None:
            start = cp
        elif not hit and start is not None:
            ranges.append((start, cp - 1))
            start = None
    return ranges


def caseless() -> dict[str, str]:
    """Each character of the detectors' case-insensitive name patterns -> every character Python's
    `(?i)` matches it with (itself included; simple case mappings and re's extra equivalences such
    as i / dotless i / capital I with dot), for the JS patterns, which spell them out instead of
    using the `i` flag (whose folding differs from Python's)."""
    from serving.policy import _detectors as detectors

    letters = set()
    for name in ("_BSN_NAME", "_SSN_NAME", "_DNI_NAME", "_VERSION_BEFORE", "_TIME_AFTER"):
        source = getattr(detectors, name).pattern.replace(detectors.WORD, "")
        letters.update(ch for ch in source if ch.lower() != ch.upper())
    cased = [
        chr(cp)
        for cp in range(0x110000)
        if cp not in SURROGATES and (chr(cp).lower() != chr(cp) or chr(cp).upper() != chr(cp))
    ]
    cased += [chr(cp) for cp in (0x131, 0x17F, 0x345, 0x1FBE, *range(0x1C80, 0x1C89), 0xA64B)]
    out = {}
    for letter in sorted(letters):
        pattern = re.compile(re.escape(letter), re.IGNORECASE)
        out[letter] = "".join(sorted({ch for ch in cased if pattern.fullmatch(ch)} | {letter}))
    return out


def tables() -> dict[str, object]:
    """Every table the module holds."""
    from serving.policy import _detectors as detectors

    return {
        "fold": fold_table(),
        "word": word_ranges(),
        "word_i": word_ranges(f"(?i){detectors.WORD}"),  # WORD inside the (?i) name patterns
        "spaced": word_ranges(detectors._SPACED_WORD_CHAR.pattern),  # glued_to_a_word
        "caseless": caseless(),
    }


def _ranges_text(ranges: list[tuple[int, int]]) -> str:
    return "\n".join(f"{a:x}-{b:x}" for a, b in ranges)


def digests(table: dict) -> dict[str, str]:
    """SHA-256 of each table's canonical text (what the JS test recomputes from the module)."""
    fold_text = "\n".join(f"{cp:x}:{' '.join(f'{ord(c):x}' for c in out)}" for cp, out in sorted(table["fold"].items()))
    caseless_text = "\n".join(
        f"{ord(k):x}:{' '.join(f'{ord(c):x}' for c in v)}" for k, v in sorted(table["caseless"].items())
    )
    sha = lambda text: hashlib.sha256(text.encode()).hexdigest()  # noqa: E731
    return {
        "fold_sha256": sha(fold_text),
        "word_sha256": sha(_ranges_text(table["word"])),
        "word_i_sha256": sha(_ranges_text(table["word_i"])),
        "spaced_sha256": sha(_ranges_text(table["spaced"])),
        "caseless_sha256": sha(caseless_text),
        "unidata_version": __import__("unicodedata").unidata_version,
    }


def encode_fold(fold: dict[int, str]) -> str:
    """Runs of consecutive code points folding to consecutive single characters as
    "start+count>target", the rest as "cp=hex hex ..." (empty: dropped); base 36, comma separated."""
    items = sorted(fold.items())
    out, i = [], 0
    while i < len(items):
        cp, folded = items[i]
        if len(folded) == 1:
            j = i
            while (
                j + 1 < len(items)
                and items[j + 1][0] == items[j][0] + 1
                and len(items[j + 1][1]) == 1
                and ord(items[j + 1][1]) == ord(items[j][1]) + 1
            ):
                j += 1
            if j > i:
                out.append(f"{_b36(cp)}+{_b36(j - i + 1)}>{_b36(ord(folded))}")
                i = j + 1
                continue
        out.append(f"{_b36(cp)}={' '.join(_b36(ord(c)) for c in folded)}")
        i += 1
    return ",".join(out)


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        n, r = divmod(n, 36)
        text = digits[r] + text
        if n == 0:
            return text


def _ranges(ranges: list[tuple[int, int]]) -> str:
    return ",".join(f"{_b36(a)}-{_b36(b)}" for a, b in ranges)


def module_text() -> str:
    table = tables()
    fold = table["fold"]
    said = digests(table)
    return (
        "// Generated by clients/js/scripts/policy_unicode.py from the Python SDK (do not edit):\n"
        f"// Unicode {said['unidata_version']} as Python's unicodedata and re read it, so the detectors read every\n"
        "// code point as the Python SDK does whatever Unicode version this runtime ships.\n"
        f"// FOLD: {len(fold)} code points serving.policy._detectors.fold_char changes (base 36: start+count>target\n"
        "// runs, cp=folded code points). WORD: Python re's \\w on str patterns; WORD_I: detectors.WORD under\n"
        "// (?i); SPACED: detectors._SPACED_WORD_CHAR; each as inclusive ranges. CASELESS: what (?i) matches each\n"
        "// character of the name patterns with.\n"
        f"export const UNIDATA_VERSION = {json.dumps(said['unidata_version'])};\n"
        f"export const FOLD = {json.dumps(encode_fold(fold))};\n"
        f"export const WORD = {json.dumps(_ranges(table['word']))};\n"
        f"export const WORD_I = {json.dumps(_ranges(table['word_i']))};\n"
        f"export const SPACED = {json.dumps(_ranges(table['spaced']))};\n"
        f"export const CASELESS = {json.dumps(table['caseless'], ensure_ascii=False)};\n"
    )


if __name__ == "__main__":
    sys.stdout.write(module_text())
