// Values as Python's error messages show them (type(value).__name__ and repr(value)) for values
// decoded from JSON by canonical-json.js's parsePythonJson (integral floats as PyFloat, big
// integers as BigInt) or by JSON.parse (then 1.0 shows as 1): so a check ported from Python
// can say what it refused in Python's words.
import { PyFloat, pyFloatRepr } from "./canonical-json.js";

const isFloat = (v) => v instanceof PyFloat || (typeof v === "number" && !Number.isInteger(v));

/** type(value).__name__ of a decoded JSON value, "null" for None (as serving.endpoints._record._kind says it). */
export function pyKind(value) {
  if (value === null || value === undefined) return "null";
  if (typeof value === "boolean") return "bool";
  if (typeof value === "string") return "str";
  if (typeof value === "bigint") return "int";
  if (isFloat(value)) return "float";
  if (typeof value === "number") return "int";
  return Array.isArray(value) ? "list" : "dict";
}

const NOT_PRINTABLE = /[\p{C}\p{Z}]/u;  // what str.isprintable() refuses (but the space)

/** str.isprintable(): no character of the categories Python calls unprintable (C*, Z*) but the space. */
export function isPrintable(text) {
  for (const c of text) if (c !== " " && NOT_PRINTABLE.test(c)) return false;
  return true;
}

/** repr() of a str, as Python writes it: single quotes unless it holds one and no double quote; \\,
 * \n, \r and \t escaped, and \x / \u / \U for every other character str.isprintable() refuses. */
export function strRepr(text) {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const c of text) {
    const code = c.codePointAt(0);
    if (c === "\\" || c === quote) out += `\\${c}`;
    else if (c === "\n") out += "\\n";
    else if (c === "\r") out += "\\r";
    else if (c === "\t") out += "\\t";
    else if (c !== " " && (code < 0x20 || code === 0x7f || NOT_PRINTABLE.test(c))) {
      out += code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}`
        : code < 0x10000 ? `\\u${code.toString(16).padStart(4, "0")}` : `\\U${code.toString(16).padStart(8, "0")}`;
    } else out += c;
  }
  return out + quote;
}

/** repr(value) of a decoded JSON value. */
export function pyRepr(value) {
  if (value === null || value === undefined) return "None";
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "string") return strRepr(value);
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number" || value instanceof PyFloat) {
    const x = Number(value);
    if (Number.isNaN(x)) return "nan";
    if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
    return isFloat(value) ? pyFloatRepr(x) : String(x);
  }
  if (Array.isArray(value)) return `[${value.map(pyRepr).join(", ")}]`;
  return `{${Object.keys(value).map((k) => `${strRepr(k)}: ${pyRepr(value[k])}`).join(", ")}}`;
}
