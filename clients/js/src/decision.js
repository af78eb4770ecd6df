// The one result type every router returns (serving/routing/_decision.py). Field names and order are the
// Python SDK's Decision.to_dict(), snake_case included, so a decision serialises to the same JSON in
// both (logs, the CLI, the parity vectors).
//
// One vocabulary for every bundle: `cascade` (the endpoints execute() tries, in order), `on_device`
// (whether each runs on the device), `checked` (the endpoints whose answers the accept check reads),
// and, derived from them as Python derives them: `endpoint` (the cascade's first), `target` ("edge"
// when that runs on the device, else "cloud"), `zone` (cloud when the cloud runs first;
// edge_with_cloud_fallback when a checked device answer can fall back to the cloud; else edge),
// `p_edge` and `p_cloud` (a two-endpoint bundle's expected). A two-endpoint zone is a cascade: edge =
// (edge, cloud) unchecked, edge_with_cloud_fallback = (edge, cloud) with the edge checked, cloud = (cloud).
import { CLOUD, EDGE, FALLBACK } from "./contract.js";

const ZONE_CASCADES = {
  [EDGE]: { cascade: [EDGE, CLOUD], on_device: [true, false], checked: [] },
  [FALLBACK]: { cascade: [EDGE, CLOUD], on_device: [true, false], checked: [EDGE] },
  [CLOUD]: { cascade: [CLOUD], on_device: [false], checked: [] },
};

/** The cascade, on_device and checked fields of a two-endpoint zone (fresh arrays). */
export function zoneCascade(zone) {
  const placed = ZONE_CASCADES[zone];
  return { cascade: [...placed.cascade], on_device: [...placed.on_device], checked: [...placed.checked] };
}

/** A Decision from its fields, in Python's to_dict() order, with the derived fields. `turn` (the
 * request's turn in its conversation, 1 for the first) and `switched` (whether it moves the
 * conversation from the endpoint that answered its last turn) are fields after `expected` for a
 * request in a conversation; without one both are null and left out of the JSON (not enumerable), as
 * Python's to_dict() leaves them out, so a decision serialises as it did before conversations.
 * `switch_costs` (each endpoint's price in dollars over staying on the last turn's endpoint, unweighted;
 * null without a last endpoint) is never in the JSON, as in Python's. */
export function decisionOf({ cascade, score, reason, degraded, model_version, on_device, checked = [], precision = null,
  n_tokens = 0, truncated = false, novelty = null, unfamiliar = false, rule = null, forbidden = [], expected = null, turn = null,
  switched = null, switch_costs = null }) {
  const zone = !on_device[0] ? CLOUD : checked.length && !on_device.every(Boolean) ? FALLBACK : EDGE;
  const two = expected !== null && Object.keys(expected).length === 2;
  const decision = { cascade, score, reason, degraded, model_version, on_device, checked, precision, n_tokens, truncated, novelty,
    unfamiliar, rule, forbidden, expected };
  if (turn !== null) Object.assign(decision, { turn, switched });
  Object.assign(decision, { endpoint: cascade[0], target: on_device[0] ? EDGE : CLOUD, zone,
    p_edge: two ? expected[EDGE] ?? null : null, p_cloud: two ? expected[CLOUD] ?? null : null });
  if (turn === null) {
    Object.defineProperties(decision, { turn: { value: null, writable: true, configurable: true },
      switched: { value: null, writable: true, configurable: true } });
  }
  Object.defineProperty(decision, "switch_costs", { value: switch_costs, writable: true, configurable: true });
  return decision;
}

/** A two-endpoint decision from its zone (the rule table's, a bundle's bands'). */
export function makeDecision(zone, fields) {
  return decisionOf({ ...fields, ...zoneCascade(zone) });
}

/** The same decision in another zone, with another reason. */
export function rezoned(decision, zone, reason = decision.reason) {
  return makeDecision(zone, { ...decision, reason });
}
