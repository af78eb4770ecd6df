// Python's string semantics where the router's features depend on them. A Python str is a
// sequence of code points (a lone surrogate is one); a JS string is UTF-16 code units. Lengths,
// cuts and counts here are in code points, as the Python SDK computes them, and whitespace is
// Python's str.isspace(), not JS's trim().

/** Python's str.isspace() characters (and so str.strip()'s): JS's trim() lacks \x1c-\x1f and
 * \x85 and has \ufeff, which Python does not count. */
export const PY_SPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005" +
  "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";
const SPACE_SET = new Set(PY_SPACE);
/** The same set as a regex character class body (re's \s on str patterns is str.isspace()). */
export const PY_SPACE_CLASS = "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

/** Whether a code unit is a high surrogate followed by a low one at index i. */
function pairAt(text, i) {
  const c = text.charCodeAt(i);
  if (c < 0xd800 || c > 0xdbff || i + 1 >= text.length) return false;
  const d = text.charCodeAt(i + 1);
  return d >= 0xdc00 && d <= 0xdfff;
}

/** len(text) in Python: code points, a lone surrogate counting as one. */
export function codePointLength(text) {
  let pairs = 0;
  for (let i = 0; i < text.length - 1; i++) {
    if (pairAt(text, i)) { pairs++; i++; }
  }
  return text.length - pairs;
}

/** text[:n] in Python: the first n code points (never splits a surrogate pair). Only the head
 * is walked, so a 1 MB prompt costs what its first n characters cost. */
export function firstCodePoints(text, n) {
  if (text.length <= n) return text;
  let i = 0;
  for (let k = 0; k < n && i < text.length; k++) i += pairAt(text, i) ? 2 : 1;
  return text.slice(0, i);
}

/** text[-n:] in Python: the last n code points. */
export function lastCodePoints(text, n) {
  let i = text.length;
  for (let k = 0; k < n && i > 0; k++) i -= i >= 2 && pairAt(text, i - 2) ? 2 : 1;
  return text.slice(i);
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** serving.features._tokenizer.encodable: the text, with each lone surrogate replaced by "?"
 * (Python's text.encode("utf-8", "replace")); JS's toWellFormed() would put U+FFFD instead. */
export function encodable(text) {
  return text.replace(LONE_SURROGATE, "?");
}

/** str.count(needle) in Python: non-overlapping occurrences, scanning left to right. */
export function countOf(text, needle) {
  let n = 0;
  for (let i = text.indexOf(needle); i !== -1; i = text.indexOf(needle, i + needle.length)) n++;
  return n;
}

/** str.rstrip() in Python. */
export function pyRstrip(text) {
  let end = text.length;
  while (end > 0 && SPACE_SET.has(text[end - 1])) end--;
  return text.slice(0, end);
}

/** Whether str.strip() in Python leaves anything. */
export function hasNonSpace(text) {
  for (const c of text) if (!SPACE_SET.has(c)) return true;
  return false;
}

/** Python's round(x) for a float: to the nearest integer, halves to the even one. */
export function roundHalfEven(x) {
  const floor = Math.floor(x);
  const diff = x - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}

/** The exact value of a finite double as mantissa * 2^exponent (BigInt mantissa). */
function exactParts(x) {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0), lo = view.getUint32(4);
  const biased = (hi >>> 20) & 0x7ff;
  let mantissa = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  if (biased !== 0) mantissa |= 1n << 52n;
  return { mantissa, exponent: (biased === 0 ? 1 : biased) - 1075 };
}

/** Whether |x| lies exactly halfway between two multiples of 10^-digits: there Python's
 * format() rounds to even and JS's toFixed() rounds up. */
function isExactTie(x, digits) {
  const { mantissa, exponent } = exactParts(Math.abs(x));
  // |x| * 10^digits * 2 must be an odd integer.
  let num = mantissa * 10n ** BigInt(digits) * 2n, den = 1n;
  if (exponent >= 0) num <<= BigInt(exponent); else den <<= BigInt(-exponent);
  return num % den === 0n && (num / den) % 2n === 1n;
}

/** f"{x:.{digits}f}" in Python: toFixed, but halves to even, and -0.0 keeps its sign. */
export function formatFixed(x, digits) {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  const negative = x < 0 || Object.is(x, -0);
  const a = Math.abs(x);
  let text = a.toFixed(digits);
  if (isExactTie(a, digits)) {
    const scale = 10 ** digits;
    const down = Math.floor(a * scale);  // exact: a tie has a short decimal form
    const even = down % 2 === 0 ? down : down + 1;
    text = (even / scale).toFixed(digits);
  }
  return (negative ? "-" : "") + text;
}

/** f"{x:.{digits}g}" in Python: `digits` significant digits, fixed notation for exponents from -4
 * to digits - 1 and scientific outside, trailing zeros dropped; halves to even in fixed notation
 * (scientific notation rounds as toExponential does: they differ only on exact ties). */
export function formatG(x, digits) {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  const p = Math.max(digits, 1);
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const [mantissa, exp] = Math.abs(x).toExponential(p - 1).split("e");
  const exponent = Number(exp);
  const strip = (text) => (text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text);
  if (exponent >= -4 && exponent < p) return strip(formatFixed(x, p - 1 - exponent));
  const sign = x < 0 ? "-" : "";
  return `${sign}${strip(mantissa)}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
}
