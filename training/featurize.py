"""Training-time features: build the tier's encoder, embed every prompt (cached), fit the
projection on the training split, and return the matrix the SDK would compute.

Two stages, the same for both engines: *raw* features (the tier's own embedding), on
which the projection (PCA) is fitted, and *serving* features (what the bundle computes:
the static tier folds the projection into its token table). Each stage is a picklable
`FeatureRecipe`, so the Dask engine ships it to workers and computes partitions with the
same code the local engine and the SDK use.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from serving.contract import DEFAULT_MAX_CHARS
from serving.features.extractor import FastTokenizer, FeatureExtractor, OnnxEncoder, Projection
from serving.features.spec import FeatureSpec
from training.embedding_cache import CachedEncoder, EmbeddingCache
from training.encoders import BuiltEncoder, build_encoder, fold_projection, static_encoder_graph

_EXTRACTORS: dict[tuple[str, int], FeatureExtractor] = {}  # per process, by (recipe key, threads)


@dataclass(frozen=True, eq=False)
class FeatureRecipe:
    """Everything a process needs to compute one stage's features, as plain bytes."""

    spec: FeatureSpec
    tokenizer_json: bytes
    encoder_onnx: bytes
    projection: Projection | None = None

    @cached_property
    def key(self) -> str:
        digest = hashlib.sha256(repr(self.spec.to_dict()).encode())
        for part in (self.tokenizer_json, self.encoder_onnx,
                     self.projection.to_bytes() if self.projection is not None else b""):
            digest.update(hashlib.sha256(part).digest())
        return digest.hexdigest()[:24]

    def extractor(self, *, threads: int = 1) -> FeatureExtractor:
        """This process's extractor for the recipe (built once, then reused)."""
        if (self.key, threads) not in _EXTRACTORS:
            encoder = OnnxEncoder(self.encoder_onnx, threads=threads, row_wise=self.spec.encoder_row_wise)
            _EXTRACTORS[self.key, threads] = FeatureExtractor(self.spec, FastTokenizer(self.tokenizer_json), encoder,
                                                              self.projection)
        return _EXTRACTORS[self.key, threads]

    def transform(self, prompts: Sequence[str], precisions: Sequence[str | None]) -> np.ndarray:
        return self.extractor().transform(list(prompts), list(precisions))


@dataclass
class FeaturePlan:
    """The fitted feature pipeline: the tier's encoder, the projection and the serving recipe."""

    built: BuiltEncoder
    raw: FeatureRecipe
    projection: Projection
    serving: FeatureRecipe
    fused_prefix: bytes | None = None  # static tier: ids + scalars -> features, PCA folded into the table

    @property
    def spec(self) -> FeatureSpec:
        return self.serving.spec

    def bundle_files(self, trees: bytes) -> dict:
        """The bundle's model files: one fused graph (static tier) or encoder + projection + trees."""
        from training.export import fuse

        if self.fused_prefix is not None:
            return {"model.onnx": fuse(self.fused_prefix, trees),
                    "tokenizer.json": self.built.tokenizer_path}
        return {"encoder.onnx": self.built.onnx_bytes, "router.onnx": trees,
                "projection.npz": self.projection.to_bytes(), "tokenizer.json": self.built.tokenizer_path}


@dataclass
class TrainingFeatures:
    plan: FeaturePlan
    matrix: np.ndarray          # float32, columns = plan.spec.feature_names
    cache_hits: int
    cache_misses: int

    @property
    def spec(self) -> FeatureSpec:
        return self.plan.spec


def raw_stage(tier: str, *, embedding_dim: int, max_tokens: int | None, max_chars: int,
              cache_dir: Path) -> tuple[BuiltEncoder, FeatureRecipe]:
    """The tier's encoder and the recipe of its raw (unprojected) features."""
    options = {"max_tokens": max_tokens} if max_tokens else {}
    built = build_encoder(tier, cache_dir / "encoders", **options)
    spec = FeatureSpec(tier=tier, max_tokens=built.max_tokens, max_chars=max_chars,
                       add_special_tokens=built.add_special_tokens,
                       encoder_row_wise=built.row_wise, embedding_dim=embedding_dim)
    return built, FeatureRecipe(spec, Path(built.tokenizer_path).read_bytes(), built.onnx_bytes)


def n_scalar_features(spec: FeatureSpec) -> int:
    """Columns before the embedding: token count, text statistics, precision one-hot."""
    return len(spec.feature_names) - spec.embedding_dim


def fit_projection(raw: np.ndarray, dim: int, *, seed: int) -> Projection:
    """PCA of the raw embeddings (training rows only), as a plain mean + components pair."""
    from sklearn.decomposition import PCA

    dim = min(dim, raw.shape[1], max(len(raw) - 1, 1))
    pca = PCA(n_components=dim, random_state=seed).fit(raw.astype(np.float64))
    return Projection(pca.mean_, pca.components_)


def plan_from(built: BuiltEncoder, raw: FeatureRecipe, projection: Projection) -> FeaturePlan:
    """The serving recipe once the projection is known."""
    spec = replace(raw.spec, embedding_dim=projection.components.shape[0])
    if built.table is None:
        return FeaturePlan(built, raw, projection, replace(raw, spec=spec, projection=projection))
    # Static tier: fold the projection into the table; the fused serving graph runs these
    # same nodes on the same inputs.
    table = fold_projection(built.table, projection.mean, projection.components)
    serving = FeatureRecipe(replace(spec, fused=True), raw.tokenizer_json, static_encoder_graph(table))
    return FeaturePlan(built, raw, projection, serving,
                       fused_prefix=static_encoder_graph(table, scalars=n_scalar_features(spec)))


def featurize(prompts: Sequence[str], precisions: Sequence[str | None], train_rows: np.ndarray, *,
              tier: str, embedding_dim: int, max_tokens: int | None, cache_dir: Path, seed: int = 0,
              max_chars: int = DEFAULT_MAX_CHARS,
              batch_size: int = 512, on_batch: Callable[[int], None] | None = None) -> TrainingFeatures:
    """Features for every prompt in memory (local engine), raw embeddings cached on disk."""
    built, raw = raw_stage(tier, embedding_dim=embedding_dim, max_tokens=max_tokens, max_chars=max_chars,
                           cache_dir=cache_dir)
    cache = EmbeddingCache(cache_dir / "embeddings.sqlite", built.key)
    encoder = CachedEncoder(OnnxEncoder(built.onnx_bytes, threads=2, row_wise=built.row_wise), cache)
    raw_extractor = FeatureExtractor(raw.spec, FastTokenizer(built.tokenizer_path), encoder, projection=None)
    parts = []
    try:
        for start in range(0, len(prompts), batch_size):
            parts.append(raw_extractor.transform(list(prompts[start: start + batch_size]),
                                                 list(precisions[start: start + batch_size])))
            if on_batch:
                on_batch(len(parts[-1]))
    finally:
        cache.close()
    raw_matrix = np.concatenate(parts)
    n_base = n_scalar_features(raw.spec)
    raw_embeddings = raw_matrix[:, n_base:]
    plan = plan_from(built, raw, fit_projection(raw_embeddings[train_rows], embedding_dim, seed=seed))
    if plan.fused_prefix is None:
        matrix = np.concatenate([raw_matrix[:, :n_base], plan.projection(raw_embeddings)], axis=1)
    else:
        matrix = plan.serving.extractor(threads=2).transform(list(prompts), list(precisions), batch_size=batch_size)
    return TrainingFeatures(plan, matrix, cache.hits, cache.misses)
