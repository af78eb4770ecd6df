// execute() against the Python SDK's: scripts/execute_vectors.py runs serving.execution._execute.aexecute on
// scripted endpoint behaviours (answers, errors of named classes, timeouts, hangs past a timeout,
// accept verdicts, context limits, forbidden endpoints and sides, specs priced per 1k and per 1M) and
// writes each outcome; this SDK's runner must give the same one: who served, each endpoint reached
// (label, error class, cost), the calls made, the steps, fallback_code and fallback_reason,
// expected_cost, edge_error; or the same error (class, message, rule, endpoint, tried).
import assert from "node:assert/strict";
import { test } from "node:test";
import { decisionOf } from "../src/decision.js";
import { parseEndpoints } from "../src/endpoints.js";
import { errorClass, execute } from "../src/execute.js";
import { executeVectors } from "./fixtures.js";
import { replayExecutions } from "./shared/execute-parity.js";

test("execute() gives the Python SDK's outcome for every scripted scenario", async () => {
  const vectors = executeVectors();
  const result = await replayExecutions(vectors, { execute, errorClass, decisionOf, parseEndpoints });
  console.log(`execute parity: ${result.scenarios} scenarios (${Object.entries(result.kinds).map(([k, v]) => `${k} ${v}`).join(", ")}; ` +
    `${result.timeouts} with a timeout): ${result.mismatches.length ? "MISMATCHES" : "equal"}`);
  assert.deepEqual(result.mismatches, []);
  assert.equal(result.scenarios, vectors.scenarios.length);
  assert.ok(result.kinds.served > 100 && result.kinds.EndpointsFailed > 20 && result.kinds.FallbackForbidden > 20 && result.timeouts > 20,
    `the vectors hold every kind of outcome: ${JSON.stringify(result.kinds)}, ${result.timeouts} timeouts`);
});
