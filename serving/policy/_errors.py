"""What the policy layer raises when it leaves a request no way to be served (docs/policies.md#errors),
in a module importing only RouterError at run time, so that modules the rules read
(serving.endpoints._capabilities) can raise them too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from serving._router_error import RouterError

if TYPE_CHECKING:
    from serving.routing._decision import Decision


class PolicyError(RouterError, RuntimeError):
    """A request the policy leaves no way to serve. `rules`: the names of the rules involved."""

    def __init__(self, message: str, *, rules: Sequence[str]) -> None:
        super().__init__(message)
        self.rules = tuple(rules)


class NoFeasibleEndpoint(PolicyError):
    """route(): the matching rules forbid every endpoint. Nothing was called."""


class FallbackForbidden(PolicyError):
    """execute(): the allowed endpoint did not serve (it failed, timed out, was busy or rejected, or the
    prompt exceeds its context) and the policy forbids the fallback. `rule` forbade `endpoint`, which
    was never called; `edge_error`, `steps` and `decision` as on CloudCallError."""

    def __init__(
        self,
        message: str,
        *,
        rule: str,
        endpoint: str,
        edge_error: BaseException | None,
        steps: list[Any],  # serving.execution._execute's Steps (not imported: execute imports this module)
        decision: Decision,
    ) -> None:
        super().__init__(message, rules=[rule])
        self.rule, self.endpoint = rule, endpoint
        self.edge_error, self.steps, self.decision = edge_error, steps, decision
