// execute(): one runner for every decision, serving/execution/_execute.py's rules. Router.execute on the
// two-endpoint bundle (prompts picked from the vectors by the zone Python gave them, so each zone is
// exercised with a real decision), the runner itself over N named endpoints (the cases of Python's
// tests/test_execute_endpoints.py), and Router.execute on the four-endpoint bundle.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { CallTimeoutError, CloudCallError, EdgeTimeoutError, EndpointsFailed, FallbackForbidden, PolicySet, Router, execute,
  parseEndpoints, triedText } from "../src/index.js";
import { decisionOf } from "../src/decision.js";
import { BUNDLE, ENDPOINT_BUNDLE, endpointVectors, promptIn, quietLogger, vectors } from "./fixtures.js";

/** A call that records its prompts and answers (or throws) as told. */
function recorded(answer) {
  const calls = [];
  const call = async (prompt, options) => {
    calls.push({ prompt, options });
    return typeof answer === "function" ? answer(prompt, options) : answer;
  };
  return Object.assign(call, { calls });
}

const statuses = (execution) => execution.steps.map((s) => `${s.name}:${s.status}`);
const labels = (executionOrError) => triedText(executionOrError.tried);

describe("execute()", () => {
  let router;
  before(async () => { router = await Router.load(BUNDLE, { strict: true }); });
  after(() => router.close());

  test("a cloud-first request calls the cloud only", async () => {
    const edge = recorded("edge answer"), cloud = recorded("cloud answer");
    const run = await router.execute(promptIn("cloud"), edge, cloud);
    assert.equal(run.served_by, "cloud");
    assert.equal(run.response, "cloud answer");
    assert.equal(run.fell_back, false);
    assert.equal(run.fallback_reason, null);
    assert.equal(edge.calls.length, 0);
    assert.deepEqual(statuses(run), ["cloud:ok"]);
    assert.equal(run.decision.zone, "cloud");
  });

  test("an edge-first request is answered by the edge, which gets an AbortSignal", async () => {
    const edge = recorded("edge answer"), cloud = recorded("cloud answer");
    const run = await router.execute(promptIn("edge"), edge, cloud, { accept: () => false });  // not checked in the edge zone
    assert.equal(run.served_by, "edge");
    assert.equal(run.response, "edge answer");
    assert.equal(cloud.calls.length, 0);
    assert.ok(edge.calls[0].options.signal instanceof AbortSignal);
    assert.deepEqual(statuses(run), ["edge:ok"]);
  });

  test("an edge that throws falls back to the cloud, with the reason and the error", async () => {
    const boom = new Error("device offline");
    const run = await router.execute(promptIn("edge"), recorded(() => { throw boom; }), recorded("cloud answer"));
    assert.equal(run.served_by, "cloud");
    assert.equal(run.fell_back, true);
    assert.equal(run.edge_error, boom);
    assert.equal(run.fallback_reason, "left edge=error:Error: Error('device offline')");
    assert.equal(run.fallback_code, "left edge=error:Error");
    assert.equal(labels(run), "edge=error:Error,cloud=served");
    assert.deepEqual(statuses(run), ["edge:error", "cloud:ok"]);
    assert.deepEqual(run.steps[0].detail, "Error('device offline')");
    assert.equal(run.expected_cost, 0 + 0.003, "the two-endpoint defaults: the edge free, the cloud $0.003 a call");
  });

  test("an edge over its timeout is aborted and the cloud answers", async () => {
    let aborted = null;
    const slow = (prompt, { signal }) => new Promise((resolve) => {
      signal.addEventListener("abort", () => { aborted = signal.reason; resolve("too late"); });
    });
    const run = await router.execute(promptIn("edge"), slow, recorded("cloud answer"), { edgeTimeoutMs: 50 });
    assert.equal(run.served_by, "cloud");
    assert.ok(aborted instanceof CallTimeoutError && aborted instanceof EdgeTimeoutError, "the earlier name still holds");
    assert.ok(run.edge_error instanceof CallTimeoutError);
    assert.deepEqual(statuses(run), ["edge:timeout", "cloud:ok"]);
    assert.equal(run.fallback_code, "left edge=timeout");
    assert.equal(run.fallback_reason, "left edge=timeout: TimeoutError('edge call exceeded 0.05 s')");
    assert.equal(run.tried[0].error, "TimeoutError");
  });

  test("in the fallback zone the accept check decides: accepted, rejected, or raising", async () => {
    const prompt = promptIn("edge_with_cloud_fallback");
    const accepted = await router.execute(prompt, recorded("good"), recorded("cloud"), { accept: (a) => a === "good" });
    assert.equal(accepted.served_by, "edge");
    assert.deepEqual(statuses(accepted), ["edge:ok", "accept:ok"]);
    const rejected = await router.execute(prompt, recorded("bad"), recorded("cloud"), { accept: (a) => a === "good" });
    assert.equal(rejected.served_by, "cloud");
    assert.equal(rejected.fallback_reason, "left edge=rejected: the accept check rejected its answer");
    assert.deepEqual(statuses(rejected), ["edge:ok", "accept:rejected", "cloud:ok"]);
    assert.equal(rejected.steps[0].result, "bad", "the rejected answer is kept on its step");
    assert.ok(!JSON.stringify(rejected.steps).includes("bad"), "and never serialised");
    const raising = await router.execute(prompt, recorded("x"), recorded("cloud"), { accept: () => { throw new TypeError("no"); } });
    assert.equal(raising.served_by, "cloud");
    assert.equal(raising.fallback_code, "left edge=rejected:TypeError");
    assert.equal(raising.fallback_reason, "left edge=rejected:TypeError: the accept check raised TypeError('no')");
    assert.deepEqual(statuses(raising), ["edge:ok", "accept:error", "cloud:ok"]);
  });

  test("verifyEdgeZone checks confident edge answers too", async () => {
    const run = await router.execute(promptIn("edge"), recorded("bad"), recorded("cloud"), { accept: () => false, verifyEdgeZone: true });
    assert.equal(run.served_by, "cloud");
    assert.deepEqual(statuses(run), ["edge:ok", "accept:rejected", "cloud:ok"]);
  });

  test("a cloud failure throws EndpointsFailed, a CloudCallError, with the edge failure, the steps and the decision", async () => {
    const edgeError = new Error("edge down"), cloudError = new Error("cloud down");
    await assert.rejects(
      router.execute(promptIn("edge"), recorded(() => { throw edgeError; }), recorded(() => { throw cloudError; })),
      (error) => error instanceof EndpointsFailed && error instanceof CloudCallError && error.edge_error === edgeError
        && error.cause === cloudError && error.message === "no endpoint served: edge=error:Error; cloud=error:Error (edge: edge down; cloud: cloud down)"
        && labels(error) === "edge=error:Error,cloud=error:Error"
        && error.steps.map((s) => s.status).join() === "error,error" && error.decision.zone === "edge");
  });

  test("an edge-first prompt over the edge context limit skips the edge", async () => {
    // The rule table (a degraded router) puts a long prompt without domain in the fallback band
    // (0.4), so it stays edge-first there while over the context limit.
    const degraded = await Router.load("/nonexistent", { logger: quietLogger() });
    const edge = recorded("edge");
    const run = await degraded.execute("tell me more, ".repeat(1000), edge, recorded("cloud"));
    assert.equal(run.decision.zone, "edge_with_cloud_fallback");
    assert.equal(edge.calls.length, 0);
    assert.equal(run.served_by, "cloud");
    assert.match(run.fallback_reason, /^left edge=context: prompt of ~\d+ tokens exceeds the context limit of 1024$/);
    assert.equal(run.fallback_code, "left edge=context");
    assert.deepEqual(statuses(run), ["edge:skipped", "cloud:ok"]);
    assert.equal(run.tried[0].cost, 0, "not called, nothing spent");
  });

  test('accept: "learned" serves the answers the bundle\'s check accepts, and falls back on the others', async () => {
    // Python's verdicts on the logs' edge answers (the vectors): one it accepts, one it rejects.
    const rows = vectors().acceptance.filter((r) => r.logprob_mean === null);
    const good = rows.find((r) => r.accepted), bad = rows.find((r) => !r.accepted);
    const prompt = promptIn("edge_with_cloud_fallback");
    // The check reads the answer with the request's prompt: Python's verdicts hold for their own prompt.
    const verdictGood = await router.acceptor.check(prompt, good.answer);
    const verdictBad = await router.acceptor.check(prompt, bad.answer);
    const served = await router.execute(prompt, recorded(good.answer), recorded("cloud"), { accept: "learned" });
    assert.equal(served.served_by, verdictGood.accepted ? "edge" : "cloud");
    const fallen = await router.execute(prompt, recorded(bad.answer), recorded("cloud"), { accept: "learned" });
    assert.equal(fallen.served_by, verdictBad.accepted ? "edge" : "cloud");
    assert.notEqual(verdictGood.accepted, verdictBad.accepted, "one accepted, one rejected");
    assert.deepEqual(statuses(verdictGood.accepted ? served : fallen), ["edge:ok", "accept:ok"]);
    assert.deepEqual(statuses(verdictGood.accepted ? fallen : served), ["edge:ok", "accept:rejected", "cloud:ok"]);
  });

  test('accept: "learned" with an answer that is not text counts as a check that threw', async () => {
    const run = await router.execute(promptIn("edge_with_cloud_fallback"), recorded({ text: "an object" }), recorded("cloud"),
      { accept: "learned" });
    assert.equal(run.served_by, "cloud");
    assert.equal(run.fallback_code, "left edge=rejected:TypeError");
  });

  test('accept: "learned" on a bundle without a check checks nothing, with one warning', async () => {
    const logger = quietLogger();
    const degraded = await Router.load("/nonexistent", { logger });
    assert.equal(degraded.acceptor, null);
    const prompt = "What is the interest rate on a loan?";  // the rule table's fallback band (finance 0.3)
    for (let i = 0; i < 2; i++) {
      const run = await degraded.execute(prompt, recorded("anything"), recorded("cloud"), { accept: "learned" });
      assert.equal(run.decision.zone, "edge_with_cloud_fallback");
      assert.equal(run.served_by, "edge");
    }
    assert.equal(logger.messages.filter((m) => m.includes('accept="learned"')).length, 1);
  });

  test("argument errors are the caller's", async () => {
    await assert.rejects(router.execute("hi", "not a function", recorded("c")), TypeError);
    await assert.rejects(router.execute("hi", recorded("e"), "not a function"), TypeError);
    await assert.rejects(router.execute("hi", recorded("e"), recorded("c"), { accept: "nice" }), TypeError);
    await assert.rejects(router.execute("hi", recorded("e"), recorded("c"), { edgeTimeoutMs: -1 }), RangeError);
    await assert.rejects(router.execute("hi", { edge: recorded("e"), cloud: recorded("c") }, { timeoutsMs: { cloud: NaN } }), RangeError);
    await assert.rejects(router.execute(7, recorded("e"), recorded("c")), TypeError);
    await assert.rejects(router.execute("hi", { edge: recorded("e") }), /names 'cloud', which endpoints= does not have \(it has edge\)/);
    await assert.rejects(router.execute("hi", { edge: recorded("e"), cloud: "no" }), /endpoints\['cloud'\] must be a callable/);
  });

  test("the endpoints' calls by name are the same as edge and cloud", async () => {
    const edge = recorded("edge answer"), cloud = recorded("cloud answer");
    const run = await router.execute(promptIn("edge"), { edge, cloud }, { edgeTimeoutMs: 1000 });
    assert.equal(run.served_by, "edge");
    assert.equal(edge.calls[0].options.endpoint, "edge");
    const cloudFirst = await router.execute(promptIn("cloud"), new Map([["edge", edge], ["cloud", cloud]]));
    assert.equal(cloudFirst.served_by, "cloud");
    assert.ok(cloud.calls[0].options.signal instanceof AbortSignal, "every call gets a signal");
  });

  test("the caller's abort stops the run and rejects with its reason; nothing after it is called", async () => {
    const controller = new AbortController();
    const cloud = recorded("cloud answer");
    const edge = recorded((prompt, { signal }) => new Promise((resolve) => {
      controller.abort(new Error("the user left"));
      signal.addEventListener("abort", () => resolve("late"));
    }));
    await assert.rejects(router.execute(promptIn("edge"), edge, cloud, { signal: controller.signal }), /the user left/);
    assert.equal(cloud.calls.length, 0);
  });
});

// The runner over N named endpoints, with decisions as an N-endpoint bundle makes them: every answer
// but the last checked. The cases of Python's tests/test_execute_endpoints.py, with its endpoint specs.
const SPECS = parseEndpoints({ endpoints: [
  { name: "phone-3b", where: "device", price: { per_call: 0 }, latency_ms: 120, context_tokens: 64 },
  { name: "onprem-8b", where: "device", price: { per_1k_input: 0.0002 }, latency_ms: 300, context_tokens: 8192 },
  { name: "frontier", where: "cloud", price: { per_1k_input: 0.005, per_call: 0.001 }, latency_ms: 900, context_tokens: 200000 },
] });
const ORDER = ["phone-3b", "onprem-8b", "frontier"];

function decision(cascade = ORDER, { n_tokens = 10, forbidden = [], rule = null } = {}) {
  const device = { "phone-3b": true, "onprem-8b": true, frontier: false, edge: true };
  return decisionOf({ cascade, score: 0, reason: "test", degraded: false, model_version: "test",
    on_device: cascade.map((n) => device[n] ?? false), checked: cascade.slice(0, -1), n_tokens, forbidden, rule });
}

/** Calls by name that record who was called, failing (`fail`: name -> error) or slow (`slow`: name -> ms, honouring the signal). */
function calls(names = ORDER, { fail = {}, slow = {} } = {}) {
  const made = [];
  const endpoints = Object.fromEntries(names.map((name) => [name, async (prompt, { signal }) => {
    made.push(name);
    if (slow[name]) await new Promise((resolve) => { const t = setTimeout(resolve, slow[name]); signal.addEventListener("abort", () => clearTimeout(t)); });
    if (fail[name]) throw fail[name];
    return `${name} answers ${prompt}`;
  }]));
  return { made, endpoints };
}

const named = (cls, message) => Object.assign(new Error(message), { name: cls });

describe("execute() over N endpoints", () => {
  test("the first endpoint of the cascade serves when it answers", async () => {
    const c = calls();
    const run = await execute(decision(), "hi", { endpoints: c.endpoints, specs: SPECS });
    assert.deepEqual([run.served_by, run.response, c.made], ["phone-3b", "phone-3b answers hi", ["phone-3b"]]);
    assert.equal(labels(run), "phone-3b=served");
    assert.equal(run.fallback_reason, null);
    assert.equal(run.expected_cost, 0);
  });

  test("the cascade order is the decision's, not the mapping's", async () => {
    const c = calls(ORDER, { fail: { frontier: named("ConnectionError", "down") } });
    const run = await execute(decision(["frontier", "phone-3b", "onprem-8b"]), "hi", { endpoints: c.endpoints });
    assert.deepEqual(c.made, ["frontier", "phone-3b"]);
    assert.equal(labels(run), "frontier=error:ConnectionError,phone-3b=served");
    assert.equal(run.fallback_code, "left frontier=error:ConnectionError");
    assert.equal(run.fallback_reason, "left frontier=error:ConnectionError: ConnectionError('down')");
    assert.equal(run.expected_cost, null, "no specs: the calls' cost is unknown");
  });

  test("an error moves on to the next endpoint and the cost counts every call", async () => {
    class RuntimeError extends Error {}
    const c = calls(ORDER, { fail: { "phone-3b": new RuntimeError("boom"), "onprem-8b": named("ConnectionError", "refused") } });
    const run = await execute(decision(ORDER, { n_tokens: 50 }), "hi", { endpoints: c.endpoints, specs: SPECS });
    assert.equal(run.served_by, "frontier");
    assert.deepEqual(c.made, ORDER);
    assert.equal(labels(run), "phone-3b=error:RuntimeError,onprem-8b=error:ConnectionError,frontier=served");
    assert.deepEqual(run.tried.map((t) => t.error), ["RuntimeError", "ConnectionError", null]);
    assert.equal(run.expected_cost, 0 + (0 + 0.0002 * 50 / 1000) + (0.001 + 0.005 * 50 / 1000));
    assert.ok(run.edge_error instanceof RuntimeError, "the first endpoint's error");
    const priced = await execute(decision(ORDER, { n_tokens: 50 }), "hi", { endpoints: calls(ORDER, { fail: { "phone-3b": new Error("x") } }).endpoints,
      specs: SPECS, outputTokens: 200 });
    assert.deepEqual(priced.tried.map((t) => t.cost), [0, 0 + 0.0002 * 50 / 1000 + 0 * 200 / 1000]);
  });

  test("a timeout abandons the call (its signal aborted) and moves on", async () => {
    const c = calls(ORDER, { slow: { "phone-3b": 5000 } });
    const started = performance.now();
    const run = await execute(decision(), "hi", { endpoints: c.endpoints, timeoutsMs: { "phone-3b": 50 }, specs: SPECS });
    assert.equal(run.served_by, "onprem-8b");
    assert.equal(labels(run), "phone-3b=timeout,onprem-8b=served");
    assert.equal(run.tried[0].error, "TimeoutError");
    assert.equal(run.steps[0].status, "timeout");
    assert.equal(run.steps[0].detail, "phone-3b call exceeded 0.05 s");
    assert.ok(performance.now() - started < 4000, "abandoned, not waited for");
  });

  test("a prompt over an endpoint's context limit never reaches it", async () => {
    const c = calls();
    const run = await execute(decision(ORDER, { n_tokens: 100 }), "long", { endpoints: c.endpoints, specs: SPECS });
    assert.deepEqual(c.made, ["onprem-8b"]);
    assert.equal(labels(run), "phone-3b=context,onprem-8b=served");
    assert.equal(run.steps[0].status, "skipped");
    assert.match(run.steps[0].detail, /context limit of 64/);
    assert.equal(run.tried[0].cost, 0);
  });

  test("a rejected answer moves on and the last answer stands", async () => {
    const c = calls();
    const seen = [];
    const run = await execute(decision(), "q", { endpoints: c.endpoints, accept: (answer) => { seen.push(answer); return false; } });
    assert.deepEqual(c.made, ORDER);
    assert.equal(run.served_by, "frontier");
    assert.equal(labels(run), "phone-3b=rejected,onprem-8b=rejected,frontier=served");
    assert.deepEqual(seen, ["phone-3b answers q", "onprem-8b answers q"], "the last answer is not judged");
    assert.deepEqual(run.steps.map((s) => s.name), ["phone-3b", "accept", "onprem-8b", "accept", "frontier"]);
    assert.equal(run.steps[0].result, "phone-3b answers q");
  });

  test("an accept check that throws (or rejects a Promise) counts as a rejection naming its class", async () => {
    class ValueError extends Error {}
    const run = await execute(decision(["phone-3b", "frontier"]), "q", { endpoints: calls().endpoints,
      accept: async () => { throw new ValueError("judge down"); } });
    assert.equal(labels(run), "phone-3b=rejected:ValueError,frontier=served");
    assert.equal(run.tried[0].error, "ValueError");
  });

  test("a forbidden endpoint is never called, and no other serving is a policy error", async () => {
    const c = calls(ORDER, { fail: { "phone-3b": named("ConnectionError", "down"), "onprem-8b": new CallTimeoutError("slow") } });
    const error = await execute(decision(ORDER, { forbidden: ["frontier"], rule: "private" }), "secret", { endpoints: c.endpoints })
      .then(() => null, (e) => e);
    assert.ok(error instanceof FallbackForbidden);
    assert.deepEqual(c.made, ["phone-3b", "onprem-8b"], "frontier never called");
    assert.deepEqual([error.rule, error.endpoint], ["private", "frontier"]);
    assert.equal(labels(error), "phone-3b=error:ConnectionError,onprem-8b=timeout,frontier=forbidden");
    assert.equal(error.message, "policy 'private' forbids frontier, and no allowed endpoint served: " +
      "phone-3b=error:ConnectionError; onprem-8b=timeout; frontier=forbidden");
  });

  test("forbidding the cloud side forbids every cloud endpoint of the specs", async () => {
    let c = calls(ORDER, { fail: { "phone-3b": new Error("down"), "onprem-8b": new Error("down") } });
    await assert.rejects(execute(decision(ORDER, { forbidden: ["cloud"], rule: "keep-local" }), "s", { endpoints: c.endpoints, specs: SPECS }),
      FallbackForbidden);
    assert.ok(!c.made.includes("frontier"));
    c = calls();
    await assert.rejects(execute(decision(ORDER, { forbidden: ["cloud"], rule: "keep-local" }), "s", { endpoints: c.endpoints }),
      (e) => e instanceof RangeError && /the policy forbids every cloud endpoint \('keep-local'\), and specs= does not say where/.test(e.message));
    assert.deepEqual(c.made, [], "refused before any call");
    const run = await execute(decision(ORDER, { forbidden: ["cloud"] }), "x", { endpoints: calls().endpoints, specs: SPECS });
    assert.equal(run.served_by, "phone-3b");
  });

  test("when every endpoint fails the error names each attempt", async () => {
    const c = calls(ORDER, { fail: Object.fromEntries(ORDER.map((n) => [n, named("ConnectionError", n)])) });
    const error = await execute(decision(ORDER, { n_tokens: 100 }), "q", { endpoints: c.endpoints, specs: SPECS }).then(() => null, (e) => e);
    assert.ok(error instanceof EndpointsFailed && error instanceof CloudCallError);
    assert.equal(error.message, "no endpoint served: phone-3b=context; onprem-8b=error:ConnectionError; frontier=error:ConnectionError" +
      " (onprem-8b: onprem-8b; frontier: frontier)");
    assert.equal(error.cause.message, "frontier");
    const two = calls(["a", "b"], { fail: { a: new CallTimeoutError("t"), b: named("KeyError", "") } });
    await assert.rejects(execute(decision(["a", "b"]), "q", { endpoints: two.endpoints }), /a=timeout; b=error:KeyError/);
  });

  test("a two-endpoint zone runs over endpoints named edge and cloud", async () => {
    const zone = (z) => decisionOf({ ...{ edge: { cascade: ["edge", "cloud"], on_device: [true, false], checked: [] },
      edge_with_cloud_fallback: { cascade: ["edge", "cloud"], on_device: [true, false], checked: ["edge"] },
      cloud: { cascade: ["cloud"], on_device: [false], checked: [] } }[z], score: 0, reason: "t", degraded: false, model_version: "t" });
    const two = calls(["edge", "cloud"], { fail: { edge: named("ConnectionError", "down") } });
    const run = await execute(zone("edge"), "q", { endpoints: two.endpoints });
    const old = await execute(zone("edge"), "q", { edge: two.endpoints.edge, cloud: two.endpoints.cloud, edgeContextTokens: 1000 });
    assert.deepEqual([run.served_by, old.served_by], ["cloud", "cloud"]);
    assert.equal(labels(run), "edge=error:ConnectionError,cloud=served");
    const reject = () => false;
    assert.equal((await execute(zone("edge"), "q", { endpoints: calls(["edge", "cloud"]).endpoints, accept: reject })).served_by, "edge");
    assert.equal((await execute(zone("edge_with_cloud_fallback"), "q", { endpoints: calls(["edge", "cloud"]).endpoints, accept: reject })).served_by,
      "cloud");
    const cloudOnly = calls(["edge", "cloud"]);
    assert.equal((await execute(zone("cloud"), "q", { endpoints: cloudOnly.endpoints })).served_by, "cloud");
    assert.deepEqual(cloudOnly.made, ["cloud"]);
  });

  test("bad arguments are clear errors before any call", async () => {
    const c = calls();
    await assert.rejects(execute(decision(), "q", { edge: c.endpoints["phone-3b"], cloud: c.endpoints.frontier, endpoints: c.endpoints }),
      (e) => e instanceof TypeError && /not both/.test(e.message));
    await assert.rejects(execute(decision(), "q"), /needs endpoints= \(name -> call\), or edge= and cloud=/);
    await assert.rejects(execute(decision(), "q", { endpoints: { "phone-3b": c.endpoints["phone-3b"], "onprem-8b": c.endpoints["onprem-8b"] } }),
      (e) => e instanceof RangeError && /names 'frontier', which endpoints= does not have/.test(e.message));
    await assert.rejects(execute(decision(["bad name"]), "q", { endpoints: { "bad name": c.endpoints.frontier } }), /is not an endpoint name/);
    await assert.rejects(execute(decision(["a"]), "q", { endpoints: { a: "not callable" } }), /must be a callable/);
    await assert.rejects(execute(decision(), "q", { endpoints: {} }), /endpoints is empty/);
    assert.deepEqual(c.made, []);
  });
});

describe("Router.execute on an N-endpoint bundle", () => {
  let router;
  before(async () => { router = await Router.load(ENDPOINT_BUNDLE, { strict: true }); });
  after(() => router.close());
  const names = () => router.endpointNames;
  /** A prompt the bundle (its own rule, undeclared precision) gives a cascade of at least `length` endpoints. */
  const promptWith = (length) => {
    const v = endpointVectors();
    const row = v.decisions.find((d) => d.variant === 0 && d.precision === null && !d.error && d.decision.cascade.length >= length);
    return v.cases[row.case].prompt;
  };

  test("follows the decision's cascade over the calls by name; each failure moves on", async () => {
    const prompt = promptWith(3);
    const d = await router.route(prompt);
    const c = calls(names(), { fail: { [d.cascade[0]]: named("ConnectionError", "down"), [d.cascade[1]]: new Error("500") } });
    const run = await router.execute(prompt, c.endpoints);
    assert.deepEqual(run.decision, d);
    assert.deepEqual(c.made, d.cascade.slice(0, 3));
    assert.equal(run.served_by, d.cascade[2]);
    assert.equal(run.fallback_code, `left ${d.cascade[0]}=error:ConnectionError, ${d.cascade[1]}=error:Error`);
    // the bundle's specs price the calls: each called endpoint at the prompt's tokens and the bundle's output tokens
    const spec = new Map(router.manifest.endpoints.spec.endpoints.map((e) => [e.name, e]));
    const out = router.manifest.endpoints.outputTokens;
    assert.equal(run.expected_cost, d.cascade.slice(0, 3).reduce((sum, n) => sum + spec.get(n).callCost(d.n_tokens, out), 0));
  });

  test("specs given at execute time: a context limit they set skips the endpoint", async () => {
    const prompt = promptWith(2);
    const d = await router.route(prompt);
    const tight = parseEndpoints({ endpoints: router.manifest.endpoints.spec.endpoints.map((e) => ({ ...e.asDict(),
      context_tokens: e.name === d.cascade[0] ? 1 : e.context_tokens })) });
    const c = calls(names());
    const run = await router.execute(prompt, c.endpoints, { specs: tight });
    assert.deepEqual(c.made, [d.cascade[1]]);
    assert.equal(run.fallback_reason, `left ${d.cascade[0]}=context: prompt of ~${d.n_tokens} tokens exceeds the context limit of 1`);
  });

  test("a spec given with only some fields takes the rest from the bundle's (Python's filled_from)", async () => {
    const prompt = promptWith(2);
    const d = await router.route(prompt);
    const run = await router.execute(prompt, calls(names()).endpoints, { specs: { [d.cascade[0]]: { context_tokens: 10 ** 6 } },
      accept: () => false });
    assert.equal(triedText(run.tried), `${d.cascade[0]}=rejected,${d.cascade[1]}=served`);
    const bundled = router.manifest.endpoints.spec.get(d.cascade[0]);
    assert.equal(run.tried[0].cost, bundled.callCost(d.n_tokens, router.manifest.endpoints.outputTokens), "its price is the bundle's");
    assert.equal(run.tried[1].cost, null, "an endpoint whose spec was not given has none, as in Python");
    assert.equal(run.expected_cost, null);
  });

  test("a forbidden endpoint is never called; when the others fail, FallbackForbidden names the rule", async () => {
    const prompt = promptWith(2);
    const d = await router.route(prompt);
    const banned = d.cascade[1];
    router.policy = await PolicySet.fromObject({ rules: [{ name: "no-" + banned, when: {}, then: "forbid", endpoint: banned }] },
      { endpoints: router.policyEndpoints });
    try {
      const c = calls(names(), { fail: Object.fromEntries(names().map((n) => [n, new Error(`${n} down`)])) });
      const error = await router.execute(prompt, c.endpoints).then(() => null, (e) => e);
      assert.ok(error instanceof FallbackForbidden, String(error));
      assert.ok(!c.made.includes(banned), `${banned} never called (${c.made})`);
      assert.equal(error.endpoint, banned);
      assert.equal(error.rule, `no-${banned}`);
      assert.deepEqual(error.decision.forbidden, [banned]);
      assert.ok(error.message.startsWith(`policy 'no-${banned}' forbids ${banned}, and no allowed endpoint served: `), error.message);
    } finally {
      router.policy = null;
    }
  });

  test("every endpoint failing names each attempt; the calls lacking one is refused before any call", async () => {
    const prompt = promptWith(2);
    const d = await router.route(prompt);
    const c = calls(names(), { fail: Object.fromEntries(names().map((n) => [n, new TypeError(n)])) });
    const error = await router.execute(prompt, c.endpoints).then(() => null, (e) => e);
    assert.ok(error instanceof EndpointsFailed);
    assert.equal(error.message, `no endpoint served: ${d.cascade.map((n) => `${n}=error:TypeError`).join("; ")}` +
      ` (${d.cascade.map((n) => `${n}: ${n}`).join("; ")})`);
    assert.deepEqual(c.made, d.cascade);
    await assert.rejects(router.execute(prompt, calls(["edge", "cloud"]).endpoints), /which endpoints= does not have/);
  });
});
