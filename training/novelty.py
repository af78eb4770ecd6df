"""Fit the familiarity reference (serving.scoring._novelty) on held-out in-distribution prompts
(docs/training.md#how-the-router-is-built, step 9): the validation rows split in two by prompt
hash, the first half gives the embedding's mean and spread and the tokens seen, and on the second
each measure's threshold flags half of `share` (the unseen-token one at least
`min_unseen_share`). Both measures read what featurizing computed (the projected embeddings and
the token ids, training.featurize.TokenRows), or the ids tokenized as the SDK does (`token_rows`).
"""

from __future__ import annotations

import numpy as np

from serving.scoring._novelty import Novelty
from training.featurize import TokenRows

CHUNK_ROWS = 4096  # prompts tokenized at a time: the padded ids of every held-out prompt at once took GBs
MIN_HALF_ROWS = 10  # validation rows in each half of the hash split, at least


def first_half(prompts) -> np.ndarray:
    """True for the validation prompts that give the reference, False for those that calibrate it."""
    from data.prepare import hash_uniform

    return hash_uniform(list(prompts), "novelty:") < 0.5


def too_few_rows(prompts) -> str | None:
    """Why these validation prompts cannot fit the reference (too few in a half), or None."""
    first = first_half(prompts)
    if first.sum() >= MIN_HALF_ROWS and (~first).sum() >= MIN_HALF_ROWS:
        return None
    return (
        f"{len(first)} validation rows with both outcomes ({int(first.sum())} and {int((~first).sum())} in the "
        f"two halves of the familiarity reference's hash split; at least {MIN_HALF_ROWS} in each half are needed)"
    )


def token_rows(extractor, prompts) -> TokenRows:
    """The ids of `prompts` as the SDK's extractor tokenizes them, in chunks of CHUNK_ROWS."""
    prompts = list(prompts)
    parts = []
    for start in range(0, len(prompts), CHUNK_ROWS):
        chunk = prompts[start : start + CHUNK_ROWS]
        ids, mask, _ = extractor.token_ids(extractor.heads(chunk), chunk)
        parts.append(TokenRows.from_padded(ids, mask))
    return TokenRows.concat(parts)


def fit_novelty(
    prompts, tokens: TokenRows, embeddings: np.ndarray, *, vocabulary: int, share: float, min_unseen_share: float
) -> tuple[Novelty, dict]:
    """The reference fitted on held-out rows (their prompts, token ids and projected
    embeddings), and its manifest figures (thresholds, rows, flagged share on the calibration half)."""
    from data.logs import DataQualityError
    from training.partial import BOTH_OUTCOMES_NEEDED

    short = too_few_rows(prompts)
    if short:
        raise DataQualityError(f"cannot fit the familiarity reference: {short}. {BOTH_OUTCOMES_NEEDED}")
    first = first_half(prompts)
    seen = np.zeros(vocabulary, dtype=np.float64)
    seen[np.unique(tokens.subset(first).ids).astype(np.int64)] = 1.0
    reference = Novelty(
        embeddings[first].mean(axis=0),
        embeddings[first].std(axis=0),
        seen,
        embedding_threshold=1.0,
        unseen_threshold=1.0,
    )
    rest = tokens.subset(~first)
    distance, unseen = reference.components_flat(embeddings[~first], rest.ids, rest.lengths)
    reference.embedding_threshold = float(np.quantile(distance, 1 - share / 2))
    reference.unseen_threshold = float(max(np.quantile(unseen, 1 - share / 2), min_unseen_share))
    flagged = float((reference.scores_flat(embeddings[~first], rest.ids, rest.lengths) > 1).mean())
    return reference, {
        "embedding_threshold": reference.embedding_threshold,
        "unseen_threshold": reference.unseen_threshold,
        "target_share": share,
        "fitted_rows": int(first.sum()),
        "calibration_rows": int((~first).sum()),
        "flagged_share_calibration": flagged,
    }


NOVELTY_OUTPUT = "novelty"  # the fused graph's output: each prompt's novelty, float64 [batch]


def append_to_graph(model: bytes, reference: Novelty, *, embedding_dim: int, features: str = "features") -> bytes:
    """The fused graph with one more output, NOVELTY_OUTPUT: `reference`'s novelty of each
    prompt, from the embedding (the last `embedding_dim` columns of the graph's `features`)
    and the token ids it already reads, in float64 as serving.scoring._novelty computes it: the mean
    squared z-score of the embedding, and 1 - (ids seen among the prompt's real ids) / (its
    number of ids) (0 for a prompt without ids), each divided by its threshold, the larger.
    The SDK then reads one number per prompt instead of the features (no novelty.npz)."""
    import onnx
    from onnx import TensorProto, helper

    from training.export import Ops

    graph_model = onnx.load_from_string(model)
    graph = graph_model.graph
    g = Ops("novelty", (features, "input_ids", "attention_mask", NOVELTY_OUTPUT), graph.initializer)
    axis = g.const("axis", [1], np.int64)
    # the embedding's mean squared z-score
    start, end = g.const("start", [-embedding_dim], np.int64), g.const("end", [np.iinfo(np.int64).max], np.int64)
    g.add("Slice", f"{features} {start} {end} {axis}", "embedding32")
    g.add("Cast", "embedding32", "embedding", to=TensorProto.DOUBLE)
    g.add("Sub", f"embedding {g.const('mean', reference.mean, np.float64)}", "centred")
    g.add("Mul", f"centred {g.const('inverse_scale', reference.inverse_scale, np.float64)}", "z")
    g.add("Mul", "z z", "z2")
    g.add("ReduceMean", "z2", "distance", axes=[1], keepdims=0)  # opset 15
    # the share of real ids never seen (ids past the table count as unseen, as in serving.scoring._novelty)
    g.add("Min", f"input_ids {g.const('last_id', len(reference.seen) - 1, np.int64)}", "ids")
    g.add("Gather", f"{g.const('seen', reference.seen, np.uint8)} ids", "seen8", axis=0)
    g.add("Cast", "seen8", "seen_all", to=TensorProto.DOUBLE)
    g.add("Cast", "attention_mask", "mask", to=TensorProto.DOUBLE)
    g.add("Mul", "seen_all mask", "seen_real")
    g.add("ReduceSum", f"seen_real {axis}", "seen_count", keepdims=0)
    g.add("ReduceSum", f"mask {axis}", "count", keepdims=0)
    g.add("Max", f"count {g.const('one', 1.0, np.float64)}", "safe_count")
    g.add("Div", "seen_count safe_count", "seen_share")
    g.add("Sub", f"{g.const('one_again', 1.0, np.float64)} seen_share", "unseen_share")
    g.add("Greater", f"count {g.const('zero', 0.0, np.float64)}", "has_ids")
    g.add("Where", f"has_ids unseen_share {g.const('none', 0.0, np.float64)}", "unseen")
    # each over its threshold, the larger
    g.add(
        "Div", f"distance {g.const('embedding_threshold', reference.embedding_threshold, np.float64)}", "by_embedding"
    )
    g.add("Div", f"unseen {g.const('unseen_threshold', reference.unseen_threshold, np.float64)}", "by_tokens")
    g.add("Max", "by_embedding by_tokens", NOVELTY_OUTPUT)
    graph.node.extend(g.nodes)
    graph.output.append(helper.make_tensor_value_info(NOVELTY_OUTPUT, TensorProto.DOUBLE, ["batch"]))
    onnx.checker.check_model(graph_model)
    return graph_model.SerializeToString()
