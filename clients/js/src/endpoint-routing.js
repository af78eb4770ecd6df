// An N-endpoint bundle's decisions (serving/endpoint_routing.py, docs/endpoints.md#n-endpoint-bundles):
// each endpoint's calibrated P(good answer) from the bundle's graph, the price of each call at the
// prompt's token count, the endpoints' context limits as feasibility, then the bundle's choice rule
// (endpoint-choice.js: the functions Python's SDK and `make endpoints` run), with Python's reasons.
//
// A Decision of an N-endpoint bundle: `endpoint` the first endpoint to run, `cascade` the order to
// try them in when an answer fails (the rule's cascade, or the chosen endpoint then each costlier
// one expected to do better: escalation), `expected` every endpoint's probability by name, `score`
// the chosen endpoint's. `target` is "edge" when the first endpoint runs on the device, else
// "cloud"; `zone` edge_with_cloud_fallback when a device endpoint comes first and a cloud endpoint
// later in the cascade, else the target. No feasible endpoint: NoFeasibleEndpoint, never a
// silent default.
//
// The policy (policy/rules.js) and what each request needs (policy/capabilities.js) as the Python
// SDK applies them: an endpoint a rule forbids, or one lacking a needed capability (or language), is
// never in the cascade; a force leaves its endpoint alone; a prefer puts its endpoint first when it
// is feasible (the cascade climbs from it); the decision's `rule`, `forbidden` and reason say so.
//
// An unfamiliar prompt (novelty above 1: a bundle whose graph outputs the novelty) gets the
// unfamiliar policy instead of the rule's cascade (serving.routing._chooser.Choice):
// - edge_with_cloud_fallback: the cheapest device endpoint that may serve it first, its answer
//   checked, then the endpoint expected to answer best of the others; when no device endpoint may
//   serve it (its context, the policy, its needs), the rule's cascade stands.
// - rule_table: by price, as without the model: the cheapest endpoint that may serve it first,
//   then each costlier one.
// - learned: the rule's cascade, the reason saying the prompt is unfamiliar.
// A policy's prefer decides before either.
import { CLOUD, EDGE, FALLBACK } from "./contract.js";
import { decisionOf } from "./decision.js";
import { NONE, bestUnderPrice, callCosts, cascade, cheapestWithin, escalation } from "./endpoint-choice.js";
import { codePointLength, formatFixed, formatG } from "./pytext.js";
import { declaresLanguages, lackingText, ruledOut, ruleName, withLanguage } from "./policy/capabilities.js";
import { LanguageDetectorMissing, NoFeasibleEndpoint } from "./policy/errors.js";
import { PolicyFileError } from "./policy/errors.js";
import { policySaid } from "./policy/rules.js";

/** A choice rule -> the name of its one parameter (serving.bundle._manifest.ENDPOINT_RULES). */
export const ENDPOINT_RULES = Object.freeze({ cheapest_within: "margin", best_under_price: "price", cascade: "start_margin" });

export { NoFeasibleEndpoint };

/** The error when a request's language must be read and no detector was given. */
export function noDetector() {
  return new LanguageDetectorMissing("an endpoint declares `languages`, so each request's language is read, and this SDK has no " +
    "language detector of its own (the Python SDK's is py3langid): declare the language (needs: new Needs({language}), or the " +
    "metadata key \"language\"), or give Router.load a languageDetector (prompt -> ISO 639-1 code or null)");
}

export class EndpointChooser {
  /** @param {{spec: import("./endpoints.js").Endpoints, outputTokens: number, rule: string, parameter: number}} section */
  constructor(section, modelVersion, maxChars, unfamiliarPolicy = null) {
    this.section = section;
    this.endpoints = [...section.spec];
    this.names = this.endpoints.map((e) => e.name);
    this.onDevice = this.endpoints.map((e) => e.where === "device");
    this.rule = section.rule;
    this.parameter = section.parameter;
    this.modelVersion = modelVersion;
    this.maxChars = maxChars;
    this.unfamiliarPolicy = unfamiliarPolicy;  // serving.scoring._novelty's UNFAMILIAR_POLICIES, or null
    this.said = `${this.rule} (${ENDPOINT_RULES[this.rule]} ${formatG(this.parameter, 4)})`;
    this.index = new Map(this.names.map((n, k) => [n, k]));
    /** name -> the spec's capabilities. */
    this.capabilities = new Map(this.endpoints.map((e) => [e.name, e.capabilities]));
    this.readsLanguage = declaresLanguages(this.capabilities);
    this.detector = null;  // Router.load's languageDetector
  }

  /** A policy must name this bundle's endpoints. */
  checkPolicy(policy) {
    if (policy !== null && policy.endpoints.join("\u0000") !== this.names.join("\u0000")) {
      throw new PolicyFileError(`${policy.source}: the policy is for endpoints ${policy.endpoints.join(", ")}; this bundle ` +
        `routes among ${this.names.join(", ")}: load it with endpoints: router.policyEndpoints`);
    }
  }

  /** [each call's price, whether the prompt fits each context, what may serve it, the policy's
   * verdicts, what each request's needs rule out]: NoFeasibleEndpoint when the policy forbids every endpoint. */
  feasible(prompts, precisions, tokens, { policy = null, metadata = null, spending = null, needs = null, capabilities = null,
    holders = null } = {}) {
    const { cost, fits } = callCosts(this.endpoints, tokens, this.section.outputTokens);
    const n = prompts.length;
    let needed = needs ?? new Array(n).fill(null);
    const metadatas = metadata ?? new Array(n).fill(null);
    const known = capabilities ?? this.capabilities;
    const readsLanguage = capabilities === null ? this.readsLanguage : declaresLanguages(capabilities);
    if (readsLanguage) {
      needed = needed.map((w, i) => {
        const declared = withLanguage(w, prompts[i], metadatas[i], null);
        if (declared !== null && declared.language !== null) return declared;
        if (this.detector === null) throw noDetector();
        return withLanguage(w, prompts[i], metadatas[i], this.detector);
      });
    }
    const lacking = needed.map((w) => (w ? ruledOut(w, known, this.names) : new Map()));
    let feasible = fits.map((row, i) => row.map((ok, k) => ok && !lacking[i].has(this.names[k])));
    if (policy === null) return { cost, fits, feasible, verdicts: new Array(n).fill(null), lacking };
    const verdicts = prompts.map((p, i) => policy.evaluate(p, tokens[i], precisions[i], metadatas[i],
      { spending, needs: needed[i], holders: holders?.[i] ?? null }));
    feasible = feasible.map((row, i) => row.map((ok, k) => ok && verdicts[i].allowed.includes(this.names[k])));
    return { cost, fits, feasible, verdicts, lacking };
  }

  /** Each request's cascade: the rule's, or from the endpoint a policy puts first. */
  orders(expected, cost, feasible, verdicts) {
    const first = verdicts.map((verdict, row) => {
      const soft = verdict?.preferred ?? null;
      return soft !== null && soft.endpoint !== null && feasible[row][this.index.get(soft.endpoint)] ? this.index.get(soft.endpoint) : NONE;
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

  /** Decisions of scored prompts (`expected` [n][N] from the graph, `nTokens` rounded counts,
   * `novelty` [n] or null without a familiarity reference), the policy and needs applied (`options`:
   * feasible's); NoFeasibleEndpoint for the first prompt no endpoint may serve. */
  decisions(prompts, precisions, expected, nTokens, options = {}, novelty = null) {
    const { cost, fits, feasible, verdicts, lacking } = this.feasible(prompts, precisions, nTokens, options);
    const orders = this.orders(expected, cost, feasible, verdicts);
    const notes = prompts.map(() => [null, null]);  // unfamiliar prompts': [instead of the rule's words, after them]
    if (novelty !== null) this.unfamiliar(expected, novelty, cost, feasible, verdicts, orders, notes);
    return prompts.map((p, i) => this.decision(p, precisions[i], nTokens[i], expected[i], cost[i], fits[i], orders[i],
      verdicts[i], lacking[i], "", novelty === null ? null : novelty[i], notes[i]));
  }

  /** The unfamiliar prompts' cascades (module comment), in place, and what their reasons say
   * (serving.routing._chooser.Choice._unfamiliar): what chose the cascade instead of the rule, or after the rule's reason. */
  unfamiliar(expected, novelty, cost, feasible, verdicts, orders, notes) {
    const names = this.names, policy = this.unfamiliarPolicy;
    let byPrice = null;
    novelty.forEach((value, row) => {
      const verdict = verdicts[row];
      if (value <= 1.0 || !orders[row].length || (verdict?.preferred ?? null) !== null) return;
      const note = `unfamiliar prompt (novelty ${formatFixed(value, 2)} > 1)`;
      if (policy === "learned") {
        notes[row] = [null, `unfamiliar prompt (novelty ${formatFixed(value, 2)}), learned cascade kept`];
        return;
      }
      if (policy === "rule_table") {
        byPrice = byPrice ?? byPriceOrders(cost, feasible);
        orders[row] = byPrice[row];
        const first = orders[row][0];
        notes[row] = [`${note}: by price, the cheapest first, ${names[first]} ($${formatFixed(cost[row][first], 5)})`, null];
        return;
      }
      const usable = usableIndices(feasible[row]);
      const device = usable.filter((k) => this.onDevice[k]);
      if (!device.length) {
        notes[row] = [null, `${note}, and no device endpoint may serve it: the rule's cascade kept`];
        return;
      }
      const c = cost[row], p = expected[row];
      const first = device.reduce((a, k) => (c[k] < c[a] || (c[k] === c[a] && k < a) ? k : a));
      const rest = usable.filter((k) => k !== first);
      // the largest expected quality, then the cheaper, then the first index (Python's max over (p, -cost, -k))
      const best = rest.length ? rest.reduce((a, k) => (p[k] > p[a] || (p[k] === p[a] && (c[k] < c[a] || (c[k] === c[a] && k < a))) ? k : a)) : null;
      orders[row] = best === null ? [first] : [first, best];
      const behind = best === null ? "" : `, then the best expected, ${names[best]} (${formatFixed(p[best], 3)})`;
      const said = `${names[first]} (expected ${formatFixed(p[first], 3)}, $${formatFixed(c[first], 5)})${behind}`;
      notes[row] = [`${note}: the cheapest device endpoint first, ${said}`, null];
    });
  }

  /** Decisions when the graph could not score (`note` says why): the cheapest feasible endpoint
   * first, then each costlier one; `degraded` set. */
  degraded(prompts, precisions, nTokens, note, options = {}) {
    const { cost, fits, feasible, verdicts, lacking } = this.feasible(prompts, precisions, nTokens, options);
    const orders = byPriceOrders(cost, feasible);
    return prompts.map((p, i) => this.decision(p, precisions[i], nTokens[i], null, cost[i], fits[i], orders[i], verdicts[i],
      lacking[i], note));
  }

  /** The rule's first endpoint per request (a cascade's first step), NONE where none is feasible. */
  first(expected, cost, feasible) {
    if (this.rule === "cheapest_within") return cheapestWithin(expected, cost, this.parameter, feasible);
    if (this.rule === "best_under_price") return bestUnderPrice(expected, cost, this.parameter, feasible);
    return cascade(expected, cost, this.parameter, feasible).map((o) => (o.length ? o[0] : NONE));
  }

  decision(prompt, precision, nTokens, expected, cost, fits, order, verdict = null, lacking = new Map(), note = "", novelty = null,
    [instead, afterwards] = [null, null]) {
    const names = this.names;
    if (!order.length) noneFeasible(names, nTokens, fits, verdict, lacking);
    const first = order[0];
    const steps = order.map((k) => names[k]).join(" -> ");
    let reason = expected === null
      ? `${note}: the cheapest feasible endpoint first, ${names[first]} ($${formatFixed(cost[first], 5)}); cascade ${steps}`
      : `${instead ?? `${this.said}: ${names[first]} (expected ${formatFixed(expected[first], 3)}, $${formatFixed(cost[first], 5)})`}; ` +
        `cascade ${steps}` + (afterwards ? `; ${afterwards}` : "");
    const tooLong = names.filter((_, k) => !fits[k]);
    if (tooLong.length) reason += `; ~${nTokens} tokens exceed the context of ${tooLong.join(", ")}`;
    const truncated = codePointLength(prompt) > this.maxChars;
    if (truncated) reason += `; features from the first ${this.maxChars} characters`;
    const [said, ruleSaid, forbidden] = explained(names, reason, verdict, lacking);
    const cascade = order.map((k) => names[k]);
    return decisionOf({ cascade, score: expected === null ? 0 : expected[first], reason: said, degraded: expected === null,
      model_version: this.modelVersion, on_device: order.map((k) => this.onDevice[k]), checked: cascade.slice(0, -1),
      precision, n_tokens: nTokens, truncated, novelty, unfamiliar: novelty !== null && novelty > 1.0, rule: ruleSaid, forbidden,
      expected: expected === null ? null : Object.fromEntries(names.map((n, k) => [n, expected[k]])),
    });
  }
}

/** Each request's cascade by price alone (serving.routing._chooser._by_price): the cheapest endpoint that may
 * serve it first, then each costlier one (a bundle that cannot score; rule_table for an unfamiliar prompt). */
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

/** (the reason with the policy's and the needs' part before the model's, the deciding rule's name,
 * the endpoints forbidden or ruled out): the same words for every bundle (serving.routing._chooser's explained). */
export function explained(names, reason, verdict, lacking) {
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
export function noneFeasible(names, nTokens, fits, verdict, lacking) {
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
