// Policy rules (serving/policy/_rules.py, docs/policies.md): a declarative file of ordered rules that
// force, forbid or prefer endpoints for a request, applied by the Router to every decision; the model
// cannot override them. The same file format, checks, error messages, semantics, rule names and
// reasons as the Python SDK's.
//
// A rule matches when every condition of its `when` holds: `metadata`, `detected` (content
// detectors, detectors.js), `min_tokens` / `max_tokens` / `min_chars` / `max_chars`, `precision`,
// `matches` (RE2 syntax, run by re2js, a JavaScript port of RE2, in time linear in the prompt),
// `budget` (budgets.js), `needs` (capabilities.js). Every matching forbid removes its endpoint; the
// first matching force allows its endpoint only; without a force, the first matching prefer (whose
// endpoint is still allowed) or route rule decides. No endpoint left: NoFeasibleEndpoint.
import { CLOUD, EDGE, PRECISIONS, ZONES, firstTarget } from "../contract.js";
import { canonicalJson, parsePythonJson, PyFloat } from "../canonical-json.js";
import { pyKind } from "../pyrepr.js";
import { codePointLength, firstCodePoints } from "../pytext.js";
import { PERIODS } from "./budgets.js";
import { CAPABILITIES, RULE_PREFIX } from "./capabilities.js";
import { DETECTORS, fold } from "./detectors.js";
import { NoFeasibleEndpoint, PolicyFileError } from "./errors.js";
import { quoted } from "./quoted.js";

export const ENDPOINTS = Object.freeze([EDGE, CLOUD]);
const ACTIONS = ["force", "forbid", "prefer", "route"];
const SOFT_ACTIONS = ["prefer", "route"];
const RULE_KEYS = ["name", "when", "then", "endpoint", "zone", "description"];
const WHEN_KEYS = ["metadata", "detected", "min_tokens", "max_tokens", "min_chars", "max_chars", "precision", "matches", "budget", "needs"];
const BUDGET_KEYS = ["key", "limit", "period"];
const FILE_KEYS = ["rules", "description"];
const SIZE_KEYS = ["min_tokens", "max_tokens", "min_chars", "max_chars"];
export const MAX_PATTERN_CHARS = 4096;
export const MAX_REPEAT = 1000;
export const MAX_POLICY_BYTES = 1 << 20;
export const MAX_DEPTH = 32;
const NAME_SHAPE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;
export const RE2_SYNTAX = "RE2 runs expressions in time linear in the prompt: no backreferences, lookarounds, atomic groups, " +
  "possessive quantifiers or \\Z (write \\z); docs/policies.md#file-format";

const has = (object, key) => Object.hasOwn(object, key);
const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof PyFloat);
const isInt = (v) => (typeof v === "number" && Number.isInteger(v)) || typeof v === "bigint";

/** The app's request metadata as given: null, or an object of strings to strings; TypeError otherwise. */
export function checkMetadata(metadata) {
  if (metadata === null || metadata === undefined) return null;
  if (typeof metadata !== "object" || Array.isArray(metadata) || metadata instanceof Map) {
    throw new TypeError(`metadata must be an object of strings to strings, got ${Array.isArray(metadata) ? "array" : typeof metadata}`);
  }
  for (const [key, value] of Object.entries(metadata)) {
    if (typeof value !== "string") throw new TypeError(`metadata must be an object of strings to strings: ${quoted(key)} -> ${typeof value}`);
  }
  return metadata;
}

// ---- re2js, loaded when a policy first has a `matches` condition ----------------------------------

let re2js = null;
/** The RE2 port (re2js, a dependency of this package), imported on first use. */
export async function loadRe2() {
  re2js ??= (await import("re2js")).RE2JS;
  return re2js;
}

/** RE2's message as google-re2 gives it ("invalid escape sequence: \\1") from re2js's. */
function re2Said(error) {
  const message = String(error?.message ?? error);
  return message.replace(/^error parsing regexp: /, "").replace(/`([^`]*)`$/, "$1")
    .replace(/^invalid or unsupported Perl syntax: /, "invalid perl operator: ");
}

const saidBriefly = (problem) => problem.split(/\s+/).filter(Boolean).join(" ").slice(0, 100);
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const REPEAT = /\{(\d*)(,?)(\d*)\}/y;

/** Why a repetition in `pattern` would mean something else to RE2 than to Python's re, or null
 * (serving.policy._rules._repeat_problem, which the Python SDK applies first: the same refusals). */
function repeatProblem(pattern) {
  let index = 0, inClass = false;
  const end = pattern.length;
  while (index < end) {
    const char = pattern[index];
    if (char === "\\") { index += 2; continue; }
    if (inClass) {
      if (pattern.startsWith("[:", index)) {
        const close = pattern.indexOf(":]", index + 2);
        index = close >= 0 ? close + 2 : index + 1;
        continue;
      }
      inClass = char !== "]";
    } else if (char === "[") {
      inClass = true;
      index += 1;
      if (pattern.startsWith("^", index)) index += 1;
      if (pattern.startsWith("]", index)) index += 1;
      continue;
    } else if (char === "{") {
      REPEAT.lastIndex = index;
      const repeat = REPEAT.exec(pattern);
      if (repeat !== null) {
        const [text, low, comma, high] = repeat;
        if (!low && !comma) { /* {} is text to both */ } else if (!low) {
          return `${text} is a repetition to Python's re and text to RE2: write {0,${high}}`;
        } else if ([low, high].some((count) => count && (count.length > 4 || Number(count) > MAX_REPEAT))) {
          return `the repetition ${quoted(text, 40)} counts over ${MAX_REPEAT}, RE2's limit`;
        }
      }
    }
    index += 1;
  }
  return null;
}

// ---- checking one rule --------------------------------------------------------------------------

function ruleError(source, index, name, key, message) {
  const shown = typeof name === "string" ? ` (${quoted(name)})` : "";
  return new PolicyFileError(`${source}: rules[${index}]${shown}, key ${quoted(key)}: ${message}`);
}

const strings = (value) => (Array.isArray(value) ? [...value] : [value]);

function size(value, fail, key) {
  if (typeof value === "boolean" || !isInt(value) || value < 0) throw fail(key, `must be a whole number >= 0, got ${quoted(value)}`);
  return Number(value);
}

function metadataCondition(value, fail) {
  if (!isObject(value) || !Object.keys(value).length) {
    throw fail("when.metadata", `must be a non-empty object of key -> value or [values], got ${quoted(value)}`);
  }
  return Object.entries(value).map(([key, wanted]) => {
    const values = strings(wanted);
    if (!values.length || !values.every((v) => typeof v === "string")) {
      throw fail(`when.metadata.${key}`, `must be a string or a non-empty list of strings, got ${quoted(wanted)}`);
    }
    return [key, new Set(values)];
  });
}

function precisionCondition(value, fail) {
  const values = strings(value);
  for (const item of values) {
    if (!(item === null || PRECISIONS.includes(item))) {
      throw fail("when.precision", `unknown precision ${quoted(item)}; use ${PRECISIONS.join(", ")} or null (none declared)`);
    }
  }
  if (!values.length) throw fail("when.precision", "must not be an empty list");
  return new Set(values);
}

async function matchesCondition(value, fail) {
  let headChars = null;
  if (isObject(value)) {
    for (const key of Object.keys(value)) {
      if (key !== "pattern" && key !== "head_chars") throw fail(`when.matches.${key}`, "unknown key; use pattern and head_chars");
    }
    if (has(value, "head_chars")) headChars = size(value.head_chars, fail, "when.matches.head_chars");
    value = has(value, "pattern") ? value.pattern : null;
  }
  const patterns = strings(value);
  if (!patterns.length || !patterns.every((p) => typeof p === "string" && p)) {
    throw fail("when.matches", `must be a regular expression or a non-empty list of them, got ${quoted(value)}`);
  }
  const joined = patterns.map((p) => `(?:${p})`).join("|");
  if (codePointLength(joined) > MAX_PATTERN_CHARS) throw fail("when.matches", `over ${MAX_PATTERN_CHARS} characters`);
  const RE2JS = await loadRe2();
  patterns.forEach((text, k) => {
    const which = `expression ${quoted(text)}` + (patterns.length > 1 ? ` (${k + 1} of ${patterns.length})` : "");
    let problem = repeatProblem(text);
    if (problem === null) {
      if (LONE_SURROGATE.test(text)) problem = "it holds a lone surrogate, which is not text";
      else {
        try {
          RE2JS.compile(text, RE2JS.CASE_INSENSITIVE);
        } catch (error) {
          problem = re2Said(error);
        }
      }
    }
    if (problem !== null) throw fail("when.matches", `${which} is not a regular expression RE2 runs: ${saidBriefly(problem)}. ${RE2_SYNTAX}`);
  });
  try {
    return [RE2JS.compile(joined, RE2JS.CASE_INSENSITIVE), headChars];
  } catch (error) {
    throw fail("when.matches", `the expressions together: ${saidBriefly(re2Said(error))}`);
  }
}

/** finite_number: a finite number (not a bool), or null. */
function finiteNumber(value) {
  if (typeof value === "boolean") return null;
  if (typeof value === "bigint") {
    const n = Number(value);
    return Number.isFinite(n) ? n : null;
  }
  if (typeof value !== "number" && !(value instanceof PyFloat)) return null;
  const n = Number(value);
  return Number.isFinite(n) ? n : null;
}

function budgetCondition(value, fail) {
  if (!isObject(value)) throw fail("when.budget", `must be an object {"key", "limit", "period"}, got ${pyKind(value)}`);
  for (const key of Object.keys(value)) {
    if (!BUDGET_KEYS.includes(key)) throw fail(`when.budget.${key}`, `unknown key; a budget has ${BUDGET_KEYS.join(", ")}`);
  }
  const holder = has(value, "key") ? value.key : null, limit = has(value, "limit") ? value.limit : null;
  const period = has(value, "period") ? value.period : null;
  if (typeof holder !== "string" || !holder) throw fail("when.budget.key", `required: the metadata key naming whose budget it is, got ${quoted(holder)}`);
  const amount = finiteNumber(limit);
  if (amount === null || amount < 0) throw fail("when.budget.limit", `required: a finite number >= 0, got ${quoted(limit)}`);
  if (!PERIODS.includes(period)) throw fail("when.budget.period", `must be one of ${PERIODS.join(", ")}, got ${quoted(period)}`);
  return [holder, amount, period];
}

function needsCondition(value, fail) {
  const names = strings(value);
  if (!names.length || !names.every((n) => typeof n === "string")) {
    throw fail("when.needs", `must be a capability or a non-empty list of them, got ${quoted(value)}`);
  }
  for (const name of names) {
    if (!CAPABILITIES.includes(name)) throw fail("when.needs", `unknown capability ${quoted(name)}; capabilities are ${CAPABILITIES.join(", ")}`);
  }
  return [...new Set(names)];
}

function detectorsCondition(value, fail) {
  if (!Array.isArray(value) || !value.length || !value.every((n) => typeof n === "string")) {
    throw fail("when.detected", `must be a non-empty list of detector names, got ${quoted(value)}`);
  }
  for (const name of value) {
    if (!has(DETECTORS, name)) throw fail("when.detected", `unknown detector ${quoted(name)}; known detectors: ${Object.keys(DETECTORS).join(", ")}`);
  }
  return [...new Set(value)].map((name) => DETECTORS[name]);
}

async function checkRule(item, index, source, endpoints) {
  if (!isObject(item)) throw new PolicyFileError(`${source}: rules[${index}] must be an object, got ${pyKind(item)}`);
  const name = has(item, "name") ? item.name : null;
  const fail = (key, message) => ruleError(source, index, name, key, message);
  for (const key of Object.keys(item)) {
    if (!RULE_KEYS.includes(key)) throw fail(key, `unknown key; a rule has ${RULE_KEYS.join(", ")}`);
  }
  if (typeof name !== "string" || !NAME_SHAPE.test(name)) {
    throw fail("name", "required: 1-64 letters, digits and _.:- (it is logged as is), starting with a letter or digit");
  }
  if (name.startsWith(RULE_PREFIX)) throw fail("name", `names starting with '${RULE_PREFIX}' are the built-in capability rules' (needs:images)`);
  const action = has(item, "then") ? item.then : null;
  let endpoint = has(item, "endpoint") ? item.endpoint : null;
  const zone = has(item, "zone") ? item.zone : null;
  if (!ACTIONS.includes(action)) throw fail("then", `must be one of ${ACTIONS.join(", ")}, got ${quoted(action)}`);
  const twoSides = endpoints.length === 2 && endpoints[0] === EDGE && endpoints[1] === CLOUD;
  if (action === "route") {
    if (!twoSides) throw fail("then", `route sets a zone of the two-endpoint router (${ENDPOINTS.join(", ")}); use prefer`);
    if (!ZONES.includes(zone)) throw fail("zone", `a route rule sets a zone: one of ${ZONES.join(", ")}, got ${quoted(zone)}`);
    if (has(item, "endpoint")) throw fail("endpoint", "a route rule names a zone, not an endpoint");
    endpoint = firstTarget(zone);
  } else {
    if (has(item, "zone")) throw fail("zone", `only route rules set a zone; a ${action} rule names an endpoint`);
    if (!endpoints.includes(endpoint)) throw fail("endpoint", `unknown endpoint ${quoted(endpoint)}; the endpoints are ${endpoints.join(", ")}`);
  }
  const description = has(item, "description") ? item.description : "";
  if (typeof description !== "string") throw fail("description", `must be a string, got ${pyKind(description)}`);
  const when = has(item, "when") ? item.when : {};
  if (!isObject(when)) throw fail("when", `must be an object of conditions, got ${pyKind(when)}`);
  for (const key of Object.keys(when)) {
    if (!WHEN_KEYS.includes(key)) throw fail(`when.${key}`, `unknown condition; conditions are ${WHEN_KEYS.join(", ")}`);
  }
  const sizes = {};
  for (const key of SIZE_KEYS) if (has(when, key)) sizes[key] = size(when[key], fail, `when.${key}`);
  for (const [low, high] of [["min_tokens", "max_tokens"], ["min_chars", "max_chars"]]) {
    if (has(sizes, low) && has(sizes, high) && sizes[low] > sizes[high]) {
      throw fail(`when.${low}`, `${sizes[low]} is above when.${high} (${sizes[high]}): the rule never matches`);
    }
  }
  const [pattern, headChars] = has(when, "matches") ? await matchesCondition(when.matches, fail) : [null, null];
  const budget = has(when, "budget") ? budgetCondition(when.budget, fail) : null;
  return new Rule({
    index, name, action, endpoint, zone: action === "route" ? zone : null, description,
    metadata: has(when, "metadata") ? metadataCondition(when.metadata, fail) : [],
    precision: has(when, "precision") ? precisionCondition(when.precision, fail) : null,
    detectors: has(when, "detected") ? detectorsCondition(when.detected, fail) : [],
    pattern, headChars, budget,
    needs: has(when, "needs") ? needsCondition(when.needs, fail) : [],
    minTokens: sizes.min_tokens ?? null, maxTokens: sizes.max_tokens ?? null,
    minChars: sizes.min_chars ?? null, maxChars: sizes.max_chars ?? null,
  });
}

// ---- applying -----------------------------------------------------------------------------------

/** What the rules look at for one request; each detector runs at most once, the prompt folds once. */
class Request {
  constructor(text, nTokens, precision, metadata, spending, needs, holders) {
    Object.assign(this, { text, nTokens, precision, metadata: metadata || {}, spending, needs, holders });
    this.found = new Map();
    this.heads = new Map();
    this.folded = null;
    this.chars = null;
  }

  length() {
    this.chars ??= codePointLength(this.text);
    return this.chars;
  }

  head(headChars) {
    if (headChars === null) return this.text;
    if (!this.heads.has(headChars)) this.heads.set(headChars, firstCodePoints(this.text, headChars));
    return this.heads.get(headChars);
  }

  overBudget(key, limit, period) {
    if (!has(this.metadata, key) || !this.spending) return false;
    const holder = this.holders?.get(key);
    if (holder === undefined) return false;
    return this.spending.spentById(key, holder, period) >= limit;
  }

  detected(detectors) {
    for (const detector of detectors) {
      let found = this.found.get(detector.name);
      if (found === undefined) {
        this.folded ??= fold(this.text);
        found = detector.foundIn(this.folded);
        this.found.set(detector.name, found);
      }
      if (found) return true;
    }
    return false;
  }
}

/** One checked rule. Conditions left out are null (or empty) and always hold. */
export class Rule {
  constructor(fields) {
    Object.assign(this, fields);
    Object.freeze(this);
  }

  /** Whether every condition holds: the cheap ones first, the detectors last. */
  matches(request) {
    for (const [key, values] of this.metadata) {
      if (!has(request.metadata, key) || !values.has(request.metadata[key])) return false;
    }
    if (this.precision !== null && !this.precision.has(request.precision)) return false;
    if (this.minTokens !== null && request.nTokens < this.minTokens) return false;
    if (this.maxTokens !== null && request.nTokens > this.maxTokens) return false;
    if (this.minChars !== null && request.length() < this.minChars) return false;
    if (this.maxChars !== null && request.length() > this.maxChars) return false;
    if (this.pattern !== null && !this.pattern.matcher(request.head(this.headChars)).find()) return false;
    if (this.budget !== null && !request.overBudget(...this.budget)) return false;
    if (this.needs.length && (request.needs === null || !this.needs.some((c) => request.needs[c]))) return false;
    return !this.detectors.length || request.detected(this.detectors);
  }
}

/** What the matching rules say of one request: the endpoints allowed, in the policy's order, and the
 * rules that decided. */
export class Verdict {
  constructor(allowed, { forced = null, forbiddenBy = new Map(), preferred = null } = {}) {
    Object.assign(this, { allowed, forced, forbiddenBy, preferred });
  }

  /** The rule that decided most: a force, else the first forbid, else a prefer or route. */
  get rule() {
    if (this.forced !== null) return this.forced;
    if (this.forbiddenBy.size) return [...this.forbiddenBy.values()].reduce((a, b) => (b.index < a.index ? b : a));
    return this.preferred;
  }
}

const said = (rule) => (rule.zone !== null ? `routes ${rule.zone}` : `prefers ${rule.endpoint}`);

/** What the deciding rule did: forced, forbids, routes or prefers; and a prefer that also matched
 * (serving.routing._chooser._policy_said). */
export function policySaid(verdict, forbidden) {
  const rule = verdict.rule, soft = verdict.preferred;
  let text;
  if (verdict.forced !== null) text = `forced ${rule.endpoint}`;
  else if (soft === null || rule !== soft) text = `forbids ${forbidden.join(", ")}`;
  else text = said(soft);
  if (soft !== null && rule !== soft) text += `; policy '${soft.name}' ${said(soft)}`;
  return text;
}

/** An ordered, checked set of rules for the endpoints `endpoints`. Make one with PolicySet.parse
 * (a file's bytes or text), PolicySet.fromObject (its decoded document), or the platform's
 * loadPolicy (Node: a path) / fetchPolicy (browsers: a URL). */
export class PolicySet {
  constructor(rules, { endpoints = ENDPOINTS, source = "<policy>", version = "" } = {}) {
    this.rules = Object.freeze([...rules]);
    this.endpoints = Object.freeze([...endpoints]);
    this.source = source;
    this.version = version;
    this.hard = this.rules.filter((r) => !SOFT_ACTIONS.includes(r.action));
    this.soft = this.rules.filter((r) => SOFT_ACTIONS.includes(r.action));
    this.detectors = Object.freeze([...new Set(this.rules.flatMap((r) => r.detectors.map((d) => d.name)))]);
    /** The metadata keys whose holders' spend budget rules read. */
    this.budgetKeys = Object.freeze([...new Set(this.rules.filter((r) => r.budget !== null).map((r) => r.budget[0]))]);
    Object.freeze(this);
  }

  toString() {
    return `PolicySet(${this.rules.length} rules from ${this.source}, version ${this.version})`;
  }

  /** A policy from a file's bytes (Uint8Array) or text; `source` names it in errors, and its suffix
   * says the format: .json only (YAML policy files are the Python SDK's alone: docs/js.md). */
  static async parse(raw, { source = "<policy>.json", endpoints = ENDPOINTS } = {}) {
    const bytes = typeof raw === "string" ? new TextEncoder().encode(raw) : raw;
    if (bytes.length > MAX_POLICY_BYTES) throw new PolicyFileError(`policy file ${source}: over ${MAX_POLICY_BYTES.toLocaleString("en-US")} bytes`);
    const data = decodePolicy(bytes, source);
    const digest = await globalThis.crypto.subtle.digest("SHA-256", bytes);
    const version = Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("").slice(0, 12);
    return this.fromObject(data, { source, endpoints, version });
  }

  /** A policy from its decoded document `{"rules": [...]}` (JSON.parse's or parsePythonJson's);
   * PolicyFileError naming what is wrong. */
  static async fromObject(data, { source = "<policy>", endpoints = ENDPOINTS, version = "" } = {}) {
    const names = [...endpoints];
    if (!isObject(data)) throw new PolicyFileError(`${source}: a policy is an object {"rules": [...]}, got ${pyKind(data)}`);
    for (const key of Object.keys(data)) {
      if (!FILE_KEYS.includes(key)) throw new PolicyFileError(`${source}: unknown key ${quoted(key)}; a policy has ${FILE_KEYS.join(", ")}`);
    }
    const rules = has(data, "rules") ? data.rules : null;
    if (!Array.isArray(rules)) throw new PolicyFileError(`${source}: key 'rules' must be a list of rules, got ${pyKind(rules)}`);
    const checked = [];
    const seen = new Map();
    for (const [index, item] of rules.entries()) {
      const rule = await checkRule(item, index, source, names);
      if (seen.has(rule.name)) throw ruleError(source, index, rule.name, "name", `also the name of rules[${seen.get(rule.name)}]`);
      seen.set(rule.name, index);
      checked.push(rule);
    }
    if (!version) {
      const digest = await globalThis.crypto.subtle.digest("SHA-256", new TextEncoder().encode(canonicalJson(data)));
      version = Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("").slice(0, 12);
    }
    return new PolicySet(checked, { endpoints: names, source, version });
  }

  /** What the rules say of one request; NoFeasibleEndpoint when none is left. `holders`: the budget
   * holders' ids (budgets.holderIds of the metadata and budgetKeys), `spending` the ledger. */
  evaluate(text, nTokens, precision, metadata = null, { spending = null, needs = null, holders = null } = {}) {
    const request = new Request(text, nTokens, precision, metadata, spending, needs, holders);
    let forced = null;
    const forbiddenBy = new Map();
    for (const rule of this.hard) {
      if (rule.action === "force" && forced !== null) continue;  // the first matching force wins
      if ((rule.action === "forbid" && forbiddenBy.has(rule.endpoint)) || !rule.matches(request)) continue;
      if (rule.action === "force") forced = rule;
      else forbiddenBy.set(rule.endpoint, rule);
    }
    if (forced !== null) {
      const against = forbiddenBy.get(forced.endpoint);
      if (against !== undefined) {
        throw new NoFeasibleEndpoint(`policy '${forced.name}' forces ${forced.endpoint}, which policy '${against.name}' forbids: ` +
          "no endpoint may serve this request", { rules: [forced.name, against.name] });
      }
      return new Verdict([forced.endpoint], { forced, forbiddenBy });
    }
    const allowed = this.endpoints.filter((e) => !forbiddenBy.has(e));
    if (!allowed.length) {
      const names = [...forbiddenBy.values()].map((r) => r.name);
      throw new NoFeasibleEndpoint(`policies ${names.map((n) => `'${n}'`).join(", ")} forbid every endpoint ` +
        `(${this.endpoints.join(", ")}): no endpoint may serve this request`, { rules: names });
    }
    for (const rule of this.soft) {
      if ((rule.action === "route" || allowed.includes(rule.endpoint)) && rule.matches(request)) {
        return new Verdict(allowed, { forbiddenBy, preferred: rule });
      }
    }
    return new Verdict(allowed, { forbiddenBy });
  }
}

// ---- the file ---------------------------------------------------------------------------------------

const depthOver = (value, limit) => {  // lists and objects nested more than `limit` levels (no recursion)
  const stack = [[value, 1]];
  while (stack.length) {
    const [item, depth] = stack.pop();
    const children = Array.isArray(item) ? item : isObject(item) ? Object.values(item) : null;
    if (children === null) continue;
    if (depth > limit) return true;
    for (const child of children) if (Array.isArray(child) || isObject(child)) stack.push([child, depth + 1]);
  }
  return false;
};

/** A policy file's bytes decoded as the Python SDK's serving.features._documents does for JSON (no key twice in
 * one object, nested at most 32 levels, Python's json.loads numbers); YAML is refused with why. */
export function decodePolicy(bytes, source) {
  const what = "policy file";
  if (/\.ya?ml$/.test(source)) {
    throw new PolicyFileError(`${what} ${source}: YAML policy files are read by the Python SDK only (PyYAML's YAML 1.1, ` +
      "with its strictness rules); write the policy file as JSON for the JS SDK (the same rules, docs/js.md#policies)");
  }
  if (!source.endsWith(".json")) throw new PolicyFileError(`${what} ${source}: name it .json`);
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw new PolicyFileError(`${what} ${source} is not valid JSON: it is not UTF-8 text`);
  }
  let data;
  try {
    data = parsePythonJson(text, { uniqueKeys: true, maxDepth: MAX_DEPTH + 1 });
  } catch (error) {
    if (/nested too deeply/.test(error.message)) throw new PolicyFileError(`${what} ${source} is not valid JSON: nested deeper than ${MAX_DEPTH} levels`);
    throw new PolicyFileError(`${what} ${source} is not valid JSON: ${String(error.message).split(/\s+/).join(" ").slice(0, 400)}`);
  }
  if (depthOver(data, MAX_DEPTH)) throw new PolicyFileError(`${what} ${source} is not valid JSON: nested deeper than ${MAX_DEPTH} levels`);
  return data;
}
