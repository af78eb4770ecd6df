// One bundle's routing (serving/routing/_stages.py): requests -> scores -> the chooser (chooser.js) ->
// Decisions, with the rule table (two endpoints) or price order (N endpoints) whenever the bundle
// cannot score. Reasons are the Python SDK's strings, number formatting included (pytext.formatFixed).
import { DEFAULT_EDGE_CONTEXT_TOKENS, DEFAULT_MAX_CHARS } from "./contract.js";
import { Bands, Choice, Chooser } from "./chooser.js";
import { twoEndpointSpecs } from "./endpoints.js";
import { RuleRouter } from "./rules.js";

export class Routing {
  /**
   * Everything one bundle (or the rule table alone) needs to decide, built once per bundle.
   * @param {import("./scorer.js").Scorer | null} scorer null: the rule table decides (degraded)
   * @param {{degradedReason?: string | null, unfamiliarPolicy?: string | null, logger?: {warn: Function}, acceptor?: any}} options
   */
  constructor(scorer, { degradedReason = null, unfamiliarPolicy = null, logger = console, acceptor = null } = {}) {
    const manifest = scorer ? scorer.manifest : null;
    this.scorer = scorer;
    this.acceptor = acceptor;  // acceptance.js's Acceptor, or null
    this.warnedNoAcceptor = false;
    this.manifest = manifest;
    this.degradedReason = degradedReason;
    this.logger = logger;
    this.edgeContextTokens = manifest ? manifest.limits.edgeContextTokens : DEFAULT_EDGE_CONTEXT_TOKENS;
    this.modelVersion = manifest ? manifest.modelVersion : RuleRouter.modelVersion;
    const maxChars = scorer ? scorer.spec.maxChars : DEFAULT_MAX_CHARS;
    this.rules = new RuleRouter(scorer ? scorer.extractor.tokenizer : null, { maxChars });
    // What an unfamiliar prompt gets: the caller's choice, else the bundle's.
    this.unfamiliarPolicy = unfamiliarPolicy || (manifest && manifest.novelty ? manifest.novelty.policy : null);
    const section = manifest && scorer ? manifest.endpoints : null;
    const [endpoints, rule] = section
      ? [[...section.spec], new Choice(section, { unfamiliarPolicy: this.unfamiliarPolicy })]
      : [twoEndpointSpecs(this.edgeContextTokens), new Bands(manifest, this.rules, { edgeContextTokens: this.edgeContextTokens,
        unfamiliarPolicy: this.unfamiliarPolicy })];
    this.chooser = new Chooser(endpoints, rule, { modelVersion: this.modelVersion, maxChars });
    // The answer's expected tokens the calls' prices count: an N-endpoint bundle's own (what its choice priced).
    this.outputTokens = section ? section.outputTokens : 0;
    this.nEndpoints = Boolean(section);
  }

  /** An N-endpoint bundle's endpoint names, in its order; null for two sides or the rule table. */
  get endpointNames() {
    return this.nEndpoints ? [...this.chooser.names] : null;
  }

  /** The endpoints this bundle routes among, in its order (a policy for it names them): edge and
   * cloud for a two-endpoint bundle and the rule table. */
  get policyEndpoints() {
    return [...this.chooser.names];
  }

  /** Router.load's languageDetector (the chooser's). */
  get languageDetector() { return this.chooser.detector; }
  set languageDetector(detector) { this.chooser.detector = detector; }

  /** Decisions for checked requests (request.js), `options` {policy, spending, holders (per request),
   * states, stickiness, now} applied (each conversation's switch costs weighed: Chooser.decisions);
   * NoFeasibleEndpoint for the first request left without an endpoint. */
  async decideAll(requests, options = {}) {
    return this.decide(requests, await this.scores(requests), options);
  }

  /** decideAll on scores already made (scores()), the answers' expected length this bundle's. */
  decide(requests, scores, options = {}) {
    return this.chooser.decisions(requests, scores, { ...options, outputTokens: this.outputTokens });
  }

  /** What the bundle's graph says of the requests (Scorer.score's shape); a failure is a degraded
   * one (the token counts and a note: the bundle's fallback decides), never thrown. */
  async scores(requests) {
    const prompts = requests.map((r) => r.text);
    const none = { scores: null, heads: null, expected: null, novelty: null };
    if (this.scorer === null) {
      return { nTokens: prompts.map((p) => this.rules.countTokens(p)), ...none, note: `degraded: ${this.degradedReason}` };
    }
    try {
      return await this.scorer.score(prompts, requests.map((r) => r.precision));
    } catch (error) {  // the host app must never see a scoring failure
      this.logger.warn(`scoring failed, the bundle's fallback decides: ${error}`);
      const note = `degraded: scoring failed: ${error}`.slice(0, 300);
      return { nTokens: prompts.map((p) => this.rules.countTokens(p)), ...none, note };
    }
  }

  get degraded() {
    return this.scorer === null;
  }

  get maxChars() {
    return this.chooser.maxChars;
  }

  /** accept: "learned" for one request: answer -> accepted, or null (nothing checked, one warning
   * per bundle) when the bundle has no acceptance model. A non-string answer throws, which
   * execute() counts as a check that raised: the cloud answers. */
  learnedAccept(prompt) {
    if (this.acceptor === null) {
      if (!this.warnedNoAcceptor) {
        this.warnedNoAcceptor = true;
        const why = this.degradedReason || this.manifest?.acceptance?.reason || "trained before acceptance checks";
        this.logger.warn(`accept="learned": bundle ${this.modelVersion} has no acceptance model (${why}); edge answers are not checked`);
      }
      return null;
    }
    return async (answer) => (await this.acceptor.check(prompt, answer)).accepted;
  }
}
