"""Precision and recall of the content detectors (serving.policy) on a labelled set, span by span, per detector
(docs/policies.md#measured-precision-and-recall): `overlap` matching (a found span is right when it overlaps a labelled
span of its detector; a label is recalled when a found span of its detector overlaps it) and `exact` (equal spans). A
labelled line is {"text": ..., "labels": [{"detector", "start", "end"}, ...]}; each proportion comes with its Wilson 95%
interval, which stays inside [0, 1] and is sound at 0 or n errors."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from evaluation.metrics import Z95
from serving.policy import DETECTORS, Finding, detect

MATCHINGS = ("overlap", "exact")


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of successes / n; (0, 1) when n is 0."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Proportion:
    successes: int
    n: int

    def as_dict(self) -> dict[str, object]:
        lo, hi = wilson(self.successes, self.n)
        value = self.successes / self.n if self.n else None
        return {"value": value, "successes": self.successes, "n": self.n, "wilson95": [lo, hi]}


@dataclass(frozen=True)
class Miss:
    """A wrong or missed span: which line, which detector, where (kept to print the set's errors)."""

    line: int
    detector: str
    start: int
    end: int
    kind: str  # "false_positive" or "missed"


@dataclass
class Counts:
    found: int = 0
    labelled: int = 0
    found_right: int = 0
    labels_recalled: int = 0

    def figures(self) -> dict[str, object]:
        return {
            "precision": Proportion(self.found_right, self.found).as_dict(),
            "recall": Proportion(self.labels_recalled, self.labelled).as_dict(),
        }


def matches(a: tuple[int, int], b: tuple[int, int], matching: str) -> bool:
    return a == b if matching == "exact" else a[0] < b[1] and b[0] < a[1]


def score(
    lines: Iterable[Mapping[str, object]],
    find: Callable[[str], list[Finding]] = detect,
    names: Iterable[str] = tuple(DETECTORS),
) -> tuple[dict[str, dict[str, Counts]], list[Miss]]:
    """Counts per matching and detector over the lines, and the overlap matching's errors."""
    counts = {m: {name: Counts() for name in names} for m in MATCHINGS}
    misses: list[Miss] = []
    for i, line in enumerate(lines):
        text, labels = line["text"], line["labels"]
        if not isinstance(text, str) or not isinstance(labels, list):
            raise ValueError(f"line {i + 1}: needs a str 'text' and a list 'labels'")
        found = find(text)
        for matching in MATCHINGS:
            for name, c in counts[matching].items():
                got = [(f.start, f.end) for f in found if f.detector == name]
                want = [(int(lab["start"]), int(lab["end"])) for lab in labels if lab["detector"] == name]
                right = [g for g in got if any(matches(g, w, matching) for w in want)]
                recalled = [w for w in want if any(matches(g, w, matching) for g in got)]
                c.found, c.labelled = c.found + len(got), c.labelled + len(want)
                c.found_right, c.labels_recalled = c.found_right + len(right), c.labels_recalled + len(recalled)
                if matching == "overlap":
                    misses += [Miss(i + 1, name, *g, "false_positive") for g in got if g not in right]
                    misses += [Miss(i + 1, name, *w, "missed") for w in want if w not in recalled]
    return counts, misses


def figures(counts: dict[str, dict[str, Counts]]) -> dict[str, dict[str, dict[str, object]]]:
    """The metrics.json form: matching -> detector -> precision and recall with their intervals."""
    return {m: {name: c.figures() for name, c in per.items()} for m, per in counts.items()}
