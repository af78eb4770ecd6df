// The request record (src/request.js, serving.Request's): built once, checked, frozen, and the same
// decision and run whether the app gives a Request or a prompt with options.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Capabilities, LocalModel, Needs, PolicySet, Request, RoutedChat, Router, conversationPrompt } from "../src/index.js";
import { BUNDLE, ENDPOINT_BUNDLE, promptIn } from "./fixtures.js";

describe("Request", () => {
  test("holds the request's fields, checked, and is frozen", () => {
    const metadata = { tier: "free" };
    const request = new Request("What is 2 + 2?", { precision: "exact", metadata, needs: new Needs({ json: true }),
      capabilities: { edge: { json: true }, cloud: null }, deadline: 1234.5, conversation: "c-1" });
    assert.equal(request.text, "What is 2 + 2?");
    assert.equal(request.precision, "exact");
    assert.deepEqual(request.metadata, { tier: "free" });
    assert.notEqual(request.metadata, metadata, "a copy: the app's object stays the app's");
    assert.ok(Object.isFrozen(request) && Object.isFrozen(request.metadata));
    assert.ok(request.capabilities.get("edge") instanceof Capabilities && request.capabilities.get("cloud") === null);
    assert.deepEqual([request.deadline, request.conversation, request.messages], [1234.5, "c-1", null]);
    assert.throws(() => { request.precision = "tolerant"; }, TypeError);
    const plain = new Request("hi");
    assert.deepEqual([plain.precision, plain.metadata, plain.needs, plain.capabilities, plain.deadline, plain.conversation],
      [null, null, null, null, null, null]);
    assert.equal(new Request("hi", { needs: new Needs() }).needs, null, "needing nothing reads as no needs");
  });

  test("a wrong field is a TypeError or RangeError naming it", () => {
    assert.throws(() => new Request(42), /text must be a string/);
    assert.throws(() => new Request("hi", { precision: "bogus" }), RangeError);
    assert.throws(() => new Request("hi", { metadata: { n: 1 } }), /metadata must be an object of strings to strings/);
    assert.throws(() => new Request("hi", { needs: { json: true } }), /needs must be a Needs/);
    assert.throws(() => new Request("hi", { deadline: "soon" }), /deadline must be a performance.now\(\) value/);
    assert.throws(() => new Request("hi", { deadline: NaN }), TypeError);
    assert.throws(() => new Request("hi", { conversation: "" }), /conversation must be 1 to 256 printable characters, got ''/);  // as Python's
    assert.throws(() => new Request(null, { messages: [] }), /messages must be a non-empty array/);
  });

  test("messages give the text the chat client routes; but() copies with changes", () => {
    const messages = [{ role: "system", content: "Be terse." }, { role: "user", content: "Hi" }];
    const request = new Request(null, { messages, precision: "standard" });
    assert.equal(request.text, conversationPrompt(messages));
    assert.equal(request.messages, messages);
    const later = request.but({ deadline: 99, precision: null });
    assert.deepEqual([later.text, later.messages, later.precision, later.deadline], [request.text, messages, null, 99]);
    assert.equal(request.deadline, null);
  });
});

describe("a Request or a prompt with options: one decision, one run", () => {
  let router;
  before(async () => { router = await Router.load(BUNDLE, { strict: true }); });
  after(() => router.close());

  test("route() and routeBatch()", async () => {
    const prompt = promptIn("edge_with_cloud_fallback");
    for (const precision of [null, "exact", "tolerant"]) {
      assert.deepEqual(await router.route(new Request(prompt, { precision })), await router.route(prompt, { precision }));
    }
    const batch = await router.routeBatch([new Request(prompt, { precision: "exact" }), promptIn("cloud")], [null, "standard"]);
    assert.deepEqual(batch, [await router.route(prompt, { precision: "exact" }), await router.route(promptIn("cloud"), { precision: "standard" })]);
    await assert.rejects(router.route(new Request(prompt), { precision: "exact" }), /give precision in the Request, not beside it/);
    await assert.rejects(router.routeBatch([new Request(prompt)], ["exact"]), /give precision in the Request, not beside it/);
    await assert.rejects(router.routeBatch([prompt, 7]), /prompts\[1\] must be a string or a Request, got number/);
  });

  test("the policy reads the Request's metadata and needs", async () => {
    const policy = await PolicySet.fromObject({ rules: [{ name: "private", when: { metadata: { privacy: "local" } }, then: "forbid", endpoint: "cloud" }] });
    router.policy = policy;
    try {
      const prompt = promptIn("cloud");
      const request = new Request(prompt, { metadata: { privacy: "local" } });
      const decision = await router.route(request);
      assert.deepEqual([decision.rule, decision.forbidden, decision.cascade], ["private", ["cloud"], ["edge"]]);
      assert.deepEqual(decision, await router.route(prompt, { metadata: { privacy: "local" } }));
      const cloud = [];
      const run = await router.execute(request, (p) => `edge: ${p.length}`, (p) => { cloud.push(p); return "cloud"; });
      assert.deepEqual([run.served_by, cloud.length], ["edge", 0]);
    } finally {
      router.policy = null;
    }
  });

  test("execute() gives each call the Request's text", async () => {
    const prompt = promptIn("edge");
    const seen = [];
    const run = await router.execute(new Request(prompt, { precision: "tolerant" }), (p) => { seen.push(p); return "e"; }, () => "c");
    assert.deepEqual([run.served_by, seen, run.decision.precision], ["edge", [prompt], "tolerant"]);
    await assert.rejects(router.execute(new Request(prompt), () => "e", () => "c", { metadata: { a: "b" } }),
      /give metadata in the Request, not beside it/);
  });

  test("RoutedChat.create() takes a Request holding the conversation", async () => {
    const asked = [];
    const chat = new RoutedChat(router, { edge: new LocalModel((messages) => { asked.push(messages); return "from the edge"; }),
      cloud: new LocalModel(() => "from the cloud") });
    const messages = [{ role: "user", content: promptIn("edge") }];
    const given = await chat.create(new Request(null, { messages, precision: "tolerant" }));
    const plain = await chat.create(messages, { precision: "tolerant" });
    assert.deepEqual(given.routing.decision, plain.routing.decision);
    assert.equal(given.text, "from the edge");
    assert.deepEqual(asked, [messages, messages]);
    await assert.rejects(chat.create(new Request("no messages")), /must hold the conversation's messages/);
    await assert.rejects(chat.create(new Request(null, { messages }), { precision: "exact" }), /give precision in the Request/);
  });
});

describe("a Request on an N-endpoint bundle", () => {
  test("its capabilities and needs decide as the options do", async () => {
    const router = await Router.load(ENDPOINT_BUNDLE, { strict: true });
    try {
      const names = router.endpointNames;
      const capabilities = Object.fromEntries(names.map((n, k) => [n, { json: k === names.length - 1 }]));
      const needs = new Needs({ json: true });
      const decision = await router.route(new Request("Give me JSON: {\"a\": 1}", { needs, capabilities }));
      assert.deepEqual(decision.cascade, [names[names.length - 1]]);
      assert.deepEqual(decision, await router.route("Give me JSON: {\"a\": 1}", { needs, capabilities }));
    } finally {
      await router.close();
    }
  });
});
