// Content detectors (serving/policy/_detectors.py): personal data, national ids and credentials in a
// prompt, found locally, with the Python SDK's patterns and checks, on the text folded as Python folds
// it. `DETECTORS` maps a name to a Detector; `detect(text, names)` returns every finding (detector name
// and span in code points, never the matched text); `anyDetected(text, names)` stops at the first.
//
// How this port reads text as Python does:
// - folding (NFKC per character, invisible characters dropped, dashes, spaces and digits of any script
//   made ASCII) and the Unicode classes the patterns use (Python re's \w, the detectors' WORD under
//   (?i), a letter of a script written with spaces) come from tables generated from the Python SDK
//   (unicode-data.js, scripts/policy_unicode.py), not from this runtime's Unicode version;
// - the case-insensitive name patterns spell out each letter's Python (?i) equivalents (CASELESS)
//   instead of using the `i` flag, whose folding is not Python's;
// - positions are UTF-16 indices inside, and every "n characters" Python counts (the names looked for
//   within 40 characters before a value, ...) is counted in code points; spans are given in code
//   points, Python's string indices;
// - Python's search(text, pos, endpos) is exec on text cut at endpos from lastIndex pos, so its
//   look-behinds see before pos, as Python's do.
// Every pattern's repetitions are bounded and each starts with an ASCII literal or narrow class, as in
// Python, so a scan is linear in the text's length; the whole text is scanned (no cap), in one call
// (Python's windowed scans give the same findings: it scans in windows only to release its GIL).
import { bsnValid, dniValid, ibanValid, IBAN_LENGTHS, luhnValid } from "./checksums.js";
import { CASELESS, FOLD, SPACED, WORD_I } from "./unicode-data.js";

// ---- the generated tables -------------------------------------------------------------------------

/** code point -> folded text, for every code point Python's fold_char changes. */
const FOLDS = (() => {
  const table = new Map();
  for (const item of FOLD.split(",")) {
    const run = /^([0-9a-z]+)\+([0-9a-z]+)>([0-9a-z]+)$/.exec(item);
    if (run) {
      const [start, count, target] = [parseInt(run[1], 36), parseInt(run[2], 36), parseInt(run[3], 36)];
      for (let k = 0; k < count; k++) table.set(start + k, String.fromCodePoint(target + k));
      continue;
    }
    const [cp, out] = item.split("=");
    table.set(parseInt(cp, 36), out === "" ? "" : out.split(" ").map((c) => String.fromCodePoint(parseInt(c, 36))).join(""));
  }
  return table;
})();

function ranges(text) {
  return text.split(",").map((r) => r.split("-").map((n) => parseInt(n, 36)));
}

const hex = (cp) => `\\u{${cp.toString(16)}}`;
/** A character class body of inclusive code point ranges ('u' flag). */
const classBody = (list) => list.map(([a, b]) => (a === b ? hex(a) : `${hex(a)}-${hex(b)}`)).join("");

const WORD_CLASS = `[${classBody(ranges(WORD_I))}]`;  // detectors.WORD as (?i) patterns read it
const SPACED_RANGES = ranges(SPACED);

/** Whether a code point is in sorted inclusive ranges. */
function inRanges(list, cp) {
  let lo = 0, hi = list.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (cp < list[mid][0]) hi = mid - 1;
    else if (cp > list[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}

/** A case-insensitive pattern as Python's (?i) reads it: each cased character spelled out as the
 * class of what Python matches it with (CASELESS), inside classes too. Escapes are kept as written. */
function caseless(source) {
  let out = "", inClass = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === "\\") { out += source.slice(i, i + 2); i++; continue; }
    if (inClass) {
      if (c === "]") inClass = false;
      out += c in CASELESS ? CASELESS[c] : c;
      continue;
    }
    if (c === "[") { inClass = true; out += c; continue; }
    out += c in CASELESS && CASELESS[c] !== c ? `[${CASELESS[c]}]` : c;
  }
  return out;
}

/** A name pattern: (?i) spelled out, WORD the generated class, Unicode mode. */
const named = (source, flags = "gu") => new RegExp(caseless(source.replaceAll("WORD", "@@")).replaceAll("@@", WORD_CLASS), flags);

// ---- text positions in code points ---------------------------------------------------------------

const isHigh = (c) => c >= 0xd800 && c <= 0xdbff;
const isLow = (c) => c >= 0xdc00 && c <= 0xdfff;

/** The UTF-16 index n code points before `index` (not below 0). */
function back(text, index, n) {
  let i = index;
  for (let k = 0; k < n && i > 0; k++) i -= i >= 2 && isLow(text.charCodeAt(i - 1)) && isHigh(text.charCodeAt(i - 2)) ? 2 : 1;
  return i;
}

/** The UTF-16 index n code points after `index` (not past the end). */
function ahead(text, index, n) {
  let i = index;
  for (let k = 0; k < n && i < text.length; k++) i += isHigh(text.charCodeAt(i)) && isLow(text.charCodeAt(i + 1)) ? 2 : 1;
  return i;
}

/** re.search(text, pos, endpos) in Python: `pattern` must have the g flag. */
function search(pattern, text, pos, endpos = text.length) {
  pattern.lastIndex = pos;
  return pattern.exec(endpos >= text.length ? text : text.slice(0, endpos));
}

/** re.match(text, pos) in Python: `pattern` must have the y flag. */
function matchAt(pattern, text, pos) {
  pattern.lastIndex = pos;
  return pattern.exec(text);
}

/** The code point ending at `index` (Python's text[index - 1]) and the one starting there. */
function codePointBefore(text, index) {
  if (index <= 0) return -1;
  const c = text.charCodeAt(index - 1);
  if (isLow(c) && index >= 2 && isHigh(text.charCodeAt(index - 2))) return text.codePointAt(index - 2);
  return c;
}

function codePointAt(text, index) {
  return index < text.length ? text.codePointAt(index) : -1;
}

// ---- normalisation ----------------------------------------------------------------------------------

const ASCII = /^[\x00-\x7f]*$/;
const NON_ASCII = /[^\x00-\x7f]/gu;

/** One character as the detectors read it (Python's fold_char). */
export function foldChar(ch) {
  const folded = FOLDS.get(ch.codePointAt(0));
  return folded === undefined ? ch : folded;
}

/** A text as the detectors read it (`text`), and the way back to the original's indices. */
export class Folded {
  constructor(text, original) {
    this.text = text;
    this.original = original;
    this.ends = null;  // per original code point: the folded UTF-16 length after it (made when needed)
  }

  /** Spans of the folded text (UTF-16) as code point spans of the original: from the character the
   * start came from to the one end - 1 came from, so invisible characters inside a value belong to it. */
  spans(spans) {
    if (ASCII.test(this.original) || !spans.length) return spans;
    if (this.ends === null) {
      const ends = [];
      let total = 0;
      for (const ch of this.original) {
        total += foldChar(ch).length;
        ends.push(total);
      }
      this.ends = Int32Array.from(ends);
    }
    const upper = (value) => {  // how many ends are <= value (numpy's searchsorted, side="right")
      let lo = 0, hi = this.ends.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (this.ends[mid] <= value) lo = mid + 1;
        else hi = mid;
      }
      return lo;
    };
    return spans.map(([start, end]) => [upper(start), upper(end - 1) + 1]);
  }
}

/** The text the detectors read (Python's fold): each character folded by foldChar. */
export function fold(text) {
  if (ASCII.test(text)) return new Folded(text, text);
  return new Folded(text.replace(NON_ASCII, foldChar), text);
}

// ---- rules ------------------------------------------------------------------------------------------

const whole = (text, match) => [match.index, match.index + match[0].length];

class Rule {
  constructor(pattern, accept = whole, needs = "") {
    this.pattern = pattern;
    this.accept = accept;
    this.needs = needs;
  }

  /** Each span accepted, in text order. */
  *spans(text) {
    if (!text.includes(this.needs)) return;
    let pos = 0;
    for (;;) {
      const match = search(this.pattern, text, pos);
      if (match === null) return;
      const span = this.accept(text, match);
      if (span === null) pos = match.index + 1;  // a rejected candidate may hide a good one starting inside it
      else {
        yield span;
        pos = Math.max(span[1], match.index + 1);
      }
    }
  }
}

export class Detector {
  constructor(name, description, rules) {
    this.name = name;
    this.description = description;
    this.rules = rules;
    Object.freeze(this);
  }

  /** Every span any rule accepts, overlapping ones merged, in text order: code point spans of text. */
  spans(text) {
    const folded = fold(text);
    return folded.spans(this.foldedSpans(folded.text));
  }

  /** Whether any rule accepts anything in the folded text of `text` (a string, or a Folded: several
   * detectors asking about one prompt fold it once). */
  foundIn(text) {
    return this.foldedFoundIn((text instanceof Folded ? text : fold(text)).text);
  }

  foldedSpans(folded) {
    const found = [];
    for (const rule of this.rules) for (const span of rule.spans(folded)) found.push(span);
    found.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const merged = [];
    for (const [start, end] of found) {
      if (merged.length && start < merged[merged.length - 1][1]) {
        const last = merged[merged.length - 1];
        last[1] = Math.max(end, last[1]);
      } else merged.push([start, end]);
    }
    return merged;
  }

  foldedFoundIn(folded) {
    return this.rules.some((rule) => !rule.spans(folded).next().done);
  }
}

// Scripts written without spaces between words (Thai, Lao, Myanmar, Khmer, kana, CJK): a value next
// to one of their characters stands apart. The generated SPACED table is Python's
// _SPACED_WORD_CHAR: a letter or digit of a script written with spaces, other than ASCII.

/** Whether [start, end) touches a letter or digit of a script written with spaces. */
function gluedToAWord(text, start, end) {
  return (start > 0 && inRanges(SPACED_RANGES, codePointBefore(text, start))) || inRanges(SPACED_RANGES, codePointAt(text, end));
}

/** accept, and the span it accepts must not touch a word. */
function standalone(accept) {
  return (text, match) => {
    const span = accept(text, match);
    return span === null || gluedToAWord(text, span[0], span[1]) ? null : span;
  };
}

const digitCount = (value) => (value.match(/[0-9]/g) || []).length;

// ---- email ------------------------------------------------------------------------------------------

const EMAIL = new RegExp("(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}" +
  "@(?<domain>(?:[A-Za-z0-9-]{1,63}\\.){1,8}[A-Za-z]{2,24})(?![A-Za-z0-9-]|\\.[A-Za-z0-9])", "gu");
const RESERVED_TLDS = new Set(["test", "example", "invalid", "localhost", "local"]);
const RESERVED_DOMAINS = ["example.com", "example.org", "example.net"];
const ASSET_SUFFIXES = new Set(["png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp", "css", "js"]);
const SCP_PATH = /:[A-Za-z0-9_~/.-]/y;

function acceptEmail(text, match) {
  const domain = match.groups.domain.toLowerCase();
  const tld = domain.slice(domain.lastIndexOf(".") + 1);
  if (RESERVED_TLDS.has(tld) || ASSET_SUFFIXES.has(tld)) return null;
  if (RESERVED_DOMAINS.some((d) => domain === d || domain.endsWith(`.${d}`))) return null;
  if (matchAt(SCP_PATH, text, match.index + match[0].length)) return null;
  return whole(text, match);
}

// ---- phone ------------------------------------------------------------------------------------------

const PHONE_INTERNATIONAL = new RegExp("\\+(?<![0-9A-Za-z+]\\+)(?:[1-9][0-9]{6,14}" +
  "|[1-9][0-9]{0,3}(?:[ .-]?\\(0?[0-9]{0,4}\\))?[ .-]?[0-9]{1,5}(?:[ .-][0-9]{1,8}){0,6})" +
  "(?![0-9]|[ .-][0-9])", "gu");
const PHONE_NANP = new RegExp("[(2-9](?<![0-9A-Za-z+(./-][(2-9])" +
  "(?:(?<=\\()[2-9][0-9]{2}\\) ?[2-9][0-9]{2}[ .-][0-9]{4}|(?<=[2-9])[0-9]{2}([ .-])[2-9][0-9]{2}\\1[0-9]{4})" +
  "(?![0-9]|[ .-][0-9])", "gu");
const PHONE_TRUNK = new RegExp("[(0](?<![0-9A-Za-z+./-][(0])(?<![0-9][ -][(0])" +
  "(?:(?<=0)[1-9][0-9]{0,4}([ /-])[0-9]{2,8}(?:\\1[0-9]{2,8}){0,3}" +
  "|(?<=\\()0[1-9][0-9]{0,4}\\) ?[0-9]{2,8}(?:[ -][0-9]{2,8}){0,3}" +
  "|(?<=0)[1-9](?:\\.[0-9]{2}){4})" +
  "(?![0-9]|[ ./-][0-9])", "gu");
const DATE_SHAPE = /^[0-3][0-9][ ./-][01][0-9][ ./-](?:19|20)[0-9]{2}/;

function acceptInternationalPhone(text, match) {
  const digits = digitCount(match[0].replaceAll("(0)", ""));
  return digits >= 8 && digits <= 15 ? whole(text, match) : null;
}

function acceptTrunkPhone(text, match) {
  if (DATE_SHAPE.test(match[0])) return null;
  const digits = digitCount(match[0]);
  return digits >= 10 && digits <= 12 ? whole(text, match) : null;
}

// ---- payment_card -----------------------------------------------------------------------------------

const CARD_SEPARATOR = "(?:[ \\t\\r\\n]{1,3}|[ ]?[-./_][ ]?)";
const NOT_AFTER_A_GROUP = "(?<![0-9][ \\t./_-][0-9])(?<![0-9][ \\t]{2}[0-9])(?<![0-9][ \\t]{3}[0-9])" +
  "(?<![0-9] [-./_][0-9])(?<![0-9][-./_] [0-9])(?<![0-9] [-./_] [0-9])" +
  "(?:(?<![0-9][\\r\\n][0-9])(?<![0-9]\\r\\n[0-9])|(?=[0-9]{3}(?:[ \\t]{1,3}[0-9]|[ ]?[-./_])))";
const CARD = new RegExp("[0-9](?<![0-9][0-9])" +
  `(?:[0-9]{12,18}(?![0-9])|${NOT_AFTER_A_GROUP}[0-9]{3}(?:[ \\t\\r\\n./_-]{0,3}[0-9]){9,15}(?![0-9]))`, "gu");
const SEPARATOR = new RegExp(`^${CARD_SEPARATOR}$`, "u");
const DIGIT_RUNS = /[0-9]+/g;
const GROUP_BEFORE = new RegExp(`[0-9](${CARD_SEPARATOR})$`, "gu");
const GROUP_AFTER = new RegExp(`(${CARD_SEPARATOR})[0-9]{4}`, "yu");
const WORD_BEFORE = /[A-Za-z0-9]{1,32}$/g;
const WORD_AFTER = /[A-Za-z0-9]{1,32}/y;
// Issuer identification number ranges: [first, last, digits compared, card lengths].
const range = (a, b) => Array.from({ length: b - a + 1 }, (_, k) => a + k);
const IIN_RANGES = [
  [4, 4, 1, [13, 16, 19]], [51, 55, 2, [16]], [2221, 2720, 4, [16]], [34, 34, 2, [15]], [37, 37, 2, [15]],
  [6011, 6011, 4, range(16, 19)], [644, 649, 3, range(16, 19)], [65, 65, 2, range(16, 19)], [3528, 3589, 4, range(16, 19)],
  [300, 305, 3, range(14, 19)], [36, 36, 2, range(14, 19)], [38, 39, 2, range(16, 19)], [62, 62, 2, range(16, 19)],
  [2200, 2204, 4, range(16, 19)], [50, 50, 2, range(13, 19)], [56, 58, 2, range(13, 19)], [63, 63, 2, range(13, 19)],
  [67, 67, 2, range(13, 19)],
];
const CARD_GROUPINGS = ["4,6,5", "4,6,4"];  // American Express, Diners; every other grouping is by fours

function knownIssuer(digits) {
  return IIN_RANGES.some(([first, last, width, lengths]) => {
    const head = Number(digits.slice(0, width));
    return first <= head && head <= last && lengths.includes(digits.length);
  });
}

const validCard = (digits) => digits.length >= 13 && digits.length <= 19 && knownIssuer(digits) && luhnValid(digits);

/** "space", "newline", the punctuation mark, or "" when it is not a separator between groups. */
function separatorKind(separator) {
  if (!SEPARATOR.test(separator)) return "";
  const mark = separator.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, "");
  if (mark) return mark;
  return separator.includes("\n") || separator.includes("\r") ? "newline" : "space";
}

/** Whether the letters glued to a value on either side hold digits too, or run on for 32 characters. */
function gluedToACode(text, start, end) {
  const before = search(WORD_BEFORE, text, back(text, start, 32), start);
  const after = matchAt(WORD_AFTER, text, end);
  return [before, after].some((w) => w !== null && (w[0].length === 32 || digitCount(w[0]) > 0));
}

function acceptCard(text, match) {
  const start = match.index;
  let groups = [...match[0].matchAll(DIGIT_RUNS)].map((g) => [start + g.index, start + g.index + g[0].length]);
  const kinds = groups.slice(1).map((b, i) => separatorKind(text.slice(groups[i][1], b[0])));
  const kind = kinds.find((k) => k !== "newline") ?? "newline";
  for (let i = 0; i < kinds.length; i++) {
    const k = kinds[i];
    if (!k || (k !== kind && !(k === "newline" && kind === "space"))) {
      groups = groups.slice(0, i + 1);
      break;
    }
  }
  if (groups.length > 1) {
    const before = search(GROUP_BEFORE, text, back(text, start, 4), start);
    if (before !== null && separatorKind(before[1]) === kind) groups = groups.slice(0, 1);
  }
  for (let n = groups.length; n > 0; n--) {
    const sizes = groups.slice(0, n).map(([s, e]) => e - s);
    const end = groups[n - 1][1];
    if (n > 1) {
      const byFours = sizes.slice(0, -1).every((g) => g % 4 === 0);
      if (!(byFours || CARD_GROUPINGS.includes(sizes.join(",")))) continue;
      const after = matchAt(GROUP_AFTER, text, end);
      if (after !== null && separatorKind(after[1]) === kind) continue;
    }
    const digits = groups.slice(0, n).map(([s, e]) => text.slice(s, e)).join("");
    if (validCard(digits) && !gluedToACode(text, start, end)) return [start, end];
  }
  return null;
}

// ---- iban -------------------------------------------------------------------------------------------

const IBAN = /[0-9](?<=(?<![A-Za-z0-9])[A-Za-z]{2}[0-9])[0-9](?:[ -]?[A-Za-z0-9]){11,30}/gu;
const ALNUM = /[A-Za-z0-9]/y;

function acceptIban(text, match) {
  const start = match.index - 2;
  const country = text.slice(start, start + 2).toUpperCase();
  if (!Object.hasOwn(IBAN_LENGTHS, country)) return null;
  const length = IBAN_LENGTHS[country];
  const separator = text.slice(start + 4, start + 5);
  const grouped = separator === " " || separator === "-";
  const end = start + length + (grouped ? Math.floor((length - 1) / 4) : 0);
  const value = text.slice(start, end);
  if (end > match.index + match[0].length || matchAt(ALNUM, text, end)) return null;
  if (grouped && value.split(separator).slice(0, -1).some((g) => g.length !== 4)) return null;
  const compact = grouped ? value.replaceAll(separator, "") : value;
  return compact.length === length && ibanValid(compact.toUpperCase()) ? [start, end] : null;
}

// ---- national_id ------------------------------------------------------------------------------------

const SSN = /([0-9](?<![0-9A-Za-z-][0-9])[0-9]{2})([ -])([0-9]{2})\2([0-9]{4})(?![0-9A-Za-z]|\2[0-9])/gu;
const NINO = /([A-CEGHJ-PR-TW-Z](?<![A-Za-z0-9][A-Z])[A-CEGHJ-NPR-TW-Z])( ?)[0-9]{2}\2[0-9]{2}\2[0-9]{2}\2[A-D](?![A-Za-z0-9])/gu;
const NINO_UNUSED_PREFIXES = new Set(["BG", "GB", "NK", "KN", "TN", "NT", "ZZ"]);
const DNI = /([0-9XYZ](?<![A-Za-z0-9][0-9XYZ])[0-9]{7})-?([A-Z])(?![A-Za-z0-9])/gu;
const NINE_DIGITS = /[0-9](?<![0-9A-Za-z.][0-9])[0-9]{3}(\.?)[0-9]{2}\1[0-9]{3}(?![0-9A-Za-z]|\.[0-9])/gu;
const BSN_NAME = named("(?<!WORD)(?:bsn|burgerservicenummer|sofi-?nummer)(?!WORD)");
const SSN_NAME = named("(?<!WORD)(?:ssn|social security(?: number| no\\.?)?)(?!WORD)");
const DNI_NAME = named("(?<!WORD)(?:dni|d\\.n\\.i|nif|n\\.i\\.f|nie|n\\.i\\.e|documento|identidad|identificaci[oó]n|carn[eé]t?" +
  "|national id|id card|id number|identity|spanish id)(?!WORD)");
const NAME_BEFORE_CHARS = 40;

const validSsn = (area, group, serial) => area !== "000" && area !== "666" && area[0] !== "9" && group !== "00" && serial !== "0000";

const acceptSsn = (text, match) => (validSsn(match[1], match[3], match[4]) ? whole(text, match) : null);
const acceptNino = (text, match) => (NINO_UNUSED_PREFIXES.has(match[1]) ? null : whole(text, match));

function acceptDni(text, match) {
  if (!dniValid(match[1], match[2])) return null;
  if ("XYZ".includes(match[1][0]) || search(DNI_NAME, text, back(text, match.index, NAME_BEFORE_CHARS), match.index)) {
    return whole(text, match);
  }
  return null;
}

function acceptNineDigits(text, match) {
  const digits = match[0].replaceAll(".", "");
  const before = back(text, match.index, NAME_BEFORE_CHARS);
  if (bsnValid(digits) && search(BSN_NAME, text, before, match.index)) return whole(text, match);
  if (!match[0].includes(".") && validSsn(digits.slice(0, 3), digits.slice(3, 5), digits.slice(5))) {
    return search(SSN_NAME, text, before, match.index) ? whole(text, match) : null;
  }
  return null;
}

// ---- credential -------------------------------------------------------------------------------------

const TOKEN_END = "(?![A-Za-z0-9_-])";
const tokenPattern = (prefix, body) => new RegExp(`${prefix}(?<![A-Za-z0-9_-]${prefix})${body}${TOKEN_END}`, "gu");

const AWS_KEY_ID = /A(?<![A-Za-z0-9]A)(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|PKA|ROA|SCA)[A-Z2-7]{16}(?![A-Za-z0-9])/gu;
const PREFIXED_TOKENS = [
  [tokenPattern("gh[pousr]_", "[A-Za-z0-9]{36}"), "_"],  // GitHub
  [tokenPattern("github_pat_", "[A-Za-z0-9_]{82}"), "github_pat_"],
  [tokenPattern("glpat-", "[A-Za-z0-9_-]{20}"), "glpat-"],  // GitLab
  [tokenPattern("xox[abposr]-", "[A-Za-z0-9-]{10,200}"), "xox"],  // Slack
  [tokenPattern("[sr]k_(?:live|test)_", "[A-Za-z0-9]{24,99}"), "k_"],  // Stripe secret and restricted keys
  [tokenPattern("AIza", "[A-Za-z0-9_-]{35}"), "AIza"],  // Google API key
  [tokenPattern("eyJ", "[A-Za-z0-9_-]{10,8000}\\.eyJ[A-Za-z0-9_-]{10,8000}\\.[A-Za-z0-9_-]{10,8000}"), "eyJ"],  // JWT
];
const SK_TOKEN = tokenPattern("sk-", "[A-Za-z0-9_-]{32,300}");  // OpenAI, Anthropic
const SLACK_WEBHOOK = /https:\/\/hooks\.slack\.com\/services\/T[A-Z0-9]{6,12}\/B[A-Z0-9]{6,12}\/[A-Za-z0-9]{16,32}/gu;
const PEM = /-----BEGIN (?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?-----/gu;
const PEM_END = /-----END (?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?-----/gu;
const PEM_MAX_CHARS = 20_000;
// \s of Python's ASCII patterns: [ \t\n\r\f\v]
const ASSIGNED_VALUE = /[=:](?<![=:!<>][=:])(?!=)[ \t]{0,5}(?:"([^"\n]{4,200})"|'([^'\n]{4,200})'|([^ \t\n\r\f\v"',;)}\]]{8,200}))/gud;
// ASCII-only case-insensitivity (Python's re.ASCII | re.IGNORECASE): JS's `i` without `u` never
// matches a non-ASCII character with an ASCII one.
const SECRET_NAME = new RegExp("(?<![A-Za-z0-9])(?:password|passwd|pwd|passphrase|secret|client[_-]?secret|api[_-]?key|apikey" +
  "|access[_-]?key|secret[_-]?key|private[_-]?key|access[_-]?token|auth[_-]?token|bearer[_-]?token)" +
  "[\"']?[ \\t]{0,5}$", "gi");
const SECRET_NAME_CHARS = 40;
const PLACEHOLDER = /^[<{$%*[(]|your|example|placeholder|redacted|dummy|xxx|\.\.\.|^(?:none|null|nil)$/i;
const IDENTIFIER = /^[A-Za-z_][A-Za-z_.]*$/;

const acceptAwsKeyId = (text, match) => (match[0].includes("EXAMPLE") ? null : whole(text, match));
const acceptSkToken = (text, match) => (/[0-9]/.test(match[0]) ? whole(text, match) : null);

function acceptPem(text, match) {
  const from = match.index + match[0].length;
  const end = search(PEM_END, text, from, ahead(text, from, PEM_MAX_CHARS));
  return [match.index, end ? end.index + end[0].length : from];
}

function acceptAssignment(text, match) {
  if (!search(SECRET_NAME, text, back(text, match.index, SECRET_NAME_CHARS), match.index)) return null;
  const group = [1, 2, 3].find((g) => match[g] !== undefined);
  const value = match[group];
  if (PLACEHOLDER.test(value) || new Set(value).size === 1) return null;
  if (group === 3 && (value.includes("(") || value.includes("[") || IDENTIFIER.test(value))) return null;
  return [...match.indices[group]];
}

// ---- ip_address -------------------------------------------------------------------------------------

const IPV4 = /[0-9](?<![0-9A-Za-z.][0-9])[0-9]{0,2}(?:\.[0-9]{1,3}){3}(?![0-9A-Za-z]|\.[0-9])/gu;
const VERSION_BEFORE = named("(?<!WORD)(?:v|ver|version|versi[oó]n[e]?|vers[aã]o|versie|верси[яи]|release|build|firmware|fw|patch" +
  "|section|sect|sec|chapter|ch|clause|article|art|paragraph|para|step|item|figure|fig|table|tab|appendix" +
  "|annex|rule|requirement|req|abschnitt|kapitel|absatz|ziffer|punkt|secci[oó]n|cap[ií]tulo|art[ií]culo" +
  "|apartado|punto|chapitre|paragraphe|hoofdstuk|artikel|paragraaf|sezione|capitolo|se[cç][aã]o|раздел" +
  "|пункт|глава)\\.?[ \\t]{0,3}(?:n[o°º]\\.?[ \\t]{0,2})?$|§[ \\t]{0,3}$");
const TIME_AFTER = named("[ \\t]{0,2}(?:[ap]\\.?m\\.?|h|hrs?|uhr|o'clock|heures?|horas?|ore)(?!WORD)", "yu");
const VERSION_BEFORE_CHARS = 16;

function acceptIpv4(text, match) {
  const octets = match[0].split(".");
  if (!octets.every((o) => Number(o) <= 255 && (o === "0" || o[0] !== "0"))) return null;
  if (search(VERSION_BEFORE, text, back(text, match.index, VERSION_BEFORE_CHARS), match.index)) return null;
  return matchAt(TIME_AFTER, text, match.index + match[0].length) ? null : whole(text, match);
}

/** name -> Detector, in Python's order. */
export const DETECTORS = Object.freeze(Object.fromEntries([
  new Detector("email", "email addresses (not RFC 2606 reserved domains, not git@host:path)", [new Rule(EMAIL, acceptEmail, "@")]),
  new Detector("phone", "+country numbers (8-15 digits); US/Canada (NXX) NXX-XXXX; trunk-0 national numbers with separators", [
    new Rule(PHONE_INTERNATIONAL, standalone(acceptInternationalPhone), "+"),
    new Rule(PHONE_NANP, standalone(whole)),
    new Rule(PHONE_TRUNK, standalone(acceptTrunkPhone)),
  ]),
  new Detector("payment_card", "13-19 digit card numbers of a known issuer that pass Luhn", [new Rule(CARD, acceptCard)]),
  new Detector("iban", "IBANs of the registry's countries at their length, mod-97 valid, any case", [new Rule(IBAN, acceptIban)]),
  new Detector("national_id", "US SSN, UK NINO, Spanish DNI (named) / NIE (control letter), Dutch BSN (11-test, named)", [
    new Rule(SSN, standalone(acceptSsn)),
    new Rule(NINE_DIGITS, standalone(acceptNineDigits)),
    new Rule(NINO, standalone(acceptNino)),
    new Rule(DNI, standalone(acceptDni)),
  ]),
  new Detector("credential", "cloud and SaaS key formats, JWTs, private key PEM blocks, secret assignments with a value", [
    new Rule(AWS_KEY_ID, acceptAwsKeyId),
    ...PREFIXED_TOKENS.map(([pattern, needs]) => new Rule(pattern, whole, needs)),
    new Rule(SK_TOKEN, acceptSkToken, "sk-"),
    new Rule(SLACK_WEBHOOK, whole, "hooks.slack.com"),
    new Rule(PEM, acceptPem, "PRIVATE KEY"),
    new Rule(ASSIGNED_VALUE, acceptAssignment),
  ]),
  new Detector("ip_address", "IPv4 addresses in dotted-quad form (not versions, sections or times)",
    [new Rule(IPV4, standalone(acceptIpv4), ".")]),
].map((d) => [d.name, d])));

/** The detectors named (all when null), or a TypeError / RangeError naming what was wrong. */
export function chosen(names) {
  if (names === null || names === undefined) return Object.values(DETECTORS);
  if (typeof names === "string" || typeof names?.[Symbol.iterator] !== "function") {
    throw new TypeError(`names must be an array of detector names or null, got ${typeof names}`);
  }
  return [...names].map((name) => {
    if (typeof name !== "string") throw new TypeError(`detector names must be strings, got ${typeof name}`);
    if (!Object.hasOwn(DETECTORS, name)) {
      throw new RangeError(`unknown detector '${name}'; known detectors: ${Object.keys(DETECTORS).join(", ")}`);
    }
    return DETECTORS[name];
  });
}

function checkText(text) {
  if (typeof text !== "string") throw new TypeError(`text must be a string, got ${text === null ? "null" : typeof text}`);
}

/** Every finding {detector, start, end} of the named detectors (all when null), ordered by position,
 * spans in code points. A finding inside a longer finding of another detector is left out. */
export function detect(text, names = null) {
  checkText(text);
  const folded = fold(text);
  const findings = [];
  for (const d of chosen(names)) for (const [start, end] of d.foldedSpans(folded.text)) findings.push({ detector: d.name, start, end });
  findings.sort((a, b) => a.start - b.start || b.end - a.end || (a.detector < b.detector ? -1 : a.detector > b.detector ? 1 : 0));
  const kept = [];
  for (const f of findings) {
    if (!kept.slice(-8).some((k) => k.start <= f.start && f.end <= k.end && k.end - k.start > f.end - f.start)) kept.push(f);
  }
  const spans = folded.spans(kept.map((f) => [f.start, f.end]));
  return kept.map((f, i) => Object.freeze({ detector: f.detector, start: spans[i][0], end: spans[i][1] }));
}

/** Whether any of the named detectors (all when null) finds anything: stops at the first finding. */
export function anyDetected(text, names = null) {
  checkText(text);
  const detectors = chosen(names);
  const folded = fold(text).text;
  return detectors.some((d) => d.foldedFoundIn(folded));
}
