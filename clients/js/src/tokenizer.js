// The bundle's tokenizer.json through @huggingface/tokenizers (Tokenizers.js, the Hugging Face
// team's JS implementation), made to give the Rust library's ids, which the Python SDK and
// training use.
//
// The two libraries share the algorithms but not their Unicode tables. Rust's BertNormalizer
// lower-cases character by character, removes what its (older) Unicode tables call "other",
// and puts spaces around the CJK ideographs of extension B and later; JS lower-cases with the
// final-sigma rule and classifies with the engine's newer ICU tables. So each text first goes
// through a pass that makes the JS library see what Rust sees: the differing code points
// (tokenizer-compat.js, generated from the Python tokenizer's ids of every code point by
// scripts/tokenizer-compat.mjs) are deleted, made a space, isolated between spaces, or replaced
// by a letter that is in no vocabulary entry, whichever gives Rust's ids; and Σ is lower-cased
// alone. The parity tests check every code point and every vector against the Python ids.
//
// Plain ASCII text skips all that: it takes the Python SDK's own shortcut (fast-tokenizer.js),
// with the same rule for which texts take it and the same ids.
import { Tokenizer } from "@huggingface/tokenizers";
import { AsciiShortcut } from "./fast-tokenizer.js";
import { COMPAT_FIXES, COMPAT_RANGES } from "./tokenizer-compat.js";

/** Replacements by fix kind, in the order scripts/tokenizer-compat.mjs tries them (COMPAT_FIXES
 * names them); "$" stands for the character itself. U+A500 (a Vai syllable) is a letter that no
 * vocabulary entry holds: a word with it is [UNK], as with the character Rust did not know. */
export const REPLACEMENTS = Object.freeze({ delete: "", space: " ", isolate: " $ ", unknown: "\ua500", isolate_unknown: " \ua500 " });

/** A fix applied to one character. */
export const fixed = (fix, char) => REPLACEMENTS[fix].replace("$", char);

/** The JS library's tokenizer of a tokenizer.json, without its truncation and padding (the SDK
 * does both, as Python's load_tokenizer switches them off). */
export function libraryTokenizer(config) {
  return new Tokenizer({ ...config, truncation: null, padding: null }, {});
}
const RANGE_STARTS = Int32Array.from(COMPAT_RANGES, (r) => r[0]);

/** The fix of a code point, or undefined: a binary search over the sorted ranges. */
function fixOf(code) {
  let lo = 0, hi = RANGE_STARTS.length - 1, found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (RANGE_STARTS[mid] <= code) { found = mid; lo = mid + 1; } else hi = mid - 1;
  }
  if (found < 0 || code > COMPAT_RANGES[found][1]) return undefined;
  return COMPAT_FIXES[COMPAT_RANGES[found][2]];
}

const FIRST_FIXED = COMPAT_RANGES.length ? COMPAT_RANGES[0][0] : Infinity;

/** The text as the Rust tokenizer's normaliser would have it classified (module doc). */
export function rustCompatible(text) {
  let out = "", done = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < FIRST_FIXED && unit !== 0x3a3) continue;  // ASCII and most of the BMP: nothing to do
    const code = text.codePointAt(i);
    const width = code > 0xffff ? 2 : 1;
    const fix = code === 0x3a3 ? "sigma" : fixOf(code);
    if (fix !== undefined) {
      const char = text.slice(i, i + width);
      out += text.slice(done, i) + (fix === "sigma" ? "σ" : fixed(fix, char));
      done = i + width;
    }
    i += width - 1;
  }
  return done === 0 ? text : out + text.slice(done);
}

/** Token ids of texts, as the Python SDK's FastTokenizer.ids gives them: plain ASCII without
 * special tokens through the shortcut, everything else through the library. */
export class BundleTokenizer {
  /** @param {string} json the content of tokenizer.json */
  constructor(json) {
    const config = JSON.parse(json);
    this.tokenizer = libraryTokenizer(config);
    this.shortcut = new AsciiShortcut(config, (word) => this.wordPieceIds(word));
  }

  /** @param {string} text @param {boolean} addSpecialTokens @returns {number[]} */
  ids(text, addSpecialTokens) {
    if (!addSpecialTokens && this.shortcut.plain(text)) return this.shortcut.ids(text);
    return this.libraryIds(text, addSpecialTokens);
  }

  /** The library's ids, without the shortcut. @param {string} text @param {boolean} addSpecialTokens */
  libraryIds(text, addSpecialTokens) {
    return this.tokenizer.encode(rustCompatible(text), { add_special_tokens: addSpecialTokens }).ids;
  }

  /** The library's WordPiece model on one pre-tokenised word, its tokens made ids as the library's
   * encode() makes them. @param {string} word @returns {number[]} */
  wordPieceIds(word) {
    const model = this.tokenizer.model;
    return model([word]).map((token) => model.tokens_to_ids.get(token) ?? model.unk_token_id);
  }
}
