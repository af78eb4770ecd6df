// The one result type every router returns (serving/decision.py). Field names are the Python
// SDK's, snake_case included, so a decision serialises to the same JSON in both (logs, the CLI,
// the parity vectors).
import { firstTarget } from "./contract.js";

/** A Decision in the Python field order, with the defaults Python's dataclass has. */
export function makeDecision(zone, { score, reason, degraded, model_version, precision = null, n_tokens = 0,
  truncated = false, p_edge = null, p_cloud = null, novelty = null, unfamiliar = false, rule = null, forbidden = [],
  expected = null, endpoint = null, cascade = [] }) {
  // rule, forbidden: the Python SDK's policy layer (docs/policies.md); this SDK has none yet, so
  // every decision carries no rule and forbids nothing. expected: each endpoint's P(good answer)
  // by name ({edge, cloud} for a two-endpoint bundle with both heads); endpoint, cascade: an
  // N-endpoint bundle's first endpoint and the order to try them in (endpoint-routing.js).
  return { target: firstTarget(zone), zone, score, reason, degraded, model_version, precision, n_tokens, truncated,
    p_edge, p_cloud, novelty, unfamiliar, rule, forbidden, expected, endpoint, cascade };
}
