// The policy vectors (scripts/policy_vectors.py) replayed on routers of this SDK: shared by the Node test
// (test/policy-parity.test.js) and the browser page (test-browser/page.js), which import it.
export const EXACT = ["target", "zone", "reason", "degraded", "model_version", "precision", "n_tokens", "truncated", "unfamiliar",
  "rule", "forbidden", "endpoint", "cascade"];
const TOLERANCES = { score: 1e-5, p_edge: 1e-5, p_cloud: 1e-5, novelty: 1e-6 };

/** The fields of a decision that differ from Python's (empty when equal). */
export function differences(js, py) {
  const wrong = EXACT.filter((f) => JSON.stringify(js[f]) !== JSON.stringify(py[f]));
  for (const [field, tolerance] of Object.entries(TOLERANCES)) {
    if (py[field] === null || py[field] === undefined) { if (js[field] !== null && js[field] !== undefined) wrong.push(field); continue; }
    if (!(Math.abs(js[field] - py[field]) <= tolerance)) wrong.push(field);
  }
  return wrong;
}

/**
 * Every scenario's steps on `routers` ({two, n}: a Router each), in order: spends recorded, requests
 * routed and compared with Python's decision or NoFeasibleEndpoint.
 * @returns {Promise<{decisions: number, errors: number, rules: Set<string>, mismatches: object[]}>}
 */
export async function replayScenarios(vectors, routers, { PolicySet, Needs, NoFeasibleEndpoint }) {
  const out = { decisions: 0, errors: 0, spends: 0, rules: new Set(), mismatches: [] };
  const miss = (item) => { if (out.mismatches.length < 25) out.mismatches.push(item); };
  const detector = (prompt) => vectors.languages[prompt] ?? null;  // Python's py3langid, replayed
  for (const router of Object.values(routers)) {
    router.routing.languageDetector = detector;
    if (router.routing.chooser) router.routing.chooser.detector = detector;
  }
  for (const [s, scenario] of vectors.scenarios.entries()) {
    const policy = vectors.policies[scenario.policy];
    const router = routers[policy.bundle];
    router.policy = null;
    router.ledger = null;  // each scenario starts with an empty budget ledger, as Python's fresh router does
    router.policy = await PolicySet.parse(policy.text, { source: policy.source, endpoints: router.policyEndpoints });
    for (const [k, step] of scenario.steps.entries()) {
      if (step.spend) {
        await router.recordSpend(step.spend.metadata, step.spend.amount);
        out.spends++;
        continue;
      }
      const { prompt, precision, metadata, needs } = step.route;
      const where = { scenario: s, policy: policy.id, step: k, prompt: prompt.slice(0, 60), precision, metadata, needs };
      let js;
      try {
        js = await router.route(prompt, { precision, metadata, needs: needs ? new Needs(needs) : null, capabilities: scenario.capabilities });
      } catch (error) {
        if (step.error && error instanceof NoFeasibleEndpoint && error.message === step.message
          && JSON.stringify(error.rules) === JSON.stringify(step.rules)) out.errors++;
        else miss({ ...where, error: String(error), python: step.error ? step.message : step.decision.reason });
        continue;
      }
      if (step.error) { miss({ ...where, python: step.message, js: js.reason }); continue; }
      const wrong = differences(js, step.decision);
      if (wrong.length) miss({ ...where, fields: wrong, js: Object.fromEntries(wrong.map((f) => [f, js[f]])),
        python: Object.fromEntries(wrong.map((f) => [f, step.decision[f]])) });
      if (js.rule) out.rules.add(js.rule);
      out.decisions++;
    }
  }
  return out;
}
