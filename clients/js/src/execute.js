// Run a request where the router says, falling back from the edge to the cloud
// (serving/execute.py's rules, as its asyncio aexecute applies them):
// - cloud-first requests call `cloud` only;
// - edge-first requests call `edge`, and fall back to the cloud when the edge call throws,
//   times out (`edgeTimeoutMs`: its AbortSignal is aborted, so a callable that honours it stops),
//   or the prompt exceeds the edge context limit (then the edge is not called);
// - in the edge_with_cloud_fallback zone the optional `accept(response)` check also runs (the
//   router is unsure there); an answer it rejects, or a check that throws, falls back to the
//   cloud. `verifyEdgeZone` checks confident edge answers too;
// - a cloud failure throws CloudCallError with the edge failure, the steps and the decision;
// - a side the decision forbids (its `forbidden`, from the policy or what the request needs) is never
//   called: an edge-first request whose edge is forbidden goes to the cloud, and where the cloud would
//   serve but is forbidden, FallbackForbidden is thrown instead, naming the rule (serving/execute.py).
// Field names are the Python SDK's (served_by, fallback_reason, ...), as in Decision.
import { CLOUD, FALLBACK } from "./contract.js";
import { FallbackForbidden } from "./policy/errors.js";

export const REASON_CHARS = 300;

/** The cloud call failed; `edge_error` holds the edge failure that led there, if any, `steps`
 * the calls made and `decision` the routing decision carried out. */
export class CloudCallError extends Error {
  constructor(message, { edge_error, steps, decision, cause }) {
    super(message, { cause });
    this.name = "CloudCallError";
    this.edge_error = edge_error;
    this.steps = steps;
    this.decision = decision;
  }
}

/** The edge call did not answer within edgeTimeoutMs. */
export class EdgeTimeoutError extends Error {
  constructor(message) { super(message); this.name = "EdgeTimeoutError"; }
}

const now = () => performance.now();

/** A timeout, as Python's TimeoutError: EdgeTimeoutError, a DOMException named TimeoutError
 * (AbortSignal.timeout), or an error marked `isTimeout` (the chat client's UpstreamTimeout). */
const isTimeout = (error) => error instanceof EdgeTimeoutError || error?.name === "TimeoutError" || error?.isTimeout === true;

/** Run `call` as a step named `name`: ok, timeout or error, with its duration in seconds. */
async function step(steps, name, call) {
  const start = now();
  try {
    const result = await call();
    steps.push({ name, status: "ok", seconds: (now() - start) / 1000, detail: "" });
    return result;
  } catch (error) {
    const status = isTimeout(error) ? "timeout" : "error";
    steps.push({ name, status, seconds: (now() - start) / 1000, detail: String(error).slice(0, 500) });
    throw error;
  }
}

/** edge(prompt, {signal}), failing with EdgeTimeoutError after `timeoutMs` (and aborting `signal`). */
function timedEdge(edge, prompt, timeoutMs) {
  const controller = new AbortController();
  if (timeoutMs === null || timeoutMs === undefined) return Promise.resolve().then(() => edge(prompt, { signal: controller.signal }));
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => {
      const error = new EdgeTimeoutError(`edge call exceeded ${timeoutMs} ms`);
      controller.abort(error);
      reject(error);
    }, Math.max(0, timeoutMs));
  });
  const call = Promise.resolve().then(() => edge(prompt, { signal: controller.signal }));
  call.catch(() => {});  // an overrun that fails later is nobody's error
  return Promise.race([call, expired]).finally(() => clearTimeout(timer));
}

/**
 * Carry out a routing decision (module doc).
 * @returns {Promise<{response: any, served_by: "edge" | "cloud", decision: object, fallback_reason: string | null,
 *   fell_back: boolean, edge_error: unknown, steps: object[], fallback_code: string | null}>}
 */
export async function execute(decision, prompt, { edge, cloud, edgeContextTokens, edgeTimeoutMs = null, accept = null,
  verifyEdgeZone = false, sidesForbidden = null }) {
  const forbids = sidesForbidden ?? { edge: decision.forbidden.includes("edge"), cloud: decision.forbidden.includes(CLOUD) };
  const steps = [];
  let edgeError = null, reason = null, code = null;
  const check = decision.zone === FALLBACK || verifyEdgeZone ? accept : null;
  const served = (response, by) => {
    const fellBack = by === "cloud" && reason !== null;
    return { response, served_by: by, decision, fallback_reason: fellBack ? reason.slice(0, REASON_CHARS) : null,
      fell_back: fellBack, edge_error: fellBack ? edgeError : null, steps, fallback_code: fellBack ? code : null };
  };

  if (decision.zone !== CLOUD && !forbids.edge) {
    if (decision.n_tokens > edgeContextTokens) {
      reason = code = `prompt of ~${decision.n_tokens} tokens exceeds the edge context limit of ${edgeContextTokens}`;
      steps.push({ name: "edge", status: "skipped", seconds: 0, detail: reason });
    } else {
      let response, answered = false;
      try {
        response = await step(steps, "edge", () => timedEdge(edge, prompt, edgeTimeoutMs));
        answered = true;
      } catch (error) {
        edgeError = error;
        [reason, code] = [`edge call failed: ${error}`, `edge call failed (${error?.name ?? typeof error})`];
      }
      if (answered) {
        if (!check) return served(response, "edge");
        let accepted = false;
        try {
          accepted = Boolean(await step(steps, "accept", () => check(response)));
          if (!accepted) {
            steps[steps.length - 1].status = "rejected";
            reason = code = "accept check rejected the edge answer";
          }
        } catch (error) {
          edgeError = error;
          [reason, code] = [`accept check raised: ${error}`, `accept check raised (${error?.name ?? typeof error})`];
        }
        if (accepted) return served(response, "edge");
      }
    }
  }
  if (forbids.cloud) {
    const rule = decision.rule || "(unnamed)";
    throw new FallbackForbidden(`policy '${rule}' forbids the cloud, and the edge did not serve: ${code || "not edge first"}`,
      { rule, endpoint: CLOUD, edge_error: edgeError, steps, decision, cause: edgeError ?? undefined });
  }
  let response;
  try {
    response = await step(steps, "cloud", () => Promise.resolve().then(() => cloud(prompt)));
  } catch (error) {
    throw new CloudCallError(`cloud call failed: ${error}` + (reason ? ` (after: ${reason})` : ""),
      { edge_error: edgeError, steps, decision, cause: error });
  }
  return served(response, "cloud");
}
