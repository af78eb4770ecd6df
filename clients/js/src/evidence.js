// The previous turn as evidence (serving/conversations/_evidence.py): how a conversation's last turn
// went moves each endpoint's expected quality for this one, by weights learned from logs whose turns
// are linked (Python's training.turn_evidence writes them into the bundle as turn_evidence.json; a
// bundle without it decides every turn from its text alone).
//
// Per endpoint e, a logistic model over what the router knows when the turn arrives:
//
//     logit p'_e = w . [logit p_e, 1, log(turn), log(1 + history tokens) / 10,
//                       served_e, served_e x trouble, trouble]
//
// p_e is the bundle's calibrated P(e answers well | this turn's text); served_e whether e answered the
// last turn; trouble whether that turn went badly (its first answer was rejected or its call failed
// and another endpoint served, nothing served, or the app regenerated the answer). With the weights
// [1, 0, 0, ...] the evidence changes nothing.
//
// The arithmetic is Python's, step for step (the same clipping, the sum left to right as Python 3.11's
// sum() adds); log, log1p and exp are the JS engine's (fdlibm in V8), which round a few results one
// unit in the last place away from glibc's: the adjusted probabilities agree to about 1e-16.
import { parsePythonJson } from "./canonical-json.js";
import { pyFloat } from "./python-arithmetic.js";
import { PY_SPACE } from "./pytext.js";
import { pyKind, pyRepr, strRepr } from "./pyrepr.js";

export const FEATURES = Object.freeze(["logit_p", "intercept", "log_turn", "log_history", "served", "served_trouble", "trouble"]);
/** The outcomes of a last turn that went badly. */
export const TROUBLE = Object.freeze(["fallback", "rejected", "failed", "regenerated"]);
/** The bundle file that carries the weights. */
export const FILE = "turn_evidence.json";
const EPS = 1e-4;

/** A turn_evidence.json that cannot be used; the message names what is wrong (Python's TurnEvidenceError). */
export class TurnEvidenceError extends Error {
  constructor(message) { super(message); this.name = "TurnEvidenceError"; }
}

/** A Python exception's class and message, for what from_json reports as `TypeName: message`. */
class PyError extends Error {
  constructor(type, message) { super(message); this.type = type; }
}

/** log(p / (1 - p)), p clipped to [1e-4, 1 - 1e-4] first. */
export function logit(p) {
  p = Math.min(Math.max(p, EPS), 1 - EPS);
  return Math.log(p / (1 - p));
}

/** The model's inputs for endpoint `endpoint` with P(good) `p`, in the order of FEATURES. */
export function features(p, endpoint, state) {
  const served = state.endpoint === endpoint ? 1 : 0;
  const trouble = TROUBLE.includes(state.outcome) ? 1 : 0;
  return [logit(p), 1, Math.log(state.turns + 1), Math.log1p(state.history_tokens) / 10, served, served * trouble, trouble];
}

/** type(value).__name__ as Python's messages say it. */
const typeName = (value) => (value === null || value === undefined ? "NoneType" : pyKind(value));

/** float(value) of a decoded JSON value (python's float(): numbers, bools, numeric text). */
function toFloat(value) {
  if (typeof value === "boolean") return value ? 1 : 0;
  if (typeof value === "bigint") {
    const x = Number(value);  // rounded to nearest, ties to even, as Python's int -> float
    if (!Number.isFinite(x)) throw new PyError("OverflowError", "int too large to convert to float");
    return x;
  }
  if (typeof value === "number" || value instanceof Number) return Number(value);
  if (typeof value === "string") {
    const x = pyFloat(value);
    if (x === null) throw new PyError("ValueError", `could not convert string to float: ${strRepr(value)}`);
    return x;
  }
  throw new PyError("TypeError", `float() argument must be a string or a real number, not '${typeName(value)}'`);
}

/** The items Python's iteration over a decoded JSON value gives: a list's items, a dict's keys, a str's
 * characters; TypeError for anything else. */
function iterated(value) {
  if (Array.isArray(value)) return value;
  if (typeof value === "string") return [...value];
  if (value !== null && typeof value === "object" && !(value instanceof Number)) return Object.keys(value);
  throw new PyError("TypeError", `'${typeName(value)}' object is not iterable`);
}

/** value[key] of a decoded JSON value for a str key, as Python fails it. */
function item(value, key) {
  if (value !== null && typeof value === "object" && !Array.isArray(value) && !(value instanceof Number)) {
    if (!Object.hasOwn(value, key)) throw new PyError("KeyError", strRepr(key));
    return value[key];
  }
  if (Array.isArray(value)) throw new PyError("TypeError", "list indices must be integers or slices, not str");
  if (typeof value === "string") throw new PyError("TypeError", "string indices must be integers, not 'str'");
  throw new PyError("TypeError", `'${typeName(value)}' object is not subscriptable`);
}

const INT_TEXT = /^[+-]?\d(?:_?\d)*$/;

/** int(value) of a decoded JSON value (Python's int(): truncating floats, bools, whole-number text). */
function toInt(value) {
  if (typeof value === "boolean") return value ? 1 : 0;
  if (typeof value === "bigint") return Number(value);
  if (typeof value === "number" || value instanceof Number) {
    const x = Number(value);
    if (Number.isNaN(x)) throw new PyError("ValueError", "cannot convert float NaN to integer");
    if (!Number.isFinite(x)) throw new PyError("OverflowError", "cannot convert float infinity to integer");
    return Math.trunc(x);
  }
  if (typeof value === "string") {
    let ascii = "";
    for (const c of value) ascii += PY_SPACE.includes(c) ? " " : c;
    ascii = ascii.trim();
    if (!INT_TEXT.test(ascii)) throw new PyError("ValueError", `invalid literal for int() with base 10: ${strRepr(value)}`);
    return Number(ascii.replaceAll("_", ""));
  }
  throw new PyError("TypeError", `int() argument must be a string, a bytes-like object or a real number, not '${typeName(value)}'`);
}

/** json.loads of the file's bytes (UTF-8, a BOM allowed, as Python's json reads bytes). */
function decoded(raw) {
  if (typeof raw === "string") return parsePythonJson(raw);
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(raw);
  } catch (error) {
    throw new PyError("UnicodeDecodeError", `'utf-8' codec can't decode the file: ${error.message}`);
  }
  try {
    return parsePythonJson(text);
  } catch (error) {
    throw new PyError("JSONDecodeError", error.message);
  }
}

/** Each endpoint's weights over FEATURES (module doc), and the rows they were fitted on. */
export class TurnEvidence {
  /** @param {Record<string, number[]> | Map<string, number[]>} weights endpoint -> its 7 weights */
  constructor(weights, rows = 0) {
    this.weights = new Map(weights instanceof Map ? weights : Object.entries(weights));
    this.rows = rows;
    Object.freeze(this);
  }

  /** The weights a bundle's turn_evidence.json holds for `endpoints` (Python's TurnEvidence.from_json,
   * its checks and messages); TurnEvidenceError naming what is wrong. */
  static fromJson(raw, endpoints) {
    const weights = new Map();
    let rows;
    try {
      const data = decoded(raw);
      const isDict = data !== null && typeof data === "object" && !Array.isArray(data) && !(data instanceof Number);
      if (!isDict) throw new PyError("AttributeError", `'${typeName(data)}' object has no attribute 'get'`);
      const named = Object.hasOwn(data, "features") ? data.features : null;
      if (!(Array.isArray(named) && named.length === FEATURES.length && named.every((f, k) => f === FEATURES[k]))) {
        throw new TurnEvidenceError(`${FILE}: features ${pyRepr(named)}, expected ${pyRepr([...FEATURES])}`);
      }
      for (const name of endpoints) weights.set(name, iterated(item(item(data, "weights"), name)).map(toFloat));
      rows = toInt(Object.hasOwn(data, "rows") ? data.rows : 0);
    } catch (error) {
      if (error instanceof TurnEvidenceError) throw error;
      if (!(error instanceof PyError)) throw error;
      if (error.type === "OverflowError") throw new Error(error.message);  // not one of the errors Python's from_json catches
      throw new TurnEvidenceError(`${FILE}: ${error.type}: ${error.message}`);
    }
    for (const [name, w] of weights) {
      if (w.length !== FEATURES.length || !w.every(Number.isFinite)) {
        throw new TurnEvidenceError(`${FILE}: endpoint ${strRepr(name)} needs ${FEATURES.length} finite weights`);
      }
    }
    return new TurnEvidence(weights, rows);
  }

  /** Each endpoint's expected quality given how the last turn went (a conversation with no turn yet:
   * as it is). `expected` and `names` in the same order. */
  adjusted(expected, names, state) {
    if (state.turns === 0) return [...expected];
    return expected.map((p, k) => {
      const w = this.weights.get(names[k]);
      const x = features(p, names[k], state);
      let z = 0;
      for (let j = 0; j < w.length; j++) z += w[j] * x[j];
      return 1.0 / (1.0 + Math.exp(-Math.max(Math.min(z, 30.0), -30.0)));
    });
  }
}

/**
 * `scores` (Routing.scores') with each conversation turn's expected qualities moved by how its last
 * turn went: an N-endpoint bundle's `expected`; a two-endpoint bundle's heads, and its score when it is
 * the expected gain p_cloud - p_edge (`expectedGain`; an older bundle's score is left as it is). The
 * same object when no request has a last turn, or the scores are a degraded bundle's.
 */
export function withEvidence(scores, states, names, evidence, expectedGain) {
  const rows = [];
  states.forEach((state, i) => { if (state !== null && state !== undefined && state.turns > 0) rows.push(i); });
  if (!rows.length || (scores.note !== null && scores.note !== undefined)) return scores;
  if (scores.expected !== null && scores.expected !== undefined) {
    const expected = scores.expected.map((row) => [...row]);
    for (const i of rows) expected[i] = evidence.adjusted(expected[i], names, states[i]);
    return { ...scores, expected };
  }
  if (scores.heads === null || scores.scores === null || !expectedGain) return scores;
  const heads = [...scores.heads], values = [...scores.scores];
  for (const i of rows) {
    const [pEdge, pCloud] = evidence.adjusted(heads[i], names, states[i]);
    heads[i] = [pEdge, pCloud];
    values[i] = pCloud - pEdge;
  }
  return { ...scores, scores: values, heads };
}
