"""Fit the familiarity reference (serving.scoring._novelty) on held-out in-distribution prompts.

The validation rows are split in two by prompt hash: the first half gives the embedding's
mean and spread and the set of tokens seen; on the second half, each measure's threshold is
the quantile that flags half of `share`, so that about `share` of in-distribution prompts
are unfamiliar. The unseen-token threshold never drops below `min_unseen_share`: a prompt
is not unfamiliar for one rare word.

Both measures read what featurizing computed: the projected embeddings (the feature
matrix's last columns) and the token ids (training.featurize.TokenRows). An engine that
did not keep the ids (the transformer tier) gets them from `token_rows`, as the SDK
tokenizes.
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
    from onnx import TensorProto, helper, numpy_helper

    graph_model = onnx.load_from_string(model)
    graph = graph_model.graph

    def constant(name: str, value, dtype) -> str:
        graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), f"novelty_{name}"))
        return f"novelty_{name}"

    axis = constant("axis", [1], np.int64)
    nodes = [
        # the embedding's mean squared z-score
        helper.make_node(
            "Slice",
            [
                features,
                constant("start", [-embedding_dim], np.int64),
                constant("end", [np.iinfo(np.int64).max], np.int64),
                axis,
            ],
            ["novelty_embedding32"],
        ),
        helper.make_node("Cast", ["novelty_embedding32"], ["novelty_embedding"], to=TensorProto.DOUBLE),
        helper.make_node(
            "Sub", ["novelty_embedding", constant("mean", reference.mean, np.float64)], ["novelty_centred"]
        ),
        helper.make_node(
            "Mul", ["novelty_centred", constant("inverse_scale", reference.inverse_scale, np.float64)], ["novelty_z"]
        ),
        helper.make_node("Mul", ["novelty_z", "novelty_z"], ["novelty_z2"]),
        helper.make_node("ReduceMean", ["novelty_z2"], ["novelty_distance"], axes=[1], keepdims=0),  # opset 15
        # the share of real ids never seen (ids past the table count as unseen, as in serving.scoring._novelty)
        helper.make_node("Min", ["input_ids", constant("last_id", len(reference.seen) - 1, np.int64)], ["novelty_ids"]),
        helper.make_node(
            "Gather", [constant("seen", reference.seen, np.uint8), "novelty_ids"], ["novelty_seen8"], axis=0
        ),
        helper.make_node("Cast", ["novelty_seen8"], ["novelty_seen_all"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["attention_mask"], ["novelty_mask"], to=TensorProto.DOUBLE),
        helper.make_node("Mul", ["novelty_seen_all", "novelty_mask"], ["novelty_seen_real"]),
        helper.make_node("ReduceSum", ["novelty_seen_real", axis], ["novelty_seen_count"], keepdims=0),
        helper.make_node("ReduceSum", ["novelty_mask", axis], ["novelty_count"], keepdims=0),
        helper.make_node("Max", ["novelty_count", constant("one", 1.0, np.float64)], ["novelty_safe_count"]),
        helper.make_node("Div", ["novelty_seen_count", "novelty_safe_count"], ["novelty_seen_share"]),
        helper.make_node(
            "Sub", [constant("one_again", 1.0, np.float64), "novelty_seen_share"], ["novelty_unseen_share"]
        ),
        helper.make_node("Greater", ["novelty_count", constant("zero", 0.0, np.float64)], ["novelty_has_ids"]),
        helper.make_node(
            "Where", ["novelty_has_ids", "novelty_unseen_share", constant("none", 0.0, np.float64)], ["novelty_unseen"]
        ),
        # each over its threshold, the larger
        helper.make_node(
            "Div",
            ["novelty_distance", constant("embedding_threshold", reference.embedding_threshold, np.float64)],
            ["novelty_by_embedding"],
        ),
        helper.make_node(
            "Div",
            ["novelty_unseen", constant("unseen_threshold", reference.unseen_threshold, np.float64)],
            ["novelty_by_tokens"],
        ),
        helper.make_node("Max", ["novelty_by_embedding", "novelty_by_tokens"], [NOVELTY_OUTPUT]),
    ]
    graph.node.extend(nodes)
    graph.output.append(helper.make_tensor_value_info(NOVELTY_OUTPUT, TensorProto.DOUBLE, ["batch"]))
    onnx.checker.check_model(graph_model)
    return graph_model.SerializeToString()
