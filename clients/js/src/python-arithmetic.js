// The two Python number readers serving/features/_response_features.py relies on, so that an answer's
// arithmetic checks out (or not) as it does in Python:
// - pyFloat(text): float(text), which takes any Unicode decimal digit, underscores between
//   digits, surrounding whitespace, inf and nan;
// - plainArithmetic(expr): ast.parse(expr, mode="eval") evaluated over numeric literals, unary
//   + and -, and binary + - * / only (anything else, or a syntax error, is null), with Python's
//   literal syntax (0x1f, 1_000, 1e5, 09.5 but not 09) and its line rules (an indented first
//   line fails; newlines only inside parentheses; comments; backslash continuations).
import { PY_SPACE } from "./pytext.js";

const ND = /\p{Nd}/u;
const zeroOf = new Map();

/** The ASCII digit of a Unicode decimal digit: Nd characters come in runs of ten from 0. */
function asciiDigit(char) {
  let zero = zeroOf.get(char);
  if (zero === undefined) {
    const code = char.codePointAt(0);
    let start = code;
    while (start > 0 && ND.test(String.fromCodePoint(start - 1))) start--;
    zero = code - ((code - start) % 10);
    zeroOf.set(char, zero);
  }
  return String(char.codePointAt(0) - zero);
}

const FLOAT = /^[+-]?(?:(?:\d(?:_?\d)*)?\.\d(?:_?\d)*|\d(?:_?\d)*\.?)(?:[eE][+-]?\d(?:_?\d)*)?$/;
const SPECIAL = /^([+-]?)(inf|infinity|nan)$/i;

/** float(text) in Python, or null where it raises ValueError. */
export function pyFloat(text) {
  let ascii = "";
  for (const char of text) {
    if (PY_SPACE.includes(char)) ascii += " ";
    else if (char.charCodeAt(0) < 0x80) ascii += char;
    else if (ND.test(char)) ascii += asciiDigit(char);
    else return null;
  }
  ascii = ascii.trim();
  const special = SPECIAL.exec(ascii);
  if (special) return special[2].toLowerCase() === "nan" ? NaN : (special[1] === "-" ? -Infinity : Infinity);
  return FLOAT.test(ascii) ? Number(ascii.replaceAll("_", "")) : null;
}

// Python's numeric literals (3.11), longest first; an imaginary one (1j) is no plain number.
const LITERALS = [
  /^0[xX](?:_?[0-9a-fA-F])+/, /^0[oO](?:_?[0-7])+/, /^0[bB](?:_?[01])+/,
  /^(?:(?:\d(?:_?\d)*)?\.\d(?:_?\d)*|\d(?:_?\d)*\.)(?:[eE][+-]?\d(?:_?\d)*)?|^\d(?:_?\d)*[eE][+-]?\d(?:_?\d)*/,
  /^(?:[1-9](?:_?\d)*|0+(?:_?0)*)/,
];
const IDENTIFIER_CHAR = /[\p{L}\p{N}_.]/u;

/** The value of a literal as Python's float(int or float constant) gives it. */
function literalValue(text) {
  const plain = text.replaceAll("_", "");
  if (/^0[xXoObB]/.test(plain)) return Number(BigInt(plain.toLowerCase()));
  return Number(plain);
}

/** Python's tokens of an expression, or null where its tokenizer fails (or meets anything that
 * is not a number, + - * / or parentheses). */
function tokens(source) {
  const out = [];
  let i = 0, depth = 0, lineStart = true, ended = false;
  while (i < source.length) {
    const c = source[i];
    if (lineStart && depth === 0) {  // indentation: spaces or tabs after the last form feed
      let indented = false;
      while (i < source.length && " \t\f".includes(source[i])) { indented = source[i] !== "\f"; i++; }
      lineStart = false;
      if (indented && i < source.length && !"\r\n#".includes(source[i])) return null;  // IndentationError
      continue;
    }
    if (c === "\r" || c === "\n") {
      i += c === "\r" && source[i + 1] === "\n" ? 2 : 1;
      if (depth === 0) { if (out.length) ended = true; lineStart = true; }
      continue;
    }
    if (c === " " || c === "\t" || c === "\f") { i++; continue; }
    if (c === "#") { while (i < source.length && source[i] !== "\r" && source[i] !== "\n") i++; continue; }
    if (c === "\\") {  // a line continuation, or an error
      const next = source.slice(i + 1, i + 3);
      if (next.startsWith("\r\n")) i += 3;
      else if (next[0] === "\n" || next[0] === "\r") i += 2;
      else return null;
      continue;
    }
    if (ended) return null;  // a second logical line
    if ("+-*/()".includes(c)) {
      if ((c === "*" || c === "/") && source[i + 1] === c) return null;  // ** and //: no plain arithmetic
      if (c === "(") depth++;
      if (c === ")" && --depth < 0) return null;
      out.push(c);
      i++;
      continue;
    }
    const rest = source.slice(i);
    const literal = LITERALS.map((pattern) => pattern.exec(rest)?.[0]).find((m) => m !== undefined);
    if (!literal) return null;
    i += literal.length;
    if (i < source.length && IDENTIFIER_CHAR.test(source[i])) return null;  // 1j, 09, 1_, 0b12, 1if...
    out.push(literalValue(literal));
  }
  return depth === 0 ? out : null;
}

class NotPlain extends Error {}

/** The value of plain Python arithmetic (module doc), or null. */
export function plainArithmetic(source) {
  const list = tokens(source);
  if (list === null || list.length === 0) return null;
  let k = 0;
  const peek = () => list[k];
  const expression = () => {
    let value = term();
    while (peek() === "+" || peek() === "-") value = list[k++] === "+" ? value + term() : value - term();
    return value;
  };
  const term = () => {
    let value = factor();
    while (peek() === "*" || peek() === "/") {
      const op = list[k++];
      const right = factor();
      if (op === "/" && right === 0) throw new NotPlain();  // ZeroDivisionError
      value = op === "*" ? value * right : value / right;
    }
    return value;
  };
  const factor = () => {
    if (peek() === "+") { k++; return factor(); }
    if (peek() === "-") { k++; return -factor(); }
    return atom();
  };
  const atom = () => {
    const token = list[k++];
    if (typeof token === "number") return token;
    if (token === "(" && peek() !== ")") {
      const value = expression();
      if (list[k++] !== ")") throw new NotPlain();
      return value;
    }
    throw new NotPlain();
  };
  try {
    const value = expression();
    if (k !== list.length) return null;
    return Number.isFinite(value) ? value : null;
  } catch (error) {
    if (error instanceof NotPlain) return null;
    throw error;
  }
}
