// Routing never throws for valid arguments and throws for invalid ones; a scoring failure gives
// the rule table's decision, never an exception.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Router } from "../src/index.js";
import { BUNDLE, quietLogger } from "./fixtures.js";

describe("arguments", () => {
  test("are the caller's errors", async () => {
    const router = await Router.load(BUNDLE, { strict: true });
    await assert.rejects(router.route(42), TypeError);
    await assert.rejects(router.route(null), TypeError);
    await assert.rejects(router.route("hi", { precision: "bogus" }), RangeError);
    await assert.rejects(router.routeBatch("a string"), TypeError);
    await assert.rejects(router.routeBatch(["a", 1]), /prompts\[1\] must be a string/);
    await assert.rejects(router.routeBatch(["a", "b"], ["exact"]), RangeError);
    await assert.rejects(Router.load(BUNDLE, { unfamiliarPolicy: "guess" }), RangeError);
    assert.deepEqual(await router.routeBatch([]), []);
    await router.close();
  });
});

describe("scoring failures", () => {
  test("give the rule table's decision with the reason, and a warning", async () => {
    const logger = quietLogger();
    const router = await Router.load(BUNDLE, { strict: true, logger });
    await router.close();  // the session is gone: every run fails
    const decision = await router.route("What is the interest rate on a loan?", { precision: "exact" });
    assert.equal(decision.degraded, true);
    assert.equal(decision.model_version, "rule-table");
    assert.match(decision.reason, /^rule table score 0\.6, finance domain, exact precision \(degraded: scoring failed: /);
    assert.equal(logger.messages.length, 1);
  });
});

describe("any string", () => {
  test("routes, degraded or not, without an exception", async () => {
    const prompts = ["", " ", "\ud800", "\udc00\ud800", "\u0000", "😀".repeat(5000), "x".repeat(1 << 20), "日本語", "مرحبا"];
    for (const router of [await Router.load(BUNDLE, { strict: true }), await Router.load("/nonexistent", { logger: quietLogger() })]) {
      for (const decision of await router.routeBatch(prompts)) {
        assert.ok(["edge", "edge_with_cloud_fallback", "cloud"].includes(decision.zone));
        assert.equal(decision.target, decision.zone === "cloud" ? "cloud" : "edge");
        assert.equal(typeof decision.reason, "string");
      }
      await router.close();
    }
  });
});

describe("concurrent calls", () => {
  test("route() calls in flight together give the decisions they give one by one", async () => {
    const { vectors } = await import("./fixtures.js");
    const router = await Router.load(BUNDLE, { strict: true });
    const prompts = vectors().cases.filter((c) => c.kind === "log").slice(0, 200).map((c) => c.prompt);
    const alone = [];
    for (const prompt of prompts) alone.push(await router.route(prompt, { precision: "standard" }));
    const together = await Promise.all(prompts.map((prompt) => router.route(prompt, { precision: "standard" })));
    const batches = await Promise.all([0, 50, 100, 150].map((i) =>
      router.routeBatch(prompts.slice(i, i + 50), prompts.slice(i, i + 50).map(() => "standard"))));
    assert.deepEqual(together, alone);
    batches.flat().forEach((d, i) => {
      assert.equal(d.zone, alone[i].zone);
      assert.equal(d.reason, alone[i].reason);
      assert.ok(Math.abs(d.score - alone[i].score) <= 1e-5);
    });
    await router.close();
  });
});
