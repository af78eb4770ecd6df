"""What the fallback zone is worth: the one place its expectation is written (docs/metrics.md#the-fallback-expectation),
for thresholds, the training summary and the offline evaluation. A fallback-zone request fires with probability
catch * (1 - q_edge) + false_reject * q_edge, one cloud call each time, and is worth q_edge * (1 - false_reject) +
that probability * q_cloud; edge-zone requests are not checked. Both rates are per request (`Catch`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def check_catch_rate(catch_rate: float) -> float:
    if isinstance(catch_rate, bool) or not isinstance(catch_rate, (int, float)) or not 0.0 <= catch_rate <= 1.0:
        raise ValueError(f"catch_rate={catch_rate!r}: must be a number in [0, 1]")
    return float(catch_rate)


@dataclass(frozen=True)
class Catch:
    """The acceptance check's reject rates per request: floats apply to every request, arrays align with them."""

    catch: float | np.ndarray  # P(reject | wrong edge answer)
    false_reject: float | np.ndarray = 0.0  # P(reject | good edge answer)
    measured: np.ndarray | None = None  # requests whose rates are the acceptance check's verdicts (None: all assumed)

    @classmethod
    def of(cls, value) -> "Catch":
        """A Catch as is; a number is an assumed catch rate for every request."""
        return value if isinstance(value, Catch) else cls(check_catch_rate(value))

    @classmethod
    def for_rows(cls, rejected, assumed_catch_rate: float) -> "Catch":
        """Measured where `rejected` (share of the request's logged answers the check rejects) is known,
        the assumed catch rate (and no false rejects) where it is NaN; all assumed when it is None."""
        assumed = check_catch_rate(assumed_catch_rate)
        if rejected is None:
            return cls(assumed)
        rejected = np.asarray(rejected, dtype=np.float64)
        known = ~np.isnan(rejected)
        return cls(np.where(known, rejected, assumed), np.where(known, rejected, 0.0), known)

    def take(self, index) -> "Catch":
        """The rates of the requests `index` selects (a mask or an order)."""

        def pick(x):
            return x[index] if isinstance(x, np.ndarray) else x

        return Catch(pick(self.catch), pick(self.false_reject), pick(self.measured))

    def describe(self, n_rows: int) -> dict:
        """How many of `n_rows` requests have measured rates, and the rate assumed for the rest."""
        measured = int(self.measured.sum()) if self.measured is not None else 0
        assumed = self.catch[~self.measured] if self.measured is not None else np.atleast_1d(self.catch)
        return {
            "measured_rows": measured,
            "assumed_rows": n_rows - measured,
            "assumed_catch_rate": float(assumed[0]) if len(assumed) else None,
        }


def fires(q_edge, catch_rate) -> np.ndarray:
    """Per fallback-zone request: probability the fallback fires (= expected cloud calls); `catch_rate`: as Catch.of."""
    rates, q_edge = Catch.of(catch_rate), np.asarray(q_edge, dtype=np.float64)
    return rates.catch * (1.0 - q_edge) + rates.false_reject * q_edge


def fallback_quality(q_edge, q_cloud, catch_rate) -> np.ndarray:
    """Per fallback-zone request: expected quality, the edge answers kept plus the cloud's when the fallback fires."""
    rates, q_edge = Catch.of(catch_rate), np.asarray(q_edge, dtype=np.float64)
    return q_edge * (1.0 - rates.false_reject) + fires(q_edge, rates) * np.asarray(q_cloud, dtype=np.float64)
