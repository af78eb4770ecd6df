"""The learned router: bundle in, Decision out; the rule table whenever the bundle cannot serve. A
Router holds one bundle's Routing (serving.routing._stages) and swaps it in one reference assignment
(`update`), so every decision comes wholly from the old or wholly from the new bundle."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Sequence

import serving.monitoring._telemetry as telemetry
from serving.bundle._bundle import BundleError, read_bundle
from serving.conversations._keeper import Conversations, answer_tokens, with_note
from serving.endpoints._capabilities import declares_languages
from serving.execution._execute import named_calls
from serving.routing._decision import Decision
from serving.routing._request import Request, as_request
from serving.routing._stages import Routing

if TYPE_CHECKING:
    from typing import Literal, TypedDict

    from serving.bundle._manifest import Manifest
    from serving.bundle._signing import PinnedKey
    from serving.conversations._store import ConversationStore
    from serving.conversations._switch import Stickiness
    from serving.endpoints._capabilities import Needs
    from serving.endpoints._record import Capabilities, Endpoint, Endpoints
    from serving.execution._execute import AcceptCheck, EdgePool, Execution, Subject
    from serving.monitoring._drift import DriftReference
    from serving.monitoring._outcome_log import OutcomeLog
    from serving.monitoring._traffic import LoggedRequest, Traffic
    from serving.policy._budgets import Spending
    from serving.policy._rules import PolicySet
    from serving.routing._stages import RouteStages
    from serving.scoring._acceptance import Acceptor

    class _LoadOptions(TypedDict):
        """How a Router loads its bundles: kept so that update() loads the next one alike."""

        threads: int
        unfamiliar_policy: str | None
        public_key: PinnedKey | None


logger = logging.getLogger("serving")


@dataclass(frozen=True)
class Update:
    """What `Router.update` did: `updated` or not, and why."""

    updated: bool
    reason: str
    model_version: str


def _policy(policy: PolicySet | str | Path | None, routing: Routing) -> PolicySet | None:
    """A PolicySet, loaded when given as a path (PolicyFileError for a bad file) for the endpoints
    of `routing`'s bundle; PolicyFileError when it names other endpoints."""
    if policy is None:
        return None
    from serving.policy._rules import PolicySet

    if isinstance(policy, (str, Path)):
        policy = PolicySet.load(policy, endpoints=routing.endpoint_names)
    if isinstance(policy, PolicySet):
        routing.chooser.check_policy(policy)
        return policy
    raise TypeError(
        f"policy must be a serving.policy.PolicySet or a path to a policy file, got {type(policy).__name__}"
    )


def _routing(path: str | Path, *, threads: int, unfamiliar_policy: str | None, public_key: PinnedKey | None) -> Routing:
    """A verified bundle's Routing; BundleError for anything wrong with the bundle."""
    from serving.conversations._evidence import FILE, TurnEvidence
    from serving.scoring._acceptance import Acceptor
    from serving.scoring._scorer import Scorer

    try:
        bundle = read_bundle(path, public_key=public_key)
        scorer = Scorer(bundle, threads=threads)
        routing = Routing(scorer, unfamiliar_policy=unfamiliar_policy, acceptor=Acceptor.from_bundle(bundle, scorer))
        if FILE in scorer.manifest.files:  # the previous turn as evidence (serving.conversations._evidence)
            routing.chooser.evidence = TurnEvidence.from_json(bundle.content(FILE), routing.chooser.names)
    except Exception as exc:  # anything wrong with the bundle, including onnxruntime refusing it
        raise exc if isinstance(exc, BundleError) else BundleError(f"cannot load bundle {path}: {exc}"[:500]) from exc
    return routing


class Router:
    """Routes prompts with a trained bundle. Build it with `Router.load(path)`.

    policy: a serving.policy.PolicySet, or the path of a policy file (docs/policies.md): its rules
    force, forbid or prefer endpoints for each request before the model's decision stands, and
    execute() never calls an endpoint they forbid. Replace it while the app runs by assigning
    `router.policy` (serving.bundle._watcher.PolicyWatcher does so when the file changes)."""

    def __init__(
        self,
        routing: Routing,
        *,
        threads: int = 1,
        unfamiliar_policy: str | None = None,
        public_key: PinnedKey | None = None,
        traffic: Traffic | None = None,
        policy: PolicySet | str | Path | None = None,
        conversations: ConversationStore | None = None,
        stickiness: Stickiness | None = None,
    ) -> None:
        from serving.monitoring._traffic import Traffic

        self._routing = routing
        self._options: _LoadOptions = {
            "threads": threads,
            "unfamiliar_policy": unfamiliar_policy,
            "public_key": public_key,
        }
        self._traffic = traffic or Traffic(None)
        self._policy = _policy(policy, routing)
        # What each budget holder spent (serving.policy._budgets); kept across policy reloads.
        self._spending: Spending | None = None
        self._conversations = Conversations(conversations, stickiness)

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
        conversations: ConversationStore | None = None,
        stickiness: Stickiness | None = None,
    ) -> "Router":
        """Load and verify a bundle folder (serving.bundle._bundle says what is checked).

        strict=False: a bundle that cannot load (missing, truncated, tampered, invalid, unknown) gives a
        router on the rule table, with one warning and `degraded_reason` set; it never raises.
        strict=True: the same problems raise BundleError, and only BundleError.
        unfamiliar_policy: what a prompt unlike the training data gets
        (serving.scoring._novelty.UNFAMILIAR_POLICIES); default: the bundle's own setting.
        public_key: pin the team's Ed25519 key (serving.bundle._signing): a bundle it did not sign counts as tampered.
        log, explore_rate, shadow_rate, seed: the OutcomeLog every execute() appends to, and exploration
        and shadow runs (serving.monitoring._traffic; both need a log).
        policy: a PolicySet or a policy file's path; a bad file raises PolicyFileError whatever `strict`
        says: routing private data without its rules is never a fallback.
        conversations, stickiness: where conversation state lives between turns (serving.MemoryStore by
        default, serving.RedisStore) and what a switch between endpoints weighs (docs/conversations.md)."""
        from serving.monitoring._traffic import Traffic
        from serving.scoring._novelty import UNFAMILIAR_POLICIES

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
            routing = Routing(None, degraded_reason=str(error))
        return cls(
            routing, **options, traffic=traffic, policy=policy, conversations=conversations, stickiness=stickiness
        )

    def update(self, path: str | Path, *, force: bool = False) -> Update:
        """Switch to the bundle at `path` once it is verified (checksums, values, the pinned signature),
        loaded and has routed a prompt; never raises. Refused, the current bundle kept and the reason
        said: a bundle that fails any check, and one older than the current (`created_at`) unless `force`."""
        current = self._routing
        try:
            new = _routing(path, **self._options)
            assert new.manifest is not None  # _routing builds it from a loaded bundle's Scorer
            _policy(self._policy, new)  # the policy must name the new bundle's endpoints
            created, now = new.manifest.created_at, current.manifest.created_at if current.manifest else ""
            if created < now and not force:
                return self._refused(
                    f"{path} is older ({created}) than the current bundle ({now}): a downgrade; "
                    "pass force=True to allow it"
                )
            new.decisions([Request("What is 2 + 2?")])  # it must route before it serves
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
        """The current bundle's serving.routing._stages.RouteStages (profiling); None when degraded."""
        return self._routing.stages

    @property
    def acceptor(self) -> Acceptor | None:
        """The bundle's learned acceptance check (serving.scoring._acceptance.Acceptor), or None when the
        bundle has none (trained without edge answers, older, or the router is degraded)."""
        return self._routing.acceptor

    def drift_reference(self) -> DriftReference | None:
        """The current bundle's summary of its training traffic (serving.monitoring._drift: what drift_report compares
        recent requests with); None when it has none (trained before drift references) or the router is degraded."""
        raw = self._routing.drift_reference
        if raw is None:
            return None
        from serving.monitoring._drift import DriftReference

        return DriftReference.from_bytes(raw)

    @property
    def endpoint_names(self) -> tuple[str, ...]:
        """The endpoints the current bundle routes among, in its order (edge and cloud for a
        two-endpoint bundle and the rule table): the names a policy, feedback and execute() use."""
        return self._routing.endpoint_names

    policy_endpoints = endpoint_names  # the names a policy for this router names

    @property
    def policy(self) -> PolicySet | None:
        """The policy applied to every decision, or None."""
        return self._policy

    @policy.setter
    def policy(self, policy: PolicySet | str | Path | None) -> None:
        """Replace the policy with what the constructor takes (a policy file's path is read with the
        current bundle's endpoints): one reference, so each decision follows wholly the old or the new one."""
        self._policy = _policy(policy, self._routing)

    def record_spend(self, metadata: Mapping[str, str] | None, amount: float) -> None:
        """Count what a request cost against the budgets its metadata names (the keys the policy's `budget`
        conditions read; docs/policies.md#budgets). RoutedChat and the proxy call it with each answer's
        estimated cost, an app running its own calls with what they cost. Nothing is counted without a
        policy that has budgets. ValueError for an amount that is not a finite number >= 0."""
        from serving.policy._budgets import Spending, check_amount, limits_of
        from serving.routing._validation import check_metadata

        check_amount(amount)
        policy, metadata = self._policy, check_metadata(metadata)
        if policy is None or not policy.budget_keys or not metadata:
            return
        if self._spending is None:
            self._spending = Spending()
        self._spending.add(metadata, amount, policy.budget_keys, limits=limits_of(policy))

    @property
    def spending(self) -> Spending | None:
        """The budgets' ledger (serving.policy._budgets.Spending), None before anything was spent."""
        return self._spending

    @spending.setter
    def spending(self, ledger: Spending | None) -> None:
        """Give the budgets a ledger of the app's choosing before it serves: a
        serving.policy._budgets.RedisSpending shares them between processes (docs/policies.md#budgets)."""
        from serving.policy._budgets import Spending

        if ledger is not None and not isinstance(ledger, Spending):
            raise TypeError(f"spending must be a serving.policy Spending ledger or None, got {type(ledger).__name__}")
        self._spending = ledger

    @property
    def conversation_state_errors(self) -> int:
        """Times the conversation store could not be reached (a request decided without its state,
        or a turn not written): what telemetry's router.conversation.state_errors counts, per router."""
        return self._conversations.unavailable

    def route(
        self,
        prompt: str | Request,
        *,
        precision: str | None = None,
        metadata: Mapping[str, str] | None = None,
        needs: Needs | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
        conversation: str | None = None,
    ) -> Decision:
        """Where one request should run; see Decision. `prompt`: a serving.Request, or its text with
        the request's other fields as keywords (serving.routing._request.Request says what each is).
        A request with a `conversation` id is decided with that conversation's state (its turn, where it
        ran, what moving it costs: docs/conversations.md), which execute() and record_turn() write.
        NoFeasibleEndpoint (serving.policy) when the policy or the needs leave no endpoint."""
        if type(prompt) is str:  # the usual call: the Request built here directly
            request = Request(prompt, precision, metadata, needs, capabilities, None, conversation)
        else:
            request = as_request(prompt, precision, metadata, needs, capabilities, conversation)
        if request.conversation is None:
            return self._routing.decisions((request,), self._policy, self._spending)[0]
        return self._decided((request,), self._routing)[0]

    def route_batch(
        self,
        prompts: Sequence[str | Request],
        precisions: Sequence[str | None] | None = None,
        metadata: Sequence[Mapping[str, str] | None] | None = None,
        needs: Sequence[Needs | None] | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
    ) -> list[Decision]:
        """Decisions for many requests, scored in one onnxruntime call per model: Requests, or texts
        with `precisions`, `metadata` and `needs` one each (or None) per prompt and `capabilities`
        for all. NoFeasibleEndpoint for the first request the policy or its needs leave no endpoint."""
        if isinstance(prompts, str) or not hasattr(prompts, "__iter__"):
            raise TypeError(f"prompts must be a list of str or serving.Request, got {type(prompts).__name__}")
        prompts = list(prompts)
        if precisions is not None and len(precisions) != len(prompts):
            raise ValueError(f"precisions has {len(precisions)} items for {len(prompts)} prompts")
        for name, given in (("metadata", metadata), ("needs", needs)):
            if given is not None and len(given) != len(prompts):
                raise ValueError(f"{len(given)} {name} for {len(prompts)} prompts")
        none = [None] * len(prompts)
        requests = [
            _checked(i, p, precision=q, metadata=m, needs=w, capabilities=capabilities)
            for i, (p, q, m, w) in enumerate(zip(prompts, precisions or none, metadata or none, needs or none))
        ]
        return self._decided(requests, self._routing) if requests else []

    def _decided(self, requests: Sequence[Request], routing: Routing) -> list[Decision]:
        """The decisions of requests of which some are in a conversation: each one's state read,
        its switch costs weighed (a store that fails: decided without, the reasons say so)."""
        conversations = self._conversations
        states, note = conversations.states(requests)
        decisions = routing.decisions(requests, self._policy, self._spending, states, conversations.stickiness)
        return with_note(requests, decisions, note)

    def record_turn(
        self,
        conversation: str,
        endpoint: str | None,
        *,
        input_tokens: int,
        output_tokens: int = 0,
        outcome: str = "served",
    ) -> bool:
        """Record a conversation's turn the app ran itself after route(): which endpoint answered (None: none),
        the prompt's and the answer's tokens, and how it went (served, fallback, rejected, failed, regenerated);
        execute(), aexecute() and RoutedChat record theirs. False, logged, never raised, when the store fails."""
        return self._conversations.record(
            conversation,
            endpoint,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            on_device=endpoint is not None and self._on_device(endpoint),
            outcome=outcome,
        )

    def record_answer(self, conversation: str, *, turn: int, endpoint: str, output_tokens: int) -> bool:
        """Add an answer's length known only once read (a stream's, from its final usage; RoutedChat calls it) to
        what execute() recorded of turn `turn` (the Decision's). False when nothing was written: another turn
        recorded since, another endpoint recorded as serving it, no tokens, or the store unreachable."""
        return self._conversations.answered(
            conversation, turn, endpoint, output_tokens, on_device=self._on_device(endpoint)
        )

    def _on_device(self, endpoint: str) -> bool:
        """Whether the bundle's endpoint `endpoint` runs on the device; ValueError for a name it lacks."""
        chooser = self._routing.chooser
        if endpoint not in chooser.names:
            raise ValueError(f"endpoint={endpoint!r}: this router's endpoints are {', '.join(chooser.names)}")
        return chooser.on_device[chooser.names.index(endpoint)]

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
        outcomes: {endpoint: quality} for any bundle; a two-endpoint router also takes edge_quality /
        cloud_quality, written as {"edge": ..., "cloud": ...}. ValueError for a missing id, a quality
        outside [0, 1], an endpoint the current bundle lacks, or outcomes with edge_quality / cloud_quality."""
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
        prompt: Subject | Request,
        edge: Callable[[Subject], Any] | None = None,
        cloud: Callable[[Subject], Any] | None = None,
        *,
        endpoints: Mapping[str, Callable[[Subject], Any]] | None = None,
        specs: Endpoints | Mapping[str, Endpoint] | None = None,
        timeouts: Mapping[str, float] | None = None,
        edge_timeout_s: float | None = None,
        accept: AcceptCheck | Literal["learned"] | None = None,
        verify_edge_zone: bool = False,
        edge_pool: EdgePool | None = None,
        request_id: str | None = None,
        precision: str | None = None,
        metadata: Mapping[str, str] | None = None,
        needs: Needs | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
        conversation: str | None = None,
    ) -> Execution:
        """Route, then run the decision's cascade (serving.execution._execute; docs/sdk.md#executing-a-decision).

        endpoints: each of the bundle's endpoints' call (a two-endpoint app may give `edge` and `cloud`). prompt: a
        serving.Request, its text with the request's fields as keywords (as route() takes them), or an app's request
        object whose `prompt` attribute is the text (serving.chat's ChatRequest): each call gets that object, else the
        text. specs: the endpoints' records (the bundle's by default, and for what a record leaves undeclared). accept:
        a callable(answer) -> bool, or "learned" (the bundle's acceptance check on the answer text). request_id: what
        router.feedback() takes, under an outcome log (default: a new one, Execution.request_id). An endpoint the policy
        forbids, or one lacking what the request needs, is never called: FallbackForbidden names the rule when the
        others did not serve, NoFeasibleEndpoint when none was left; EndpointsFailed when every call failed."""
        from serving.execution._execute import execute

        request = as_request(prompt, precision, metadata, needs, capabilities, conversation)
        calls = named_calls(edge, cloud, endpoints)
        with telemetry.request():  # one span per request, routing included; a caller's span is joined
            run, arguments = self._started(
                request,
                calls,
                specs,
                accept,
                request_id,
                timeouts=timeouts,
                edge_timeout_s=edge_timeout_s,
                verify_edge_zone=verify_edge_zone,
                edge_pool=edge_pool,
            )
            with run:  # recorded on the way out, a failure included
                return run.ran(execute(**arguments))

    async def aexecute(
        self,
        prompt: Subject | Request,
        edge: Callable[[Subject], Awaitable[Any]] | None = None,
        cloud: Callable[[Subject], Awaitable[Any]] | None = None,
        *,
        endpoints: Mapping[str, Callable[[Subject], Awaitable[Any]]] | None = None,
        specs: Endpoints | Mapping[str, Endpoint] | None = None,
        timeouts: Mapping[str, float] | None = None,
        edge_timeout_s: float | None = None,
        accept: AcceptCheck | Literal["learned"] | None = None,
        verify_edge_zone: bool = False,
        request_id: str | None = None,
        shadow: bool = True,
        precision: str | None = None,
        metadata: Mapping[str, str] | None = None,
        needs: Needs | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
        conversation: str | None = None,
    ) -> Execution:
        """execute() for asyncio: each call an async callable (serving.execution._execute.aexecute: an
        overrunning call is cancelled). The same decision, accept check, outcome record, exploration
        and shadow runs (as a task on this loop; shadow=False for calls whose answers are not plain
        values, such as streams); a long prompt is routed on a worker thread (serving.execution._execute.off_loop)."""
        from serving.execution._execute import aexecute, off_loop

        request = as_request(prompt, precision, metadata, needs, capabilities, conversation)
        calls = named_calls(edge, cloud, endpoints)
        with telemetry.request():
            start = functools.partial(
                self._started,
                request,
                calls,
                specs,
                accept,
                request_id,
                asynchronous=True,
                shadow=shadow,
                timeouts=timeouts,
                edge_timeout_s=edge_timeout_s,
                verify_edge_zone=verify_edge_zone,
            )
            run, arguments = await off_loop(request.text, start)
            with run:
                return run.ran(await aexecute(**arguments))

    def _started(
        self,
        request: Request,
        calls: Mapping[str, Callable[[Any], Any]],
        specs: Endpoints | Mapping[str, Endpoint] | None,
        accept: AcceptCheck | Literal["learned"] | None,
        request_id: str | None,
        asynchronous: bool = False,
        shadow: bool = True,
        **options: Any,  # Any: serving.execution._execute's options (timeouts, verify_edge_zone, ...), of their own types
    ) -> tuple[_Run, dict[str, Any]]:
        """What execute() and aexecute() both do before the calls: (the run that records them, the
        arguments of serving.execution._execute: the decision as carried out, explored or not, and its options)."""
        given = None if specs is None else {e.name: e for e in specs} if not isinstance(specs, Mapping) else dict(specs)
        if given is not None and request.capabilities is None:
            declared = {name: e.capabilities for name, e in given.items() if e.capabilities is not None}
            # The given records' capabilities decide when the request needs something or one declares
            # languages (every request has a language); a record declaring none leaves it to the bundle's.
            if declared and (request.needs is not None or declares_languages(declared)):
                request = request.but(capabilities=declared)
        routing, decision, check = self._prepared(request, accept)
        chooser = routing.chooser
        bundle = dict(zip(chooser.names, chooser.endpoints))
        logged = self._traffic.request(
            routing,
            request,
            decision,
            accept=check,
            calls=calls,
            request_id=request_id,
            asynchronous=asynchronous,
            shadow=shadow,
        )
        arguments = {
            "decision": decision if logged is None else logged.decision,
            "prompt": request.call_subject,
            "endpoints": calls,
            "accept": check if logged is None else logged.accept,
            # each record's context limit, price and place, the bundle's where it declares none
            "specs": bundle if given is None else {n: e.filled_from(bundle.get(n)) for n, e in given.items()},
            "output_tokens": routing.output_tokens,
            "deadline": request.deadline,
            **options,
        }
        run = _Run(self._conversations, request, arguments["decision"], logged, routing.count_tokens)
        return run, arguments

    def _prepared(
        self, request: Request, accept: AcceptCheck | Literal["learned"] | None
    ) -> tuple[Routing, Decision, AcceptCheck | None]:
        """(the bundle serving this request, its decision, the accept check), all from one Routing despite update()."""
        if accept is not None and accept != "learned" and not callable(accept):
            raise TypeError(f'accept must be a callable, "learned" or None, got {accept!r}')
        routing = self._routing
        if request.conversation is None:  # route()'s, on this one Routing
            decision = routing.decisions((request,), self._policy, self._spending)[0]
        else:
            decision = self._decided((request,), routing)[0]
        return routing, decision, routing.learned_accept(request.text) if accept == "learned" else accept


@dataclass
class _Run:
    """One execute() or aexecute(): on the way out, a failure included, its execution goes to the
    outcome log's request (when logged) and to its conversation's state (when it is in one)."""

    conversations: Conversations
    request: Request
    decision: Decision
    logged: LoggedRequest | None
    count: Callable[[str], int]  # the deciding bundle's token count, for an answer without usage
    execution: Execution | None = None

    def ran(self, execution: Execution) -> Execution:
        self.execution = execution
        return execution

    def __enter__(self) -> _Run:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            if self.logged is not None:
                self.logged.execution = self.execution
                self.logged.finished(exc_info[1])
        finally:
            if self.request.conversation is not None:
                execution = self.execution
                tokens = 0 if execution is None else answer_tokens(execution.response, self.count)
                self.conversations.executed(self.request, self.decision, execution, tokens)


def _checked(index: int, prompt: object, **fields: Any) -> Request:  # Any: Request's fields
    """The Request of route_batch()'s `index`th prompt; its errors name the prompt."""
    try:
        return as_request(prompt, **fields, name=f"prompts[{index}]")
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(f"prompts[{index}]"):
            raise
        raise type(exc)(f"prompts[{index}]: {exc}") from exc
