"""One bundle's routing: scores -> zones -> Decisions, with the unfamiliar-prompt policy and the
rule table whenever the bundle cannot serve. serving.router.Router holds one and swaps it."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from serving.contract import (
    CLOUD,
    DEFAULT_EDGE_CONTEXT_TOKENS,
    DEFAULT_MAX_CHARS,
    EDGE,
    FALLBACK,
    first_target,
    zone_for,
)
from serving.decision import Decision
from serving.manifest import Manifest
from serving.rules import RuleRouter

if TYPE_CHECKING:
    from serving.acceptance import Acceptor
    from serving.capabilities import Needs
    from serving.endpoint_routing import EndpointChooser
    from serving.endpoints import Capabilities
    from serving.execute import AcceptCheck
    from serving.json_types import JSONObject
    from serving.policy.budgets import Spending
    from serving.policy.rules import PolicySet
    from serving.scorer import Scorer

log = logging.getLogger("serving")


class Routing:
    """Everything one bundle (or the rule table alone) needs to decide: built once per bundle
    and never changed after, so a Router can swap it in one step (Router.update)."""

    def __init__(
        self,
        scorer: Scorer | None,
        manifest: Manifest | None,
        *,
        degraded_reason: str | None = None,
        unfamiliar_policy: str | None = None,
        acceptor: Acceptor | None = None,
    ) -> None:
        self._scorer = scorer
        self.acceptor = acceptor
        self._warned_no_acceptor = False
        self._warned_no_encoder = False
        self.manifest = manifest
        self.degraded_reason = degraded_reason
        self.edge_context_tokens = manifest.limits.edge_context_tokens if manifest else DEFAULT_EDGE_CONTEXT_TOKENS
        self.model_version = manifest.model_version if manifest else RuleRouter.model_version
        tokenizer = scorer.extractor.tokenizer if scorer is not None else None
        max_chars = scorer.spec.max_chars if scorer is not None else DEFAULT_MAX_CHARS
        self._rules = RuleRouter(tokenizer, max_chars=max_chars)
        self._max_chars = max_chars
        # (lo, hi, their printed forms, tag) by precision, filled on first use (see _band)
        self._bands: dict[str | None, tuple[float, float, str, str, str]] = {}
        self._score_name = "expected gain" if manifest and manifest.score.kind == "expected_gain" else "score"
        # What an unfamiliar prompt gets (serving.novelty.UNFAMILIAR_POLICIES): the caller's choice, else the bundle's.
        self.unfamiliar_policy = unfamiliar_policy or (manifest.novelty.get("policy") if manifest else None)
        # An N-endpoint bundle's choice among its endpoints (serving.endpoint_routing); None for two sides.
        self.chooser: EndpointChooser | None = None
        if manifest is not None and manifest.endpoints is not None and scorer is not None:
            from serving.endpoint_routing import EndpointChooser

            self.chooser = EndpointChooser(manifest.endpoints, self.model_version, max_chars)

    @property
    def endpoint_names(self) -> tuple[str, ...] | None:
        """An N-endpoint bundle's endpoints, in its order; None for a two-endpoint bundle or the rule table."""
        return self.chooser.names if self.chooser is not None else None

    def endpoint_decisions(
        self,
        prompts: list[str],
        precisions: list[str | None],
        policy: PolicySet | None = None,
        metadata: Sequence[Mapping[str, str] | None] | None = None,
        spending: Spending | None = None,
        needs: Sequence[Needs | None] | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> list[Decision]:
        """An N-endpoint bundle's decisions for checked arguments, the policy's verdict and the
        capabilities each request needs among its feasibility (serving.endpoint_routing); when
        scoring fails, degraded decisions by price."""
        chooser, scorer = self.chooser, self._scorer
        if chooser is None or scorer is None:
            raise RuntimeError("endpoint_decisions needs an N-endpoint bundle")
        try:
            expected, n_tokens = scorer.expected(prompts, precisions)
        except Exception as exc:  # the host app must never see a scoring failure
            log.warning("scoring failed, endpoints by price: %r", exc)
            counts = [self._rules.count_tokens(p) for p in prompts]
            note = f"degraded: scoring failed: {exc!r}"[:300]
            return chooser.degraded(prompts, precisions, counts, note, policy, metadata, spending, needs, capabilities)
        return chooser.decisions(
            prompts, precisions, expected, n_tokens, policy, metadata, spending, needs, capabilities
        )

    @property
    def degraded(self) -> bool:
        return self._scorer is None

    @property
    def stages(self) -> "RouteStages | None":
        """The stages route() runs on this bundle, for profiling (RouteStages); None when
        degraded (the rule table decides)."""
        return None if self._scorer is None else RouteStages(self)

    @property
    def drift_reference(self) -> bytes | None:
        return None if self._scorer is None else self._scorer.drift_reference

    def model_inputs(self, prompt: str, precision: str | None, privacy: str = "token_ids") -> JSONObject | None:
        """What training needs of a prompt whose text is not kept (serving.outcome_log's privacy
        modes): the scalar inputs this bundle computes for it and either its token ids or, for
        "embedding", its encoder's pooled embedding before the projection, with what identifies
        them. None when degraded, or for "embedding" when the bundle holds no such encoder."""
        if self._scorer is None or self.manifest is None:  # degraded: both or neither (Router)
            return None
        try:
            ids, mask, scalars, _, _ = self._scorer.extractor.prepare([prompt], [precision])
            embedding = self._scorer.pooled_embedding(ids, mask) if privacy == "embedding" else None
        except Exception:  # never let the record cost the request
            return None
        spec = self._scorer.spec
        # What a later training run checks before it uses them (training.token_rows): the
        # same tokenizer (its SHA-256 in this bundle's manifest), token limit and scalars, and
        # for an embedding the same encoder.
        inputs = {
            "model_version": self.model_version,
            "tokenizer_sha256": self.manifest.files.get("tokenizer.json"),
            "max_tokens": spec.max_tokens,
            "add_special_tokens": spec.add_special_tokens,
        }
        names = {"scalars": scalars[0].tolist(), "feature_names": spec.feature_names[: scalars.shape[1]]}
        if privacy != "embedding":
            return {**inputs, "input_ids": ids[0][mask[0] > 0].tolist(), **names}
        if embedding is None:
            self._warn_no_encoder()
            return None
        return {
            **inputs,
            "encoder_sha256": self.manifest.files["encoder.onnx"],
            "embedding": embedding[0].tolist(),
            **names,
        }

    def _warn_no_encoder(self) -> None:
        if not self._warned_no_encoder:
            self._warned_no_encoder = True
            log.warning(
                'OutcomeLog(privacy="embedding"): bundle %s holds no encoder before its projection '
                "(encoder.onnx; a static-tier bundle carries it when trained with `--set bundle_encoder=true`):"
                " its requests are logged without model inputs, and no training can use them",
                self.model_version,
            )

    def learned_accept(self, prompt: str) -> AcceptCheck | None:
        """accept="learned" for one request: a callable(answer) -> Verdict, or None (no check)
        when this bundle has no acceptance model."""
        acceptor = self.acceptor
        if acceptor is None:
            if not self._warned_no_acceptor:
                self._warned_no_acceptor = True
                why = self.degraded_reason or (self.manifest.acceptance.get("reason") if self.manifest else None)
                log.warning(
                    'accept="learned": bundle %s has no acceptance model (%s); edge answers are not checked',
                    self.model_version,
                    why or "trained before acceptance checks",
                )
            return None
        return lambda answer: acceptor.check(prompt, answer)

    def decisions(self, prompts: list[str], precisions: list[str | None]) -> list[Decision]:
        """Decisions for checked arguments; the rule table decides whenever scoring cannot."""
        if self._scorer is None:
            return [
                self._rules.decide(p, q, degraded=True, note=f"degraded: {self.degraded_reason}")
                for p, q in zip(prompts, precisions)
            ]
        if self.chooser is not None:
            return self.endpoint_decisions(prompts, precisions)
        try:
            scores, n_tokens, heads, novelty = self._scorer.score_batch(prompts, precisions)
        except Exception as exc:  # the host app must never see a scoring failure
            log.warning("scoring failed, rule table decides: %r", exc)
            return [
                self._rules.decide(p, q, degraded=True, note=f"degraded: scoring failed: {exc!r}"[:300])
                for p, q in zip(prompts, precisions)
            ]
        decisions = [
            self._decide(p, q, s, round(n), h) for p, q, s, n, h in zip(prompts, precisions, scores, n_tokens, heads)
        ]
        if novelty is not None:
            decisions = [self._familiar(d, p, v) for d, p, v in zip(decisions, prompts, novelty)]
        return decisions

    def _familiar(self, decision: Decision, prompt: str, novelty: float) -> Decision:
        """Set the decision's novelty; an unfamiliar prompt gets the unfamiliar policy. Prompts
        over the edge context limit stay on the cloud whatever the policy."""
        decision.novelty, decision.unfamiliar = novelty, novelty > 1.0
        if not decision.unfamiliar or self.unfamiliar_policy == "learned":
            if decision.unfamiliar:
                decision.reason += f"; unfamiliar prompt (novelty {novelty:.2f}), learned zone kept"
            return decision
        note = f"unfamiliar prompt (novelty {novelty:.2f} > 1)"
        if decision.n_tokens > self.edge_context_tokens:
            decision.reason = f"{note}; {decision.reason}"
            return decision
        if self.unfamiliar_policy == "rule_table":
            ruled = self._rules.decide(prompt, decision.precision, note=note)
            decision.zone, decision.target = ruled.zone, ruled.target
            decision.reason = f"{note}: {ruled.reason}"
            return decision
        decision.zone, decision.target = FALLBACK, first_target(FALLBACK)
        decision.reason = f"{note}: edge first, cloud fallback (learned: {decision.reason})"
        return decision

    def _decide(
        self, prompt: str, precision: str | None, score: float, n_tokens: int, heads: tuple[float, ...]
    ) -> Decision:
        band = self._bands.get(precision) or self._band(precision)
        lo, hi, lo_text, hi_text, tag = band
        zone = zone_for(score, lo, hi)
        if zone == CLOUD:
            reason = f"{self._score_name} {score:.3f} > {hi_text} ({tag})"
        elif zone == EDGE:
            reason = f"{self._score_name} {score:.3f} < {lo_text} ({tag})"
        else:
            reason = f"{self._score_name} {score:.3f} in [{lo_text}, {hi_text}] ({tag}): edge first, cloud fallback"
        if n_tokens > self.edge_context_tokens:  # said even when the score alone sends it to the cloud
            zone = CLOUD
            reason = f"~{n_tokens} tokens exceed the edge context limit of {self.edge_context_tokens}; {reason}"
        truncated = len(prompt) > self._max_chars
        if truncated:
            reason += f"; features from the first {self._max_chars} characters"
        p_edge: float | None
        p_cloud: float | None
        expected: dict[str, float] | None
        if len(heads) == 2:
            p_edge, p_cloud = heads
            expected = {EDGE: p_edge, CLOUD: p_cloud}
        else:
            p_edge = p_cloud = expected = None
        return Decision(
            target=first_target(zone),
            zone=zone,
            score=score,
            reason=reason,
            degraded=False,
            model_version=self.model_version,
            precision=precision,
            n_tokens=n_tokens,
            truncated=truncated,
            p_edge=p_edge,
            p_cloud=p_cloud,
            expected=expected,
        )

    def _band(self, precision: str | None) -> tuple[float, float, str, str, str]:
        """(lo, hi) of a precision with their printed forms and its tag, kept for the next call."""
        if self.manifest is None:  # only a scored prompt has a band, and only a bundle scores
            raise RuntimeError("a degraded Routing has no score bands")
        lo, hi = self.manifest.band(precision)
        band = self._bands[precision] = (lo, hi, f"{lo:.3f}", f"{hi:.3f}", precision or "undeclared precision")
        return band


class RouteStages:
    """The stages one route() call runs on a bundle, as the callables it calls, so that a
    profiler (`make bench`) can time each alone and inside route() without reaching into the
    SDK. Nothing here is on route()'s path: route() pays for none of it unless `timed` is active.

    features(prompts, precisions) -> (ids, mask, scalars, heads, n_tokens): the cut, the
        tokenizer, the text statistics and the input arrays (FeatureExtractor.prepare)
    encoder(ids, mask, texts) -> embeddings: the staged layout's encoder; None when fused
    model(output_names, feeds, None) -> outputs: the onnxruntime call (Scorer.run_model)
    decision(prompt, precision, score, n_tokens, head_probabilities) -> Decision: zone,
        reason and the Decision of one scored prompt
    scorer: the Scorer they belong to (spec, extractor, outputs, calibrators)
    names: the stages route() runs, in order
    What route() does between them (argument checks, calibration, familiarity) is no stage.
    """

    def __init__(self, routing: Routing) -> None:
        scorer = routing._scorer
        if scorer is None:  # Routing.stages builds none when degraded
            raise ValueError("a degraded Routing runs the rule table: it has no stages")
        extractor = scorer.extractor
        self.scorer = scorer
        # where route() finds each stage: (the object it is an attribute of, its name)
        self._owners: dict[str, tuple[object, str]] = {"features": (extractor, "prepare")}
        if not scorer.spec.fused:  # the staged layout's encoder runs between features and model
            self._owners["encoder"] = (extractor, "encoder")
        self._owners.update(model=(scorer, "run_model"), decision=(routing, "_decide"))
        self.names = tuple(self._owners)
        self.features, self.model, self.decision = extractor.prepare, scorer.run_model, routing._decide
        self.encoder = extractor.encoder if "encoder" in self._owners else None

    @contextmanager
    def timed(self, record: Callable[[str, int], object]) -> Iterator[None]:
        """While the block runs, each call of a stage on this bundle also calls
        record(stage name, nanoseconds it took): route() and route_batch() calls, from any
        thread. Profiling only: the stages are swapped on the bundle's objects for the block's
        duration, and put back as they were when it ends."""
        saved = {name: owner.__dict__.get(attr) for name, (owner, attr) in self._owners.items()}
        for name, (owner, attr) in self._owners.items():
            setattr(owner, attr, _recorded(name, getattr(owner, attr), record))
        try:
            yield
        finally:
            for name, (owner, attr) in self._owners.items():
                if saved[name] is None:
                    delattr(owner, attr)  # a method: the class's own is found again
                else:
                    setattr(owner, attr, saved[name])


def _recorded(name: str, stage: Callable[..., Any], record: Callable[[str, int], object]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        start = perf_counter_ns()
        out = stage(*args, **kwargs)
        record(name, perf_counter_ns() - start)
        return out

    return call
