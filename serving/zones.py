"""Score -> zone, in one place for every router (learned or rule table)."""
from __future__ import annotations

EDGE, FALLBACK, CLOUD = "edge", "edge_with_cloud_fallback", "cloud"
ZONES = (EDGE, FALLBACK, CLOUD)


def zone_for(score: float, lo: float, hi: float) -> str:
    """edge below `lo`, cloud above `hi`, edge_with_cloud_fallback in between (inclusive)."""
    if score < lo:
        return EDGE
    if score > hi:
        return CLOUD
    return FALLBACK


def first_target(zone: str) -> str:
    """Where a request in this zone runs first."""
    return "cloud" if zone == CLOUD else "edge"


def thresholds_for(table: dict, precision: str | None) -> tuple[float, float]:
    """(lo, hi) for a declared precision; undeclared or unknown tags use the "default" entry."""
    entry = table.get(precision) if precision is not None else None
    entry = entry or table["default"]
    return float(entry["lo"]), float(entry["hi"])
