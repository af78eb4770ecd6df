// Endpoints as data (serving/endpoints.py, docs/endpoints.md): the models a request may run on,
// with their price, latency, context limit and capabilities. Every field is checked as Python
// checks it, with Python's error texts (values shown as Python's repr shows them), so a spec
// Python refuses is refused here with the same message. The list's order is kept: it is the order
// figures list endpoints in, never a preference (endpoint-choice.js chooses).
//
//   {"endpoints": [{"name": "phone-3b", "where": "device", "price": {"per_call": 0},
//     "latency_ms": 120, "context_tokens": 4096, "capabilities": {"json": true, "languages": ["en"]}}, ...]}
//
// The two-endpoint spelling {"edge": {...}, "cloud": {...}} is two endpoints named edge and cloud
// with baseline.md's defaults for every field not given.
import { CLOUD, DEFAULT_EDGE_CONTEXT_TOKENS, EDGE } from "./contract.js";
import { PyFloat } from "./canonical-json.js";
import { pyKind, pyRepr } from "./pyrepr.js";

export const WHERE = Object.freeze(["device", "cloud"]);
export const PRICE_KEYS = Object.freeze(["per_1k_input", "per_1k_output", "per_call"]);
export const CAPABILITY_FLAGS = Object.freeze(["images", "tools", "json"]);
export const CAPABILITY_KEYS = Object.freeze([...CAPABILITY_FLAGS, "languages"]);
export const ENDPOINT_KEYS = Object.freeze(["name", "where", "price", "latency_ms", "context_tokens", "capabilities", "description"]);
export const FILE_KEYS = Object.freeze(["endpoints", "description"]);
export const MAX_ENDPOINTS = 64;
const NAME_SHAPE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;
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

/** Dollars per 1,000 input tokens, per 1,000 output tokens and per call. */
export class Price {
  constructor({ per_1k_input = 0, per_1k_output = 0, per_call = 0 } = {}) {
    Object.assign(this, { per_1k_input, per_1k_output, per_call });
    Object.freeze(this);
  }

  /** The price of one call with that many input and output tokens (Python's arithmetic, in its order). */
  cost(inputTokens, outputTokens = 0) {
    return this.per_call + this.per_1k_input * inputTokens / 1000 + this.per_1k_output * outputTokens / 1000;
  }

  asDict() { return { per_1k_input: this.per_1k_input, per_1k_output: this.per_1k_output, per_call: this.per_call }; }
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

/** One model a request may run on (serving.endpoints.Endpoint; named EndpointSpec here because
 * the chat client's Endpoint is an HTTP endpoint). */
export class EndpointSpec {
  constructor({ name, where, price, latency_ms, context_tokens, capabilities = new Capabilities(), description = "" }) {
    Object.assign(this, { name, where, price, latency_ms, context_tokens, capabilities, description });
    Object.freeze(this);
  }

  cost(inputTokens, outputTokens = 0) { return this.price.cost(inputTokens, outputTokens); }

  /** Whether a prompt of `inputTokens` tokens is within its context limit. */
  fits(inputTokens) { return inputTokens <= this.context_tokens; }

  /** Whether it has every capability a request needs (an unknown language list allows any). */
  supports({ images = false, tools = false, json = false, language = null } = {}) {
    const caps = this.capabilities;
    if ((images && !caps.images) || (tools && !caps.tools) || (json && !caps.json)) return false;
    return language === null || caps.languages === null || caps.languages.includes(language.toLowerCase());
  }

  asDict() {
    const out = { name: this.name, where: this.where, price: this.price.asDict(), latency_ms: this.latency_ms,
      context_tokens: this.context_tokens, capabilities: this.capabilities.asDict() };
    return this.description ? { ...out, description: this.description } : out;
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

  /** Each endpoint's price of one call of that size, by name. */
  costs(inputTokens, outputTokens = 0) {
    return Object.fromEntries(this.endpoints.map((e) => [e.name, e.cost(inputTokens, outputTokens)]));
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
  const price = object(value, where, PRICE_KEYS);
  if (Object.keys(price).length === 0) {
    throw new EndpointSpecError(`${where} is empty: give at least one of ${PRICE_KEYS.join(", ")} (0 for free)`);
  }
  return new Price(Object.fromEntries(Object.keys(price).map((key) => [key, number(price[key], `${where}.${key}`)])));
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

/** One endpoint from its object; `name` given (the two-endpoint spelling) when the object has none. */
export function parseEndpoint(item, { where, name = null }) {
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
  const fields = object(item, where, ENDPOINT_KEYS);
  for (const key of ["where", "price", "latency_ms", "context_tokens"]) {
    if (!has(fields, key)) throw new EndpointSpecError(`${where}: missing field ${pyRepr(key)}`);
  }
  const place = fields.where;
  if (!WHERE.includes(place)) throw new EndpointSpecError(`${where}.where must be one of ${WHERE.join(", ")}, got ${pyRepr(place)}`);
  const description = has(fields, "description") ? fields.description : "";
  if (typeof description !== "string") throw new EndpointSpecError(`${where}.description must be text, got ${pyKind(description)}`);
  return new EndpointSpec({
    name,
    where: place,
    price: parsePrice(fields.price, `${where}.price`),
    latency_ms: number(fields.latency_ms, `${where}.latency_ms`),
    context_tokens: number(fields.context_tokens, `${where}.context_tokens`, { integer: true, positive: true }),
    capabilities: parseCapabilities(has(fields, "capabilities") ? fields.capabilities : {}, `${where}.capabilities`),
    description,
  });
}

/** Endpoints from a decoded spec: {"endpoints": [...]}, or the two-endpoint spelling
 * {"edge": {...}, "cloud": {...}}. EndpointSpecError names what is wrong. */
export function parseEndpoints(data, { source = "<endpoints>" } = {}) {
  if (!isObject(data)) throw new EndpointSpecError(`${source}: an endpoint spec is an object {"endpoints": [...]}, got ${pyKind(data)}`);
  const keys = Object.keys(data);
  if (keys.length && keys.every((k) => k === EDGE || k === CLOUD)) return twoEndpoints(data, source);
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
    const endpoint = parseEndpoint(item, { where: `${source}: endpoints[${index}]` });
    if (seen.has(endpoint.name)) {
      throw new EndpointSpecError(`${source}: endpoints[${index}].name ${pyRepr(endpoint.name)} is also the name of endpoints[${seen.get(endpoint.name)}]`);
    }
    seen.set(endpoint.name, index);
    endpoints.push(endpoint);
  });
  return new Endpoints(endpoints, source);
}

function twoEndpoints(data, source) {
  const missing = [EDGE, CLOUD].filter((side) => !has(data, side));
  if (missing.length) {
    throw new EndpointSpecError(`${source}: the two-endpoint spelling needs both ${pyRepr(EDGE)} and ${pyRepr(CLOUD)}; missing ${pyRepr(missing[0])}`);
  }
  const endpoints = [EDGE, CLOUD].map((side) => {
    const item = data[side] === null ? {} : data[side];
    if (!isObject(item)) throw new EndpointSpecError(`${source}: ${side} must be an object (an endpoint without its name), got ${pyKind(item)}`);
    return parseEndpoint({ ...TWO_ENDPOINT_DEFAULTS[side], ...item }, { where: `${source}: ${side}`, name: side });
  });
  return new Endpoints(endpoints, source);
}
