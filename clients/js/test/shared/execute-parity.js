// The execute vectors (scripts/execute_vectors.py: the Python SDK's aexecute on scripted endpoint
// behaviours) replayed through this SDK's runner: shared by the Node test (test/execute-parity.test.js)
// and the browser page (test-browser/page.js), which pass in the modules they import.

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

/** An error of the class Python raised, as JS code names one (its `name`). */
function raised(cls, message) {
  const error = new Error(message);
  error.name = cls;
  return error;
}

/** Python's argument errors and this SDK's: ValueError is a RangeError here. */
const ARGUMENT_ERRORS = { ValueError: "RangeError", TypeError: "TypeError" };

/** What one scenario's run gave, in the vectors' shape. */
async function outcomeOf(scenario, prompt, { execute, decisionOf, parseEndpoints, errorClass }) {
  const made = [];
  const endpoints = Object.fromEntries(scenario.names.map((name) => [name, async (text, { signal }) => {
    made.push(name);
    const behaviour = scenario.behaviours[name] ?? {};
    if (behaviour.delay_ms !== undefined) await sleep(behaviour.delay_ms);
    if (behaviour.hang) await new Promise((resolve) => { signal.addEventListener("abort", resolve, { once: true }); });
    if (behaviour.raise !== undefined) throw raised(behaviour.raise, behaviour.message ?? "");
    return `${name} answers ${text}`;
  }]));
  const verdicts = scenario.accept;
  const accept = verdicts === null ? null : (answer) => {
    const verdict = verdicts[answer.split(" ")[0]] ?? { verdict: true };
    if (verdict.raise !== undefined) throw raised(verdict.raise, verdict.message ?? "");
    return verdict.verdict;
  };
  const d = scenario.decision;
  const decision = decisionOf({ cascade: d.cascade, score: 0, reason: "t", degraded: false, model_version: "t", on_device: d.on_device,
    checked: d.checked, n_tokens: d.n_tokens, rule: d.rule, forbidden: d.forbidden });
  const steps = (list) => list.map((s) => [s.name, s.status, s.detail]);
  const classOf = (error) => (error === null || error === undefined ? null : errorClass(error));
  let execution;
  try {
    const specs = scenario.specs === null ? null : parseEndpoints(scenario.specs, { source: "specs" });
    const deadline = scenario.deadline_ms === undefined || scenario.deadline_ms === null ? null : performance.now() + scenario.deadline_ms;
    execution = await execute(decision, prompt, { endpoints, specs, timeoutsMs: scenario.timeouts_ms, accept,
      verifyEdgeZone: scenario.verify_edge_zone, outputTokens: scenario.output_tokens, deadline });
  } catch (error) {
    if (error?.name === "EndpointsFailed" || error?.name === "FallbackForbidden") {
      const out = { error: error.name, message: error.message, tried: error.tried.map((t) => t.label()),
        tried_errors: error.tried.map((t) => t.error), calls: made, steps: steps(error.steps), edge_error: classOf(error.edge_error),
        cause: classOf(error.cause) };
      if (error.name === "FallbackForbidden") Object.assign(out, { rule: error.rule, endpoint: error.endpoint });
      return out;
    }
    if (error instanceof RangeError || error instanceof TypeError) {
      const python = Object.entries(ARGUMENT_ERRORS).find(([, js]) => js === error.name)?.[0] ?? error.name;
      return { error: python, message: error.message, calls: made, argument: true };
    }
    throw error;
  }
  return { served_by: execution.served_by, response: execution.response, tried: execution.tried.map((t) => t.label()),
    tried_errors: execution.tried.map((t) => t.error), tried_costs: execution.tried.map((t) => t.cost), calls: made,
    steps: steps(execution.steps), fallback_code: execution.fallback_code, fallback_reason: execution.fallback_reason,
    expected_cost: execution.expected_cost, edge_error: classOf(execution.edge_error) };
}

/**
 * Every scenario through `execute` (src/execute.js), compared with Python's outcome field by field.
 * `modules`: {execute, errorClass} (execute.js), {decisionOf} (decision.js), {parseEndpoints} (endpoints.js).
 * @returns {Promise<{scenarios: number, kinds: Record<string, number>, timeouts: number, mismatches: object[]}>}
 */
export async function replayExecutions(vectors, modules) {
  const out = { scenarios: 0, kinds: {}, timeouts: 0, mismatches: [] };
  for (const [index, scenario] of vectors.scenarios.entries()) {
    const python = scenario.outcome;
    const js = await outcomeOf(scenario, vectors.prompt, modules);
    const fields = [...new Set([...Object.keys(python), ...Object.keys(js)])];
    const wrong = fields.filter((f) => JSON.stringify(js[f]) !== JSON.stringify(python[f]));
    if (wrong.length && out.mismatches.length < 20) {
      out.mismatches.push({ index, fields: wrong, js: Object.fromEntries(wrong.map((f) => [f, js[f]])),
        python: Object.fromEntries(wrong.map((f) => [f, python[f]])) });
    }
    const kind = python.error ?? "served";
    out.kinds[kind] = (out.kinds[kind] ?? 0) + 1;
    if ((python.tried ?? []).some((label) => label.endsWith("=timeout"))) out.timeouts++;
    out.scenarios++;
  }
  return out;
}
