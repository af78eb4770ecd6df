"""Lexical evidence (`TrainConfig.lexical`): a logistic regression per outcome over the
prompt's WordPiece unigrams and hashed bigrams, whose margins the trees read as two more
features, computed inside the bundle's one ONNX graph.

Terms. The token ids the SDK already computes (the static tier's, after the `max_chars`
cut and the `max_tokens` limit, padding left out): each id is a unigram term, and each pair
of neighbouring ids (a, b) the bigram term `vocabulary + (a * 1_000_003 + b) mod 2^18`. A
prompt's row holds its terms' counts divided by its number of terms (n ids give 2n - 1
terms; an empty prompt has none).

Model. One logistic regression per outcome (edge, cloud), an outcome q in [0, 1] counted
as q of a success and 1 - q of a failure (judge scores), fitted on the training rows where
that outcome is known. Its margin is b + (sum of w[term] over the prompt's terms) / (number
of terms), or b for an empty prompt ("mean" weighting). With "tfidf" weighting (a blend's
default) the row is the reference's (evaluation.reference) on these terms: each distinct
term's (1 + ln count) * idf (idf from the training prompts), scaled to unit L2 norm; the
margin is b + the weights' sum over that row (b for an empty prompt). The graph finds each
term's count with one Unique over the batch's (row, term) keys; its log and norm make the
margins equal training's within 1e-5, not bit for bit, so the trees never split on them.
With "idf" weighting each term counts idf times, the row scaled to sum 1: the margin is b +
(sum of idf * w over the prompt's terms) / (sum of idf over them), the mean form with every
term weighed by its idf. It needs no count per distinct term, so the graph has no Unique,
and its sums are exact as the mean form's are (below): the graph holds each term's idf * w
and idf, both on the grid.

No leak into the trees ("features" mode). The training rows' margins are out of fold: the training prompts
are cut into K folds by prompt hash, and each fold's margins come from the regression
fitted on the other folds. Every other row (validation, test, rows logged without text)
gets the margins of the regression fitted on all training rows, the one the bundle ships.
In "blend" mode the trees do not read the margins and only that one regression is fitted:
the blend's weight is chosen on validation rows, whose margins it never saw.

The same numbers in the graph ("mean" and "idf"). The weights (with "idf", each term's idf *
w, and its idf) are rounded to a grid of 2^-23 of the largest value's power of two (float32
values, 24 significant bits), so every sum of a prompt's values is exact in float64 whatever
the order of its terms: numpy's sparse product here and the graph's MatMul give the same sum,
then the same correctly rounded division, addition and float32 cast. So the training matrix
and the bundle hold the same float32 margins, bit for bit, and the trees split them alike
(held by tests/test_lexical.py).

At scale (docs/scale-out.md). The regressions, idf included, are fitted on at most about
`lexical_sample_rows` (50,000) training prompts: above it, those whose sampling hash (the
boosters' max_train_rows sample's, training.sampling.sample_numbers) falls below the
needed share, the same prompts in both engines, nested in the boosters' sample. Only the
sample's terms exist at once (a sparse matrix of ~160 distinct terms a simulated prompt);
every other row's margins are computed CHUNK_ROWS prompts at a time from the token ids
featurizing kept, and only for the rows something reads: the held-out rows always, the
training rows when the trees read or start from their out-of-fold margins. Below the cap
this is the all-rows fit, bit for bit (tests/test_lexical.py); the Dask engine's workers
send the sample's token ids to the client, which fits the same way (fit_sample), and compute
the held-out rows' margins where those rows are (dask_partitions.margin_partition).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from evaluation.reference import fit_outcome  # noqa: F401  (the fit fit_known reproduces; docs name it here)
from serving.features._spec import LEXICAL_MODES, LEXICAL_NAMES

VOCABULARY = 30522  # MiniLM's WordPiece vocabulary: the unigram terms
BIGRAM_BUCKETS = 1 << 18  # hashed bigram terms
WEIGHTINGS = ("mean", "tfidf", "idf")  # how a prompt's term counts become the regression's row (module doc)
BIGRAM_MULTIPLIER = 1_000_003
OUTCOMES = ("edge_quality", "cloud_quality")  # one regression each, in LEXICAL_NAMES' order
FOLD_SALT = "lexical:"  # the folds' hash must not be the split's
WEIGHT_BITS = 23  # a weight is an integer of at most 23 bits times its column's step
MARGINS_OUTPUT = "lexical_margins"  # the graph's tensor of the margins alone (what a blend reads)
EXACT_WEIGHTINGS = ("mean", "idf")  # whose margins the graph computes bit for bit (module doc)
CHUNK_ROWS = 16_384  # prompts whose terms are built at a time for their margins (~50 MB at 300 terms each)

__all__ = [
    "LEXICAL_MODES",
    "LEXICAL_NAMES",
    "MARGINS_OUTPUT",
    "LexicalModel",
    "Terms",
    "cross_fitted",
    "fold_numbers",
    "lexical_matrix",
]


@dataclass
class Terms:
    """Each prompt's term counts (a sparse [prompts, vocabulary + BIGRAM_BUCKETS] matrix of
    integers) and number of terms."""

    counts: object  # scipy.sparse.csr_matrix, float64 counts
    n_terms: np.ndarray  # int64 per prompt
    vocabulary: int = VOCABULARY

    @classmethod
    def of(cls, ids: np.ndarray, lengths: np.ndarray, vocabulary: int = VOCABULARY) -> "Terms":
        """From prompts' ids laid end to end (`ids`) and each prompt's length, as in
        training.featurize.TokenRows. Each prompt's row is written in place (its unigrams, then
        its bigrams) and its repeats summed within the row (scipy's sum_duplicates): the
        canonical matrix a COO matrix's tocsr() gives, at a third of its time and memory (no
        int64 row and column arrays for every term)."""
        from scipy.sparse import csr_matrix

        ids, lengths = np.asarray(ids, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= vocabulary):
            raise ValueError(
                f"token ids must lie in [0, {vocabulary}) (the tokenizer's vocabulary), got {ids.min()}..{ids.max()}"
            )
        n_terms = lengths + np.maximum(lengths - 1, 0)  # n ids: n unigrams and n - 1 bigrams
        indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(n_terms, out=indptr[1:])
        first_id = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=first_id[1:])
        row_of = np.repeat(np.arange(len(lengths)), lengths)
        # where each id lands: its row's start plus its place in the prompt
        at = np.arange(len(ids), dtype=np.int64) + (indptr[:-1] - first_id[:-1])[row_of]
        pair = np.ones(len(ids), dtype=bool)  # position i starts a bigram when i + 1 is in its prompt
        pair[first_id[1:][lengths > 0] - 1] = False
        starts = np.flatnonzero(pair)
        indices = np.empty(int(indptr[-1]), dtype=np.int32)
        indices[at] = ids
        indices[at[starts] + lengths[row_of[starts]]] = (
            vocabulary + (ids[starts] * BIGRAM_MULTIPLIER + ids[starts + 1]) % BIGRAM_BUCKETS
        )
        counts = csr_matrix(
            (np.ones(len(indices)), indices, indptr.astype(np.int32) if indptr[-1] < 2**31 else indptr),
            shape=(len(lengths), vocabulary + BIGRAM_BUCKETS),
        )
        counts.sum_duplicates()  # repeats are summed, indices sorted
        return cls(counts, n_terms, vocabulary)

    @classmethod
    def of_tokens(cls, tokens: Any, vocabulary: int = VOCABULARY, chunk_rows: int = CHUNK_ROWS) -> "Terms":
        """`of` the prompts of `tokens` (training.featurize.TokenRows), `chunk_rows` prompts at a
        time, their rows stacked: the same matrix, holding one chunk's temporaries (~40 bytes a
        term occurrence: 0.6 GB for 50,000 simulated prompts at once) instead of every prompt's."""
        from scipy.sparse import vstack

        offsets = np.concatenate([[0], np.cumsum(tokens.lengths, dtype=np.int64)])
        parts = [
            cls.of(tokens.ids[offsets[a] : offsets[b]], tokens.lengths[a:b], vocabulary)
            for a, b in ((a, min(a + chunk_rows, len(tokens))) for a in range(0, len(tokens), chunk_rows))
        ]
        if len(parts) <= 1:
            return parts[0] if parts else cls.of(np.zeros(0, np.int64), np.zeros(0, np.int64), vocabulary)
        counts = vstack([part.counts for part in parts], format="csr")
        return cls(counts, np.concatenate([part.n_terms for part in parts]), vocabulary)

    @classmethod
    def of_rows(cls, rows: Sequence[Sequence[int]], vocabulary: int = VOCABULARY) -> "Terms":
        """From one sequence of ids per prompt."""
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        flat = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows]) if len(rows) else np.zeros(0, np.int64)
        return cls.of(flat, lengths, vocabulary)

    def __len__(self) -> int:
        return len(self.n_terms)

    def normalized(self):
        """The regression's rows: counts divided by the number of terms (an empty prompt: zeros)."""
        from scipy.sparse import diags

        return diags(1.0 / np.maximum(self.n_terms, 1)) @ self.counts

    def subset(self, rows: np.ndarray) -> "Terms":
        return Terms(self.counts[rows], self.n_terms[rows], self.vocabulary)

    def idf(self) -> np.ndarray:
        """Each term's smoothed inverse document frequency over these prompts, ln((1 + n) /
        (1 + df)) + 1 (scikit-learn's TfidfTransformer)."""
        df = np.bincount(self.counts.indices, minlength=self.counts.shape[1])
        return np.log((1.0 + len(self)) / (1.0 + df)) + 1.0

    def tfidf(self, idf: np.ndarray):
        """The regression's rows with `tfidf` weighting: each distinct term's (1 + ln count) * idf,
        the row scaled to unit L2 norm (an empty prompt: zeros); the reference's features
        (evaluation.reference) on WordPiece terms."""
        from scipy.sparse import csr_matrix, diags

        counts = self.counts.tocsr()
        values = (1.0 + np.log(counts.data)) * idf[counts.indices]
        x = csr_matrix((values, counts.indices, counts.indptr), shape=counts.shape)
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
        return diags(1.0 / np.where(norms > 0, norms, 1.0)) @ x

    def idf_weighted(self, idf: np.ndarray):
        """The regression's rows with `idf` weighting: each term's count * idf, the row scaled to
        sum 1 (an empty prompt: zeros; idf >= 1, so a prompt with terms sums to at least 1)."""
        from scipy.sparse import diags

        x = self.counts @ diags(idf)
        return diags(1.0 / np.maximum(self.counts @ idf, 1.0)) @ x


def fit_known(x, known: np.ndarray, q: np.ndarray, weight: np.ndarray, *, c: float) -> tuple[np.ndarray, float]:
    """evaluation.reference.fit_outcome(x[known], q[known], weight[known], c=c), the same
    regression on the same matrix, built in one copy of the rows it reads: fit_outcome stacks
    two copies of its rows (q of a success, 1 - q of a failure) and then keeps the ones with a
    weight, and its caller's x[known] is a third; with both outcomes fitted at once that was
    ~0.8 GB above the sample's terms at 50,000 prompts. The same rows in the same order, so the
    same coefficients (tests/test_lexical.py)."""
    from sklearn.linear_model import LogisticRegression

    rows = np.flatnonzero(known)
    q, weight = np.asarray(q, dtype=np.float64)[rows], np.asarray(weight, dtype=np.float64)[rows]
    success, failure = float(np.sum(weight * q)), float(np.sum(weight * (1 - q)))
    if success <= 0 or failure <= 0:  # no successes or no failures: the smoothed log-odds, no terms
        return np.zeros(x.shape[1]), float(np.log((success + 0.5) / (failure + 0.5)))
    weights = np.r_[weight * q, weight * (1 - q)]
    keep = weights > 0
    stacked = x[np.r_[rows, rows][keep]]
    labels = np.r_[np.ones(len(rows)), np.zeros(len(rows))][keep]
    model = LogisticRegression(C=c, solver="newton-cg", max_iter=2000).fit(stacked, labels, sample_weight=weights[keep])
    return model.coef_[0].astype(np.float64), float(model.intercept_[0])


def lexical_matrix(token_ids: Sequence[Sequence[int]], vocabulary: int = VOCABULARY):
    """Sparse rows of unigram and hashed-bigram counts, each row divided by its number of terms."""
    return Terms.of_rows(token_ids, vocabulary).normalized()


def on_grid(coefficients: np.ndarray) -> np.ndarray:
    """The coefficients rounded to multiples of 2^(e - WEIGHT_BITS), 2^e the smallest power
    of two at or above the largest |coefficient|: float32 values whose sums are exact in
    float64 (module doc)."""
    largest = float(np.max(np.abs(coefficients))) if coefficients.size else 0.0
    step = 2.0 ** (np.ceil(np.log2(largest)) - WEIGHT_BITS) if largest > 0 else 1.0
    return (np.round(coefficients / step) * step).astype(np.float32)


@dataclass
class LexicalModel:
    """The regressions of every outcome, as the bundle's graph holds them."""

    # float32 [vocabulary + BIGRAM_BUCKETS, outcomes], on the grid (on_grid): each term's
    # coefficient, or with `idf` weighting its idf * coefficient
    weights: np.ndarray
    bias: np.ndarray  # float64 [outcomes]
    vocabulary: int = VOCABULARY
    idf: np.ndarray | None = None  # float64 [terms] with `tfidf` or `idf` weighting (float32 values); None: mean
    weighting: str = "mean"  # WEIGHTINGS

    def __post_init__(self) -> None:
        if self.weighting not in WEIGHTINGS or (self.idf is None) != (self.weighting == "mean"):
            raise ValueError(
                f"lexical weighting {self.weighting!r} with{'out' if self.idf is None else ''} an idf table: "
                f"mean has none, {', '.join(WEIGHTINGS[1:])} need one"
            )

    @classmethod
    def fit(
        cls, terms: Terms, outcomes: np.ndarray, weights: np.ndarray, *, c: float, weighting: str = "mean"
    ) -> "LexicalModel":
        """One regression per column of `outcomes` [rows, outcomes] (NaN: unknown), each on the
        rows whose weight for it is > 0 (training.partial's outcome weights). `weighting`
        (WEIGHTINGS): "mean", counts divided by the number of terms; "tfidf", Terms.tfidf with
        the idf of these prompts; "idf", Terms.idf_weighted with it (on the grid)."""
        if weighting not in WEIGHTINGS:
            raise ValueError(f"lexical weighting {weighting!r}: choose one of {', '.join(WEIGHTINGS)}")
        idf = None  # the graph's float32 table, in float64
        if weighting == "mean":
            x = terms.normalized()
        elif weighting == "tfidf":
            idf = terms.idf().astype(np.float32).astype(np.float64)
            x = terms.tfidf(idf)
        else:
            idf = on_grid(terms.idf()).astype(np.float64)
            x = terms.idf_weighted(idf)

        def one(q: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, float]:
            known = (w > 0) & ~np.isnan(q)
            return fit_known(x, known, q, w, c=c)

        jobs = list(zip(np.asarray(outcomes, dtype=np.float64).T, np.asarray(weights, dtype=np.float64).T))
        # Side by side: the solver's sparse products and numpy's loops release the GIL, so the
        # outcomes' fits take about half the time on two cores (5.3 s against 10.1 s on 50,000
        # simulated prompts), with the same coefficients.
        with ThreadPoolExecutor(max(len(jobs), 1)) as pool:
            fits = list(pool.map(lambda job: one(*job), jobs))
        columns = [on_grid(coefficients * idf if weighting == "idf" else coefficients) for coefficients, _ in fits]
        biases = [intercept for _, intercept in fits]
        return cls(np.stack(columns, axis=1), np.array(biases, dtype=np.float64), terms.vocabulary, idf, weighting)

    def margins(self, terms: Terms) -> np.ndarray:
        """float32 [prompts, outcomes]: b + (sum of the terms' weights) / (number of terms),
        the float64 steps of the graph in the same order (module doc); with `tfidf` weighting,
        b + the weights' sum over the prompt's tfidf row; with `idf`, b + (sum of the terms' idf *
        coefficient) / (sum of their idf, at least 1)."""
        if self.weighting == "tfidf":
            total = terms.tfidf(self.idf) @ self.weights.astype(np.float64)
            return (np.asarray(total) + self.bias).astype(np.float32)
        total = terms.counts @ self.weights.astype(np.float64)
        mass = terms.n_terms if self.weighting == "mean" else terms.counts @ self.idf
        return (np.asarray(total) / np.maximum(mass, 1)[:, None] + self.bias).astype(np.float32)

    def margins_of_tokens(self, tokens: Any, chunk_rows: int = CHUNK_ROWS) -> np.ndarray:
        """`margins` of prompts given as training.featurize.TokenRows, `chunk_rows` prompts'
        terms at a time (a prompt's margin reads its own row only: the same values as all at once)."""
        out = np.empty((len(tokens), len(self.bias)), dtype=np.float32)
        offsets = np.concatenate([[0], np.cumsum(tokens.lengths, dtype=np.int64)])
        for a in range(0, len(tokens), chunk_rows):
            b = min(a + chunk_rows, len(tokens))
            part = Terms.of(tokens.ids[offsets[a] : offsets[b]], tokens.lengths[a:b], self.vocabulary)
            out[a:b] = self.margins(part)
        return out

    def margins_of_rows(self, rows: Sequence[Sequence[int] | None]) -> np.ndarray:
        """`margins` of prompts given as token ids; a row without ids (None: logged as an
        embedding only) gets NaN, which LightGBM treats as missing."""
        out = np.full((len(rows), len(self.bias)), np.nan, dtype=np.float32)
        at = [i for i, r in enumerate(rows) if r is not None]
        if at:
            out[at] = self.margins(Terms.of_rows([rows[i] for i in at], self.vocabulary))
        return out

    def append_to_graph(self, prefix: bytes, *, features: str = "features", output: str = "model_features") -> bytes:
        """The fused prefix graph (inputs input_ids, attention_mask, scalars; output
        `features`) with two more outputs: `output` = [features, one margin per outcome] and
        MARGINS_OUTPUT, the margins alone [batch, outcomes]:
        the terms from the masked ids (bigrams in int64), one Gather of their weights, a
        masked float64 sum, divided by the number of terms (with `idf` weighting, by the sum of
        their idf; at least 1), plus the bias; `tfidf` weighting: _tfidf_nodes."""
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        model = onnx.load_from_string(prefix)
        graph = model.graph
        width = next(o for o in graph.output if o.name == features).type.tensor_type.shape.dim[1].dim_value

        def constant(name: str, value, dtype) -> str:
            graph.initializer.append(numpy_helper.from_array(np.array(value, dtype=dtype), f"lexical_{name}"))
            return f"lexical_{name}"

        start, stop, last = (
            constant("start", [0], np.int64),
            constant("stop", [-1], np.int64),
            constant("end", [np.iinfo(np.int64).max], np.int64),
        )
        second, sequence = constant("second", [1], np.int64), constant("axis", [1], np.int64)
        nodes = [
            helper.make_node("Slice", ["input_ids", start, stop, sequence], ["lexical_left"]),
            helper.make_node("Slice", ["input_ids", second, last, sequence], ["lexical_right"]),
            helper.make_node(
                "Mul", ["lexical_left", constant("multiplier", BIGRAM_MULTIPLIER, np.int64)], ["lexical_scaled"]
            ),
            helper.make_node("Add", ["lexical_scaled", "lexical_right"], ["lexical_pair"]),
            helper.make_node(
                "Mod", ["lexical_pair", constant("buckets", BIGRAM_BUCKETS, np.int64)], ["lexical_bucket"]
            ),
            helper.make_node(
                "Add", ["lexical_bucket", constant("vocabulary", self.vocabulary, np.int64)], ["lexical_bigram"]
            ),
            helper.make_node("Concat", ["input_ids", "lexical_bigram"], ["lexical_terms"], axis=1),
            # A bigram counts when both its ids are real tokens (not padding).
            helper.make_node("Slice", ["attention_mask", start, stop, sequence], ["lexical_mask_left"]),
            helper.make_node("Slice", ["attention_mask", second, last, sequence], ["lexical_mask_right"]),
            helper.make_node("Mul", ["lexical_mask_left", "lexical_mask_right"], ["lexical_pair_mask"]),
            helper.make_node("Concat", ["attention_mask", "lexical_pair_mask"], ["lexical_term_mask"], axis=1),
            helper.make_node("Cast", ["lexical_term_mask"], ["lexical_mask"], to=TensorProto.DOUBLE),
            helper.make_node("Unsqueeze", ["lexical_mask", sequence], ["lexical_mask_row"]),  # [batch, 1, terms]
            helper.make_node("Gather", ["lexical_weights", "lexical_terms"], ["lexical_rows32"], axis=0),
            helper.make_node("Cast", ["lexical_rows32"], ["lexical_rows"], to=TensorProto.DOUBLE),
        ]
        if self.weighting in EXACT_WEIGHTINGS:
            mass = "lexical_mask_row"  # what each term adds to the divisor: 1, or its idf
            if self.weighting == "idf":
                mass = "lexical_idf_row"
                nodes += [
                    helper.make_node("Gather", ["lexical_idf", "lexical_terms"], ["lexical_idf32"], axis=0),
                    helper.make_node("Cast", ["lexical_idf32"], ["lexical_term_idf"], to=TensorProto.DOUBLE),
                    helper.make_node("Mul", ["lexical_term_idf", "lexical_mask"], ["lexical_term_mass"]),
                    helper.make_node("Unsqueeze", ["lexical_term_mass", sequence], [mass]),
                ]
            nodes += [
                helper.make_node(
                    "MatMul", ["lexical_mask_row", "lexical_rows"], ["lexical_total"]
                ),  # [batch, 1, outcomes]
                helper.make_node(
                    "ReduceSum",
                    [mass, constant("terms_axis", [2], np.int64)],
                    ["lexical_count"],
                    keepdims=1,
                ),
                # No terms (an empty prompt): divide by 1, so the margin is the bias, not NaN
                # (with idf, a prompt with terms has a divisor of at least 1 already).
                helper.make_node("Max", ["lexical_count", constant("one", [1.0], np.float64)], ["lexical_safe_count"]),
                helper.make_node("Div", ["lexical_total", "lexical_safe_count"], ["lexical_mean"]),
            ]
        else:
            nodes += self._tfidf_nodes(constant, sequence)
        nodes += [
            helper.make_node("Add", ["lexical_mean", "lexical_bias"], ["lexical_margin64"]),
            helper.make_node("Cast", ["lexical_margin64"], ["lexical_margin32"], to=TensorProto.FLOAT),
            helper.make_node("Squeeze", ["lexical_margin32", sequence], ["lexical_margins"]),
            helper.make_node("Concat", [features, "lexical_margins"], [output], axis=1),
        ]
        graph.node.extend(nodes)
        graph.initializer.extend(
            [
                numpy_helper.from_array(np.ascontiguousarray(self.weights, np.float32), "lexical_weights"),
                numpy_helper.from_array(self.bias.astype(np.float64), "lexical_bias"),
            ]
        )
        if self.idf is not None:
            graph.initializer.append(numpy_helper.from_array(self.idf.astype(np.float32), "lexical_idf"))
        graph.output.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", width + len(self.bias)]))
        graph.output.append(helper.make_tensor_value_info(MARGINS_OUTPUT, TensorProto.FLOAT, ["batch", len(self.bias)]))
        onnx.checker.check_model(model)
        return model.SerializeToString()

    def _tfidf_nodes(self, constant, sequence: str) -> list:
        """The `tfidf` weighting's nodes, from the terms, their mask and their gathered weights
        to `lexical_mean` [batch, 1, outcomes], the weights' sum over the prompt's tfidf row:
        each term's count in its prompt from one Unique over (row, term) keys (padding shares
        the key -1), the term's first position only, its (1 + ln count) * idf, and the sums
        divided by the row's L2 norm (at least 1e-300: an empty prompt gets the bias)."""
        from onnx import TensorProto, helper

        flat = constant("flat", [-1], np.int64)
        return [
            helper.make_node("Shape", ["lexical_terms"], ["lexical_terms_shape"]),
            helper.make_node(
                "Gather", ["lexical_terms_shape", constant("zero", 0, np.int64)], ["lexical_batch"], axis=0
            ),
            helper.make_node(
                "Range",
                [constant("range_start", 0, np.int64), "lexical_batch", constant("range_step", 1, np.int64)],
                ["lexical_row"],
            ),
            helper.make_node("Unsqueeze", ["lexical_row", sequence], ["lexical_row_column"]),
            helper.make_node(
                "Mul",
                ["lexical_row_column", constant("row_stride", self.vocabulary + BIGRAM_BUCKETS, np.int64)],
                ["lexical_row_offset"],
            ),
            helper.make_node("Add", ["lexical_terms", "lexical_row_offset"], ["lexical_row_terms"]),
            helper.make_node("Cast", ["lexical_term_mask"], ["lexical_real"], to=TensorProto.BOOL),
            helper.make_node(
                "Where", ["lexical_real", "lexical_row_terms", constant("padding_key", -1, np.int64)], ["lexical_keys"]
            ),
            helper.make_node("Reshape", ["lexical_keys", flat], ["lexical_flat_keys"]),
            helper.make_node(
                "Unique",
                ["lexical_flat_keys"],
                ["lexical_unique", "lexical_first", "lexical_inverse", "lexical_unique_counts"],
                sorted=1,
            ),
            helper.make_node("Gather", ["lexical_unique_counts", "lexical_inverse"], ["lexical_flat_counts"], axis=0),
            helper.make_node("Cast", ["lexical_flat_counts"], ["lexical_flat_counts64"], to=TensorProto.DOUBLE),
            # 1 at each distinct term's first position, 0 elsewhere
            helper.make_node("Shape", ["lexical_flat_keys"], ["lexical_flat_shape"]),
            helper.make_node("ConstantOfShape", ["lexical_flat_shape"], ["lexical_zeros"]),
            helper.make_node("Shape", ["lexical_first"], ["lexical_first_shape"]),
            helper.make_node(
                "ConstantOfShape",
                ["lexical_first_shape"],
                ["lexical_ones"],
                value=helper.make_tensor("one", TensorProto.DOUBLE, [1], [1.0]),
            ),
            helper.make_node("Cast", ["lexical_zeros"], ["lexical_zeros64"], to=TensorProto.DOUBLE),
            helper.make_node(
                "ScatterElements", ["lexical_zeros64", "lexical_first", "lexical_ones"], ["lexical_first_flat"], axis=0
            ),
            helper.make_node("Log", ["lexical_flat_counts64"], ["lexical_log_counts"]),
            helper.make_node("Add", ["lexical_log_counts", constant("tf_one", 1.0, np.float64)], ["lexical_tf_flat"]),
            helper.make_node("Mul", ["lexical_tf_flat", "lexical_first_flat"], ["lexical_tf_first_flat"]),
            helper.make_node("Reshape", ["lexical_tf_first_flat", "lexical_terms_shape"], ["lexical_tf_first"]),
            helper.make_node("Gather", ["lexical_idf", "lexical_terms"], ["lexical_idf32"], axis=0),
            helper.make_node("Cast", ["lexical_idf32"], ["lexical_term_idf"], to=TensorProto.DOUBLE),
            helper.make_node("Mul", ["lexical_tf_first", "lexical_term_idf"], ["lexical_value_unmasked"]),
            helper.make_node("Mul", ["lexical_value_unmasked", "lexical_mask"], ["lexical_value"]),  # [batch, terms]
            helper.make_node("Unsqueeze", ["lexical_value", sequence], ["lexical_value_row"]),  # [batch, 1, terms]
            helper.make_node(
                "MatMul", ["lexical_value_row", "lexical_rows"], ["lexical_total"]
            ),  # [batch, 1, outcomes]
            helper.make_node("Mul", ["lexical_value_row", "lexical_value_row"], ["lexical_squares"]),
            helper.make_node(
                "ReduceSum",
                ["lexical_squares", constant("terms_axis", [2], np.int64)],
                ["lexical_square_sum"],
                keepdims=1,
            ),
            helper.make_node("Sqrt", ["lexical_square_sum"], ["lexical_norm"]),
            helper.make_node("Max", ["lexical_norm", constant("tiny", [1e-300], np.float64)], ["lexical_safe_norm"]),
            helper.make_node("Div", ["lexical_total", "lexical_safe_norm"], ["lexical_mean"]),
        ]


def fold_numbers(prompts, folds: int, salt: str = "") -> np.ndarray:
    """Each prompt's fold in 0..folds-1, from its hash (salted apart from the split's)."""
    from data.prepare import hash_uniform

    return np.minimum((hash_uniform(prompts, FOLD_SALT + salt) * folds).astype(np.int64), folds - 1)


def cross_fitted(
    terms: Terms,
    outcomes: np.ndarray,
    weights: np.ndarray,
    train: np.ndarray,
    folds: np.ndarray | None,
    *,
    c: float,
    weighting: str = "mean",
) -> tuple[LexicalModel, np.ndarray]:
    """(the model fitted on every training row, float32 margins [rows, outcomes]): out of
    fold on the training rows (`folds`: each training row's fold), that model's elsewhere
    (module doc). `folds` None: that model's on every row (blend mode: no tree reads them)."""
    train = np.asarray(train, dtype=bool)
    rows = np.flatnonzero(train)
    model = LexicalModel.fit(terms.subset(rows), outcomes[rows], weights[rows], c=c, weighting=weighting)
    margins = np.empty((len(terms), len(model.bias)), dtype=np.float32)
    if folds is None:
        return model, model.margins(terms)
    margins[~train] = model.margins(terms.subset(~train))
    for fold in np.unique(folds):
        held, fit_rows = rows[folds == fold], rows[folds != fold]
        part = LexicalModel.fit(terms.subset(fit_rows), outcomes[fit_rows], weights[fit_rows], c=c, weighting=weighting)
        margins[held] = part.margins(terms.subset(held))
    return model, margins
