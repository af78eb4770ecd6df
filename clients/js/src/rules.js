// The hand rule table (docs/baseline.md, serving/routing/_rule_table.py), exactly: the baseline, the
// degraded mode, and the `rule_table` unfamiliar policy.
import { DEFAULT_MAX_CHARS, zoneFor } from "./contract.js";
import { makeDecision } from "./decision.js";
import { codePointLength, encodable, firstCodePoints, formatFixed, roundHalfEven } from "./pytext.js";
import { checkBatch, checkPrecision, checkPrompt } from "./validation.js";

export const RULE_DOMAINS = Object.freeze(["finance", "medical", "legal"]);
export const LONG_PROMPT_TOKENS = 1024;
export const RULE_LO = 0.3;
export const RULE_HI = 0.7;

// Python's re on str patterns: \b between Unicode word characters (letters, numbers, "_") and
// others, where JS's \b is ASCII only; IGNORECASE also lets i match İ and ı (replaced by "i"
// before matching, one code unit for one), which JS's case folding does not.
const B = "(?:(?<![\\p{L}\\p{N}_])(?=[\\p{L}\\p{N}_])|(?<=[\\p{L}\\p{N}_])(?![\\p{L}\\p{N}_]))";
const DOMAIN_WORDS = {
  finance: "financ|invest|stock|bond|loan|interest rate|tax|accounting|revenue|budget|" +
    "portfolio|dividend|inflation|gdp|bank|mortgage|profit|asset|liabilit|equity",
  medical: "patient|diagnos|symptom|disease|clinical|medic|drug|dose|therap|surgery|" +
    "physician|hospital|syndrome|infection|cancer|blood|nerve|anatom|vaccine|virus",
  legal: "\\blaw\\b|legal|court|statute|contract|plaintiff|defendant|attorney|lawsuit|" +
    "jurisdiction|constitution|liabilit|tort|felony|verdict|judge|regulation|legislat",
};
const DOMAIN_RE = Object.fromEntries(Object.entries(DOMAIN_WORDS)
  .map(([domain, words]) => [domain, new RegExp(words.replaceAll("\\b", B), "giu")]));

/** finance / medical / legal by keyword count in the text's head; null if no keyword. */
export function inferRuleDomain(text, headChars = DEFAULT_MAX_CHARS) {
  const head = firstCodePoints(text, headChars).replace(/[\u0130\u0131]/g, "i");
  let best = null, most = 0;
  for (const [domain, pattern] of Object.entries(DOMAIN_RE)) {
    const count = (head.match(pattern) || []).length;
    if (count > most) { best = domain; most = count; }
  }
  return best;
}

/** Complexity score of the rule table, capped at 1.0 (summed in tenths, as in Python). */
export function ruleScore(seqLen, domain, precision) {
  const tenths = (seqLen > LONG_PROMPT_TOKENS ? 4 : 0) + (RULE_DOMAINS.includes(domain) ? 3 : 0) + (precision === "exact" ? 3 : 0);
  return Math.min(tenths, 10) / 10;
}

/** The rule table behind the Router interface. Token count from the bundle's tokenizer when
 * there is one, else ~4 characters a token. */
export class RuleRouter {
  static modelVersion = "rule-table";

  constructor(tokenizer = null, { maxChars = DEFAULT_MAX_CHARS } = {}) {
    this.tokenizer = tokenizer;
    this.maxChars = maxChars;
  }

  countTokens(prompt) {
    const head = firstCodePoints(prompt, this.maxChars);
    const length = codePointLength(prompt);
    if (this.tokenizer === null || head === "") return Math.ceil(length / 4);
    const n = this.tokenizer.ids(encodable(head), false).length;
    return roundHalfEven((n * length) / codePointLength(head));
  }

  /** The rule table's Decision; `note` is appended to the reason in parentheses. */
  decide(prompt, precision, { degraded = false, note = "" } = {}) {
    const nTokens = this.countTokens(prompt);
    const domain = inferRuleDomain(prompt);
    const score = ruleScore(nTokens, domain, precision);
    const parts = [`rule table score ${formatFixed(score, 1)}`];
    if (nTokens > LONG_PROMPT_TOKENS) parts.push(`~${nTokens} tokens > ${LONG_PROMPT_TOKENS}`);
    if (domain) parts.push(`${domain} domain`);
    if (precision === "exact") parts.push("exact precision");
    return makeDecision(zoneFor(score, RULE_LO, RULE_HI), {
      score, reason: parts.join(", ") + (note ? ` (${note})` : ""), degraded, model_version: RuleRouter.modelVersion,
      precision, n_tokens: nTokens, truncated: codePointLength(prompt) > this.maxChars,
    });
  }

  /** @param {string} prompt @param {{precision?: string | null}} [options] */
  route(prompt, { precision = null } = {}) {
    return this.decide(checkPrompt(prompt), checkPrecision(precision));
  }

  routeBatch(prompts, precisions = null) {
    const [checked, tags] = checkBatch(prompts, precisions);
    return checked.map((p, i) => this.decide(p, tags[i]));
  }
}
