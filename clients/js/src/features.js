// Prompt text (+ declared precision) -> the fused model's inputs, as
// serving/features/_extractor.py's FeatureExtractor.prepare builds them: cut the text to
// max_chars code points, make it valid Unicode, tokenize, keep max_tokens ids, and the scalars
// [n_tokens, text statistics, precision one-hot], each rounded to float32 once.
import { codePointLength, encodable, firstCodePoints } from "./pytext.js";
import { STAT_NAMES, textStatistics } from "./text-stats.js";

export class FeatureExtractor {
  /**
   * @param {{maxChars: number, maxTokens: number, addSpecialTokens: boolean, precisions: readonly string[]}} spec
   * @param {{ids(text: string, addSpecialTokens: boolean): number[]}} tokenizer
   */
  constructor(spec, tokenizer) {
    this.spec = spec;
    this.tokenizer = tokenizer;
    this.nScalars = 1 + STAT_NAMES.length + spec.precisions.length;  // n_tokens, statistics, precision
  }

  /** The part of a prompt that is tokenized and scanned (first max_chars, valid UTF-16). */
  head(prompt) {
    return encodable(firstCodePoints(prompt, this.spec.maxChars));
  }

  /** The precision one-hot (all zeros when undeclared); a tag the bundle was not trained with is
   * an error, as in Python (routing then degrades that batch to the rule table). */
  precisionRow(precision) {
    if (precision === null || precision === undefined) return this.spec.precisions.map(() => 0);
    if (!this.spec.precisions.includes(precision)) {
      throw new RangeError(`precision '${precision}' is not one of ${JSON.stringify(this.spec.precisions)} or None`);
    }
    return this.spec.precisions.map((p) => (p === precision ? 1 : 0));
  }

  /** A prompt's ids for the model (cut to max_tokens) and its estimated token count (the head's
   * count scaled by the share of the text it covers). */
  tokenRow(prompt, head) {
    let ids = this.tokenizer.ids(head, this.spec.addSpecialTokens);
    const headLength = codePointLength(head), promptLength = codePointLength(prompt);
    const nTokens = headLength < promptLength ? (ids.length * promptLength) / headLength : ids.length;
    const limit = this.spec.maxTokens;
    if (ids.length > limit) {  // keep the closing special token ([SEP]) when the encoder expects one
      ids = this.spec.addSpecialTokens ? [...ids.slice(0, limit - 1), ids[ids.length - 1]] : ids.slice(0, limit);
    }
    return { ids, nTokens };
  }

  /**
   * The model's inputs for a batch: ids and mask padded to the longest row (width 1 at least,
   * as Python pads an empty prompt), scalars float32 [rows, nScalars], and the token counts.
   * @param {string[]} prompts @param {(string|null)[]} precisions
   */
  prepare(prompts, precisions) {
    const rows = [], nTokens = [];
    const scalars = new Float32Array(prompts.length * this.nScalars);
    prompts.forEach((prompt, r) => {
      const head = this.head(prompt);
      const row = this.tokenRow(prompt, head);
      rows.push(row.ids);
      nTokens.push(row.nTokens);
      scalars.set([row.nTokens, ...textStatistics(prompt, head), ...this.precisionRow(precisions[r])], r * this.nScalars);
    });
    const width = Math.max(1, ...rows.map((ids) => ids.length));
    const ids = new BigInt64Array(rows.length * width), mask = new BigInt64Array(rows.length * width);
    rows.forEach((row, r) => row.forEach((id, k) => { ids[r * width + k] = BigInt(id); mask[r * width + k] = 1n; }));
    return { ids, mask, width, scalars, nTokens, rows };
  }
}
