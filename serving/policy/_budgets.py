"""Budgets for policy rules: what each budget holder (a value of a metadata key, such as a user id)
has spent in the current UTC hour, day or month. `Spending` keeps it in the routing process (the Router
owns it, so it survives policy reloads); `RedisSpending` shares it among every process that routes.
What counts, the bounds, the eviction order and failing closed without Redis: docs/policies.md#budgets.
"""

from __future__ import annotations

import calendar
import hashlib
import logging
import math
import threading
import time
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Union

from serving._json_values import finite_number

if TYPE_CHECKING:
    from redis import Redis
    from typing_extensions import TypeAlias

log = logging.getLogger("serving")

PERIODS = ("hour", "day", "month")
MAX_HOLDERS = 100_000
MAX_VALUE_CHARS = 64  # a longer holder value is kept as its SHA-256 digest

Holder: TypeAlias = Union[str, bytes]  # a holder value as the ledger keeps it (holder_id)
Entry: TypeAlias = "tuple[str, Holder, str]"  # (metadata key, holder, period)
Limits: TypeAlias = "Mapping[tuple[str, str], float]"  # (metadata key, period) -> the tightest limit


def window(period: str, now: float) -> int:
    """The UTC window `now` falls in, as a number that changes when the window does."""
    if period == "hour":
        return int(now // 3600)
    if period == "day":
        return int(now // 86400)
    if period == "month":
        year, month = time.gmtime(now)[:2]
        return year * 12 + month
    raise ValueError(f"period {period!r}: use one of {', '.join(PERIODS)}")


def window_end(period: str, current: int) -> float:
    """When the UTC window numbered `current` (window()) ends, in epoch seconds."""
    if period == "hour":
        return (current + 1) * 3600.0
    if period == "day":
        return (current + 1) * 86400.0
    if period == "month":
        year, month = divmod(current, 12)  # the next month's year, and its number - 1
        return float(calendar.timegm((year, month + 1, 1, 0, 0, 0)))
    raise ValueError(f"period {period!r}: use one of {', '.join(PERIODS)}")


def check_amount(amount: object) -> None:
    """ValueError unless `amount` is a finite number >= 0 (a spend)."""
    number = finite_number(amount)
    if number is None or number < 0:
        raise ValueError(f"a spend must be a finite number >= 0, got {amount!r}")


def holder_id(value: str) -> Holder:
    """How the ledger keeps a holder value: as it is up to MAX_VALUE_CHARS characters, else its
    SHA-256 digest (bytes, so never equal to a value kept as it is)."""
    if len(value) <= MAX_VALUE_CHARS:
        return value
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


_limits: weakref.WeakKeyDictionary[object, dict[tuple[str, str], float]] = weakref.WeakKeyDictionary()


def limits_of(policy: object) -> Limits:
    """The tightest limit of each (metadata key, period) the policy's budget rules read (a
    serving.policy.PolicySet: its rules' `budget`), made once per policy."""
    made = _limits.get(policy)
    if made is None:
        made = {}
        for rule in getattr(policy, "rules", ()):
            budget = getattr(rule, "budget", None)
            if budget is not None:
                key, limit, period = budget
                made[key, period] = min(limit, made.get((key, period), math.inf))
        _limits[policy] = made
    return made


class Spending:
    """Spend per (metadata key, value, period) in its current window; thread-safe, bounded: docs/policies.md#budgets."""

    def __init__(self, max_holders: int = MAX_HOLDERS) -> None:
        if not isinstance(max_holders, int) or max_holders < 1:
            raise ValueError(f"max_holders={max_holders!r}: must be a positive integer")
        self.max_holders = max_holders
        # entries below their limits, the least recently charged first: (window, total)
        self._open: OrderedDict[Entry, tuple[int, float]] = OrderedDict()
        # spent entries, per period, in the order they were charged (so their windows in order)
        self._spent: dict[str, OrderedDict[Entry, tuple[int, float]]] = {p: OrderedDict() for p in PERIODS}
        # (key, period) -> (window, total) of the holders charged while the ledger was full of spent ones
        self._shared: dict[tuple[str, str], tuple[int, float]] = {}
        self._size = 0
        self._lock = threading.Lock()

    def add(
        self,
        metadata: Mapping[str, str],
        amount: float,
        keys: Iterable[str],
        now: float | None = None,
        *,
        limits: Limits | None = None,
    ) -> None:
        """Count `amount` against every holder the metadata names under `keys`, in every period.
        `limits`: (key, period) -> the tightest limit its rules set (limits_of), which tells a spent
        holder, kept until its window ends; without it no holder is known to be spent."""
        check_amount(amount)
        now = time.time() if now is None else now
        holders = [(key, holder_id(metadata[key])) for key in keys if key in metadata]
        with self._lock:
            for key, holder in holders:
                for period in PERIODS:
                    limit = limits.get((key, period)) if limits else None
                    self._charge((key, holder, period), amount, window(period, now), limit, now)

    def spent(self, key: str, value: str, period: str, now: float | None = None) -> float:
        """What `value` of metadata key `key` has spent in the current `period` window (a holder
        the ledger does not hold: its key's shared account, when the ledger was full)."""
        current = window(period, time.time() if now is None else now)
        entry = (key, holder_id(value), period)
        with self._lock:  # a record is a (window, total) tuple: never false
            record = self._open.get(entry) or self._spent[period].get(entry) or self._shared.get((key, period))
        return record[1] if record is not None and record[0] == current else 0.0

    def _charge(self, entry: Entry, amount: float, current: int, limit: float | None, now: float) -> None:
        key, _, period = entry
        record = self._open.pop(entry, None) or self._spent[period].pop(entry, None)
        if record is not None:
            seen, total = record
            total = (total if seen == current else 0.0) + amount
        else:  # a holder the ledger does not hold
            shared = self._shared.get((key, period))
            if shared is not None and shared[0] == current:  # full of spent holders earlier in this window
                self._shared[key, period] = (current, shared[1] + amount)
                return
            if amount == 0:  # nothing to remember: spent() reads 0 without an entry
                return
            if self._size >= self.max_holders and not self._make_room(now):
                self._shared[key, period] = (current, amount)
                return
            self._size += 1
            total = amount
        if limit is not None and limit > 0 and total >= limit:
            self._spent[period][entry] = (current, total)  # re-inserted: the latest at the end
        else:
            self._open[entry] = (current, total)

    def _make_room(self, now: float) -> bool:
        """Drop one entry (a spent one whose window ended, else the least recently charged one not
        spent); False when every entry is spent in its current window."""
        for period, spent in self._spent.items():
            if spent:
                entry, (seen, _) = next(iter(spent.items()))
                if seen != window(period, now):
                    spent.popitem(last=False)
                    self._size -= 1
                    return True
        if self._open:
            self._open.popitem(last=False)
            self._size -= 1
            return True
        return False

    def __len__(self) -> int:
        """The entries held: (key, holder, period) with spend (shared accounts are not counted)."""
        return self._size


class RedisSpending(Spending):
    """The budgets' ledger in Redis (the `redis` extra), shared by every process that routes with it.
    `client`: a redis.Redis, or a URL such as "redis://127.0.0.1:6379/0" (its calls bounded by `timeout_s`).

    One key per (metadata key, holder, period, window): `prefix` + "day:20420:4:user:ana" (the
    metadata key's length first, so no key and holder run into another; a holder over
    MAX_VALUE_CHARS as "sha256:" and its digest). A spend is one MULTI/EXEC of INCRBYFLOAT and
    EXPIREAT (its window's end plus an hour) per key; a budget check is one GET.

    When Redis cannot be reached it fails closed (docs/policies.md#budgets): a check reads math.inf,
    a spend waits in `pending` (at most `max_pending` keys, beyond that counted in `dropped`) until
    Redis answers, and Redis is not asked again for `retry_s` after a failure. `errors` counts the
    operations that could not reach Redis (the proxy's /metrics shows it).
    """

    def __init__(
        self,
        client: Redis | str,
        *,
        prefix: str = "router:budget:",
        timeout_s: float = 0.25,
        retry_s: float = 1.0,
        max_pending: int = 10_000,
    ) -> None:
        super().__init__()
        if isinstance(client, str):
            try:
                import redis
            except ImportError as exc:  # the SDK core does not need it
                raise ImportError(
                    "RedisSpending needs the Redis client: pip install 'edge-cloud-router[redis]'"
                ) from exc
            client = redis.Redis.from_url(client, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        seconds = finite_number(retry_s)
        if seconds is None or seconds < 0:
            raise ValueError(f"retry_s={retry_s!r}: must be a number of seconds >= 0")
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 0:
            raise ValueError(f"max_pending={max_pending!r}: must be a whole number >= 0")
        self.client: Any = client  # Any: redis.Redis, untyped here so that the core never imports it
        self.prefix, self.retry_s, self.max_pending = prefix, seconds, max_pending
        self.pending: dict[bytes, tuple[float, float]] = {}  # key -> (amount, expires at): not yet written
        self.errors = self.dropped = 0
        self._down_until = 0.0  # time.monotonic() before which Redis is not asked again
        self._down = False

    def key(self, key: str, value: str, period: str, current: int) -> bytes:
        """The Redis key of a holder's spend in a window (class doc)."""
        holder = holder_id(value)
        shown = holder if isinstance(holder, str) else "sha256:" + holder.hex()
        return f"{self.prefix}{period}:{current}:{len(key)}:{key}:{shown}".encode("utf-8", "surrogatepass")

    def add(
        self,
        metadata: Mapping[str, str],
        amount: float,
        keys: Iterable[str],
        now: float | None = None,
        *,
        limits: Limits | None = None,
    ) -> None:
        """Spending.add, in Redis (`limits` is not needed: Redis forgets each window when it ends)."""
        check_amount(amount)
        now = time.time() if now is None else now
        writes: dict[bytes, tuple[float, float]] = {}
        if amount > 0:
            for key in keys:
                if key in metadata:
                    for period in PERIODS:
                        current = window(period, now)
                        writes[self.key(key, metadata[key], period, current)] = (amount, window_end(period, current))
        with self._lock:
            if not writes and not self.pending:
                return
            for name, (earlier, until) in self.pending.items():
                mine = writes.get(name)
                writes[name] = (earlier + (mine[0] if mine else 0.0), until)
            self.pending = {}
        if self._reachable():
            try:
                pipe = self.client.pipeline(transaction=True)
                for name, (total, until) in writes.items():
                    pipe.incrbyfloat(name, total)
                    pipe.expireat(name, int(until) + 3600)
                pipe.execute()
                self._up()
                return
            except Exception as exc:  # redis.RedisError, OSError: not written, kept for the next spend
                self._failed("writing spends", exc)
        self._keep(writes)

    def spent(self, key: str, value: str, period: str, now: float | None = None) -> float:
        """Spending.spent, in every process (and this process's spends not yet written); math.inf while
        Redis cannot be read (class doc: fail closed)."""
        name = self.key(key, value, period, window(period, time.time() if now is None else now))
        waiting = self.pending.get(name)
        if not self._reachable():
            return math.inf
        try:
            raw = self.client.get(name)
        except Exception as exc:
            self._failed("reading a budget", exc)
            return math.inf
        self._up()
        try:
            total = float(raw) if raw is not None else 0.0
        except ValueError:  # not a number: written by something else; counted as spent
            log.warning("budget ledger: %r holds no number; its holder reads as spent", name)
            return math.inf
        return total + (waiting[0] if waiting is not None else 0.0)

    def _keep(self, writes: dict[bytes, tuple[float, float]]) -> None:
        with self._lock:
            for key, (amount, until) in writes.items():
                held = self.pending.get(key)
                if held is not None:
                    self.pending[key] = (held[0] + amount, until)
                elif len(self.pending) < self.max_pending:
                    self.pending[key] = (amount, until)
                else:
                    self.dropped += 1

    def _reachable(self) -> bool:
        if not self._down or time.monotonic() >= self._down_until:
            return True
        with self._lock:
            self.errors += 1
        return False

    def _failed(self, doing: str, exc: Exception) -> None:
        with self._lock:
            self.errors += 1
            self._down_until = time.monotonic() + self.retry_s
            warn, self._down = not self._down, True
        if warn:
            log.warning(
                "budget ledger unavailable (%s: %s: %s): budgets read as spent, spends wait in this process",
                doing,
                type(exc).__name__,
                str(exc)[:200],
            )

    def _up(self) -> None:
        if self._down:
            self._down = False
            log.warning("budget ledger reachable again")

    def __len__(self) -> int:
        """The keys whose spends wait to be written (Redis holds the rest)."""
        return len(self.pending)
