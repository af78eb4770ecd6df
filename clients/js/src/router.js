// The learned router (serving/router.py): bundle in, Decision out; the rule table whenever the
// bundle cannot serve. Loading and routing never throw for valid arguments: a bad bundle gives a
// router on the rule table (degraded), unless `strict`, which throws BundleError and only that.
import { BundleError, verifiedBundle } from "./bundle.js";
import { UNFAMILIAR_POLICIES } from "./contract.js";
import { Acceptor } from "./acceptance.js";
import { execute } from "./execute.js";
import { Routing } from "./routing.js";
import { Scorer } from "./scorer.js";
import { checkBatch, checkPrecision, checkPrompt } from "./validation.js";

/** A verified, loaded bundle's Routing; BundleError for anything wrong with the bundle,
 * onnxruntime refusing it included. */
async function loadRouting(platform, source, { threads, unfamiliarPolicy, publicKey, logger }) {
  let scorer, acceptor;
  try {
    const bundle = await verifiedBundle(String(source), platform.files(source), platform.crypto, { publicKey });
    scorer = await Scorer.create(bundle, platform.runtime, { threads });
    acceptor = await Acceptor.fromBundle(bundle, scorer, platform.runtime);
  } catch (error) {
    await scorer?.release();
    if (error instanceof BundleError) throw error;
    throw new BundleError(`cannot load bundle ${source}: ${error?.message ?? error}`.slice(0, 500), { cause: error });
  }
  return new Routing(scorer, { unfamiliarPolicy, logger, acceptor });
}

/** The Router of every platform; index.js (Node) and web.js (browsers) give it theirs. */
export class BaseRouter {
  /** Use Router.load. */
  constructor(routing) {
    this.routing = routing;
  }

  /**
   * Load and verify a bundle with `platform` (node/platform.js, web/platform.js).
   * @param {string} source the bundle: a folder, or a base URL in a browser
   * @param {{strict?: boolean, threads?: number, unfamiliarPolicy?: string | null, publicKey?: any,
   *   logger?: {warn(message: string): void}}} [options]
   */
  static async loadWith(platform, source, { strict = false, threads = 1, unfamiliarPolicy = null, publicKey = null,
    logger = console } = {}) {
    if (unfamiliarPolicy !== null && !UNFAMILIAR_POLICIES.includes(unfamiliarPolicy)) {
      throw new RangeError(`unfamiliarPolicy=${JSON.stringify(unfamiliarPolicy)}; use one of ${UNFAMILIAR_POLICIES.join(", ")}`);
    }
    if (!Number.isInteger(threads) || threads < 1) throw new RangeError(`threads must be a positive integer, got ${threads}`);
    try {
      return new this(await loadRouting(platform, source, { threads, unfamiliarPolicy, publicKey, logger }));
    } catch (error) {
      if (strict) throw error;
      logger.warn(`routing bundle unavailable, using the rule table: ${error.message}`);
      return new this(new Routing(null, { degradedReason: error.message, logger }));
    }
  }

  /** True when the rule table decides. */
  get degraded() { return this.routing.degraded; }
  /** Why the rule table decides, or null. */
  get degradedReason() { return this.routing.degradedReason; }
  get modelVersion() { return this.routing.modelVersion; }
  get edgeContextTokens() { return this.routing.edgeContextTokens; }
  get unfamiliarPolicy() { return this.routing.unfamiliarPolicy; }
  /** An N-endpoint bundle's endpoints in its order (decisions then carry `endpoint` and
   * `cascade`); null for a two-endpoint bundle or the rule table. */
  get endpointNames() { return this.routing.endpointNames; }
  /** The validated manifest (null when degraded); `.raw` is the manifest as parsed. */
  get manifest() { return this.routing.manifest; }
  /** The bundle's learned acceptance check ({check(prompt, answer, {logprobMean, logprobMin})}),
   * or null when it has none (trained without edge answers, older, or degraded). */
  get acceptor() { return this.routing.acceptor; }

  /** Where one prompt should run. Rejects only for argument errors (TypeError, RangeError) and,
   * with an N-endpoint bundle, NoFeasibleEndpoint when the prompt fits no endpoint's context. */
  async route(prompt, { precision = null } = {}) {
    checkPrompt(prompt);
    return (await this.routing.decisions([prompt], [checkPrecision(precision)]))[0];
  }

  /** Decisions for many prompts, scored in one onnxruntime call. */
  async routeBatch(prompts, precisions = null) {
    const [checked, tags] = checkBatch(prompts, precisions);
    return checked.length ? this.routing.decisions(checked, tags) : [];
  }

  /**
   * Route, then run: edge or cloud first as decided, the cloud as fallback (execute.js).
   * `edge(prompt, {signal})` and `cloud(prompt)` return the answer or a Promise of it; the edge's
   * signal is aborted when `edgeTimeoutMs` passes. `accept(answer)` checks an edge answer in the
   * edge_with_cloud_fallback zone (every edge answer with `verifyEdgeZone`); "learned" uses the
   * bundle's acceptance check (the edge must then answer a string; anything else counts as a
   * check that threw), and checks nothing, with one warning, when the bundle has none. Throws
   * CloudCallError when the cloud fails; argument errors as route() does.
   */
  async execute(prompt, edge, cloud, { precision = null, edgeTimeoutMs = null, accept = null, verifyEdgeZone = false } = {}) {
    if (typeof edge !== "function" || typeof cloud !== "function") throw new TypeError("edge and cloud must be functions taking the prompt");
    if (accept !== null && accept !== "learned" && typeof accept !== "function") {
      throw new TypeError(`accept must be a function, "learned" or null, got ${typeof accept}`);
    }
    if (edgeTimeoutMs !== null && !(Number.isFinite(edgeTimeoutMs) && edgeTimeoutMs >= 0)) {
      throw new RangeError(`edgeTimeoutMs must be a non-negative number or null, got ${edgeTimeoutMs}`);
    }
    const routing = this.routing;  // one bundle for the decision and the limits it is carried out with
    checkPrompt(prompt);
    const [decision] = await routing.decisions([prompt], [checkPrecision(precision)]);
    const check = accept === "learned" ? routing.learnedAccept(prompt) : accept;
    return execute(decision, prompt, { edge, cloud, edgeContextTokens: routing.edgeContextTokens, edgeTimeoutMs,
      accept: check, verifyEdgeZone });
  }

  /** Release the onnxruntime session; the router must not be used after. */
  async close() {
    if (this.routing.scorer) await this.routing.scorer.release();
    if (this.routing.acceptor) await this.routing.acceptor.release();
  }
}
