"""The bundle's drift reference (serving.monitoring._drift): its held-out validation rows as
the bundle sees them, out-of-sample (the bundle's own scores on the single split, the folds'
out-of-fold ones when cross-fitted), with the familiarity, the acceptance verdicts and the zones
the SDK gives them; an N-endpoint bundle's are the SDK's own decisions of them
(decisions_reference, training.endpoint_bundle).
"""

from __future__ import annotations

from serving.monitoring._drift import DriftReference
from training.config import TrainConfig
from training.held_out import HeldOutStages, with_learned_zones


def drift_reference(config: TrainConfig, held_out: HeldOutStages, model_version: str) -> DriftReference:
    """The reference of the held-out validation rows (module doc)."""
    rows = with_learned_zones(config, held_out.splits["val"], held_out.thresholds)
    return DriftReference.build(
        model_version=model_version,
        score=rows.scores,
        precisions=list(rows.precisions),
        zones=list(rows.zones),
        prompt_chars=[len(p) for p in rows.prompts],
        n_tokens=rows.n_tokens,
        p_edge=rows.p_edge,
        p_cloud=rows.p_cloud,
        novelty=rows.novelty,
        edge_quality=rows.q_edge,
        rejected=rows.rejected,
        source=f"{len(rows)} held-out validation rows"
        + (" (out-of-fold scores)" if config.split.cv_folds else " (scored by the bundle's model)"),
    )


def decisions_reference(
    model_version: str,
    decisions,
    prompts,
    *,
    edge_quality=None,
    rejected=None,
    source: str,
) -> DriftReference:
    """The reference of held-out rows from the SDK's own Decisions of them (serving.routing._chooser, on the
    training models' probabilities and novelty: an N-endpoint bundle's), each row's prompt beside its
    decision. `edge_quality`: the logged quality of each row's first endpoint where it runs on the
    device (NaN where unknown); `rejected`: the share of that endpoint's logged answers the acceptance
    check rejects (NaN without one), as drift compares them with requests run on the device first."""
    novelty = [d.novelty for d in decisions]
    return DriftReference.build(
        model_version=model_version,
        score=[d.score for d in decisions],
        precisions=[d.precision for d in decisions],
        zones=[d.zone for d in decisions],
        prompt_chars=[len(p) for p in prompts],
        n_tokens=[d.n_tokens for d in decisions],
        novelty=None if any(n is None for n in novelty) else novelty,
        edge_quality=edge_quality,
        rejected=rejected,
        source=source,
    )
