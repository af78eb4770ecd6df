// Bundle -> head probabilities, routing scores and novelty with onnxruntime
// (serving/scoring/_scorer.py, the fused layout). The static tier's model.onnx takes the token ids, the
// mask and the scalars and computes everything after them: each head's probability (calibration
// and lexical blend folded in) and the novelty. Other layouts (the transformer tier's staged
// encoder + router, a familiarity reference kept as novelty.npz) are refused with a BundleError,
// so the router runs degraded on them rather than deciding differently from Python. The
// onnxruntime is the platform's (onnxruntime-node, onnxruntime-web).
import { BundleError, content } from "./bundle.js";
import { FeatureExtractor } from "./features.js";
import { BundleTokenizer } from "./tokenizer.js";

const EPSILON = 1e-6;  // serving/scoring/_calibration.py

/** A head's calibration as a function of one probability (serving.scoring._calibration.calibrator). */
export function calibrator(params) {
  if (params.inModel || params.method === "none") return (p) => p;
  if (params.method === "sigmoid") {
    const { a, b } = params;
    return (p) => {
      const q = Math.min(Math.max(p, EPSILON), 1 - EPSILON);
      return 1 / (1 + Math.exp(-(a * Math.log(q / (1 - q)) + b)));
    };
  }
  const { x, y } = params;  // isotonic: numpy.interp through the fitted points
  return (p) => {
    if (!(p > x[0])) return y[0];
    if (p >= x[x.length - 1]) return y[y.length - 1];
    let lo = 0, hi = x.length - 1;  // the last j with x[j] <= p
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (x[mid] <= p) lo = mid; else hi = mid; }
    return ((y[lo + 1] - y[lo]) / (x[lo + 1] - x[lo])) * (p - x[lo]) + y[lo];
  };
}

/** Why an N-endpoint bundle's graph cannot serve its manifest (serving.scoring._scorer's
 * _check_endpoint_graph), or null: every head's calibration inside the graph, and the output
 * as wide as the endpoints list where the runtime tells the output's shape. */
function endpointGraphProblem(manifest, modelSession) {
  const { heads, outputs: [output] } = manifest.score;
  for (const head of heads) {
    const calibration = manifest.calibration[head];
    if (!calibration.inModel && calibration.method !== "none") {
      return `endpoint '${head}': calibration '${calibration.method}' outside the model; an N-endpoint bundle's graph outputs calibrated probabilities`;
    }
  }
  const meta = (modelSession.outputMetadata ?? []).find?.((m) => m.name === output);
  const width = meta && Array.isArray(meta.shape) && meta.shape.length ? meta.shape[meta.shape.length - 1] : undefined;
  if (meta && width !== heads.length) {
    return `the model's output '${output}' holds ${width} endpoints' probabilities; the manifest lists ${heads.length} (${heads.join(", ")})`;
  }
  return null;
}

export class Scorer {
  /** Use Scorer.create: building a session is asynchronous. */
  constructor(manifest, modelSession, extractor, Tensor) {
    this.Tensor = Tensor;
    this.manifest = manifest;
    this.session = modelSession;
    this.extractor = extractor;
    this.spec = manifest.featureSpec;
    this.gain = manifest.score.kind === "expected_gain";
    this.nEndpoints = manifest.endpoints ? manifest.endpoints.names.length : 0;  // an N-endpoint bundle's heads
    this.outputs = [...manifest.score.outputs];
    this.calibrators = manifest.score.heads.map((h) => calibrator(manifest.calibration[h]));
    this.noveltyOutput = manifest.novelty ? manifest.novelty.output : null;
    if (this.noveltyOutput) this.outputs.push(this.noveltyOutput);
  }

  /**
   * A verified bundle's Scorer; BundleError when this runtime cannot run it.
   * @param {{createSession(bytes: Uint8Array, threads: number): Promise<any>, Tensor: any}} runtime
   */
  static async create(bundle, runtime, { threads = 1 } = {}) {
    const { manifest } = bundle;
    if (!manifest.featureSpec.fused) {
      throw new BundleError(`${bundle.folder}: a ${manifest.featureSpec.tier}-tier bundle (staged encoder and router); ` +
        "this client runs fused bundles (model.onnx) only");
    }
    if (manifest.novelty && !manifest.novelty.inModel) {
      throw new BundleError(`${bundle.folder}: its familiarity reference is a file (${manifest.novelty.file}); ` +
        "this client reads the novelty from the model (bundles trained since it is computed in model.onnx)");
    }
    const tokenizer = new BundleTokenizer(new TextDecoder().decode(content(bundle, "tokenizer.json")));
    const modelSession = await runtime.createSession(content(bundle, "model.onnx"), threads);
    const inputs = [...modelSession.inputNames].sort();
    if (inputs.join() !== "attention_mask,input_ids,scalars") {
      await modelSession.release();
      throw new BundleError(`the model's inputs are ${JSON.stringify(inputs)}, expected ["attention_mask","input_ids","scalars"]`);
    }
    const scorer = new Scorer(manifest, modelSession, new FeatureExtractor(manifest.featureSpec, tokenizer), runtime.Tensor);
    const missing = scorer.outputs.filter((o) => !modelSession.outputNames.includes(o));
    if (missing.length) {
      await modelSession.release();
      throw new BundleError(`the manifest names model output(s) ${JSON.stringify(missing)} that model.onnx does not have`);
    }
    const wrong = manifest.endpoints ? endpointGraphProblem(manifest, modelSession) : null;
    if (wrong) {
      await modelSession.release();
      throw new BundleError(wrong);
    }
    return scorer;
  }

  /**
   * What the bundle's graph says of a batch, in one onnxruntime call, in the one shape the chooser
   * reads (serving.scoring._scorer.Scores): {nTokens, scores, heads, expected, novelty, note}, the
   * fields a layout does not have null (a two-endpoint bundle's score and heads, an N-endpoint
   * bundle's expected probabilities).
   */
  async score(prompts, precisions) {
    if (this.nEndpoints) {
      const { expected, nTokens, novelty } = await this.expected(prompts, precisions);
      return { nTokens, scores: null, heads: null, expected, novelty, note: null };
    }
    const { scores, nTokens, heads, novelty } = await this.scoreBatch(prompts, precisions);
    return { nTokens, scores, heads, expected: null, novelty, note: null };
  }

  /**
   * Scores, token counts, head probabilities and novelty of a batch, in one onnxruntime call.
   * @returns {Promise<{scores: number[], nTokens: number[], heads: number[][], novelty: number[] | null}>}
   */
  async scoreBatch(prompts, precisions) {
    const { ids, mask, width, scalars, nTokens } = this.extractor.prepare(prompts, precisions);
    const rows = prompts.length;
    const feeds = {
      input_ids: new this.Tensor("int64", ids, [rows, width]),
      attention_mask: new this.Tensor("int64", mask, [rows, width]),
      scalars: new this.Tensor("float32", scalars, [rows, this.extractor.nScalars]),
    };
    const results = await this.session.run(feeds, this.outputs);
    const column1 = (name) => Array.from({ length: rows }, (_, r) => Number(results[name].data[r * 2 + 1]));
    const novelty = this.noveltyOutput ? Array.from(results[this.noveltyOutput].data, Number) : null;
    if (!this.gain) {
      const scores = column1(this.outputs[0]).map(this.calibrators[0]);
      return { scores, nTokens, heads: scores.map((s) => [s]), novelty };
    }
    const edge = column1(this.outputs[0]).map(this.calibrators[0]);
    const cloud = column1(this.outputs[1]).map(this.calibrators[1]);
    return { scores: cloud.map((c, r) => c - edge[r]), nTokens, heads: edge.map((e, r) => [e, cloud[r]]), novelty };
  }

  /**
   * An N-endpoint bundle's calibrated P(good answer) of each prompt and endpoint (the manifest's
   * endpoints order), the token counts and, when the graph computes it (a familiarity reference),
   * each prompt's novelty (else null), in one onnxruntime call.
   * @returns {Promise<{expected: number[][], nTokens: number[], novelty: number[] | null}>}
   */
  async expected(prompts, precisions) {
    const { ids, mask, width, scalars, nTokens } = this.extractor.prepare(prompts, precisions);
    const rows = prompts.length, n = this.nEndpoints;
    const results = await this.session.run({
      input_ids: new this.Tensor("int64", ids, [rows, width]),
      attention_mask: new this.Tensor("int64", mask, [rows, width]),
      scalars: new this.Tensor("float32", scalars, [rows, this.extractor.nScalars]),
    }, this.noveltyOutput ? [this.outputs[0], this.noveltyOutput] : [this.outputs[0]]);
    const novelty = this.noveltyOutput ? Array.from(results[this.noveltyOutput].data, Number) : null;
    const output = results[this.outputs[0]];
    if (output.dims.length !== 2 || output.dims[0] !== rows || output.dims[1] !== n) {
      throw new Error(`the model's output ${this.outputs[0]} has shape [${output.dims}], expected [${rows}, ${n}]`);
    }
    const data = output.data;
    return { expected: Array.from({ length: rows }, (_, r) => Array.from({ length: n }, (_, k) => Number(data[r * n + k]))), nTokens, novelty };
  }

  /** The router's feature rows of texts (no precision declared), as the fused model computes
   * them (its `features` output): what the acceptance check reads of an answer. */
  async features(texts) {
    const { ids, mask, width, scalars } = this.extractor.prepare(texts, texts.map(() => null));
    const rows = texts.length;
    const results = await this.session.run({
      input_ids: new this.Tensor("int64", ids, [rows, width]),
      attention_mask: new this.Tensor("int64", mask, [rows, width]),
      scalars: new this.Tensor("float32", scalars, [rows, this.extractor.nScalars]),
    }, ["features"]);
    return Float32Array.from(results.features.data);
  }

  async release() {
    await this.session.release();
  }
}
