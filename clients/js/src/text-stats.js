// Scalar features of a prompt (serving/features/_text_stats.py), value for value: sizes from the
// whole prompt, everything else from the head (the first max_chars code points, lone surrogates
// made "?"). The parity vectors hold the Python values of every case; tests compare them exactly.
import { PY_SPACE_CLASS, codePointLength, countOf, hasNonSpace, lastCodePoints, pyRstrip } from "./pytext.js";

export const STAT_NAMES = Object.freeze([
  "n_chars", "n_lines", "n_spaces", "n_digits", "digit_share", "n_math_ops", "n_latex",
  "n_code_markers", "n_options", "n_questions", "n_sentences", "n_currency",
  "upper_share", "mean_word_len", "ends_with_answer_cue",
]);

const MATH = new Set("+-*/=^<>%×÷±≤≥");
const CURRENCY = new Set("$€£¥");
const CODE_MARKERS = ["```", "def ", "return ", "import ", "class ", ";\n", "{\n", "=>", "#include", "SELECT "];
const LATEX_MARKERS = ["\\frac", "\\sqrt", "\\sum", "\\int", "\\cdot", "\\times", "\\pi", "^{", "_{"];
const SENTENCE_ENDS = [". ", "? ", "! ", ".\n", "?\n", "!\n"];
const ANSWER_CUES = ["answer:", "answer :", "a:"];
// Python's re.MULTILINE "^" follows "\n" only (JS's m flag also takes \r, \u2028, \u2029), and
// its \s is str.isspace(): both spelled out.
const OPTION = new RegExp(`(?<![^\\n])[${PY_SPACE_CLASS}]*\\(?[A-Ja-j][.)][${PY_SPACE_CLASS}]`, "g");

const sumCounts = (text, needles) => needles.reduce((n, needle) => n + countOf(text, needle), 0);

/** Per-character counts of the head in one pass (every counted character is in the BMP). */
function characterCounts(head) {
  const counts = { digits: 0, upper: 0, math: 0, currency: 0, spaces: 0, newlines: 0, questions: 0 };
  for (let i = 0; i < head.length; i++) {
    const c = head[i];
    const code = head.charCodeAt(i);
    if (code >= 48 && code <= 57) counts.digits++;
    else if (code >= 65 && code <= 90) counts.upper++;
    else if (c === " ") counts.spaces++;
    else if (c === "\n") counts.newlines++;
    else if (c === "?") counts.questions++;
    if (MATH.has(c)) counts.math++;
    if (CURRENCY.has(c)) counts.currency++;
  }
  return counts;
}

function sentenceCount(head) {
  if (!/[.?!]/.test(head)) return 0;
  const stripped = pyRstrip(head);
  const last = stripped[stripped.length - 1];
  return sumCounts(head, SENTENCE_ENDS) + (last === "." || last === "?" || last === "!" ? 1 : 0);
}

/** The STAT_NAMES values of one prompt; `head` is the prefix the patterns scan. */
export function textStatistics(text, head) {
  const headLength = codePointLength(head);
  const nHead = Math.max(headLength, 1);
  const c = characterCounts(head);
  const words = hasNonSpace(head) ? c.spaces + c.newlines + 1 : 0;
  const tail = pyRstrip(lastCodePoints(text, 256)).toLowerCase();
  return [
    codePointLength(text),
    countOf(text, "\n") + 1,
    countOf(text, " "),
    c.digits,
    c.digits / nHead,
    c.math,
    sumCounts(head, LATEX_MARKERS),
    sumCounts(head, CODE_MARKERS),
    head.includes(".") || head.includes(")") ? (head.match(OPTION) || []).length : 0,
    c.questions,
    sentenceCount(head),
    c.currency,
    c.upper / nHead,
    words ? (headLength - c.spaces) / words : 0,
    ANSWER_CUES.some((cue) => tail.endsWith(cue)) ? 1 : 0,
  ];
}
