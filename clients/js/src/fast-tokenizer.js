// The Python SDK's shortcut for plain ASCII text (serving/features/_tokenizer.py, FastTokenizer:
// plain, _shortcut_ids, _chunk_ids), ported rule for rule so that both SDKs send the same texts
// through it and get the same ids.
//
// For a BERT WordPiece tokenizer, on ASCII text without control characters or added-token
// strings ([CLS], [MASK], ...), the normaliser only lower-cases (when its "lowercase" says so)
// and the pre-tokeniser splits on whitespace, then between letters/digits and punctuation; most
// whitespace-separated chunks are then a single vocabulary look-up (the rest go through one
// regex). Words missing from the vocabulary go through the library's own WordPiece model, so
// sub-word splitting is never reimplemented. Everything else (other scripts, control
// characters, added tokens, other tokenizer types) takes the full tokenizer.

// Plain text holds only printable ASCII, tab, newline and return: any other character (non-ASCII,
// or a control character, which BERT's normaliser deletes) sends the text to the full tokenizer.
const NOT_PLAIN = /[^\t\n\r\x20-\x7e]/;
// BERT's pre-tokenizer on plain text: whitespace-separated chunks, and in a chunk every
// character that is not a letter or digit is punctuation, a word of its own.
const CHUNKS = /[^ \t\n\r]+/g;
const WORDS = /[A-Za-z0-9]+|[^A-Za-z0-9 \t\n\r]/g;
const ALNUM = /^[A-Za-z0-9]+$/;

/** Python's len(): code points. */
const codePoints = (s) => { let n = 0; for (const _ of s) n++; return n; };

export class AsciiShortcut {
  /**
   * @param {any} config the parsed tokenizer.json
   * @param {(word: string) => number[]} wordPieceIds the ids the tokenizer's WordPiece model
   *   gives a word that is not in the vocabulary
   */
  constructor(config, wordPieceIds) {
    const [normalizer, pre, model] = ["normalizer", "pre_tokenizer", "model"].map((k) => config[k] || {});
    this.wordPieceIds = wordPieceIds;
    this.lowercase = Boolean(normalizer.lowercase);
    const maxChars = model.max_input_chars_per_word ?? 0;
    // Whitespace-separated chunks the pre-tokeniser keeps whole (letters and digits only, or one
    // ASCII character) and that are vocabulary words: one look-up, no regex. These are also the
    // only vocabulary words a chunk splits into, so no other part of the vocabulary is kept.
    /** @type {Map<string, number>} */
    this.whole = new Map();
    const vocab = model.vocab ?? {};  // the model's own, without added tokens
    let longest = 0;
    for (const word in vocab) {
      if (word.length > longest) longest = Math.max(longest, codePoints(word));
      if (word.length === 1 ? word.charCodeAt(0) < 0x80 : ALNUM.test(word)) this.whole.set(word, vocab[word]);
    }
    /** Whether this tokenizer is one the shortcut applies to (else plain() is always false). */
    this.enabled = normalizer.type === "BertNormalizer" && pre.type === "BertPreTokenizer" && model.type === "WordPiece"
      && longest <= maxChars;  // a vocabulary hit is then never over WordPiece's per-word length limit
    const added = (config.added_tokens ?? []).map((/** @type {{content: string}} */ t) => t.content);
    // Added tokens are matched before normalisation; any text that might hold one (compared
    // case-insensitively, to be safe) takes the full tokenizer.
    this.added = added.map((a) => a.toLowerCase());
    const starts = new Set();
    for (const a of added) {
      if (a === "") continue;
      const first = String.fromCodePoint(/** @type {number} */ (a.codePointAt(0)));
      for (const c of first.toLowerCase() + first.toUpperCase()) starts.add(c);
    }
    this.addedStarts = [...starts];
  }

  /** Whether the shortcut gives this text's ids. @param {string} text */
  plain(text) {
    if (!this.enabled || NOT_PLAIN.test(text)) return false;
    for (const start of this.addedStarts) {
      if (text.includes(start)) {
        const lowered = text.toLowerCase();
        return !this.added.some((a) => lowered.includes(a));
      }
    }
    return true;
  }

  /** The ids of a text that plain() accepts, as the full tokenizer gives them without special
   * tokens. @param {string} text @returns {number[]} */
  ids(text) {
    const out = [];
    for (const chunk of (this.lowercase ? text.toLowerCase() : text).match(CHUNKS) ?? []) {
      const id = this.whole.get(chunk);  // most chunks: a plain word or a lone punctuation mark
      if (id === undefined) this.chunkIds(chunk, out);
      else out.push(id);
    }
    return out;
  }

  /** Appends the ids of a whitespace-separated chunk that is not one vocabulary word.
   * @param {string} chunk @param {number[]} out */
  chunkIds(chunk, out) {
    // The usual case, a word and a punctuation mark ("north,"): two look-ups.
    const last = chunk[chunk.length - 1];
    const word = this.whole.get(chunk.slice(0, -1)), mark = this.whole.get(last);
    if (word !== undefined && mark !== undefined && !ALNUM.test(last)) {
      out.push(word, mark);
      return;
    }
    for (const piece of chunk.match(WORDS) ?? []) {  // "12.5%" -> "12", ".", "5", "%"
      const id = this.whole.get(piece);  // Python looks in the whole vocabulary: the same, for these pieces
      if (id === undefined) out.push(...this.wordPieceIds(piece));  // not a vocabulary word: WordPiece splits it
      else out.push(id);
    }
  }
}
