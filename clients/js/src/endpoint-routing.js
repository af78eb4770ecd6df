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
// silent default. This SDK has no policy layer, so no endpoint is forbidden by a rule.
import { CLOUD, EDGE, FALLBACK } from "./contract.js";
import { makeDecision } from "./decision.js";
import { NONE, bestUnderPrice, callCosts, cascade, cheapestWithin, escalation } from "./endpoint-choice.js";
import { codePointLength, formatFixed, formatG } from "./pytext.js";

/** A choice rule -> the name of its one parameter (serving.manifest.ENDPOINT_RULES). */
export const ENDPOINT_RULES = Object.freeze({ cheapest_within: "margin", best_under_price: "price", cascade: "start_margin" });

/** No endpoint may serve a request (the Python SDK's serving.policy.NoFeasibleEndpoint): every
 * endpoint's context is too small for the prompt. Nothing was called. `rules`: the policy rules
 * involved (none in this SDK). */
export class NoFeasibleEndpoint extends Error {
  constructor(message, { rules = [] } = {}) {
    super(message);
    this.name = "NoFeasibleEndpoint";
    this.rules = Object.freeze([...rules]);
  }
}

export class EndpointChooser {
  /** @param {{spec: import("./endpoints.js").Endpoints, outputTokens: number, rule: string, parameter: number}} section */
  constructor(section, modelVersion, maxChars) {
    this.section = section;
    this.endpoints = [...section.spec];
    this.names = this.endpoints.map((e) => e.name);
    this.onDevice = this.endpoints.map((e) => e.where === "device");
    this.rule = section.rule;
    this.parameter = section.parameter;
    this.modelVersion = modelVersion;
    this.maxChars = maxChars;
    this.said = `${this.rule} (${ENDPOINT_RULES[this.rule]} ${formatG(this.parameter, 4)})`;
  }

  /** Decisions of scored prompts (`expected` [n][N] from the graph, `nTokens` rounded counts);
   * NoFeasibleEndpoint for the first prompt no endpoint may serve. */
  decisions(prompts, precisions, expected, nTokens) {
    const { cost, fits } = callCosts(this.endpoints, nTokens, this.section.outputTokens);
    const orders = this.rule === "cascade"
      ? cascade(expected, cost, this.parameter, fits)
      : escalation(expected, cost, this.first(expected, cost, fits), fits);
    return prompts.map((p, i) => this.decision(p, precisions[i], nTokens[i], expected[i], cost[i], fits[i], orders[i]));
  }

  /** Decisions when the graph could not score (`note` says why): the cheapest feasible endpoint
   * first, then each costlier one; `degraded` set. */
  degraded(prompts, precisions, nTokens, note) {
    const { cost, fits } = callCosts(this.endpoints, nTokens, this.section.outputTokens);
    const first = bestUnderPrice(cost.map((row) => row.map(() => 0)), cost, 1, fits);
    const byPrice = cost.map((row) => {  // each endpoint's rank by price, ties in index order (a stable argsort's)
      const rank = new Array(row.length);
      [...row.keys()].sort((a, b) => row[a] - row[b] || a - b).forEach((k, r) => { rank[k] = r; });
      return rank;
    });
    const orders = escalation(byPrice, cost, first, fits);
    return prompts.map((p, i) => this.decision(p, precisions[i], nTokens[i], null, cost[i], fits[i], orders[i], note));
  }

  /** The rule's first endpoint per request (a cascade's first step), NONE where none is feasible. */
  first(expected, cost, feasible) {
    if (this.rule === "cheapest_within") return cheapestWithin(expected, cost, this.parameter, feasible);
    if (this.rule === "best_under_price") return bestUnderPrice(expected, cost, this.parameter, feasible);
    return cascade(expected, cost, this.parameter, feasible).map((o) => (o.length ? o[0] : NONE));
  }

  decision(prompt, precision, nTokens, expected, cost, fits, order, note = "") {
    const names = this.names;
    if (!order.length) {
      const tooLong = names.filter((_, k) => !fits[k]);
      const parts = tooLong.length ? [`~${nTokens} tokens exceed the context of ${tooLong.join(", ")}`] : [];
      throw new NoFeasibleEndpoint(`no endpoint may serve this request: ${parts.join("; ")}`);
    }
    const first = order[0];
    const deviceFirst = this.onDevice[first];
    const zone = !deviceFirst ? CLOUD : order.slice(1).some((k) => !this.onDevice[k]) ? FALLBACK : EDGE;
    const steps = order.map((k) => names[k]).join(" -> ");
    let reason = expected === null
      ? `${note}: the cheapest feasible endpoint first, ${names[first]} ($${formatFixed(cost[first], 5)}); cascade ${steps}`
      : `${this.said}: ${names[first]} (expected ${formatFixed(expected[first], 3)}, $${formatFixed(cost[first], 5)}); cascade ${steps}`;
    const tooLong = names.filter((_, k) => !fits[k]);
    if (tooLong.length) reason += `; ~${nTokens} tokens exceed the context of ${tooLong.join(", ")}`;
    const truncated = codePointLength(prompt) > this.maxChars;
    if (truncated) reason += `; features from the first ${this.maxChars} characters`;
    return makeDecision(zone, {  // its target: edge exactly when a device endpoint runs first
      score: expected === null ? 0 : expected[first], reason, degraded: expected === null, model_version: this.modelVersion,
      precision, n_tokens: nTokens, truncated,
      expected: expected === null ? null : Object.fromEntries(names.map((n, k) => [n, expected[k]])),
      endpoint: names[first], cascade: order.map((k) => names[k]),
    });
  }
}
