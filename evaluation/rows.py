"""Figures for one split: the learned router at its thresholds and over its score curve,
next to the hand rule table on the same rows."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from serving.rules import RULE_HI, RULE_LO, rule_score
from serving.zones import CLOUD, FALLBACK, thresholds_for, zone_for
from training.metrics import curve_summary, operating_point


def learned_zones(scores, precisions, thresholds: dict) -> np.ndarray:
    return np.array([zone_for(s, *thresholds_for(thresholds, p)) for s, p in zip(scores, precisions)])


def rule_table_scores(n_tokens, domains, precisions) -> np.ndarray:
    return np.array([rule_score(n, d, p) for n, d, p in zip(n_tokens, domains, precisions)])


def policy_figures(scores, zones, q_edge, q_cloud, needed, *, catch_rate: float) -> dict:
    """Curve summary + operating point + what the fallback zone adds at the given catch rate."""
    q_edge, q_cloud = np.asarray(q_edge, float), np.asarray(q_cloud, float)
    to_cloud = zones == CLOUD
    in_fallback = zones == FALLBACK
    with_fallback = np.where(to_cloud, q_cloud,
                             np.where(in_fallback, q_edge + catch_rate * (1 - q_edge) * q_cloud, q_edge))
    calls = np.where(to_cloud, 1.0, np.where(in_fallback, catch_rate * (1 - q_edge), 0.0))
    return {
        **curve_summary(scores, q_edge, q_cloud, needed),
        **operating_point(to_cloud, q_edge, q_cloud, needed),
        "fallback_share": float(in_fallback.mean()),
        "quality_with_fallback": float(with_fallback.mean()),
        "expected_cloud_calls": float(calls.mean()),
    }


def compare_on_split(*, scores, precisions, thresholds, n_tokens, domains, q_edge, q_cloud, needed,
                     catch_rate: float) -> dict:
    """{'learned': {...}, 'rule_table': {...}, 'all_edge_quality', 'all_cloud_quality', 'oracle_quality'}."""
    rules = rule_table_scores(n_tokens, domains, precisions)
    rule_zones = np.array([zone_for(s, RULE_LO, RULE_HI) for s in rules])
    q_edge, q_cloud = np.asarray(q_edge, float), np.asarray(q_cloud, float)
    return {
        "rows": int(len(scores)),
        "cloud_needed_share": float(np.mean(needed)),
        "all_edge_quality": float(q_edge.mean()),
        "all_cloud_quality": float(q_cloud.mean()),
        "oracle_quality": float(np.where(needed == 1, q_cloud, q_edge).mean()),
        "learned": policy_figures(scores, learned_zones(scores, precisions, thresholds), q_edge, q_cloud, needed,
                                  catch_rate=catch_rate),
        "rule_table": policy_figures(rules, rule_zones, q_edge, q_cloud, needed, catch_rate=catch_rate),
    }


@dataclass
class SplitRows:
    """One split's rows as the figures, thresholds and parity check need them."""

    request_ids: np.ndarray
    prompts: np.ndarray
    precisions: np.ndarray   # object: "exact" / "standard" / "tolerant" / None
    domains: np.ndarray
    n_tokens: np.ndarray
    q_edge: np.ndarray
    q_cloud: np.ndarray
    needed: np.ndarray
    scores: np.ndarray

    @classmethod
    def from_frame(cls, frame, *, n_tokens, scores) -> "SplitRows":
        """From prepared rows (request_id, prompt, precision, domain, qualities, label)."""
        from data.prepare import missing_text_as_none

        frame = missing_text_as_none(frame.copy())
        return cls(frame["request_id"].to_numpy(object), frame["prompt"].to_numpy(object),
                   frame["precision"].to_numpy(object), frame["domain"].to_numpy(object),
                   np.asarray(n_tokens, float), frame["edge_quality"].to_numpy(float),
                   frame["cloud_quality"].to_numpy(float), frame["label"].to_numpy(int), np.asarray(scores, float))

    def __len__(self) -> int:
        return len(self.scores)

    def figures(self, thresholds: dict, *, catch_rate: float) -> dict:
        return compare_on_split(scores=self.scores, precisions=self.precisions, thresholds=thresholds,
                                n_tokens=self.n_tokens, domains=self.domains, q_edge=self.q_edge,
                                q_cloud=self.q_cloud, needed=self.needed, catch_rate=catch_rate)
