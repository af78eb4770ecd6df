// The manifest's values checked before anything uses them, as serving/bundle/_manifest.py checks them:
// the same rules, so a bundle the Python SDK refuses is refused here too. Only what routing reads
// is typed; the descriptive sections must be objects and are kept as they are.
import {
  MAX_CALIBRATION_POINTS, MAX_CHARS_LIMIT, MAX_EMBEDDING_DIM, MAX_TOKENS_LIMIT, PRECISIONS, SCHEMA_VERSION,
  DEFAULT_EDGE_CONTEXT_TOKENS, ENDPOINT_RULES, UNFAMILIAR_POLICIES,
} from "./contract.js";
import { PyFloat } from "./canonical-json.js";
import { STAT_NAMES } from "./text-stats.js";
import { EndpointSpecError, parseEndpoints } from "./endpoints.js";
import { pyRepr } from "./pyrepr.js";

/** A manifest value is missing, of the wrong type or out of range. */
export class ManifestError extends Error {
  constructor(message) { super(message); this.name = "ManifestError"; }
}

const FEATURE_SPEC_FIELDS = ["tier", "max_tokens", "max_chars", "add_special_tokens", "encoder_row_wise", "fused",
  "embedding_dim", "stat_names", "precisions", "lexical"];
const LEXICAL_MODES = ["none", "features", "blend"];
const CALIBRATION_METHODS = ["sigmoid", "isotonic", "none"];
const SCORE_KINDS = { expected_gain: { heads: ["edge", "cloud"], bounds: [-1, 1] },
  cloud_needed: { heads: ["cloud_needed"], bounds: [0, 1] } };
const ENDPOINTS_KIND = "endpoints";  // N endpoints: heads are the endpoints section's names, no routing score
const ENDPOINTS_KEYS = ["endpoints", "output_tokens", "choice", "head_mode", "validation"];
const DESCRIPTIVE = ["encoder", "target", "label", "split", "metrics", "data", "training", "mlflow"];
const FILE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const SHA256 = /^[0-9a-f]{64}$/;

function fail(key, rule, value) {
  let shown;
  try { shown = JSON.stringify(value, (_, v) => (typeof v === "bigint" ? v.toString() : v)) ?? String(value); }
  catch { shown = String(value); }
  return new ManifestError(`manifest ${key}: ${rule}, got ${shown.slice(0, 80)}${shown.length > 80 ? "..." : ""}`);
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof PyFloat);
/** A JSON number as Python sees it (a float or an int, never a bool), as a JS number. */
const asNumber = (v) => (typeof v === "number" || v instanceof PyFloat ? Number(v) : typeof v === "bigint" ? Number(v) : null);
const has = (o, k) => Object.hasOwn(o, k);

function section(data, key, required = false) {
  if (!has(data, key) && !required) return Object.create(null);
  if (!isObject(data[key])) throw fail(key, "must be an object", data[key]);
  return data[key];
}

function number(obj, key, path, { lo = -Infinity, hi = Infinity, fallback } = {}) {
  const raw = has(obj, key) ? obj[key] : fallback;
  const value = asNumber(raw);
  if (value === null || !Number.isFinite(value) || !(lo <= value && value <= hi)) {
    throw fail(`${path}.${key}`, `must be a finite number in [${lo}, ${hi}]`, raw);
  }
  return value;
}

function integer(obj, key, path, { lo, hi, fallback }) {
  const raw = has(obj, key) ? obj[key] : fallback;
  const value = typeof raw === "bigint" ? Number(raw) : raw;
  if (typeof value !== "number" || !Number.isInteger(value) || !(lo <= value && value <= hi)) {
    throw fail(`${path}.${key}`, `must be an integer in [${lo}, ${hi}]`, raw);
  }
  return value;
}

function bool(obj, key, path) {
  if (has(obj, key) && typeof obj[key] !== "boolean") throw fail(`${path}.${key}`, "must be true or false", obj[key]);
  return obj[key] === true;
}

function checkFeatureSpec(data) {
  if (!isObject(data)) throw fail("feature_spec", "must be an object", data);
  const unknown = Object.keys(data).filter((k) => !FEATURE_SPEC_FIELDS.includes(k)).sort();
  if (unknown.length) throw fail("feature_spec", `has unknown field(s) ${unknown.join(", ")}`, unknown);
  if (typeof data.tier !== "string") throw fail("feature_spec.tier", "must be a string", data.tier);
  const flags = Object.fromEntries(["add_special_tokens", "encoder_row_wise", "fused"]
    .map((k) => [k, bool(data, k, "feature_spec")]));
  const statNames = has(data, "stat_names") ? data.stat_names : STAT_NAMES;
  if (!Array.isArray(statNames) || statNames.join("\0") !== STAT_NAMES.join("\0")) {
    throw fail("feature_spec.stat_names", `must be this library's text statistics ${JSON.stringify(STAT_NAMES)}`,
      data.stat_names);
  }
  const precisions = has(data, "precisions") ? data.precisions : [...PRECISIONS];
  if (!Array.isArray(precisions) || !precisions.every((p) => PRECISIONS.includes(p))
      || new Set(precisions).size !== precisions.length) {
    throw fail("feature_spec.precisions", `must be distinct tags among ${PRECISIONS.join(", ")}`, precisions);
  }
  const lexical = has(data, "lexical") ? data.lexical : "none";
  if (!LEXICAL_MODES.includes(lexical)) throw fail("feature_spec.lexical", `must be one of ${LEXICAL_MODES.join(", ")}`, lexical);
  if (lexical !== "none" && !flags.fused) {
    throw fail("feature_spec.lexical", "needs the fused layout (model.onnx computes the margins)", lexical);
  }
  return Object.freeze({
    tier: data.tier,
    maxTokens: integer(data, "max_tokens", "feature_spec", { lo: 1, hi: MAX_TOKENS_LIMIT, fallback: 512 }),
    maxChars: integer(data, "max_chars", "feature_spec", { lo: 1, hi: MAX_CHARS_LIMIT, fallback: 2048 }),
    embeddingDim: integer(data, "embedding_dim", "feature_spec", { lo: 1, hi: MAX_EMBEDDING_DIM, fallback: 32 }),
    addSpecialTokens: flags.add_special_tokens, encoderRowWise: flags.encoder_row_wise, fused: flags.fused,
    precisions: Object.freeze([...precisions]), lexical,
  });
}

function checkScore(data) {
  if (!has(data, "score")) return { kind: "cloud_needed", heads: ["cloud_needed"], outputs: ["probabilities"] };
  const score = data.score;
  if (!isObject(score) || !(has(SCORE_KINDS, score.kind) || score.kind === ENDPOINTS_KIND)) {
    throw fail("score.kind", `must be one of ${[...Object.keys(SCORE_KINDS), ENDPOINTS_KIND].join(", ")}`, score);
  }
  if (score.kind === ENDPOINTS_KIND) {
    const { heads, outputs } = score;
    if (!Array.isArray(heads) || !heads.length || !heads.every((h) => typeof h === "string")) {
      throw fail("score.heads", "must list the endpoints' names (an endpoints bundle)", heads);
    }
    if (!Array.isArray(outputs) || outputs.length !== 1 || typeof outputs[0] !== "string" || !outputs[0]) {
      throw fail("score.outputs", "must name the one graph output of every endpoint's probability", outputs);
    }
    return { kind: ENDPOINTS_KIND, heads: [...heads], outputs: [...outputs] };
  }
  const expected = SCORE_KINDS[score.kind].heads;
  if (!Array.isArray(score.heads) || score.heads.join("\0") !== expected.join("\0")) {
    throw fail("score.heads", `must be ${JSON.stringify(expected)} for ${score.kind}`, score.heads);
  }
  const outputs = score.outputs;
  if (!Array.isArray(outputs) || outputs.length !== expected.length
      || !outputs.every((o) => typeof o === "string" && o.length > 0 && o.length <= 64)
      || new Set(outputs).size !== outputs.length) {
    throw fail("score.outputs", "must name one distinct graph output per head", outputs);
  }
  return { kind: score.kind, heads: [...expected], outputs: [...outputs] };
}

/** One head's calibration, validated, as plain numbers (calibration.js applies it). */
export function checkCalibration(data, path = "calibration") {
  if (!isObject(data)) throw fail(path, "must be an object", data);
  const method = data.method;
  if (!CALIBRATION_METHODS.includes(method)) throw fail(`${path}.method`, `must be one of ${CALIBRATION_METHODS.join(", ")}`, method);
  const inModel = bool(data, "in_model", path);
  if (inModel && method !== "sigmoid") throw fail(`${path}.in_model`, "only sigmoid calibration can be folded into the model", true);
  if (method === "sigmoid") {
    return { method, inModel, a: number(data, "a", path, { lo: -1e6, hi: 1e6 }), b: number(data, "b", path, { lo: -1e6, hi: 1e6 }) };
  }
  if (method === "isotonic") {
    const points = {};
    for (const key of ["x", "y"]) {
      const list = data[key];
      const values = Array.isArray(list) ? list.map((v) => (typeof v === "boolean" ? null : asNumber(v))) : null;
      if (!values || values.length < 1 || values.length > MAX_CALIBRATION_POINTS
          || !values.every((v) => v !== null && v >= 0 && v <= 1)) {
        throw fail(`${path}.${key}`, `must be 1 to ${MAX_CALIBRATION_POINTS} numbers in [0, 1]`, list);
      }
      points[key] = values;
    }
    if (points.x.length !== points.y.length || points.x.some((v, i) => i > 0 && v < points.x[i - 1])) {
      throw fail(`${path}.x`, `must be increasing and as long as ${path}.y`, points.x.length);
    }
    return { method, inModel, x: points.x, y: points.y };
  }
  return { method, inModel };
}

function checkCalibrations(data, score) {
  const calibrations = data.calibration;
  if (!has(data, "score")) return { [score.heads[0]]: checkCalibration(calibrations) };
  if (!isObject(calibrations) || Object.keys(calibrations).sort().join("\0") !== [...score.heads].sort().join("\0")) {
    throw fail("calibration", `must hold one calibration per head (${score.heads.join(", ")})`, calibrations);
  }
  return Object.fromEntries(score.heads.map((h) => [h, checkCalibration(calibrations[h], `calibration.${h}`)]));
}

function checkThresholds(data, tags, [lo, hi]) {
  if (!isObject(data) || !has(data, "default")) throw fail("thresholds", 'must be an object with a "default" entry', data);
  const bands = Object.create(null);
  for (const [key, entry] of Object.entries(data)) {
    if (key !== "default" && !tags.includes(key)) {
      throw fail("thresholds", `keys must be 'default' or a precision tag (${tags.join(", ")})`, key);
    }
    if (!isObject(entry)) throw fail(`thresholds.${key}`, "must be an object with lo and hi", entry);
    const band = { lo: number(entry, "lo", `thresholds.${key}`, { lo, hi }), hi: number(entry, "hi", `thresholds.${key}`, { lo, hi }) };
    if (band.lo > band.hi) throw fail(`thresholds.${key}`, "needs lo <= hi", [band.lo, band.hi]);
    bands[key] = band;
  }
  return bands;
}

/** An endpoints bundle's thresholds: none (its choice rule decides). */
function noThresholds(data) {
  if (data !== undefined && data !== null && !(isObject(data) && Object.keys(data).length === 0)) {
    throw fail("thresholds", `must be empty for score.kind '${ENDPOINTS_KIND}' (its choice rule decides)`, data);
  }
  return Object.create(null);
}

/** The `endpoints` section (serving.bundle._manifest.check_endpoints): present exactly when the score's
 * kind is `endpoints`, its endpoints valid (endpoints.js) and named as the score's heads, in
 * their order; the choice rule one of ENDPOINT_RULES with its parameter. */
function checkEndpoints(data, score) {
  if (score.kind !== ENDPOINTS_KIND) {
    if (data !== undefined && data !== null) throw fail("endpoints", `belongs to an endpoints bundle (score.kind '${ENDPOINTS_KIND}')`, score.kind);
    return null;
  }
  if (!isObject(data)) throw fail("endpoints", `must be an object: score.kind '${ENDPOINTS_KIND}' needs the endpoints`, data);
  const unknown = Object.keys(data).filter((k) => !ENDPOINTS_KEYS.includes(k)).sort();
  if (unknown.length) throw fail("endpoints", `has unknown key(s) ${unknown.join(", ")}; allowed: ${ENDPOINTS_KEYS.join(", ")}`, unknown);
  let spec;
  try {
    spec = parseEndpoints({ endpoints: has(data, "endpoints") ? data.endpoints : null }, { source: "manifest endpoints", callSettings: false });
  } catch (error) {
    if (error instanceof EndpointSpecError) throw new ManifestError(error.message);
    throw error;
  }
  if (spec.names.join("\0") !== score.heads.join("\0")) {
    throw fail("endpoints.endpoints", `must name the model's heads in their order ${pyRepr(score.heads)} (score.heads)`, spec.names);
  }
  const outputTokens = number(data, "output_tokens", "endpoints", { lo: 0, hi: 1e7 });
  const choice = data.choice;
  if (!isObject(choice) || !has(ENDPOINT_RULES, choice.rule)) {
    throw fail("endpoints.choice.rule", `must be one of ${Object.keys(ENDPOINT_RULES).join(", ")}`, choice);
  }
  const parameter = number(choice, ENDPOINT_RULES[choice.rule], "endpoints.choice", { lo: 0, hi: 1e12 });
  return Object.freeze({ spec, names: spec.names, outputTokens, rule: choice.rule, parameter });
}

function checkFiles(data) {
  if (!isObject(data) || Object.keys(data).length === 0) throw fail("files", "must be a non-empty object of file name -> SHA-256", data);
  for (const [name, digest] of Object.entries(data)) {
    if (!FILE_NAME.test(name)) throw fail("files", "names must be plain file names inside the bundle (no path, no leading dot)", name);
    if (typeof digest !== "string" || !SHA256.test(digest)) throw fail(`files.${name}`, "must be a lower-case hex SHA-256", digest);
  }
  return { ...data };
}

function checkNovelty(data, files) {
  if (data === undefined || data === null) return null;
  if (!isObject(data)) throw fail("novelty", "must be an object", data);
  const inModel = bool(data, "in_model", "novelty");
  if (inModel) {
    if (typeof data.output !== "string" || !data.output) throw fail("novelty.output", "must name the model output that computes the novelty", data.output);
    if (has(data, "file")) throw fail("novelty.file", "must be absent when novelty.in_model is true (the model computes it)", data.file);
  } else if (typeof data.file !== "string" || !has(files, data.file)) {
    throw fail("novelty.file", "must name a file the manifest lists", data.file);
  }
  const novelty = {
    inModel, output: inModel ? data.output : null, file: inModel ? null : data.file,
    embeddingThreshold: number(data, "embedding_threshold", "novelty", { lo: 1e-9, hi: 1e9 }),
    unseenThreshold: number(data, "unseen_threshold", "novelty", { lo: 1e-9, hi: 1.0 }),
    policy: data.policy,
  };
  if (!UNFAMILIAR_POLICIES.includes(data.policy)) throw fail("novelty.policy", `must be one of ${UNFAMILIAR_POLICIES.join(", ")}`, data.policy);
  return novelty;
}

function checkAcceptance(data, files) {
  if (data === undefined || data === null) return null;
  if (!isObject(data)) throw fail("acceptance", "must be an object", data);
  if (data.file === undefined || data.file === null) {
    if (typeof data.reason !== "string") throw fail("acceptance.reason", "must say why the bundle has no acceptance model", data.reason);
    return { file: null, reason: data.reason };
  }
  if (typeof data.file !== "string" || !has(files, data.file)) throw fail("acceptance.file", "must name a file the manifest lists", data.file);
  return {
    file: data.file,
    nFeatures: integer(data, "n_features", "acceptance", { lo: 1, hi: 100_000 }),
    threshold: number(data, "threshold", "acceptance", { lo: 0, hi: 1 }),
    maxResponseChars: integer(data, "max_response_chars", "acceptance", { lo: 1, hi: 10_000_000 }),
    calibration: checkCalibration(data.calibration, "acceptance.calibration"),
  };
}

/** Python's `value == 1` for a JSON value (True and 1.0 included, as json.loads gives them). */
export const isSchemaVersion = (v) => v === true || asNumber(v) === SCHEMA_VERSION;

/**
 * Validate and type a parsed manifest (canonical-json.js's parsePythonJson); ManifestError
 * says what is wrong and where. `raw` keeps the parsed object for the descriptive sections.
 */
export function checkManifest(data) {
  if (!isObject(data)) throw fail("", "must be a JSON object", typeof data);
  if (!isSchemaVersion(data.schema_version)) {
    throw fail("schema_version", `is not supported (this SDK reads ${SCHEMA_VERSION})`, data.schema_version);
  }
  const modelVersion = has(data, "model_version") ? data.model_version : "unknown";
  if (typeof modelVersion !== "string" || modelVersion.length === 0 || modelVersion.length > 200) {
    throw fail("model_version", "must be a string of 1 to 200 characters", modelVersion);
  }
  const spec = checkFeatureSpec(data.feature_spec);
  const score = checkScore(data);
  const limits = section(data, "limits");
  for (const key of DESCRIPTIVE) section(data, key);
  for (const key of ["created_at", "manifest_sha256"]) {
    if (has(data, key) && typeof data[key] !== "string") throw fail(key, "must be a string", data[key]);
  }
  const files = has(data, "files") ? checkFiles(data.files) : {};
  const calibration = checkCalibrations(data, score);
  const thresholds = score.kind === ENDPOINTS_KIND ? noThresholds(data.thresholds)
    : checkThresholds(data.thresholds, spec.precisions, SCORE_KINDS[score.kind].bounds);
  const endpoints = checkEndpoints(data.endpoints, score);
  return Object.freeze({
    modelVersion, featureSpec: spec, score, calibration, thresholds, endpoints,
    limits: { edgeContextTokens: integer(limits, "edge_context_tokens", "limits",
      { lo: 1, hi: 10_000_000, fallback: DEFAULT_EDGE_CONTEXT_TOKENS }) },
    files, novelty: checkNovelty(data.novelty, data.files || {}), acceptance: checkAcceptance(data.acceptance, data.files || {}),
    createdAt: has(data, "created_at") ? data.created_at : "", manifestSha256: has(data, "manifest_sha256") ? data.manifest_sha256 : "",
    raw: data,
  });
}

/** The thresholds of a declared precision; undeclared or untuned tags use "default". */
export function bandOf(manifest, precision) {
  const entry = precision !== null && precision !== undefined ? manifest.thresholds[precision] : undefined;
  return entry || manifest.thresholds.default;
}
