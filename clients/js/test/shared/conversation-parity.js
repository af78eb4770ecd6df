// The conversation vectors (scripts/conversation_vectors.py: the Python SDK's turns on both bundles)
// replayed on routers of this SDK: shared by the Node test (test/conversation-parity.test.js) and the
// browser page (test-browser/page.js), which pass in the modules they import and how they load a
// variant's router. A variant with `evidence_text` carries it as its turn_evidence.json; the vectors'
// `evidence` section holds TurnEvidence itself (replayEvidence) and bundles it refuses (replayEvidenceLoads).

// Every field compared exactly; the model's numbers within a tolerance (float32 graphs).
export const EXACT = ["cascade", "reason", "degraded", "model_version", "on_device", "checked", "precision", "n_tokens", "truncated",
  "unfamiliar", "rule", "forbidden", "turn", "switched", "endpoint", "target", "zone"];
const TOLERANCES = { score: 1e-5, p_edge: 1e-5, p_cloud: 1e-5, novelty: 1e-6 };

/** The fields of a decision that differ from Python's (empty when equal): its keys in order (so turn
 * and switched are left out exactly where Python leaves them out), the exact fields, the numbers. */
export function differences(js, py) {
  const wrong = [];
  if (JSON.stringify(Object.keys(js)) !== JSON.stringify(Object.keys(py))) wrong.push("keys");
  for (const field of EXACT) if (JSON.stringify(js[field] ?? null) !== JSON.stringify(py[field] ?? null)) wrong.push(field);
  for (const [field, tolerance] of Object.entries(TOLERANCES)) {
    if (py[field] === null || py[field] === undefined) { if (js[field] !== null && js[field] !== undefined) wrong.push(field); continue; }
    if (!(Math.abs(js[field] - py[field]) <= tolerance)) wrong.push(field);
  }
  if ((py.expected === null) !== (js.expected === null)) wrong.push("expected");
  else if (py.expected !== null) {
    const names = Object.keys(py.expected);
    if (JSON.stringify(Object.keys(js.expected)) !== JSON.stringify(names)
      || names.some((n) => !(Math.abs(js.expected[n] - py.expected[n]) <= 1e-5))) wrong.push("expected");
  }
  return wrong;
}

/** A state the vectors give at their fixed time, moved to the present: every time + `shift` seconds. */
function retimed(state, shift, { ConversationState, Held }) {
  if (state === null) return null;
  return new ConversationState({ ...state, updated: state.updated + shift,
    held: state.held.map((h) => new Held(h.endpoint, h.tokens, h.at + shift)) });
}

/**
 * Every decision of the vectors, made by this SDK's chooser on the same scores at the vectors' `now`
 * (Routing.decide with the state, the Stickiness and the policy of the row), compared with Python's;
 * every `routeEvery`th row also through route() with the state in a store (its times moved to the
 * present; rows at a cache's exact age limit left out); switch_costs' rows; the JSON texts.
 * `load(kind, index, variant)`: a Router of that bundle ("two" or "n") variant. `modules`: {Request,
 * ConversationState, Held, Conversations, Stickiness, PolicySet, NoFeasibleEndpoint, switchCosts}.
 * @returns {Promise<object>} counts and at most 25 mismatches
 */
export async function replayConversations(vectors, load, modules, { routeEvery = 0 } = {}) {
  const { Request, ConversationState, Conversations, Stickiness, PolicySet, NoFeasibleEndpoint, switchCosts } = modules;
  const out = { decisions: 0, errors: 0, routed: 0, moves: 0, stays: 0, shifted: 0, priced: 0, firstTurns: 0, withPolicy: 0,
    degraded: 0, weighed: 0, withEvidence: 0, worstExpected: 0, byBundle: {}, switchCosts: 0, json: 0, evidence: null, mismatches: [] };
  const miss = (item) => { if (out.mismatches.length < 25) out.mismatches.push(item); };
  const knobs = vectors.stickiness.map((k) => new Stickiness({ weight: k.weight === "inf" ? Infinity : k.weight, secondsPrice: k.seconds_price }));
  const now = vectors.now;

  for (const text of vectors.json.texts) {
    const back = ConversationState.fromJson(text).toJson();
    if (back !== text) miss({ json: text, js: back });
    out.json++;
  }
  for (const { text, refused } of vectors.json.refused) {
    let threw = false;
    try { ConversationState.fromJson(text); } catch (error) { threw = error instanceof RangeError && /^not a conversation state/.test(error.message); }
    if (threw !== refused) miss({ json: text, refused, js: threw });
    out.json++;
  }

  for (const [kind, part] of Object.entries(vectors.bundles)) {
    const states = part.states.map((s) => (s.text === null ? null : ConversationState.fromJson(s.text)));
    const routers = new Map();
    const routerOf = async (v) => {
      if (!routers.has(v)) routers.set(v, await load(kind, v, part.variants[v]));
      return routers.get(v);
    };
    const first = await routerOf(0);
    const names = first.routing.chooser.names;
    if (JSON.stringify(names) !== JSON.stringify(part.endpoints)) miss({ kind, endpoints: names, python: part.endpoints });
    const policies = await Promise.all(part.policies.map((p) => PolicySet.parse(JSON.stringify(p.policy), { source: `no-${p.endpoint}.json`, endpoints: names })));
    let count = 0;
    let group = null, scores = null;
    for (const [index, row] of part.decisions.entries()) {
      const router = await routerOf(row.variant);
      const { prompt } = part.cases[row.case];
      const metadata = row.policy === null ? null : { tier: "free" };
      const request = new Request(prompt, { precision: row.precision, metadata, conversation: vectors.conversation });
      const key = `${row.variant}/${row.case}/${row.precision}/${Boolean(row.degraded)}`;
      if (key !== group) {  // one scoring per prompt, precision and variant, as Python's
        group = key;
        scores = row.degraded
          ? { nTokens: [router.routing.rules.countTokens(prompt)], scores: null, heads: null, expected: null, novelty: null, note: vectors.degraded_note }
          : await router.routing.scores([request]);
      }
      const where = { kind, row: index, variant: part.variants[row.variant].name, case: part.cases[row.case].id, state: part.states[row.state].id,
        stickiness: vectors.stickiness[row.stickiness], policy: row.policy };
      const options = { policy: row.policy === null ? null : policies[row.policy], spending: null, holders: null,
        states: [states[row.state]], stickiness: knobs[row.stickiness], now };
      let js;
      try {
        [js] = router.routing.decide([request], scores, options);
      } catch (error) {
        if (row.error && error instanceof NoFeasibleEndpoint && error.message === row.message) out.errors++;
        else miss({ ...where, error: String(error), python: row.error ? row.message : row.decision.reason });
        continue;
      }
      if (row.error) { miss({ ...where, python: row.message, js: js.reason }); continue; }
      const py = row.decision;
      const wrong = differences(js, py);
      if (py.expected !== null && js.expected !== null) {
        for (const name of Object.keys(py.expected)) out.worstExpected = Math.max(out.worstExpected, Math.abs(js.expected[name] - py.expected[name]) || 0);
      }
      if (JSON.stringify(js.switch_costs) !== JSON.stringify(row.switch_costs ?? null)) wrong.push("switch_costs");
      if (wrong.length) miss({ ...where, fields: wrong, js: Object.fromEntries(wrong.map((f) => [f, js[f]])), python: Object.fromEntries(wrong.map((f) => [f, py[f]])) });
      out.decisions++;
      count++;
      if (py.switched === true) out.moves++;
      if (py.switched === false) out.stays++;
      if (py.turn === 1) out.firstTurns++;
      if (py.reason.includes("for the switch")) out.shifted++;
      if (py.reason.includes("which would read")) out.priced++;
      if (row.policy !== null) out.withPolicy++;
      if (row.degraded) out.degraded++;
      if (py.reason.includes("weighed in")) out.weighed++;
      if (part.variants[row.variant].evidence_text !== null && part.variants[row.variant].evidence_text !== undefined) out.withEvidence++;
      const atLimit = /_at_ttl$/.test(part.states[row.state].id);
      if (routeEvery && index % routeEvery === 0 && row.policy === null && !row.degraded && !atLimit) {
        // route() itself: the state read from a store, at the present time
        const shift = Date.now() / 1000 - now;
        const held = retimed(states[row.state], shift, modules);
        const saved = router.conversations;
        router.conversations = new Conversations({ get: async () => held, put: () => {} }, knobs[row.stickiness]);
        try {
          const routed = await router.route(request);
          const off = differences(routed, py);
          if (off.length) miss({ ...where, how: "route()", fields: off, js: Object.fromEntries(off.map((f) => [f, routed[f]])) });
          out.routed++;
        } finally {
          router.conversations = saved;
        }
      }
    }
    out.byBundle[kind] = count;
    for (const row of part.switch_costs) {
      const endpoints = (await routerOf(row.variant)).routing.chooser.endpoints;
      const [delta, missing] = switchCosts(endpoints, states[row.state], row.input_tokens, row.output_tokens, row.seconds_price, now);
      const same = (a, b) => a.length === b.length && a.every((x, k) => x === b[k]);  // bit for bit: the same arithmetic
      if (!same(delta, row.delta) || !same(missing, row.missing)) {
        miss({ kind, switchCosts: row, js: { delta, missing } });
      }
      out.switchCosts++;
    }
  }
  if (vectors.evidence) out.evidence = replayEvidence(vectors.evidence, modules, miss);
  return out;
}

/**
 * The vectors' `evidence` section (TurnEvidence itself): each weights file read for its endpoints,
 * adjusted() on the grid of probabilities and states (within 1e-12 of Python's; how many bit for bit,
 * the largest difference), and the texts fromJson refuses (the error's class and message; a JSON syntax
 * error's message is this parser's own, its prefix compared) or takes (the same weights and rows).
 * `modules`: {TurnEvidence, TurnEvidenceError, ConversationState}.
 */
export function replayEvidence(evidence, { TurnEvidence, TurnEvidenceError, ConversationState }, miss) {
  const out = { adjusted: 0, bitEqual: 0, worst: 0, refused: 0, taken: 0 };
  const sets = evidence.sets.map((set) => ({ ...set, evidence: TurnEvidence.fromJson(set.text, set.endpoints) }));
  for (const row of evidence.adjusted) {
    const set = sets[row.set];
    const js = set.evidence.adjusted(row.expected, set.endpoints, ConversationState.fromJson(row.state));
    js.forEach((p, k) => {
      const diff = Math.abs(p - row.adjusted[k]);
      out.worst = Math.max(out.worst, diff);
      if (p === row.adjusted[k]) out.bitEqual++;
      if (!(diff <= 1e-12)) miss({ evidence: set.name, state: row.state, expected: row.expected, js, python: row.adjusted });
    });
    out.adjusted += js.length;
  }
  const bytes = (text) => new TextEncoder().encode(text);
  for (const row of evidence.refused) {
    let taken = null, error = null;
    try { taken = TurnEvidence.fromJson(bytes(row.text), ["a", "b"]); } catch (e) { error = e; }
    if (row.error === null) {
      const weights = taken === null ? null : Object.fromEntries(taken.weights);
      if (JSON.stringify(weights) !== JSON.stringify(row.weights) || taken.rows !== row.rows) {
        miss({ fromJson: row.text, python: row.weights, js: weights ?? String(error) });
      }
      out.taken++;
      continue;
    }
    const sameClass = row.error === "TurnEvidenceError" ? error instanceof TurnEvidenceError : error !== null && !(error instanceof TurnEvidenceError);
    const syntax = row.message.startsWith("turn_evidence.json: JSONDecodeError: ");
    const sameMessage = error !== null && (syntax ? error.message.startsWith("turn_evidence.json: JSONDecodeError: ") : error.message === row.message);
    if (!sameClass || !sameMessage) miss({ fromJson: row.text, python: `${row.error}: ${row.message}`, js: taken ? "taken" : `${error?.name}: ${error?.message}` });
    out.refused++;
  }
  return out;
}

/** Router.load of the vectors' bundles whose turn_evidence.json is refused: strict, a BundleError with
 * Python's message; else the rule table, its degradedReason the same. `load(index, row, strict)` loads
 * one and gives [the router or null, the error or null, the bundle's source as its messages name it]. */
export async function replayEvidenceLoads(evidence, load, BundleError, miss) {
  let count = 0;
  for (const [index, row] of evidence.loads.entries()) {
    const [, error, source] = await load(index, row, true);
    const expected = row.message.replaceAll("{bundle}", source);
    if (!(error instanceof BundleError) || error.message !== expected) miss({ load: row.evidence_text, strict: true, python: expected, js: String(error) });
    const [router] = await load(index, row, false);
    if (router === null || !router.degraded || router.degradedReason !== expected) {
      miss({ load: row.evidence_text, strict: false, python: expected, js: router?.degradedReason ?? null });
    }
    await router?.close();
    count++;
  }
  return count;
}
