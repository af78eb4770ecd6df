// Values as the Python SDK's error messages quote them (serving/features/_documents.py's `quoted`: reprlib with
// strings and numbers cut to 80 characters, lists and objects to 4 items and 2 levels, the whole to 80
// characters), for values decoded by canonical-json.js's parsePythonJson.
import { PyFloat, byCodePoint, pyFloatRepr } from "../canonical-json.js";
import { strRepr } from "../pyrepr.js";

const LIMIT = 80;
const ITEMS = 4;
const LEVELS = 2;
const points = (text) => Array.from(text);

function cut(text, limit) {  // reprlib's middle cut of a repr longer than `limit`
  const chars = points(text);
  if (chars.length <= limit) return text;
  const i = Math.max(0, Math.floor((limit - 3) / 2)), j = Math.max(0, limit - 3 - i);
  return chars.slice(0, i).join("") + "..." + chars.slice(chars.length - j).join("");
}

function short(value, level) {
  if (value === null || value === undefined) return "None";
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "string") {
    const chars = points(value);
    let s = strRepr(chars.slice(0, LIMIT).join(""));
    if (points(s).length > LIMIT) {
      const i = Math.max(0, Math.floor((LIMIT - 3) / 2)), j = Math.max(0, LIMIT - 3 - i);
      s = strRepr(chars.slice(0, i).join("") + chars.slice(chars.length - j).join(""));
      const r = points(s);
      s = r.slice(0, i).join("") + "..." + r.slice(r.length - j).join("");
    }
    return s;
  }
  if (typeof value === "bigint") return cut(value.toString(), LIMIT);
  if (typeof value === "number" || value instanceof PyFloat) {
    const x = Number(value);
    const float = value instanceof PyFloat || !Number.isInteger(x);
    const text = Number.isNaN(x) ? "nan" : !Number.isFinite(x) ? (x > 0 ? "inf" : "-inf") : float ? pyFloatRepr(x) : String(x);
    return cut(text, LIMIT);
  }
  if (Array.isArray(value)) {
    if (level <= 0 && value.length) return "[...]";
    const pieces = value.slice(0, ITEMS).map((v) => short(v, level - 1));
    if (value.length > ITEMS) pieces.push("...");
    return `[${pieces.join(", ")}]`;
  }
  const keys = Object.keys(value);
  if (!keys.length) return "{}";
  if (level <= 0) return "{...}";
  const pieces = keys.sort(byCodePoint).slice(0, ITEMS).map((k) => `${short(k, level - 1)}: ${short(value[k], level - 1)}`);
  if (keys.length > ITEMS) pieces.push("...");
  return `{${pieces.join(", ")}}`;
}

/** Python's serving.features._documents.quoted(value, limit). */
export function quoted(value, limit = LIMIT) {
  const text = short(value, LEVELS);
  const chars = points(text);
  return chars.length <= limit ? text : `${chars.slice(0, limit - 3).join("")}...`;
}
