// Scalar features of an edge answer for the acceptance check (serving/features/_response_features.py),
// value for value: Python's regex classes spelled out (\d any Unicode decimal digit, \w and \b
// Unicode word characters, \s str.isspace()), its splitlines(), float() and the plain arithmetic
// it evaluates (python-arithmetic.js). The parity vectors hold Python's rows for the logs' edge
// answers and generated hard ones.
import { plainArithmetic, pyFloat } from "./python-arithmetic.js";
import { PY_SPACE_CLASS, codePointLength, countOf, firstCodePoints, lastCodePoints, pyRstrip, roundHalfEven } from "./pytext.js";

export const RESPONSE_FEATURES = Object.freeze([
  "log_chars", "log_lines", "log_length_ratio", "n_steps", "n_wrong_steps", "wrong_step_share", "has_final_marker",
  "last_line_has_answer", "final_number_derived", "final_number_fractional", "log_distinct_numbers", "hedges",
  "refusals", "self_corrections", "repeated_trigram_share", "repeated_line_share", "ends_open", "open_code_fence",
  "prompt_numbers_used", "unexplained_numbers", "logprob_mean", "logprob_min",
]);
export const DEFAULT_MAX_RESPONSE_CHARS = 2000;
const MAX_STEPS = 32;

const S = `[${PY_SPACE_CLASS}]`;
const W = "[\\p{L}\\p{N}_]";
const B = `(?:(?<!${W})(?=${W})|(?<=${W})(?!${W}))`;
const NUMBER = "\\$?\\p{Nd}[\\p{Nd},]*(?:\\.\\p{Nd}+)?%?";
const OPERAND = `\\(*${NUMBER}\\)*`;
const STEP = new RegExp(`(?=[\\p{Nd}($])(?<![\\p{Nd}.,*/+\\-x×÷(])((?:${OPERAND}${S}*[-+*/x×÷]${S}*)+${OPERAND})${S}*=${S}*(-?${NUMBER})`, "gu");
const BINARY = new RegExp(`^${S}*(\\p{Nd}[\\p{Nd},]*(?:\\.\\p{Nd}+)?)${S}*([-+*/x×÷])${S}*(\\p{Nd}[\\p{Nd},]*(?:\\.\\p{Nd}+)?)${S}*$`, "u");
const PERCENT = /(\p{Nd}[\p{Nd},]*(?:\.\p{Nd}+)?)%/gu;
const CALCULATOR = /<<([^<>=]{1,80})=([^<>]{1,40})>>/gu;
const NUMBERS = /\p{Nd}[\p{Nd},]*(?:\.\p{Nd}+)?/gu;
const FINAL_MARKERS = ["####", "\\boxed{", "answer is", "answer:", "final answer"];
const LAST_LINE_ANSWER = new RegExp(`\\p{Nd}|\\(?${B}[A-J]\\)|${B}[A-J]\\.?$`, "u");
const PHRASES = new RegExp(`${B}(?:(?<hedge>(?:not sure|might be|may be|perhaps|possibly|probably|approximately|i think|i believe|` +
  `it seems|unclear|assum(?:e|ing)|cannot be determined|not enough information|hard to say|i guess)${B})` +
  `|(?<refusal>(?:i'?m sorry|i apologi[sz]e|as an ai|i cannot|i can'?t|i am unable|i'?m unable|` +
  `unable to (?:provide|answer|help))${B})` +
  `|(?<correction>wait|actually|oops|mistake|correction|let me re|recalculat|re-?evaluat|i made an error|` +
  `that'?s not right))`, "gu");
const WORDS = new RegExp(`${W}+`, "gu");
const CLOSERS = [...".!?)]}\"'`*|>$", "。", "！", "？", "」", "）"];
const LINE_BREAK = /\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]/;
const SPACE_RUN = new RegExp(`^${S}+|${S}+$`, "gu");

/** str.splitlines() in Python: every Unicode line boundary, no empty piece after a final one. */
export function splitlines(text) {
  if (text === "") return [];
  const parts = text.split(LINE_BREAK);
  if (parts[parts.length - 1] === "") parts.pop();
  return parts;
}

const pyStrip = (text) => text.replace(SPACE_RUN, "");

/** _number: a stated number ("$1,200", "15%") as a finite float, or null. */
function statedNumber(text) {
  let plain = text.replaceAll("$", "").replaceAll(",", "");
  while (plain.endsWith("%")) plain = plain.slice(0, -1);
  const value = pyFloat(plain);
  return value !== null && Number.isFinite(value) ? value : null;
}

/** _arithmetic: one binary operation computed directly, anything else as plain Python arithmetic. */
function arithmetic(expr) {
  const simple = BINARY.exec(expr);
  if (simple) {
    const left = pyFloat(simple[1].replaceAll(",", "")), op = simple[2], right = pyFloat(simple[3].replaceAll(",", ""));
    if (op === "/" || op === "÷") return right ? left / right : null;
    return op === "+" ? left + right : op === "-" ? left - right : left * right;
  }
  return plainArithmetic(expr.replaceAll(",", "").replaceAll("x", "*").replaceAll("×", "*").replaceAll("÷", "/"));
}

const wrong = (stated, computed) => Math.abs(stated - computed) > Math.max(0.01, 0.01 * Math.abs(computed));

/** _steps: [steps stated, how many are wrong, their stated results], the last MAX_STEPS of each kind. */
function steps(text) {
  const stated = splitlines(text).filter((line) => line.includes("=")).join("\n");
  const parsed = [...stated.matchAll(CALCULATOR)].slice(-MAX_STEPS)
    .map((m) => [arithmetic(m[1]), statedNumber(pyStrip(m[2]))]);
  for (const m of [...stated.replace(CALCULATOR, " ").matchAll(STEP)].slice(-MAX_STEPS)) {
    const expr = m[1].replaceAll("$", "");
    parsed.push([arithmetic(expr.includes("%") ? expr.replace(PERCENT, "($1/100)") : expr), statedNumber(m[2])]);
  }
  const checked = parsed.filter(([computed, value]) => computed !== null && value !== null);
  return [checked.length, checked.filter(([computed, value]) => wrong(value, computed)).length, checked.map(([, value]) => value)];
}

function repetition(words, lines) {
  const trigrams = words.slice(2).map((w, i) => `${words[i]} ${words[i + 1]} ${w}`);
  const repeatedTrigrams = trigrams.length ? 1 - new Set(trigrams).size / trigrams.length : 0;
  const kept = lines.map(pyStrip).filter((line) => codePointLength(line) > 8);
  const repeatedLines = kept.length ? 1 - new Set(kept).size / kept.length : 0;
  return [repeatedTrigrams, repeatedLines];
}

const numberSet = (text) => new Set((text.match(NUMBERS) || []).map((n) => n.replaceAll(",", "")));

/** RESPONSE_FEATURES of one answer to `prompt`, as float32 (Python's response_features). */
export function responseFeatures(prompt, response, { logprobMean = null, logprobMin = null, maxChars = DEFAULT_MAX_RESPONSE_CHARS } = {}) {
  const nChars = codePointLength(response);
  const text = nChars > maxChars ? lastCodePoints(response, maxChars) : response;
  const stripped = pyRstrip(text);
  const lines = splitlines(stripped);
  if (lines.length === 0) lines.push("");
  const lastLine = pyStrip(lines[lines.length - 1]);
  const lower = text.toLowerCase();
  const words = lower.match(WORDS) || [];
  const phrases = [...lower.matchAll(PHRASES)].map((m) => Object.keys(m.groups).find((name) => m.groups[name] !== undefined));
  const numbers = numberSet(text);
  const promptNumbers = numberSet(firstCodePoints(prompt, maxChars));
  const [nSteps, nWrong, results] = steps(text);
  const lastNumbers = lastLine.match(NUMBERS);
  const final = lastNumbers ? statedNumber(lastNumbers[lastNumbers.length - 1]) : null;
  const [repeatedTrigrams, repeatedLines] = repetition(words, lines);
  const count = (name) => phrases.filter((p) => p === name).length;
  const shared = [...promptNumbers].filter((n) => numbers.has(n)).length;
  const unexplained = [...numbers].filter((n) => !promptNumbers.has(n)).length;
  return Float32Array.from([
    Math.log1p(nChars),
    Math.log1p(lines.length),
    Math.log((nChars + 1) / (codePointLength(prompt) + 1)),
    nSteps,
    nWrong,
    nSteps ? nWrong / nSteps : 0,
    FINAL_MARKERS.some((marker) => lower.includes(marker)) ? 1 : 0,
    LAST_LINE_ANSWER.test(lastLine) ? 1 : 0,
    final !== null && results.some((r) => !wrong(final, r)) ? 1 : 0,
    final !== null && Math.abs(final - roundHalfEven(final)) > 1e-9 ? 1 : 0,
    Math.log1p(numbers.size),
    count("hedge"),
    count("refusal"),
    count("correction"),
    repeatedTrigrams,
    repeatedLines,
    stripped !== "" && !CLOSERS.some((closer) => stripped.endsWith(closer)) ? 1 : 0,
    countOf(text, "```") % 2 === 1 ? 1 : 0,
    promptNumbers.size ? shared / promptNumbers.size : 0,
    numbers.size ? unexplained / numbers.size : 0,
    logprobMean === null || logprobMean === undefined ? NaN : logprobMean,
    logprobMin === null || logprobMin === undefined ? NaN : logprobMin,
  ]);
}
