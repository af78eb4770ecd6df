"""One bundle's routing: scores -> the chooser (serving.routing._chooser) -> Decisions, with the rule table
whenever the bundle cannot serve. serving.routing._router.Router holds one and swaps it."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from serving._contract import DEFAULT_EDGE_CONTEXT_TOKENS, DEFAULT_MAX_CHARS
from serving.conversations._switch import PRICED, Stickiness
from serving.endpoints._record import two_endpoints
from serving.routing._chooser import Bands, Choice, Chooser
from serving.routing._decision import Decision
from serving.routing._rule_table import RuleRouter
from serving.scoring._scorer import Scores

if TYPE_CHECKING:
    from serving._json_types import JSONObject
    from serving.conversations._state import ConversationState
    from serving.execution._execute import AcceptCheck
    from serving.policy._budgets import Spending
    from serving.policy._rules import PolicySet
    from serving.routing._request import Request
    from serving.scoring._acceptance import Acceptor
    from serving.scoring._scorer import Scorer

log = logging.getLogger("serving")


class Routing:
    """Everything one bundle (or the rule table alone) needs to decide: built once per bundle
    and never changed after, so a Router can swap it in one step (Router.update)."""

    def __init__(
        self,
        scorer: Scorer | None,
        *,
        degraded_reason: str | None = None,
        unfamiliar_policy: str | None = None,
        acceptor: Acceptor | None = None,
    ) -> None:
        self._scorer = scorer
        self.acceptor = acceptor
        self._warned_no_acceptor = self._warned_no_encoder = False
        self.manifest = manifest = scorer.manifest if scorer is not None else None
        self.degraded_reason = degraded_reason
        self.degraded = scorer is None
        self.drift_reference = scorer.drift_reference if scorer is not None else None
        self.edge_context_tokens = manifest.limits.edge_context_tokens if manifest else DEFAULT_EDGE_CONTEXT_TOKENS
        self.model_version = manifest.model_version if manifest else RuleRouter.model_version
        tokenizer = scorer.extractor.tokenizer if scorer is not None else None
        max_chars = scorer.spec.max_chars if scorer is not None else DEFAULT_MAX_CHARS
        self._rules = RuleRouter(tokenizer, max_chars=max_chars)
        # `text`'s length in the bundle's tokens (the rule table's count without a bundle).
        self.count_tokens = self._rules.count_tokens
        # What an unfamiliar prompt gets (serving.scoring._novelty.UNFAMILIAR_POLICIES): the caller's choice, else the bundle's.
        self.unfamiliar_policy = unfamiliar_policy or (manifest.novelty.get("policy") if manifest else None)
        section = manifest.endpoints if manifest is not None else None
        rule: Bands | Choice
        if section is not None:
            endpoints, rule = tuple(section.spec), Choice(section, unfamiliar_policy=self.unfamiliar_policy)
        else:
            endpoints = two_endpoints(self.edge_context_tokens)
            rule = Bands(
                manifest,
                self._rules,
                edge_context_tokens=self.edge_context_tokens,
                unfamiliar_policy=self.unfamiliar_policy,
            )
        self.chooser = Chooser(endpoints, rule, model_version=self.model_version, max_chars=max_chars)
        # The answer's expected tokens the calls' prices count: an N-endpoint bundle's own (what its choice priced).
        self.output_tokens = section.output_tokens if section is not None else 0.0

    @property
    def endpoint_names(self) -> tuple[str, ...]:
        """The chooser's, in the bundle's order (Router.endpoint_names)."""
        return self.chooser.names

    def decisions(
        self,
        requests: Sequence[Request],
        policy: PolicySet | None = None,
        spending: Spending | None = None,
        conversations: Sequence[ConversationState | None] | None = None,
        stickiness: Stickiness = PRICED,
    ) -> list[Decision]:
        """Decisions for checked requests, `policy` applied, switch costs weighed; when the bundle cannot
        score, the rule table (two endpoints) or price order (N endpoints) decides, `degraded` set."""
        scores = self.scores(requests)
        return self.chooser.decisions(requests, scores, policy, spending, conversations, stickiness, self.output_tokens)

    def scores(self, requests: Sequence[Request]) -> Scores:
        """What the bundle's graph says of the requests; a failure is a degraded Scores, never raised."""
        scorer = self._scorer
        prompts = [r.text for r in requests]
        if scorer is None:
            note = f"degraded: {self.degraded_reason}"
        else:
            try:
                return scorer.score(prompts, [r.precision for r in requests])
            except Exception as exc:  # the host app must never see a scoring failure
                log.warning("scoring failed, the bundle's fallback decides: %r", exc)
                note = f"degraded: scoring failed: {exc!r}"[:300]
        return Scores([self._rules.count_tokens(p) for p in prompts], note=note)

    @property
    def stages(self) -> RouteStages | None:
        """The bundle's RouteStages (profiling); None when degraded (the rule table decides)."""
        return None if self._scorer is None else RouteStages(self)

    def model_inputs(self, prompt: str, precision: str | None, privacy: str = "token_ids") -> JSONObject | None:
        """What training needs of a prompt whose text is not kept (serving.monitoring._outcome_log's privacy modes):
        this bundle's scalar inputs for it and its token ids or, for "embedding", its encoder's pooled embedding
        before the projection, with what identifies them. None when degraded, or for "embedding" without one."""
        if self._scorer is None or self.manifest is None:  # degraded: neither (the manifest is the scorer's)
            return None
        try:
            ids, mask, scalars, _, _ = self._scorer.extractor.prepare([prompt], [precision])
            embedding = self._scorer.pooled_embedding(ids, mask) if privacy == "embedding" else None
        except Exception:  # never let the record cost the request
            return None
        spec = self._scorer.spec
        # What a later training run checks before using them (training.token_rows): the same tokenizer
        # (its SHA-256 in this bundle's manifest), token limit and scalars, and for an embedding the same encoder.
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
            if not self._warned_no_encoder:
                self._warned_no_encoder = True
                log.warning(
                    'OutcomeLog(privacy="embedding"): bundle %s holds no encoder before its projection '
                    "(encoder.onnx; a static-tier bundle carries it when trained with `--set bundle_encoder=true`):"
                    " its requests are logged without model inputs, and no training can use them",
                    self.model_version,
                )
            return None
        encoder = {"encoder_sha256": self.manifest.files["encoder.onnx"], "embedding": embedding[0].tolist()}
        return {**inputs, **encoder, **names}

    def learned_accept(self, prompt: str) -> AcceptCheck | None:
        """accept="learned" for one request: a callable(answer) -> Verdict, or None without an acceptance model."""
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


class RouteStages:
    """The stages one route() call runs on a bundle, as callables a profiler (`make bench`) can time alone and
    inside route() without reaching into the SDK; route() pays for none of it unless `timed` is active.

    features(prompts, precisions) -> (ids, mask, scalars, heads, n_tokens): the cut, the
        tokenizer, the text statistics and the input arrays (FeatureExtractor.prepare)
    encoder(ids, mask, texts) -> embeddings: the staged layout's encoder; None when fused
    model(output_names, feeds, None) -> outputs: the onnxruntime call (Scorer.run_model)
    decision(requests, scores, policy=None, spending=None) -> Decisions: the chooser (serving.routing._chooser)
    scorer: the Scorer they belong to (spec, extractor, outputs, calibrators)
    names: the stages route() runs, in order
    What route() does between them (argument checks, calibration, familiarity) is no stage."""

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
        self._owners.update(model=(scorer, "run_model"), decision=(routing.chooser, "decisions"))
        self.names = tuple(self._owners)
        self.features, self.model, self.decision = extractor.prepare, scorer.run_model, routing.chooser.decisions
        self.encoder = extractor.encoder if "encoder" in self._owners else None

    @contextmanager
    def timed(self, record: Callable[[str, int], object]) -> Iterator[None]:
        """While the block runs, each stage call on this bundle (by route() or route_batch(), any thread) also calls
        record(stage name, its nanoseconds). Profiling only: stages are swapped on the bundle's objects till it ends."""
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
