// What the routed chat client tells the caller about a request (serving/chat/routing_info.py):
// where it went and why, each call's time, and what it cost. A plain object with the Python
// RoutingInfo's field names, so JSON.stringify(routing) reads like Python's routing.to_dict().
import { failureKind } from "./errors.js";

/** A short, fixed name for why the cloud answered an edge-first request (null when nothing fell
 * back): context_limit, rejected, accept_error, connection_error, timeout, slow_first_token,
 * http_error, malformed or error. */
export function fallbackKind(execution) {
  if (execution.fallback_reason === null) return null;
  const steps = execution.steps;
  const last = steps.length >= 2 ? steps[steps.length - 2] : null;  // the step before the cloud's
  if (last && last.name === "edge" && last.status === "skipped" && execution.edge_error === null) return "context_limit";
  if (last && last.name === "accept") return last.status === "rejected" ? "rejected" : "accept_error";
  return failureKind(execution.edge_error);
}

/**
 * How one request was served.
 * @param {object} execution what execute.js returned
 * @param {string} model the model that answered
 */
export function routingInfo(execution, model) {
  return {
    decision: execution.decision,
    served_by: execution.served_by,
    model,
    fallback_reason: execution.fallback_reason,
    fallback_kind: fallbackKind(execution),
    steps: execution.steps,
    estimated_cost: null,
    seconds: null,
  };
}
