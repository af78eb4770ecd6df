"""Budgets for policy rules: what each budget holder (a value of a metadata key, such as a user id)
has spent in the current hour, day or month, in this process.

A rule's `budget` condition ({"key": "user", "limit": 0.50, "period": "day"}) holds when the
holder the request's metadata names has spent at least `limit` in the current window (UTC
windows: the clock hour, the calendar day, the calendar month). Spend is recorded by
`Router.record_spend(metadata, amount)`, and by RoutedChat and the proxy from each answer's
estimated cost (the endpoints' token prices), streams at their end.

The ledger lives in the process that routes (it survives policy reloads: the Router owns it) and
holds at most `max_holders` (key, value, period) entries; when full, the entries of past windows
go first, then the oldest. Several processes behind one budget need a shared store: this ledger
does not pretend to be one.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Iterable, Mapping

PERIODS = ("hour", "day", "month")
MAX_HOLDERS = 100_000


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


class Spending:
    """Spend per (metadata key, value, period) in the current window; safe across threads."""

    def __init__(self, max_holders: int = MAX_HOLDERS) -> None:
        self.max_holders = max_holders
        self._totals: dict[tuple[str, str, str], tuple[int, float]] = {}
        self._lock = threading.Lock()

    def add(self, metadata: Mapping[str, str], amount: float, keys: Iterable[str], now: float | None = None) -> None:
        """Count `amount` against every holder the metadata names under `keys`, in every period."""
        check_amount(amount)
        now = time.time() if now is None else now
        holders = [(key, metadata[key]) for key in keys if key in metadata]
        with self._lock:
            for key, value in holders:
                for period in PERIODS:
                    current = window(period, now)
                    seen, total = self._totals.pop((key, value, period), (current, 0.0))
                    self._totals[key, value, period] = (current, (total if seen == current else 0.0) + amount)
            if len(self._totals) > self.max_holders:
                self._evict(now)

    def spent(self, key: str, value: str, period: str, now: float | None = None) -> float:
        """What `value` of metadata key `key` has spent in the current `period` window."""
        current = window(period, time.time() if now is None else now)
        with self._lock:
            seen, total = self._totals.get((key, value, period), (current, 0.0))
        return total if seen == current else 0.0

    def _evict(self, now: float) -> None:
        for holder, (seen, _) in list(self._totals.items()):
            if seen != window(holder[2], now):
                del self._totals[holder]
        while len(self._totals) > self.max_holders:  # the least recently charged first (dicts keep order)
            del self._totals[next(iter(self._totals))]

    def __len__(self) -> int:
        return len(self._totals)
