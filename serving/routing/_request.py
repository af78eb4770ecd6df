"""The request record: what the app asks of the router, built once where it calls the SDK.

    request = Request("Summarise this contract: ...", precision="exact", metadata={"tier": "free"})
    decision = router.route(request)
    execution = router.execute(request, endpoints={"edge": on_device, "cloud": frontier})

Every layer reads this one record (docs/sdk.md: the request)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from serving._contract import PRECISIONS
from serving.conversations._store import check_conversation_id
from serving.endpoints._capabilities import check_capabilities, check_needs
from serving.routing._validation import check_metadata, check_precision, check_prompt

if TYPE_CHECKING:
    from serving.endpoints._capabilities import Needs
    from serving.endpoints._record import Capabilities


@dataclass(frozen=True, init=False)
class Request:
    """One request, checked when built (TypeError or ValueError naming the field); docs/sdk.md (the request) describes
    the fields. `deadline`: a time.monotonic() value; `subject`: the app's object each call gets (None: the text)."""

    text: str
    precision: str | None = None
    metadata: Mapping[str, str] | None = None
    needs: Needs | None = None
    capabilities: Mapping[str, Capabilities | None] | None = None
    deadline: float | None = None
    conversation: str | None = None
    messages: Sequence[Mapping[str, Any]] | None = None
    subject: Any = None  # Any: the app's own object, passed to its calls as it is

    def __init__(
        self,
        text: str,
        precision: str | None = None,
        metadata: Mapping[str, str] | None = None,
        needs: Needs | None = None,
        capabilities: Mapping[str, Capabilities | None] | None = None,
        deadline: float | None = None,
        conversation: str | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        subject: Any = None,  # Any: the app's own object
    ) -> None:
        # Written out (a frozen dataclass's own __init__ makes nine setattr calls): every route() builds a
        # Request, and one dict costs 0.5 us less, so route() stays as fast as before the record (issue 46).
        if type(text) is not str:
            check_prompt(text, "text")
        if precision is not None and precision not in PRECISIONS:
            check_precision(precision)
        if metadata is not None:
            check_metadata(metadata)
        if needs is not None or capabilities is not None:
            needs = check_needs(needs)
            check_capabilities(capabilities)
        if deadline is not None and not (
            isinstance(deadline, (int, float)) and not isinstance(deadline, bool) and deadline == deadline
        ):
            raise TypeError(f"deadline must be a time.monotonic() value or None, got {deadline!r}")
        if conversation is not None:
            check_conversation_id(conversation)
        fields = {
            "text": text,
            "precision": precision,
            "metadata": metadata,
            "needs": needs,
            "capabilities": capabilities,
            "deadline": deadline,
            "conversation": conversation,
            "messages": messages,
            "subject": subject,
        }
        object.__setattr__(self, "__dict__", fields)

    @property
    def call_subject(self) -> Any:  # Any: the app's own object, or the text
        """What each endpoint's call gets: `subject` when given, else the text."""
        return self.text if self.subject is None else self.subject

    def but(self, **changes: Any) -> "Request":  # Any: fields of their own types, checked again
        """A copy with `changes` (dataclasses.replace)."""
        return replace(self, **changes)


_FIELDS = ("precision", "metadata", "needs", "capabilities", "conversation")  # as_request's, in order


def as_request(
    prompt: object,
    precision: str | None = None,
    metadata: Mapping[str, str] | None = None,
    needs: Needs | None = None,
    capabilities: Mapping[str, Capabilities | None] | None = None,
    conversation: str | None = None,
    name: str = "prompt",
) -> Request:
    """`prompt` when it is a Request (TypeError when fields are given too), else a Request of the text: a str, or a
    request object whose `prompt` is the text (passed to the calls as it is); `name`: what errors call the argument."""
    if isinstance(prompt, Request):
        values = (precision, metadata, needs, capabilities, conversation)
        given = [key for key, value in zip(_FIELDS, values) if value is not None]
        if given:
            raise TypeError(f"give {', '.join(given)} in the Request, not beside it")
        return prompt
    if isinstance(prompt, str):
        return Request(prompt, precision, metadata, needs, capabilities, conversation=conversation)
    text = getattr(prompt, "prompt", None)
    if not isinstance(text, str):
        raise TypeError(
            f"{name} must be str, a serving.Request, or a request whose .prompt is str "
            f"(serving.execution._execute.Routable), got {type(prompt).__name__}"
        )
    return Request(text, precision, metadata, needs, capabilities, conversation=conversation, subject=prompt)
