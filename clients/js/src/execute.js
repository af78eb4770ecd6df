// Carrying out a decision: its cascade, one endpoint after another, until an answer stands
// (serving/execution/_execute.py, as its asyncio aexecute applies the rules). One runner for every decision:
// a two-endpoint bundle's zone is a cascade too (edge = edge then cloud, unchecked;
// edge_with_cloud_fallback = edge then cloud, the edge's answer checked; cloud = the cloud alone).
// Router.execute and the routed chat client (chat.js, its streams too) come here.
//
// The calls: `endpoints` maps each endpoint's name to its call (a two-endpoint app may give `edge`
// and `cloud`). Each is called as call(prompt, {signal, endpoint}) and returns the answer or a
// Promise of it; `signal` is aborted when the call's timeout passes or the caller's signal aborts.
// Each step keeps what its call returned (`step.result`, not enumerable: never serialised).
//
// The order is the decision's `cascade`. Each endpoint in it is left for the next when:
// - the decision forbids it (`forbidden`, by name; "cloud" forbids every endpoint whose spec runs in
//   the cloud, "edge" every one on the device): it is never called, a fallback included
//   ("forbidden"). A side forbidden without the specs that say where the endpoints run is a
//   RangeError before any call;
// - the prompt's tokens exceed its context limit (`specs[name].context_tokens`): not called ("context");
// - the call throws ("error"), or overruns its timeout ("timeout": `timeoutsMs[name]`, cut to what is
//   left before the request's `deadline`; its signal is aborted and the call abandoned, whether or
//   not it stops, and the next endpoint serves);
// - the request's `deadline` (a performance.now() value) has passed before its turn: not called, its
//   step "skipped" with "the request's deadline has passed", left as a timeout ("timeout:
//   TimeoutError", a CallTimeoutError saying so), so a run past its deadline ends in EndpointsFailed
//   naming each endpoint it could not reach, as Python's TimeoutError does;
// - the `accept` check rejects its answer, or throws ("rejected"): it reads the answers of the
//   decision's `checked` endpoints (every answer but the last with verifyEdgeZone); the last
//   endpoint's answer stands, unless the policy forbade what would follow it.
// The first answer that is not left is served. `tried` lists each endpoint reached, in order, with
// why it was left (Tried: `name=outcome[:ErrorClass]`), `expected_cost` what the calls made are
// expected to cost (each called endpoint's spec price at the prompt's tokens and `outputTokens`
// answer tokens; null when a called endpoint has no spec or no price). `fallback_reason` says why
// the endpoints before the serving one were left ("left edge=error:ConnectionError:
// ConnectionError('refused')", the error as Python's repr shows one), `fallback_code` the same
// without anything from the request ("left edge=error:ConnectionError"). When no endpoint serves:
// FallbackForbidden naming the rule if the policy forbade an endpoint, else EndpointsFailed (a
// CloudCallError) naming every attempt. The caller's own abort (`signal`) stops the run and rejects
// with the signal's reason, as an asyncio cancellation does in Python.
//
// Field names, outcome names, reasons, codes and error messages are the Python SDK's; the vectors of
// scripts/execute_vectors.py hold them equal. There is no worker pool here (a Promise cannot hold
// a thread), so Python's "busy" outcome never occurs; a call that blocks the event loop cannot be
// interrupted by any timeout.
import { CLOUD, EDGE } from "./contract.js";
import { EndpointSpec, NAME_SHAPE, Price, twoEndpointSpecs } from "./endpoints.js";
import { FallbackForbidden } from "./policy/errors.js";
import { pyRepr } from "./pyrepr.js";
import { firstCodePoints, formatG } from "./pytext.js";

export const REASON_CHARS = 300;  // a fallback reason and code are cut to this
/** Why an endpoint after the request's deadline was not called (Python's words). */
export const DEADLINE_PASSED = "the request's deadline has passed";
/** Why an endpoint of the cascade was left, or `served` ("busy" is Python's pool only). */
export const OUTCOMES = Object.freeze(["served", "error", "timeout", "busy", "context", "rejected", "forbidden"]);
const SIDES = { device: EDGE, cloud: CLOUD };  // an endpoint's `where` -> the side a two-endpoint policy forbids

/** No endpoint served (Python's CloudCallError: what code handling the cloud failing catches).
 * `edge_error` holds the first endpoint's failure, if any, `steps` the calls made and `decision`
 * the routing decision carried out. */
export class CloudCallError extends Error {
  constructor(message, { edge_error = null, steps = [], decision = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "CloudCallError";
    this.edge_error = edge_error;
    this.steps = steps;
    this.decision = decision;
  }
}

/** No endpoint of the cascade served; `tried` says why each was left (the message names each).
 * A CloudCallError; `cause` is the last call's error. */
export class EndpointsFailed extends CloudCallError {
  constructor(message, { tried, steps, decision, first_error = null, cause }) {
    super(message, { edge_error: first_error, steps, decision, cause });
    this.name = "EndpointsFailed";
    this.tried = tried;
  }
}

/** A call did not answer within its timeout (Python: a TimeoutError naming the call). */
export class CallTimeoutError extends Error {
  constructor(message, endpoint = null) {
    super(message);
    this.name = "TimeoutError";
    this.endpoint = endpoint;
  }

  /** Read as a timeout (the chat client's UpstreamTimeout carries the same mark). */
  get isTimeout() { return true; }
}

/** The earlier name of CallTimeoutError (the edge's timeout, when there were two sides only). */
export { CallTimeoutError as EdgeTimeoutError };

/** One endpoint of a decision's cascade, and why it was left: error, timeout, context, rejected,
 * forbidden; or served. `error`: the class name of what ended it (an error, a timeout, a throwing
 * accept check), never its text. `cost`: the call's expected price (0 when it was not called, null
 * when called without a spec or price). `exception`: what was thrown (not enumerable: never
 * serialised or shown). */
export class Tried {
  constructor(endpoint, outcome, seconds = 0, error = null, cost = 0, exception = null) {
    Object.assign(this, { endpoint, outcome, seconds, error, cost });
    Object.defineProperty(this, "exception", { value: exception, enumerable: false });
  }

  /** `name=outcome`, with the error class for errors and a throwing accept check:
   * `onprem-8b=error:UpstreamHTTPError`, `phone-3b=rejected:TypeError`. */
  label() {
    const shown = (this.outcome === "error" || this.outcome === "rejected") && this.error ? `${this.outcome}:${this.error}` : this.outcome;
    return `${this.endpoint}=${shown}`;
  }
}

/** Every attempt as `name=outcome`, comma-separated (the proxy's x-router-tried header). */
export const triedText = (tried) => tried.map((t) => t.label()).join(",");

/** The class name of a thrown value, as Python's type(error).__name__ names an exception: its
 * `name` (set by most error classes), else its constructor's; a letters-and-digits code. */
export function errorClass(error) {
  let name = null;
  if (error !== null && (typeof error === "object" || typeof error === "function")) {
    name = typeof error.name === "string" && error.name && error.name !== "Error" ? error.name : error.constructor?.name;
  }
  name = String(name || (error === null ? "null" : typeof error)).replace(/[^A-Za-z0-9_.]/g, "_").slice(0, 64);
  return name || "Error";
}

/** A thrown value as Python's repr shows an exception: `ConnectionError('refused')`, `KeyError()`. */
export function errorRepr(error) {
  const message = error !== null && typeof error === "object" && typeof error.message === "string" ? error.message
    : error !== null && typeof error === "object" ? "" : String(error);
  return `${errorClass(error)}(${message ? pyRepr(message) : ""})`;
}

/** A thrown value as Python's str() shows an exception: its message (or the value itself). */
export function errorText(error) {
  if (error !== null && typeof error === "object") {
    const message = typeof error.message === "string" ? error.message : "";
    return errorClass(error) === "KeyError" && message ? pyRepr(message) : message;  // str(KeyError('x')) is "'x'"
  }
  return String(error);
}

/** Whether a thrown value is a timeout (Python: a TimeoutError): CallTimeoutError, a DOMException
 * named TimeoutError (AbortSignal.timeout), or one marked `isTimeout` (the chat client's UpstreamTimeout). */
export const isTimeout = (error) => error instanceof CallTimeoutError || error?.name === "TimeoutError" || error?.isTimeout === true;

const CONNECTION_ERRORS = ["ConnectionError", "ConnectionRefusedError", "ConnectionResetError", "ConnectionAbortedError",
  "BrokenPipeError"];

/** A short, fixed name for why a call failed (serving.execution._execute.failure_kind): none, timeout,
 * connection_error or error. The chat client's failureKind adds its own kinds. */
export function failureKind(error) {
  if (error === null || error === undefined) return "none";
  if (isTimeout(error)) return "timeout";
  if (CONNECTION_ERRORS.includes(errorClass(error))) return "connection_error";
  return "error";
}

/** A short, fixed name for why the endpoint before the serving one was left (null when the first
 * one reached served): context_limit, rejected, accept_error, forbidden, or its error's kind
 * (`kindOf`: failureKind, or the chat client's). */
export function fallbackKind(execution, kindOf = failureKind) {
  const left = execution.tried.slice(0, -1);
  if (!left.length) return null;
  const last = left[left.length - 1];
  if (last.outcome === "context") return "context_limit";
  if (last.outcome === "forbidden") return "forbidden";
  if (last.outcome === "rejected") return last.error ? "accept_error" : "rejected";
  return kindOf(last.exception);
}

const isObject = (v) => v !== null && typeof v === "object";

/** The calls by name (a Map): `endpoints` (an object or a Map), or edge and cloud as the endpoints
 * "edge" and "cloud"; TypeError for a mix, or neither. */
export function namedCalls(edge, cloud, endpoints) {
  if (endpoints !== null && endpoints !== undefined) {
    if ((edge !== null && edge !== undefined) || (cloud !== null && cloud !== undefined)) {
      throw new TypeError("give edge= and cloud=, or endpoints=, not both");
    }
    if (!isObject(endpoints)) throw new TypeError(`endpoints must map endpoint names to calls, got ${typeof endpoints}`);
    return endpoints instanceof Map ? new Map(endpoints) : new Map(Object.entries(endpoints));
  }
  if (edge === null || edge === undefined || cloud === null || cloud === undefined) {
    throw new TypeError("execute() needs endpoints= (name -> call), or edge= and cloud=");
  }
  return new Map([[EDGE, edge], [CLOUD, cloud]]);
}

/** RangeError unless every key is an endpoint name (NAME_SHAPE: it is written to logs and headers
 * as is); with `callables`, TypeError unless every value is a function (serving.execution._execute.check_names). */
export function checkNames(endpoints, what = "endpoints", { callables = false } = {}) {
  const entries = endpoints instanceof Map ? [...endpoints] : Object.entries(endpoints);
  if (!entries.length) throw new RangeError(`${what} is empty: give at least one endpoint name -> call`);
  for (const [name, call] of entries) {
    if (typeof name !== "string" || !NAME_SHAPE.test(name)) {
      throw new RangeError(`${what}: ${pyRepr(String(name))} is not an endpoint name (letters, digits, _ . : -; at most 64)`);
    }
    if (callables && typeof call !== "function") throw new TypeError(`${what}[${pyRepr(name)}] must be a callable taking the prompt (or request)`);
  }
}

/** One spec as the runner reads it: an EndpointSpec, or a plain object of its fields ({where,
 * context_tokens, price}; the price an object of per_1m_* / per_1k_* / per_call figures). */
function specOf(name, value) {
  if (value instanceof EndpointSpec) return value;
  if (!isObject(value)) throw new TypeError(`specs.${name} must be an EndpointSpec or an object of its fields, got ${value === null ? "null" : typeof value}`);
  const where = value.where ?? null;
  if (where !== null && !(where in SIDES)) throw new RangeError(`specs.${name}.where must be "device", "cloud" or null, got ${pyRepr(String(where))}`);
  const context = value.context_tokens ?? value.contextTokens ?? null;
  if (context !== null && !(Number.isInteger(context) && context > 0)) {
    throw new RangeError(`specs.${name}.context_tokens must be a whole number > 0 or null, got ${context}`);
  }
  const price = value.price === null || value.price === undefined || value.price instanceof Price ? value.price ?? null : new Price(value.price);
  return new EndpointSpec({ name, where, price, latency_ms: value.latency_ms ?? null, context_tokens: context,
    capabilities: value.capabilities ?? null });
}

/** The specs by name (a Map): an Endpoints, a Map, an array of EndpointSpecs, or an object name -> spec. */
export function specsByName(specs) {
  if (specs === null || specs === undefined) return new Map();
  if (!isObject(specs)) throw new TypeError(`specs must map endpoint names to their specs, got ${typeof specs}`);
  let entries;
  if (specs instanceof Map) entries = [...specs];
  else if (Array.isArray(specs) || typeof specs[Symbol.iterator] === "function") entries = [...specs].map((e) => [e?.name, e]);
  else entries = Object.entries(specs);
  return new Map(entries.map(([name, value]) => [name, specOf(name, value)]));
}

/** `timeoutsMs` (name -> milliseconds) checked, with `edgeTimeoutMs` as the edge's. */
function timeoutsOf(timeoutsMs, edgeTimeoutMs) {
  const out = new Map();
  if (edgeTimeoutMs !== null && edgeTimeoutMs !== undefined) out.set(EDGE, edgeTimeoutMs);
  if (timeoutsMs !== null && timeoutsMs !== undefined) {
    if (!isObject(timeoutsMs)) throw new TypeError("timeoutsMs must map endpoint names to milliseconds");
    for (const [name, ms] of timeoutsMs instanceof Map ? timeoutsMs : Object.entries(timeoutsMs)) out.set(name, ms);
  }
  for (const [name, ms] of out) {
    if (ms !== null && !(typeof ms === "number" && Number.isFinite(ms) && ms >= 0)) {
      throw new RangeError(`the timeout of ${name} must be a non-negative number of milliseconds or null, got ${ms}`);
    }
  }
  return out;
}

/** The rules of one request (module doc), without the calls: what to call next, why each endpoint
 * was left, the execution or the error (serving.execution._execute._Cascade). */
class Cascade {
  constructor(decision, calls, { specs, accept, verifyEdgeZone, outputTokens, timeouts, deadline = null }) {
    this.decision = decision;
    this.order = decision.cascade;
    this.outputTokens = outputTokens;
    checkNames(calls, "endpoints", { callables: true });
    const missing = this.order.filter((name) => !calls.has(name));
    if (missing.length) {
      throw new RangeError(`the decision's order ${this.order.join(", ")} names ${missing.map((n) => pyRepr(n)).join(", ")}, which ` +
        `endpoints= does not have (it has ${[...calls.keys()].join(", ")}): give a call for every endpoint of the bundle`);
    }
    this.specs = specs;
    for (const side of [EDGE, CLOUD]) {
      const unplaced = this.order.filter((n) => n !== side && (specs.get(n)?.where ?? null) === null);
      if (decision.forbidden.includes(side) && !calls.has(side) && unplaced.length) {
        throw new RangeError(`the policy forbids every ${side} endpoint ('${decision.rule ?? "None"}'), and specs= does not say where ` +
          `${unplaced.join(", ")} run: give each endpoint's spec (serving.endpoints._record) so that none is called by mistake`);
      }
    }
    this.accept = accept;
    this.checked = new Set(accept ? (verifyEdgeZone ? this.order : decision.checked) : []);
    this.timeouts = timeouts;
    this.deadline = deadline;
    this.steps = [];
    this.tried = [];
    this.firstError = null;
    this.hasFirstError = false;
    this.forbade = null;  // the first forbidden endpoint the cascade reached
    this.why = "";  // why the last endpoint left was left, in words (the fallback reason's end)
  }

  /** Whether to call `name`; a forbidden endpoint, a prompt over its context or a passed deadline is
   * recorded as left. */
  callableNow(name) {
    if (this.forbidden(name)) {
      this.forbade ??= name;
      this.why = `policy '${this.decision.rule ?? "None"}' forbids it`;
      this.tried.push(new Tried(name, "forbidden"));
      return false;
    }
    const spec = this.specs.get(name);
    if (spec !== undefined && !spec.fits(this.decision.n_tokens)) {
      this.why = `prompt of ~${this.decision.n_tokens} tokens exceeds the context limit of ${spec.context_tokens}`;
      this.steps.push({ name, status: "skipped", seconds: 0, detail: this.why });
      this.tried.push(new Tried(name, "context"));
      return false;
    }
    if (this.deadline !== null && now() >= this.deadline) {
      this.steps.push({ name, status: "skipped", seconds: 0, detail: DEADLINE_PASSED });
      this.failed(name, new CallTimeoutError(DEADLINE_PASSED));
      return false;
    }
    return true;
  }

  /** The call's time limit in milliseconds (null: none): its own timeout, cut to what is left before
   * the deadline. */
  timeout(name) {
    const limit = this.timeouts.get(name) ?? null;
    if (this.deadline === null) return limit;
    const left = Math.max(0, this.deadline - now());
    return limit === null ? left : Math.min(limit, left);
  }

  /** Forbidden by name, or as a side (a policy written for two endpoints keeps its meaning). */
  forbidden(name) {
    const forbidden = this.decision.forbidden;
    if (forbidden.includes(name)) return true;
    const where = this.specs.get(name)?.where ?? null;
    return where !== null && forbidden.includes(SIDES[where]);
  }

  cost(name) {
    const spec = this.specs.get(name);
    return spec === undefined ? null : spec.callCost(this.decision.n_tokens, this.outputTokens);
  }

  /** The call threw or timed out. */
  failed(name, error) {
    const outcome = isTimeout(error) ? "timeout" : "error";
    if (!this.hasFirstError && !this.tried.length && (name !== this.order[this.order.length - 1] || this.decision.forbidden.length)) {
      [this.firstError, this.hasFirstError] = [error, true];  // the first endpoint's error, when another was to follow (or was forbidden)
    }
    this.why = errorRepr(error);
    const seconds = this.steps.length ? this.steps[this.steps.length - 1].seconds : 0;
    this.tried.push(new Tried(name, outcome, seconds, errorClass(error), this.cost(name), error));
  }

  /** Whether the answer is served: an unchecked one, and the last one of the order unless the
   * policy forbade what would follow it; a checked one when `accept` holds. */
  async stands(name, response, last) {
    const seconds = this.steps[this.steps.length - 1].seconds;
    if (!this.checked.has(name) || (last && !this.decision.forbidden.length)) {
      this.tried.push(new Tried(name, "served", seconds, null, this.cost(name)));
      return true;
    }
    let accepted;
    try {
      accepted = Boolean(await timedStep(this.steps, "accept", () => this.accept(response)));
    } catch (error) {
      if (!this.hasFirstError && !this.tried.length) {
        [this.firstError, this.hasFirstError] = [error, true];  // what the next endpoint answered after, as a failed call's error
      }
      this.why = `the accept check raised ${errorRepr(error)}`;
      this.tried.push(new Tried(name, "rejected", seconds, errorClass(error), this.cost(name), error));
      return false;
    }
    if (!accepted) {
      this.why = "the accept check rejected its answer";
      this.steps[this.steps.length - 1].status = "rejected";
      this.tried.push(new Tried(name, "rejected", seconds, null, this.cost(name)));
      return false;
    }
    this.tried.push(new Tried(name, "served", seconds, null, this.cost(name)));
    return true;
  }

  reason() {
    return this.tried.map((t) => t.label()).join("; ");
  }

  served(response, name) {
    const left = this.tried.slice(0, -1);
    let reason = null, code = null;
    if (left.length) {
      code = `left ${left.map((t) => t.label()).join(", ")}`;
      reason = firstCodePoints(this.why ? `${code}: ${this.why}` : code, REASON_CHARS);
      code = firstCodePoints(code, REASON_CHARS);
    }
    return { response, served_by: name, decision: this.decision, fallback_reason: reason, fell_back: reason !== null,
      steps: this.steps, edge_error: this.firstError, fallback_code: code, tried: this.tried, expected_cost: this.expectedCost() };
  }

  expectedCost() {
    const costs = this.tried.map((t) => t.cost);
    return costs.some((c) => c === null) ? null : costs.reduce((a, b) => a + b, 0);
  }

  /** The error of the last endpoint called (the cause of EndpointsFailed). */
  lastError() {
    for (let i = this.tried.length - 1; i >= 0; i--) if (this.tried[i].exception !== null) return this.tried[i].exception;
    return null;
  }

  /** The error when no endpoint served (module doc). */
  exhausted() {
    const cause = this.lastError() ?? undefined;
    if (this.forbade === null && this.decision.rule !== null) {
      // The chooser leaves forbidden endpoints out of the cascade: the policy is still why none is left.
      this.forbade = this.decision.forbidden.find((name) => !this.order.includes(name)) ?? null;
    }
    if (this.forbade !== null) {
      const rule = this.decision.rule || "(unnamed)";
      const error = new FallbackForbidden(`policy '${rule}' forbids ${this.forbade}, and no allowed endpoint served: ${this.reason()}` +
        (this.why && cause === undefined ? ` (${this.why})` : ""),
      { rule, endpoint: this.forbade, edge_error: this.firstError, steps: this.steps, decision: this.decision, cause });
      error.tried = this.tried;
      return error;
    }
    // each call's error after the attempts, as Python's str() of it (serving.execution._execute)
    const errors = this.tried.filter((t) => t.exception !== null).map((t) => `${t.endpoint}: ${errorText(t.exception)}`).join("; ");
    return new EndpointsFailed(`no endpoint served: ${this.reason()}` + (errors ? ` (${errors})` : ""),
      { tried: this.tried, steps: this.steps, decision: this.decision, first_error: this.firstError, cause });
  }
}

const now = () => performance.now();

/** Run `call` as a step named `name`: ok, timeout or error, with its duration in seconds; the
 * step keeps what the call returned as `result` (not enumerable). */
async function timedStep(steps, name, call) {
  const start = now();
  try {
    const result = await call();
    const step = { name, status: "ok", seconds: (now() - start) / 1000, detail: "" };
    Object.defineProperty(step, "result", { value: result, enumerable: false });
    steps.push(step);
    return result;
  } catch (error) {
    const timeout = isTimeout(error);
    const detail = timeout ? String(error?.message ?? error) : errorRepr(error);
    steps.push({ name, status: timeout ? "timeout" : "error", seconds: (now() - start) / 1000, detail: detail.slice(0, 500) });
    throw error;
  }
}

/** call(prompt, {signal, endpoint}), abandoned with a CallTimeoutError after `timeoutMs` (its signal
 * aborted with it), or with the caller's abort reason when `callerSignal` aborts. */
function within(call, prompt, name, timeoutMs, callerSignal) {
  const controller = new AbortController();
  return new Promise((resolve, reject) => {
    let done = false, timer = null;
    const onAbort = () => {
      controller.abort(callerSignal.reason);
      settle(reject, callerSignal.reason);
    };
    const settle = (how, value) => {
      if (done) return;
      done = true;
      if (timer !== null) clearTimeout(timer);
      callerSignal?.removeEventListener("abort", onAbort);
      how(value);
    };
    if (callerSignal) {
      if (callerSignal.aborted) { onAbort(); return; }
      callerSignal.addEventListener("abort", onAbort, { once: true });
    }
    if (timeoutMs !== null && timeoutMs !== undefined) {
      const end = now() + Math.max(0, timeoutMs);
      const expire = () => {
        const early = end - now();  // a timer may fire up to a millisecond before its time: never before it
        if (early > 0) {
          timer = setTimeout(expire, early);
          return;
        }
        const error = new CallTimeoutError(`${name} call exceeded ${formatG(timeoutMs / 1000, 6)} s`, name);
        controller.abort(error);
        settle(reject, error);
      };
      timer = setTimeout(expire, Math.max(0, timeoutMs));
    }
    let pending;
    try {
      pending = Promise.resolve(call(prompt, { signal: controller.signal, endpoint: name }));
    } catch (error) {
      settle(reject, error);
      return;
    }
    pending.then((value) => settle(resolve, value), (error) => settle(reject, error));  // a late failure is nobody's error
  });
}

/**
 * Carry out a routing decision (module doc): each endpoint's call in the decision's cascade.
 * `endpoints` name -> call (or `edge` and `cloud`); `specs` name -> EndpointSpec (context limits,
 * prices, where each runs; `edgeContextTokens`: the edge's context limit); `timeoutsMs` name ->
 * milliseconds (`edgeTimeoutMs`: the edge's); `deadline` a performance.now() value no call outlives;
 * `accept(answer)` the check of checked answers; `outputTokens` the answer tokens `expected_cost`
 * prices; `signal` the caller's abort.
 * @returns {Promise<object>} the Execution: response, served_by, decision, fallback_reason, fell_back,
 *   steps, edge_error, fallback_code, tried, expected_cost
 */
export async function execute(decision, prompt, { endpoints = null, edge = null, cloud = null, specs = null,
  edgeContextTokens = null, timeoutsMs = null, edgeTimeoutMs = null, accept = null, verifyEdgeZone = false, outputTokens = 0,
  deadline = null, signal = null } = {}) {
  const calls = namedCalls(edge, cloud, endpoints);
  if (accept !== null && typeof accept !== "function") throw new TypeError(`accept must be a function or null, got ${typeof accept}`);
  if (signal !== null && !(signal instanceof AbortSignal)) throw new TypeError("signal must be an AbortSignal or null");
  if (deadline !== null && (typeof deadline !== "number" || Number.isNaN(deadline))) {
    throw new TypeError(`deadline must be a performance.now() value (milliseconds) or null, got ${deadline}`);
  }
  const named = specsByName(specs);
  if (edgeContextTokens !== null && !named.has(EDGE)) named.set(EDGE, twoEndpointSpecs(edgeContextTokens)[0]);
  const cascade = new Cascade(decision, calls, { specs: named, accept, verifyEdgeZone: Boolean(verifyEdgeZone),
    outputTokens, timeouts: timeoutsOf(timeoutsMs, edgeTimeoutMs), deadline });
  const order = cascade.order;
  for (let i = 0; i < order.length; i++) {
    const name = order[i];
    signal?.throwIfAborted();
    if (!cascade.callableNow(name)) continue;
    let response;
    try {
      response = await timedStep(cascade.steps, name,
        () => within(calls.get(name), prompt, name, cascade.timeout(name), signal));
    } catch (error) {
      if (signal?.aborted) throw signal.reason;  // the caller's abort: not the endpoint's failure
      cascade.failed(name, error);
      continue;
    }
    if (await cascade.stands(name, response, i === order.length - 1)) return cascade.served(response, name);
  }
  throw cascade.exhausted();
}
