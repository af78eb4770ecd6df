// execute(): edge or cloud first as decided, the cloud as fallback, by serving/execute.py's rules.
// Prompts are picked from the vectors by the zone Python gave them, so each zone is exercised
// with a real decision of the bundle.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { CloudCallError, EdgeTimeoutError, Router } from "../src/index.js";
import { BUNDLE, promptIn, quietLogger, vectors } from "./fixtures.js";

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
    assert.equal(run.fallback_reason, "edge call failed: Error: device offline");
    assert.equal(run.fallback_code, "edge call failed (Error)");
    assert.deepEqual(statuses(run), ["edge:error", "cloud:ok"]);
  });

  test("an edge over its timeout is aborted and the cloud answers", async () => {
    let aborted = null;
    const slow = (prompt, { signal }) => new Promise((resolve) => {
      signal.addEventListener("abort", () => { aborted = signal.reason; resolve("too late"); });
    });
    const run = await router.execute(promptIn("edge"), slow, recorded("cloud answer"), { edgeTimeoutMs: 50 });
    assert.equal(run.served_by, "cloud");
    assert.ok(aborted instanceof EdgeTimeoutError);
    assert.ok(run.edge_error instanceof EdgeTimeoutError);
    assert.deepEqual(statuses(run), ["edge:timeout", "cloud:ok"]);
    assert.equal(run.fallback_code, "edge call failed (EdgeTimeoutError)");
  });

  test("in the fallback zone the accept check decides: accepted, rejected, or raising", async () => {
    const prompt = promptIn("edge_with_cloud_fallback");
    const accepted = await router.execute(prompt, recorded("good"), recorded("cloud"), { accept: (a) => a === "good" });
    assert.equal(accepted.served_by, "edge");
    assert.deepEqual(statuses(accepted), ["edge:ok", "accept:ok"]);
    const rejected = await router.execute(prompt, recorded("bad"), recorded("cloud"), { accept: (a) => a === "good" });
    assert.equal(rejected.served_by, "cloud");
    assert.equal(rejected.fallback_reason, "accept check rejected the edge answer");
    assert.deepEqual(statuses(rejected), ["edge:ok", "accept:rejected", "cloud:ok"]);
    const raising = await router.execute(prompt, recorded("x"), recorded("cloud"), { accept: () => { throw new TypeError("no"); } });
    assert.equal(raising.served_by, "cloud");
    assert.equal(raising.fallback_code, "accept check raised (TypeError)");
    assert.deepEqual(statuses(raising), ["edge:ok", "accept:error", "cloud:ok"]);
  });

  test("verifyEdgeZone checks confident edge answers too", async () => {
    const run = await router.execute(promptIn("edge"), recorded("bad"), recorded("cloud"), { accept: () => false, verifyEdgeZone: true });
    assert.equal(run.served_by, "cloud");
    assert.deepEqual(statuses(run), ["edge:ok", "accept:rejected", "cloud:ok"]);
  });

  test("a cloud failure throws CloudCallError with the edge failure, the steps and the decision", async () => {
    const edgeError = new Error("edge down");
    await assert.rejects(
      router.execute(promptIn("edge"), recorded(() => { throw edgeError; }), recorded(() => { throw new Error("cloud down"); })),
      (error) => error instanceof CloudCallError && error.edge_error === edgeError
        && error.message === "cloud call failed: Error: cloud down (after: edge call failed: Error: edge down)"
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
    assert.match(run.fallback_reason, /^prompt of ~\d+ tokens exceeds the edge context limit of 1024$/);
    assert.deepEqual(statuses(run), ["edge:skipped", "cloud:ok"]);
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
    assert.equal(run.fallback_code, "accept check raised (TypeError)");
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
    await assert.rejects(router.execute("hi", recorded("e"), recorded("c"), { accept: "nice" }), TypeError);
    await assert.rejects(router.execute("hi", recorded("e"), recorded("c"), { edgeTimeoutMs: -1 }), RangeError);
    await assert.rejects(router.execute(7, recorded("e"), recorded("c")), TypeError);
  });
});
