"""Lexical evidence (training.lexical, TrainConfig.lexical): the graph's margins are the
training matrix's, the training rows' margins are out of fold, and a bundle trained with it
scores like its training pipeline from raw text."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests.conftest import QUICK_ACCEPTANCE_ROUNDS, config_for

HARD = [
    "",
    "   \n\t  ",
    "a",
    "Why?",
    "日本語のテキストを要約してください。",
    "🤖🎉🔥 emoji only 🚀",
    "x " * 3000,
    "word " * 100 + "日本 🤖",
    "What is 2+2? Answer with one digit.",
]


@pytest.fixture(scope="module")
def extractor():
    """The static tier's tokenizer and spec (only `prepare` is used: no encoder)."""
    from serving.features._extractor import FastTokenizer, FeatureExtractor
    from serving.features._spec import FeatureSpec
    from training.encoders import minilm_dir

    tokenizer = FastTokenizer((minilm_dir() / "tokenizer.json").read_bytes())
    return FeatureExtractor(FeatureSpec(tier="static", fused=True, embedding_dim=4), tokenizer, None, None)


def _terms(extractor, prompts):
    """The prompts' terms from the ids training keeps (training.featurize.TokenRows)."""
    from training.featurize import TokenRows
    from training.lexical import Terms

    ids, mask, _, _, _ = extractor.prepare(prompts, [None] * len(prompts))
    tokens = TokenRows.from_padded(ids, mask)
    return Terms.of(tokens.ids, tokens.lengths, extractor.tokenizer.full.get_vocab_size())


def test_terms_are_unigrams_and_hashed_bigrams_divided_by_their_number():
    from training.lexical import BIGRAM_BUCKETS, VOCABULARY, Terms

    terms = Terms.of_rows([[5, 6, 5], [], [7]])
    assert terms.n_terms.tolist() == [5, 0, 1]  # n ids: 2n - 1 terms
    row = terms.counts[0].toarray().ravel()
    assert row[5] == 2 and row[6] == 1
    assert row[VOCABULARY + (5 * 1_000_003 + 6) % BIGRAM_BUCKETS] == 1
    assert row[VOCABULARY + (6 * 1_000_003 + 5) % BIGRAM_BUCKETS] == 1
    assert terms.counts[1].nnz == 0 and terms.counts[2].nnz == 1
    assert Terms.of_rows([[5, 6, 5]]).normalized()[0, 5] == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 30522\)"):
        Terms.of_rows([[30522]])


def test_graph_margins_equal_the_training_margins_on_hard_strings(extractor):
    """The fused graph's margins, from the ids the SDK feeds it (one unpadded prompt, and
    padded in a batch), against numpy's from the ids training keeps: an empty prompt gets
    the bias, a long one is cut where the SDK cuts it."""
    from serving.features._extractor import onnx_session
    from training.encoders import static_encoder_graph
    from training.featurize import n_scalar_features
    from training.lexical import BIGRAM_BUCKETS, LexicalModel, on_grid

    vocabulary = extractor.tokenizer.full.get_vocab_size()
    rng = np.random.default_rng(0)
    # weights over seven orders of magnitude: the sums must still agree
    coefficients = rng.normal(size=(2, vocabulary + BIGRAM_BUCKETS)) * 10 ** rng.uniform(-6, 1, size=(2, 1))
    model = LexicalModel(np.stack([on_grid(c) for c in coefficients], axis=1), np.array([0.25, -1.5]), vocabulary)
    table = rng.normal(size=(vocabulary, 4)).astype(np.float32).astype(np.float64)
    graph = model.append_to_graph(static_encoder_graph(table, scalars=n_scalar_features(extractor.spec)))
    session = onnx_session(graph)

    def run(prompts):
        ids, mask, scalars, _, _ = extractor.prepare(prompts, [None] * len(prompts))
        return session.run(["model_features"], {"input_ids": ids, "attention_mask": mask, "scalars": scalars})[0]

    expected = model.margins(_terms(extractor, HARD))
    batch = run(HARD)
    alone = np.concatenate([run([p]) for p in HARD])
    assert batch.shape == (len(HARD), n_scalar_features(extractor.spec) + 4 + 2)
    np.testing.assert_allclose(batch[:, -2:], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(alone[:, -2:], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(expected[:2], [[0.25, -1.5]] * 2, rtol=0, atol=1e-7)  # no terms: the bias
    assert _terms(extractor, ["x " * 3000]).n_terms[0] == 2 * extractor.spec.max_tokens - 1
    assert np.isfinite(batch).all()


def _graph_margins(extractor, model, rng):
    """A function of prompts -> `model`'s margins as its graph computes them, appended to a
    static prefix with a random embedding table, from the ids the SDK feeds it."""
    from serving.features._extractor import onnx_session
    from training.encoders import static_encoder_graph
    from training.featurize import n_scalar_features

    table = rng.normal(size=(model.vocabulary, 4)).astype(np.float32).astype(np.float64)
    session = onnx_session(
        model.append_to_graph(static_encoder_graph(table, scalars=n_scalar_features(extractor.spec)))
    )

    def run(batch):
        ids, mask, scalars, _, _ = extractor.prepare(batch, [None] * len(batch))
        return session.run(["lexical_margins"], {"input_ids": ids, "attention_mask": mask, "scalars": scalars})[0]

    return run


def test_tfidf_graph_margins_equal_the_training_margins_on_hard_strings(extractor):
    """lexical_weighting=tfidf: the graph's margins (each distinct term's count from one
    Unique over the batch, (1 + ln count) * idf, the row's L2 norm) against numpy's
    Terms.tfidf, alone and padded in a batch, with repeated terms (counts up to 511) and an
    empty prompt (the bias); against the mean form, the counts matter."""
    from training.lexical import BIGRAM_BUCKETS, LexicalModel, Terms, on_grid

    vocabulary = extractor.tokenizer.full.get_vocab_size()
    rng = np.random.default_rng(1)
    prompts = HARD + ["the the the cat " * 40, "a b a b a b c"]
    terms = _terms(extractor, prompts)
    assert terms.counts.max() >= 500  # "x " * 3000: one term repeated
    idf = Terms.of_rows([[1, 2, 3], [1, 5], list(range(vocabulary - 40, vocabulary))]).idf()
    idf = (idf + rng.uniform(0, 3, size=idf.shape)).astype(np.float32).astype(np.float64)
    coefficients = rng.normal(size=(2, vocabulary + BIGRAM_BUCKETS)) * 10 ** rng.uniform(-6, 1, size=(2, 1))
    weights = np.stack([on_grid(c) for c in coefficients], axis=1)
    model = LexicalModel(weights, np.array([0.25, -1.5]), vocabulary, idf, "tfidf")
    run = _graph_margins(extractor, model, rng)
    expected = model.margins(terms)
    np.testing.assert_allclose(run(prompts), expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([run([p]) for p in prompts]), expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(expected[:2], [[0.25, -1.5]] * 2, rtol=0, atol=1e-7)  # no terms: the bias
    x = terms.tfidf(idf)
    np.testing.assert_allclose(np.asarray(x.multiply(x).sum(axis=1)).ravel()[2:], 1.0, rtol=1e-12)
    mean = LexicalModel(weights, model.bias, vocabulary).margins(terms)
    assert np.max(np.abs(mean - expected)) > 1e-3


def test_idf_graph_margins_are_the_training_margins_bit_for_bit(extractor):
    """lexical_weighting=idf: each term weighed by its idf, the row scaled to sum 1. The graph
    (no per-term counts: a Gather of idf * w and of idf, two masked sums, one division) gives
    numpy's margins bit for bit, alone and padded in a batch, on hard strings and repeated terms,
    with idf and coefficients over seven orders of magnitude; an empty prompt gets the bias."""
    from scipy.sparse import diags

    from training.lexical import BIGRAM_BUCKETS, LexicalModel, on_grid

    vocabulary = extractor.tokenizer.full.get_vocab_size()
    rng = np.random.default_rng(2)
    prompts = HARD + ["the the the cat " * 40, "a b a b a b c"]
    terms = _terms(extractor, prompts)
    idf = on_grid(1 + rng.uniform(0, 9, size=vocabulary + BIGRAM_BUCKETS)).astype(np.float64)
    coefficients = rng.normal(size=(2, vocabulary + BIGRAM_BUCKETS)) * 10 ** rng.uniform(-6, 1, size=(2, 1))
    weights = np.stack([on_grid(c * idf) for c in coefficients], axis=1)
    model = LexicalModel(weights, np.array([0.25, -1.5]), vocabulary, idf, "idf")
    run = _graph_margins(extractor, model, rng)
    expected = model.margins(terms)
    np.testing.assert_array_equal(run(prompts), expected)
    np.testing.assert_array_equal(np.concatenate([run([p]) for p in prompts]), expected)
    np.testing.assert_array_equal(expected[:2], np.float32([[0.25, -1.5]] * 2))  # no terms: the bias
    # the regression's own rows: counts * idf summing to 1, so the margin is b + x @ coefficient
    x = terms.idf_weighted(idf)
    np.testing.assert_allclose(np.asarray(x.sum(axis=1)).ravel()[2:], 1.0, rtol=1e-12)
    by_rows = np.asarray(x @ diags(1 / idf) @ weights.astype(np.float64)) + model.bias
    np.testing.assert_allclose(expected, by_rows, rtol=1e-5, atol=1e-5)
    mean = LexicalModel(weights, model.bias, vocabulary).margins(terms)
    assert np.max(np.abs(mean - expected)) > 1e-3


def test_an_idf_fit_keeps_idf_times_coefficients_on_the_grid():
    """LexicalModel.fit with idf weighting: the idf is on the grid, each weight is the fitted
    coefficient times its term's idf, and the prompts' margins rank an outcome their words tell."""
    from training.lexical import LexicalModel, Terms, on_grid

    rng = np.random.default_rng(3)
    rows = [[int(w) for w in rng.choice([7, 8, 9, 10, 11], size=6)] + [100 + (i % 2)] for i in range(400)]
    outcome = np.array([float(i % 2) for i in range(400)])  # told by the last word alone
    terms = Terms.of_rows(rows)
    model = LexicalModel.fit(terms, np.c_[outcome, 1 - outcome], np.ones((400, 2)), c=64.0, weighting="idf")
    assert model.weighting == "idf"
    np.testing.assert_array_equal(model.idf, on_grid(terms.idf()).astype(np.float64))
    assert model.weights[100, 0] < 0 < model.weights[101, 0]
    margins = model.margins(terms)[:, 0]
    assert margins[outcome == 1].min() > margins[outcome == 0].max()


def _memorizable(n: int = 300):
    """Prompts whose only signal is one token of their own, with a random outcome: an
    in-sample model learns each outcome; a held-out one cannot."""
    from training.featurize import TokenRows

    rng = np.random.default_rng(1)
    ids = [np.full(3, 1000 + i, dtype=np.uint16) for i in range(n)]
    outcome = (rng.random(n) < 0.5).astype(float)
    return TokenRows.from_rows(ids), np.c_[outcome, 1 - outcome], [f"prompt {i}" for i in range(n)]


def test_training_rows_get_out_of_fold_margins():
    from training.config import TrainConfig
    from training.lexical import Terms, fold_numbers
    from training.lexical_stage import for_training

    tokens, outcomes, prompts = _memorizable()
    train = np.arange(len(prompts)) < 225
    folds = np.full(len(prompts), -1)
    folds[train] = fold_numbers(np.array(prompts, dtype=object)[train], 5)
    assert sorted(set(folds[train].tolist())) == [0, 1, 2, 3, 4] and np.bincount(folds[train]).min() > 25
    every = np.ones(len(prompts), dtype=bool)
    config = TrainConfig(lexical={"weighting": "mean", "c": 64.0})
    model, margins = for_training(
        config, outcomes, np.ones_like(outcomes), tokens, every, train, every, folds, vocabulary=30522
    )

    terms = Terms.of(tokens.ids, tokens.lengths)
    in_sample = model.margins(terms.subset(train))[:, 0]
    assert np.corrcoef(in_sample, outcomes[train, 0])[0, 1] > 0.9  # the all-train model memorized them
    assert abs(np.corrcoef(margins[train, 0], outcomes[train, 0])[0, 1]) < 0.2  # their own margins did not
    assert np.max(np.abs(margins[train, 0] - in_sample)) > 0.5
    # every other row: the all-train model's margins, the ones the bundle computes
    np.testing.assert_allclose(margins[~train], model.margins(terms.subset(~train)), rtol=0, atol=1e-6)


def _all_at_once(terms, outcomes, weights, train, folds, **options):
    """The lexical stage from every row's terms at once, as it was computed before it was
    streamed: the model fitted on every training row, margins out of fold on the training rows
    (`folds`: each training row's fold; None: that model's on every row), that model's elsewhere."""
    from training.lexical import LexicalModel

    rows = np.flatnonzero(train)
    model = LexicalModel.fit(terms.subset(rows), outcomes[rows], weights[rows], **options)
    if folds is None:
        return model, model.margins(terms)
    margins = np.empty((len(terms), len(model.bias)), dtype=np.float32)
    margins[~train] = model.margins(terms.subset(~train))
    for fold in np.unique(folds):
        held, fit_rows = rows[folds == fold], rows[folds != fold]
        part = LexicalModel.fit(terms.subset(fit_rows), outcomes[fit_rows], weights[fit_rows], **options)
        margins[held] = part.margins(terms.subset(held))
    return model, margins


def test_terms_are_the_canonical_matrix_of_summed_term_counts():
    """Terms.of writes each prompt's row in place: the same matrix (indices sorted, repeats
    summed) as a COO matrix of every (prompt, term) pair, the construction it replaced."""
    from scipy.sparse import coo_matrix

    from training.lexical import BIGRAM_BUCKETS, BIGRAM_MULTIPLIER, VOCABULARY, Terms

    rng = np.random.default_rng(4)
    for _ in range(50):
        rows = [rng.integers(0, rng.choice([3, 50, VOCABULARY]), rng.integers(0, 12)).tolist() for _ in range(20)]
        pairs = [(r, t) for r, ids in enumerate(rows) for t in ids] + [
            (r, VOCABULARY + (a * BIGRAM_MULTIPLIER + b) % BIGRAM_BUCKETS)
            for r, ids in enumerate(rows)
            for a, b in zip(ids, ids[1:])
        ]
        r, t = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
        expected = coo_matrix((np.ones(len(r)), (r, t)), shape=(20, VOCABULARY + BIGRAM_BUCKETS)).tocsr()
        counts = Terms.of_rows(rows).counts
        assert counts.has_canonical_format
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(counts, name), getattr(expected, name))


def _token_log(n: int = 400):
    """n prompts' token ids (training.featurize.TokenRows), their frame (prompt, outcomes; one
    unknown in ten) and split: outcomes that some tokens predict."""
    import pandas as pd

    from training.featurize import TokenRows

    rng = np.random.default_rng(3)
    rows = [rng.integers(0, 300, rng.integers(0, 30)) for _ in range(n)]
    edge = np.array([float(np.isin(7, r) or rng.random() < 0.3) for r in rows])
    cloud = np.array([float(not np.isin(11, r) or rng.random() < 0.2) for r in rows])
    edge[rng.random(n) < 0.1] = np.nan
    frame = pd.DataFrame({"prompt": [f"prompt {i}" for i in range(n)], "edge_quality": edge, "cloud_quality": cloud})
    split = np.where(np.arange(n) % 10 < 7, "train", np.where(np.arange(n) % 10 < 9, "val", "test"))
    return TokenRows.from_rows([r.astype(np.uint16) for r in rows]), frame, split == "train"


@pytest.mark.parametrize(
    "options",
    [
        {"mode": "blend"},  # tfidf, no folds: the default
        {"mode": "blend", "weighting": "idf"},
        {"mode": "features", "folds": 3},  # mean, out of fold
        {"mode": "blend", "start": True, "folds": 4},  # tfidf, out of fold
    ],
)
def test_below_the_sample_cap_the_lexical_stage_is_cross_fitted_bit_for_bit(options):
    """While the training rows are fewer than lexical.sample_rows (the shipped logs), the
    streamed stage (the sample's terms only, margins chunk by chunk) gives what every row's terms
    at once give (_all_at_once): the same model and the same float32 margins, so the bundles
    trained on them do not change."""
    from training.config import TrainConfig
    from training.lexical import Terms
    from training.lexical_stage import for_training, outcome_arrays, training_rows

    tokens, frame, train = _token_log()
    config = TrainConfig(lexical=options)
    sample, wanted, folds = training_rows(config, frame["prompt"], train, rows=len(frame))
    assert (sample == train).all() and (folds is None) == (config.lexical.mode == "blend" and not config.lexical.start)
    assert (wanted == (np.ones(len(frame), dtype=bool) if folds is not None else ~train)).all()
    model, margins = for_training(
        config, *outcome_arrays(frame), tokens, np.ones(len(frame), bool), sample, wanted, folds, vocabulary=300
    )

    outcomes, weights = outcome_arrays(frame)
    terms = Terms.of(tokens.ids, tokens.lengths, 300)
    kwargs = {"c": config.lexical.c, "weighting": config.lexical.weighting}
    expected, expected_margins = _all_at_once(
        terms, outcomes, weights, train, None if folds is None else folds[train], **kwargs
    )
    np.testing.assert_array_equal(model.weights, expected.weights)
    np.testing.assert_array_equal(model.bias, expected.bias)
    assert (model.idf is None) == (expected.idf is None) and (model.idf is None or (model.idf == expected.idf).all())
    np.testing.assert_array_equal(margins[wanted], expected_margins[wanted])
    assert np.isnan(margins[~wanted]).all()  # a blend's trees read no training row's margin: none computed


def test_above_the_sample_cap_the_regressions_read_a_nested_hash_sample():
    """lexical.sample_rows: the regressions (idf included) are fitted on the training prompts
    whose sampling hash falls below the cap's share, the boosters' hash, so a smaller sample
    lies inside a larger one, and the held-out rows get that model's margins."""
    from training.config import TrainConfig
    from training.lexical import LexicalModel, Terms
    from training.lexical_stage import for_training, outcome_arrays, training_rows

    tokens, frame, train = _token_log(2000)
    samples = {}
    for cap in (150, 400):
        config = TrainConfig(lexical={"sample_rows": cap})
        samples[cap], _, folds = training_rows(config, frame["prompt"], train, rows=len(frame))
        assert folds is None and not (samples[cap] & ~train).any()
        assert abs(int(samples[cap].sum()) - cap) < 0.25 * cap
    assert not (samples[150] & ~samples[400]).any()  # nested

    config = TrainConfig(lexical={"sample_rows": 400})
    model, margins = for_training(
        config, *outcome_arrays(frame), tokens, np.ones(len(frame), bool), samples[400], ~train, None, vocabulary=300
    )
    outcomes, weights = outcome_arrays(frame)
    alone = LexicalModel.fit(
        Terms.of_rows(tokens.subset(samples[400]).per_row(), 300),
        outcomes[samples[400]],
        weights[samples[400]],
        c=config.lexical.c,
        weighting=config.lexical.weighting,
    )
    np.testing.assert_array_equal(model.weights, alone.weights)
    np.testing.assert_array_equal(model.idf, alone.idf)
    np.testing.assert_array_equal(margins[~train], alone.margins(Terms.of_rows(tokens.subset(~train).per_row(), 300)))


@pytest.mark.parametrize("graded", [False, True])
def test_the_lean_fit_is_the_references_fit(graded):
    """training.lexical.fit_known builds the stacked rows in one copy; the coefficients are
    evaluation.reference.fit_outcome's on the known rows, exactly (binary and graded outcomes,
    unknown rows, zero weights, an outcome without failures)."""
    from evaluation.reference import fit_outcome
    from training.lexical import Terms, fit_known

    tokens, frame, _ = _token_log()
    x = Terms.of(tokens.ids, tokens.lengths, 300).tfidf(np.ones(30522 + (1 << 18)))
    rng = np.random.default_rng(5)
    q = frame["edge_quality"].to_numpy(float)
    if graded:
        q = np.where(np.isnan(q), np.nan, np.round(rng.random(len(q)), 1))
    weight = np.where(rng.random(len(q)) < 0.1, 0.0, rng.uniform(0.5, 2.0, len(q)))
    known = (weight > 0) & ~np.isnan(q)
    for outcome in (q, np.where(known, 1.0, np.nan)):
        known = (weight > 0) & ~np.isnan(outcome)
        lean = fit_known(x, known, outcome, weight, c=1.0)
        reference = fit_outcome(x[known], outcome[known], weight[known], c=1.0)
        np.testing.assert_array_equal(lean[0], reference[0])
        assert lean[1] == reference[1]


def test_terms_built_chunk_by_chunk_are_the_terms_of_all_at_once():
    from training.lexical import Terms

    tokens, _, _ = _token_log()
    whole = Terms.of(tokens.ids, tokens.lengths, 300)
    for chunk_rows in (7, 64, 10_000):
        chunked = Terms.of_tokens(tokens, 300, chunk_rows=chunk_rows)
        np.testing.assert_array_equal(chunked.n_terms, whole.n_terms)
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(chunked.counts, name), getattr(whole.counts, name))


def test_margins_of_tokens_chunk_by_chunk_are_the_margins_of_all_at_once():
    from training.lexical import LexicalModel, Terms

    tokens, frame, train = _token_log()
    terms = Terms.of(tokens.ids, tokens.lengths, 300)
    outcomes = np.c_[frame["edge_quality"], frame["cloud_quality"]]
    for weighting in ("mean", "tfidf", "idf"):
        model = LexicalModel.fit(terms, outcomes, np.ones_like(outcomes), c=1.0, weighting=weighting)
        np.testing.assert_array_equal(model.margins_of_tokens(tokens, chunk_rows=7), model.margins(terms))


def test_an_outcome_without_failures_is_its_smoothed_log_odds():
    from training.lexical import LexicalModel, Terms

    terms = Terms.of_rows([[1, 2], [3], [4, 5, 6]])
    model = LexicalModel.fit(terms, np.c_[np.ones(3), [1.0, 0.0, np.nan]], np.c_[np.ones(3), [1.0, 1.0, 1.0]], c=1.0)
    assert not model.weights[:, 0].any() and model.bias[0] == pytest.approx(np.log(3.5 / 0.5))
    assert np.isnan(model.margins_of_rows([[1, 2], None])[1]).all()  # logged as an embedding: missing


@pytest.mark.parametrize(
    "options, message",
    [
        ({"lexical.mode": "bigrams"}, "config lexical.mode='bigrams': must be one of none, features, blend"),
        (
            {"lexical.mode": "blend", "model.objective": "cloud_needed"},
            "config lexical.mode='blend': needs model.objective=expected_gain, not 'cloud_needed'",
        ),
        (
            {"lexical.mode": "blend", "model.calibration": "isotonic"},
            "needs model.calibration=sigmoid or none, not 'isotonic'",
        ),
        ({"lexical.mode": "features", "features.tier": "transformer"}, "needs features.tier=static, not 'transformer'"),
        ({"lexical.mode": "features", "engine.name": "dask"}, "needs engine.name=local, not 'dask'"),
        ({"lexical.folds": 1}, "config lexical.folds=1: must be an integer in [2, 20]"),
        ({"lexical.c": 0}, "config lexical.c=0: must be a number > 0"),
        ({"lexical.weighting": "bm25"}, "config lexical.weighting='bm25': must be one of mean, tfidf, idf"),
        (
            {"lexical.mode": "features", "lexical.weighting": "tfidf"},
            "config lexical.mode='features': needs lexical.weighting=mean or idf, not 'tfidf'",
        ),
        ({"lexical.blend": "average"}, "config lexical.blend='average': must be one of mixture, stack"),
        ({"lexical.start": "yes"}, "config lexical.start='yes': must be true or false"),
        (
            {"lexical.mode": "features", "lexical.start": True},
            "config lexical.start=True: needs lexical.mode=blend, not 'features'",
        ),
        ({"lexical.blend": "mixture", "lexical.start": True}, "needs lexical.blend=stack, not 'mixture'"),
        ({"lexical.sample_rows": 0}, "config lexical.sample_rows=0: must be empty or an integer >= 1"),
        (
            {"engine.name": "dask", "split.cv_folds": 0, "lexical.mode": "features"},
            "config lexical.mode='features': needs engine.name=local, not 'dask'",
        ),
        (
            {"engine.name": "dask", "split.cv_folds": 0, "lexical.start": True},
            "config lexical.start=True: needs engine.name=local, not 'dask'",
        ),
    ],
)
def test_bad_lexical_options_are_rejected(options, message):
    from training.config import TrainConfig

    with pytest.raises(ValueError, match=re.escape(message)):
        TrainConfig.of(options)


def test_manifest_spec_lexical_is_checked_and_absent_when_none():
    from serving.bundle._manifest import ManifestError, check_feature_spec
    from serving.features._spec import FeatureSpec

    assert "lexical" not in FeatureSpec(tier="static", fused=True).to_dict()  # old manifests, as before
    assert check_feature_spec({"tier": "static", "fused": True}).lexical == "none"
    spec = check_feature_spec({"tier": "static", "fused": True, "lexical": "features"})
    assert spec.model_feature_names[-2:] == ["lexical_edge", "lexical_cloud"]
    assert spec.feature_names == FeatureSpec(tier="static", fused=True).feature_names
    with pytest.raises(ManifestError, match="feature_spec.lexical: must be one of none, features, blend"):
        check_feature_spec({"tier": "static", "fused": True, "lexical": "yes"})
    with pytest.raises(ManifestError, match="feature_spec.lexical: needs the fused layout"):
        check_feature_spec({"tier": "transformer", "lexical": "features"})


@pytest.fixture(scope="module")
def trained_lexical(small_routellm, encoder_cache, tmp_path_factory):
    """(config, the engine's Fitted, TrainResult) of a training with lexical=features on the
    real-data slice, its training rows cut to a hash sample."""
    from rich.console import Console

    from training.engines import get_engine
    from training.engines.base import finish

    config = config_for(
        tmp_path_factory.mktemp("lexical"),
        small_routellm,
        encoder_cache,
        lexical={"mode": "features", "folds": 3},
        split={"max_train_rows": 1500},
        acceptance={"rounds": QUICK_ACCEPTANCE_ROUNDS},
    )
    timings = {"start": 0.0}
    console = Console(quiet=True)
    fitted = get_engine("local").fit(config, console, timings)
    return config, fitted, finish(config, fitted, timings)


def test_lexical_bundle_scores_like_its_training_pipeline(trained_lexical):
    """The training's parity check passed on the test rows; the same holds on hard strings,
    the training pipeline's score computed from its own parts (features, lexical margins,
    boosters) against the SDK's from raw text."""
    from serving.scoring._scorer import Scorer
    from training.lexical import Terms
    from training.model import predict

    config, fitted, result = trained_lexical
    assert result.metrics["parity_max_abs_diff"] <= 1e-5
    manifest = json.loads((result.bundle / "manifest.json").read_text())
    assert manifest["feature_spec"]["lexical"] == "features" and manifest["feature_spec"]["fused"]

    recipe = fitted.plan.serving
    prompts, precisions = HARD + list(result.test.prompts[:50]), [None] * len(HARD) + list(result.test.precisions[:50])
    features, tokens = recipe.featurizer().transform_with_tokens(prompts, precisions)
    margins = fitted.plan.lexical.margins(Terms.of(tokens.ids, tokens.lengths, fitted.plan.lexical.vocabulary))
    expected, _ = predict(config.model.objective, fitted.heads, np.concatenate([features, margins], axis=1))
    sdk = Scorer.load(result.bundle).scores(prompts, precisions)
    assert np.max(np.abs(sdk - expected)) <= 1e-5


@pytest.fixture(scope="module")
def trained_plain(small_routellm, encoder_cache, tmp_path_factory):
    """TrainResult of a training without lexical evidence (lexical=none, the form of every
    bundle from before the option) on the same rows as trained_lexical."""
    from training.engines.base import train

    return train(
        config_for(
            tmp_path_factory.mktemp("plain"),
            small_routellm,
            encoder_cache,
            lexical={"mode": "none"},
            split={"max_train_rows": 1500},
            acceptance={"rounds": QUICK_ACCEPTANCE_ROUNDS},
        )
    )


def test_lexical_evidence_changes_the_scores_and_old_bundles_load(trained_lexical, trained_plain):
    """The lexical bundle is another router than one trained without it on the same rows (its
    trees read the margins), and a bundle without lexical evidence loads with no lexical spec
    and no margins in its graph."""
    import onnx

    from serving.scoring._scorer import Scorer

    _, _, lexical = trained_lexical
    prompts = list(trained_plain.test.prompts[:200])
    with_lexical, without = Scorer.load(lexical.bundle), Scorer.load(trained_plain.bundle)
    assert without.spec.lexical == "none" and with_lexical.spec.lexical == "features"
    assert "lexical" not in json.loads((trained_plain.bundle / "manifest.json").read_text())["feature_spec"]
    assert not any(
        i.name.endswith("lexical_weights")
        for i in onnx.load(str(trained_plain.bundle / "model.onnx")).graph.initializer
    )
    assert np.mean(np.abs(with_lexical.scores(prompts) - without.scores(prompts))) > 0.01
    graph = onnx.load(str(lexical.bundle / "model.onnx"))
    weights = next(i for i in graph.graph.initializer if i.name.endswith("lexical_weights"))
    assert list(weights.dims) == [30522 + (1 << 18), 2]
    trees = [n for n in graph.graph.node if n.op_type == "TreeEnsembleClassifier"]
    features_read = {int(f) for t in trees for a in t.attribute if a.name == "nodes_featureids" for f in a.ints}
    width = len(with_lexical.spec.feature_names)
    assert {width, width + 1} & features_read  # the trees split on the margins


@pytest.mark.parametrize(
    "options, expected",
    [
        ({}, "blend"),
        ({"engine.name": "dask", "split.cv_folds": 0}, "blend"),
        ({"features.tier": "transformer"}, "none"),
        ({"model.objective": "cloud_needed"}, "none"),
        ({"model.calibration": "isotonic"}, "none"),
        ({"lexical.mode": "features"}, "features"),
        ({"lexical.mode": "none"}, "none"),
    ],
)
def test_the_default_blends_lexical_evidence_where_it_can_run(options, expected):
    """lexical.mode left empty: blend on the static tier with either engine, expected gain and a
    calibration the graph holds (what paired cross-validation chose); none elsewhere, where a
    blend cannot run; an explicit choice is kept."""
    from training.config import TrainConfig

    assert TrainConfig.of(options).lexical.mode == expected


@pytest.fixture(scope="module")
def trained_blend(small_routellm, encoder_cache, tmp_path_factory):
    """(config, the engine's Fitted, TrainResult) of a training with lexical=blend in the
    mixture form over mean-weighted terms (the default before the stack) on the real-data
    slice, its training rows cut to a hash sample."""
    from rich.console import Console

    from training.engines import get_engine
    from training.engines.base import finish

    config = config_for(
        tmp_path_factory.mktemp("blend"),
        small_routellm,
        encoder_cache,
        lexical={"mode": "blend", "blend": "mixture", "weighting": "mean"},
        split={"max_train_rows": 1500},
        acceptance={"rounds": QUICK_ACCEPTANCE_ROUNDS},
    )
    timings = {"start": 0.0}
    fitted = get_engine("local").fit(config, Console(quiet=True), timings)
    return config, fitted, finish(config, fitted, timings)


def test_a_blend_bundle_computes_each_head_as_its_two_models_mixed(trained_blend):
    """lexical=blend: the SDK's probabilities, from raw text, are w * (the calibrated trees,
    which do not read the margins) + (1 - w) * sigmoid(the head's own outcome margin), w the
    manifest's tree weight, recomputed here from the parts (boosters, calibration, regressions)."""
    import onnx
    from scipy.special import expit

    from serving.scoring._calibration import apply_calibration
    from serving.scoring._scorer import Scorer
    from training.lexical import Terms

    config, fitted, result = trained_blend
    assert result.metrics["parity_max_abs_diff"] <= 1e-5
    manifest = json.loads((result.bundle / "manifest.json").read_text())
    assert manifest["feature_spec"]["lexical"] == "blend"
    blends = {head: manifest["calibration"][head]["lexical_blend"] for head in ("edge", "cloud")}
    assert {b["margin"] for b in blends.values()} == {"lexical_edge", "lexical_cloud"}
    assert all(0 <= b["tree_weight"] <= 1 for b in blends.values())
    assert result.metrics["lexical_tree_weight"] == {h: b["tree_weight"] for h, b in blends.items()}

    recipe = fitted.plan.serving
    prompts, precisions = HARD + list(result.test.prompts[:50]), [None] * len(HARD) + list(result.test.precisions[:50])
    features, tokens = recipe.featurizer().transform_with_tokens(prompts, precisions)
    margins = fitted.plan.lexical.margins(Terms.of(tokens.ids, tokens.lengths, fitted.plan.lexical.vocabulary))
    expected = {}
    for head in fitted.heads:
        trees = apply_calibration(head.calibration, head.booster.predict(features))
        w, outcome = (
            blends[head.name]["tree_weight"],
            ("lexical_edge", "lexical_cloud").index(blends[head.name]["margin"]),
        )
        expected[head.name] = w * trees + (1 - w) * expit(margins[:, outcome].astype(np.float64))
    sdk = Scorer.load(result.bundle).scores(prompts, precisions)
    assert np.max(np.abs(sdk - (expected["cloud"] - expected["edge"]))) <= 1e-5
    trees = [
        n for n in onnx.load(str(result.bundle / "model.onnx")).graph.node if n.op_type == "TreeEnsembleClassifier"
    ]
    read = {int(f) for t in trees for a in t.attribute if a.name == "nodes_featureids" for f in a.ints}
    assert max(read) < len(fitted.plan.spec.feature_names)  # the trees do not read the margins


def test_the_blend_weight_goes_to_the_model_that_knows_the_outcome():
    """fit_blend: outcomes drawn from the trees' probabilities give the trees all the weight;
    drawn from the lexical model's, the lexical model; both informative, a mixture in between."""
    from scipy.special import expit

    from training.model import BLEND_GRID, fit_blend

    rng = np.random.default_rng(0)
    trees, margin = rng.uniform(0.05, 0.95, 20_000), rng.normal(0, 2, 20_000)
    lexical = expit(margin)
    assert fit_blend(trees, margin, rng.binomial(1, trees), outcome=0).tree_weight == 1.0
    assert fit_blend(trees, margin, rng.binomial(1, lexical), outcome=1).tree_weight == 0.0
    mixed = fit_blend(trees, margin, rng.binomial(1, 0.5 * trees + 0.5 * lexical), outcome=0)
    assert 0.3 <= mixed.tree_weight <= 0.7 and mixed.tree_weight in BLEND_GRID and mixed.outcome == 0


@pytest.fixture(scope="module")
def trained_stack(small_routellm, encoder_cache, tmp_path_factory):
    """(config, the engine's Fitted, TrainResult) of a training with the default lexical
    evidence (a blend: the stack over tfidf-weighted terms) on the real-data slice."""
    from rich.console import Console

    from training.engines import get_engine
    from training.engines.base import finish

    config = config_for(
        tmp_path_factory.mktemp("stack"),
        small_routellm,
        encoder_cache,
        split={"max_train_rows": 1500},
        acceptance={"rounds": QUICK_ACCEPTANCE_ROUNDS},
    )
    assert (config.lexical.mode, config.lexical.blend, config.lexical.weighting, config.lexical.c) == (
        "blend",
        "stack",
        "tfidf",
        1.0,
    )
    timings = {"start": 0.0}
    fitted = get_engine("local").fit(config, Console(quiet=True), timings)
    return config, fitted, finish(config, fitted, timings)


def test_a_stack_bundle_computes_each_head_from_its_two_models(trained_stack):
    """The default blend: the SDK's probabilities, from raw text, are sigmoid(a * logit(the
    calibrated trees) + b * (the head's own outcome margin over tfidf-weighted terms) + c),
    a, b, c the manifest's, recomputed here from the parts (boosters, calibration, the
    regressions and their idf); the trees do not read the margins."""
    import onnx
    from scipy.special import expit

    from serving.scoring._calibration import apply_calibration
    from serving.scoring._scorer import Scorer
    from training.lexical import Terms
    from training.model import stack_logit

    config, fitted, result = trained_stack
    assert result.metrics["parity_max_abs_diff"] <= 1e-5
    manifest = json.loads((result.bundle / "manifest.json").read_text())
    assert manifest["feature_spec"]["lexical"] == "blend"
    stacks = {head: manifest["calibration"][head]["lexical_blend"] for head in ("edge", "cloud")}
    assert {s["form"] for s in stacks.values()} == {"stack"}
    assert {s["margin"] for s in stacks.values()} == {"lexical_edge", "lexical_cloud"}
    assert result.metrics["lexical_stack"] == {h: (s["a"], s["b"], s["c"]) for h, s in stacks.items()}
    assert "lexical_tree_weight" not in result.metrics
    lexical = fitted.plan.lexical
    assert lexical.idf is not None and lexical.idf.shape == (lexical.weights.shape[0],)

    prompts, precisions = HARD + list(result.test.prompts[:50]), [None] * len(HARD) + list(result.test.precisions[:50])
    features, tokens = fitted.plan.serving.featurizer().transform_with_tokens(prompts, precisions)
    margins = lexical.margins(Terms.of(tokens.ids, tokens.lengths, lexical.vocabulary)).astype(np.float64)
    expected = {}
    for head in fitted.heads:
        trees = apply_calibration(head.calibration, head.booster.predict(features))
        s = stacks[head.name]
        outcome = ("lexical_edge", "lexical_cloud").index(s["margin"])
        expected[head.name] = expit(s["a"] * stack_logit(trees) + s["b"] * margins[:, outcome] + s["c"])
    sdk = Scorer.load(result.bundle).scores(prompts, precisions)
    assert np.max(np.abs(sdk - (expected["cloud"] - expected["edge"]))) <= 1e-5
    trees = [
        n for n in onnx.load(str(result.bundle / "model.onnx")).graph.node if n.op_type == "TreeEnsembleClassifier"
    ]
    read = {int(f) for t in trees for a in t.attribute if a.name == "nodes_featureids" for f in a.ints}
    assert max(read) < len(fitted.plan.spec.feature_names)  # the trees do not read the margins


def test_the_stack_weighs_the_model_that_knows_the_outcome():
    """fit_stack: outcomes drawn from the trees' probabilities give the trees' logit weight ~1
    and the margin ~0; drawn from the lexical model's, the reverse; both, both."""
    from scipy.special import expit

    from training.model import fit_stack

    rng = np.random.default_rng(0)
    trees, margin = rng.uniform(0.05, 0.95, 20_000), rng.normal(0, 2, 20_000)
    a, b, c = fit_stack(trees, margin, rng.binomial(1, trees), outcome=0).stack
    assert abs(a - 1) < 0.1 and abs(b) < 0.05 and abs(c) < 0.1
    a, b, c = fit_stack(trees, margin, rng.binomial(1, expit(margin)), outcome=1).stack
    assert abs(a) < 0.1 and abs(b - 1) < 0.05 and abs(c) < 0.1
    both = fit_stack(trees, margin, rng.binomial(1, expit(np.log(trees / (1 - trees)) + margin)), outcome=0)
    assert both.outcome == 0 and both.tree_weight is None and all(abs(v - 1) < 0.1 for v in both.stack[:2])
    assert fit_stack(trees, margin, np.ones(len(trees)), outcome=1).stack == (1.0, 0.0, 0.0)  # one value: the trees


def test_rows_logged_as_token_ids_train_with_the_bundles_margins(trained_lexical, tmp_path):
    """A lexical bundle's outcome log kept only token ids (privacy="token_ids"): the next
    training's rows from it carry the margins the bundle computes from those ids."""
    from rich.console import Console

    from data.logs import read_unit
    from serving import Router
    from serving.monitoring._outcome_log import OutcomeLog
    from training.engines.local import _token_rows

    _, fitted, result = trained_lexical
    prompts = ["日本語 🤖", "a"] + list(result.test.prompts[:30])  # (a row of no ids is a reject: data.schema)
    log = OutcomeLog(tmp_path / "logs", privacy="token_ids")
    router = Router.load(result.bundle, log=log)
    for prompt in prompts:
        run = router.execute(prompt, edge=lambda p: "edge answer", cloud=lambda p: "cloud answer")
        router.feedback(run.request_id, **{f"{run.decision.target}_quality": 1.0})
    log.close()
    logged = read_unit(tmp_path / "logs").token_frame()
    report = {"token_rows": {"read": len(logged)}}
    matrix, used = _token_rows(fitted.plan, logged, report, Console(quiet=True))
    assert report["token_rows"]["used"] == len(prompts) == len(used)
    _, tokens = fitted.plan.serving.featurizer().prepare(prompts, [None] * len(prompts))
    np.testing.assert_allclose(matrix[:, -2:], fitted.plan.lexical.margins_of_tokens(tokens), rtol=0, atol=1e-6)
    assert matrix.shape[1] == len(fitted.plan.spec.model_feature_names)


def test_a_boosting_start_bundle_starts_each_heads_trees_from_its_out_of_fold_margin(
    small_routellm, encoder_cache, tmp_path, monkeypatch
):
    """lexical_start: each head's booster starts from its own outcome's margin (LightGBM's
    init_score): the training rows' margins out of fold (each from the regression fitted
    without its fold), the validation rows' the bundle's own regression's; the stack adds the
    margin back in the graph, so the bundle still scores as training does, from raw text."""
    from rich.console import Console

    import training.lexical_stage
    import training.model
    from training.engines import get_engine
    from training.engines.base import finish

    config = config_for(
        tmp_path,
        small_routellm,
        encoder_cache,
        split={"max_train_rows": 1500},
        acceptance={"rounds": QUICK_ACCEPTANCE_ROUNDS},
        lexical={"start": True},
    )
    boosters, recorded = [], []
    fit_booster, for_training = training.model.fit_booster, training.lexical_stage.for_training

    def recording_fit(*args, **kwargs):
        boosters.append((args, kwargs))
        return fit_booster(*args, **kwargs)

    def recording_margins(config, outcomes, weights, tokens, kept, sample, wanted, folds, **kwargs):
        model, margins = for_training(config, outcomes, weights, tokens, kept, sample, wanted, folds, **kwargs)
        assert wanted.all()  # the trees start from every training row's margins (their ids all kept)
        recorded.append((folds, folds >= 0, margins, model.margins_of_tokens(tokens)))
        return model, margins

    monkeypatch.setattr(training.model, "fit_booster", recording_fit)
    monkeypatch.setattr(training.lexical_stage, "for_training", recording_margins)
    timings = {"start": 0.0}
    fitted = get_engine("local").fit(config, Console(quiet=True), timings)
    result = finish(config, fitted, timings)
    assert result.metrics["parity_max_abs_diff"] <= 1e-5
    assert all(h.blend is not None for h in fitted.heads)  # the stack adds the margin back
    [(folds, train, out_of_fold, in_sample)] = recorded
    assert folds is not None and len(np.unique(folds[train])) == config.lexical.folds
    assert len(boosters) == 2  # one booster per head, edge then cloud
    for outcome, (args, kwargs) in enumerate(boosters):
        y_train, x_val = args[1], args[2]
        init, val_init = kwargs["init_score"], kwargs["val_init_score"]
        assert len(init) == len(y_train) and len(val_init) == len(x_val) and np.isfinite(init).all()
        # Every training row starts from an out-of-fold margin of this head's outcome, and those
        # differ from the in-sample margins of the regression the bundle ships.
        assert np.isin(init, out_of_fold[train, outcome].astype(np.float64)).all()
        assert np.mean(out_of_fold[train, outcome] != in_sample[train, outcome]) > 0.9
        assert np.isin(val_init, in_sample[~train, outcome].astype(np.float64)).all()
