"""The routing policies compared offline on the same rows (POLICIES) and each one's figures (evaluate_policies;
docs/evaluation.md#policies)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from evaluation.fallback import Catch
from evaluation.figures import AtShare, Comparison, Cost, KeyFigures, Latency, PolicyFigures, Population, SplitSummary
from evaluation.metrics import (
    CostModel,
    LatencyModel,
    at_share,
    cost_figures,
    curve_summary,
    fallback_figures,
    latency_figures,
    operating_point,
    pgr,
    quality_curve,
    random_zone_probabilities,
    zone_probabilities,
)
from evaluation.reference import ReferencePolicy
from evaluation.rows import Rows, zones_at
from evaluation.thresholds import Thresholds, select_thresholds
from serving._contract import CLOUD, EDGE, FALLBACK
from serving.routing._rule_table import LONG_PROMPT_TOKENS, RULE_DOMAINS, RULE_HI, RULE_LO, rule_score


@dataclass(frozen=True)
class Policy:
    """A routing policy compared offline: its table and plot labels (`short` for narrow columns) and what it is."""

    label: str
    short: str
    description: str


# Every policy by its name in figures and files, in the order tables list them: the one home of their labels.
POLICIES: dict[str, Policy] = {
    "learned": Policy("learned router", "learned", "the bundle's router through the SDK, at its calibrated thresholds"),
    "rule_table": Policy(
        "hand rule table (label domain)", "hand rule", "hand rule table (baseline.md), domain from the log's label"
    ),
    "rule_table_inferred": Policy(
        "hand rule table (inferred domain)",
        "hand rule (text)",
        "hand rule table, domain inferred from the text (the SDK's degraded mode)",
    ),
    "tuned_rule_table": Policy(
        "tuned rule table",
        "tuned rule",
        "the same three rules, weights and thresholds grid-searched on the train split",
    ),
    "reference": Policy(
        "reference (TF-IDF + logistic regression)",
        "reference",
        "TF-IDF word 1-2-grams + log length, a logistic regression per outcome fitted on the train split, "
        "thresholds on the val split: the ten-minute baseline to beat",
    ),
    "random": Policy(
        "random (matched share)",
        "random",
        "random routing at the learned router's cloud-first and fallback shares (expectation)",
    ),
    "all_edge": Policy("all-edge", "all-edge", "every request on the edge, no fallback"),
    "all_cloud": Policy("all-cloud", "all-cloud", "every request to the cloud"),
    "oracle": Policy("oracle", "oracle", "the cloud exactly when the cloud is needed (the label)"),
}
FIXED_POINTS = ("all_edge", "all_cloud")  # no score curve to speak of
CURVE_KEYS = ("auc", "apgr", "cpt50", "cpt80")


def check_policies(names) -> list[str]:
    """Known policy names in POLICIES order, `learned` always first (everything is compared to it)."""
    names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; choose from {', '.join(POLICIES)}")
    return [n for n in POLICIES if n == "learned" or n in names]


def rule_table_scores(n_tokens, domains, precisions) -> np.ndarray:
    """The hand rule table's score of each request (serving.routing._rule_table.rule_score)."""
    return np.array([rule_score(n, d, p) for n, d, p in zip(n_tokens, domains, precisions)])


def unfamiliar_policy_zones(rows: Rows, policy: str):
    """The zone the SDK gives an unfamiliar prompt under `policy` (serving.routing._router), for every
    row; None for `learned` (the learned zone stays)."""
    if policy == "learned":
        return None
    if policy == "rule_table":  # as the SDK's rule table: the domain from the text
        return _rule_table(rows, rows.with_inferred_domains().inferred_domains)[1]
    return np.full(len(rows), FALLBACK, dtype=object)


def policy_figures(scores, zones, q_edge, q_cloud, needed) -> dict:
    """Curve summary, operating point and fallback-zone share of one deterministic policy."""
    return {
        **curve_summary(scores, q_edge, q_cloud, needed),
        **operating_point(np.asarray(zones) == CLOUD, q_edge, q_cloud, needed),
        "fallback_share": float((np.asarray(zones) == FALLBACK).mean()),
    }


def rule_bits(n_tokens, domains, precisions) -> np.ndarray:
    """(n, 3) 0/1: the hand rule table's three conditions, read off rule_score itself so they cannot drift."""
    return np.array(
        [
            [rule_score(n, None, None) > 0, rule_score(0, d, None) > 0, rule_score(0, None, p) > 0]
            for n, d, p in zip(n_tokens, domains, precisions)
        ],
        dtype=np.int64,
    ).reshape(-1, 3)


def _capped(bits: np.ndarray, weights, units: int) -> np.ndarray:
    # Integer sums, divided once: no 0.1 + 0.2 float drift at the zone boundaries.
    return np.minimum(bits @ np.asarray(weights), units) / units


@dataclass(frozen=True)
class TunedRules:
    """Rule weights (long prompt, domain, exact) on a grid of `1/units`, capped sum, and zones."""

    units: int
    weights: tuple[int, int, int]  # in grid units
    lo: float
    hi: float
    fit: dict  # the thresholds' figures on the rows it was fitted on

    def scores(self, n_tokens, domains, precisions) -> np.ndarray:
        return _capped(rule_bits(n_tokens, domains, precisions), self.weights, self.units)

    def as_dict(self) -> dict:
        weights = {
            name: w / self.units for name, w in zip(("long_prompt", "rule_domain", "exact_precision"), self.weights)
        }
        return {"weights": weights, "lo": self.lo, "hi": self.hi, "fit": self.fit}


def _rank(t: Thresholds, target: str) -> tuple:
    """Larger is better, under the same target as the learned router's thresholds: met, its aim
    (fewer cloud calls for `quality`, more quality for `budget`), else the other figure first."""
    calls, quality = -t.expected_cloud_calls, t.expected_quality
    aim, other = (calls, quality) if target == "quality" else (quality, calls)
    return (t.met_target, aim if t.met_target else other, other, -t.fallback_share)


def tune_rule_table(
    n_tokens, domains, precisions, q_edge, q_cloud, *, step: float = 0.1, target: str = "quality", **threshold_options
) -> TunedRules:
    """Grid-search the three weights (multiples of `step` in [0, 1]) and, for each, the two
    thresholds for `target`; the hand weights are tried first, so they win ties."""
    units = round(1 / step) if step > 0 else 0
    if units < 1 or abs(units * step - 1) > 1e-9:
        raise ValueError(f"rule weight step must divide 1 (e.g. 0.1, 0.05), got {step!r}")
    bits = rule_bits(n_tokens, domains, precisions)
    if len(bits) == 0:
        raise ValueError("no rows to tune the rule table on")
    # The hand table's weights, read off rule_score on rows that meet one condition each.
    one_condition = ((LONG_PROMPT_TOKENS + 1, None, None), (0, min(RULE_DOMAINS), None), (0, None, "exact"))
    hand = tuple(round(rule_score(*row) * units) for row in one_condition)
    fits = (
        (weights, select_thresholds(_capped(bits, weights, units), q_edge, q_cloud, target=target, **threshold_options))
        for weights in itertools.chain([hand], itertools.product(range(units + 1), repeat=3))
    )
    weights, t = max(fits, key=lambda fit: _rank(fit[1], target))  # max keeps the first of equal ranks
    return TunedRules(units, tuple(int(w) for w in weights), t.lo, t.hi, t.as_dict())


def _constant(zone: str, value: float):
    return lambda rows, fitted: (np.full(len(rows), value), np.full(len(rows), zone, dtype=object))


def _rule_table(rows: Rows, domains):
    scores = rule_table_scores(rows.n_tokens, domains, rows.precisions)
    return scores, zones_at(scores, RULE_LO, RULE_HI)


def _tuned(rows: Rows, fitted: dict):
    tuned = fitted["tuned_rule_table"]
    if tuned is None:
        raise ValueError("the tuned rule table was not fitted (no train rows); leave it out of the policies")
    scores = tuned.scores(rows.n_tokens, rows.domains, rows.precisions)
    return scores, zones_at(scores, tuned.lo, tuned.hi)


def _reference(rows: Rows, fitted: dict):
    reference = fitted["reference"]
    if reference is None:
        raise ValueError(
            "the reference policy was not fitted: pass reference=ReferencePolicy.fit(train_rows, "
            "val_rows, ...) (evaluation.reference), or leave `reference` out of the policies"
        )
    return reference.route(rows)


# name -> (rows, fitted policies by name) -> (score, zone) per request. `random` is built from the learned shares.
SCORERS = {
    "learned": lambda rows, fitted: (rows.scores, rows.zones),
    "rule_table": lambda rows, fitted: _rule_table(rows, rows.domains),
    "rule_table_inferred": lambda rows, fitted: _rule_table(rows, rows.with_inferred_domains().inferred_domains),
    "tuned_rule_table": _tuned,
    "reference": _reference,
    "all_edge": _constant(EDGE, 0.0),
    "all_cloud": _constant(CLOUD, 1.0),
    "oracle": lambda rows, fitted: (rows.needed.astype(float), np.where(rows.needed == 1, CLOUD, EDGE).astype(object)),
}


def evaluate_policies(
    rows: Rows,
    names,
    *,
    tuned: TunedRules | None = None,
    reference: ReferencePolicy | None = None,
    catch_rate: float = 0.5,
    cost: CostModel | None = None,
    latency: LatencyModel | None = None,
) -> tuple[Comparison, dict]:
    """(figures, curves): every policy's figures on these rows, and the quality curve of each scored
    one; `tuned`, `reference`: those policies fitted, when asked for. The fallback's rates are the
    acceptance check's verdicts where rows.rejected is known, `catch_rate` assumed elsewhere."""
    if len(rows) == 0:
        raise ValueError("no requests to evaluate: the input is empty")
    catch_rate = Catch.for_rows(rows.rejected, catch_rate)
    cost, latency = cost or CostModel(), latency or LatencyModel()
    qe, qc, needed = rows.q_edge, rows.q_cloud, rows.needed
    all_edge, all_cloud = float(qe.mean()), float(qc.mean())
    learned = np.asarray(rows.zones)  # the learned router's zones: `random` routes at their shares
    share, fallback_share = float((learned == CLOUD).mean()), float((learned == FALLBACK).mean())
    figures: dict[str, PolicyFigures] = {}
    curves, fitted = {}, {"tuned_rule_table": tuned, "reference": reference}
    for name in check_policies(names):
        if name == "random":
            scores = np.zeros(len(rows))  # one tied block: the expectation over random orders
            probs = random_zone_probabilities(len(rows), cloud_share=share, fallback_share=fallback_share)
            point = {
                **curve_summary(scores, qe, qc, needed),
                **at_share(scores, qe, qc, needed, share),
                "fallback_share": fallback_share,
            }
        else:
            scores, zones = SCORERS[name](rows, fitted)
            probs = zone_probabilities(zones)
            point = policy_figures(scores, zones, qe, qc, needed)
        point["pgr"] = pgr(point["quality"], all_edge, all_cloud)
        point.update(fallback_figures(probs, qe, qc, catch_rate=catch_rate))
        point["quality_with_fallback"] = point["quality"] + point["fallback_recovered_quality"]
        point["expected_cloud_calls"] = point["cloud_share"] + point["fallback_fires"]
        point["cost"] = {k: Cost(**v) for k, v in cost_figures(probs, qe, catch_rate=catch_rate, model=cost).items()}
        point["latency"] = {
            k: Latency(**v) for k, v in latency_figures(probs, qe, catch_rate=catch_rate, model=latency).items()
        }
        if name in FIXED_POINTS:
            point.update(dict.fromkeys(CURVE_KEYS, float("nan")), at_matched_share=None)
        else:
            point["at_matched_share"] = AtShare(**at_share(scores, qe, qc, needed, share))
            curves[name] = quality_curve(scores, qe, qc)
        figures[name] = PolicyFigures(**point)
    population = Population(
        rows=len(rows),
        cloud_needed_share=float(needed.mean()),
        all_edge_quality=all_edge,
        all_cloud_quality=all_cloud,
        oracle_quality=float(np.where(needed == 1, qc, qe).mean()),
        fallback_rates=catch_rate.describe(len(rows)),
    )
    return Comparison(population, share, figures), curves


SUMMARY_KEYS = KeyFigures.names()


def summary(rows: Rows, *, catch_rate: float) -> SplitSummary:
    """The training run's figures for one split: the learned router's and the hand rule table's."""
    return evaluate_policies(rows, ("learned", "rule_table"), catch_rate=catch_rate)[0].summary()


# Labels double as MLflow metric-name parts, so only letters, digits, spaces and dashes.
LENGTH_BUCKETS = (
    (64, "up to 64 tokens"),
    (256, "65-256 tokens"),
    (1024, "257-1024 tokens"),
    (float("inf"), "over 1024 tokens"),
)
BREAKDOWN_POLICIES = ("learned", "rule_table", "rule_table_inferred", "tuned_rule_table", "reference")


def length_buckets(n_tokens) -> np.ndarray:
    """Prompt-length bucket label per request (LENGTH_BUCKETS)."""
    limits = np.array([limit for limit, _ in LENGTH_BUCKETS])
    labels = np.array([label for _, label in LENGTH_BUCKETS], dtype=object)
    return labels[np.searchsorted(limits, np.asarray(n_tokens, float), side="left")]


def breakdowns(rows: Rows, names, **options) -> dict[str, dict[str, SplitSummary]]:
    """{dimension: {group: summary}} of BREAKDOWN_POLICIES by source, domain group, declared precision and length."""
    dimensions = {
        "source": rows.sources,
        "domain": np.array([d or "unknown" for d in rows.domains], dtype=object),
        "precision": np.array([p or "undeclared" for p in rows.precisions], dtype=object),
        "length": length_buckets(rows.n_tokens),
    }
    wanted = [n for n in check_policies(names) if n in BREAKDOWN_POLICIES]
    out: dict[str, dict[str, SplitSummary]] = {}
    for dimension, groups in dimensions.items():
        out[dimension] = {}
        present = set(groups.tolist())
        ordered = [b for _, b in LENGTH_BUCKETS if b in present] if dimension == "length" else sorted(present)
        for group in ordered:
            out[dimension][str(group)] = evaluate_policies(rows.subset(groups == group), wanted, **options)[0].summary()
    return out
