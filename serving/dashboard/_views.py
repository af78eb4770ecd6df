"""The dashboard's views, computed from request summaries (serving.dashboard._summary): one home
for the proxy's /dashboard and `make report`. docs/observability.md#dashboard-and-report says what
each panel shows; outcome-log records carry no price, so cost is estimated from the calls made
(CallPrices), and latency percentiles are by nearest rank (a measured value, never interpolated).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from serving._contract import CLOUD, EDGE, ZONES
from serving._json_values import finite_number
from serving.dashboard._summary import JUDGING_STEPS, NOT_CALLED

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from serving.dashboard._quality import QualityView
    from serving.dashboard._summary import Outcomes, RequestSummary

FAILED = "failed"  # served_by of a request that got no answer
ENDPOINT_ORDER = (EDGE, CLOUD)  # shown first, in this order; other endpoints after them
PERCENTILES = (50, 90, 99)
# Bucket widths the time axis uses: the smallest that cuts the period into at most MAX_BUCKETS.
BUCKET_WIDTHS_S = (1, 5, 10, 30, 60, 300, 900, 3600, 3 * 3600, 6 * 3600, 86400, 7 * 86400)
MAX_BUCKETS = 48
MAX_BUCKETS_GIVEN = 2000  # with a bucket width given (bucket_s): more would only draw an unreadable plot, slowly


@dataclass(frozen=True)
class CallPrices:
    """Price per call of each endpoint (any unit; default: cloud calls); an unpriced one is left out of the estimate."""

    per_call: Mapping[str, float] = field(default_factory=lambda: {"edge": 0.0, "cloud": 1.0})
    unit: str = "cloud calls"

    def __post_init__(self) -> None:
        for name, price in self.per_call.items():
            number = finite_number(price)
            if number is None or number < 0:
                raise ValueError(f"price of a {name} call: {price!r} is not a non-negative number")
        if "cloud" not in self.per_call:
            raise ValueError("CallPrices needs the cloud's price: all-cloud is what the cost is compared with")


@dataclass(frozen=True)
class Latency:
    endpoint: str
    calls: int
    percentiles_ms: dict[int, float]  # PERCENTILES -> ms
    max_ms: float


@dataclass(frozen=True)
class Cost:
    calls: dict[str, int]  # endpoint -> calls made
    estimated: float  # sum of calls x price, endpoints with a price
    all_cloud: float  # requests x the cloud's price
    unpriced_calls: int  # calls to endpoints CallPrices has no price for
    unit: str
    measured: float | None  # sum of the measured costs, where known
    measured_requests: int  # requests with a measured cost

    @property
    def saving(self) -> float | None:
        """1 - estimated / all-cloud: the share of the all-cloud cost not spent."""
        return 1.0 - self.estimated / self.all_cloud if self.all_cloud > 0 else None


@dataclass(frozen=True)
class Bundle:
    model_version: str
    requests: int
    first: float
    last: float


SWITCH_COUNTS = ("0", "1", "2", "3+")  # conversations by how many of their turns switched


@dataclass(frozen=True)
class ConversationView:
    """The conversations among the requests (docs/observability.md's panel). `by_switches`: conversations
    by SWITCH_COUNTS; `reprefill_cost`: the sum of the known switch costs (`priced_turns` of them), else None."""

    conversations: int
    turns: int
    switches: int
    max_switches: int
    by_switches: dict[str, int]
    reprefill_cost: float | None
    priced_turns: int
    unavailable: int

    @property
    def switches_per_conversation(self) -> float:
        return self.switches / self.conversations if self.conversations else 0.0


def conversation_view(requests: Sequence[RequestSummary]) -> ConversationView | None:
    """The conversation panel's figures, None when no request was in a conversation."""
    turns = [r for r in requests if r.conversation is not None]
    if not turns:
        return None
    switched = collections.Counter(r.conversation for r in turns if r.switched is True)
    switches = [switched[c] for c in {r.conversation for r in turns}]  # per conversation
    by = collections.Counter(SWITCH_COUNTS[min(n, 3)] for n in switches)
    costs = [r.switch_cost for r in turns if r.switch_cost is not None]
    return ConversationView(
        conversations=len(switches),
        turns=len(turns),
        switches=sum(switches),
        max_switches=max(switches),
        by_switches={name: by.get(name, 0) for name in SWITCH_COUNTS},
        reprefill_cost=math.fsum(costs) if costs else None,
        priced_turns=len(costs),
        unavailable=sum(r.turn is None for r in turns),
    )


@dataclass(frozen=True)
class Views:
    """Everything the page shows (module doc). `buckets`: the start of each time bucket (epoch
    seconds), `zones_over_time[zone][i]` the requests of bucket i, same for `served_over_time`."""

    requests: int
    start: float
    end: float
    bucket_s: int
    buckets: list[float]
    zones: dict[str, int]
    served: dict[str, int]
    zones_over_time: dict[str, list[int]]
    served_over_time: dict[str, list[int]]
    fallbacks: dict[str, int]
    edge_first: int
    latency: list[Latency]
    cost: Cost
    familiarity_known: int
    unfamiliar: int
    bundles: list[Bundle]
    quality: QualityView | None = None
    conversations: ConversationView | None = None


def nearest_rank(sorted_values: Sequence[float], percent: float) -> float:
    """The smallest value with at least `percent`% of the values at or below it."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def bucket_width(span_s: float) -> int:
    """The smallest BUCKET_WIDTHS_S that cuts `span_s` into at most MAX_BUCKETS buckets; beyond
    MAX_BUCKETS weeks, the smallest number of weeks that does (a log over years: never a week each)."""
    for width in BUCKET_WIDTHS_S:
        if span_s / width < MAX_BUCKETS:
            return width
    week = BUCKET_WIDTHS_S[-1]
    return week * (math.floor(span_s / (week * MAX_BUCKETS)) + 1)


def _counts(values: Sequence[str], order: Sequence[str] = ()) -> dict[str, int]:
    """Counts: the names in `order` first, in that order, then the others most common first."""
    counted = collections.Counter(values)
    rank = {name: i for i, name in enumerate(order)}
    return dict(sorted(counted.items(), key=lambda item: (rank.get(item[0], len(rank)), -item[1], item[0])))


def compute_views(
    requests: Sequence[RequestSummary],
    *,
    outcomes: Mapping[str, Outcomes] | None = None,
    prices: CallPrices | None = None,
    bucket_s: int | None = None,
) -> Views:
    """The views of `requests` (at least one); `outcomes` (outcomes_from_feedback's) adds the quality panel."""
    if not requests:
        raise ValueError("no requests to show")
    prices = prices or CallPrices()
    ordered = sorted(requests, key=lambda r: r.time)
    start, end = ordered[0].time, ordered[-1].time
    if bucket_s is not None and (isinstance(bucket_s, bool) or not isinstance(bucket_s, int) or bucket_s < 1):
        raise ValueError(f"bucket_s={bucket_s!r}: must be a whole number of seconds >= 1")
    width = bucket_s or bucket_width(end - start)
    origin = math.floor(start / width) * width
    n_buckets = int((end - origin) // width) + 1
    if n_buckets > max(MAX_BUCKETS, MAX_BUCKETS_GIVEN):
        raise ValueError(
            f"bucket_s={width}: the requests span {end - start:,.0f} s, {n_buckets:,} buckets; "
            f"at most {MAX_BUCKETS_GIVEN:,} (a larger bucket_s, or a shorter period)"
        )
    zone_of = [r.zone or "unknown" for r in ordered]
    served_of = [r.served_by or FAILED for r in ordered]
    zones, served = _counts(zone_of, ZONES), _counts(served_of, ENDPOINT_ORDER)
    zones_over_time = {z: [0] * n_buckets for z in zones}
    served_over_time = {s: [0] * n_buckets for s in served}
    for request, zone, by in zip(ordered, zone_of, served_of):
        index = int((request.time - origin) // width)
        zones_over_time[zone][index] += 1
        served_over_time[by][index] += 1

    made = [c for r in ordered for c in r.calls if c.name not in JUDGING_STEPS and c.status != NOT_CALLED]
    by_endpoint: dict[str, list[float]] = collections.defaultdict(list)
    for call in made:
        by_endpoint[call.name].append(call.ms)
    calls = _counts([c.name for c in made], ENDPOINT_ORDER)
    latency = []
    for name in calls:
        values = sorted(by_endpoint[name])
        latency.append(Latency(name, len(values), {p: nearest_rank(values, p) for p in PERCENTILES}, values[-1]))

    priced = {name: n for name, n in calls.items() if name in prices.per_call}
    measured = [r.cost for r in ordered if r.cost is not None]
    cost = Cost(
        calls=calls,
        estimated=sum(n * prices.per_call[name] for name, n in priced.items()),
        all_cloud=len(ordered) * prices.per_call["cloud"],
        unpriced_calls=sum(calls.values()) - sum(priced.values()),
        unit=prices.unit,
        measured=sum(measured) if measured else None,
        measured_requests=len(measured),
    )

    versions: dict[str, list[float]] = collections.defaultdict(list)
    for request in ordered:
        versions[request.model_version].append(request.time)
    bundles = sorted(
        (Bundle(v, len(times), times[0], times[-1]) for v, times in versions.items()),
        key=lambda b: (b.first, b.model_version),
    )

    quality = None
    if outcomes:
        from serving.dashboard._quality import estimate_quality

        quality = estimate_quality(ordered, outcomes)
    return Views(
        requests=len(ordered),
        start=start,
        end=end,
        bucket_s=width,
        buckets=[origin + i * width for i in range(n_buckets)],
        zones=zones,
        served=served,
        zones_over_time=zones_over_time,
        served_over_time=served_over_time,
        fallbacks=_counts([r.fallback for r in ordered if r.fallback is not None]),
        edge_first=sum(r.target == "edge" for r in ordered),
        latency=latency,
        cost=cost,
        familiarity_known=sum(r.unfamiliar is not None for r in ordered),
        unfamiliar=sum(r.unfamiliar is True for r in ordered),
        bundles=bundles,
        quality=quality,
        conversations=conversation_view(ordered),
    )
