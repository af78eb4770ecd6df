// What the routed chat client tells the caller about a request (serving/chat/_routing_info.py):
// where it went and why, each call's time, and what it cost. A plain object with the Python
// RoutingInfo's field names, so JSON.stringify(routing) reads like Python's routing.to_dict().
import { fallbackKind as executionFallbackKind } from "../execute.js";
import { failureKind } from "./errors.js";

/** A short, fixed name for why the endpoint before the serving one was left (null when the first one
 * reached served): context_limit, rejected, accept_error, forbidden, connection_error, timeout,
 * slow_first_token, http_error, malformed or error (execute.js's fallbackKind, with the chat client's
 * failure kinds). */
export function fallbackKind(execution) {
  return executionFallbackKind(execution, failureKind);
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
    tried: execution.tried,
    expected_cost: execution.expected_cost,
  };
}
