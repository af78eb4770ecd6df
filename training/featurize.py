"""Training-time features: build the tier's encoder, compute every prompt's features in
chunks, fit the projection on the training split, and return the matrix the SDK would compute
(how each choice was measured: docs/performance.md#training-at-scale).

Two stages, the same for both engines: *raw* features (the tier's own embedding), on which the
projection (PCA) is fitted, and *serving* features (what the bundle computes: the static tier
folds the projection into its token table). Each stage is a picklable `FeatureRecipe`, so the
Dask engine's workers compute partitions with the `ChunkFeaturizer` the local engine uses. Token
ids, counts and statistics come from the SDK's own `FeatureExtractor.prepare` (in a pool of
processes for large logs); a token-table embedding is one float64 sparse product, the graph's
values bit for bit; each prompt is tokenized once and its ids kept until the projection is known;
the PCA is scikit-learn's up to EXACT_PCA_ROWS training rows, else the same solver on a
covariance accumulated block by block. Cross-fitting's fits share the first pass (FirstPassMemo).
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np

from serving.features._extractor import FastTokenizer, FeatureExtractor, OnnxEncoder, Projection
from serving.features._spec import FeatureSpec
from training.embedding_cache import CachedEncoder, EmbeddingCache
from training.encoders import BuiltEncoder, build_encoder, fold_projection, static_encoder_graph

if TYPE_CHECKING:
    from training.lexical import LexicalModel

CHUNK_ROWS = 4096  # prompts featurized at a time: bounds the temporaries (padded ids: ~33 MB at 512 tokens)
POOL_MIN_ROWS = 50_000  # fewer rows are featurized in this process: starting the pool costs seconds
EXACT_PCA_ROWS = 100_000  # training rows held for scikit-learn's PCA (150 MB); more are folded into a covariance

_EXTRACTORS: dict[tuple[str, int], FeatureExtractor] = {}  # per process, by (recipe key, threads)
_FEATURIZERS: dict[str, "ChunkFeaturizer"] = {}  # per process, by recipe key


@dataclass(frozen=True, eq=False)
class FeatureRecipe:
    """Everything a process needs to compute one stage's features, as plain bytes and arrays.
    `table` is the token table of an encoder that is a masked mean of its rows (static tier):
    the graph `encoder_onnx` computes the same thing, for the SDK."""

    spec: FeatureSpec
    tokenizer_json: bytes
    encoder_onnx: bytes
    projection: Projection | None = None
    table: np.ndarray | None = None

    @cached_property
    def key(self) -> str:
        digest = hashlib.sha256(repr(self.spec.to_dict()).encode())
        for part in (
            self.tokenizer_json,
            self.encoder_onnx,
            self.projection.to_bytes() if self.projection is not None else b"",
            np.ascontiguousarray(self.table).tobytes() if self.table is not None else b"",
        ):
            digest.update(hashlib.sha256(part).digest())
        return digest.hexdigest()[:24]

    def for_workers(self) -> "FeatureRecipe":
        """What a featurizing process needs: a token-table recipe without its graph (the same
        table again, as ONNX bytes), so half as much is pickled to each process."""
        return self if self.table is None else replace(self, encoder_onnx=b"")

    def extractor(self, *, threads: int = 1) -> FeatureExtractor:
        """This process's SDK extractor for the recipe (built once, then reused)."""
        if (self.key, threads) not in _EXTRACTORS:
            encoder = OnnxEncoder(self.encoder_onnx, threads=threads, row_wise=self.spec.encoder_row_wise)
            _EXTRACTORS[self.key, threads] = FeatureExtractor(
                self.spec, FastTokenizer(self.tokenizer_json), encoder, self.projection
            )
        return _EXTRACTORS[self.key, threads]

    def featurizer(self) -> "ChunkFeaturizer":
        """This process's training featurizer for the recipe (built once, then reused)."""
        if self.key not in _FEATURIZERS:
            _FEATURIZERS[self.key] = ChunkFeaturizer(self)
        return _FEATURIZERS[self.key]

    def transform(self, prompts: Sequence[str], precisions: Sequence[str | None]) -> np.ndarray:
        """The features of these prompts: the SDK's values, computed the fast way."""
        return self.featurizer().transform(list(prompts), list(precisions))


@dataclass
class TokenRows:
    """Each prompt's token ids as its encoder sees them (cut to max_tokens), flat: 2 bytes a
    token instead of a padded int64 matrix (8 bytes a token and the padding)."""

    ids: np.ndarray  # uint16 while the vocabulary fits, else int32
    lengths: np.ndarray  # int32, tokens per prompt

    @classmethod
    def from_padded(cls, input_ids: np.ndarray, mask: np.ndarray) -> "TokenRows":
        ids = input_ids[mask.astype(bool)]  # row by row, in token order
        small = ids.size == 0 or int(ids.max()) < 2**16
        return cls(ids.astype(np.uint16 if small else np.int32), mask.sum(axis=1).astype(np.int32))

    @classmethod
    def concat(cls, parts: Sequence["TokenRows"]) -> "TokenRows":
        if not parts:
            return cls(np.zeros(0, np.uint16), np.zeros(0, np.int32))
        return cls(np.concatenate([p.ids for p in parts]), np.concatenate([p.lengths for p in parts]))

    def __len__(self) -> int:
        return len(self.lengths)

    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths, dtype=np.int64)])

    def subset(self, rows: np.ndarray) -> "TokenRows":
        """The prompts where the boolean `rows` is true."""
        return TokenRows(self.ids[np.repeat(rows, self.lengths)], self.lengths[rows])

    def per_row(self) -> list[np.ndarray]:
        """Each prompt's ids as its own array (views into `ids`)."""
        return np.split(self.ids, self.offsets()[1:-1]) if len(self) else []

    @classmethod
    def from_rows(cls, rows: Sequence[np.ndarray]) -> "TokenRows":
        """The inverse of `per_row`."""
        lengths = np.array([len(r) for r in rows], dtype=np.int32)
        return cls(np.concatenate(rows) if len(rows) else np.zeros(0, np.uint16), lengths)

    def slice(self, start: int, stop: int) -> "TokenRows":
        offsets = self.offsets()
        return TokenRows(self.ids[offsets[start] : offsets[stop]], self.lengths[start:stop])

    def counts(self, vocabulary: int):
        """A sparse [prompts, vocabulary] matrix: how often each token occurs in each prompt."""
        from scipy.sparse import csr_matrix

        return csr_matrix(
            (np.ones(len(self.ids)), self.ids.astype(np.int32), self.offsets()), shape=(len(self), vocabulary)
        )


def masked_mean(tokens: TokenRows, table: np.ndarray) -> np.ndarray:
    """What static_encoder_graph computes: the mean of the prompt's token rows, summed in
    float64, then float32 (a prompt without tokens gets the zero vector)."""
    if not len(tokens):
        return np.zeros((0, table.shape[1]), dtype=np.float32)
    total = tokens.counts(len(table)) @ table
    return (total / np.maximum(tokens.lengths, 1)[:, None]).astype(np.float32)


class ChunkFeaturizer:
    """A recipe's features for a chunk of prompts, bit-identical to the SDK's extractor:
    token ids, count and statistics through the SDK's `prepare`, a token-table embedding as
    one sparse product (module doc), any other encoder through the SDK extractor itself."""

    def __init__(self, recipe: FeatureRecipe):
        self.recipe = recipe
        self.table = None if recipe.table is None else np.asarray(recipe.table, dtype=np.float64)
        if self.table is None:
            self.extractor = recipe.extractor()
        else:  # only prepare() is used: no onnxruntime session
            self.extractor = FeatureExtractor(recipe.spec, FastTokenizer(recipe.tokenizer_json), None, None)

    def prepare(self, prompts: list[str], precisions: list) -> tuple[np.ndarray, TokenRows]:
        """(scalar features [n_tokens, statistics, precision] as float32, token ids)."""
        input_ids, mask, scalars, _, _ = self.extractor.prepare(prompts, precisions)
        return scalars, TokenRows.from_padded(input_ids, mask)

    def embed(self, tokens: TokenRows) -> np.ndarray:
        """The embedding of a token-table recipe (projected, if the recipe has a projection)."""
        embedding = masked_mean(tokens, self.table)
        return embedding if self.recipe.projection is None else self.recipe.projection(embedding)

    def transform(self, prompts: list[str], precisions: list) -> np.ndarray:
        """The features (columns = spec.feature_names), one row per prompt."""
        return self.transform_with_tokens(prompts, precisions)[0]

    def transform_with_tokens(self, prompts: list[str], precisions: list) -> tuple[np.ndarray, TokenRows | None]:
        """`transform`, and the prompts' token ids where the recipe computes them (a token table)."""
        if self.table is None:
            return self.extractor.transform(prompts, precisions), None
        scalars, tokens = self.prepare(prompts, precisions)
        return np.concatenate([scalars, self.embed(tokens)], axis=1), tokens


@dataclass
class FeaturePlan:
    """The fitted feature pipeline: the tier's encoder, the projection and the serving recipe."""

    built: BuiltEncoder
    raw: FeatureRecipe
    projection: Projection
    serving: FeatureRecipe
    fused_prefix: bytes | None = None  # static tier: ids + scalars -> features, PCA folded into the table
    lexical: "LexicalModel | None" = None  # training.lexical: its margins follow the features in the graph

    @property
    def spec(self) -> FeatureSpec:
        return self.serving.spec

    def with_lexical(self, model: "LexicalModel", mode: str = "features") -> "FeaturePlan":
        """This plan with lexical evidence in `mode` (LEXICAL_MODES): the spec says so and the
        fused graph computes its margins."""
        if self.fused_prefix is None:
            raise ValueError(
                "lexical evidence needs the fused layout (the static tier): the margins are computed "
                "in model.onnx from the token ids"
            )
        spec = replace(self.serving.spec, lexical=mode)
        return replace(self, serving=replace(self.serving, spec=spec), lexical=model)

    def served(self, prompts: list[str], precisions: list) -> np.ndarray:
        """These prompts' rows as the bundle's graph reads them: the features, then the lexical
        margins when the plan has lexical evidence (the static tier's token ids)."""
        x, tokens = self.serving.featurizer().transform_with_tokens(prompts, precisions)
        return x if self.lexical is None else np.concatenate([x, self.lexical.margins_of_tokens(tokens)], axis=1)

    def bundle_files(self, trees: bytes, *, with_encoder: bool = False) -> dict:
        """The bundle's model files: one fused graph (static tier) or encoder + projection + trees.
        `with_encoder`: a fused bundle also carries the encoder before the projection
        (encoder.onnx), for OutcomeLog(privacy="embedding"); a staged one always does."""
        from training.export import fuse

        if self.fused_prefix is not None:
            prefix, trees_read = self.fused_prefix, "features"
            if self.lexical is not None:
                prefix = self.lexical.append_to_graph(prefix)
                trees_read = "model_features" if self.spec.lexical == "features" else "features"
            return {
                "model.onnx": fuse(prefix, trees, trees_read=trees_read),
                "tokenizer.json": self.built.tokenizer_path,
                **({"encoder.onnx": self.built.onnx_bytes} if with_encoder else {}),
            }
        return {
            "encoder.onnx": self.built.onnx_bytes,
            "router.onnx": trees,
            "projection.npz": self.projection.to_bytes(),
            "tokenizer.json": self.built.tokenizer_path,
        }


@dataclass
class TrainingFeatures:
    plan: FeaturePlan
    matrix: np.ndarray  # float32, columns = plan.spec.feature_names
    cache_hits: int
    cache_misses: int
    cache_used: bool = False  # only the transformer tier caches embeddings
    tokens: TokenRows | None = None  # ids of the rows asked for (keep_tokens), where the tier keeps them

    @property
    def spec(self) -> FeatureSpec:
        return self.plan.spec


def raw_stage(
    tier: str, *, embedding_dim: int, max_tokens: int | None, max_chars: int, cache_dir: Path
) -> tuple[BuiltEncoder, FeatureRecipe]:
    """The tier's encoder and the recipe of its raw (unprojected) features."""
    options = {"max_tokens": max_tokens} if max_tokens else {}
    built = build_encoder(tier, cache_dir / "encoders", **options)
    spec = FeatureSpec(
        tier=tier,
        max_tokens=built.max_tokens,
        max_chars=max_chars,
        add_special_tokens=built.add_special_tokens,
        encoder_row_wise=built.row_wise,
        embedding_dim=embedding_dim,
    )
    return built, FeatureRecipe(spec, Path(built.tokenizer_path).read_bytes(), built.onnx_bytes, table=built.table)


def configured_raw_stage(config) -> tuple[BuiltEncoder, FeatureRecipe]:
    """raw_stage with a TrainConfig's features and cache folder."""
    f = config.features
    dims = dict(embedding_dim=f.embedding_dim, max_tokens=f.max_tokens, max_chars=f.max_chars)
    return raw_stage(f.tier, cache_dir=Path(config.cache_dir), **dims)


def n_scalar_features(spec: FeatureSpec) -> int:
    """Columns before the embedding: token count, text statistics, precision one-hot."""
    return len(spec.feature_names) - spec.embedding_dim


def raw_width(recipe: FeatureRecipe) -> int:
    """Columns of the recipe's raw embedding."""
    if recipe.table is not None:
        return recipe.table.shape[1]
    return recipe.transform(["width probe"], [None]).shape[1] - n_scalar_features(recipe.spec)


def fit_projection(raw: np.ndarray, dim: int, *, seed: int) -> Projection:
    """PCA of the raw embeddings (training rows only), as a plain mean + components pair."""
    from sklearn.decomposition import PCA

    dim = min(dim, raw.shape[1], max(len(raw) - 1, 1))
    pca = PCA(n_components=dim, random_state=seed).fit(raw.astype(np.float64))
    return Projection(pca.mean_, pca.components_)


class ProjectionFitter:
    """The PCA of training rows' raw embeddings, fed block by block: up to `exact_rows` rows held
    and fitted by scikit-learn's PCA itself, past it folded into a float64 sum and Gram matrix
    whose covariance's eigenvectors are the components (scikit-learn's `covariance_eigh`)."""

    def __init__(self, dim: int, *, seed: int, exact_rows: int = EXACT_PCA_ROWS):
        self.dim, self.seed, self.exact_rows = dim, seed, exact_rows
        self.held: list[np.ndarray] = []
        self.n_held = self.n_folded = 0
        self.total: np.ndarray | None = None
        self.gram: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return self.n_held + self.n_folded

    def add(self, raw: np.ndarray) -> None:
        if len(raw):
            self.held.append(np.asarray(raw, dtype=np.float32))
            self.n_held += len(raw)
        if self.n_held > self.exact_rows:
            self._fold()

    def _fold(self) -> None:
        block = np.concatenate(self.held).astype(np.float64)
        self.held, self.n_held = [], 0
        if self.gram is None:
            self.total, self.gram = np.zeros(block.shape[1]), np.zeros((block.shape[1], block.shape[1]))
        self.total += block.sum(axis=0)
        self.gram += block.T @ block
        self.n_folded += len(block)

    def projection(self) -> Projection:
        if self.gram is None:
            return fit_projection(np.concatenate(self.held), self.dim, seed=self.seed)
        if self.held:
            self._fold()
        return covariance_projection(self.total, self.gram, self.n_folded, self.dim)


def covariance_projection(total: np.ndarray, gram: np.ndarray, n: int, dim: int) -> Projection:
    """scikit-learn's `covariance_eigh` PCA from the column sums and Gram matrix of n rows:
    components = top eigenvectors of the covariance, signs as svd_flip sets them."""
    from sklearn.utils.extmath import svd_flip

    mean = total / n
    covariance = gram - n * mean[:, None] * mean[None, :]
    covariance /= n - 1
    _, vectors = np.linalg.eigh(covariance)
    _, components = svd_flip(None, np.flip(vectors, axis=1).T, u_based_decision=False)
    return Projection(mean, components[: min(dim, len(mean))])


def plan_from(built: BuiltEncoder, raw: FeatureRecipe, projection: Projection) -> FeaturePlan:
    """The serving recipe once the projection is known."""
    spec = replace(raw.spec, embedding_dim=projection.components.shape[0])
    if built.table is None:
        return FeaturePlan(built, raw, projection, replace(raw, spec=spec, projection=projection))
    # Static tier: fold the projection into the table; the fused serving graph runs these
    # same nodes on the same inputs.
    table = fold_projection(built.table, projection.mean, projection.components)
    serving = FeatureRecipe(replace(spec, fused=True), raw.tokenizer_json, static_encoder_graph(table), table=table)
    return FeaturePlan(
        built, raw, projection, serving, fused_prefix=static_encoder_graph(table, scalars=n_scalar_features(spec))
    )


# --- the local engine: every row, streamed in chunks through a pool of processes -------------


def default_workers() -> int:
    """Featurizing processes for the local engine: one per core."""
    return max(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 1)


@dataclass
class FirstPass:
    """One chunk's first pass (token-table tier): its scalar features, its token ids (the
    serving embedding is computed from them once the projection is known) and the raw
    embeddings of its training rows (for the projection)."""

    scalars: np.ndarray
    tokens: TokenRows
    raw_train: np.ndarray


def table_first_pass(recipe: FeatureRecipe, prompts: list[str], precisions: list, train: np.ndarray) -> FirstPass:
    """Static tier: scalars and token ids of every row, raw embeddings of the training rows only."""
    featurizer = recipe.featurizer()
    scalars, tokens = featurizer.prepare(prompts, precisions)
    return FirstPass(scalars, tokens, featurizer.embed(tokens.subset(train)))


@dataclass
class FirstPassMemo:
    """The static tier's first pass over one set of rows (each row's scalar features and
    token ids), for the next `featurize` of the same rows with the same recipe: what
    cross-fitting's folds and refit share (module doc). It answers only for the exact same
    prompts and precisions in the same order, checked by a digest of them."""

    digest: str | None = None  # digest_of the rows kept
    kept: tuple[np.ndarray, TokenRows] | None = None  # their (scalars, token ids)

    @staticmethod
    def digest_of(recipe: FeatureRecipe, prompts, precisions) -> str:
        """A digest of the recipe and of every prompt and precision, in order."""
        digest = hashlib.blake2b(recipe.key.encode(), digest_size=20)
        for prompt, precision in zip(prompts, precisions, strict=True):
            digest.update(prompt.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00" + (b"-" if precision is None else b"=" + str(precision).encode()) + b"\x00")
        return f"{len(prompts)}:{digest.hexdigest()}"


def _remembered_first_passes(
    recipe: FeatureRecipe, scalars: np.ndarray, tokens: TokenRows, train_rows: np.ndarray, chunk_rows: int
) -> Iterator[FirstPass]:
    """The first passes `table_features` would compute, chunk by chunk, from a memo's scalars
    and ids: only the training rows' raw embeddings are computed again (the same chunks, so
    the projection is fitted on the same blocks)."""
    featurizer = recipe.featurizer()
    for a, b in _chunks(len(tokens), chunk_rows):
        part = tokens.slice(a, b)
        yield FirstPass(scalars[a:b], part, featurizer.embed(part.subset(train_rows[a:b])))


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, n)) for start in range(0, n, size)]


_POOL_RECIPE: FeatureRecipe | None = None  # in a featurizing process: its recipe (_start_worker)


def _start_worker(recipe: FeatureRecipe) -> None:
    global _POOL_RECIPE
    _POOL_RECIPE = recipe
    recipe.featurizer()


def _pool_first_pass(prompts: list[str], precisions: list, train: np.ndarray) -> FirstPass:
    return table_first_pass(_POOL_RECIPE, prompts, precisions, train)


def _ordered_in_pool(workers: int, recipe: FeatureRecipe, jobs: Iterable[tuple]) -> Iterator[FirstPass]:
    """table_first_pass over `jobs` in `workers` spawned processes, results in order, at most
    two chunks per process in flight (the prompts are never all queued at once). The recipe
    goes to each process once, when it starts."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: the parent holds threads (Arrow, tokenizers) that a fork would copy mid-lock.
    with ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(recipe.for_workers(),),
    ) as pool:
        pending: deque = deque()
        for job in jobs:
            pending.append(pool.submit(_pool_first_pass, *job))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _first_passes(
    recipe: FeatureRecipe,
    prompts,
    precisions,
    train_rows: np.ndarray,
    chunk_rows: int,
    workers: int,
    pool_min_rows: int,
) -> Iterator[FirstPass]:
    jobs = ((list(prompts[a:b]), list(precisions[a:b]), train_rows[a:b]) for a, b in _chunks(len(prompts), chunk_rows))
    if workers <= 1 or len(prompts) < max(pool_min_rows, 2 * chunk_rows):
        return (table_first_pass(recipe, *job) for job in jobs)
    return _ordered_in_pool(workers, recipe, jobs)


def table_features(
    built,
    raw,
    prompts,
    precisions,
    train_rows,
    *,
    embedding_dim,
    seed,
    chunk_rows=CHUNK_ROWS,
    workers=1,
    pool_min_rows=POOL_MIN_ROWS,
    on_batch=None,
    keep_tokens=None,
    memo: FirstPassMemo | None = None,
) -> tuple[FeaturePlan, np.ndarray, TokenRows | None]:
    """A token-table tier (static), in two passes: (1) scalars and token ids of every row, raw
    embeddings of the training rows into the projection; (2) the serving embedding of every
    row from its ids. Also returns the ids of the rows where `keep_tokens` is true, if given.
    `memo`: the first pass is taken from it when it holds these rows, and kept in it otherwise."""
    n, n_scalars = len(prompts), n_scalar_features(raw.spec)
    matrix = np.empty((n, n_scalars + embedding_dim), dtype=np.float32)
    fitter, tokens, start = ProjectionFitter(embedding_dim, seed=seed), [], 0
    digest = FirstPassMemo.digest_of(raw, prompts, precisions) if memo is not None else ""
    remembered = memo.kept if memo is not None and memo.digest == digest else None
    passes = (
        _first_passes(raw, prompts, precisions, train_rows, chunk_rows, workers, pool_min_rows)
        if remembered is None
        else _remembered_first_passes(raw, *remembered, train_rows, chunk_rows)
    )
    for part in passes:
        matrix[start : start + len(part.scalars), :n_scalars] = part.scalars
        fitter.add(part.raw_train)
        tokens.append(part.tokens)
        start += len(part.scalars)
        if on_batch:
            on_batch(len(part.scalars))
    if memo is not None and remembered is None:
        memo.digest, memo.kept = digest, (matrix[:, :n_scalars].copy(), TokenRows.concat(tokens))
    plan = plan_from(built, raw, fitter.projection())
    matrix = matrix[:, : len(plan.spec.feature_names)]  # fewer components than asked on tiny data
    featurizer = plan.serving.featurizer()
    start, kept = 0, []
    for part in tokens:
        matrix[start : start + len(part), n_scalars:] = featurizer.embed(part)
        if keep_tokens is not None:
            kept.append(part.subset(keep_tokens[start : start + len(part)]))
        start += len(part)
    return plan, matrix, None if keep_tokens is None else TokenRows.concat(kept)


def _encoder_features(
    built, raw, prompts, precisions, train_rows, *, embedding_dim, seed, chunk_rows, cache, on_batch
) -> tuple[FeaturePlan, np.ndarray]:
    """Transformer tier: the raw features once (encoder behind the embedding cache), then the projection."""
    encoder = CachedEncoder(OnnxEncoder(built.onnx_bytes, threads=2, row_wise=built.row_wise), cache)
    extractor = FeatureExtractor(raw.spec, FastTokenizer(built.tokenizer_path), encoder, projection=None)
    raw_matrix = None
    for a, b in _chunks(len(prompts), chunk_rows):
        part = extractor.transform(list(prompts[a:b]), list(precisions[a:b]))
        if raw_matrix is None:  # [scalars, the encoder's own width]
            raw_matrix = np.empty((len(prompts), part.shape[1]), dtype=np.float32)
        raw_matrix[a:b] = part
        if on_batch:
            on_batch(b - a)
    n_scalars = n_scalar_features(raw.spec)
    fitter = ProjectionFitter(embedding_dim, seed=seed)
    for a, b in _chunks(len(prompts), EXACT_PCA_ROWS):
        fitter.add(raw_matrix[a:b, n_scalars:][train_rows[a:b]])
    plan = plan_from(built, raw, fitter.projection())
    matrix = np.empty((len(prompts), len(plan.spec.feature_names)), dtype=np.float32)
    for a, b in _chunks(len(prompts), chunk_rows):
        matrix[a:b, :n_scalars] = raw_matrix[a:b, :n_scalars]
        matrix[a:b, n_scalars:] = plan.projection(raw_matrix[a:b, n_scalars:])
    return plan, matrix


def featurize(
    config,
    prompts: Sequence[str],
    precisions: Sequence[str | None],
    train_rows: np.ndarray,
    *,
    chunk_rows: int = CHUNK_ROWS,
    workers: int = 1,
    pool_min_rows: int = POOL_MIN_ROWS,
    on_batch: Callable[[int], None] | None = None,
    keep_tokens: np.ndarray | None = None,
    memo: FirstPassMemo | None = None,
) -> TrainingFeatures:
    """Features of every prompt with a TrainConfig's features, cache folder and seed, streamed in
    chunks of `chunk_rows` into one float32 matrix; `prompts` and `precisions` need only len() and
    slicing (a list, a pandas array), so a chunk's text exists as Python strings only while it is
    featurized. The static tier's first pass runs in `workers` processes from `pool_min_rows` rows
    on, and keeps the token ids of the rows where `keep_tokens` is true; `memo` (static tier): the
    first pass of the same rows, kept from an earlier call."""
    built, raw = configured_raw_stage(config)
    rows = (built, raw, prompts, precisions, np.asarray(train_rows, dtype=bool))
    fit = dict(embedding_dim=config.features.embedding_dim, seed=config.seed, chunk_rows=chunk_rows, on_batch=on_batch)
    if built.table is not None:
        keep = None if keep_tokens is None else np.asarray(keep_tokens, bool)
        pool = dict(workers=workers, pool_min_rows=pool_min_rows, keep_tokens=keep, memo=memo)
        plan, matrix, tokens = table_features(*rows, **pool, **fit)
        return TrainingFeatures(plan, matrix, 0, 0, tokens=tokens)
    cache = EmbeddingCache(Path(config.cache_dir) / "embeddings.sqlite", built.key)
    try:
        plan, matrix = _encoder_features(*rows, cache=cache, **fit)
    finally:
        cache.close()
    return TrainingFeatures(plan, matrix, cache.hits, cache.misses, cache_used=True)
