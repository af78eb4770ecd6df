"""Token ids for the router: the bundle's `tokenizers` tokenizer, with a shortcut for plain ASCII."""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, cast

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def encodable(text: str) -> str:
    """The text itself, or with lone surrogates replaced when it is not valid UTF-8
    (the tokenizer, written in Rust, accepts only valid Unicode)."""
    if text.isascii():  # the common case, without building the UTF-8 bytes
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def load_tokenizer(source: str | Path | bytes) -> Tokenizer:
    """A `tokenizers.Tokenizer` from a tokenizer.json path or its content (bytes), with its
    own truncation and padding switched off (we do both)."""
    from tokenizers import Tokenizer

    if isinstance(source, bytes):
        tokenizer = Tokenizer.from_str(source.decode("utf-8"))
    else:
        tokenizer = Tokenizer.from_file(str(source))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


# ASCII control characters that BERT's normalizer deletes (tab, newline, return become spaces).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# BERT's pre-tokenizer on ASCII without control characters: split on whitespace, and every
# printable character that is not a letter or digit is punctuation, a word of its own.
_WORDS = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9 \t\n\r]")


# FastTokenizers by the SHA-256 of their tokenizer.json, while any router holds one (FastTokenizer.shared).
_SHARED: weakref.WeakValueDictionary[str, FastTokenizer] = weakref.WeakValueDictionary()


class FastTokenizer:
    """The bundle's tokenizer, with a shortcut for plain ASCII text that gives the same ids.

    For a BERT WordPiece tokenizer, on ASCII text without control characters or added-token strings
    ([CLS], [MASK], ...), the normaliser only lower-cases and the pre-tokeniser splits on whitespace,
    then between letters/digits and punctuation: most whitespace-separated chunks are one vocabulary
    look-up (the rest go through one regex). In Python that is 5-7x faster than `tokenizers`, whose
    per-call and per-character bookkeeping (offsets, alignments) costs more than the look-ups. Words
    missing from the vocabulary go through the tokenizer's own WordPiece model, so sub-word splitting
    is never reimplemented. Everything else (other scripts, control characters, special tokens
    requested, other tokenizer types) takes the full tokenizer. Identical ids are tested, on real
    prompts and on generated ASCII text.
    """

    def __init__(self, source: str | Path | bytes) -> None:
        self.full = load_tokenizer(source)
        config = json.loads(self.full.to_str())
        normalizer, pre, model = (config.get(k) or {} for k in ("normalizer", "pre_tokenizer", "model"))
        self.vocab = self.full.get_vocab(with_added_tokens=False)
        self.shortcut = (
            normalizer.get("type") == "BertNormalizer"
            and pre.get("type") == "BertPreTokenizer"
            and model.get("type") == "WordPiece"
            # a vocabulary hit is then never over WordPiece's per-word length limit
            and max(map(len, self.vocab), default=0) <= model.get("max_input_chars_per_word", 0)
        )
        self.lowercase = bool(normalizer.get("lowercase"))
        # Whitespace-separated chunks the pre-tokeniser keeps whole (letters and digits only, or
        # one punctuation mark) and that are vocabulary words: one dict look-up, no regex.
        self._whole = {w: i for w, i in self.vocab.items() if w.isascii() and (w.isalnum() or len(w) == 1)}
        added = [t.content for t in self.full.get_added_tokens_decoder().values()]
        # Added tokens are matched before normalisation; any text that might hold one (compared
        # case-insensitively, to be safe) takes the full tokenizer.
        self._added = tuple(a.lower() for a in added)
        self._added_starts = "".join({a[:1].lower() + a[:1].upper() for a in added if a})

    @classmethod
    def shared(cls, content: bytes) -> FastTokenizer:
        """The tokenizer of this tokenizer.json content, built once while anything holds it: a bundle
        swapped for one with the same tokenizer (Router.update, nearly always) reuses it instead of
        building it again, about 90 ms of a 150 ms swap. No call changes it: routers and threads share it."""
        key = hashlib.sha256(content).hexdigest()
        tokenizer = _SHARED.get(key)
        if tokenizer is None:
            tokenizer = _SHARED.setdefault(key, cls(content))
        return tokenizer

    def plain(self, text: str) -> bool:
        """Whether the shortcut gives this text's ids."""
        if not (self.shortcut and text.isascii()):
            return False
        if not text.isprintable() and _CONTROL.search(text) is not None:  # tab, newline, return are fine
            return False
        for start in self._added_starts:
            if start in text:
                lowered = text.lower()
                return not any(a in lowered for a in self._added)
        return True

    def _shortcut_ids(self, text: str) -> list[int]:
        chunks = (text.lower() if self.lowercase else text).split()
        ids = list(map(self._whole.get, chunks))
        if None not in ids:  # most prompts: every chunk is a plain word or a lone punctuation mark
            return cast("list[int]", ids)
        # Splice the pieces of the few other chunks in; list.index keeps the scan in C.
        out: list[int] = []
        done = 0
        for _ in range(ids.count(None)):
            k = ids.index(None, done)
            out += cast("list[int]", ids[done:k])  # the first None from `done` is at k
            out += self._chunk_ids(chunks[k])
            done = k + 1
        out += cast("list[int]", ids[done:])  # after the last None
        return out

    def _chunk_ids(self, chunk: str) -> list[int]:
        """Ids of a whitespace-separated chunk that is not one vocabulary word."""
        # The usual case, a word and a punctuation mark ("north,"): two look-ups.
        word, mark = self._whole.get(chunk[:-1]), self._whole.get(chunk[-1])
        if word is not None and mark is not None and not chunk[-1].isalnum():
            return [word, mark]
        out: list[int] = []
        for word in _WORDS.findall(chunk):  # "12.5%" -> "12", ".", "5", "%"
            j = self.vocab.get(word)
            if j is None:  # not a vocabulary word: WordPiece splits it
                out.extend(token.id for token in self.full.model.tokenize(word))
            else:
                out.append(j)
        return out

    def ids(self, texts: Sequence[str], *, add_special_tokens: bool) -> list[list[int]]:
        """Token ids of each text, as the full tokenizer would give them."""
        if add_special_tokens:
            return [e.ids for e in self.full.encode_batch(list(texts), add_special_tokens=True)]
        out: list[list[int] | None] = [self._shortcut_ids(t) if self.plain(t) else None for t in texts]
        rest = [t for t, ids in zip(texts, out) if ids is None]
        if rest:  # one batched call: `tokenizers` runs it on every core
            encoded = iter(self.full.encode_batch(rest, add_special_tokens=False))
            out = [ids if ids is not None else next(encoded).ids for ids in out]
        return cast("list[list[int]]", out)  # every None was filled in above
