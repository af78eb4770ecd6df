// One bundle's routing (serving/routing/_stages.py): scores -> zones -> Decisions, with the
// unfamiliar-prompt policy and the rule table whenever the bundle cannot serve. Reasons are the
// Python SDK's strings, number formatting included (pytext.formatFixed).
import { CLOUD, DEFAULT_EDGE_CONTEXT_TOKENS, DEFAULT_MAX_CHARS, EDGE, FALLBACK, firstTarget, zoneFor } from "./contract.js";
import { decisionOf, makeDecision, rezoned, zoneCascade } from "./decision.js";
import { explained, noDetector, noneFeasible } from "./endpoint-routing.js";
import { EndpointChooser } from "./endpoint-routing.js";
import { bandOf } from "./manifest.js";
import { codePointLength, formatFixed, roundHalfEven } from "./pytext.js";
import { RuleRouter } from "./rules.js";
import { declaresLanguages, ruledOut, withLanguage } from "./policy/capabilities.js";

export class Routing {
  /**
   * @param {import("./scorer.js").Scorer | null} scorer null: the rule table decides (degraded)
   * @param {{degradedReason?: string | null, unfamiliarPolicy?: string | null, logger?: {warn: Function}}} options
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
    this.maxChars = scorer ? scorer.spec.maxChars : DEFAULT_MAX_CHARS;
    this.rules = new RuleRouter(scorer ? scorer.extractor.tokenizer : null, { maxChars: this.maxChars });
    this.scoreName = manifest && manifest.score.kind === "expected_gain" ? "expected gain" : "score";
    this.unfamiliarPolicy = unfamiliarPolicy || (manifest && manifest.novelty ? manifest.novelty.policy : null);
    // An N-endpoint bundle's choice among its endpoints (endpoint-routing.js); null for two sides.
    this.chooser = manifest && manifest.endpoints && scorer ? new EndpointChooser(manifest.endpoints, this.modelVersion, this.maxChars,
      this.unfamiliarPolicy) : null;
    this.languageDetector = null;  // Router.load's languageDetector
  }

  /** An N-endpoint bundle's endpoint names, in its order; null for two sides or the rule table. */
  get endpointNames() {
    return this.chooser ? [...this.chooser.names] : null;
  }

  /** An N-endpoint bundle's decisions, the policy and needs applied (`options`: EndpointChooser's);
   * when scoring fails, degraded decisions by price. NoFeasibleEndpoint when no endpoint may serve a prompt. */
  async endpointDecisions(prompts, precisions, options = {}) {
    let scored;
    try {
      scored = await this.scorer.expected(prompts, precisions);
    } catch (error) {  // the host app must never see a scoring failure
      this.logger.warn(`scoring failed, endpoints by price: ${error}`);
      const note = `degraded: scoring failed: ${error}`.slice(0, 300);
      return this.chooser.degraded(prompts, precisions, prompts.map((p) => this.rules.countTokens(p)), note, options);
    }
    return this.chooser.decisions(prompts, precisions, scored.expected, scored.nTokens.map(roundHalfEven), options, scored.novelty);
  }

  /** The endpoint names a policy for this bundle names: an N-endpoint bundle's, else edge and cloud. */
  get policyEndpoints() {
    return this.chooser ? [...this.chooser.names] : [EDGE, CLOUD];
  }

  /** Decisions for checked arguments with the policy and the requests' needs applied (serving.routing._router's
   * _decide): after the model for two endpoints, among the feasible endpoints for an N-endpoint bundle.
   * `options`: {policy, metadata, needs (one each per prompt, or null), capabilities (a Map), spending,
   * holders (per prompt)}. NoFeasibleEndpoint for the first prompt left without an endpoint. */
  async decideAll(prompts, precisions, options = {}) {
    if (this.chooser) return this.endpointDecisions(prompts, precisions, options);
    const { policy = null, metadata = null, needs = null, capabilities = null, spending = null, holders = null } = options;
    const decisions = await this.decisions(prompts, precisions);
    // What may serve each request (serving.routing._chooser.Chooser.feasible): the needs (a language read when
    // the given capabilities declare languages), then the policy's verdict, every request first.
    let wants = needs ?? prompts.map(() => null);
    let lacking = prompts.map(() => new Map());
    if (wants.some((w) => w !== null) || capabilities !== null) {
      const known = capabilities ?? new Map();
      if (declaresLanguages(known)) wants = wants.map((w, i) => this.languageOf(w, prompts[i], metadata?.[i] ?? null));
      lacking = wants.map((w) => (w ? ruledOut(w, known, SIDES) : new Map()));
    }
    const verdicts = policy === null ? prompts.map(() => null) : prompts.map((p, i) => policy.evaluate(p, decisions[i].n_tokens,
      precisions[i], metadata?.[i] ?? null, { spending, needs: wants[i], holders: holders?.[i] ?? null }));
    return decisions.map((d, i) => (verdicts[i] === null && !lacking[i].size ? d : this.placed(d, verdicts[i], lacking[i])));
  }

  get degraded() {
    return this.scorer === null;
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

  /** Decisions for checked arguments; the rule table decides whenever scoring cannot. */
  async decisions(prompts, precisions) {
    if (this.scorer === null) {
      return prompts.map((p, i) => this.rules.decide(p, precisions[i], { degraded: true, note: `degraded: ${this.degradedReason}` }));
    }
    if (this.chooser) return this.endpointDecisions(prompts, precisions);
    let scored;
    try {
      scored = await this.scorer.scoreBatch(prompts, precisions);
    } catch (error) {  // the host app must never see a scoring failure
      this.logger.warn(`scoring failed, rule table decides: ${error}`);
      const note = `degraded: scoring failed: ${error}`.slice(0, 300);
      return prompts.map((p, i) => this.rules.decide(p, precisions[i], { degraded: true, note }));
    }
    const { scores, nTokens, heads, novelty } = scored;
    return prompts.map((p, i) => {
      const decision = this.decide(p, precisions[i], scores[i], roundHalfEven(nTokens[i]), heads[i]);
      return novelty ? this.familiar(decision, p, novelty[i]) : decision;
    });
  }

  /** The learned zone and reason of one scored prompt. */
  decide(prompt, precision, score, nTokens, heads) {
    const { lo, hi } = bandOf(this.manifest, precision);
    const [loText, hiText, tag] = [formatFixed(lo, 3), formatFixed(hi, 3), precision || "undeclared precision"];
    let zone = zoneFor(score, lo, hi);
    const scoreText = `${this.scoreName} ${formatFixed(score, 3)}`;
    let reason = zone === CLOUD ? `${scoreText} > ${hiText} (${tag})`
      : zone === EDGE ? `${scoreText} < ${loText} (${tag})`
        : `${scoreText} in [${loText}, ${hiText}] (${tag}): edge first, cloud fallback`;
    if (nTokens > this.edgeContextTokens) {  // said even when the score alone sends it to the cloud
      zone = CLOUD;
      reason = `~${nTokens} tokens exceed the edge context limit of ${this.edgeContextTokens}; ${reason}`;
    }
    const truncated = codePointLength(prompt) > this.maxChars;
    if (truncated) reason += `; features from the first ${this.maxChars} characters`;
    const [pEdge, pCloud] = heads.length === 2 ? heads : [null, null];
    return makeDecision(zone, { score, reason, degraded: false, model_version: this.modelVersion, precision,
      n_tokens: nTokens, truncated, p_edge: pEdge, p_cloud: pCloud,
      expected: heads.length === 2 ? { [EDGE]: pEdge, [CLOUD]: pCloud } : null });
  }

  /** Set the decision's novelty; an unfamiliar prompt gets the unfamiliar policy. Prompts over
   * the edge context limit stay on the cloud whatever the policy. */
  familiar(decision, prompt, novelty) {
    decision = { ...decision, novelty, unfamiliar: novelty > 1.0 };
    if (!decision.unfamiliar || this.unfamiliarPolicy === "learned") {
      if (decision.unfamiliar) decision.reason += `; unfamiliar prompt (novelty ${formatFixed(novelty, 2)}), learned zone kept`;
      return decision;
    }
    const note = `unfamiliar prompt (novelty ${formatFixed(novelty, 2)} > 1)`;
    if (decision.n_tokens > this.edgeContextTokens) return { ...decision, reason: `${note}; ${decision.reason}` };
    if (this.unfamiliarPolicy === "rule_table") {
      const ruled = this.rules.decide(prompt, decision.precision, { note });
      return rezoned(decision, ruled.zone, `${note}: ${ruled.reason}`);
    }
    return rezoned(decision, FALLBACK, `${note}: edge first, cloud fallback (learned: ${decision.reason})`);
  }

  /** A two-endpoint decision once the policy's verdict and what the request needs have their say
   * (serving.routing._chooser.Bands.placed): the zone within the allowed sides, the cascade without a forbidden
   * side, `rule`, `forbidden` and the reason. NoFeasibleEndpoint when no side is left. */
  placed(decision, verdict, lacking) {
    let zone = decision.zone;
    if (verdict !== null && verdict.rule !== null) {
      const soft = verdict.preferred;
      zone = soft !== null && soft.zone !== null ? sideZone(soft.zone, verdict.allowed, null)
        : sideZone(zone, verdict.allowed, soft !== null ? soft.endpoint : null);
    }
    const [reason, rule, forbidden] = explained(SIDES, decision.reason, verdict, lacking);
    if (lacking.size) {
      const allowed = SIDES.filter((s) => !forbidden.includes(s));
      if (!allowed.length) noneFeasible(SIDES, decision.n_tokens, [true, true], verdict, lacking);
      if (allowed.length === 1) zone = allowed[0];
    }
    let { cascade, on_device, checked } = zoneCascade(zone);
    if (forbidden.length && cascade.length > 1) {
      const keep = cascade.map((_, k) => k).filter((k) => !forbidden.includes(cascade[k]));
      [cascade, on_device] = [keep.map((k) => cascade[k]), keep.map((k) => on_device[k])];
      checked = checked.filter((name) => cascade.includes(name));
    }
    return decisionOf({ ...decision, cascade, on_device, checked, reason, rule, forbidden });
  }

  /** `needs` with the request's language: declared, else the Router's languageDetector's; without a
   * detector, LanguageDetectorMissing. */
  languageOf(needs, prompt, metadata) {
    const declared = withLanguage(needs, prompt, metadata, null);
    if (declared !== null && declared.language !== null) return declared;
    if (this.languageDetector === null) throw noDetector();
    return withLanguage(needs, prompt, metadata, this.languageDetector);
  }
}

const SIDES = [EDGE, CLOUD];

/** The zone for the allowed sides (serving.routing._chooser._zone): one side alone is its own zone; with both,
 * a preferred side runs first (the edge with the cloud as fallback), else the model's zone stands. */
function sideZone(modelZone, allowed, first) {
  if (allowed.length === 1 && allowed[0] === EDGE) return EDGE;
  if ((allowed.length === 1 && allowed[0] === CLOUD) || first === CLOUD) return CLOUD;
  if (first === EDGE && modelZone === CLOUD) return FALLBACK;
  return modelZone;
}
