"""Where conversation state lives between turns: in this process (MemoryStore, the default), or in
Redis (RedisStore), so that several processes (proxy workers, app servers behind a load balancer)
continue each other's conversations. A store that cannot be reached raises ConversationStoreError:
the router then decides without the conversation's state and says so (Decision.reason, a metric).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Protocol

from serving._router_error import RouterError
from serving.conversations._state import ConversationState

if TYPE_CHECKING:
    from redis import Redis

DEFAULT_MAX_CONVERSATIONS = 100_000
DEFAULT_MAX_AGE_S = 3600.0
MAX_ID_CHARS = 256


class ConversationStoreError(RouterError):
    """The conversation store could not be read or written (Redis down, a stored state unreadable)."""


class ConversationStore(Protocol):
    """What the router needs of a store: a conversation's state, and writing it back."""

    def get(self, conversation: str) -> ConversationState | None: ...

    def put(self, conversation: str, state: ConversationState) -> None: ...


def check_conversation_id(conversation: object, where: str = "conversation") -> str:
    """The id itself; TypeError or ValueError naming `where` for anything else."""
    if not isinstance(conversation, str):
        raise TypeError(f"{where} must be a str, got {type(conversation).__name__}")
    if not conversation or len(conversation) > MAX_ID_CHARS or not conversation.isprintable():
        raise ValueError(f"{where} must be 1 to {MAX_ID_CHARS} printable characters, got {conversation[:40]!r}")
    return conversation


class MemoryStore:
    """Conversation state in this process: at most `max_conversations` (the least recently used
    dropped first), each forgotten `max_age_s` after its last turn. Thread-safe."""

    def __init__(
        self, max_conversations: int = DEFAULT_MAX_CONVERSATIONS, max_age_s: float = DEFAULT_MAX_AGE_S
    ) -> None:
        if not isinstance(max_conversations, int) or isinstance(max_conversations, bool) or max_conversations < 1:
            raise ValueError(f"max_conversations={max_conversations!r}: must be a whole number >= 1")
        if not isinstance(max_age_s, (int, float)) or not max_age_s > 0:
            raise ValueError(f"max_age_s={max_age_s!r}: must be a number of seconds > 0")
        self.max_conversations, self.max_age_s = max_conversations, float(max_age_s)
        self._states: OrderedDict[str, ConversationState] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._states)

    def get(self, conversation: str) -> ConversationState | None:
        with self._lock:
            state = self._states.get(conversation)
            if state is None:
                return None
            if time.time() - state.updated > self.max_age_s:
                del self._states[conversation]
                return None
            self._states.move_to_end(conversation)
            return state

    def put(self, conversation: str, state: ConversationState) -> None:
        with self._lock:
            self._states[conversation] = state
            self._states.move_to_end(conversation)
            while len(self._states) > self.max_conversations:
                self._states.popitem(last=False)


class RedisStore:
    """Conversation state in Redis (the `redis` extra): key `prefix + id`, expiring `max_age_s`
    after the conversation's last turn. `client`: a redis.Redis, or a URL such as
    "redis://127.0.0.1:6379/0". Every failure to reach it, or a value that is no state, is a
    ConversationStoreError naming the key; the client's own timeouts bound each call (a URL's
    client: 0.25 s to connect and to answer, so a Redis that is down costs a turn little)."""

    def __init__(
        self,
        client: Redis | str,
        *,
        prefix: str = "router:conversation:",
        max_age_s: float = DEFAULT_MAX_AGE_S,
        timeout_s: float = 0.25,
    ) -> None:
        if isinstance(client, str):
            try:
                import redis
            except ImportError as exc:  # the SDK core does not need it
                raise ImportError("RedisStore needs the Redis client: pip install 'edge-cloud-router[redis]'") from exc
            client = redis.Redis.from_url(client, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        if not max_age_s > 0:
            raise ValueError(f"max_age_s={max_age_s!r}: must be a number of seconds > 0")
        self.client: Any = client  # Any: redis.Redis, untyped here so the core never imports it
        self.prefix, self.max_age_s = prefix, float(max_age_s)

    def get(self, conversation: str) -> ConversationState | None:
        key = self.prefix + conversation
        try:
            raw = self.client.get(key)
        except Exception as exc:  # redis.RedisError, OSError: the store is unreachable
            raise ConversationStoreError(f"conversation store: reading {key!r}: {type(exc).__name__}: {exc}") from exc
        if raw is None:
            return None
        try:
            return ConversationState.from_json(raw)
        except ValueError as exc:
            raise ConversationStoreError(f"conversation store: {key!r}: {exc}") from exc

    def put(self, conversation: str, state: ConversationState) -> None:
        key = self.prefix + conversation
        try:
            self.client.set(key, state.to_json(), ex=max(1, round(self.max_age_s)))
        except Exception as exc:
            raise ConversationStoreError(f"conversation store: writing {key!r}: {type(exc).__name__}: {exc}") from exc
