"""Prompt text (+ declared precision) -> feature matrix, the one implementation training and the SDK
share (it needs only numpy, tokenizers and onnxruntime). Per batch: cut the text to `max_chars`,
tokenize, keep `max_tokens` ids, encoder.onnx (token ids -> raw embedding), projection (PCA fitted at
training time), then concatenate [n_tokens, text statistics, precision one-hot, projected embedding].
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

from serving.features._spec import FeatureSpec
from serving.features._text_stats import text_statistics
from serving.features._tokenizer import FastTokenizer, encodable

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray
    from onnxruntime import InferenceSession  # no types of its own: Any to the checker

__all__ = ["Encoder", "FastTokenizer", "FeatureExtractor", "OnnxEncoder", "Projection", "encodable", "onnx_session"]


class Encoder(Protocol):
    """Token ids (padded) -> one raw embedding per row."""

    def __call__(
        self, input_ids: NDArray[np.int64], attention_mask: NDArray[np.int64], texts: Sequence[str]
    ) -> NDArray[np.floating[Any]]: ...


def onnx_session(model: str | Path | bytes, *, threads: int = 1) -> InferenceSession:
    """An onnxruntime CPU session on `threads` threads, from a graph's path or bytes. A graph given as
    bytes may not read external data from disk: the external-data folder is an empty temporary one
    while the session is created, so a graph that points at any file (an unverified weights file
    beside the bundle, or `../` anywhere) fails to load."""
    import tempfile

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if not isinstance(model, bytes):
        return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    with tempfile.TemporaryDirectory(prefix="router-no-external-data-") as empty:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", empty)
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


class OnnxEncoder:
    """Runs an encoder.onnx with inputs `input_ids`, `attention_mask` and output `embedding`.
    `row_wise` encodes one unpadded prompt per call, as encoders with dynamic int8 quantization need:
    their activation scale comes from the whole input tensor, so a batched prompt's embedding would
    depend on its neighbours."""

    def __init__(self, model: str | Path | bytes, *, threads: int = 1, row_wise: bool = False) -> None:
        self.session = onnx_session(model, threads=threads)
        self.row_wise = row_wise

    def _run(self, input_ids: NDArray[np.int64], attention_mask: NDArray[np.int64]) -> NDArray[np.float32]:
        embedding: NDArray[np.float32] = self.session.run(
            ["embedding"], {"input_ids": input_ids, "attention_mask": attention_mask}
        )[0]
        return embedding

    def __call__(
        self, input_ids: NDArray[np.int64], attention_mask: NDArray[np.int64], texts: Sequence[str] = ()
    ) -> NDArray[np.float32]:
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

    def __init__(self, mean: ArrayLike, components: ArrayLike) -> None:
        self.mean = np.asarray(mean, dtype=np.float64)
        self.components = np.asarray(components, dtype=np.float64)

    def __call__(self, x: NDArray[np.floating[Any]]) -> NDArray[np.float32]:
        projected: NDArray[np.float64] = (x.astype(np.float64) - self.mean) @ self.components.T
        return projected.astype(np.float32)

    def to_bytes(self) -> bytes:
        """The .npz file content (arrays only: loading needs no pickle)."""
        buffer = io.BytesIO()
        np.savez(buffer, mean=self.mean, components=self.components)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, content: bytes) -> "Projection":
        """From the .npz content written by to_bytes (no pickle)."""
        with np.load(io.BytesIO(content), allow_pickle=False) as data:
            return cls(data["mean"], data["components"])


class FeatureExtractor:
    """Builds the router's feature matrix from prompts (module doc). It runs on every route() call, so
    the per-prompt work stays in plain Python lists and each batch becomes a few numpy arrays once."""

    def __init__(
        self, spec: FeatureSpec, tokenizer: FastTokenizer, encoder: Encoder | None, projection: Projection | None
    ) -> None:
        """`encoder` None: a fused bundle, whose graph embeds the ids itself (prepare() only)."""
        self.spec, self.tokenizer, self.encoder, self.projection = spec, tokenizer, encoder, projection
        self._one_hot: dict[str | None, list[float]] = {None: [0.0] * len(spec.precisions)}
        for p in spec.precisions:
            self._one_hot[p] = [float(p == q) for q in spec.precisions]
        # One prompt needs no padding: its mask is a read-only view of this row.
        self._ones = np.ones((1, spec.max_tokens), dtype=np.int64)
        self._ones.flags.writeable = False
        self._n_scalars = 1 + len(spec.stat_names) + len(spec.precisions)

    def heads(self, prompts: Sequence[str]) -> list[str]:
        """The part of each prompt that is tokenized and scanned (first max_chars, valid UTF-8)."""
        return [encodable(p[: self.spec.max_chars]) for p in prompts]

    def token_ids(
        self, heads: Sequence[str], prompts: Sequence[str]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], list[float]]:
        """Padded ids and mask (int64) for the encoder, plus each prompt's estimated token count."""
        encoded = self.tokenizer.ids(heads, add_special_tokens=self.spec.add_special_tokens)
        limit = self.spec.max_tokens
        rows: list[list[int]] = []
        n_tokens: list[float] = []
        for ids, head, prompt in zip(encoded, heads, prompts):
            # The head stands for the whole prompt: scale its count by the share of text it covers.
            n_tokens.append(len(ids) * len(prompt) / len(head) if len(head) < len(prompt) else float(len(ids)))
            if len(ids) > limit:
                # Keep the closing special token ([SEP]) when the encoder expects one.
                ids = ids[: limit - 1] + ids[-1:] if self.spec.add_special_tokens else ids[:limit]
            rows.append(ids)
        if len(rows) == 1 and rows[0]:  # route(): one prompt, nothing to pad
            return np.array(rows, dtype=np.int64), self._ones[:, : len(rows[0])], n_tokens
        width = max((len(r) for r in rows), default=0) or 1
        input_ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, ids in enumerate(rows):
            input_ids[i, : len(ids)] = ids
            mask[i, : len(ids)] = 1
        return input_ids, mask, n_tokens

    def prepare(
        self, prompts: Sequence[str], precisions: Sequence[str | None]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float32], list[str], list[float]]:
        """(ids, mask, scalars, heads, n_tokens): the encoder's inputs, the scalar features
        [n_tokens, statistics, precision] (float32), the scanned heads and the token counts."""
        heads = self.heads(prompts)
        input_ids, mask, n_tokens = self.token_ids(heads, prompts)
        values: list[float] = []
        for n, prompt, head, precision in zip(n_tokens, prompts, heads, precisions):
            values.append(n)
            values += text_statistics(prompt, head)
            try:
                values += self._one_hot[precision]  # the precision one-hot, all zeros when undeclared
            except KeyError:
                raise ValueError(
                    f"precision {precision!r} is not one of {list(self.spec.precisions)} or None"
                ) from None
        # Each value is rounded to float32 once, as the training matrix is.
        scalars = np.array(values, dtype=np.float32).reshape(len(prompts), self._n_scalars)
        return input_ids, mask, scalars, heads, n_tokens

    def transform(
        self, prompts: Sequence[str], precisions: Sequence[str | None] | None = None, *, batch_size: int = 256
    ) -> NDArray[np.float32]:
        """Feature matrix (float32, one row per prompt, columns = spec.feature_names)."""
        precisions = list(precisions) if precisions is not None else [None] * len(prompts)
        if len(precisions) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(precisions)} precisions")
        parts = [
            self._transform_batch(prompts[i : i + batch_size], precisions[i : i + batch_size])
            for i in range(0, len(prompts), batch_size)
        ]
        if not parts:
            return np.zeros((0, len(self.spec.feature_names)), dtype=np.float32)
        return np.concatenate(parts, axis=0)

    def _transform_batch(self, prompts: Sequence[str], precisions: Sequence[str | None]) -> NDArray[np.float32]:
        if self.encoder is None:
            raise TypeError("this extractor has no encoder (a fused bundle's graph embeds the ids): use prepare()")
        input_ids, mask, scalars, heads, _ = self.prepare(prompts, precisions)
        embedding = np.asarray(self.encoder(input_ids, mask, heads), dtype=np.float32)
        if self.projection is not None:
            embedding = self.projection(embedding)
        return np.concatenate([scalars, embedding], axis=1)
