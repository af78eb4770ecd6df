// Endpoints as data (serving/endpoints/_record.py, docs/endpoints.md): the models a request may run on,
// with their price, latency, context limit and capabilities. Every field is checked as Python
// checks it, with Python's error texts (values shown as Python's repr shows them), so a spec
// Python refuses is refused here with the same message. The list's order is kept: it is the order
// figures list endpoints in, never a preference (endpoint-choice.js chooses).
//
//   {"endpoints": [{"name": "phone-3b", "where": "device", "price": {"per_call": 0},
//     "latency_ms": 120, "context_tokens": 4096, "capabilities": {"json": true, "languages": ["en"]}},
//    {"name": "frontier", "where": "cloud", "price": {"per_1m_input": 3, "per_1m_output": 15}, ...}]}
//
// Prices are per 1M tokens (per_1m_input, per_1m_output, per_1m_cached_input) and per call; the
// earlier per_1k_input / per_1k_output are still read, as 1,000 times as much, and a call is priced
// with the per-1k figure the file gave (or the per-1M figure / 1000, in decimal), so a spec or
// bundle written before prices every call exactly as it did, as in Python.
//
// A spec file may also say how an endpoint is called (base_url, model, timeouts, headers, params:
// Python's CALL_KEYS); this SDK accepts those keys in a file and keeps none of them (its chat
// client's Endpoint holds how it calls), and refuses a key (api_key) in a file as Python does.
// A manifest's endpoints (callSettings: false) may not carry them.
//
// The two-endpoint spelling {"edge": {...}, "cloud": {...}} is two endpoints named edge and cloud
// with baseline.md's defaults for every field not given.
import { CLOUD, DEFAULT_EDGE_CONTEXT_TOKENS, EDGE } from "./contract.js";
import { PyFloat } from "./canonical-json.js";
import { pyKind, pyRepr } from "./pyrepr.js";

export const WHERE = Object.freeze(["device", "cloud"]);
export const PRICE_KEYS = Object.freeze(["per_1m_input", "per_1m_output", "per_1m_cached_input", "per_call"]);
/** The earlier spelling of a price, still read (x 1000). */
export const PER_1K_KEYS = Object.freeze(["per_1k_input", "per_1k_output"]);
export const CAPABILITY_FLAGS = Object.freeze(["images", "tools", "json"]);
export const CAPABILITY_KEYS = Object.freeze([...CAPABILITY_FLAGS, "languages"]);
export const ENDPOINT_KEYS = Object.freeze(["name", "where", "price", "latency_ms", "context_tokens", "capabilities", "description",
  "prefill_tokens_per_s"]);
/** How an endpoint is called, in a spec file (never in a manifest; never the key itself). */
export const CALL_KEYS = Object.freeze(["base_url", "model", "timeout_s", "connect_timeout_s", "first_token_timeout_s",
  "max_response_bytes", "headers", "params"]);
/** What a decision reads of a spec: filled from another where this one declares none (filledFrom). */
export const DECISION_FIELDS = Object.freeze(["where", "price", "latency_ms", "context_tokens", "capabilities", "prefill_tokens_per_s"]);
export const FILE_KEYS = Object.freeze(["endpoints", "description"]);
export const MAX_ENDPOINTS = 64;
/** An endpoint name: written to logs and headers as is, a short code. */
export const NAME_SHAPE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;
const LANGUAGE_SHAPE = /^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})?$/;
const TWO_ENDPOINT_DEFAULTS = {
  [EDGE]: { where: "device", price: { per_call: new PyFloat(0) }, latency_ms: new PyFloat(120), context_tokens: DEFAULT_EDGE_CONTEXT_TOKENS },
  [CLOUD]: { where: "cloud", price: { per_call: 0.003 }, latency_ms: new PyFloat(250), context_tokens: 128_000 },
};

/** An endpoint spec that cannot be used; the message names the source, the endpoint and the field. */
export class EndpointSpecError extends Error {
  constructor(message) { super(message); this.name = "EndpointSpecError"; }
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Number);
const has = (o, k) => Object.hasOwn(o, k);

/** `value` x 10**digits in decimal, then the nearest float (serving.endpoints._record._scaled): 3e-05 per 1k
 * is 0.03 per 1M, not 0.030000000000000002. The shortest digits that read back as `value` (what
 * Python's repr gives) with the exponent moved, read as a number (correctly rounded, as Python's
 * float(Decimal) is). */
export function scaled(value, digits) {
  const x = Number(value);
  if (!Number.isFinite(x) || x === 0) return x * 10 ** digits;
  const [mantissa, exponent] = x.toExponential().split("e");
  return Number(`${mantissa}e${Number(exponent) + digits}`);
}

/** Per 1M input tokens, per 1M output tokens, per 1M cached input tokens (null: priced as input),
 * and per call (serving.endpoints._record.Price). A call is priced per 1,000 tokens, as it always was: the
 * per-1M figure / 1000 in decimal, or for a price given per 1k (`Price.fromPer1k`, or per_1k_* keys
 * here) the figures given, so an older spec prices every call exactly as before. */
export class Price {
  #per1k;

  constructor({ per_1m_input = 0, per_1m_output = 0, per_call = 0, per_1m_cached_input = null, per_1k_input, per_1k_output } = {}) {
    if (per_1k_input !== undefined || per_1k_output !== undefined) {
      return Price.fromPer1k({ per_1k_input, per_1k_output, per_call, per_1m_cached_input });
    }
    Object.assign(this, { per_1m_input: Number(per_1m_input), per_1m_output: Number(per_1m_output), per_call: Number(per_call),
      per_1m_cached_input: per_1m_cached_input === null ? null : Number(per_1m_cached_input) });
    this.#per1k = [scaled(this.per_1m_input, -3), scaled(this.per_1m_output, -3),
      this.per_1m_cached_input === null ? null : scaled(this.per_1m_cached_input, -3)];
    Object.freeze(this);
  }

  /** The price a spec gave per 1,000 tokens: its per-1M figures 1,000 times as much, and calls
   * priced with the per-1k figures themselves (bit for bit as before). */
  static fromPer1k({ per_1k_input = 0, per_1k_output = 0, per_call = 0, per_1m_cached_input = null } = {}) {
    const price = new Price({ per_1m_input: scaled(per_1k_input, 3), per_1m_output: scaled(per_1k_output, 3), per_call,
      per_1m_cached_input });
    price.#per1k = [Number(per_1k_input), Number(per_1k_output), price.#per1k[2]];
    return price;
  }

  /** The per-1,000-token rates calls are priced with (the earlier fields' names). */
  get per_1k_input() { return this.#per1k[0]; }
  get per_1k_output() { return this.#per1k[1]; }

  /** The price of one call with that many input tokens (of them `cachedInputTokens` read from the
   * endpoint's prompt cache) and output tokens: Python's arithmetic, in its order. */
  callCost(inputTokens, outputTokens = 0, cachedInputTokens = 0) {
    const [input, output, cachedRate] = this.#per1k;
    if (!cachedInputTokens) return this.per_call + input * inputTokens / 1000 + output * outputTokens / 1000;
    const cached = Math.min(cachedInputTokens, inputTokens);
    return this.per_call + input * (inputTokens - cached) / 1000 + (cachedRate ?? input) * cached / 1000 + output * outputTokens / 1000;
  }

  /** callCost, by its earlier name. */
  cost(inputTokens, outputTokens = 0) { return this.callCost(inputTokens, outputTokens); }

  asDict() {
    const out = { per_1m_input: this.per_1m_input, per_1m_output: this.per_1m_output, per_call: this.per_call };
    if (this.per_1m_cached_input !== null) out.per_1m_cached_input = this.per_1m_cached_input;
    return out;
  }
}

/** What an endpoint accepts; `languages` null when not known (then it is no constraint). */
export class Capabilities {
  constructor({ images = false, tools = false, json = false, languages = null } = {}) {
    Object.assign(this, { images, tools, json, languages: languages === null ? null : Object.freeze([...languages]) });
    Object.freeze(this);
  }

  asDict() {
    const out = { images: this.images, tools: this.tools, json: this.json };
    if (this.languages !== null) out.languages = [...this.languages];
    return out;
  }
}

/** One model a request may run on (serving.endpoints._record.Endpoint's decision fields; named EndpointSpec
 * here because the chat client's Endpoint is how an endpoint is called). null is "not declared" for
 * each field: no context limit, no constraint of capabilities, no price (callCost null). */
export class EndpointSpec {
  constructor({ name, where = null, price = null, latency_ms = null, context_tokens = null, capabilities = null, description = "",
    prefill_tokens_per_s = null }) {
    Object.assign(this, { name, where, price, latency_ms, context_tokens, capabilities, description, prefill_tokens_per_s });
    Object.freeze(this);
  }

  /** The expected price of one call with that many input and output tokens; null without a price. */
  callCost(inputTokens, outputTokens = 0, cachedInputTokens = 0) {
    return this.price === null ? null : this.price.callCost(inputTokens, outputTokens, cachedInputTokens);
  }

  /** callCost, by its earlier name. */
  cost(inputTokens, outputTokens = 0) { return this.callCost(inputTokens, outputTokens); }

  /** Whether a prompt of `inputTokens` tokens is within its context limit (none declared: any). */
  fits(inputTokens) { return this.context_tokens === null || inputTokens <= this.context_tokens; }

  /** Whether it has every capability a request needs (an unknown language list allows any; capabilities
   * not declared allow anything). */
  supports({ images = false, tools = false, json = false, language = null } = {}) {
    const caps = this.capabilities;
    if (caps === null) return true;
    if ((images && !caps.images) || (tools && !caps.tools) || (json && !caps.json)) return false;
    return language === null || caps.languages === null || caps.languages.includes(language.toLowerCase());
  }

  /** This spec with each decision field it does not declare (null) taken from `other` (the bundle's
   * spec of the same endpoint, say; serving.endpoints._record.Endpoint.filled_from); itself when nothing is missing. */
  filledFrom(other) {
    if (other === null || other === undefined) return this;
    const missing = DECISION_FIELDS.filter((key) => this[key] === null && other[key] !== null && other[key] !== undefined);
    if (!missing.length) return this;
    return new EndpointSpec({ ...this, ...Object.fromEntries(missing.map((key) => [key, other[key]])) });
  }

  asDict() {
    const out = { name: this.name, where: this.where, price: this.price === null ? null : this.price.asDict(),
      latency_ms: this.latency_ms, context_tokens: this.context_tokens };
    if (this.capabilities !== null) out.capabilities = this.capabilities.asDict();
    if (this.description) out.description = this.description;
    if (this.prefill_tokens_per_s !== null) out.prefill_tokens_per_s = this.prefill_tokens_per_s;
    return out;
  }
}

/** The endpoints of a deployment, in their spec's order; names are unique. */
export class Endpoints {
  constructor(endpoints, source = "<endpoints>") {
    this.endpoints = Object.freeze([...endpoints]);
    this.source = source;
    Object.freeze(this);
  }

  get names() { return this.endpoints.map((e) => e.name); }
  get length() { return this.endpoints.length; }
  [Symbol.iterator]() { return this.endpoints[Symbol.iterator](); }

  /** The endpoint of that name; a RangeError listing the names when there is none. */
  get(name) {
    const found = this.endpoints.find((e) => e.name === name);
    if (!found) throw new RangeError(`${this.source}: no endpoint named ${pyRepr(name)}; the endpoints are ${this.names.join(", ")}`);
    return found;
  }

  /** Each endpoint's expected price of one call of that size, by name (null: no price). */
  costs(inputTokens, outputTokens = 0) {
    return Object.fromEntries(this.endpoints.map((e) => [e.name, e.callCost(inputTokens, outputTokens)]));
  }

  asDict() { return { endpoints: this.endpoints.map((e) => e.asDict()) }; }
}

/** A finite number >= 0 (> 0 with `positive`; whole with `integer`) as a JS number. */
function number(value, where, { integer = false, positive = false } = {}) {
  const numeric = typeof value === "number" || value instanceof PyFloat || typeof value === "bigint";
  const x = numeric ? Number(value) : NaN;
  if (!numeric || !Number.isFinite(x)) throw new EndpointSpecError(`${where} must be a finite number, got ${pyKind(value)} ${pyRepr(value)}`);
  if (x < 0 || (positive && x === 0)) throw new EndpointSpecError(`${where} must be ${positive ? "> 0" : ">= 0"}, got ${pyRepr(value)}`);
  if (integer && !Number.isInteger(x)) throw new EndpointSpecError(`${where} must be a whole number, got ${pyRepr(value)}`);
  return x;
}

function object(value, where, allowed) {
  if (!isObject(value)) throw new EndpointSpecError(`${where} must be an object, got ${pyKind(value)}`);
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) throw new EndpointSpecError(`${where}: unknown key ${pyRepr(key)}; allowed: ${allowed.join(", ")}`);
  }
  return value;
}

function parsePrice(value, where) {
  const price = object(value, where, [...PRICE_KEYS, ...PER_1K_KEYS]);
  if (!["per_1m_input", "per_1m_output", "per_call", ...PER_1K_KEYS].some((key) => has(price, key))) {
    throw new EndpointSpecError(`${where} is empty: give at least one of per_1m_input, per_1m_output, per_call (0 for free)`);
  }
  const numbers = Object.fromEntries(Object.keys(price).map((key) => [key, number(price[key], `${where}.${key}`)]));
  const per1k = PER_1K_KEYS.filter((key) => has(numbers, key));
  const per1m = ["per_1m_input", "per_1m_output"].filter((key) => has(numbers, key));
  if (per1k.length && per1m.length) {
    throw new EndpointSpecError(`${where}: ${per1k[0]} and ${per1m[0]} are two units for one price: give per_1m_input and ` +
      "per_1m_output (per_1k_* is the earlier spelling, 1,000 times smaller)");
  }
  const cached = numbers.per_1m_cached_input ?? null;
  for (const key of per1k) {  // serving.endpoints._record._price: named by its per-1k key, before any Price is made
    if (!Number.isFinite(scaled(numbers[key], 3))) throw new EndpointSpecError(`${where}.${key} is too large: 1,000 times it is no finite number`);
  }
  if (per1k.length) {
    return Price.fromPer1k({ per_1k_input: numbers.per_1k_input ?? 0, per_1k_output: numbers.per_1k_output ?? 0,
      per_call: numbers.per_call ?? 0, per_1m_cached_input: cached });
  }
  return new Price({ per_1m_input: numbers.per_1m_input ?? 0, per_1m_output: numbers.per_1m_output ?? 0,
    per_call: numbers.per_call ?? 0, per_1m_cached_input: cached });
}

function parseCapabilities(value, where) {
  const caps = object(value, where, CAPABILITY_KEYS);
  const flags = {};
  for (const key of CAPABILITY_FLAGS) {
    const flag = has(caps, key) ? caps[key] : false;
    if (typeof flag !== "boolean") throw new EndpointSpecError(`${where}.${key} must be true or false, got ${pyKind(flag)} ${pyRepr(flag)}`);
    flags[key] = flag;
  }
  const languages = has(caps, "languages") ? caps.languages : null;
  if (languages !== null) {
    if (!Array.isArray(languages) || languages.length === 0) {
      throw new EndpointSpecError(`${where}.languages must be a non-empty list of language codes, or absent`);
    }
    for (const code of languages) {
      if (typeof code !== "string" || !LANGUAGE_SHAPE.test(code)) {
        throw new EndpointSpecError(`${where}.languages: ${pyRepr(code)} is not a language code such as 'en' or 'pt-BR'`);
      }
    }
  }
  return new Capabilities({ ...flags, languages: languages === null ? null : languages.map((c) => c.toLowerCase()) });
}

/** One endpoint from its object; `name` given (the two-endpoint spelling) when the object has none.
 * `callSettings`: the object may say how the endpoint is called (CALL_KEYS: accepted, not kept here). */
export function parseEndpoint(item, { where, name = null, callSettings = true }) {
  if (!isObject(item)) throw new EndpointSpecError(`${where} must be an object, got ${pyKind(item)}`);
  if (name === null) {
    const given = has(item, "name") ? item.name : null;
    if (typeof given !== "string" || !NAME_SHAPE.test(given)) {
      throw new EndpointSpecError(`${where}.name must be a short code (letters, digits, _ . : -; at most 64), got ${pyKind(given)} ${pyRepr(given)}`);
    }
    name = given;
    where = `${where} (${pyRepr(name)})`;
  } else if (has(item, "name") && item.name !== name) {
    throw new EndpointSpecError(`${where}.name is ${pyRepr(item.name)}; in the two-endpoint spelling it is its key`);
  }
  if (callSettings && has(item, "api_key")) {
    throw new EndpointSpecError(`${where}.api_key: a key never goes in a file; the proxy's --endpoints file names the environment ` +
      "variable that holds it (key_env), and RoutedChat takes Endpoint(..., api_key=...)");
  }
  const fields = object(item, where, callSettings ? [...ENDPOINT_KEYS, ...CALL_KEYS] : ENDPOINT_KEYS);
  for (const key of ["where", "price", "latency_ms", "context_tokens"]) {
    if (!has(fields, key)) throw new EndpointSpecError(`${where}: missing field ${pyRepr(key)}`);
  }
  const place = fields.where;
  if (!WHERE.includes(place)) throw new EndpointSpecError(`${where}.where must be one of ${WHERE.join(", ")}, got ${pyRepr(place)}`);
  const description = has(fields, "description") ? fields.description : "";
  if (typeof description !== "string") throw new EndpointSpecError(`${where}.description must be text, got ${pyKind(description)}`);
  const prefill = has(fields, "prefill_tokens_per_s") ? fields.prefill_tokens_per_s : null;
  return new EndpointSpec({
    name,
    where: place,
    price: parsePrice(fields.price, `${where}.price`),
    latency_ms: number(fields.latency_ms, `${where}.latency_ms`),
    context_tokens: number(fields.context_tokens, `${where}.context_tokens`, { integer: true, positive: true }),
    capabilities: parseCapabilities(has(fields, "capabilities") ? fields.capabilities : {}, `${where}.capabilities`),
    description,
    prefill_tokens_per_s: prefill === null ? null : number(prefill, `${where}.prefill_tokens_per_s`, { positive: true }),
  });
}

/** Endpoints from a decoded spec: {"endpoints": [...]}, or the two-endpoint spelling
 * {"edge": {...}, "cloud": {...}}. EndpointSpecError names what is wrong. */
export function parseEndpoints(data, { source = "<endpoints>", callSettings = true } = {}) {
  if (!isObject(data)) throw new EndpointSpecError(`${source}: an endpoint spec is an object {"endpoints": [...]}, got ${pyKind(data)}`);
  const keys = Object.keys(data);
  if (keys.length && keys.every((k) => k === EDGE || k === CLOUD)) return twoEndpoints(data, source, callSettings);
  for (const key of keys) {
    if (!FILE_KEYS.includes(key)) {
      throw new EndpointSpecError(`${source}: unknown key ${pyRepr(key)}; a spec has ${FILE_KEYS.join(", ")} (or is the two-endpoint ` +
        `spelling with exactly the keys ${pyRepr(EDGE)} and ${pyRepr(CLOUD)})`);
    }
  }
  const items = has(data, "endpoints") ? data.endpoints : null;
  if (!Array.isArray(items) || items.length === 0) {
    throw new EndpointSpecError(`${source}: key 'endpoints' must be a non-empty list of endpoints, got ${pyKind(items)}`);
  }
  if (items.length > MAX_ENDPOINTS) throw new EndpointSpecError(`${source}: ${items.length} endpoints, more than ${MAX_ENDPOINTS}`);
  const endpoints = [];
  const seen = new Map();
  items.forEach((item, index) => {
    const endpoint = parseEndpoint(item, { where: `${source}: endpoints[${index}]`, callSettings });
    if (seen.has(endpoint.name)) {
      throw new EndpointSpecError(`${source}: endpoints[${index}].name ${pyRepr(endpoint.name)} is also the name of endpoints[${seen.get(endpoint.name)}]`);
    }
    seen.set(endpoint.name, index);
    endpoints.push(endpoint);
  });
  return new Endpoints(endpoints, source);
}

function twoEndpoints(data, source, callSettings) {
  const missing = [EDGE, CLOUD].filter((side) => !has(data, side));
  if (missing.length) {
    throw new EndpointSpecError(`${source}: the two-endpoint spelling needs both ${pyRepr(EDGE)} and ${pyRepr(CLOUD)}; missing ${pyRepr(missing[0])}`);
  }
  const endpoints = [EDGE, CLOUD].map((side) => {
    const item = data[side] === null ? {} : data[side];
    if (!isObject(item)) throw new EndpointSpecError(`${source}: ${side} must be an object (an endpoint without its name), got ${pyKind(item)}`);
    return parseEndpoint({ ...TWO_ENDPOINT_DEFAULTS[side], ...item }, { where: `${source}: ${side}`, name: side, callSettings });
  });
  return new Endpoints(endpoints, source);
}

/** A two-endpoint bundle's endpoints as its router sees them (serving.endpoints._record.two_endpoints): the
 * edge on the device with the bundle's context limit, the cloud with none declared (the two-endpoint
 * spelling's prices; capabilities not declared). */
export function twoEndpointSpecs(edgeContextTokens) {
  const where = "the two-endpoint defaults";
  const edge = parseEndpoint({ ...TWO_ENDPOINT_DEFAULTS[EDGE], context_tokens: edgeContextTokens }, { where, name: EDGE });
  const cloud = parseEndpoint(TWO_ENDPOINT_DEFAULTS[CLOUD], { where, name: CLOUD });
  return [new EndpointSpec({ ...edge, capabilities: null }), new EndpointSpec({ ...cloud, context_tokens: null, capabilities: null })];
}
