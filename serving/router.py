"""The learned router: bundle in, Decision out; the rule table whenever the bundle cannot serve.

A Router holds one bundle's Routing (serving.routing) and can replace it while the app runs
(`update`): the new bundle is read, verified (checksums, values, the pinned signature),
loaded and tried before the switch, which is one reference assignment, so every decision
comes wholly from the old or wholly from the new bundle. A failed or refused update keeps
the current bundle and says why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Sequence

import serving.telemetry as telemetry
from serving.bundle import BundleError, read_bundle
from serving.capabilities import check_capabilities, check_needs, rule_out_sides, ruled_out
from serving.contract import CLOUD, EDGE
from serving.decision import Decision
from serving.routing import Routing
from serving.validation import check_batch, check_precision, check_prompt

if TYPE_CHECKING:
    from typing import Literal, TypedDict

    from serving.acceptance import Acceptor
    from serving.capabilities import Needs
    from serving.drift import DriftReference
    from serving.endpoints import Capabilities
    from serving.execute import AcceptCheck, EdgePool, Execution, Subject
    from serving.manifest import Manifest
    from serving.outcome_log import OutcomeLog
    from serving.policy.budgets import Spending
    from serving.policy.rules import PolicySet
    from serving.routing import RouteStages
    from serving.signing import PinnedKey
    from serving.traffic import Traffic

    class _LoadOptions(TypedDict):
        """How a Router loads its bundles: kept so that update() loads the next one alike."""

        threads: int
        unfamiliar_policy: str | None
        public_key: PinnedKey | None

    class _AttemptOptions(TypedDict):
        """What execute() and aexecute() both pass on to serving.execute."""

        edge_context_tokens: int
        edge_timeout_s: float | None
        verify_edge_zone: bool

    class _ExecuteOptions(_AttemptOptions):
        """execute() also names the pool its timed edge calls run on."""

        edge_pool: EdgePool | None


logger = logging.getLogger("serving")


@dataclass(frozen=True)
class Update:
    """What `Router.update` did: `updated` or not, and why."""

    updated: bool
    reason: str
    model_version: str


def _policy(policy: PolicySet | str | Path | None, routing: Routing | None = None) -> PolicySet | None:
    """A PolicySet, loaded when given as a path (PolicyFileError for a bad file) for the endpoints
    of `routing`'s bundle (an N-endpoint bundle's names, else edge and cloud); PolicyFileError
    when it names other endpoints than an N-endpoint bundle's."""
    if policy is None:
        return None
    from serving.policy.rules import ENDPOINTS, PolicyFileError, PolicySet

    names = routing.endpoint_names if routing is not None else None
    if isinstance(policy, (str, Path)):
        policy = PolicySet.load(policy, endpoints=names or ENDPOINTS)
    if isinstance(policy, PolicySet):
        if routing is not None and routing.chooser is not None:
            routing.chooser.check_policy(policy)
        elif routing is not None and policy.endpoints != ENDPOINTS:
            raise PolicyFileError(
                f"{policy.source}: the policy is for endpoints {', '.join(policy.endpoints)}; this router "
                f"routes between {', '.join(ENDPOINTS)}"
            )
        return policy
    raise TypeError(
        f"policy must be a serving.policy.PolicySet or a path to a policy file, got {type(policy).__name__}"
    )


def _routing(path: str | Path, *, threads: int, unfamiliar_policy: str | None, public_key: PinnedKey | None) -> Routing:
    """A verified bundle's Routing; BundleError for anything wrong with the bundle."""
    from serving.acceptance import Acceptor
    from serving.scorer import Scorer

    try:
        bundle = read_bundle(path, public_key=public_key)
        scorer = Scorer(bundle, threads=threads)
        acceptor = Acceptor.from_bundle(bundle, scorer)
    except Exception as exc:  # anything wrong with the bundle, including onnxruntime refusing it
        raise exc if isinstance(exc, BundleError) else BundleError(f"cannot load bundle {path}: {exc}"[:500]) from exc
    return Routing(scorer, scorer.manifest, unfamiliar_policy=unfamiliar_policy, acceptor=acceptor)


def _needs(
    needs: object, capabilities: object
) -> tuple[Needs | None, Mapping[str, Capabilities | None] | None]:  # object: the caller's values, checked
    """(needs, capabilities) as given, checked (serving.capabilities.check_needs / check_capabilities);
    (None, None) at once when neither is given."""
    if needs is None and capabilities is None:
        return None, None
    return check_needs(needs), check_capabilities(capabilities)


def _metadata(metadata: object) -> Mapping[str, str] | None:
    if metadata is None:
        return None
    from serving.policy.rules import check_metadata

    return check_metadata(metadata)


class Router:
    """Routes prompts with a trained bundle. Build it with `Router.load(path)`.

    policy: a serving.policy.PolicySet, or the path of a policy file (docs/policies.md): its rules
    force, forbid or prefer endpoints for each request before the model's decision stands, and
    execute() never calls an endpoint they forbid. Replace it while the app runs by assigning
    `router.policy` (serving.watcher.PolicyWatcher does so when the file changes).
    """

    def __init__(
        self,
        routing: Routing,
        *,
        threads: int = 1,
        unfamiliar_policy: str | None = None,
        public_key: PinnedKey | None = None,
        traffic: Traffic | None = None,
        policy: PolicySet | str | Path | None = None,
    ) -> None:
        from serving.traffic import Traffic

        self._routing = routing
        self._options: _LoadOptions = {
            "threads": threads,
            "unfamiliar_policy": unfamiliar_policy,
            "public_key": public_key,
        }
        self._traffic = traffic or Traffic(None)
        self._policy = _policy(policy, routing)
        # What each budget holder spent (serving.policy.budgets); kept across policy reloads.
        self._spending: Spending | None = None

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        strict: bool = False,
        threads: int = 1,
        unfamiliar_policy: str | None = None,
        public_key: PinnedKey | None = None,
        log: OutcomeLog | None = None,
        explore_rate: float = 0.0,
        shadow_rate: float = 0.0,
        seed: int | None = None,
        policy: PolicySet | str | Path | None = None,
    ) -> "Router":
        """Load and verify a bundle folder (serving.bundle says what is checked).

        strict=False: a missing, truncated, tampered, invalid or unknown bundle gives a router
        that runs on the rule table, with one warning and `degraded_reason` set; it never raises.
        strict=True: the same problems raise BundleError, and only BundleError.
        unfamiliar_policy: what a prompt unlike the training data gets (serving.novelty.UNFAMILIAR_POLICIES:
        edge_with_cloud_fallback, rule_table, learned); default: the bundle's own setting.
        public_key: pin the team's Ed25519 key (a path to router.pub, or its bytes): a bundle
        without that key's signature counts as tampered (serving.signing).
        log: a serving.outcome_log.OutcomeLog; every execute() then appends its outcome record.
        explore_rate, shadow_rate, seed: exploration and shadow runs (serving.traffic); both need a log.
        policy: a PolicySet or a policy file's path (see Router); a bad file raises PolicyFileError
        whatever `strict` says: routing private data without its rules is never a fallback.
        """
        from serving.novelty import UNFAMILIAR_POLICIES
        from serving.traffic import Traffic

        traffic = Traffic(log, explore_rate=explore_rate, shadow_rate=shadow_rate, seed=seed)
        if unfamiliar_policy is not None and unfamiliar_policy not in UNFAMILIAR_POLICIES:
            raise ValueError(f"unfamiliar_policy={unfamiliar_policy!r}; use one of {', '.join(UNFAMILIAR_POLICIES)}")
        options: _LoadOptions = {"threads": threads, "unfamiliar_policy": unfamiliar_policy, "public_key": public_key}
        try:
            routing = _routing(path, **options)
        except BundleError as error:
            if strict:
                raise
            logger.warning("routing bundle unavailable, using the rule table: %s", error)
            routing = Routing(None, None, degraded_reason=str(error))
        return cls(routing, **options, traffic=traffic, policy=policy)

    def update(self, path: str | Path, *, force: bool = False) -> Update:
        """Switch to the bundle at `path` once it is fully verified, loaded and has routed a
        prompt; never raises. Refused: a bundle that fails any check, and one older than the
        current (its `created_at`) unless `force`. The current bundle then stays."""
        current = self._routing
        try:
            new = _routing(path, **self._options)
            assert new.manifest is not None  # _routing builds it from a loaded bundle's Scorer
            if self._policy is not None:
                _policy(self._policy, new)  # the policy must name the new bundle's endpoints
            created, now = new.manifest.created_at, current.manifest.created_at if current.manifest else ""
            if created < now and not force:
                return self._refused(
                    f"{path} is older ({created}) than the current bundle ({now}): a downgrade; "
                    "pass force=True to allow it"
                )
            new.decisions(["What is 2 + 2?"], [None])  # it must route before it serves
        except Exception as exc:  # the app keeps routing with the current bundle
            return self._refused(f"{path} not loaded: {exc}"[:500])
        self._routing = new  # one reference: a decision comes wholly from the old or the new bundle
        logger.info("routing bundle updated to %s from %s", new.model_version, path)
        return Update(True, f"now {new.model_version} from {path}", new.model_version)

    def _refused(self, reason: str) -> Update:
        logger.warning("routing bundle update refused: %s", reason)
        return Update(False, reason, self._routing.model_version)

    # What the current bundle says.
    @property
    def manifest(self) -> Manifest | None:
        return self._routing.manifest

    @property
    def degraded(self) -> bool:
        return self._routing.degraded

    @property
    def degraded_reason(self) -> str | None:
        return self._routing.degraded_reason

    @property
    def edge_context_tokens(self) -> int:
        return self._routing.edge_context_tokens

    @property
    def model_version(self) -> str:
        return self._routing.model_version

    @property
    def unfamiliar_policy(self) -> str | None:
        return self._routing.unfamiliar_policy

    @property
    def stages(self) -> RouteStages | None:
        """The stages route() runs on the current bundle, as callables, with a way to time them
        inside route() calls (serving.routing.RouteStages; what `make bench` reports); None when
        degraded. For profiling: route() does not pay for it."""
        return self._routing.stages

    @property
    def acceptor(self) -> Acceptor | None:
        """The bundle's learned acceptance check (serving.acceptance.Acceptor), or None when the
        bundle has none (trained without edge answers, older, or the router is degraded)."""
        return self._routing.acceptor

    def drift_reference(self) -> DriftReference | None:
        """The summary of its training traffic the current bundle carries (serving.drift: what
        drift_report compares recent requests with); None when it carries none (trained before
        drift references) or the router is degraded."""
        raw = self._routing.drift_reference
        if raw is None:
            return None
        from serving.drift import DriftReference

        return DriftReference.from_bytes(raw)

    @property
    def policy_endpoints(self) -> tuple[str, ...]:
        """The endpoint names a policy for this router names: an N-endpoint bundle's, else edge and
        cloud (serving.policy.ENDPOINTS)."""
        from serving.policy.rules import ENDPOINTS

        return self._routing.endpoint_names or ENDPOINTS

    @property
    def policy(self) -> PolicySet | None:
        """The policy applied to every decision, or None."""
        return self._policy

    @policy.setter
    def policy(self, policy: PolicySet | None) -> None:
        """Replace the policy: one reference, so each decision follows wholly the old or the new one."""
        from serving.policy.rules import PolicySet

        if policy is not None and not isinstance(policy, PolicySet):
            raise TypeError(f"policy must be a serving.policy.PolicySet or None, got {type(policy).__name__}")
        self._policy = _policy(policy, self._routing)

    def record_spend(self, metadata: Mapping[str, str] | None, amount: float) -> None:
        """Count what a request cost against the budgets its metadata names (the metadata keys the
        policy's `budget` conditions read; docs/policies.md#budgets). RoutedChat and the proxy call
        it with each answer's estimated cost; an app calling execute() with its own callables calls
        it with what the call cost. Nothing is counted without a policy that has budgets.
        ValueError for an amount that is not a finite number >= 0."""
        from serving.policy.budgets import Spending, check_amount, limits_of

        check_amount(amount)
        policy, metadata = self._policy, _metadata(metadata)
        if policy is None or not policy.budget_keys or not metadata:
            return
        if self._spending is None:
            self._spending = Spending()
        self._spending.add(metadata, amount, policy.budget_keys, limits=limits_of(policy))

    @property
    def spending(self) -> Spending | None:
        """The budgets' ledger (serving.policy.budgets.Spending), None before anything was spent."""
        return self._spending

    def route(
        self,
        prompt: str,
        *,
        precision: str | None = None,
        metadata: Mapping[str, str] | None = None,
        needs: Needs | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> Decision:
        """Where one prompt should run; see Decision. metadata: the request's metadata the policy's
        rules read (feature, user tier, declared privacy, ...), str to str. needs: what the request
        needs of its endpoint (serving.capabilities.Needs: images, tools, json; needs_of reads a
        chat request): an endpoint lacking it is never chosen nor called. capabilities: the
        endpoints' capabilities by name (serving.endpoints.Capabilities; None for unknown), default
        an N-endpoint bundle's specs'; a two-endpoint router knows none unless given them.
        NoFeasibleEndpoint (serving.policy) when the policy or the needs leave no endpoint."""
        check_prompt(prompt)
        needs, capabilities = _needs(needs, capabilities)
        return self._decide(self._routing, prompt, check_precision(precision), _metadata(metadata), needs, capabilities)

    def _decide(
        self,
        routing: Routing,
        prompt: str,
        precision: str | None,
        metadata: Mapping[str, str] | None,
        needs: Needs | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> Decision:
        """One checked prompt's decision on `routing`, the policy applied: after the model for two
        endpoints, among the feasible endpoints for an N-endpoint bundle (serving.endpoint_routing);
        endpoints lacking what `needs` asks are ruled out (serving.capabilities)."""
        policy, spending = self._policy, self._spending
        if routing.chooser is not None:
            wants = None if needs is None else [needs]
            return routing.endpoint_decisions([prompt], [precision], policy, [metadata], spending, wants, capabilities)[
                0
            ]
        decision = routing.decisions([prompt], [precision])[0]
        if policy is not None:
            decision = policy.apply(decision, prompt, metadata, spending, needs)
        return decision if needs is None or not capabilities else _sides_ruled_out(decision, needs, capabilities)

    def route_batch(
        self,
        prompts: Sequence[str],
        precisions: Sequence[str | None] | None = None,
        metadata: Sequence[Mapping[str, str] | None] | None = None,
        needs: Sequence[Needs | None] | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> list[Decision]:
        """Decisions for many prompts, scored in one onnxruntime call per model; `metadata` and
        `needs`: one each (or None) per prompt; `capabilities` as route() takes it.
        NoFeasibleEndpoint for the first prompt the policy or its needs leave no endpoint."""
        prompts, precisions = check_batch(prompts, precisions)
        policy = self._policy
        for name, given in (("metadata", metadata), ("needs", needs)):
            if given is not None and len(given) != len(prompts):
                raise ValueError(f"{len(given)} {name} for {len(prompts)} prompts")
        metadatas = [_metadata(m) for m in metadata] if metadata is not None else [None] * len(prompts)
        wants = [_needs(w, None)[0] for w in needs] if needs is not None else [None] * len(prompts)
        capabilities = _needs(None, capabilities)[1]
        routing = self._routing
        if routing.chooser is not None:
            if not prompts:
                return []
            return routing.endpoint_decisions(
                prompts, precisions, policy, metadatas, self._spending, wants, capabilities
            )
        decisions = routing.decisions(prompts, precisions) if prompts else []
        if policy is not None:
            decisions = [
                policy.apply(d, p, m, self._spending, w) for d, p, m, w in zip(decisions, prompts, metadatas, wants)
            ]
        if not capabilities:
            return decisions
        return [d if w is None else _sides_ruled_out(d, w, capabilities) for d, w in zip(decisions, wants)]

    @property
    def log(self) -> OutcomeLog | None:
        """The OutcomeLog execute() writes to, or None."""
        return self._traffic.log

    def feedback(
        self,
        request_id: str,
        *,
        edge_quality: float | None = None,
        cloud_quality: float | None = None,
        outcomes: Mapping[str, float] | None = None,
        source: str | None = None,
    ) -> bool:
        """Record a later outcome of an executed request (a rating, a downstream check, a judge's
        score; qualities in [0, 1]); training joins it to the request. False without a log.
        outcomes: {endpoint: quality}, the N-endpoint spelling (an N-endpoint bundle takes only it,
        naming its endpoints; a two-endpoint router takes {"edge": ..., "cloud": ...} too).
        ValueError for a missing id, a quality outside [0, 1], an endpoint the current bundle does
        not have, or outcomes given with edge_quality / cloud_quality."""
        return self._traffic.feedback(
            request_id,
            edge_quality=edge_quality,
            cloud_quality=cloud_quality,
            outcomes=outcomes,
            endpoints=self._routing.endpoint_names,
            source=source,
        )

    def execute(
        self,
        prompt: Subject,
        edge: Callable[[Subject], Any],
        cloud: Callable[[Subject], Any],
        *,
        precision: str | None = None,
        edge_timeout_s: float | None = None,
        accept: AcceptCheck | Literal["learned"] | None = None,
        verify_edge_zone: bool = False,
        edge_pool: EdgePool | None = None,
        request_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        needs: Needs | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> Execution:
        """Route, then run: edge or cloud first as decided, with the cloud as fallback (serving.execute;
        `edge_pool`: the EdgePool for timed edge calls, default the process's shared one).

        prompt: the prompt text, or a request object whose `prompt` attribute is the text
        (serving.execute.Routable, such as serving.chat's ChatRequest): that text is routed and
        logged, and edge and cloud are called with `prompt` as given.

        accept: a callable(edge answer) -> bool, or "learned": the bundle's acceptance check on
        the answer text (the edge callable must return a str; anything else counts as a failed
        check, and the cloud answers). A bundle without an acceptance model checks nothing, with
        one warning per bundle.

        With an outcome log (Router.load(log=...)), the request is recorded, explored and
        shadowed as serving.traffic says; `request_id` (default: a new one, returned as
        `Execution.request_id`) is what router.feedback() takes.

        metadata: as route() takes it, for the policy. An endpoint the policy forbids is never
        called: when the edge does not serve and the cloud is forbidden, FallbackForbidden
        (serving.policy) names the rule; when every endpoint is forbidden, NoFeasibleEndpoint.
        needs, capabilities: as route() takes them; a side lacking what the request needs is never
        called either (FallbackForbidden names the built-in rule, e.g. needs:images)."""
        from serving.execute import execute

        with telemetry.request():  # one span per request, routing included; a caller's span is joined
            routing, text, decision, accept = self._prepared(
                prompt, edge, cloud, precision, accept, metadata, needs, capabilities
            )
            options: _ExecuteOptions = {
                "edge_context_tokens": routing.edge_context_tokens,
                "edge_timeout_s": edge_timeout_s,
                "verify_edge_zone": verify_edge_zone,
                "edge_pool": edge_pool,
            }
            request = self._traffic.request(
                routing,
                text,
                precision,
                decision,
                accept=accept,
                edge=edge,
                cloud=cloud,
                request_id=request_id,
                subject=prompt,
            )
            if request is None:
                return execute(decision, prompt, edge=edge, cloud=cloud, accept=accept, **options)
            with request:  # recorded on the way out, a CloudCallError included
                request.execution = execute(
                    request.decision, prompt, edge=edge, cloud=cloud, accept=request.accept, **options
                )
            return request.execution

    async def aexecute(
        self,
        prompt: Subject,
        edge: Callable[[Subject], Awaitable[Any]],
        cloud: Callable[[Subject], Awaitable[Any]],
        *,
        precision: str | None = None,
        edge_timeout_s: float | None = None,
        accept: AcceptCheck | Literal["learned"] | None = None,
        verify_edge_zone: bool = False,
        request_id: str | None = None,
        shadow: bool = True,
        metadata: Mapping[str, str] | None = None,
        needs: Needs | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> Execution:
        """execute() for asyncio: `edge` and `cloud` are async callables taking the prompt (text
        or request object, as execute() takes it; serving.execute.aexecute: an overrunning edge
        call is cancelled). The same decision, accept check, outcome record, exploration and
        shadow runs (as a task on this loop; shadow=False for calls whose answers are not plain
        values, such as streams), and the same policy (`metadata`) and capabilities (`needs`).
        Routing a long prompt runs on a worker thread (serving.execute.off_loop), not on the event loop."""
        from serving.execute import aexecute, off_loop

        with telemetry.request():
            prepared = await off_loop(
                prompt, self._prepared, prompt, edge, cloud, precision, accept, metadata, needs, capabilities
            )
            routing, text, decision, accept = prepared
            options: _AttemptOptions = {
                "edge_context_tokens": routing.edge_context_tokens,
                "edge_timeout_s": edge_timeout_s,
                "verify_edge_zone": verify_edge_zone,
            }
            request = self._traffic.request(
                routing,
                text,
                precision,
                decision,
                accept=accept,
                edge=edge,
                cloud=cloud,
                request_id=request_id,
                asynchronous=True,
                shadow=shadow,
                subject=prompt,
            )
            if request is None:
                return await aexecute(decision, prompt, edge=edge, cloud=cloud, accept=accept, **options)
            with request:
                request.execution = await aexecute(
                    request.decision, prompt, edge=edge, cloud=cloud, accept=request.accept, **options
                )
            return request.execution

    def execute_endpoints(
        self, prompt: Subject, endpoints: Mapping[str, Callable[[Subject], Any]], **options: Any
    ) -> Execution:
        """Route, then run over N named endpoints (`endpoints`: name -> call) in the decision's
        cascade: serving.routed_endpoints.execute_endpoints, whose keywords it takes (specs,
        timeouts, precision, accept, verify_edge_zone, edge_pool, request_id, metadata, needs)."""
        from serving.routed_endpoints import execute_endpoints

        return execute_endpoints(self, prompt, endpoints, **options)

    async def aexecute_endpoints(
        self, prompt: Subject, endpoints: Mapping[str, Callable[[Subject], Awaitable[Any]]], **options: Any
    ) -> Execution:
        """execute_endpoints() for asyncio (serving.routed_endpoints.aexecute_endpoints)."""
        from serving.routed_endpoints import aexecute_endpoints

        return await aexecute_endpoints(self, prompt, endpoints, **options)

    def _prepared(
        self,
        prompt: object,
        edge: object,
        cloud: object,
        precision: str | None,
        accept: AcceptCheck | Literal["learned"] | None,
        metadata: Mapping[str, str] | None,
        needs: Needs | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> tuple[Routing, str, Decision, AcceptCheck | None]:
        """(the bundle serving this request, the text it routes, its decision, the accept check):
        all from one Routing, so an update() meanwhile changes none of them."""
        from serving.execute import prompt_text

        if not callable(edge) or not callable(cloud):
            raise TypeError("edge and cloud must be callables taking the prompt (or request)")
        if accept is not None and accept != "learned" and not callable(accept):
            raise TypeError(f'accept must be a callable, "learned" or None, got {accept!r}')
        routing = self._routing
        precision, text, metadata = check_precision(precision), prompt_text(prompt), _metadata(metadata)
        needs, capabilities = _needs(needs, capabilities)
        decision = self._decide(routing, text, precision, metadata, needs, capabilities)
        return routing, text, decision, routing.learned_accept(text) if accept == "learned" else accept


def _sides_ruled_out(decision: Decision, needs: Needs, capabilities: Mapping[str, Capabilities | None]) -> Decision:
    """A two-endpoint decision with the sides lacking what `needs` asks ruled out
    (serving.capabilities.rule_out_sides); the decision itself when none lacks anything."""
    lacking = ruled_out(needs, capabilities, (EDGE, CLOUD))
    return rule_out_sides(decision, lacking) if lacking else decision
