// Choosing among N endpoints from each endpoint's expected quality and cost
// (serving/endpoints/_choice.py, docs/endpoints.md), on plain arrays: `expected[r][k]` is
// P(endpoint k answers request r well), `cost[r][k]` the expected price of that call, `feasible`
// (optional, booleans) which endpoints request r may use at all. The arithmetic is Python's, in
// its order, and every tie goes to the first index as numpy's argmax and stable sorts give it, so
// both SDKs make the same choices. A request with no feasible endpoint gets NONE (-1): the caller
// must say so, never pick one silently.
//
// - cheapestWithin: the cheapest feasible endpoint whose expected quality is within `margin` of
//   the best feasible one's.
// - bestUnderPrice: the largest expected quality - price x cost (the cheaper one on ties).
// - cascade: the cheapest plausible endpoint first (within `startMargin` of the best), then each
//   costlier endpoint expected to do better than every one before it; escalation: the same climb
//   from a given first endpoint; cascadeExpectation: a cascade's expected quality and cost.
export const NONE = -1;

const shapeOf = (m) => (Array.isArray(m) && m.every(Array.isArray) ? `(${m.length}, ${m.map((r) => r.length).join("|")})` : "not a matrix");

/** [rows of p, rows of c, rows of ok] checked: one shape; ok = feasible, finite p and finite c. */
function inputs(expected, cost, feasible) {
  const rectangular = (m) => Array.isArray(m) && m.every((r) => Array.isArray(r) && r.length === m[0].length);
  const same = (a, b) => a.length === b.length && a.every((r, i) => r.length === b[i].length);
  if (!rectangular(expected) || !rectangular(cost) || !same(expected, cost)) {
    throw new RangeError(`expected and cost must be [requests, endpoints] matrices of one shape, got ${shapeOf(expected)}, ${shapeOf(cost)}`);
  }
  if (feasible !== null && feasible !== undefined && !(Array.isArray(feasible) && feasible.length === expected.length
      && feasible.every((r, i) => Array.isArray(r) && r.length === expected[i].length))) {
    throw new RangeError(`feasible must have the shape of expected ${shapeOf(expected)}, got ${shapeOf(feasible)}`);
  }
  const p = expected.map((r) => r.map(Number));
  const c = cost.map((r) => r.map(Number));
  const ok = p.map((row, i) => row.map((v, k) => (feasible ? Boolean(feasible[i][k]) : true) && Number.isFinite(v) && Number.isFinite(c[i][k])));
  return { p, c, ok };
}

/** The index of the largest score among ok ones, the first on ties; NONE when none is ok. */
function pick(score, ok) {
  let best = NONE;
  for (let k = 0; k < score.length; k++) if (ok[k] && (best === NONE || score[k] > score[best])) best = k;
  return best;
}

function checkParameter(name, value) {
  if (!(value >= 0)) throw new RangeError(`${name} must be >= 0, got ${value}`);
}

/** [requests, endpoints] each call's price and whether the prompt fits each endpoint's context,
 * for prompts of `inputTokens` tokens and answers of `outputTokens` (endpoints.js's EndpointSpecs). */
export function callCosts(endpoints, inputTokens, outputTokens) {
  const list = [...endpoints];
  const unpriced = list.filter((e) => e.price === null);
  if (unpriced.length) throw new RangeError(`endpoint '${unpriced[0].name}' has no price: the choosers price every endpoint they choose among`);
  const tokens = [...inputTokens].map(Number);
  return {
    cost: tokens.map((t) => list.map((e) => e.callCost(t, outputTokens))),
    fits: tokens.map((t) => list.map((e) => e.fits(t))),
  };
}

/** Per request, the cheapest feasible endpoint whose expected quality is >= the best feasible
 * one's minus `margin` (the higher expected quality on equal cost). */
export function cheapestWithin(expected, cost, margin, feasible = null) {
  checkParameter("margin", margin);
  const { p, c, ok } = inputs(expected, cost, feasible);
  let largest = 0;  // the largest finite |cost| of the whole matrix, as Python's scale
  for (const row of c) for (const v of row) if (Number.isFinite(v) && Math.abs(v) > largest) largest = Math.abs(v);
  const scale = Math.max(largest, 1);
  return p.map((row, i) => {
    let best = -Infinity;
    row.forEach((v, k) => { if (ok[i][k] && v > best) best = v; });
    const near = row.map((v, k) => ok[i][k] && v >= best - margin - 1e-12);
    return pick(row.map((v, k) => -c[i][k] + 1e-9 * scale * v), near);
  });
}

/** Per request, the feasible endpoint with the largest expected quality - price x cost (the
 * cheaper one on ties). price 0: the best expected quality; a large price: the cheapest. */
export function bestUnderPrice(expected, cost, price, feasible = null) {
  checkParameter("price", price);
  const { p, c, ok } = inputs(expected, cost, feasible);
  return p.map((row, i) => pick(row.map((v, k) => (v - price * c[i][k]) - 1e-12 * c[i][k]), ok[i]));
}

/** One request's steps: by cost, then quality (ties in index order, as numpy's lexsort), the first
 * endpoint that is `start` or expected to reach `floor`, then each one expected to do better than
 * every step before it. */
function climb(p, c, usable, { floor = Infinity, start = NONE } = {}) {
  const order = [...usable].sort((a, b) => c[a] - c[b] || p[b] - p[a] || a - b);
  const steps = [];
  let top = -Infinity;
  for (const k of order) {
    if (p[k] > top && (steps.length || k === start || p[k] >= floor)) {
      steps.push(k);
      top = p[k];
    }
  }
  return steps;
}

const usableOf = (ok) => ok.flatMap((v, k) => (v ? [k] : []));

/** Per request, the endpoints to try in order (module comment); [] when none is feasible. */
export function cascade(expected, cost, startMargin, feasible = null) {
  checkParameter("start_margin", startMargin);
  const { p, c, ok } = inputs(expected, cost, feasible);
  return p.map((row, i) => {
    const usable = usableOf(ok[i]);
    if (!usable.length) return [];
    const floor = Math.max(...usable.map((k) => row[k])) - startMargin - 1e-12;
    return climb(row, c[i], usable, { floor });
  });
}

/** Per request, `first[r]` (its chosen endpoint) and then, as cascade climbs, each costlier
 * feasible endpoint expected to do better than every one before it; [] where first is NONE. */
export function escalation(expected, cost, first, feasible = null) {
  const { p, c, ok } = inputs(expected, cost, feasible);
  const starts = [...first];
  if (starts.length !== p.length) throw new RangeError(`first must hold one endpoint per request (${p.length}), got ${starts.length}`);
  return starts.map((start, i) => {
    if (start === NONE) return [];
    if (!(Number.isInteger(start) && start >= 0 && start < p[i].length) || !ok[i][start]) {
      throw new RangeError(`request ${i}: first endpoint ${start} is not a feasible endpoint`);
    }
    return climb(p[i], c[i], usableOf(ok[i]), { start });
  });
}

/** {quality, cost} per request of running its cascade (`orders`), where `quality[r][k]` is each
 * endpoint's probability of a good answer and a bad answer is caught, and the next endpoint tried,
 * with probability `catchRate`; the last step's answer stands. NaN for an empty cascade. */
export function cascadeExpectation(orders, quality, cost, catchRate) {
  if (!(catchRate >= 0 && catchRate <= 1)) throw new RangeError(`catch_rate must be in [0, 1], got ${catchRate}`);
  const q = [], total = [];
  orders.forEach((steps, i) => {
    if (!steps.length) { q.push(NaN); total.push(NaN); return; }
    let reach = 1, tq = 0, tc = 0;
    for (const k of steps) {
      tc += reach * cost[i][k];
      tq += reach * quality[i][k];
      reach *= (1 - quality[i][k]) * catchRate;
    }
    q.push(tq);
    total.push(tc);
  });
  return { quality: q, cost: total };
}
