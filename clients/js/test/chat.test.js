// RoutedChat: routed OpenAI-compatible chat calls with fetch, against real HTTP servers on
// 127.0.0.1 (node:http) that answer as OpenAI-compatible servers do, fail, crawl, break mid-stream,
// or echo the caller's key back; each records what it received, so a test can say the cloud got
// nothing when the edge answered. Routing is the real bundle's (test/fixtures.js).
import assert from "node:assert/strict";
import http from "node:http";
import util from "node:util";
import { after, before, describe, test } from "node:test";
import {
  CloudCallError, Endpoint, EndpointsFailed, FallbackForbidden, LocalModel, PolicySet, RoutedChat, Router, SlowFirstToken, StreamInterrupted, UpstreamHTTPError,
  UpstreamMalformed, UpstreamTimeout, UpstreamUnreachable, conversationPrompt,
} from "../src/index.js";
import { MAX_ERROR_BODY_BYTES } from "../src/chat/upstream.js";
import { BUNDLE, ENDPOINT_BUNDLE, endpointVectors, promptIn, quietLogger } from "./fixtures.js";

const CLOUD_KEY = "sk-cloud-7f3a9c1e5b2d4086-SECRET";
const EDGE_KEY = "sk-edge-51d0c2b7e94a6f38-SECRET";
const ask = (content) => [{ role: "user", content }];

// Servers.

/** An HTTP server on 127.0.0.1 whose requests go to `handler(request, res)`; `received` holds
 * each request ({headers, body}) and `closed` counts connections the client closed early. */
async function upstream(handler) {
  const received = [];
  const state = { closedEarly: 0 };
  const server = http.createServer(async (req, res) => {
    const parts = [];
    for await (const part of req) parts.push(part);
    const text = Buffer.concat(parts).toString("utf8");
    const request = { headers: req.headers, body: text ? JSON.parse(text) : null, path: req.url };
    received.push(request);
    res.on("close", () => { if (!res.writableFinished) state.closedEarly++; });
    await handler(request, res);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    received, state, url: `http://127.0.0.1:${server.address().port}/v1`,
    close: () => { server.closeAllConnections(); return new Promise((resolve) => server.close(resolve)); },
  };
}

const completion = (content, model, usage = { prompt_tokens: 10, completion_tokens: 5 }) => ({
  id: "chatcmpl-test", object: "chat.completion", model,
  choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }], usage,
});
const chunk = (delta, finish = null, extra = {}) => ({
  id: "chatcmpl-test", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }], ...extra,
});
const event = (value) => `data: ${typeof value === "string" ? value : JSON.stringify(value)}\n\n`;

/** Answers "answer from NAME" as a chat completion, or as a stream when asked. */
const answering = (name) => (request, res) => {
  if (request.body.stream) {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(event(chunk({ role: "assistant" })));
    for (const piece of ["answer ", "from ", name]) res.write(event(chunk({ content: piece })));
    res.write(event(chunk({}, "stop", { usage: { prompt_tokens: 10, completion_tokens: 3 } })));
    res.end(event("[DONE]"));
    return;
  }
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify(completion(`answer from ${name}`, request.body.model)));
};
const failing = (status, body = '{"error": {"message": "overloaded"}}', headers = { "content-type": "application/json" }) =>
  (request, res) => { res.writeHead(status, headers); res.end(body); };
const silent = () => () => {};  // takes the request and never answers
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** Waits until `condition()` holds (what a server sees arrives on its own schedule), at most 10 s. */
async function until(condition) {
  for (let waited = 0; !condition() && waited < 10_000; waited += 10) await sleep(10);
  return condition();
}

/** The edge and cloud servers of one test, closed after it. */
async function servers(edgeHandler, cloudHandler = answering("cloud")) {
  const edge = await upstream(edgeHandler), cloud = await upstream(cloudHandler);
  return { edge, cloud, close: () => Promise.all([edge.close(), cloud.close()]) };
}

/** An http URL on 127.0.0.1 where nothing listens. */
async function deadUrl() {
  const server = http.createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}/v1`;
  await new Promise((resolve) => server.close(resolve));
  return url;
}

const statuses = (routing) => routing.steps.map((s) => `${s.name}:${s.status}`);
async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}
const text = (chunks) => chunks.map((c) => c.choices?.[0]?.delta?.content ?? "").join("");

/** The texts in which `key` (or any 8 characters of it) can be read: as given, without NULs
 * (UTF-16 read as bytes), and as JSON decodes them. */
function leaks(key, ...texts) {
  const parts = new Set();
  for (let i = 0; i + 8 <= key.length; i++) parts.add(key.slice(i, i + 8).toLowerCase());
  const readings = texts.flatMap((t) => {
    const found = [t, t.replaceAll("\0", "")];
    try { found.push(JSON.stringify(JSON.parse(t))); } catch { /* not JSON */ }
    return found;
  });
  return readings.filter((r) => [...parts].some((p) => r.toLowerCase().includes(p)));
}
const escaped = (s) => [...s].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("");

describe("RoutedChat", () => {
  let router, EDGE_ASK, CLOUD_ASK, FALLBACK_ASK;
  before(async () => {
    router = await Router.load(BUNDLE, { strict: true });
    EDGE_ASK = ask(promptIn("edge"));
    CLOUD_ASK = ask(promptIn("cloud"));
    FALLBACK_ASK = ask(promptIn("edge_with_cloud_fallback"));
  });
  after(() => router.close());

  const chatFor = (s, { edge = {}, cloud = {}, ...options } = {}) => new RoutedChat(router, {
    edge: new Endpoint({ baseUrl: s.edge.url, model: "edge-model", ...edge }),
    cloud: new Endpoint({ baseUrl: s.cloud.url, model: "cloud-model", apiKey: CLOUD_KEY, ...cloud }), ...options });

  describe("the prompt routed", () => {
    test("is Python's conversation_prompt: the latest user message, other turns newest first, system last", () => {
      const messages = [
        { role: "system", content: "You are terse." }, { role: "user", content: "Hi" },
        { role: "assistant", content: [{ type: "text", text: "Hello" }, { type: "image_url", image_url: { url: "x" } }, { type: "text", text: "there" }] },
        { role: "tool", content: null }, { role: "user", content: [{ type: "text", text: "What is 2+2?" }] },
        { role: "developer", content: "Be exact." }];
      // serving.chat._conversation.conversation_prompt on the same messages (printed by the venv's Python)
      assert.equal(conversationPrompt(messages),
        "What is 2+2?\n\nassistant: Hello\nthere\n\nuser: Hi\n\nsystem: You are terse.\n\ndeveloper: Be exact.");
      assert.equal(conversationPrompt([{ role: "assistant", content: "only me" }, { role: "system", content: "sys" }]),
        "sys\n\nassistant: only me");
    });

    test("a single user message routes as router.route(that message)", async () => {
      const s = await servers(answering("edge"));
      try {
        const result = await chatFor(s).create(FALLBACK_ASK);
        assert.deepEqual(result.routing.decision, await router.route(FALLBACK_ASK[0].content));
      } finally { await s.close(); }
    });
  });

  describe("non-streamed", () => {
    test("an edge-first request is answered by the edge; the cloud gets nothing", async () => {
      const s = await servers(answering("edge"));
      try {
        const result = await chatFor(s).create(EDGE_ASK, { temperature: 0, max_tokens: 20 });
        assert.equal(result.text, "answer from edge");
        assert.equal(result.body.object, "chat.completion");
        const { routing } = result;
        assert.equal(routing.served_by, "edge");
        assert.equal(routing.model, "edge-model");
        assert.equal(routing.decision.zone, "edge");
        assert.equal(routing.fallback_reason, null);
        assert.equal(routing.fallback_kind, null);
        assert.deepEqual(statuses(routing), ["edge:ok"]);
        assert.ok(routing.seconds > 0);
        assert.equal(s.cloud.received.length, 0);
        const [sent] = s.edge.received;
        assert.equal(sent.path, "/v1/chat/completions");
        assert.deepEqual(sent.body, { temperature: 0, max_tokens: 20, model: "edge-model", messages: EDGE_ASK });
        assert.equal(sent.headers.authorization, undefined, "the cloud's key never goes to the edge");
      } finally { await s.close(); }
    });

    test("a cloud-first request goes to the cloud only, with its key", async () => {
      const s = await servers(answering("edge"));
      try {
        const { text, routing } = await chatFor(s).create(CLOUD_ASK);
        assert.equal(text, "answer from cloud");
        assert.equal(routing.served_by, "cloud");
        assert.equal(routing.fallback_reason, null);
        assert.deepEqual(statuses(routing), ["cloud:ok"]);
        assert.equal(s.edge.received.length, 0);
        assert.equal(s.cloud.received[0].headers.authorization, `Bearer ${CLOUD_KEY}`);
        assert.equal(s.cloud.received[0].body.model, "cloud-model");
      } finally { await s.close(); }
    });

    test("an edge HTTP error falls back to the cloud; the cost counts every answer with prices", async () => {
      const s = await servers(failing(503));
      try {
        const chat = chatFor(s, { edge: { inputPricePer1M: 0, outputPricePer1M: 0 }, cloud: { inputPricePer1M: 3, outputPricePer1M: 15 } });
        const { text, routing } = await chat.create(EDGE_ASK);
        assert.equal(text, "answer from cloud");
        assert.equal(routing.served_by, "cloud");
        assert.equal(routing.fallback_kind, "http_error");
        assert.equal(routing.fallback_reason, "left edge=error:UpstreamHTTPError: UpstreamHTTPError('edge: edge-model answered HTTP 503: overloaded')");
        assert.deepEqual(routing.tried.map((t) => t.label()), ["edge=error:UpstreamHTTPError", "cloud=served"]);
        assert.deepEqual(statuses(routing), ["edge:error", "cloud:ok"]);
        assert.equal(routing.estimated_cost, (10 * 3 + 5 * 15) / 1e6);
      } finally { await s.close(); }
    });

    test("an edge nobody listens at, or that answers what is not a chat completion, falls back", async () => {
      const cloud = await upstream(answering("cloud"));
      const malformed = await upstream(failing(200, '{"id": "x"}'));
      const notJson = await upstream(failing(200, "<html>busy</html>", { "content-type": "text/html" }));
      const large = await upstream(failing(200, JSON.stringify(completion("x".repeat(2000), "edge-model"))));
      try {
        const cases = [[await deadUrl(), "connection_error"], [malformed.url, "malformed"], [notJson.url, "malformed"],
          [large.url, "malformed", { maxResponseBytes: 1024 }]];
        for (const [url, kind, options = {}] of cases) {
          const chat = new RoutedChat(router, { edge: new Endpoint({ baseUrl: url, model: "edge-model", ...options }),
            cloud: new Endpoint({ baseUrl: cloud.url, model: "cloud-model" }) });
          const { routing } = await chat.create(EDGE_ASK);
          assert.equal(routing.served_by, "cloud", url);
          assert.equal(routing.fallback_kind, kind, url);
          assert.ok(!routing.fallback_reason.includes("127.0.0.1"), `no URL in ${routing.fallback_reason}`);
          if (options.maxResponseBytes) assert.match(routing.fallback_reason, /the answer of edge-model is over 1024 bytes/);
        }
      } finally { await Promise.all([cloud.close(), malformed.close(), notJson.close(), large.close()]); }
    });

    test("a redirect is not followed (the key would go with it): the edge falls back", async () => {
      const elsewhere = await upstream(answering("elsewhere"));
      const s = await servers((request, res) => { res.writeHead(307, { location: `${elsewhere.url}/chat/completions` }); res.end(); });
      try {
        const { routing } = await chatFor(s, { edge: { apiKey: EDGE_KEY } }).create(EDGE_ASK);
        assert.equal(routing.served_by, "cloud");
        assert.equal(routing.fallback_kind, "malformed");
        assert.match(routing.fallback_reason, /answered HTTP 307, not a chat completion \(redirects are not followed\)/);
        assert.equal(elsewhere.received.length, 0);
      } finally { await Promise.all([s.close(), elsewhere.close()]); }
    });

    test("an edge past its timeoutMs is cut off (its connection closed) and the cloud answers", async () => {
      const s = await servers(silent());
      try {
        const { routing } = await chatFor(s, { edge: { timeoutMs: 150 } }).create(EDGE_ASK);
        assert.equal(routing.served_by, "cloud");
        assert.equal(routing.fallback_kind, "timeout");
        assert.deepEqual(statuses(routing), ["edge:timeout", "cloud:ok"]);
        assert.equal(routing.fallback_reason, "left edge=timeout: UpstreamTimeout('edge: no complete answer from edge-model within 150 ms')");
        assert.ok(await until(() => s.edge.state.closedEarly === 1), "the edge request was aborted");
      } finally { await s.close(); }
    });

    test("an answer whose body drips past timeoutMs is cut at the deadline, not per read", async () => {
      const dripping = async (request, res) => {
        res.writeHead(200, { "content-type": "application/json" });
        for (let i = 0; i < 100 && !res.destroyed; i++) { res.write(" "); await sleep(20); }
        res.end(JSON.stringify(completion("too late", "edge-model")));
      };
      const s = await servers(dripping);
      try {
        const { routing } = await chatFor(s, { edge: { timeoutMs: 300 } }).create(EDGE_ASK);
        assert.equal(routing.fallback_kind, "timeout");
        assert.equal(routing.served_by, "cloud");
      } finally { await s.close(); }
    });

    test("in the fallback zone accept(text, body) decides; a rejection sends the request to the cloud", async () => {
      const s = await servers(answering("edge"));
      try {
        const seen = [];
        const chat = chatFor(s);
        const kept = await chat.create(FALLBACK_ASK, { accept: (t, body) => { seen.push([t, body.object]); return true; } });
        assert.equal(kept.routing.served_by, "edge");
        assert.deepEqual(seen, [["answer from edge", "chat.completion"]]);
        const rejected = await chat.create(FALLBACK_ASK, { accept: () => false });
        assert.equal(rejected.routing.served_by, "cloud");
        assert.equal(rejected.routing.fallback_kind, "rejected");
        assert.deepEqual(statuses(rejected.routing), ["edge:ok", "accept:rejected", "cloud:ok"]);
        const raising = await chat.create(FALLBACK_ASK, { accept: () => { throw new Error("no"); } });
        assert.equal(raising.routing.fallback_kind, "accept_error");
        const verified = await chatFor(s, { verifyEdgeZone: true }).create(EDGE_ASK, { accept: () => false });
        assert.equal(verified.routing.served_by, "cloud", "verifyEdgeZone checks confident edge answers too");
      } finally { await s.close(); }
    });

    test('accept: "learned" reads the assistant text with the bundle\'s check', async () => {
      const s = await servers(answering("edge"));
      try {
        const verdict = await router.acceptor.check(conversationPrompt(FALLBACK_ASK), "answer from edge");
        const { routing } = await chatFor(s).create(FALLBACK_ASK, { accept: "learned" });
        assert.equal(routing.served_by, verdict.accepted ? "edge" : "cloud");
        assert.deepEqual(statuses(routing).slice(0, 2), ["edge:ok", verdict.accepted ? "accept:ok" : "accept:rejected"]);
      } finally { await s.close(); }
    });

    test("a conversation over the edge context limit skips the edge", async () => {
      const degraded = await Router.load("/nonexistent", { logger: quietLogger() });  // keeps a long prompt edge-first
      const s = await servers(answering("edge"));
      try {
        const chat = new RoutedChat(degraded, { edge: new Endpoint({ baseUrl: s.edge.url, model: "e" }),
          cloud: new Endpoint({ baseUrl: s.cloud.url, model: "c" }) });
        const { routing } = await chat.create(ask("tell me more, ".repeat(1000)));
        assert.equal(routing.decision.zone, "edge_with_cloud_fallback");
        assert.equal(routing.fallback_kind, "context_limit");
        assert.deepEqual(statuses(routing), ["edge:skipped", "cloud:ok"]);
        assert.equal(s.edge.received.length, 0);
      } finally { await s.close(); }
    });

    test("a cloud failure throws EndpointsFailed (a CloudCallError) with both failures", async () => {
      const s = await servers(failing(503), failing(500, "boom"));
      try {
        await assert.rejects(chatFor(s).create(EDGE_ASK), (error) => error instanceof EndpointsFailed && error instanceof CloudCallError
          && error.cause instanceof UpstreamHTTPError && error.cause.status === 500
          && error.edge_error instanceof UpstreamHTTPError && error.edge_error.status === 503
          && error.message.startsWith("no endpoint served: edge=error:UpstreamHTTPError; cloud=error:UpstreamHTTPError (edge: ")
          && /cloud: .*HTTP 500: boom/.test(error.message)
          && /HTTP 500: boom/.test(error.cause.message) && /HTTP 503/.test(error.edge_error.message));
      } finally { await s.close(); }
    });

    test("onRouted sees every answered request; one that throws is logged, not raised", async () => {
      const s = await servers(answering("edge"));
      try {
        const seen = [], logger = quietLogger();
        await chatFor(s, { onRouted: (r) => seen.push(r.served_by) }).create(EDGE_ASK);
        assert.deepEqual(seen, ["edge"]);
        const result = await chatFor(s, { onRouted: () => { throw new Error("observer bug"); }, logger }).create(EDGE_ASK);
        assert.equal(result.text, "answer from edge");
        assert.deepEqual(logger.messages, ["onRouted threw: Error: observer bug"]);
      } finally { await s.close(); }
    });
  });

  describe("streamed", () => {
    test("an edge stream reaches the caller chunk by chunk; the cloud gets nothing", async () => {
      const s = await servers(answering("edge"));
      try {
        const stream = await chatFor(s, { edge: { inputPricePer1M: 1, outputPricePer1M: 2 } }).create(EDGE_ASK, { stream: true });
        assert.equal(stream.routing.served_by, "edge");
        assert.equal(stream.routing.seconds, null, "set when the stream ends");
        const chunks = await collect(stream);
        assert.equal(text(chunks), "answer from edge");
        assert.deepEqual(chunks[0].choices[0].delta, { role: "assistant" }, "the role-only chunk is passed on too");
        assert.equal(s.edge.received[0].body.stream, true);
        assert.equal(s.cloud.received.length, 0);
        assert.ok(stream.routing.seconds > 0);
        assert.equal(stream.routing.estimated_cost, (10 * 1 + 3 * 2) / 1e6);
      } finally { await s.close(); }
    });

    test("an edge that fails before its first token falls back: HTTP error, error event, wrong content type", async () => {
      const errorEvent = (request, res) => { res.writeHead(200, { "content-type": "text/event-stream" }); res.end(event({ error: { message: "model not loaded" } })); };
      const json = (request, res) => { res.writeHead(200, { "content-type": "application/json" }); res.end("{}"); };
      for (const [handler, kind] of [[failing(503), "http_error"], [errorEvent, "malformed"], [json, "malformed"]]) {
        const s = await servers(handler);
        try {
          const stream = await chatFor(s).create(EDGE_ASK, { stream: true });
          assert.equal(stream.routing.served_by, "cloud");
          assert.equal(stream.routing.fallback_kind, kind);
          assert.equal(text(await collect(stream)), "answer from cloud");
        } finally { await s.close(); }
      }
    });

    test("an edge whose first token is later than firstTokenTimeoutMs falls back (slow_first_token)", async () => {
      const roleThenNothing = (request, res) => { res.writeHead(200, { "content-type": "text/event-stream" }); res.write(event(chunk({ role: "assistant" }))); };
      const s = await servers(roleThenNothing);
      try {
        const stream = await chatFor(s, { edge: { firstTokenTimeoutMs: 150 } }).create(EDGE_ASK, { stream: true });
        assert.equal(stream.routing.served_by, "cloud");
        assert.equal(stream.routing.fallback_kind, "slow_first_token");
        assert.deepEqual(statuses(stream.routing), ["edge:timeout", "cloud:ok"]);
        assert.equal(stream.routing.fallback_reason, "left edge=timeout: SlowFirstToken('edge: no first token from edge-model within 150 ms')");
        assert.equal(text(await collect(stream)), "answer from cloud");
      } finally { await s.close(); }
    });

    test("after the first token there is no fallback: a break throws StreamInterrupted and the cloud gets nothing", async () => {
      const breaking = (request, res) => {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write(event(chunk({ content: "The answer is" })));
        setTimeout(() => res.socket.destroy(), 50);
      };
      const s = await servers(breaking);
      try {
        const stream = await chatFor(s).create(EDGE_ASK, { stream: true });
        const got = [];
        await assert.rejects(async () => { for await (const c of stream) got.push(c); }, (error) => error instanceof StreamInterrupted
          && error.endpoint === "edge" && /the stream of edge-model broke after its first chunk/.test(error.message));
        assert.equal(text(got), "The answer is");
        assert.equal(stream.routing.served_by, "edge");
        assert.equal(stream.routing.estimated_cost, null);
        assert.equal(s.cloud.received.length, 0);
      } finally { await s.close(); }
    });

    test("a stream whose rest crawls is cut at timeoutMs of the request", async () => {
      const crawling = async (request, res) => {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write(event(chunk({ content: "first" })));
        for (let i = 0; i < 500 && !res.destroyed; i++) { res.write(": keep-alive\n"); await sleep(20); }
        res.end(event("[DONE]"));
      };
      const s = await servers(crawling);
      try {
        const stream = await chatFor(s, { edge: { timeoutMs: 1000 } }).create(EDGE_ASK, { stream: true });
        await assert.rejects(collect(stream), (error) => error instanceof StreamInterrupted && /UpstreamTimeout/.test(error.message));
      } finally { await s.close(); }
    });

    test("events split anywhere (CRLF across reads, several data lines, comments) are read as SSE", async () => {
      const split = async (request, res) => {
        res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8" });
        const whole = `: hello\r\n${event(chunk({ content: "a" })).replace("\n\n", "\r\n\r\n")}`
          + `data: {"choices": [{"index": 0,\ndata: "delta": {"content": "b"}}]}\n\n` + event(chunk({}, "stop")) + event("[DONE]");
        for (let i = 0; i < whole.length; i += 7) { res.write(whole.slice(i, i + 7)); await sleep(1); }
        res.end();
      };
      const s = await servers(split);
      try {
        const stream = await chatFor(s).create(EDGE_ASK, { stream: true });
        assert.equal(text(await collect(stream)), "ab");
        assert.equal(stream.routing.served_by, "edge");
      } finally { await s.close(); }
    });

    test("break out of the loop closes the stream and its connection", async () => {
      const endless = async (request, res) => {
        res.writeHead(200, { "content-type": "text/event-stream" });
        for (let i = 0; i < 500 && !res.destroyed; i++) { res.write(event(chunk({ content: `${i} ` }))); await sleep(10); }
        res.end();
      };
      const s = await servers(endless);
      try {
        const seen = [];
        const stream = await chatFor(s, { onRouted: (r) => seen.push(r.served_by) }).create(EDGE_ASK, { stream: true });
        for await (const c of stream) if (c.choices[0].delta.content === "2 ") break;
        assert.ok(await until(() => s.edge.state.closedEarly === 1), "the connection was closed");
        assert.deepEqual(seen, ["edge"]);
        assert.ok(stream.routing.seconds > 0);
      } finally { await s.close(); }
    });

    test("a cloud stream that fails throws CloudCallError", async () => {
      const s = await servers(failing(503), failing(502, "bad gateway"));
      try {
        await assert.rejects(chatFor(s).create(EDGE_ASK, { stream: true }), (error) => error instanceof CloudCallError
          && error.cause instanceof UpstreamHTTPError && error.edge_error instanceof UpstreamHTTPError);
      } finally { await s.close(); }
    });
  });

  describe("the caller's AbortSignal", () => {
    test("an abort while the edge answers stops the call, calls no cloud, and rejects with its reason", async () => {
      const controller = new AbortController();
      const s = await servers(() => controller.abort());  // the edge has the request, and the caller gives up
      try {
        await assert.rejects(chatFor(s).create(EDGE_ASK, { signal: controller.signal }), (error) => error.name === "AbortError");
        assert.ok(await until(() => s.edge.state.closedEarly === 1), "the edge request was aborted");
        assert.equal(s.cloud.received.length, 0);
        await assert.rejects(chatFor(s).create(EDGE_ASK, { signal: AbortSignal.abort() }), (error) => error.name === "AbortError");
        assert.equal(s.edge.received.length, 1, "an aborted signal sends nothing");
      } finally { await s.close(); }
    });

    test("an abort during a stream ends the iteration with its reason", async () => {
      const crawling = async (request, res) => {
        res.writeHead(200, { "content-type": "text/event-stream" });
        for (let i = 0; i < 200 && !res.destroyed; i++) { res.write(event(chunk({ content: "x" }))); await sleep(20); }
        res.end();
      };
      const s = await servers(crawling);
      try {
        const controller = new AbortController();
        const stream = await chatFor(s).create(EDGE_ASK, { stream: true, signal: controller.signal });
        setTimeout(() => controller.abort(), 100);
        await assert.rejects(collect(stream), (error) => error.name === "AbortError");
        assert.equal(s.cloud.received.length, 0);
      } finally { await s.close(); }
    });
  });

  describe("an in-page edge (LocalModel)", () => {
    test("its text is the answer; it gets the messages, the parameters and a signal", async () => {
      const cloud = await upstream(answering("cloud"));
      try {
        const calls = [];
        const edge = async (messages, options) => { calls.push([messages, options]); return "local answer"; };
        const chat = new RoutedChat(router, { edge, cloud: new Endpoint({ baseUrl: cloud.url, model: "c" }) });
        const result = await chat.create(EDGE_ASK, { temperature: 0.2 });
        assert.equal(result.text, "local answer");
        assert.equal(result.body.choices[0].message.content, "local answer");
        assert.equal(result.routing.model, "local");
        assert.deepEqual(calls[0][0], EDGE_ASK);
        assert.deepEqual(calls[0][1].params, { temperature: 0.2 });
        assert.ok(calls[0][1].signal instanceof AbortSignal);
        assert.equal(cloud.received.length, 0);
      } finally { await cloud.close(); }
    });

    test("a stream of text pieces, and one that throws or overruns falls back", async () => {
      const cloud = await upstream(answering("cloud"));
      try {
        const pieces = new LocalModel(async function* () { yield "local "; yield "stream"; }, { model: "webllm" });
        const streamed = await new RoutedChat(router, { edge: pieces, cloud: new Endpoint({ baseUrl: cloud.url, model: "c" }) })
          .create(EDGE_ASK, { stream: true });
        const chunks = await collect(streamed);
        assert.equal(text(chunks), "local stream");
        assert.equal(chunks.at(-1).choices[0].finish_reason, "stop");
        assert.equal(streamed.routing.model, "webllm");

        const throwing = new RoutedChat(router, { edge: () => { throw new Error("GPU lost"); }, cloud: new Endpoint({ baseUrl: cloud.url, model: "c" }) });
        const fallen = await throwing.create(EDGE_ASK);
        assert.equal(fallen.routing.served_by, "cloud");
        assert.equal(fallen.routing.fallback_kind, "error");
        assert.equal(fallen.routing.fallback_reason, "left edge=error:Error: Error('GPU lost')");

        let aborted = false;
        const stuck = new LocalModel((messages, { signal }) => new Promise(() => { signal.addEventListener("abort", () => { aborted = true; }); }),
          { timeoutMs: 100 });
        const late = await new RoutedChat(router, { edge: stuck, cloud: new Endpoint({ baseUrl: cloud.url, model: "c" }) }).create(EDGE_ASK);
        assert.equal(late.routing.fallback_kind, "timeout");
        assert.ok(aborted, "the model's signal is aborted at its deadline");
        assert.equal(cloud.received.length, 2);
      } finally { await cloud.close(); }
    });
  });

  describe("the key is never shown", () => {
    // What a cloud answering 401 echoes back, as careless servers do (tests/test_chat_hostile.py's forms).
    const bodies = {
      plain: [(key) => `{"error": {"message": "invalid key ${key}"}}`, "utf8"],
      json_escaped_message: [(key) => `{"error": {"message": "invalid key ${escaped(key)}"}}`, "utf8"],
      json_escaped_in_an_object: [(key) => `{"error": {"code": "bad_key", "param": "${escaped(key)}"}}`, "utf8"],
      json_escaped_in_a_list: [(key) => `{"detail": ["invalid key", "${escaped(key)}"]}`, "utf8"],
      utf16_text: [(key) => `invalid key ${key}`, "utf16le"],
      utf32_text: [(key) => `invalid key ${key}`, "utf32le"],
      cut_through_the_key: [(key) => " ".repeat(MAX_ERROR_BODY_BYTES - 12) + key, "utf8"],
    };
    const echoing = (status, makeBody, encoding = "utf8", headers = { "content-type": "application/json" }) => (request, res) => {
      const key = (request.headers.authorization ?? "").replace(/^Bearer /, "");
      const fill = (s) => s.replaceAll("{key}", key);
      res.writeHead(status, Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, fill(v)])));
      const body = makeBody(key);
      res.end(encoding === "utf32le" ? Buffer.from(new Uint32Array([...body].map((c) => c.codePointAt(0))).buffer) : Buffer.from(body, encoding));
    };

    for (const [name, [makeBody, encoding]] of Object.entries(bodies)) {
      test(`a cloud error that echoes the key (${name}) does not show it`, async () => {
        const s = await servers(failing(503), echoing(401, makeBody, encoding));
        try {
          const error = await chatFor(s).create(EDGE_ASK).then(() => null, (e) => e);
          assert.ok(error instanceof EndpointsFailed);
          assert.match(error.cause.message, /HTTP 401/);
          assert.match(error.edge_error.message, /HTTP 503/);
          assert.deepEqual(leaks(CLOUD_KEY, error.message, String(error), error.cause.detail, JSON.stringify(error.steps), JSON.stringify(error.tried),
            util.inspect(error, { depth: Infinity, showHidden: true }), error.stack), []);
          if (name !== "cut_through_the_key") assert.match(error.cause.detail, /\[redacted\]/);
        } finally { await s.close(); }
      });
    }

    test("an answer and stream chunks that echo the key reach the caller redacted", async () => {
      const s = await servers(answering("edge"), (request, res) => {
        const key = request.headers.authorization.replace(/^Bearer /, "");
        if (!request.body.stream) {
          res.writeHead(200, { "content-type": "application/json" });
          res.end(JSON.stringify(completion(`your key is ${key}`, "cloud-model")).replace(key, escaped(key)));
          return;
        }
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.end(event(chunk({ content: `your key is ${key}` })) + event(chunk({}, "stop")) + event("[DONE]"));
      });
      try {
        const chat = chatFor(s);
        const result = await chat.create(CLOUD_ASK);
        assert.equal(result.text, "your key is [redacted]");
        const chunks = await collect(await chat.create(CLOUD_ASK, { stream: true }));
        assert.equal(text(chunks), "your key is [redacted]");
        assert.deepEqual(leaks(CLOUD_KEY, JSON.stringify(result), JSON.stringify(chunks)), []);
      } finally { await s.close(); }
    });

    describe("a key a stream spells out over several chunks", () => {
      // A cloud that streams `plan.pieces` as content chunks (a role chunk first), then a finish
      // chunk (unless plan.finish is false) and [DONE]; or breaks the connection after the pieces
      // (plan.broken). One server pair and client for the many streams below.
      let s, chat, plan;
      const sent = [];
      before(async () => {
        s = await servers(answering("edge"), (request, res) => {
          res.writeHead(200, { "content-type": "text/event-stream" });
          const chunks = [chunk({ role: "assistant" }), ...plan.pieces.map((piece) => chunk(plan.tools ? piece : { content: piece }))];
          if (!plan.broken && plan.finish !== false) chunks.push(chunk({}, plan.tools ? "tool_calls" : "stop"));
          sent.length = 0;
          sent.push(...chunks);
          res.write(chunks.map(event).join(""));
          if (plan.broken) setTimeout(() => res.socket.destroy(), 20);
          else res.end(event("[DONE]"));
        });
        chat = chatFor(s, { edge: { apiKey: EDGE_KEY } });  // both keys hunted
      });
      after(() => s.close());
      const streamed = async (pieces, options = {}) => {
        plan = { pieces, ...options };
        return collect(await chat.create(CLOUD_ASK, { stream: true }));
      };
      /** `text` cut at each of `points` (ascending). */
      const cutAt = (text, ...points) => [0, ...points].map((p, i) => text.slice(p, [...points, text.length][i]));
      const contents = (chunks) => chunks.map((c) => c.choices[0]?.delta?.content);

      test("split at every position across two and three chunks, and at the stream's very end: the joined text reads [redacted] in its place", async () => {
        let streams = 0;
        for (const [original, expected] of [[`your key is ${CLOUD_KEY}, keep it safe`, "your key is [redacted], keep it safe"],
          [`your key is ${CLOUD_KEY}`, "your key is [redacted]"]]) {
          const start = original.indexOf(CLOUD_KEY), end = start + CLOUD_KEY.length;
          const splits = [];
          for (let a = start; a <= end; a++) {
            splits.push([a]);
            for (let b = a; b <= end; b++) splits.push([a, b]);
          }
          for (const points of splits) {
            const chunks = await streamed(cutAt(original, ...points));
            const where = `${original} cut at ${points}`;
            assert.equal(text(chunks), expected, where);
            assert.deepEqual(leaks(CLOUD_KEY, JSON.stringify(chunks)), [], `no chunk carries 8 characters of the key: ${where}`);
            streams++;
          }
        }
        assert.equal(streams, 2 * (33 + 33 * 34 / 2));
      });

      test("both keys, and a key whose stream ends right after it with no finish chunk", async () => {
        const original = `edge ${EDGE_KEY}${CLOUD_KEY} cloud ${CLOUD_KEY}`;
        for (let a = 1; a < original.length; a += 3) {
          assert.equal(text(await streamed(cutAt(original, a, Math.min(a + 20, original.length)))),
            "edge [redacted][redacted] cloud [redacted]");
          assert.equal(text(await streamed(cutAt(original, a), { finish: false })), "edge [redacted][redacted] cloud [redacted]");
        }
      });

      test("text without a key comes through whole: only an end that begins a key waits for the next chunk, and nothing is lost at the end", async () => {
        const pieces = ["Ask ", "me: s", "k-", "ip it. Or a", "sk"];  // "s", "sk-" and "sk" could begin a key
        const original = pieces.join("");
        const chunks = await streamed(pieces);
        assert.equal(text(chunks), original);
        assert.deepEqual(contents(chunks), [undefined, "Ask ", "me: ", "", "sk-ip it. Or a", "", "sk"],
          "each chunk as it came, less an end that could begin a key; the last one given with the finish chunk");
        assert.deepEqual(chunks.slice(0, 2), sent.slice(0, 2), "chunks with nothing held back are passed on as they are");
        assert.equal(chunks.at(-1).choices[0].finish_reason, "stop");

        const unfinished = await streamed(pieces, { finish: false });
        assert.equal(text(unfinished), original, "a stream with no finish chunk: what was held back comes in one more chunk");
        assert.deepEqual(unfinished.at(-1).choices, [{ index: 0, delta: { content: "sk" }, finish_reason: null }]);
        assert.equal(unfinished.at(-1).id, "chatcmpl-test");
        for (const cuts of [[1], [3, 9], [5, 6, 7, 8]]) {
          assert.equal(text(await streamed(cutAt(original, ...cuts))), original, `cut at ${cuts}`);
        }
      });

      test("a stream that breaks in the middle of a key gives what it held back, the key's beginning redacted, then StreamInterrupted", async () => {
        plan = { pieces: ["your key is sk-", CLOUD_KEY.slice(3, 16)], broken: true };
        const stream = await chat.create(CLOUD_ASK, { stream: true });
        const got = [];
        await assert.rejects(async () => { for await (const c of stream) got.push(c); }, (error) => error instanceof StreamInterrupted);
        assert.equal(text(got), "your key is [redacted]");
        assert.deepEqual(leaks(CLOUD_KEY, JSON.stringify(got)), []);
        assert.equal(stream.routing.estimated_cost, null);
      });

      test("a tool call's arguments are redacted across chunks too", async () => {
        const args = `{"token": "${CLOUD_KEY}"}`;
        for (let a = 10; a < 12 + CLOUD_KEY.length; a += 4) {
          const [first, rest] = cutAt(args, a);
          const chunks = await streamed([
            { tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "save", arguments: first } }] },
            { tool_calls: [{ index: 0, function: { arguments: rest } }] }], { tools: true });
          const calls = chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
          assert.equal(calls.map((c) => c.function.arguments).join(""), '{"token": "[redacted]"}');
          assert.equal(calls[0].function.name, "save");
          assert.deepEqual(leaks(CLOUD_KEY, JSON.stringify(chunks)), []);
        }
      });
    });

    test("an edge with a key whose content type or error event echoes it falls back with the reason redacted", async () => {
      const handlers = [
        echoing(200, () => "{}", "utf8", { "content-type": "Text/Plain-{key}" }),
        echoing(200, (key) => event(`{"error": {"message": "invalid key ${escaped(key)}"}}`), "utf8", { "content-type": "text/event-stream" }),
      ];
      for (const handler of handlers) {
        const s = await servers(handler);
        try {
          const stream = await chatFor(s, { edge: { apiKey: EDGE_KEY } }).create(EDGE_ASK, { stream: true });
          assert.equal(stream.routing.fallback_kind, "malformed");
          assert.match(stream.routing.fallback_reason, /\[redacted\]/);
          assert.deepEqual(leaks(EDGE_KEY, JSON.stringify(stream.routing), util.inspect(stream, { depth: Infinity })), []);
          await collect(stream);
        } finally { await s.close(); }
      }
    });

    test("an Endpoint, the client and its results do not show the key when printed or serialised", async () => {
      const s = await servers(answering("edge"));
      try {
        const chat = chatFor(s, { cloud: { headers: { "OpenAI-Organization": "org-1234567890" } } });
        const shown = [JSON.stringify(chat.cloud), util.inspect(chat.cloud, { depth: Infinity }), String(chat.cloud),
          util.inspect(chat, { depth: Infinity }), JSON.stringify(await chat.create(CLOUD_ASK))];
        assert.deepEqual(leaks(CLOUD_KEY, ...shown), []);
        assert.ok(!shown.some((t) => t.includes("org-1234567890")), "extra headers are not shown either");
        assert.equal(chat.cloud.hasApiKey, true);
        assert.equal(s.cloud.received[0].headers["openai-organization"], "org-1234567890");
      } finally { await s.close(); }
    });
  });

  describe("bad input is the caller's, before any call", () => {
    test("messages, options and parameters", async () => {
      const s = await servers(answering("edge"));
      try {
        const chat = chatFor(s);
        const bad = [
          [undefined, {}, TypeError, /messages must be a non-empty array/],
          [[], {}, TypeError, /messages must be a non-empty array/],
          ["hello", {}, TypeError, /messages must be a non-empty array/],
          [[null], {}, TypeError, /messages\[0\] must be an object/],
          [[{ content: "hi" }], {}, TypeError, /messages\[0\] has no 'role' string/],
          [[{ role: "user", content: 42 }], {}, TypeError, /messages\[0\]\.content must be a string, an array of parts or null/],
          [[{ role: "user", content: [{ type: "text", text: 7 }] }], {}, TypeError, /messages\[0\]\.content\[0\] is a text part/],
          [EDGE_ASK, { model: "gpt" }, TypeError, /model is not a request option here/],
          [EDGE_ASK, { temperature: NaN }, RangeError, /^temperature is NaN: JSON has no NaN or Infinity/],
          [[{ role: "user", content: "hi", weight: -Infinity }], {}, RangeError, /^messages\[0\]\.weight is -Infinity/],
          [EDGE_ASK, { logit_bias: { 42: 10n } }, TypeError, /cannot be sent as JSON/],
          [EDGE_ASK, { precision: "very" }, RangeError, /precision="very" is not allowed/],
          [EDGE_ASK, { stream: true, accept: () => true }, TypeError, /accept does not apply to streams/],
          [EDGE_ASK, { accept: "nice" }, TypeError, /accept must be a function/],
          [EDGE_ASK, { signal: "stop" }, TypeError, /signal must be an AbortSignal/],
          [EDGE_ASK, { stream: "yes" }, TypeError, /stream must be true or false/],
        ];
        for (const [messages, options, type, message] of bad) {
          await assert.rejects(chat.create(messages, options), (error) => error instanceof type && message.test(error.message),
            `${JSON.stringify(messages)} ${String(Object.keys(options))}`);
        }
        assert.equal(s.edge.received.length + s.cloud.received.length, 0);
      } finally { await s.close(); }
    });

    test("endpoints", () => {
      const bad = [
        [{ baseUrl: "ftp://127.0.0.1/v1", model: "m" }, RangeError, /expected an http:\/\/ or https:\/\/ URL/],
        [{ baseUrl: "not a url", model: "m" }, RangeError, /expected an http:\/\/ or https:\/\/ URL/],
        [{ baseUrl: 8080, model: "m" }, TypeError, /baseUrl must be a string or a URL/],
        [{ baseUrl: "http://user:pw@127.0.0.1/v1", model: "m" }, RangeError, /must not carry credentials, a query or a fragment/],
        [{ baseUrl: "http://127.0.0.1/v1?key=x", model: "m" }, RangeError, /must not carry credentials/],
        [{ baseUrl: "http://127.0.0.1/v1", model: "" }, TypeError, /model must be the model name/],
        [{ baseUrl: "http://127.0.0.1/v1", model: "m", timeoutMs: 0 }, RangeError, /timeoutMs must be a positive number/],
        [{ baseUrl: "http://127.0.0.1/v1", model: "m", headers: { Authorization: "Bearer x" } }, RangeError, /must not carry Authorization/],
        [{ baseUrl: "http://127.0.0.1/v1", model: "m", maxResponseBytes: 10 }, RangeError, /maxResponseBytes/],
      ];
      for (const [options, type, message] of bad) assert.throws(() => new Endpoint(options), (e) => e instanceof type && message.test(e.message));
      assert.equal(new Endpoint({ baseUrl: "http://127.0.0.1:11434/v1/", model: "m" }).url, "http://127.0.0.1:11434/v1/chat/completions");
      assert.throws(() => new RoutedChat(router, { edge: "http://127.0.0.1/v1", cloud: () => "" }), /edge must be an Endpoint, a LocalModel or a function/);
      const e = new Endpoint({ baseUrl: "http://127.0.0.1/v1", model: "m" });
      assert.throws(() => new RoutedChat(router, { edge: e, cloud: e, endpoints: { a: e } }), /edge and cloud, or endpoints .*not both/);
      assert.throws(() => new RoutedChat(router, { edge: e }), TypeError);
      assert.throws(() => new RoutedChat(router, { endpoints: { "bad name": e } }), (error) => error instanceof RangeError
        && /'bad name' is not an endpoint name/.test(error.message));
      assert.throws(() => new RoutedChat(router, { endpoints: { a: e, b: 7 } }), /endpoints\["b"\] must be an Endpoint, a LocalModel or a function/);
      assert.throws(() => new RoutedChat(router, { endpoints: {} }), /endpoints is empty/);
      assert.throws(() => new LocalModel("not a function"), TypeError);
    });
  });
});

// N endpoints: an N-endpoint bundle's router, one server per endpoint, RoutedChat({endpoints}).
describe("RoutedChat over N endpoints", () => {
  let router, names;
  before(async () => {
    router = await Router.load(ENDPOINT_BUNDLE, { strict: true });
    names = router.endpointNames;
  });
  after(() => router.close());

  /** A conversation the bundle (its own rule, undeclared precision) gives a cascade of at least `length` endpoints, and that cascade. */
  const askWith = async (length) => {
    const v = endpointVectors();
    const row = v.decisions.find((d) => d.variant === 0 && d.precision === null && !d.error && d.decision.cascade.length >= length);
    const prompt = v.cases[row.case].prompt;
    return [ask(prompt), (await router.route(prompt)).cascade];
  };

  /** A server per endpoint: `handlers` name -> handler (default: answering). */
  async function fleet(handlers = {}) {
    const byName = {};
    for (const name of names) byName[name] = await upstream(handlers[name] ?? answering(name));
    return { byName, received: (name) => byName[name].received.length, close: () => Promise.all(Object.values(byName).map((u) => u.close())) };
  }
  const chatOver = (f, { endpoint = {}, ...options } = {}) => new RoutedChat(router, {
    endpoints: Object.fromEntries(names.map((n) => [n, new Endpoint({ baseUrl: f.byName[n].url, model: `${n}-model`, ...(endpoint[n] ?? {}) })])),
    ...options });
  const tried = (routing) => routing.tried.map((t) => t.label());

  test("the decision's cascade, in order: each failure moves on, the rest get nothing", async () => {
    const [messages, cascade] = await askWith(3);
    const dead = await deadUrl();
    const f = await fleet({ [cascade[0]]: failing(503) });
    try {
      const chat = new RoutedChat(router, { endpoints: Object.fromEntries(names.map((n) => [n, new Endpoint({
        baseUrl: n === cascade[1] ? dead : f.byName[n].url, model: `${n}-model`, inputPricePer1M: 1, outputPricePer1M: 2 })])) });
      const { text: answer, routing } = await chat.create(messages);
      assert.equal(answer, `answer from ${cascade[2]}`);
      assert.equal(routing.served_by, cascade[2]);
      assert.equal(routing.model, `${cascade[2]}-model`);
      assert.deepEqual(tried(routing), [`${cascade[0]}=error:UpstreamHTTPError`, `${cascade[1]}=error:UpstreamUnreachable`, `${cascade[2]}=served`]);
      assert.equal(routing.fallback_kind, "connection_error");
      assert.equal(routing.decision.cascade.join(), cascade.join());
      assert.equal(routing.fallback_reason.startsWith(`left ${cascade[0]}=error:UpstreamHTTPError, ${cascade[1]}=error:UpstreamUnreachable: `), true);
      assert.ok(!routing.fallback_reason.includes("127.0.0.1"), "no URL in the reason");
      assert.deepEqual(statuses(routing), [`${cascade[0]}:error`, `${cascade[1]}:error`, `${cascade[2]}:ok`]);
      assert.equal(routing.estimated_cost, (10 * 1 + 5 * 2) / 1e6, "only the answer that came back is priced");
      assert.equal(typeof routing.expected_cost, "number", "the bundle's specs price the calls made");
      for (const n of names.filter((n) => !cascade.slice(0, 3).includes(n))) assert.equal(f.received(n), 0, `${n} got nothing`);
      assert.equal(f.byName[cascade[2]].received[0].body.model, `${cascade[2]}-model`);
    } finally { await f.close(); }
  });

  test("a conversation over an endpoint's context limit (specs given to the client) never reaches it", async () => {
    const [messages, cascade] = await askWith(2);
    const f = await fleet();
    try {
      const specs = router.manifest.endpoints.spec.endpoints.map((e) => ({ where: e.where, price: e.price,
        context_tokens: e.name === cascade[0] ? 1 : e.context_tokens, name: e.name }));
      const { routing } = await chatOver(f, { specs: Object.fromEntries(specs.map((e) => [e.name, e])) }).create(messages);
      assert.equal(f.received(cascade[0]), 0);
      assert.equal(routing.served_by, cascade[1]);
      assert.equal(routing.fallback_kind, "context_limit");
      assert.deepEqual(tried(routing).slice(0, 2), [`${cascade[0]}=context`, `${cascade[1]}=served`]);
      assert.deepEqual(statuses(routing).slice(0, 1), [`${cascade[0]}:skipped`]);
    } finally { await f.close(); }
  });

  test("an endpoint past its timeoutMs is cut off (its connection closed) and the next one answers", async () => {
    const [messages, cascade] = await askWith(2);
    const f = await fleet({ [cascade[0]]: silent() });
    try {
      const { routing } = await chatOver(f, { endpoint: { [cascade[0]]: { timeoutMs: 150 } } }).create(messages);
      assert.equal(routing.served_by, cascade[1]);
      assert.equal(routing.fallback_kind, "timeout");
      assert.deepEqual(tried(routing), [`${cascade[0]}=timeout`, `${cascade[1]}=served`]);
      assert.ok(await until(() => f.byName[cascade[0]].state.closedEarly === 1), "the request was aborted");
    } finally { await f.close(); }
  });

  test("a rejected answer moves on; every answer but the last is checked, and each is priced", async () => {
    const [messages, cascade] = await askWith(3);
    const f = await fleet();
    try {
      const seen = [];
      const chat = chatOver(f, { endpoint: Object.fromEntries(names.map((n) => [n, { inputPricePer1M: 1, outputPricePer1M: 1 }])) });
      const { text: answer, routing } = await chat.create(messages, { accept: (t) => { seen.push(t); return t.endsWith(cascade[1]); } });
      assert.equal(answer, `answer from ${cascade[1]}`);
      assert.deepEqual(seen, [`answer from ${cascade[0]}`, `answer from ${cascade[1]}`]);
      assert.deepEqual(tried(routing), [`${cascade[0]}=rejected`, `${cascade[1]}=served`]);
      assert.equal(routing.fallback_kind, "rejected");
      assert.equal(routing.estimated_cost, 2 * (10 + 5) / 1e6, "the rejected answer cost too");
      const all = await chat.create(messages, { accept: () => false });
      assert.equal(all.routing.served_by, cascade.at(-1), "the last answer stands");
      assert.equal(f.received(cascade.at(-1)), 1);
    } finally { await f.close(); }
  });

  test("a forbidden endpoint is never called; when the others fail, FallbackForbidden", async () => {
    const [messages, cascade] = await askWith(2);
    const f = await fleet(Object.fromEntries(names.map((n) => [n, failing(500)])));
    router.policy = await PolicySet.fromObject({ rules: [{ name: "keep-out", when: { metadata: { tier: "free" } }, then: "forbid",
      endpoint: cascade[0] }] }, { endpoints: router.policyEndpoints });
    try {
      const error = await chatOver(f).create(messages, { metadata: { tier: "free" } }).then(() => null, (e) => e);
      assert.ok(error instanceof FallbackForbidden, String(error));
      assert.equal(error.endpoint, cascade[0]);
      assert.equal(f.received(cascade[0]), 0, "never called, not as a fallback either");
      assert.ok(error.tried.length >= 1 && error.tried.every((t) => t.outcome === "error"));
      assert.equal(error.message, `policy 'keep-out' forbids ${cascade[0]}, and no allowed endpoint served: ` +
        error.tried.map((t) => t.label()).join("; "));
      for (const t of error.tried) assert.equal(f.received(t.endpoint), 1);
    } finally {
      router.policy = null;
      await f.close();
    }
  });

  test("every endpoint failing: EndpointsFailed names each attempt", async () => {
    const [messages, cascade] = await askWith(2);
    const f = await fleet(Object.fromEntries(names.map((n) => [n, failing(502, "bad gateway")])));
    try {
      const error = await chatOver(f).create(messages).then(() => null, (e) => e);
      assert.ok(error instanceof EndpointsFailed && error instanceof CloudCallError);
      assert.ok(error.message.startsWith(`no endpoint served: ${cascade.map((n) => `${n}=error:UpstreamHTTPError`).join("; ")} (`), error.message);
      for (const n of cascade) assert.match(error.message, new RegExp(`${n}: .*bad gateway`), "each call's error after the attempts");
      assert.equal(error.edge_error.endpoint, cascade[0], "the first endpoint's failure");
      assert.equal(error.cause.endpoint, cascade.at(-1), "the last one's, as the cause");
      for (const n of names) assert.equal(f.received(n), cascade.includes(n) ? 1 : 0, n);
    } finally { await f.close(); }
  });

  test("streams: an endpoint failing before its first token moves on; the next one's chunks reach the caller", async () => {
    const [messages, cascade] = await askWith(3);
    const roleThenNothing = (request, res) => { res.writeHead(200, { "content-type": "text/event-stream" }); res.write(event(chunk({ role: "assistant" }))); };
    const f = await fleet({ [cascade[0]]: failing(503), [cascade[1]]: roleThenNothing });
    try {
      const stream = await chatOver(f, { endpoint: { [cascade[1]]: { firstTokenTimeoutMs: 150 } } }).create(messages, { stream: true });
      assert.equal(stream.routing.served_by, cascade[2]);
      assert.deepEqual(tried(stream.routing), [`${cascade[0]}=error:UpstreamHTTPError`, `${cascade[1]}=timeout`, `${cascade[2]}=served`]);
      assert.equal(stream.routing.fallback_kind, "slow_first_token");
      assert.equal(text(await collect(stream)), `answer from ${cascade[2]}`);
      assert.equal(f.byName[cascade[2]].received[0].body.stream, true);
    } finally { await f.close(); }
  });

  test("metadata is the policy's, never sent; an answer's cost counts against the budgets it names", async () => {
    const [messages, cascade] = await askWith(2);
    const f = await fleet();
    router.policy = await PolicySet.fromObject({ rules: [{ name: "capped", when: { budget: { key: "user", limit: 1e-6, period: "day" } },
      then: "forbid", endpoint: cascade[0] }] }, { endpoints: router.policyEndpoints });
    try {
      const chat = chatOver(f, { endpoint: { [cascade[0]]: { inputPricePer1M: 1, outputPricePer1M: 1 } } });
      const first = await chat.create(messages, { metadata: { user: "ana" } });
      assert.equal(first.routing.served_by, cascade[0]);
      assert.equal(first.routing.estimated_cost, 15 / 1e6);
      assert.equal(f.byName[cascade[0]].received[0].body.metadata, undefined, "the policy's metadata is not sent");
      const second = await chat.create(messages, { metadata: { user: "ana" } });
      assert.equal(second.routing.decision.rule, "capped");
      assert.notEqual(second.routing.served_by, cascade[0]);
      assert.equal(f.received(cascade[0]), 1);
    } finally {
      router.policy = null;
      router.ledger = null;
      await f.close();
    }
  });
});

// The error classes are part of the contract: each failure has its own.
test("the error classes say what happened", () => {
  for (const [cls, kind] of [[UpstreamUnreachable, "connection_error"], [UpstreamTimeout, "timeout"], [SlowFirstToken, "slow_first_token"],
    [UpstreamMalformed, "malformed"], [StreamInterrupted, "stream_interrupted"]]) {
    const error = new cls("edge", "what happened");
    assert.equal(error.kind, kind);
    assert.equal(String(error), `${cls.name}: edge: what happened`);
  }
  assert.ok(new SlowFirstToken("edge", "x") instanceof UpstreamTimeout);
});
