// The manifest as Python's json module reads and writes it. A bundle's manifest_sha256 and its
// Ed25519 signature cover json.dumps(manifest, sort_keys=True, ensure_ascii=True), and that text
// depends on what JSON.parse forgets: whether a number was written as an integer or a float
// (1 against 1.0), integers beyond 2^53, and Python's float repr (1e-05, 1e+16). So this module
// parses JSON itself, keeping those, and writes the canonical text back as Python would.

/** A float whose value is an integer (Python's 1.0, -0.0, 1e+16): JSON.parse would make it an
 * int. Arithmetic works on it (valueOf); validators read it with Number(). */
export class PyFloat extends Number {}

/** Thrown for text that Python's json.loads refuses. */
export class JsonError extends SyntaxError {}

const MAX_DEPTH = 900;  // Python's json refuses deeper nesting (RecursionError)
const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/y;
const ESCAPES = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

/** json.loads(text): objects without a prototype (no key is special), integers as numbers
 * (BigInt beyond 2^53), integral floats as PyFloat, NaN and Infinity as Python accepts them.
 * `uniqueKeys`: refuse a key given twice in one object (the SDK's documents do); `maxDepth`: the
 * nesting refused as "nested too deeply". */
export function parsePythonJson(text, { uniqueKeys = false, maxDepth = MAX_DEPTH } = {}) {
  let i = 0;
  const fail = (what) => { throw new JsonError(`${what} at character ${i}`); };
  const skip = () => { while (i < text.length && " \t\n\r".includes(text[i])) i++; };

  function string() {
    i++;  // the opening quote
    let out = "";
    for (;;) {
      const start = i;
      while (i < text.length && text[i] !== '"' && text[i] !== "\\" && text.charCodeAt(i) >= 0x20) i++;
      out += text.slice(start, i);
      if (i >= text.length) fail("unterminated string");
      const c = text[i];
      if (c === '"') { i++; return out; }
      if (c !== "\\") fail("invalid control character in string");
      const e = text[i + 1];
      if (e === "u") {
        const hex = text.slice(i + 2, i + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail("invalid \\u escape");
        out += String.fromCharCode(parseInt(hex, 16));
        i += 6;
      } else if (e in ESCAPES) {
        out += ESCAPES[e];
        i += 2;
      } else fail("invalid escape");
    }
  }

  function number() {
    NUMBER.lastIndex = i;
    const match = NUMBER.exec(text);
    if (!match) fail("expected a value");
    i = NUMBER.lastIndex;
    const lexeme = match[0];
    if (match[1] === undefined && match[2] === undefined) {  // an int in Python
      const value = Number(lexeme);
      return Number.isSafeInteger(value) ? value : BigInt(lexeme);
    }
    const value = Number(lexeme);
    return Number.isInteger(value) ? new PyFloat(value) : value;
  }

  function value(depth) {
    if (depth > maxDepth) fail("nested too deeply");
    skip();
    const c = text[i];
    if (c === "{") return object(depth);
    if (c === "[") return array(depth);
    if (c === '"') return string();
    for (const [word, v] of [["null", null], ["true", true], ["false", false], ["NaN", NaN],
      ["Infinity", Infinity], ["-Infinity", -Infinity]]) {
      if (text.startsWith(word, i)) { i += word.length; return v; }
    }
    return number();
  }

  function object(depth) {
    i++;
    const out = Object.create(null);
    skip();
    if (text[i] === "}") { i++; return out; }
    for (;;) {
      skip();
      if (text[i] !== '"') fail("expected a property name");
      const key = string();
      if (uniqueKeys && Object.hasOwn(out, key)) fail(`key ${JSON.stringify(key)} appears twice in one object`);
      skip();
      if (text[i] !== ":") fail("expected ':'");
      i++;
      out[key] = value(depth + 1);
      skip();
      if (text[i] === ",") { i++; continue; }
      if (text[i] === "}") { i++; return out; }
      fail("expected ',' or '}'");
    }
  }

  function array(depth) {
    i++;
    const out = [];
    skip();
    if (text[i] === "]") { i++; return out; }
    for (;;) {
      out.push(value(depth + 1));
      skip();
      if (text[i] === ",") { i++; continue; }
      if (text[i] === "]") { i++; return out; }
      fail("expected ',' or ']'");
    }
  }

  const result = value(0);
  skip();
  if (i !== text.length) fail("extra data");
  return result;
}

/** The shortest decimal digits of a positive finite double and the point's position:
 * value = 0.DIGITS * 10^point (what Python's repr and JS's String() both start from). */
function shortestDigits(a) {
  const [mantissa, exp = "0"] = String(a).split("e");
  const [whole, fraction = ""] = mantissa.split(".");
  const all = whole + fraction;
  const leading = all.length - all.replace(/^0+/, "").length;
  return { digits: all.slice(leading).replace(/0+$/, "") || "0", point: whole.length - leading + Number(exp) };
}

/** repr(float) in Python: fixed notation from 1e-4 up to 1e16, scientific outside, ".0" on
 * integral values, two exponent digits at least. */
export function pyFloatRepr(x) {
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "Infinity" : "-Infinity";
  const sign = x < 0 || Object.is(x, -0) ? "-" : "";
  if (x === 0) return `${sign}0.0`;
  const { digits, point } = shortestDigits(Math.abs(x));
  if (point <= -4 || point > 16) {
    const exponent = point - 1;
    const mantissa = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const e = String(Math.abs(exponent)).padStart(2, "0");
    return `${sign}${mantissa}e${exponent < 0 ? "-" : "+"}${e}`;
  }
  if (point <= 0) return `${sign}0.${"0".repeat(-point)}${digits}`;
  if (point < digits.length) return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
  return `${sign}${digits}${"0".repeat(point - digits.length)}.0`;
}

const SHORT = { '"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t" };

/** A string as json.dumps(ensure_ascii=True) writes it: every code unit outside ' '..'~' as
 * \uXXXX (astral characters as their surrogate pair, as Python does). */
export function pyString(s) {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s[i], code = s.charCodeAt(i);
    if (c in SHORT) out += SHORT[c];
    else if (code < 0x20 || code > 0x7e) out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += c;
  }
  return out + '"';
}

/** Python sorts keys by code point; JS's default sort compares UTF-16 code units. */
export function byCodePoint(a, b) {
  const x = [...a], y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

/** json.dumps(value, sort_keys=True, ensure_ascii=True) of a parsePythonJson value. */
export function canonicalJson(value) {
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "bigint") return value.toString();
  if (value instanceof PyFloat) return pyFloatRepr(Number(value));
  if (typeof value === "number") return Number.isInteger(value) ? String(value === 0 ? 0 : value) : pyFloatRepr(value);
  if (typeof value === "string") return pyString(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(", ")}]`;
  const keys = Object.keys(value).sort(byCodePoint);
  return `{${keys.map((k) => `${pyString(k)}: ${canonicalJson(value[k])}`).join(", ")}}`;
}
