"""Training at scale: the streamed, chunked featurization gives the SDK's features bit for bit
(in one process or a pool, in any chunking), the projection fitted block by block is the
PCA's, the local engine's per-unit reading and lean merge give load_logs + merge_duplicates'
frame, the embedding cache stays bounded, and `make scale` records each stage's wall time,
memory and floor (the process-tree profiler and the stage clock: tests/test_profiling.py) and
that both engines' bundles carry the lexical blend."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from serving.features._extractor import FastTokenizer, FeatureExtractor, OnnxEncoder, Projection
from serving.features._spec import FeatureSpec
from tests.conftest import invoke_command
from training.embedding_cache import EmbeddingCache
from training.encoders import BuiltEncoder, minilm_dir, static_encoder_graph
from training.featurize import (
    ChunkFeaturizer,
    FeatureRecipe,
    FirstPassMemo,
    ProjectionFitter,
    TokenRows,
    fit_projection,
    table_features,
)
from training.novelty import token_rows

PROMPTS = [
    "Which organ filters blood?\nA. Heart\nB. Kidney\nC. Lung\nD. Skin\nAnswer:",
    "",
    "   ",
    "short",
    "Ünïcode café 日本語 and ASCII",
    "What is 12.5% of $1,240? Show the steps.",
    "word " * 3000,
    "```python\ndef add(a, b):\n    return a + b\n```",
    "tab\there\r\nnew line",
]


@pytest.fixture(scope="module")
def static_like():
    """A static-tier encoder with a random 384-wide token table (the real one is distilled from
    MiniLM, which takes a minute), and many prompts of varied size and script."""
    rng = np.random.default_rng(0)
    table = rng.normal(scale=0.05, size=(30522, 384)).astype(np.float32)
    tokenizer = minilm_dir() / "tokenizer.json"
    built = BuiltEncoder(static_encoder_graph(table), tokenizer, 64, False, table=table)
    spec = FeatureSpec(tier="static", max_tokens=64, max_chars=400, embedding_dim=8)
    raw = FeatureRecipe(spec, tokenizer.read_bytes(), built.onnx_bytes, table=table)
    words = ["alpha", "beta", "gamma", "12.5%", "north,", "café", "Zürich", "x=3", "?", "Answer:", "\n"]
    prompts = PROMPTS + [" ".join(rng.choice(words, size=rng.integers(1, 120))) for _ in range(300)]
    precisions = [("exact", "standard", "tolerant", None)[i % 4] for i in range(len(prompts))]
    return built, raw, prompts, precisions


def test_chunk_featurizer_gives_the_sdk_extractors_features_bit_for_bit(static_like):
    built, raw, prompts, precisions = static_like
    onnx_path = FeatureExtractor(raw.spec, FastTokenizer(built.tokenizer_path), OnnxEncoder(built.onnx_bytes), None)
    expected = onnx_path.transform(prompts, precisions)
    assert np.array_equal(ChunkFeaturizer(raw).transform(prompts, precisions), expected)
    alone = np.concatenate([ChunkFeaturizer(raw).transform([p], [q]) for p, q in zip(prompts[:12], precisions)])
    assert np.array_equal(alone, expected[:12])


def test_streamed_features_equal_one_shot_features_and_the_bundles(static_like):
    """Chunks of 7 rows featurized in a pool of 2 processes give the bits of one chunk in this
    process, and the serving recipe's ONNX graph (what the bundle runs) gives them too."""
    built, raw, prompts, precisions = static_like
    train = np.arange(len(prompts)) % 10 < 7
    options = dict(embedding_dim=8, seed=0)
    plan, one_shot, _ = table_features(built, raw, prompts, precisions, train, chunk_rows=10_000, workers=1, **options)
    seen = []
    _, streamed, kept = table_features(
        built,
        raw,
        np.array(prompts, dtype=object),
        np.array(precisions, dtype=object),
        train,
        chunk_rows=7,
        workers=2,
        pool_min_rows=0,
        on_batch=seen.append,
        keep_tokens=~train,
        **options,
    )
    assert np.array_equal(streamed, one_shot) and sum(seen) == len(prompts) and max(seen) == 7
    # The ids kept for the familiarity fit are the held-out rows' ids as the SDK tokenizes them.
    held_out = [p for p, t in zip(prompts, train) if not t]
    assert np.array_equal(kept.ids, token_rows(plan.serving.extractor(), held_out).ids)
    assert np.array_equal(kept.lengths, token_rows(plan.serving.extractor(), held_out).lengths)
    assert np.array_equal(plan.serving.extractor().transform(prompts, precisions), one_shot)
    # The projection is the PCA of the training rows' raw embeddings, as scikit-learn fits it.
    raw_rows = ChunkFeaturizer(raw).transform(
        [p for p, t in zip(prompts, train) if t], [q for q, t in zip(precisions, train) if t]
    )[:, -384:]
    expected = fit_projection(raw_rows, 8, seed=0)
    assert np.array_equal(plan.projection.components, expected.components)


def test_a_memo_of_the_first_pass_gives_each_fold_the_features_it_would_compute(static_like, monkeypatch):
    """Cross-fitting's folds featurize the same rows with other training rows: from the memo
    the first fold kept, a later fold's features, projection and kept ids are the bits it
    computes alone, without tokenizing again; other rows or precisions are tokenized anew."""
    built, raw, prompts, precisions = static_like
    options = dict(embedding_dim=8, seed=0, chunk_rows=7, workers=1)
    folds = [np.arange(len(prompts)) % 5 != k for k in range(3)]
    alone = [table_features(built, raw, prompts, precisions, train, keep_tokens=~train, **options) for train in folds]
    memo = FirstPassMemo()
    table_features(built, raw, prompts, precisions, folds[0], memo=memo, **options)
    prepared = []
    monkeypatch.setattr(ChunkFeaturizer, "prepare", lambda self, *a: prepared.append(a) or pytest.fail("tokenized"))
    for train, (plan, matrix, kept) in zip(folds[1:], alone[1:]):
        memo_plan, memo_matrix, memo_kept = table_features(
            built, raw, prompts, precisions, train, keep_tokens=~train, memo=memo, **options
        )
        assert np.array_equal(memo_matrix, matrix)
        assert np.array_equal(memo_plan.projection.components, plan.projection.components)
        assert np.array_equal(memo_kept.ids, kept.ids) and np.array_equal(memo_kept.lengths, kept.lengths)
    monkeypatch.undo()
    for other_prompts, other_precisions in ((prompts[1:], precisions[1:]), (prompts, precisions[1:] + [None])):
        before = memo.digest
        table_features(
            built, raw, other_prompts, other_precisions, folds[0][: len(other_prompts)], memo=memo, **options
        )
        assert memo.digest != before  # not recalled: tokenized and kept instead


def test_token_rows_keep_each_prompts_ids():
    ids = np.array([[5, 6, 7], [8, 0, 0], [0, 0, 0], [9, 10, 0]])
    tokens = TokenRows.from_padded(ids, (ids > 0).astype(np.int64))
    assert tokens.ids.dtype == np.uint16 and tokens.lengths.tolist() == [3, 1, 0, 2]
    assert tokens.subset(np.array([True, False, True, True])).ids.tolist() == [5, 6, 7, 9, 10]
    assert tokens.slice(1, 4).ids.tolist() == [8, 9, 10]
    both = TokenRows.concat([tokens.slice(0, 2), tokens.slice(2, 4)])
    assert both.ids.tolist() == tokens.ids.tolist() and both.lengths.tolist() == tokens.lengths.tolist()
    assert tokens.counts(11).toarray()[0, 5:8].tolist() == [1, 1, 1]
    rows = tokens.per_row()  # one array a row, as the Dask engine sends them back
    assert [r.tolist() for r in rows] == [[5, 6, 7], [8], [], [9, 10]]
    back = TokenRows.from_rows(rows)
    assert back.ids.tolist() == tokens.ids.tolist() and back.lengths.tolist() == tokens.lengths.tolist()
    assert tokens.slice(2, 2).per_row() == [] and len(TokenRows.from_rows([])) == 0


def test_projection_fitted_block_by_block_is_the_pca():
    rng = np.random.default_rng(1)
    raw = (rng.normal(size=(3_000, 24)) @ rng.normal(size=(24, 24)) + 3.0).astype(np.float32)
    exact = ProjectionFitter(5, seed=0, exact_rows=3_000)
    for block in np.array_split(raw, 7):
        exact.add(block)
    reference = fit_projection(raw, 5, seed=0)
    assert np.array_equal(exact.projection().components, reference.components)  # held: scikit-learn itself
    streamed = ProjectionFitter(5, seed=0, exact_rows=400)
    for block in np.array_split(raw, 7):
        streamed.add(block)
    projection = streamed.projection()
    assert streamed.n_folded == 3_000 and not streamed.held
    assert np.allclose(projection.mean, reference.mean, rtol=0, atol=1e-12)
    assert np.allclose(projection.components, reference.components, rtol=0, atol=1e-9)  # signs included


def test_the_embedding_cache_is_bounded_and_keeps_the_newest(tmp_path):
    cache = EmbeddingCache(tmp_path / "cache.sqlite", "enc-v1", max_rows=5)
    texts = [f"prompt {i}" for i in range(12)]
    for start in range(0, 12, 4):
        cache.put_many(texts[start : start + 4], np.tile(np.arange(4, dtype=np.float32), (4, 1)) + start)
    assert len(cache) == 5
    found = cache.get_many(texts)
    assert [v is not None for v in found] == [False] * 7 + [True] * 5
    assert found[-1].tolist() == [8.0, 9.0, 10.0, 11.0]
    assert EmbeddingCache(tmp_path / "cache.sqlite", "enc-v2").get_many(texts[-1:]) == [None]


def test_local_engine_reads_and_merges_like_load_logs_and_merge_duplicates(tmp_path):
    """Per-unit reading (one frame per file, types as one frame would have them) and the lean
    merge give the frame of load_logs + merge_duplicates, row for row, on files of different
    formats and columns with repeated prompts across them."""
    from data.logs import load_logs
    from data.prepare import merge_duplicates
    from data.simulator import write_shards
    from training.config import TrainConfig
    from training.engines.local import merge_repeats, read_valid_rows

    shards = write_shards(tmp_path / "logs", 3_000, rows_per_shard=1_000, seed=5)
    repeats = pd.read_parquet(shards[0]).head(30)[["prompt", "edge_quality", "cloud_quality", "precision"]]
    repeats = repeats.assign(edge_quality=1.0, cloud_quality=0.0)
    lines = [json.dumps({k: v for k, v in row.items() if v is not None}) for row in repeats.to_dict("records")]
    (tmp_path / "logs" / "extra.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = TrainConfig(data=[str(tmp_path / "logs")], reports_dir=str(tmp_path / "reports"))
    valid, logs = read_valid_rows(config.data, config)
    expected = load_logs(config.data).frame()
    assert logs.n_read == 3_030 and (tmp_path / "reports" / "rejects.jsonl").exists()
    assert valid["prompt"].dtype == object
    pd.testing.assert_frame_equal(valid.astype({"prompt": expected["prompt"].dtype}), expected)
    merged = merge_repeats(valid)
    assert (merged["n_merged"] > 1).sum() >= 30
    pd.testing.assert_frame_equal(merged.astype({"prompt": expected["prompt"].dtype}), merge_duplicates(expected))


@pytest.mark.slow
def test_make_scale_records_stages_memory_and_floors(tmp_path, encoder_cache):
    """`make scale` on 2,000 simulated rows with both engines: per run and per stage, wall time,
    peak memory (tree and largest process) and the stage floors measured in the same run; and
    each engine's bundle is the default one, lexical blend included, its regressions fitted on
    the same hash sample of the training prompts (lexical.sample_rows cut to 400 here, as a
    million rows cut them to 50,000)."""
    from pipelines.scale import main

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "encoders").symlink_to(encoder_cache / "encoders", target_is_directory=True)
    (encoder_cache / "encoders").mkdir(exist_ok=True)
    out = tmp_path / "scale.json"
    done = invoke_command(
        main,
        [
            "--rows",
            "2000",
            "--engines",
            "local,dask",
            "--work",
            str(tmp_path),
            "--rows-per-shard",
            "1000",
            "--set",
            "lexical.sample_rows=400",
            "--out",
            str(out),
        ],
    )
    assert done.exit_code == 0, done.output
    runs = {run["engine"]: run for run in json.loads(out.read_text())["results"]}
    assert set(runs) == {"local", "dask"}
    for engine, run in runs.items():
        assert run["exit_code"] == 0 and run["test_apgr"] > run["rule_apgr"] + 0.05 and run["cpu_s"] > 0, engine
        assert run["options"] == ["lexical.sample_rows=400"]
        stages = run["stages"]
        assert {
            "read_validate",
            "merge",
            "featurize",
            "lexical",
            "fit",
            "thresholds",
            "export_parity",
            "mlflow",
        } <= set(stages), engine
        for name in ("read_validate", "merge", "featurize", "fit", "export_parity", "mlflow"):
            assert stages[name]["floor_s"] > 0, (engine, name)
        assert all(
            s["wall_s"] >= 0 and s["peak_rss_total_mb"] >= s["peak_rss_largest_mb"] > 50 for s in stages.values()
        )
        assert run["lexical"] == "blend" and 300 <= run["lexical_rows"] <= 500, (engine, run.get("lexical_rows"))
    # The same prompts: the sample is drawn by prompt hash from the same merged rows.
    assert runs["local"]["lexical_rows"] == runs["dask"]["lexical_rows"]
    assert "featurize" in done.output and "floor" in done.output and "lexical" in done.output
