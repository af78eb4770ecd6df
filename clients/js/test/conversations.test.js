// Conversations (src/conversations.js, Python's tests/test_conversations.py): what a turn costs where
// (switchCosts), the knob (Stickiness) from never to always, the state and the in-memory store's
// bounds, decisions that say their turn, and the turns execute() and RoutedChat record, against HTTP
// servers on 127.0.0.1 (node:http) as chat.test.js runs them. Parity with Python's decisions is
// conversation-parity.test.js's.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { BundleError, ConversationState, ConversationStoreError, Conversations, Endpoint, EndpointSpec, EndpointsFailed, Held, MemoryStore, PolicySet, Price,
  Request, RoutedChat, Router, Stickiness, TURN_EVIDENCE_FEATURES, TURN_OUTCOMES, TurnEvidence, TurnEvidenceError, switchCosts } from "../src/index.js";
import { BUNDLE, ENDPOINT_BUNDLE, endpointVectors, promptIn, quietLogger } from "./fixtures.js";
import { parsePythonJson } from "../src/canonical-json.js";
import { manifestDigest } from "../src/index.js";

const NOW = 1_000_000;
const now = () => Date.now() / 1000;

/** A conversation whose last turn `endpoint` served, its whole history of `tokens` in that endpoint's cache. */
function conversationOn(endpoint, tokens = 150, at = now()) {
  return new ConversationState({ turns: 1, endpoint, outcome: "served", history_tokens: tokens, held: [new Held(endpoint, tokens, at)], updated: at });
}

/** route() of `prompt` in conversation "c", whose state `store` is given first. */
function routed(router, store, state, prompt, fields = {}) {
  if (state !== null) store.put("c", state);
  return router.route(new Request(prompt, { ...fields, conversation: "c" }));
}

describe("what a turn costs where", () => {
  const device = new EndpointSpec({ name: "phone", where: "device", price: new Price({ per_call: 0 }), prefill_tokens_per_s: 1000 });
  const cached = new EndpointSpec({ name: "cached", where: "cloud", price: new Price({ per_1m_input: 2, per_1m_output: 8, per_1m_cached_input: 0.5 }) });
  const plain = new EndpointSpec({ name: "plain", where: "cloud", price: new Price({ per_1m_input: 2, per_1m_output: 8 }) });

  test("the history each cache lacks is read again, priced by its prefill rate; a provider's discount counts; caches expire", () => {
    const state = new ConversationState({ turns: 2, endpoint: "cached", outcome: "served", history_tokens: 3000,
      held: [new Held("phone", 2000, NOW), new Held("cached", 3000, NOW)], updated: NOW });
    const [delta, missing] = switchCosts([device, cached, plain], state, 3500, 100, 0.01, NOW);
    assert.deepEqual(missing, [1000, 0, 0]);  // phone: 1,000 history tokens after its prefix
    assert.ok(Math.abs(delta[0] - 0.01) < 1e-12);  // read at 1,000 tokens/s, a second priced at $0.01
    assert.ok(Math.abs(delta[1] - (-3000 * 1.5 / 1e6)) < 1e-15);  // its discount: 3,000 tokens at $0.5 instead of $2 per 1M
    assert.equal(delta[2], 0);  // no cache: it reads everything on every turn, wherever the conversation was
    const later = switchCosts([device, cached, plain], state, 3500, 100, 0.01, NOW + 301);  // five minutes on: read again
    assert.deepEqual(later[1], [1000, 3000, 0]);
    assert.ok(later[0][1] > 0);
    assert.deepEqual(switchCosts([device, cached, plain], state, 3500, 100, 0.01, NOW + 300)[1], [1000, 0, 0]);  // at the limit: alive
  });

  test("a history longer than the prompt counts as the prompt", () => {
    const phone = new EndpointSpec({ name: "phone", where: "device", price: new Price({ per_call: 0 }), prefill_tokens_per_s: 100 });
    const state = new ConversationState({ turns: 3, endpoint: "cloud", outcome: "served", history_tokens: 5000, held: [], updated: NOW });
    assert.deepEqual(switchCosts([phone], state, 800, 0, 1, NOW)[1], [800]);
  });

  test("Stickiness is one knob from never to always", () => {
    assert.ok(new Stickiness({ weight: 0 }).never && !new Stickiness({ weight: 0 }).always);
    assert.ok(new Stickiness({ weight: Infinity }).always);
    assert.deepEqual({ ...new Stickiness() }, { weight: 1, secondsPrice: 0.003 });
    for (const bad of [-1, NaN]) assert.throws(() => new Stickiness({ weight: bad }), RangeError);
    for (const bad of ["1", true]) assert.throws(() => new Stickiness({ weight: bad }), TypeError);
    assert.throws(() => new Stickiness({ weight: 1, secondsPrice: Infinity }), /secondsPrice must be finite/);
  });
});

describe("the state and its store", () => {
  test("a turn moves the state on and keeps the other caches; its JSON reads back", () => {
    let state = new ConversationState().after("edge", { inputTokens: 100, outputTokens: 40, onDevice: true, outcome: "served", now: 1 });
    state = state.after("cloud", { inputTokens: 180, outputTokens: 60, onDevice: false, outcome: "fallback", now: 2 });
    assert.deepEqual([state.turns, state.endpoint, state.outcome, state.history_tokens], [2, "cloud", "fallback", 240]);
    assert.deepEqual(state.holds("edge"), new Held("edge", 140, 1));  // its prompt and its answer, from turn 1
    assert.deepEqual(state.holds("cloud"), new Held("cloud", 180, 2));  // a provider caches the prompt it was sent
    assert.deepEqual(ConversationState.fromJson(state.toJson()), state);
    assert.equal(state.toJson(), '{"turns":2,"endpoint":"cloud","outcome":"fallback","history_tokens":240,' +
      '"held":[["edge",140,1.0],["cloud",180,2.0]],"updated":2.0}');  // Python's to_json, byte for byte
    assert.equal(state.marked("regenerated").outcome, "regenerated");
    assert.throws(() => state.after("edge", { inputTokens: 1, outputTokens: 1, onDevice: true, outcome: "great", now: 3 }), /outcome='great'/);
    for (const bad of ["{}", "[]", '{"turns": -1}', "not json"]) assert.throws(() => ConversationState.fromJson(bad), /^RangeError: not a conversation state/);
    assert.ok(Object.isFrozen(state) && Object.isFrozen(state.held));
  });

  test("the memory store is bounded by count (the least recently used first) and by age", () => {
    const store = new MemoryStore({ maxConversations: 1000, maxAgeS: 60 });
    const at = now();
    for (let k = 0; k < 5000; k++) store.put(`c${k}`, new ConversationState({ turns: 1, endpoint: "edge", outcome: "served", history_tokens: k, updated: at }));
    assert.equal(store.size, 1000);
    assert.equal(store.get("c0"), null);
    assert.notEqual(store.get("c4999"), null);
    store.get("c4000");  // used: kept over c4001 when one more arrives
    store.put("new", new ConversationState({ turns: 1, endpoint: "edge", outcome: "served", history_tokens: 1, updated: at }));
    assert.notEqual(store.get("c4000"), null);
    assert.equal(store.get("c4001"), null);
    store.put("old", new ConversationState({ turns: 1, endpoint: "edge", outcome: "served", history_tokens: 1, updated: at - 61 }));
    assert.equal(store.get("old"), null);  // older than maxAgeS: forgotten, and dropped when read
    assert.equal(store.size, 999);
    for (const bad of [{ maxConversations: 0 }, { maxAgeS: 0 }, { maxConversations: 1.5 }, { maxConversations: true }]) {
      assert.throws(() => new MemoryStore(bad), RangeError);
    }
  });

  test("a conversation id is 1 to 256 printable characters, as Python's", () => {
    assert.equal(new Request("hi", { conversation: "chat-1" }).conversation, "chat-1");
    for (const bad of ["", "x".repeat(257), "line\nbreak", "tab\there", "\u200b"]) {
      assert.throws(() => new Request("hi", { conversation: bad }), /conversation must be 1 to 256 printable characters, got '/);
    }
    assert.throws(() => new Request("hi", { conversation: 7 }), TypeError);
    assert.equal(new Request("hi", { conversation: "ok with spaces é 😀" }).conversation, "ok with spaces é 😀");
  });
});

describe("N endpoints: the knob's ends", () => {
  let plain, prompts;
  before(async () => {
    plain = await Router.load(ENDPOINT_BUNDLE, { strict: true, unfamiliarPolicy: "learned" });
    prompts = endpointVectors().cases.filter((c) => c.id.startsWith("sim_")).slice(0, 40).map((c) => c.prompt);
  });
  after(() => plain.close());

  test("weight 0 decides every turn on its own; a decision without a conversation reads as before", async () => {
    const store = new MemoryStore();
    const never = await Router.load(ENDPOINT_BUNDLE, { strict: true, unfamiliarPolicy: "learned", conversations: store, stickiness: { weight: 0 } });
    try {
      for (const prompt of prompts) {
        const alone = await plain.route(prompt);
        const turn = await routed(never, store, conversationOn("frontier"), prompt);
        assert.deepEqual(turn.cascade, alone.cascade);
        assert.equal(turn.turn, 2);
        assert.equal(turn.switched, turn.endpoint !== "frontier");
        assert.ok(!("turn" in JSON.parse(JSON.stringify(alone))) && alone.turn === null && alone.switched === null);
        assert.deepEqual(Object.keys(turn).slice(15, 17), ["turn", "switched"]);  // after expected, as Python's to_dict
      }
    } finally {
      await never.close();
    }
  });

  test("weight Infinity stays on the last endpoint while it may serve; a policy forbidding it moves the conversation", async () => {
    const store = new MemoryStore();
    const always = await Router.load(ENDPOINT_BUNDLE, { strict: true, unfamiliarPolicy: "learned", conversations: store,
      stickiness: new Stickiness({ weight: Infinity }) });
    try {
      for (const last of ["phone-3b", "cloud-mid", "frontier"]) {
        for (const prompt of prompts) {
          const decision = await routed(always, store, conversationOn(last), prompt);
          assert.equal(decision.endpoint, last, decision.reason);
          assert.equal(decision.switched, false);
        }
      }
      const rule = { name: "no-frontier", when: { metadata: { tier: "free" } }, then: "forbid", endpoint: "frontier" };
      always.policy = await PolicySet.parse(JSON.stringify({ rules: [rule] }), { source: "p.json", endpoints: always.policyEndpoints });
      const decision = await routed(always, store, conversationOn("frontier"), prompts[0], { metadata: { tier: "free" } });
      assert.ok(!decision.cascade.includes("frontier"));
      assert.equal(decision.switched, true);
      assert.equal(decision.rule, "no-frontier");
      assert.match(decision.reason, /conversation turn 2 moves from frontier to /);
    } finally {
      await always.close();
    }
  });
});

describe("two endpoints", () => {
  let router, store;
  before(async () => {
    store = new MemoryStore();
    router = await Router.load(BUNDLE, { strict: true, unfamiliarPolicy: "learned", conversations: store, stickiness: { weight: Infinity } });
  });
  after(() => router.close());

  test("always: the last side stays; a first turn says its number", async () => {
    for (const zone of ["edge", "edge_with_cloud_fallback", "cloud"]) {
      const prompt = promptIn(zone);
      assert.equal((await routed(router, store, conversationOn("cloud", 1000), prompt)).endpoint, "cloud");
      assert.equal((await routed(router, store, conversationOn("edge", 1000), prompt)).target, "edge");
      const first = await router.route(prompt, { conversation: `first-${zone}` });
      assert.deepEqual([first.turn, first.switched], [1, null]);
      assert.match(first.reason, /; conversation turn 1$/);
    }
  });
});

// The turns a router runs.

/** An OpenAI-compatible server on 127.0.0.1: answers with `usage.completion_tokens` of `tokens`, or fails with `status`. */
async function server({ status = 200, tokens = 7, name = "cloud" } = {}) {
  const received = [];
  const http_ = http.createServer(async (req, res) => {
    let body = "";
    for await (const part of req) body += part;
    received.push(JSON.parse(body));
    if (status === 200 && JSON.parse(body).stream) {
      const event = (delta, finish = null, extra = {}) =>
        `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`;
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(event({ role: "assistant", content: `answer from ${name}` }) +
        event({}, "stop", { usage: { prompt_tokens: 10, completion_tokens: tokens } }) + "data: [DONE]\n\n");
      return;
    }
    if (status !== 200) {
      res.writeHead(status, { "content-type": "application/json" });
      res.end('{"error": {"message": "overloaded"}}');
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: "c", object: "chat.completion", model: "m",
      choices: [{ index: 0, message: { role: "assistant", content: `answer from ${name}` }, finish_reason: "stop" }],
      usage: { prompt_tokens: 10, completion_tokens: tokens } }));
  });
  await new Promise((resolve) => http_.listen(0, "127.0.0.1", resolve));
  return { received, url: `http://127.0.0.1:${http_.address().port}/v1`,
    close: () => { http_.closeAllConnections(); return new Promise((resolve) => http_.close(resolve)); } };
}

describe("the turns execute() and RoutedChat record", () => {
  let router, store;
  before(async () => {
    store = new MemoryStore();
    router = await Router.load(BUNDLE, { strict: true, conversations: store, stickiness: new Stickiness({ weight: Infinity }) });
  });
  after(() => router.close());

  test("RoutedChat: each turn where it was served and how, the answer's tokens from its usage", async () => {
    const edge = await server({ status: 503 }), cloud = await server({ tokens: 11 });
    try {
      const chat = new RoutedChat(router, { edge: new Endpoint({ baseUrl: edge.url, model: "e" }), cloud: new Endpoint({ baseUrl: cloud.url, model: "c" }) });
      const messages = [{ role: "user", content: promptIn("edge") }];
      const first = await chat.create(messages, { conversation: "talk" });
      assert.deepEqual([first.routing.served_by, first.text, edge.received.length], ["cloud", "answer from cloud", 1]);
      const tokens = first.routing.decision.n_tokens;
      let state = store.get("talk");
      assert.deepEqual([state.turns, state.endpoint, state.outcome, state.history_tokens], [1, "cloud", "fallback", tokens + 11]);
      assert.deepEqual([state.holds("cloud").tokens, state.holds("edge")], [tokens, null]);  // a provider caches the prompt
      assert.deepEqual([first.routing.decision.turn, first.routing.decision.switched], [1, null]);
      // the second turn, in a Request holding the messages: always stay on the cloud, where the last one ran
      const next = [...messages, { role: "assistant", content: first.text }, { role: "user", content: "and why?" }];
      const second = await chat.create(new Request(null, { messages: next, conversation: "talk" }));
      assert.deepEqual([second.routing.decision.turn, second.routing.decision.endpoint, second.routing.decision.switched], [2, "cloud", false]);
      assert.equal(edge.received.length, 1);  // the edge was not tried again
      state = store.get("talk");
      assert.deepEqual([state.turns, state.endpoint, state.outcome], [2, "cloud", "served"]);
    } finally {
      await edge.close();
      await cloud.close();
    }
  });

  test("a stream's turn is recorded when it opens, its answer's length added at its end from its usage", async () => {
    const edge = await server({ name: "edge", tokens: 9 }), cloud = await server({ tokens: 13 });
    try {
      const chat = new RoutedChat(router, { edge: new Endpoint({ baseUrl: edge.url, model: "e" }), cloud: new Endpoint({ baseUrl: cloud.url, model: "c" }) });
      const stream = await chat.create([{ role: "user", content: promptIn("cloud") }], { stream: true, conversation: "streamed" });
      const opened = store.get("streamed");
      const { n_tokens: tokens } = stream.routing.decision;
      const served = stream.routing.served_by;
      assert.deepEqual([opened.turns, opened.endpoint, opened.history_tokens], [1, served, tokens]);  // its answer not known yet
      let text = "";
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
      assert.equal(text, `answer from ${served}`);
      const usage = served === "cloud" ? 13 : 9;
      for (let waited = 0; store.get("streamed").history_tokens === tokens && waited < 5000; waited += 10) await new Promise((r) => setTimeout(r, 10));
      const ended = store.get("streamed");
      assert.deepEqual([ended.turns, ended.history_tokens], [1, tokens + usage]);
      // a device's cache holds what it wrote; a provider's the prompt it was sent
      assert.equal(ended.holds(served).tokens, served === "edge" ? tokens + usage : tokens);
      assert.equal(await router.recordAnswer("streamed", { turn: 0, endpoint: served, outputTokens: 5 }), false);  // not that turn
      assert.equal(await router.recordAnswer("streamed", { turn: 1, endpoint: served === "edge" ? "cloud" : "edge", outputTokens: 5 }), false);
      assert.equal(await router.recordAnswer("streamed", { turn: 1, endpoint: served, outputTokens: 0 }), false);
      await assert.rejects(router.recordAnswer("streamed", { turn: 1, endpoint: "mars", outputTokens: 5 }), /this router's endpoints are edge, cloud/);
    } finally {
      await edge.close();
      await cloud.close();
    }
  });

  test("execute(): served, rejected, failed; the answer counted with the bundle's tokenizer when it reports no usage", async () => {
    const prompt = promptIn("edge_with_cloud_fallback");
    const served = await router.execute(prompt, () => "four", () => "cloud says four", { conversation: "calls" });
    assert.equal(served.served_by, "edge");
    let state = store.get("calls");
    assert.deepEqual([state.turns, state.endpoint, state.outcome], [1, "edge", "served"]);
    assert.equal(state.history_tokens, served.decision.n_tokens + router.routing.rules.countTokens("four"));
    assert.equal(state.holds("edge").tokens, state.history_tokens);  // the device's cache holds its prompt and its answer
    const rejected = await router.execute(new Request(prompt, { conversation: "rejected" }), () => "five", () => "four",
      { accept: () => false });
    assert.equal(rejected.served_by, "cloud");
    assert.equal(store.get("rejected").outcome, "rejected");
    await assert.rejects(router.execute(prompt, () => { throw new Error("asleep"); }, () => { throw new Error("down"); },
      { conversation: "calls" }), EndpointsFailed);
    state = store.get("calls");
    assert.deepEqual([state.turns, state.endpoint, state.outcome], [2, null, "failed"]);
    assert.equal(state.holds("edge").tokens, served.decision.n_tokens + router.routing.rules.countTokens("four"));  // kept
  });

  test("recordTurn() for turns the app runs itself", async () => {
    assert.equal(await router.recordTurn("own", "edge", { inputTokens: 400, outputTokens: 50 }), true);
    assert.deepEqual([store.get("own").history_tokens, store.get("own").outcome], [450, "served"]);
    assert.equal(await router.recordTurn("own", "edge", { inputTokens: 400, outputTokens: 50, outcome: "regenerated" }), true);
    assert.equal(store.get("own").outcome, "regenerated");
    await assert.rejects(router.recordTurn("own", "mars", { inputTokens: 1 }), /endpoint='mars': this router's endpoints are edge, cloud/);
    await assert.rejects(router.recordTurn("own", "edge", { inputTokens: 1, outcome: "great" }), /outcome='great'/);
    await assert.rejects(router.recordTurn("", "edge", { inputTokens: 1 }), /conversation must be 1 to 256/);
  });
});

describe("stores", () => {
  test("an asynchronous store (Promises from get and put) keeps the turns", async () => {
    const kept = new Map();
    const store = { get: async (id) => kept.get(id) ?? null, put: async (id, state) => { kept.set(id, state); } };
    const router = await Router.load(BUNDLE, { strict: true, conversations: store, stickiness: { weight: Infinity } });
    try {
      const first = await router.execute(promptIn("edge"), () => "edge answer", () => "cloud answer", { conversation: "a" });
      const decision = await router.route(promptIn("cloud"), { conversation: "a" });
      assert.deepEqual([decision.turn, decision.endpoint], [2, first.served_by]);  // always stay
      assert.equal(kept.get("a").turns, 1);
      const json = await router.recordTurn("a", "cloud", { inputTokens: 10 });
      assert.equal(json, true);
      assert.equal(ConversationState.fromJson(kept.get("a").toJson()).turns, 2);
    } finally {
      await router.close();
    }
  });

  test("a store that fails never fails a request: decided on its own, the reason says so, the answer kept", async () => {
    const logger = quietLogger();
    const down = { get: () => { throw new Error("connection refused"); }, put: async () => { throw new ConversationStoreError("read-only"); } };
    const router = await Router.load(BUNDLE, { strict: true, conversations: down, logger });
    const plain = await Router.load(BUNDLE, { strict: true });
    try {
      const prompt = promptIn("edge_with_cloud_fallback");
      const decision = await router.route(new Request(prompt, { conversation: "lost" }));
      assert.equal(decision.turn, null);
      assert.match(decision.reason, /; conversation state unavailable \(conversation store: reading 'lost': Error: connection refused\): decided as a turn on its own$/);
      assert.deepEqual(decision.cascade, (await plain.route(prompt)).cascade);
      const execution = await router.execute(prompt, () => "edge", () => "cloud", { conversation: "lost" });
      assert.ok(["edge", "cloud"].includes(execution.response));  // the answer is never lost for it
      // within a second of the failure the store is not asked again: the read and the write counted as failed
      assert.match(execution.decision.reason, /; conversation state unavailable \(the store failed within the last second\): decided as a turn on its own$/);
      assert.equal(router.conversations.unavailable, 3);  // two reads (route, execute) and the write
      assert.equal(await router.recordTurn("lost", "edge", { inputTokens: 5 }), false);
      assert.equal(router.conversations.unavailable, 4);
      assert.equal(logger.messages.length, 1);  // one warning when the store goes
      assert.match(logger.messages[0], /^deciding without conversation state: .*; until the store answers, turns are decided without their state and not written/);
      const wrong = { get: () => ({ turns: 1 }), put: () => {} };  // not a ConversationState: the store failed
      router.conversations = new Conversations(wrong, null, { logger });
      router.conversations.retryS = 0;  // asked again at once
      assert.match((await router.route(prompt, { conversation: "x" })).reason, /got object, not a ConversationState/);
      assert.match((await router.route(prompt, { conversation: "x" })).reason, /got object, not a ConversationState/);
      assert.equal(logger.messages.length, 2);  // one warning when this store went, none for its second failure
    } finally {
      await router.close();
      await plain.close();
    }
  });

  test("Router.load refuses a store without get and put, and a bad knob, before loading", async () => {
    await assert.rejects(Router.load(BUNDLE, { conversations: new Map() }), /conversations must be a store/);
    await assert.rejects(Router.load(BUNDLE, { conversations: { get() {} } }), TypeError);
    await assert.rejects(Router.load(BUNDLE, { stickiness: { weight: -1 } }), RangeError);
  });
});

test("a store that hangs costs one timeout a second, not two per request; it is read again once it answers", async () => {
  const store = {
    calls: 0, up: false, states: new Map(),
    async call() {
      this.calls++;
      if (!this.up) {
        await new Promise((resolve) => setTimeout(resolve, 200));
        throw new ConversationStoreError("conversation store: reading: TimeoutError: timed out");
      }
    },
    async get(id) { await this.call(); return this.states.get(id) ?? null; },
    async put(id, state) { await this.call(); this.states.set(id, state); },
  };
  const logger = quietLogger();
  const router = await Router.load("/nonexistent/no-bundle", { conversations: store, logger });  // the rule table decides
  router.conversations.retryS = 0.5;
  try {
    const started = performance.now();
    for (let k = 0; k < 10; k++) {
      const execution = await router.execute(new Request("What is 2+2?", { conversation: "c" }), () => "edge", () => "cloud");
      assert.ok(["edge", "cloud"].includes(execution.response));
      assert.match(execution.decision.reason, /conversation state unavailable/);
    }
    assert.equal(store.calls, 1);  // one timeout, then not asked
    assert.ok(performance.now() - started < 450);
    assert.equal(router.conversations.unavailable, 20);  // each request's read and write, counted
    assert.equal(logger.messages.filter((m) => m.includes("until the store answers")).length, 1);  // one warning, not one per request
    store.up = true;
    await new Promise((resolve) => setTimeout(resolve, 500));
    const execution = await router.execute(new Request("What is 2+2?", { conversation: "c" }), () => "edge", () => "cloud");
    assert.doesNotMatch(execution.decision.reason, /unavailable/);
    assert.equal(store.states.get("c").turns, 1);
    assert.ok(logger.messages.includes("conversation store reachable again"));
  } finally {
    await router.close();
  }
});

/** A copy of `bundle` carrying `text` as its turn_evidence.json (listed, digested, unsigned). */
function withEvidenceFile(bundle, text) {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "router-js-evidence-"));
  for (const name of fs.readdirSync(bundle)) if (name !== "manifest.sig") fs.copyFileSync(path.join(bundle, name), path.join(folder, name));
  fs.writeFileSync(path.join(folder, "turn_evidence.json"), text);
  const file = path.join(folder, "manifest.json");
  const digest = createHash("sha256").update(text).digest("hex");
  let manifest = fs.readFileSync(file, "utf8").replace(/"files": \{/, `"files": {"turn_evidence.json": "${digest}", `);
  manifest = manifest.replace(/"manifest_sha256": "[0-9a-f]{64}"/, `"manifest_sha256": "${manifestDigest(parsePythonJson(manifest))}"`);
  fs.writeFileSync(file, manifest);
  return folder;
}

/** A weights file: each endpoint its own hand-set weights over TURN_EVIDENCE_FEATURES. */
function weightsText(names) {
  const weights = Object.fromEntries(names.map((n, k) => [n, [0.8 + 0.1 * k, -0.3, 0.2, -0.4, 0.9, -1.6 + 0.2 * k, -0.7]]));
  return JSON.stringify({ features: TURN_EVIDENCE_FEATURES, weights, rows: 10 }, null, 2);
}

describe("the previous turn as evidence (a bundle's turn_evidence.json)", () => {
  const folders = [];
  after(() => { for (const folder of folders) fs.rmSync(folder, { recursive: true, force: true }); });

  test("N endpoints: each endpoint's expected quality moves as the weights say, the reason says so; a first turn as it is", async () => {
    const plain = await Router.load(ENDPOINT_BUNDLE, { strict: true, unfamiliarPolicy: "learned" });
    const names = plain.endpointNames;
    const text = weightsText(names);
    const folder = withEvidenceFile(ENDPOINT_BUNDLE, text);
    folders.push(folder);
    const store = new MemoryStore();
    const router = await Router.load(folder, { strict: true, unfamiliarPolicy: "learned", conversations: store, stickiness: { weight: 0 } });
    const evidence = TurnEvidence.fromJson(text, names);
    try {
      const prompt = "Following up on that: what is the derivative of x^3 sin(x)? Show the steps.";
      const alone = (await plain.route(prompt)).expected;
      const raw = names.map((n) => alone[n]);
      const moved = new Set();
      for (const outcome of TURN_OUTCOMES) {
        const state = new ConversationState({ turns: 2, endpoint: names[0], outcome, history_tokens: 400, updated: now() });
        const decision = await routed(router, store, state, prompt);
        const expected = evidence.adjusted(raw, names, state);
        assert.deepEqual(names.map((n) => decision.expected[n]), expected);
        assert.ok(decision.reason.endsWith(`; the last turn (${outcome} on ${names[0]}) weighed in`), decision.reason);
        moved.add(decision.expected[names[0]]);
      }
      assert.equal(moved.size, 2);  // served, and the four troubles alike (the same features)
      // nothing served the last turn: the scores move (trouble), the reason names no endpoint
      const failed = await routed(router, store, new ConversationState({ turns: 3, outcome: "failed", history_tokens: 900, updated: now() }), prompt);
      assert.notDeepEqual(failed.expected, alone);
      assert.doesNotMatch(failed.reason, /weighed in/);
      // a first turn, and a request without a conversation, decide from the text alone
      const first = await router.route(new Request(prompt, { conversation: "new" }));
      assert.deepEqual(first.expected, alone);
      assert.doesNotMatch(first.reason, /weighed in/);
      assert.deepEqual((await router.route(prompt)).expected, alone);
    } finally {
      await router.close();
      await plain.close();
    }
  });

  test("two endpoints: the heads move, and the expected gain with them", async () => {
    const plain = await Router.load(BUNDLE, { strict: true });
    const text = weightsText(["edge", "cloud"]);
    const folder = withEvidenceFile(BUNDLE, text);
    folders.push(folder);
    const store = new MemoryStore();
    const router = await Router.load(folder, { strict: true, conversations: store, stickiness: { weight: 0 } });
    try {
      const prompt = promptIn("edge_with_cloud_fallback");
      const alone = await plain.route(prompt);
      const state = new ConversationState({ turns: 4, endpoint: "edge", outcome: "rejected", history_tokens: 2500, updated: now() });
      const decision = await routed(router, store, state, prompt);
      const [pEdge, pCloud] = TurnEvidence.fromJson(text, ["edge", "cloud"]).adjusted([alone.p_edge, alone.p_cloud], ["edge", "cloud"], state);
      assert.deepEqual([decision.p_edge, decision.p_cloud, decision.score], [pEdge, pCloud, pCloud - pEdge]);
      assert.ok(pEdge < alone.p_edge);  // a rejected edge answer last turn lowers the edge's odds
      assert.match(decision.reason, /^expected gain [-0-9.]+ .*; conversation turn 5 .*; the last turn \(rejected on edge\) weighed in$/);
    } finally {
      await router.close();
      await plain.close();
    }
  });

  test("weights that change nothing change nothing; the features are Python's", () => {
    const names = ["a", "b"];
    const identity = new TurnEvidence({ a: [1, 0, 0, 0, 0, 0, 0], b: [1, 0, 0, 0, 0, 0, 0] });
    const state = new ConversationState({ turns: 3, endpoint: "a", outcome: "rejected", history_tokens: 900 });
    const [a, b] = identity.adjusted([0.3, 0.9], names, state);
    assert.ok(Math.abs(a - 0.3) < 1e-12 && Math.abs(b - 0.9) < 1e-12);
    assert.deepEqual(identity.adjusted([0.3, 0.9], names, new ConversationState()), [0.3, 0.9]);  // no turn yet: as it is
    assert.deepEqual(TurnEvidence.fromJson(JSON.stringify({ features: TURN_EVIDENCE_FEATURES, weights: { a: [1, 0, 0, 0, 0, 0, 0],
      b: [1, 0, 0, 0, 0, 0, 0] } }), names).weights, identity.weights);
    assert.throws(() => TurnEvidence.fromJson('{"features": ["x"], "weights": {}}', names), TurnEvidenceError);
  });

  test("a bad file refuses the bundle when strict, and gives the rule table otherwise", async () => {
    const folder = withEvidenceFile(BUNDLE, '{"features": ["x"], "weights": {}}');
    folders.push(folder);
    const why = `cannot load bundle ${folder}: turn_evidence.json: features ['x'], expected ['logit_p', 'intercept', 'log_turn', ` +
      "'log_history', 'served', 'served_trouble', 'trouble']";
    await assert.rejects(Router.load(folder, { strict: true }), (error) => error instanceof BundleError && error.message === why);
    const logger = quietLogger();
    const router = await Router.load(folder, { logger });
    assert.ok(router.degraded);
    assert.equal(router.degradedReason, why);
    assert.deepEqual(logger.messages, [`routing bundle unavailable, using the rule table: ${why}`]);
  });
});
