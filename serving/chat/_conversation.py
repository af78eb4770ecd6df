"""What the router sees of a chat conversation: one prompt text, these parts joined by blank lines:
  1. the latest user message, as it is (no label);
  2. then every other turn except the system messages, newest first, each as "role: text";
  3. then the system (or developer) messages, each as "role: text" too.
Text parts of a multi-part content are joined; other parts (images, audio) are left out, as are tool
calls (only their text content counts). Nothing is truncated. Pass `to_prompt=` to the client for
another rule; why this one: docs/clients.md#how-the-router-reads-a-conversation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

    # One chat message: "role", "content" (text, or a list of parts) and whatever else the API
    # carries (tool calls, names); JSON values, checked where they are read.
    Message: TypeAlias = Mapping[str, Any]

SYSTEM_ROLES = ("system", "developer")


def check_messages(messages: Any) -> Sequence[Message]:  # Any: the caller's value, checked here
    """`messages` if it is a non-empty list of {"role": str, "content": ...} objects; ValueError saying what is wrong."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} objects")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{i}] must be an object, not {type(message).__name__}")
        if not isinstance(message.get("role"), str) or not message["role"]:
            raise ValueError(f"messages[{i}] has no 'role' string")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise ValueError(f"messages[{i}].content must be a string, a list of parts or null")
    return messages


def message_text(message: Message) -> str:
    """The text of one message: its content string, or its text parts joined by newlines."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def conversation_prompt(messages: Sequence[Message]) -> str:
    """The text the router routes for a conversation (see the module doc for the rule and why)."""
    check_messages(messages)
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    anchor = users[-1] if users else len(messages) - 1
    others = [
        messages[i] for i in reversed(range(len(messages))) if i != anchor and messages[i]["role"] not in SYSTEM_ROLES
    ]
    system = [m for i, m in enumerate(messages) if i != anchor and m["role"] in SYSTEM_ROLES]
    parts = [message_text(messages[anchor])]
    parts += [f"{m['role']}: {text}" for m in others + system if (text := message_text(m))]
    return "\n\n".join(parts)
