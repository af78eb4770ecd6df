// The plain-ASCII shortcut (src/fast-tokenizer.js) against the library it stands in for: the
// same ids on every text it takes (the vectors' prompts and generated ASCII text), the Python
// SDK's rule for which texts take it, and the library for everything else. parity.test.js
// compares the ids of both paths with Python's.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { readBundle } from "../src/index.js";
import { encodable, firstCodePoints } from "../src/pytext.js";
import { BundleTokenizer } from "../src/tokenizer.js";
import { BUNDLE, vectors } from "./fixtures.js";

const JSON_TEXT = fs.readFileSync(path.join(BUNDLE, "tokenizer.json"), "utf8");
const tokenizer = new BundleTokenizer(JSON_TEXT);
const MCQ = "Which organ filters blood?\nA. Heart\nB. Kidney\nC. Lung\nD. Skin\nAnswer:";

/** A BundleTokenizer of the bundle's tokenizer.json changed by `edit`. */
function edited(edit) {
  const config = JSON.parse(JSON_TEXT);
  edit(config);
  return new BundleTokenizer(JSON.stringify(config));
}

/** Texts that take the shortcut, with each one's ids from both paths compared; their number. */
function checkShortcut(bundleTokenizer, texts) {
  let taken = 0;
  for (const text of texts) {
    if (!bundleTokenizer.shortcut.plain(text)) continue;
    taken++;
    assert.deepEqual(bundleTokenizer.shortcut.ids(text), bundleTokenizer.libraryIds(text, false), JSON.stringify(text.slice(0, 200)));
  }
  return taken;
}

/** Random ASCII texts from pieces that exercise each branch (as tests/test_features.py's
 * generated text): vocabulary words, words split into sub-words, words over WordPiece's
 * 100-character limit, added tokens in any case, punctuation, whitespace, control characters. */
function generatedTexts(count, seed) {
  let state = seed;
  const random = () => {  // mulberry32: the same texts on every run
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
  const pieces = ["The", "unaffable", "tokenization", "xqzv", "COVID-19", "e.g.", "a".repeat(101), "[MASK]", "[cls]", "[SEP",
    "mask]", " ", "\n", "\t", "\r\n", "___", "$12.50", "##ing", "north,", "(a)", "\x0b", "\x7f"];
  const texts = [];
  for (let i = 0; i < count; i++) {
    let text = "";
    for (let k = Math.floor(random() * 12); k > 0; k--) {
      if (random() < 0.5) text += pieces[Math.floor(random() * pieces.length)];
      else for (let n = Math.floor(random() * 16); n > 0; n--) text += String.fromCharCode(random() < 0.1 ? Math.floor(random() * 128) : 32 + Math.floor(random() * 95));
    }
    texts.push(text);
  }
  return texts;
}

describe("the plain-ASCII shortcut", () => {
  test("gives the library's ids on the vectors' prompts that take it, and most plain prompts take it", async (t) => {
    const { maxChars } = (await readBundle(BUNDLE)).manifest.featureSpec;
    const cases = vectors().cases;
    // What routing tokenizes (the first max_chars code points), and whole prompts.
    const heads = checkShortcut(tokenizer, cases.map((c) => encodable(firstCodePoints(c.prompt, maxChars))));
    const whole = checkShortcut(tokenizer, cases.map((c) => c.prompt));
    t.diagnostic(`${heads} of ${cases.length} prompts' heads and ${whole} whole prompts take the shortcut`);
    const ascii = cases.filter((c) => /^[\t\n\r\x20-\x7e]*$/.test(c.prompt)).length;
    assert.ok(whole >= ascii * 0.9, `${whole} whole prompts took the shortcut, of ${ascii} printable-ASCII ones`);
    assert.ok(heads >= whole && heads < cases.length, "non-ASCII prompts take the library");
  });

  test("gives the library's ids on generated ASCII text", (t) => {
    const texts = generatedTexts(4000, 28);
    const taken = checkShortcut(tokenizer, texts);
    t.diagnostic(`${taken} of ${texts.length} generated texts take the shortcut`);
    assert.ok(taken > 1000 && taken < 3000, `${taken} of ${texts.length}: both paths exercised`);
  });

  test("is taken on plain ASCII and not where an added token may hide or a control character is", () => {
    const { shortcut } = tokenizer;
    assert.ok(shortcut.enabled);
    for (const text of [MCQ, "UPPER lower 123 $%^", "", "   ", "tab\there\r\nnew", "[ mask ] sep]", "[MAS K]", "~"]) {
      assert.equal(shortcut.plain(text), true, JSON.stringify(text));
    }
    for (const text of ["Ünïcode", "café", "ctrl\x01char", "vertical\x0btab", "form\x0cfeed", "del\x7f", "\x1f", "a [MASK] b",
      "[cls] lower-cased", "x[Sep]y", "[unk]", "[pad]"]) {
      assert.equal(shortcut.plain(text), false, JSON.stringify(text));
    }
  });

  test("gives ids() its result without special tokens, and the library the rest", () => {
    const throwing = new BundleTokenizer(JSON_TEXT);
    throwing.libraryIds = () => { throw new Error("the library was called"); };
    assert.deepEqual(throwing.ids(MCQ, false), tokenizer.libraryIds(MCQ, false));
    assert.throws(() => throwing.ids(MCQ, true), /the library was called/);  // [CLS] ... [SEP]
    assert.throws(() => throwing.ids("a [MASK] b", false), /the library was called/);
    assert.deepEqual(tokenizer.ids(MCQ, true), [101, ...tokenizer.ids(MCQ, false), 102]);
    // Words outside the vocabulary: sub-words, [UNK] over 100 characters, as the library splits them.
    const text = `unaffable xqzv ${"a".repeat(101)} ${"b".repeat(100)}!`;
    assert.deepEqual(tokenizer.ids(text, false), tokenizer.libraryIds(text, false));
    assert.ok(tokenizer.ids(text, false).includes(100), "[UNK] for the 101-character word");
  });

  test("follows the normaliser's lower-casing", () => {
    const cased = edited((config) => { config.normalizer.lowercase = false; });
    assert.ok(cased.shortcut.enabled && !cased.shortcut.lowercase);
    const texts = ["The Kidney", "UPPER lower 123 $%^", MCQ, ...generatedTexts(500, 7)];
    assert.ok(checkShortcut(cased, texts) > 100);
    assert.notDeepEqual(cased.ids("The Kidney", false), tokenizer.ids("The Kidney", false));
  });

  test("is off for tokenizers it does not describe", () => {
    const others = [
      edited((config) => { config.pre_tokenizer = { type: "Whitespace" }; }),
      edited((config) => { config.normalizer = { type: "Lowercase" }; }),
      edited((config) => { config.normalizer = null; }),
      // a vocabulary word over WordPiece's per-word limit would be kept whole by a look-up
      edited((config) => { config.model.max_input_chars_per_word = 5; }),
      edited((config) => { delete config.model.max_input_chars_per_word; }),
    ];
    for (const other of others) {
      assert.equal(other.shortcut.enabled, false);
      assert.equal(other.shortcut.plain("plain words"), false);
      assert.deepEqual(other.ids("plain words", false), other.libraryIds("plain words", false));
    }
  });
});
