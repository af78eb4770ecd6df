"""The one row type of evaluation: a set of requests with their outcomes and a router's verdicts,
as aligned arrays. Training builds it from its validation and test splits, `make evaluate`
from the SDK's own decisions; every figure and threshold reads it."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import numpy as np

from serving._contract import CLOUD, zone_for
from serving.routing._rule_table import infer_rule_domain


def _objects(values) -> np.ndarray:
    return np.array(list(values), dtype=object)


def zones_at(scores, lo: float, hi: float) -> np.ndarray:
    """The zone of each score at these thresholds (serving's zone_for)."""
    return _objects(zone_for(s, lo, hi) for s in scores)


def decide(router, prompts, precisions, *, batch_size: int | None = None, on_batch=None) -> tuple[list, list[int]]:
    """The SDK's decisions of these prompts (Router.route_batch, `batch_size` at a time, None: all at
    once) and the rows they are of: a batch that route_batch refuses with NoFeasibleEndpoint (a
    prompt no endpoint's context holds) is decided one row at a time, leaving such rows out."""
    from serving.policy import NoFeasibleEndpoint

    prompts, precisions = list(prompts), list(precisions)
    size = batch_size or max(len(prompts), 1)
    decisions, kept = [], []
    for start in range(0, len(prompts), size):
        rows = range(start, min(start + size, len(prompts)))
        try:
            decisions += router.route_batch(prompts[start : start + size], precisions[start : start + size])
            kept += rows
        except NoFeasibleEndpoint:
            for i in rows:
                with contextlib.suppress(NoFeasibleEndpoint):
                    decisions.append(router.route(prompts[i], precision=precisions[i]))
                    kept.append(i)
        if on_batch:
            on_batch(len(rows))
    return decisions, kept


@dataclass(frozen=True)
class Rows:
    """Everything every policy sees for a set of requests."""

    request_ids: np.ndarray
    prompts: np.ndarray
    precisions: np.ndarray  # object: "exact" / "standard" / "tolerant" / None
    domains: np.ndarray  # the log's domain label (None when absent)
    sources: np.ndarray
    n_tokens: np.ndarray  # as the SDK estimates them
    q_edge: np.ndarray
    q_cloud: np.ndarray
    needed: np.ndarray  # the cloud-needed label
    scores: np.ndarray  # the learned router's score (expected gain, or P(cloud needed))
    zones: np.ndarray | None = None  # the learned router's zone (with_zones, or the SDK's)
    p_edge: np.ndarray | None = None  # P(edge good), P(cloud good) when the router has those heads
    p_cloud: np.ndarray | None = None
    novelty: np.ndarray | None = None  # the familiarity measure, when the router has one
    unfamiliar: np.ndarray | None = None
    inferred_domains: np.ndarray | None = None  # the rule table's domain from the text (with_inferred_domains)
    # Share of the request's logged edge answers the acceptance check rejects; NaN where the
    # logs hold no answer (evaluation.fallback.Catch.for_rows); None without a check.
    rejected: np.ndarray | None = None

    @classmethod
    def build(
        cls,
        *,
        prompts,
        precisions,
        domains,
        sources,
        n_tokens,
        q_edge,
        q_cloud,
        needed,
        scores,
        zones=None,
        request_ids=None,
        probabilities: dict | None = None,
    ) -> "Rows":
        """Aligned arrays from sequences; `probabilities` maps a head ("edge", "cloud") to its values."""
        prompts = _objects(prompts)
        ids = _objects(request_ids) if request_ids is not None else np.full(len(prompts), None, dtype=object)
        heads = {k: np.asarray(v, float) for k, v in (probabilities or {}).items() if k in ("edge", "cloud")}
        return cls(
            ids,
            prompts,
            _objects(precisions),
            _objects(domains),
            _objects(sources),
            np.asarray(n_tokens, float),
            np.asarray(q_edge, float),
            np.asarray(q_cloud, float),
            np.asarray(needed, np.int8),
            np.asarray(scores, float),
            _objects(zones) if zones is not None else None,
            heads.get("edge"),
            heads.get("cloud"),
        )

    @classmethod
    def from_frame(cls, frame, *, scores, n_tokens, zones=None, probabilities: dict | None = None) -> "Rows":
        """From prepared log rows (request_id, prompt, precision, domain, source, qualities, label)."""
        from data.prepare import missing_text_as_none

        frame = missing_text_as_none(frame.copy())
        return cls.build(
            request_ids=frame["request_id"],
            prompts=frame["prompt"],
            precisions=frame["precision"],
            domains=frame["domain"],
            sources=frame["source"],
            n_tokens=n_tokens,
            q_edge=frame["edge_quality"],
            q_cloud=frame["cloud_quality"],
            needed=frame["label"],
            scores=scores,
            zones=zones,
            probabilities=probabilities,
        )

    @classmethod
    def route(cls, router, frame, *, batch_size: int = 256, on_batch=None) -> "Rows":
        """Prepared log rows routed by the SDK's `route_batch`: the score, zone and token count clients get."""
        decisions, _ = decide(router, frame["prompt"], frame["precision"], batch_size=batch_size, on_batch=on_batch)
        heads = {"edge": [d.p_edge for d in decisions], "cloud": [d.p_cloud for d in decisions]}
        heads = heads if all(d.p_edge is not None for d in decisions) else None
        rows = cls.from_frame(
            frame,
            scores=[d.score for d in decisions],
            n_tokens=[d.n_tokens for d in decisions],
            zones=[d.zone for d in decisions],
            probabilities=heads,
        )
        if decisions and all(d.novelty is not None for d in decisions):
            rows = rows.with_novelty([d.novelty for d in decisions])
        return rows

    def __len__(self) -> int:
        return len(self.prompts)

    def subset(self, mask) -> "Rows":
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{name: v[mask] for name, v in values.items() if v is not None})

    def with_zones(self, band, *, edge_context_tokens: int, unfamiliar_zones=None) -> "Rows":
        """These rows with the zone the SDK gives each (serving.routing._router): its precision's band
        (`band(precision)` -> (lo, hi)), the cloud for prompts over the edge context limit, and for an
        unfamiliar prompt the zone of the unfamiliar policy (`unfamiliar_zones`, None: the learned zone)."""
        zones = [zone_for(s, *band(p)) for s, p in zip(self.scores, self.precisions)]
        if self.unfamiliar is not None and unfamiliar_zones is not None:
            zones = [z if not u else alt for z, u, alt in zip(zones, self.unfamiliar, unfamiliar_zones)]
        zones = [CLOUD if round(n) > edge_context_tokens else z for z, n in zip(zones, self.n_tokens)]
        return dataclasses.replace(self, zones=_objects(zones))

    def with_novelty(self, novelty) -> "Rows":
        novelty = np.asarray(novelty, float)
        return dataclasses.replace(self, novelty=novelty, unfamiliar=novelty > 1.0)

    def with_rejections(self, rejected) -> "Rows":
        return dataclasses.replace(self, rejected=None if rejected is None else np.asarray(rejected, float))

    def with_inferred_domains(self) -> "Rows":
        """With the rule table's text-inferred domain: a keyword scan, done once on demand and kept by `subset`."""
        if self.inferred_domains is not None:
            return self
        return dataclasses.replace(self, inferred_domains=_objects(infer_rule_domain(p) for p in self.prompts))
