"""Prompt text (+ declared precision) -> feature matrix. The one implementation that
training and the SDK share; it needs only numpy, tokenizers and onnxruntime.

Pipeline per batch: cut the text to `max_chars`, tokenize, keep `max_tokens` ids,
encoder.onnx (token ids -> raw embedding), projection (PCA fitted at training time),
then concatenate [n_tokens, text statistics, precision one-hot, projected embedding].
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from features.spec import FeatureSpec
from features.text_stats import statistics_matrix


class Encoder(Protocol):
    """Token ids (padded) -> one raw embedding per row."""

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray,
                 texts: Sequence[str]) -> np.ndarray: ...


class OnnxEncoder:
    """Runs an encoder.onnx with inputs `input_ids`, `attention_mask` and output `embedding`.

    `row_wise` encodes one unpadded prompt per call. Encoders with dynamic int8
    quantization need it: their activation scale comes from the whole input tensor,
    so a batched prompt's embedding would depend on its neighbours.
    """

    def __init__(self, model: str | Path | bytes, *, threads: int = 1, row_wise: bool = False):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        source = model if isinstance(model, bytes) else str(model)
        self.session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        self.row_wise = row_wise

    def _run(self, input_ids, attention_mask):
        return self.session.run(["embedding"], {"input_ids": input_ids, "attention_mask": attention_mask})[0]

    def __call__(self, input_ids, attention_mask, texts=()):
        if not self.row_wise:
            return self._run(input_ids, attention_mask)
        rows = []
        for ids, mask in zip(input_ids, attention_mask):
            n = max(int(mask.sum()), 1)
            rows.append(self._run(ids[None, :n], mask[None, :n])[0])
        return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)


class Projection:
    """Affine projection (x - mean) @ components.T, computed in float64 so the result does
    not depend on batch size (BLAS kernels differ between 1 row and many)."""

    def __init__(self, mean: np.ndarray, components: np.ndarray):
        self.mean = np.asarray(mean, dtype=np.float64)
        self.components = np.asarray(components, dtype=np.float64)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return ((x.astype(np.float64) - self.mean) @ self.components.T).astype(np.float32)

    def to_bytes(self) -> bytes:
        """The .npz file content (arrays only: loading needs no pickle)."""
        import io

        buffer = io.BytesIO()
        np.savez(buffer, mean=self.mean, components=self.components)
        return buffer.getvalue()

    @classmethod
    def load(cls, path: Path) -> "Projection":
        with np.load(path, allow_pickle=False) as data:
            return cls(data["mean"], data["components"])


def encodable(text: str) -> str:
    """The text itself, or with lone surrogates replaced when it is not valid UTF-8
    (the tokenizer, written in Rust, accepts only valid Unicode)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def load_tokenizer(path: str | Path):
    """A `tokenizers.Tokenizer` with its own truncation and padding switched off (we do both)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


# ASCII control characters that BERT's normalizer deletes (tab, newline, return become spaces).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class FastTokenizer:
    """The bundle's tokenizer, with a shortcut for plain ASCII text.

    BERT's normalizer (clean text, CJK spacing, accent stripping via NFD, lower-casing) is
    a third of the tokenizer's time. On ASCII text without control characters all but the
    lower-casing are no-ops, so such text goes through a copy whose normalizer only
    lower-cases: the same ids (tested), faster. Everything else takes the full path.
    """

    def __init__(self, path: str | Path):
        from tokenizers import normalizers

        self.full = load_tokenizer(path)
        self.fast = load_tokenizer(path)
        if type(self.full.normalizer).__name__ == "BertNormalizer":
            self.fast.normalizer = normalizers.Lowercase()
        else:  # an unknown normalizer: no shortcut
            self.fast = self.full

    @staticmethod
    def plain(text: str) -> bool:
        return text.isascii() and _CONTROL.search(text) is None

    def ids(self, texts: Sequence[str], *, add_special_tokens: bool) -> list[list[int]]:
        """Token ids of each text, as the full tokenizer would give them."""
        plain = [self.plain(t) for t in texts]
        if all(plain):
            return [e.ids for e in self.fast.encode_batch(list(texts), add_special_tokens=add_special_tokens)]
        if not any(plain):
            return [e.ids for e in self.full.encode_batch(list(texts), add_special_tokens=add_special_tokens)]
        fast = iter(self.fast.encode_batch([t for t, p in zip(texts, plain) if p], add_special_tokens=add_special_tokens))
        full = iter(self.full.encode_batch([t for t, p in zip(texts, plain) if not p],
                                           add_special_tokens=add_special_tokens))
        return [next(fast).ids if p else next(full).ids for p in plain]


class FeatureExtractor:
    """Builds the router's feature matrix from prompts; see the module doc."""

    def __init__(self, spec: FeatureSpec, tokenizer, encoder: Encoder, projection: Projection | None):
        self.spec, self.tokenizer, self.encoder, self.projection = spec, tokenizer, encoder, projection

    def heads(self, prompts: Sequence[str]) -> list[str]:
        """The part of each prompt that is tokenized and scanned (first max_chars, valid UTF-8)."""
        return [encodable(p[: self.spec.max_chars]) for p in prompts]

    def token_ids(self, heads: Sequence[str], prompts: Sequence[str]):
        """Padded ids and mask (int64) for the encoder, plus the estimated full-prompt token count."""
        encoded = self.tokenizer.ids(heads, add_special_tokens=self.spec.add_special_tokens)
        limit = self.spec.max_tokens
        rows, n_tokens = [], np.empty(len(heads), dtype=np.float32)
        for i, (ids, head, prompt) in enumerate(zip(encoded, heads, prompts)):
            # The head stands for the whole prompt: scale its count by the share of text it covers.
            n_tokens[i] = len(ids) * (len(prompt) / len(head) if len(head) < len(prompt) else 1.0)
            if len(ids) > limit:
                # Keep the closing special token ([SEP]) when the encoder expects one.
                ids = ids[: limit - 1] + ids[-1:] if self.spec.add_special_tokens else ids[:limit]
            rows.append(ids)
        if len(rows) == 1 and rows[0]:  # route(): one prompt, nothing to pad
            input_ids = np.array(rows, dtype=np.int64)
            return input_ids, np.ones_like(input_ids), n_tokens
        width = max((len(r) for r in rows), default=0) or 1
        input_ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, ids in enumerate(rows):
            input_ids[i, : len(ids)] = ids
            mask[i, : len(ids)] = 1
        return input_ids, mask, n_tokens

    def precision_matrix(self, precisions: Sequence[str | None]) -> np.ndarray:
        out = np.zeros((len(precisions), len(self.spec.precisions)), dtype=np.float32)
        for i, p in enumerate(precisions):
            if p is not None:
                out[i, self.spec.precisions.index(p)] = 1.0
        return out

    def prepare(self, prompts: Sequence[str], precisions: Sequence[str | None]):
        """Encoder inputs (ids, mask) and the scalar features [n_tokens, statistics, precision]."""
        heads = self.heads(prompts)
        input_ids, mask, n_tokens = self.token_ids(heads, prompts)
        scalars = np.concatenate([n_tokens[:, None], statistics_matrix(list(prompts), heads),
                                  self.precision_matrix(precisions)], axis=1).astype(np.float32)
        return input_ids, mask, scalars, heads

    def transform(self, prompts: Sequence[str], precisions: Sequence[str | None] | None = None,
                  *, batch_size: int = 256) -> np.ndarray:
        """Feature matrix (float32, one row per prompt, columns = spec.feature_names)."""
        precisions = list(precisions) if precisions is not None else [None] * len(prompts)
        if len(precisions) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(precisions)} precisions")
        parts = [self._transform_batch(prompts[i: i + batch_size], precisions[i: i + batch_size])
                 for i in range(0, len(prompts), batch_size)]
        if not parts:
            return np.zeros((0, len(self.spec.feature_names)), dtype=np.float32)
        return np.concatenate(parts, axis=0)

    def _transform_batch(self, prompts, precisions) -> np.ndarray:
        input_ids, mask, scalars, heads = self.prepare(prompts, precisions)
        embedding = np.asarray(self.encoder(input_ids, mask, heads), dtype=np.float32)
        if self.projection is not None:
            embedding = self.projection(embedding)
        return np.concatenate([scalars, embedding], axis=1)
