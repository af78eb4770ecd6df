// The one chooser (serving/routing/_chooser.py): scored requests -> Decisions, for every bundle and for the
// rule table.
//
// What may serve a request is settled here, once, whatever the bundle: each endpoint's context limit,
// the capabilities the request needs (policy/capabilities.js: an endpoint lacking one is ruled out under
// the built-in rule needs:<capability>; the request's language, declared or the Router's
// languageDetector's, when an endpoint declares `languages`) and the policy's verdict (policy/rules.js).
// The bundle's rule then orders the endpoints left into the cascade:
//
// - Bands, a two-endpoint bundle (edge, cloud): the score's thresholds give a zone, which is a cascade:
//   edge (the edge, the cloud should its call fail), edge_with_cloud_fallback (the same, the edge's
//   answer checked), cloud. A prompt over the edge's context limit goes to the cloud; an unfamiliar one
//   gets the unfamiliar policy. The rule table is this rule with its own score (rules.js).
// - Choice, an N-endpoint bundle (docs/endpoints.md#n-endpoint-bundles): each endpoint's calibrated
//   P(good answer) from the bundle's graph and the price of each call at the prompt's token count, the
//   bundle's choice rule (endpoint-choice.js: the functions Python's SDK and `make endpoints` run), then
//   each costlier endpoint expected to do better (escalation). Its decisions: `endpoint` the first to
//   run, `cascade` the order to try them in, `expected` every endpoint's probability by name, `score`
//   the chosen endpoint's; `target` "edge" when the first runs on the device, `zone`
//   edge_with_cloud_fallback when a device endpoint comes first and a cloud endpoint later.
//
// Policy rules name the chooser's endpoints: a forbidden endpoint is never in the cascade; a force
// leaves its endpoint alone; a prefer puts its endpoint first when it may serve (the cascade climbs from
// it). No endpoint left: NoFeasibleEndpoint, naming the rules and the limits involved; never a silent
// default.
//
// An unfamiliar prompt (novelty above 1: a bundle whose graph outputs the novelty) gets the unfamiliar
// policy instead of the rule's zone or cascade. Two endpoints: edge_with_cloud_fallback puts it in that
// zone, rule_table gives the rule table's zone, learned keeps the model's; a prompt over the edge's
// context stays on the cloud. N endpoints (serving.routing._chooser.Choice):
// - edge_with_cloud_fallback: the cheapest device endpoint that may serve it first, its answer
//   checked, then the endpoint expected to answer best of the others; when no device endpoint may
//   serve it (its context, the policy, its needs), the rule's cascade stands.
// - rule_table: by price, as without the model: the cheapest endpoint that may serve it first, then
//   each costlier one.
// - learned: the rule's cascade, the reason saying the prompt is unfamiliar.
// A policy's prefer decides before either.
import { CLOUD, EDGE, ENDPOINT_RULES, FALLBACK, zoneFor } from "./contract.js";
import { decisionOf, makeDecision, rezoned, zoneCascade } from "./decision.js";
import { NONE, bestUnderPrice, callCosts, cascade, cheapestWithin, escalation } from "./endpoint-choice.js";
import { bandOf } from "./manifest.js";
import { codePointLength, formatFixed, formatG, roundHalfEven } from "./pytext.js";
import { declaresLanguages, lackingText, ruledOut, ruleName, withLanguage } from "./policy/capabilities.js";
import { LanguageDetectorMissing, NoFeasibleEndpoint, PolicyFileError } from "./policy/errors.js";
import { policySaid } from "./policy/rules.js";

export { ENDPOINT_RULES, NoFeasibleEndpoint };

/** The error when a request's language must be read and no detector was given. */
export function noDetector() {
  return new LanguageDetectorMissing("an endpoint declares `languages`, so each request's language is read, and this SDK has no " +
    "language detector of its own (the Python SDK's is py3langid): declare the language (needs: new Needs({language}), or the " +
    "metadata key \"language\"), or give Router.load a languageDetector (prompt -> ISO 639-1 code or null)");
}

const SIDES = [EDGE, CLOUD];

/** One bundle's choice among its endpoints (module doc); built once per bundle. */
export class Chooser {
  /**
   * @param {import("./endpoints.js").EndpointSpec[]} endpoints the bundle's endpoints, in its order
   * @param {Bands | Choice} rule
   * @param {{modelVersion: string, maxChars: number}} options
   */
  constructor(endpoints, rule, { modelVersion, maxChars }) {
    this.endpoints = [...endpoints];
    this.names = this.endpoints.map((e) => e.name);
    this.onDevice = this.endpoints.map((e) => e.where === "device");
    this.rule = rule;
    this.modelVersion = modelVersion;
    this.maxChars = maxChars;
    this.index = new Map(this.names.map((n, k) => [n, k]));
    /** name -> the spec's capabilities. */
    this.capabilities = new Map(this.endpoints.map((e) => [e.name, e.capabilities]));
    this.readsLanguage = declaresLanguages(this.capabilities);
    this.detector = null;  // Router.load's languageDetector
  }

  /** A policy must name this chooser's endpoints. */
  checkPolicy(policy) {
    if (policy !== null && policy.endpoints.join("\u0000") !== this.names.join("\u0000")) {
      throw new PolicyFileError(`${policy.source}: the policy is for endpoints ${policy.endpoints.join(", ")}; this router ` +
        `routes among ${this.names.join(", ")}: load it with endpoints: router.policyEndpoints`);
    }
  }

  /** The Decisions of scored requests (`scores`: Routing.scores'), `options` {policy, spending,
   * holders (per request)}; NoFeasibleEndpoint for the first no endpoint may serve. */
  decisions(requests, scores, options = {}) {
    const feasible = this.feasible(requests, scores.nTokens, options);
    return this.rule.decide(this, requests, scores, feasible);
  }

  /** What may serve each request, {tokens, lacking, verdicts}: each one's rounded token count, the
   * endpoints its needs rule out (name -> what each lacks) and the policy's verdict (null without a
   * policy); the rule reads the context limits itself. LanguageDetectorMissing when a language must
   * be read and none is declared nor detectable. */
  feasible(requests, nTokens, { policy = null, spending = null, holders = null } = {}) {
    const tokens = nTokens.map(roundHalfEven);
    const needed = requests.map((request) => {
      const reads = request.capabilities === null ? this.readsLanguage : declaresLanguages(request.capabilities);
      return reads ? this.languageOf(request) : request.needs;
    });
    const lacking = needed.map((w, i) => (w ? ruledOut(w, requests[i].capabilities ?? this.capabilities, this.names) : new Map()));
    if (policy === null) return { tokens, lacking, verdicts: requests.map(() => null) };
    const verdicts = requests.map((r, i) => policy.evaluate(r.text, tokens[i], r.precision, r.metadata,
      { spending, needs: needed[i], holders: holders?.[i] ?? null }));
    return { tokens, lacking, verdicts };
  }

  /** The request's needs with its language: declared (needs, or the metadata key "language"), else the
   * Router's languageDetector's; without a detector, LanguageDetectorMissing. */
  languageOf(request) {
    const declared = withLanguage(request.needs, request.text, request.metadata, null);
    if (declared !== null && declared.language !== null) return declared;
    if (this.detector === null) throw noDetector();
    return withLanguage(request.needs, request.text, request.metadata, this.detector);
  }

  /** [each request's [request, endpoint] usable: neither forbidden by the policy nor lacking what it needs]. */
  allowed(feasible) {
    return feasible.lacking.map((out, i) => {
      const verdict = feasible.verdicts[i];
      return this.names.map((name) => !out.has(name) && (verdict === null || verdict.allowed.includes(name)));
    });
  }

  /** (the reason with the policy's and the needs' part before the model's, the deciding rule's name,
   * the endpoints forbidden or ruled out): the same words for every bundle. */
  explained(reason, verdict, lacking) {
    const names = this.names;
    let forbidden = [];
    let ruleSaid = null;
    const rule = verdict === null ? null : verdict.rule;
    if (rule !== null) {
      forbidden = names.filter((n) => !verdict.allowed.includes(n));
      reason = `policy '${rule.name}': ${policySaid(verdict, forbidden)}; model: ${reason}`;
      ruleSaid = rule.name;
    }
    if (lacking.size) {  // ruled out like a forbidden endpoint, under the built-in needs:<capability> rule
      reason = `${ruleName(lacking)}: ${lackingText(lacking)}; ${reason}`;
      forbidden = names.filter((n) => forbidden.includes(n) || lacking.has(n));
      ruleSaid = ruleSaid || ruleName(lacking);
    }
    return [reason, ruleSaid, forbidden];
  }

  /** NoFeasibleEndpoint naming what left no endpoint: the policy, the needs, the context limits. */
  noneFeasible(nTokens, fits, verdict, lacking) {
    const names = this.names;
    const rule = verdict !== null && verdict.rule !== null ? verdict.rule.name : null;
    const forbidden = verdict === null ? [] : names.filter((n) => !verdict.allowed.includes(n));
    const parts = [];
    if (forbidden.length) parts.push(`the policy forbids ${forbidden.join(", ")}` + (rule ? ` (policy '${rule}')` : ""));
    if (lacking.size) {
      const needed = [...new Set([...lacking.values()].flat())];
      parts.push(`the request needs ${needed.join(", ")} (${ruleName(lacking)}): ${lackingText(lacking)}`);
    }
    const tooLong = names.filter((_, k) => !fits[k]);
    if (tooLong.length) parts.push(`~${nTokens} tokens exceed the context of ${tooLong.join(", ")}`);
    const rules = [rule, lacking.size ? ruleName(lacking) : null].filter(Boolean);
    throw new NoFeasibleEndpoint(`no endpoint may serve this request: ${parts.join("; ")}`, { rules });
  }
}

/** A two-endpoint bundle's rule (module doc): thresholds on the score by precision, the edge's context
 * limit, the unfamiliar policy; without a manifest, the rule table alone. */
export class Bands {
  /**
   * @param {any} manifest the bundle's (null: the rule table decides)
   * @param {import("./rules.js").RuleRouter} rules
   * @param {{edgeContextTokens: number, unfamiliarPolicy?: string | null}} options
   */
  constructor(manifest, rules, { edgeContextTokens, unfamiliarPolicy = null }) {
    this.manifest = manifest;
    this.rules = rules;
    this.edgeContextTokens = edgeContextTokens;
    this.unfamiliarPolicy = unfamiliarPolicy;
    this.scoreName = manifest && manifest.score.kind === "expected_gain" ? "expected gain" : "score";
  }

  decide(chooser, requests, scores, feasible) {
    const { verdicts, lacking } = feasible;
    return requests.map((request, i) => {
      let decision;
      if (scores.scores === null) {  // the rule table decides
        decision = this.rules.decide(request.text, request.precision, { degraded: true, note: scores.note ?? "" });
      } else {
        decision = this.modelDecision(chooser, request, scores.scores[i], feasible.tokens[i], scores.heads[i]);
        if (scores.novelty !== null) decision = this.familiar(decision, request, scores.novelty[i]);
      }
      const verdict = verdicts[i];
      if ((verdict === null || verdict.rule === null) && !lacking[i].size) return decision;  // no rule, no need: the zone as it is
      return this.placed(chooser, decision, verdict, lacking[i]);
    });
  }

  /** The learned zone and reason of one scored prompt. */
  modelDecision(chooser, request, score, nTokens, heads) {
    const precision = request.precision;
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
    const truncated = codePointLength(request.text) > chooser.maxChars;
    if (truncated) reason += `; features from the first ${chooser.maxChars} characters`;
    const [pEdge, pCloud] = heads.length === 2 ? heads : [null, null];
    return makeDecision(zone, { score, reason, degraded: false, model_version: chooser.modelVersion, precision,
      n_tokens: nTokens, truncated, p_edge: pEdge, p_cloud: pCloud,
      expected: heads.length === 2 ? { [EDGE]: pEdge, [CLOUD]: pCloud } : null });
  }

  /** Set the decision's novelty; an unfamiliar prompt gets the unfamiliar policy. Prompts over the
   * edge context limit stay on the cloud whatever the policy. */
  familiar(decision, request, novelty) {
    decision = { ...decision, novelty, unfamiliar: novelty > 1.0 };
    if (!decision.unfamiliar || this.unfamiliarPolicy === "learned") {
      if (decision.unfamiliar) decision.reason += `; unfamiliar prompt (novelty ${formatFixed(novelty, 2)}), learned zone kept`;
      return decision;
    }
    const note = `unfamiliar prompt (novelty ${formatFixed(novelty, 2)} > 1)`;
    if (decision.n_tokens > this.edgeContextTokens) return { ...decision, reason: `${note}; ${decision.reason}` };
    if (this.unfamiliarPolicy === "rule_table") {
      const ruled = this.rules.decide(request.text, decision.precision, { note });
      return rezoned(decision, ruled.zone, `${note}: ${ruled.reason}`);
    }
    return rezoned(decision, FALLBACK, `${note}: edge first, cloud fallback (learned: ${decision.reason})`);
  }

  /** A decision once the policy's verdict and what the request needs have their say: the zone within
   * the allowed sides, the cascade without a forbidden side, `rule`, `forbidden` and the reason.
   * NoFeasibleEndpoint when no side is left. */
  placed(chooser, decision, verdict, lacking) {
    let zone = decision.zone;
    if (verdict !== null && verdict.rule !== null) {
      const soft = verdict.preferred;
      zone = soft !== null && soft.zone !== null ? sideZone(soft.zone, verdict.allowed, null)
        : sideZone(zone, verdict.allowed, soft !== null ? soft.endpoint : null);
    }
    const [reason, rule, forbidden] = chooser.explained(decision.reason, verdict, lacking);
    if (lacking.size) {
      const allowed = SIDES.filter((s) => !forbidden.includes(s));
      if (!allowed.length) chooser.noneFeasible(decision.n_tokens, [true, true], verdict, lacking);
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
}

/** The zone for the allowed sides: one side alone is its own zone; with both, a preferred side runs
 * first (the edge with the cloud as fallback), else the model's zone stands. */
function sideZone(modelZone, allowed, first) {
  if (allowed.length === 1 && allowed[0] === EDGE) return EDGE;
  if ((allowed.length === 1 && allowed[0] === CLOUD) || first === CLOUD) return CLOUD;
  if (first === EDGE && modelZone === CLOUD) return FALLBACK;
  return modelZone;
}

/** An N-endpoint bundle's rule (module doc), from its manifest's endpoints section, with the
 * unfamiliar policy. */
export class Choice {
  /** @param {{spec: import("./endpoints.js").Endpoints, outputTokens: number, rule: string, parameter: number}} section */
  constructor(section, { unfamiliarPolicy = null } = {}) {
    this.section = section;
    this.rule = section.rule;
    this.parameter = section.parameter;
    this.unfamiliarPolicy = unfamiliarPolicy;  // UNFAMILIAR_POLICIES, or null
    this.said = `${this.rule} (${ENDPOINT_RULES[this.rule]} ${formatG(this.parameter, 4)})`;
  }

  decide(chooser, requests, scores, feasible) {
    const { cost, fits } = callCosts(chooser.endpoints, feasible.tokens, this.section.outputTokens);
    const allowed = chooser.allowed(feasible);
    const usable = fits.map((row, i) => row.map((ok, k) => ok && allowed[i][k]));
    const notes = requests.map(() => [null, null]);  // unfamiliar prompts': [instead of the rule's words, after them]
    let orders;
    if (scores.expected === null) orders = byPriceOrders(cost, usable);  // degraded: the cheapest feasible endpoint first
    else {
      orders = this.orders(chooser, scores.expected, cost, usable, feasible.verdicts);
      if (scores.novelty !== null) this.unfamiliar(chooser, scores, cost, usable, feasible.verdicts, orders, notes);
    }
    return requests.map((request, i) => this.decision(chooser, request, i, scores, cost[i], fits[i], feasible, orders[i], notes[i]));
  }

  /** Each request's cascade: the rule's, or from the endpoint a policy puts first. */
  orders(chooser, expected, cost, feasible, verdicts) {
    const first = verdicts.map((verdict, row) => {
      const soft = verdict?.preferred ?? null;
      return soft !== null && soft.endpoint !== null && feasible[row][chooser.index.get(soft.endpoint)] ? chooser.index.get(soft.endpoint) : NONE;
    });
    const plain = first.map((f) => f === NONE);
    let orders;
    if (this.rule === "cascade") orders = cascade(expected, cost, this.parameter, feasible);
    else {
      const ruled = this.first(expected, cost, feasible);
      orders = escalation(expected, cost, ruled.map((f, row) => (plain[row] ? f : NONE)), feasible);
    }
    if (!plain.every(Boolean)) {
      const steered = escalation(expected, cost, first, feasible);
      orders = orders.map((order, row) => (plain[row] ? order : steered[row]));
    }
    return orders;
  }

  /** The unfamiliar prompts' cascades (module doc), in place, and what their reasons say: what chose
   * the cascade instead of the rule, or after the rule's reason. */
  unfamiliar(chooser, scores, cost, usable, verdicts, orders, notes) {
    const names = chooser.names, policy = this.unfamiliarPolicy;
    let byPrice = null;
    scores.novelty.forEach((value, row) => {
      const verdict = verdicts[row];
      if (value <= 1.0 || !orders[row].length || (verdict?.preferred ?? null) !== null) return;
      const note = `unfamiliar prompt (novelty ${formatFixed(value, 2)} > 1)`;
      if (policy === "learned") {
        notes[row] = [null, `unfamiliar prompt (novelty ${formatFixed(value, 2)}), learned cascade kept`];
        return;
      }
      if (policy === "rule_table") {
        byPrice = byPrice ?? byPriceOrders(cost, usable);
        orders[row] = byPrice[row];
        const first = orders[row][0];
        notes[row] = [`${note}: by price, the cheapest first, ${names[first]} ($${formatFixed(cost[row][first], 5)})`, null];
        return;
      }
      const ok = usableIndices(usable[row]);
      const device = ok.filter((k) => chooser.onDevice[k]);
      if (!device.length) {
        notes[row] = [null, `${note}, and no device endpoint may serve it: the rule's cascade kept`];
        return;
      }
      const c = cost[row], p = scores.expected[row];
      const first = device.reduce((a, k) => (c[k] < c[a] || (c[k] === c[a] && k < a) ? k : a));
      const rest = ok.filter((k) => k !== first);
      // the largest expected quality, then the cheaper, then the first index (Python's max over (p, -cost, -k))
      const best = rest.length ? rest.reduce((a, k) => (p[k] > p[a] || (p[k] === p[a] && (c[k] < c[a] || (c[k] === c[a] && k < a))) ? k : a)) : null;
      orders[row] = best === null ? [first] : [first, best];
      const behind = best === null ? "" : `, then the best expected, ${names[best]} (${formatFixed(p[best], 3)})`;
      const said = `${names[first]} (expected ${formatFixed(p[first], 3)}, $${formatFixed(c[first], 5)})${behind}`;
      notes[row] = [`${note}: the cheapest device endpoint first, ${said}`, null];
    });
  }

  /** The rule's first endpoint per request (a cascade's first step), NONE where none is feasible. */
  first(expected, cost, feasible) {
    if (this.rule === "cheapest_within") return cheapestWithin(expected, cost, this.parameter, feasible);
    if (this.rule === "best_under_price") return bestUnderPrice(expected, cost, this.parameter, feasible);
    return cascade(expected, cost, this.parameter, feasible).map((o) => (o.length ? o[0] : NONE));
  }

  decision(chooser, request, row, scores, cost, fits, feasible, order, [instead, afterwards] = [null, null]) {
    const names = chooser.names, nTokens = feasible.tokens[row];
    const verdict = feasible.verdicts[row], lacking = feasible.lacking[row];
    if (!order.length) chooser.noneFeasible(nTokens, fits, verdict, lacking);
    const first = order[0];
    const path = order.map((k) => names[k]);
    const steps = path.join(" -> ");
    const expected = scores.expected === null ? null : scores.expected[row];
    let reason = expected === null
      ? `${scores.note}: the cheapest feasible endpoint first, ${names[first]} ($${formatFixed(cost[first], 5)}); cascade ${steps}`
      : `${instead ?? `${this.said}: ${names[first]} (expected ${formatFixed(expected[first], 3)}, $${formatFixed(cost[first], 5)})`}; ` +
        `cascade ${steps}` + (afterwards ? `; ${afterwards}` : "");
    const tooLong = names.filter((_, k) => !fits[k]);
    if (tooLong.length) reason += `; ~${nTokens} tokens exceed the context of ${tooLong.join(", ")}`;
    const truncated = codePointLength(request.text) > chooser.maxChars;
    if (truncated) reason += `; features from the first ${chooser.maxChars} characters`;
    const [said, ruleSaid, forbidden] = chooser.explained(reason, verdict, lacking);
    const novelty = expected === null || scores.novelty === null ? null : scores.novelty[row];
    return decisionOf({ cascade: path, score: expected === null ? 0 : expected[first], reason: said, degraded: expected === null,
      model_version: chooser.modelVersion, on_device: order.map((k) => chooser.onDevice[k]), checked: path.slice(0, -1),
      precision: request.precision, n_tokens: nTokens, truncated, novelty, unfamiliar: novelty !== null && novelty > 1.0, rule: ruleSaid,
      forbidden, expected: expected === null ? null : Object.fromEntries(names.map((n, k) => [n, expected[k]])),
    });
  }
}

/** Each request's cascade by price alone (serving.routing._chooser._by_price): the cheapest endpoint that
 * may serve it first, then each costlier one (a bundle that cannot score; rule_table for an unfamiliar prompt). */
function byPriceOrders(cost, feasible) {
  const first = bestUnderPrice(cost.map((row) => row.map(() => 0)), cost, 1, feasible);
  const byPrice = cost.map((row) => {  // each endpoint's rank by price, ties in index order (a stable argsort's)
    const rank = new Array(row.length);
    [...row.keys()].sort((a, b) => row[a] - row[b] || a - b).forEach((k, r) => { rank[k] = r; });
    return rank;
  });
  return escalation(byPrice, cost, first, feasible);
}

const usableIndices = (row) => row.flatMap((ok, k) => (ok ? [k] : []));
