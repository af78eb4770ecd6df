// The learned acceptance check (serving/scoring/_acceptance.py): P(the edge answer is good) from the
// prompt and the answer, with the bundle's acceptance.onnx. Its input row: the answer's
// response features (response-features.js) and the router's own features of the answer text
// (the fused model's `features` output), the answer cut to its last max_response_chars first.
import { BundleError, content } from "./bundle.js";
import { lastCodePoints } from "./pytext.js";
import { DEFAULT_MAX_RESPONSE_CHARS, responseFeatures } from "./response-features.js";
import { calibrator } from "./scorer.js";

export class Acceptor {
  constructor(session, section, scorer) {
    this.session = session;
    this.scorer = scorer;
    this.threshold = section.threshold;
    this.maxResponseChars = section.maxResponseChars ?? DEFAULT_MAX_RESPONSE_CHARS;
    this.nFeatures = section.nFeatures;
    this.calibrate = calibrator(section.calibration);
  }

  /** The check a verified bundle ships, or null when it has none (trained without answers, older). */
  static async fromBundle(bundle, scorer, runtime) {
    const section = bundle.manifest.acceptance;
    if (!section || section.file === null) return null;
    const session = await runtime.createSession(content(bundle, section.file), 1);
    if (session.inputNames.join() !== "features" || !session.outputNames.includes("probabilities")) {
      await session.release();
      throw new BundleError(`acceptance model inputs are ${JSON.stringify(session.inputNames)}, expected ["features"]`);
    }
    return new Acceptor(session, section, scorer);
  }

  /** The model's input row (float32) for an answer to a prompt (Acceptor.features in Python). */
  async features(prompt, answer, { logprobMean = null, logprobMin = null } = {}) {
    const cut = lastCodePoints(answer, this.maxResponseChars);
    const own = responseFeatures(prompt, cut, { logprobMean, logprobMin, maxChars: this.maxResponseChars });
    const router = await this.scorer.features([cut]);
    const row = new Float32Array(own.length + router.length);
    row.set(own);
    row.set(router, own.length);
    if (row.length !== this.nFeatures) {
      throw new RangeError(`acceptance features have ${row.length} columns, the model takes ${this.nFeatures}`);
    }
    return row;
  }

  /**
   * The verdict on one answer: {probability, threshold, accepted}. TypeError for an answer or a
   * prompt that is not text.
   */
  async check(prompt, answer, { logprobMean = null, logprobMin = null } = {}) {
    if (typeof prompt !== "string" || typeof answer !== "string") {
      throw new TypeError(`the acceptance check reads text; got prompt ${typeof prompt}, answer ${typeof answer}`);
    }
    const row = await this.features(prompt, answer, { logprobMean, logprobMin });
    const results = await this.session.run({ features: new this.scorer.Tensor("float32", row, [1, row.length]) }, ["probabilities"]);
    const probability = this.calibrate(Number(results.probabilities.data[1]));
    return { probability, threshold: this.threshold, accepted: probability >= this.threshold };
  }

  async release() {
    await this.session.release();
  }
}
