"""Budgets for policy rules: what each budget holder (a value of a metadata key, such as a user id)
has spent in the current hour, day or month, in this process.

A rule's `budget` condition ({"key": "user", "limit": 0.50, "period": "day"}) holds when the
holder the request's metadata names has spent at least `limit` in the current window (UTC
windows: the clock hour, the calendar day, the calendar month). Spend is recorded by
`Router.record_spend(metadata, amount)`, and by RoutedChat and the proxy from each answer's
estimated cost (the endpoints' token prices), streams at their end.

The ledger lives in the process that routes (it survives policy reloads: the Router owns it).
Several processes behind one budget need a shared store: this ledger does not pretend to be one.

Bounded, and a flood cannot reset a spent budget:

- an entry is (metadata key, holder, period); a holder value longer than MAX_VALUE_CHARS is kept
  as its SHA-256 digest (32 bytes), so an entry's size is bounded whatever the request sends, and
  two values are one holder exactly when they are equal (a digest is never equal to a kept value:
  one is bytes, the other str);
- at most `max_holders` entries. A spend of nothing by a holder the ledger does not hold adds none.
- An entry is *spent* when its total in the current window reaches the tightest limit of the
  rules reading that key and period (`limits`, which Router.record_spend passes from its policy:
  `limits_of`); a limit of 0 holds for every holder, ledger or not, so it protects no entry.
  Spent entries are never evicted before their window ends. When a new entry needs room, the
  ledger drops, in this order, a spent entry whose window has ended (it is no longer spent), else
  the least recently charged entry that is not spent. Each is the oldest of its queue: O(1).
- Full of spent entries in their current windows (max_holders holders that each spent a limit),
  the ledger takes no new entry: a holder it does not hold is charged to one *shared account* of
  its key and period, until that window ends. Every holder the ledger does not hold reads that
  account's total as its own spend: a budget counts such holders together, so none spends past its
  limit unnoticed; they reach it sooner (conservative: at worst they are kept off the cloud early).
- What is lost: a holder not spent, dropped to make room, starts again from 0 if it comes back in
  the same window (it was below every limit; the least recently charged goes first). A policy
  reloaded with lower limits marks an entry spent at its next charge.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Iterable, Mapping, Union

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

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


def check_amount(amount: object) -> None:
    """ValueError unless `amount` is a finite number >= 0 (a spend)."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
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
    """Spend per (metadata key, value, period) in the current window; bounded; safe across threads
    (see the module doc for what is kept when full)."""

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
        the ledger does not hold: its key's shared account, when the ledger was full; module doc)."""
        current = window(period, time.time() if now is None else now)
        entry = (key, holder_id(value), period)
        with self._lock:
            record = self._open.get(entry)
            if record is None:
                record = self._spent[period].get(entry)
            if record is None:
                record = self._shared.get((key, period))
        if record is None:
            return 0.0
        seen, total = record
        return total if seen == current else 0.0

    def _charge(self, entry: Entry, amount: float, current: int, limit: float | None, now: float) -> None:
        key, _, period = entry
        record = self._open.pop(entry, None)
        if record is None:
            record = self._spent[period].pop(entry, None)
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
        """Drop one entry (module doc: a spent one whose window ended, else the least recently
        charged one not spent); False when every entry is spent in its current window."""
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
