"""Training-time features: build the tier's encoder, embed every prompt (cached), fit the
projection on the training split, and return the matrix the SDK would compute."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from features.extractor import FastTokenizer, FeatureExtractor, OnnxEncoder, Projection
from features.spec import DEFAULT_MAX_CHARS, FeatureSpec
from training.embedding_cache import CachedEncoder, EmbeddingCache
from training.encoders import BuiltEncoder, build_encoder, fold_projection, static_encoder_graph


@dataclass
class TrainingFeatures:
    spec: FeatureSpec
    matrix: np.ndarray          # float32, columns = spec.feature_names
    encoder: BuiltEncoder
    projection: Projection
    cache_hits: int
    cache_misses: int
    fused_prefix: bytes | None = None  # static tier: ids + scalars -> features, PCA folded into the table


def fit_projection(raw: np.ndarray, dim: int, *, seed: int) -> Projection:
    """PCA of the raw embeddings (training rows only), as a plain mean + components pair."""
    from sklearn.decomposition import PCA

    dim = min(dim, raw.shape[1], max(len(raw) - 1, 1))
    pca = PCA(n_components=dim, random_state=seed).fit(raw.astype(np.float64))
    return Projection(pca.mean_, pca.components_)


def featurize(prompts: Sequence[str], precisions: Sequence[str | None], train_rows: np.ndarray, *,
              tier: str, embedding_dim: int, max_tokens: int | None, cache_dir: Path, seed: int = 0,
              max_chars: int = DEFAULT_MAX_CHARS,
              batch_size: int = 512, on_batch: Callable[[int], None] | None = None) -> TrainingFeatures:
    """Features for every prompt, computed by the same FeatureExtractor the SDK uses."""
    options = {"max_tokens": max_tokens} if max_tokens else {}
    built = build_encoder(tier, cache_dir / "encoders", **options)
    cache = EmbeddingCache(cache_dir / "embeddings.sqlite", built.key)
    spec = FeatureSpec(tier=tier, max_tokens=built.max_tokens, max_chars=max_chars,
                       add_special_tokens=built.add_special_tokens,
                       encoder_row_wise=built.row_wise, embedding_dim=embedding_dim)
    encoder = CachedEncoder(OnnxEncoder(built.onnx_bytes, threads=2, row_wise=built.row_wise), cache)
    raw_extractor = FeatureExtractor(spec, FastTokenizer(built.tokenizer_path), encoder, projection=None)
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
    n_base = len(spec.feature_names) - spec.embedding_dim
    raw_embeddings = raw_matrix[:, n_base:]
    projection = fit_projection(raw_embeddings[train_rows], embedding_dim, seed=seed)
    spec = replace(spec, embedding_dim=projection.components.shape[0])
    if built.table is None:
        matrix = np.concatenate([raw_matrix[:, :n_base], projection(raw_embeddings)], axis=1)
        return TrainingFeatures(spec, matrix, built, projection, cache.hits, cache.misses)
    # Static tier: fold the projection into the table and compute the features exactly as
    # the fused serving graph will (the same graph nodes on the same inputs).
    table = fold_projection(built.table, projection.mean, projection.components)
    spec = replace(spec, fused=True)
    folded = FeatureExtractor(spec, raw_extractor.tokenizer, OnnxEncoder(static_encoder_graph(table), threads=2),
                              projection=None)
    matrix = folded.transform(list(prompts), list(precisions), batch_size=batch_size)
    prefix = static_encoder_graph(table, scalars=n_base)
    return TrainingFeatures(spec, matrix, built, projection, cache.hits, cache.misses, fused_prefix=prefix)
