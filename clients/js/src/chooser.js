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
//
// A request in a conversation (its state: conversations.js) is a Turn: the rule weighs what moving
// the conversation costs. N endpoints: each call's price plus weight x the endpoint's switch cost
// (every choice rule prices the switch), or, weight Infinity, the endpoint that answered the last
// turn first while it may serve. Two endpoints: the score moved by the same dollars in the bundle's
// own exchange rate (its upper threshold over the cloud call's price), or, weight Infinity, the last
// side kept while the edge may serve. The reason says whether the turn stays or moves and what the
// re-read costs (serving.routing._chooser, word for word).
//
// A bundle carrying turn_evidence.json (evidence.js) first moves a conversation turn's scores by how its
// last turn went (N endpoints: each endpoint's expected quality; two endpoints: the heads and the
// expected-gain score), and the rule decides on those; the reason then ends "the last turn (<outcome> on
// <endpoint>) weighed in".
import { CLOUD, EDGE, ENDPOINT_RULES, FALLBACK, zoneFor } from "./contract.js";
import { decisionOf, makeDecision, zoneCascade } from "./decision.js";
import { NONE, bestUnderPrice, callCosts, cascade, cheapestWithin, escalation } from "./endpoint-choice.js";
import { bandOf } from "./manifest.js";
import { codePointLength, formatFixed, formatG, roundHalfEven } from "./pytext.js";
import { declaresLanguages, lackingText, ruledOut, ruleName, withLanguage } from "./policy/capabilities.js";
import { LanguageDetectorMissing, NoFeasibleEndpoint, PolicyFileError } from "./policy/errors.js";
import { policySaid } from "./policy/rules.js";
import { PRICED, nowSeconds, switchCosts } from "./conversations.js";
import { withEvidence } from "./evidence.js";

export { ENDPOINT_RULES, NoFeasibleEndpoint };

/** The error when a request's language must be read and no detector was given. */
export function noDetector() {
  return new LanguageDetectorMissing("an endpoint declares `languages`, so each request's language is read, and this SDK has no " +
    "language detector of its own (the Python SDK's is py3langid): declare the language (needs: new Needs({language}), or the " +
    "metadata key \"language\"), or give Router.load a languageDetector (prompt -> ISO 639-1 code or null)");
}

const SIDES = [EDGE, CLOUD];

/** f"{x:+.{digits}f}" in Python: the sign always written. */
function signed(x, digits) {
  return x < 0 || Object.is(x, -0) ? formatFixed(x, digits) : `+${formatFixed(x, digits)}`;
}

/** One request's conversation as the rule reads it (serving.routing._chooser.Turn): its turn number, the
 * endpoint (by index) that answered the last turn (null: none of this chooser's), each endpoint's price
 * change in dollars for where the conversation has been and the history tokens it would read again
 * (conversations.js switchCosts: delta, missing), and the weight. */
export class Turn {
  constructor(number, last, change, missing, weight) {
    Object.assign(this, { number, last, switch: change, missing, weight });
  }

  /** [whether the conversation moves, what the reason says of it] once the rule put `first` first;
   * `plain`: the rule's first without the conversation's prices (null: not asked). */
  said(names, first, plain) {
    const last = this.last;
    if (last === null) return [null, `conversation turn ${this.number}`];
    if (first === last) {
      if (plain !== null && plain !== last) return [false, `conversation turn ${this.number} stays on ${names[last]}: ${this.move(names, plain)}`];
      return [false, `conversation turn ${this.number} stays on ${names[last]}`];
    }
    return [true, `conversation turn ${this.number} moves from ${names[last]} to ${this.move(names, first, "reads")}`];
  }

  /** Each endpoint's switch cost over staying on the last turn's (Decision.switch_costs), or null for a
   * turn without a last endpoint. */
  overStaying(names) {
    if (this.last === null) return null;
    const stay = this.switch[this.last];
    return Object.fromEntries(names.map((name, k) => [name, this.switch[k] - stay]));
  }

  move(names, to, verb = "would read") {
    const extra = this.last !== null ? this.switch[to] - this.switch[this.last] : 0;
    return `${names[to]}, which ${verb} ${this.missing[to]} history tokens again ($${signed(extra, 5)} over staying)`;
  }
}

/** Whether any endpoint's switch cost is not 0 (numpy's any()). */
const anySwitch = (turn) => turn.switch.some((x) => x !== 0);

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
    /** How the previous turn moves each endpoint's expected quality (the bundle's turn_evidence.json:
     * evidence.js's TurnEvidence), or null. */
    this.evidence = null;
  }

  /** A policy must name this chooser's endpoints. */
  checkPolicy(policy) {
    if (policy !== null && policy.endpoints.join("\u0000") !== this.names.join("\u0000")) {
      throw new PolicyFileError(`${policy.source}: the policy is for endpoints ${policy.endpoints.join(", ")}; this router ` +
        `routes among ${this.names.join(", ")}: load it with endpoints: router.policyEndpoints`);
    }
  }

  /** The Decisions of scored requests (`scores`: Routing.scores'), `options` {policy, spending,
   * holders (per request), states, stickiness, outputTokens, now}; NoFeasibleEndpoint for the first no
   * endpoint may serve. `states`: each request's conversation state (null: not in a conversation, or
   * its first turn; `states` null: no request's state is read), whose switch costs the rule weighs as
   * `stickiness` says at time `now` (seconds; default now); `outputTokens` the answers' expected length. */
  decisions(requests, scores, options = {}) {
    const feasible = this.feasible(requests, scores.nTokens, options);
    const { states = null, stickiness = PRICED, outputTokens = 0, now = null } = options;
    if (states === null) return this.rule.decide(this, requests, scores, feasible);
    feasible.turns = this.turns(requests, feasible.tokens, states, stickiness, outputTokens, now);
    const evidence = this.evidence;
    if (evidence === null) return this.rule.decide(this, requests, scores, feasible);
    const gain = this.rule instanceof Bands && this.rule.expectedGain;
    const weighed = withEvidence(scores, states, this.names, evidence, gain);
    const decisions = this.rule.decide(this, requests, weighed, feasible);
    if (weighed !== scores) {
      decisions.forEach((decision, i) => {
        const state = states[i] ?? null;
        if (state !== null && state.turns > 0 && state.endpoint !== null) {
          decision.reason += `; the last turn (${state.outcome ?? "None"} on ${state.endpoint}) weighed in`;
        }
      });
    }
    return decisions;
  }

  /** Each request's Turn: null without a conversation; a first turn's has no last endpoint. `now`:
   * the time (seconds since the epoch) the caches' ages are read at, default now. */
  turns(requests, tokens, states, stickiness, outputTokens, now = null) {
    const at = now ?? nowSeconds();
    const nothing = this.names.map(() => 0);
    return requests.map((request, i) => {
      const state = states[i] ?? null;
      if (request.conversation === null) return null;
      if (state === null || state.endpoint === null) return new Turn((state === null ? 0 : state.turns) + 1, null, nothing, nothing, stickiness.weight);
      const [change, missing] = switchCosts(this.endpoints, state, tokens[i], outputTokens, stickiness.secondsPrice, at);
      return new Turn(state.turns + 1, this.index.get(state.endpoint) ?? null, change, missing, stickiness.weight);
    });
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
    if (policy === null) return { tokens, lacking, verdicts: requests.map(() => null), turns: null };
    const verdicts = requests.map((r, i) => policy.evaluate(r.text, tokens[i], r.precision, r.metadata,
      { spending, needs: needed[i], holders: holders?.[i] ?? null }));
    return { tokens, lacking, verdicts, turns: null };
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
    this.expectedGain = Boolean(manifest) && manifest.score.kind === "expected_gain";
    this.scoreName = this.expectedGain ? "expected gain" : "score";
  }

  decide(chooser, requests, scores, feasible) {
    const { verdicts, lacking } = feasible;
    return requests.map((request, i) => {
      let decision;
      if (scores.scores === null) {  // the rule table decides (a conversation's turn is not weighed)
        decision = this.rules.decide(request.text, request.precision, { degraded: true, note: scores.note ?? "" });
      } else {
        const score = scores.scores[i], nTokens = feasible.tokens[i], heads = scores.heads[i];
        const novelty = scores.novelty === null ? null : scores.novelty[i];
        const turn = feasible.turns === null || feasible.turns === undefined ? null : feasible.turns[i];
        const { zone, reason, truncated, switched } = turn === null
          ? { ...this.modelZone(chooser, request, score, nTokens, novelty), switched: null }
          : this.turnZone(chooser, request, score, nTokens, novelty, turn);
        const [pEdge, pCloud] = heads.length === 2 ? heads : [null, null];
        decision = makeDecision(zone, { score, reason, degraded: false, model_version: chooser.modelVersion,
          precision: request.precision, n_tokens: nTokens, truncated, novelty, unfamiliar: novelty !== null && novelty > 1.0,
          expected: heads.length === 2 ? { [EDGE]: pEdge, [CLOUD]: pCloud } : null,
          turn: turn === null ? null : turn.number, switched, switch_costs: turn === null ? null : turn.overStaying(SIDES) });
      }
      const verdict = verdicts[i];
      if ((verdict === null || verdict.rule === null) && !lacking[i].size) return decision;  // no rule, no need: the zone as it is
      const placed = this.placed(chooser, decision, verdict, lacking[i]);
      const turn = feasible.turns === null || feasible.turns === undefined || scores.scores === null ? null : feasible.turns[i];
      if (turn !== null && turn.last !== null) placedTurn(placed, turn);
      return placed;
    });
  }

  /** {zone, reason, truncated (the features read only the prompt's head)} of one scored prompt: the
   * thresholds of its precision, the edge's context limit, the unfamiliar policy. */
  modelZone(chooser, request, score, nTokens, novelty) {
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
    if (novelty !== null && novelty > 1.0) [zone, reason] = this.familiar(request, zone, reason, nTokens, novelty);
    return { zone, reason, truncated };
  }

  /** modelZone for a conversation's turn, and whether it moves the conversation: the switch costs move
   * the score in the bundle's own exchange rate (its upper threshold is what a cloud call is worth: the
   * rate is that threshold over the cloud call's price), or, weight Infinity, the last turn's side
   * first while the edge may serve (serving.routing._chooser.Bands._turn_zone). */
  turnZone(chooser, request, score, nTokens, novelty, turn) {
    const last = turn.last;
    if (last === null) {
      const alone = this.modelZone(chooser, request, score, nTokens, novelty);
      return { ...alone, reason: `${alone.reason}; ${turn.said(SIDES, 0, null)[1]}`, switched: null };
    }
    const alone = this.modelZone(chooser, request, score, nTokens, novelty);
    const plain = alone.zone;
    let { zone, reason, truncated } = alone, shift = 0;
    if (turn.weight === Infinity) {
      if (nTokens <= this.edgeContextTokens) zone = last === 1 ? CLOUD : plain !== CLOUD ? plain : FALLBACK;  // stay on the last side
    } else if (turn.weight > 0 && anySwitch(turn)) {
      const { hi } = bandOf(this.manifest, request.precision);
      const cloudPrice = chooser.endpoints[1].callCost(nTokens) || 0;
      if (hi > 0 && cloudPrice > 0) {
        shift = hi / cloudPrice * turn.weight * (turn.switch[1] - turn.switch[0]);
        ({ zone, reason, truncated } = this.modelZone(chooser, request, score - shift, nTokens, novelty));
      }
    }
    let [switched, said] = turn.said(SIDES, zone === CLOUD ? 1 : 0, plain === CLOUD ? 1 : 0);
    if (shift) said += ` (${this.scoreName} ${formatFixed(score, 3)} ${signed(-shift, 3)} for the switch)`;
    return { zone, reason: `${reason}; ${said}`, truncated, switched };
  }

  /** [zone, reason] of an unfamiliar prompt: the unfamiliar policy's. Prompts over the edge context
   * limit stay on the cloud whatever the policy. */
  familiar(request, zone, reason, nTokens, novelty) {
    if (this.unfamiliarPolicy === "learned") return [zone, `${reason}; unfamiliar prompt (novelty ${formatFixed(novelty, 2)}), learned zone kept`];
    const note = `unfamiliar prompt (novelty ${formatFixed(novelty, 2)} > 1)`;
    if (nTokens > this.edgeContextTokens) return [zone, `${note}; ${reason}`];
    if (this.unfamiliarPolicy === "rule_table") {
      const ruled = this.rules.decide(request.text, request.precision, { note });
      return [ruled.zone, `${note}: ${ruled.reason}`];
    }
    return [FALLBACK, `${note}: edge first, cloud fallback (learned: ${reason})`];
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
    return decisionOf({ ...decision, cascade, on_device, checked, reason, rule, forbidden, switch_costs: decision.switch_costs });
  }
}

/** A two-endpoint turn once the policy or the needs had their say (Bands.placed): when they changed the
 * endpoint run first (a forbidden last endpoint is never stayed on), `switched` and the reason's
 * conversation part say what runs now; in place (serving.routing._chooser._placed_turn). */
function placedTurn(decision, turn) {
  const [moved, said] = turn.said(SIDES, SIDES.indexOf(decision.endpoint), null);
  if (moved === decision.switched) return;
  const ours = `conversation turn ${turn.number} `;
  decision.reason = decision.reason.split("; ").map((part) => (part.startsWith(ours) ? said : part)).join("; ");
  decision.switched = moved;
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
    const turns = feasible.turns ?? null;
    const priced = turns === null ? cost : withSwitches(cost, turns);  // what each endpoint costs this turn
    const orders = this.ordered(chooser, scores, priced, usable, feasible, notes);
    let plain = requests.map(() => null);  // the rule's first without the switch costs
    if (turns !== null) {
      const unpriced = priced === cost ? orders : this.ordered(chooser, scores, cost, usable, feasible, [...notes]);
      plain = unpriced.map((o) => (o.length ? o[0] : null));
      stay(orders, turns, usable, feasible.verdicts);
    }
    return requests.map((request, i) => this.decision(chooser, request, i, scores, cost[i], fits[i], feasible, orders[i], notes[i], plain[i]));
  }

  /** Each request's cascade at these prices (an unfamiliar prompt's say goes into `notes`). */
  ordered(chooser, scores, cost, usable, feasible, notes) {
    if (scores.expected === null) return byPriceOrders(cost, usable);  // degraded: the cheapest feasible endpoint first
    const orders = this.orders(chooser, scores.expected, cost, usable, feasible.verdicts);
    if (scores.novelty !== null) this.unfamiliar(chooser, scores, cost, usable, feasible.verdicts, orders, notes);
    return orders;
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

  decision(chooser, request, row, scores, cost, fits, feasible, order, [instead, afterwards] = [null, null], plain = null) {
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
    const turn = feasible.turns === null || feasible.turns === undefined ? null : feasible.turns[row];
    let switched = null;
    if (turn !== null) {
      let spoken;
      [switched, spoken] = turn.said(names, first, plain);
      reason += `; ${spoken}`;
    }
    const [said, ruleSaid, forbidden] = chooser.explained(reason, verdict, lacking);
    const novelty = expected === null || scores.novelty === null ? null : scores.novelty[row];
    return decisionOf({ cascade: path, score: expected === null ? 0 : expected[first], reason: said, degraded: expected === null,
      model_version: chooser.modelVersion, on_device: order.map((k) => chooser.onDevice[k]), checked: path.slice(0, -1),
      precision: request.precision, n_tokens: nTokens, truncated, novelty, unfamiliar: novelty !== null && novelty > 1.0, rule: ruleSaid,
      forbidden, expected: expected === null ? null : Object.fromEntries(names.map((n, k) => [n, expected[k]])),
      turn: turn === null ? null : turn.number, switched, switch_costs: turn === null ? null : turn.overStaying(names),
    });
  }
}

/** Each call's price plus its weighted switch cost (the same array when no switch costs anything). */
function withSwitches(cost, turns) {
  const rows = turns.flatMap((t, i) => (t !== null && t.weight > 0 && t.weight < Infinity && anySwitch(t) ? [i] : []));
  if (!rows.length) return cost;
  const priced = cost.map((row) => [...row]);
  for (const i of rows) {
    const turn = turns[i];
    priced[i] = priced[i].map((c, k) => c + turn.weight * turn.switch[k]);
  }
  return priced;
}

/** Always stay (weight Infinity): the endpoint that answered the last turn first while it may serve it
 * (a policy's prefer still decides), the rest of the cascade behind it; in place. */
function stay(orders, turns, usable, verdicts) {
  turns.forEach((turn, row) => {
    if (turn === null || turn.weight < Infinity || turn.last === null || !usable[row][turn.last]) return;
    if ((verdicts[row]?.preferred ?? null) !== null) return;
    const last = turn.last;
    orders[row] = [last, ...orders[row].filter((k) => k !== last)];
  });
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
