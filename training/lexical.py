"""Lexical evidence (`TrainConfig.lexical`; docs/routing-score.md#lexical-evidence-in-the-bundle-lexicalblend-the-default-or-lexicalfeatures):
a logistic regression per outcome over the prompt's WordPiece unigrams and hashed bigrams, whose
margins the bundle's one ONNX graph computes from the token ids the SDK already has.

Terms: each id (after the `max_chars` cut and the `max_tokens` limit) and each neighbouring pair
(a, b) as `vocabulary + (a * 1_000_003 + b) mod 2^18`. A prompt's row (WEIGHTINGS): "mean", its
terms' counts over their number; "tfidf", the reference's (evaluation.reference) (1 + ln count) *
idf scaled to unit L2 norm, whose Log and Sqrt make the graph's margins training's within 1e-5;
"idf", counts * idf scaled to sum 1. With "mean" and "idf" the weights lie on a grid of 2^-23 of the
largest one's power of two, so every sum is exact in float64 and the graph's margins are
training's bit for bit (EXACT_WEIGHTINGS): the trees may split on them ("features", whose training
rows get out-of-fold margins, so nothing leaks), while a blend reads only the regression fitted on
every training row. At scale the regressions read a prompt-hash sample of at most about
`lexical.sample_rows` training prompts and margins are computed CHUNK_ROWS prompts at a time
(training.lexical_stage, docs/scale-out.md).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from evaluation.reference import fit_outcome  # noqa: F401  (the fit fit_known reproduces; docs name it here)
from training.export import MARGINS_OUTPUT, Ops

VOCABULARY = 30522  # MiniLM's WordPiece vocabulary: the unigram terms
BIGRAM_BUCKETS = 1 << 18  # hashed bigram terms
WEIGHTINGS = ("mean", "tfidf", "idf")  # how a prompt's term counts become the regression's row (module doc)
BIGRAM_MULTIPLIER = 1_000_003
OUTCOMES = ("edge_quality", "cloud_quality")  # one regression each, in LEXICAL_NAMES' order
FOLD_SALT = "lexical:"  # the folds' hash must not be the split's
WEIGHT_BITS = 23  # a weight is an integer of at most 23 bits times its column's step
EXACT_WEIGHTINGS = ("mean", "idf")  # whose margins the graph computes bit for bit (module doc)
CHUNK_ROWS = 16_384  # prompts whose terms are built at a time for their margins (~50 MB at 300 terms each)


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

        parts = [terms for _, terms in cls.chunks(tokens, vocabulary, chunk_rows)]
        if len(parts) <= 1:
            return parts[0] if parts else cls.of(np.zeros(0, np.int64), np.zeros(0, np.int64), vocabulary)
        counts = vstack([part.counts for part in parts], format="csr")
        return cls(counts, np.concatenate([part.n_terms for part in parts]), vocabulary)

    @classmethod
    def chunks(cls, tokens: Any, vocabulary: int = VOCABULARY, chunk_rows: int = CHUNK_ROWS):
        """(the chunk's rows, its Terms) of `tokens` (TokenRows), `chunk_rows` prompts at a time."""
        offsets = np.concatenate([[0], np.cumsum(tokens.lengths, dtype=np.int64)])
        for a in range(0, len(tokens), chunk_rows):
            b = min(a + chunk_rows, len(tokens))
            yield slice(a, b), cls.of(tokens.ids[offsets[a] : offsets[b]], tokens.lengths[a:b], vocabulary)

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
        for rows, part in Terms.chunks(tokens, self.vocabulary, chunk_rows):
            out[rows] = self.margins(part)
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
        g = Ops("lexical", ("input_ids", "attention_mask", features, output), graph.initializer)
        start, stop, end = (g.const(n, [v], np.int64) for n, v in (("start", 0), ("stop", -1), ("end", 2**63 - 1)))
        second, axis = g.const("second", [1], np.int64), g.const("axis", [1], np.int64)
        g.add("Slice", f"input_ids {start} {stop} {axis}", "left")
        g.add("Slice", f"input_ids {second} {end} {axis}", "right")
        g.add("Mul", f"left {g.const('multiplier', BIGRAM_MULTIPLIER, np.int64)}", "scaled")
        g.add("Add", "scaled right", "pair")
        g.add("Mod", f"pair {g.const('buckets', BIGRAM_BUCKETS, np.int64)}", "bucket")
        g.add("Add", f"bucket {g.const('vocabulary', self.vocabulary, np.int64)}", "bigram")
        g.add("Concat", "input_ids bigram", "terms", axis=1)
        # A bigram counts when both its ids are real tokens (not padding).
        g.add("Slice", f"attention_mask {start} {stop} {axis}", "mask_left")
        g.add("Slice", f"attention_mask {second} {end} {axis}", "mask_right")
        g.add("Mul", "mask_left mask_right", "pair_mask")
        g.add("Concat", "attention_mask pair_mask", "term_mask", axis=1)
        g.add("Cast", "term_mask", "mask", to=TensorProto.DOUBLE)
        g.add("Unsqueeze", f"mask {axis}", "mask_row")  # [batch, 1, terms]
        g.add("Gather", "weights terms", "rows32", axis=0)
        g.add("Cast", "rows32", "rows", to=TensorProto.DOUBLE)
        if self.weighting in EXACT_WEIGHTINGS:
            mass = "mask_row"  # what each term adds to the divisor: 1, or its idf
            if self.weighting == "idf":
                mass = "idf_row"
                g.add("Gather", "idf terms", "idf32", axis=0)
                g.add("Cast", "idf32", "term_idf", to=TensorProto.DOUBLE)
                g.add("Mul", "term_idf mask", "term_mass")
                g.add("Unsqueeze", f"term_mass {axis}", mass)
            g.add("MatMul", "mask_row rows", "total")  # [batch, 1, outcomes]
            g.add("ReduceSum", f"{mass} {g.const('terms_axis', [2], np.int64)}", "count", keepdims=1)
            # No terms (an empty prompt): divide by 1, so the margin is the bias, not NaN
            # (with idf, a prompt with terms has a divisor of at least 1 already).
            g.add("Max", f"count {g.const('one', [1.0], np.float64)}", "safe_count")
            g.add("Div", "total safe_count", "mean")
        else:
            self._tfidf_nodes(g, axis)
        g.add("Add", "mean bias", "margin64")
        g.add("Cast", "margin64", "margin32", to=TensorProto.FLOAT)
        g.add("Squeeze", f"margin32 {axis}", "margins")
        g.add("Concat", f"{features} margins", output, axis=1)
        graph.node.extend(g.nodes)
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

    def _tfidf_nodes(self, g, axis: str) -> None:
        """The `tfidf` weighting's nodes, from the terms, their mask and their gathered weights
        to `lexical_mean` [batch, 1, outcomes], the weights' sum over the prompt's tfidf row:
        each term's count in its prompt from one Unique over (row, term) keys (padding shares
        the key -1), the term's first position only, its (1 + ln count) * idf, and the sums
        divided by the row's L2 norm (at least 1e-300: an empty prompt gets the bias)."""
        from onnx import TensorProto, helper

        flat = g.const("flat", [-1], np.int64)
        g.add("Shape", "terms", "terms_shape")
        g.add("Gather", f"terms_shape {g.const('zero', 0, np.int64)}", "batch", axis=0)
        g.add("Range", f"{g.const('range_start', 0, np.int64)} batch {g.const('range_step', 1, np.int64)}", "row")
        g.add("Unsqueeze", f"row {axis}", "row_column")
        g.add("Mul", f"row_column {g.const('row_stride', self.vocabulary + BIGRAM_BUCKETS, np.int64)}", "row_offset")
        g.add("Add", "terms row_offset", "row_terms")
        g.add("Cast", "term_mask", "real", to=TensorProto.BOOL)
        g.add("Where", f"real row_terms {g.const('padding_key', -1, np.int64)}", "keys")
        g.add("Reshape", f"keys {flat}", "flat_keys")
        g.add("Unique", "flat_keys", "unique first inverse unique_counts", sorted=1)
        g.add("Gather", "unique_counts inverse", "flat_counts", axis=0)
        g.add("Cast", "flat_counts", "flat_counts64", to=TensorProto.DOUBLE)
        # 1 at each distinct term's first position, 0 elsewhere
        g.add("Shape", "flat_keys", "flat_shape")
        g.add("ConstantOfShape", "flat_shape", "zeros")
        g.add("Shape", "first", "first_shape")
        g.add("ConstantOfShape", "first_shape", "ones", value=helper.make_tensor("one", TensorProto.DOUBLE, [1], [1.0]))
        g.add("Cast", "zeros", "zeros64", to=TensorProto.DOUBLE)
        g.add("ScatterElements", "zeros64 first ones", "first_flat", axis=0)
        g.add("Log", "flat_counts64", "log_counts")
        g.add("Add", f"log_counts {g.const('tf_one', 1.0, np.float64)}", "tf_flat")
        g.add("Mul", "tf_flat first_flat", "tf_first_flat")
        g.add("Reshape", "tf_first_flat terms_shape", "tf_first")
        g.add("Gather", "idf terms", "idf32", axis=0)
        g.add("Cast", "idf32", "term_idf", to=TensorProto.DOUBLE)
        g.add("Mul", "tf_first term_idf", "value_unmasked")
        g.add("Mul", "value_unmasked mask", "value")  # [batch, terms]
        g.add("Unsqueeze", f"value {axis}", "value_row")  # [batch, 1, terms]
        g.add("MatMul", "value_row rows", "total")  # [batch, 1, outcomes]
        g.add("Mul", "value_row value_row", "squares")
        g.add("ReduceSum", f"squares {g.const('terms_axis', [2], np.int64)}", "square_sum", keepdims=1)
        g.add("Sqrt", "square_sum", "norm")
        g.add("Max", f"norm {g.const('tiny', [1e-300], np.float64)}", "safe_norm")
        g.add("Div", "total safe_norm", "mean")


def fold_numbers(prompts, folds: int, salt: str = "") -> np.ndarray:
    """Each prompt's fold in 0..folds-1, from its hash (salted apart from the split's)."""
    from data.prepare import hash_uniform

    return np.minimum((hash_uniform(prompts, FOLD_SALT + salt) * folds).astype(np.int64), folds - 1)
