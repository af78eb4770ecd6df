// The request's deadline (Request.deadline, serving.execution._execute's): each endpoint's call is cut
// to what is left before it, and once it has passed the endpoints left are not called: each is a
// "skipped" step saying "the request's deadline has passed" and a timeout (TimeoutError), so the run
// ends in EndpointsFailed as Python's does. The runner on scripted calls, Router.execute on both
// bundles, and RoutedChat against HTTP servers on 127.0.0.1 that record what reaches them.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, test } from "node:test";
import { CallTimeoutError, Endpoint, EndpointsFailed, Request, RoutedChat, Router, execute, failureKind, triedText } from "../src/index.js";
import { DEADLINE_PASSED } from "../src/execute.js";
import { decisionOf } from "../src/decision.js";
import { BUNDLE, ENDPOINT_BUNDLE, endpointVectors, promptIn } from "./fixtures.js";

const NAMES = ["phone-3b", "onprem-8b", "frontier"];
const decision = (cascade = NAMES) => decisionOf({ cascade, score: 0, reason: "t", degraded: false, model_version: "t",
  on_device: cascade.map((n) => n === "phone-3b"), checked: cascade.slice(0, -1), n_tokens: 10 });
const statuses = (stepsOf) => stepsOf.steps.map((s) => `${s.name}:${s.status}`);

/** Calls by name that record what was called; `hang` names wait for their signal, the others answer. */
function calls(hang = []) {
  const made = [], signals = {};
  const endpoints = Object.fromEntries(NAMES.map((name) => [name, (prompt, { signal }) => {
    made.push(name);
    signals[name] = signal;
    if (!hang.includes(name)) return `${name} answers`;
    return new Promise((resolve) => { signal.addEventListener("abort", () => resolve("too late"), { once: true }); });
  }]));
  return { endpoints, made, signals };
}

/** The run's EndpointsFailed (a failing assertion when it served or threw something else). */
async function failure(run) {
  try {
    await run;
  } catch (error) {
    assert.ok(error instanceof EndpointsFailed, `EndpointsFailed, got ${error}`);
    return error;
  }
  return assert.fail("the run served");
}

/** Checks that every endpoint but `name` (the one called, or null) was skipped for the deadline, as a timeout. */
function skippedAfter(error, name) {
  const skipped = error.steps.filter((s) => s.status === "skipped");
  assert.ok(skipped.length && skipped.every((s) => s.detail === DEADLINE_PASSED && s.seconds === 0 && s.name !== name));
  for (const t of error.tried.filter((t) => t.endpoint !== name)) {
    assert.deepEqual([t.outcome, t.error], ["timeout", "TimeoutError"]);
    assert.ok(t.exception instanceof CallTimeoutError && t.exception.message === DEADLINE_PASSED);
  }
}

describe("the runner with a deadline", () => {
  test("passed before the first call: nothing is called, each endpoint is a timeout, EndpointsFailed", async () => {
    const { endpoints, made } = calls();
    const error = await failure(execute(decision(), "q", { endpoints, deadline: performance.now() - 1 }));
    assert.deepEqual(made, []);
    assert.deepEqual(statuses(error), NAMES.map((n) => `${n}:skipped`));
    assert.equal(triedText(error.tried), NAMES.map((n) => `${n}=timeout`).join(","));
    assert.equal(error.message, `no endpoint served: ${NAMES.map((n) => `${n}=timeout`).join("; ")} (` +
      `${NAMES.map((n) => `${n}: the request's deadline has passed`).join("; ")})`);
    assert.ok(error.cause instanceof CallTimeoutError && error.cause.name === "TimeoutError");
    assert.equal(failureKind(error.cause), "timeout");
    assert.equal(error.edge_error, error.tried[0].exception, "the first endpoint's failure, as for a call that timed out");
    skippedAfter(error, null);
  });

  test("passing during a call: that call is cut at the deadline (its signal aborted), the rest are never called", async () => {
    const { endpoints, made, signals } = calls(["phone-3b"]);
    const start = performance.now();
    const error = await failure(execute(decision(), "q", { endpoints, deadline: start + 80, timeoutsMs: { "phone-3b": 5000 } }));
    const took = performance.now() - start;
    assert.deepEqual(made, ["phone-3b"]);
    assert.ok(took >= 80 && took < 2000, `cut at the deadline, not at its own 5 s timeout: ${took} ms`);
    assert.ok(signals["phone-3b"].aborted && signals["phone-3b"].reason instanceof CallTimeoutError);
    assert.deepEqual(statuses(error), ["phone-3b:timeout", "onprem-8b:skipped", "frontier:skipped"]);
    assert.match(error.steps[0].detail, /^phone-3b call exceeded 0\.0[0-8]\d* s$/);
    assert.equal(triedText(error.tried), "phone-3b=timeout,onprem-8b=timeout,frontier=timeout");
    skippedAfter(error, "phone-3b");
  });

  test("far off: the calls' own timeouts stand, and the next endpoint serves", async () => {
    const { endpoints, made } = calls(["phone-3b"]);
    const run = await execute(decision(), "q", { endpoints, deadline: performance.now() + 60_000, timeoutsMs: { "phone-3b": 20 } });
    assert.deepEqual([run.served_by, made], ["onprem-8b", ["phone-3b", "onprem-8b"]]);
    assert.equal(run.steps[0].detail, "phone-3b call exceeded 0.02 s");
    assert.equal(run.fallback_code, "left phone-3b=timeout");
  });

  test("a deadline that is not a number is the caller's error", async () => {
    await assert.rejects(execute(decision(), "q", { endpoints: calls().endpoints, deadline: "soon" }), TypeError);
  });
});

describe("Router.execute with a deadline", () => {
  test("two endpoints: a passed deadline calls neither", async () => {
    const router = await Router.load(BUNDLE, { strict: true });
    try {
      const made = [];
      const edge = () => { made.push("edge"); return "e"; }, cloud = () => { made.push("cloud"); return "c"; };
      const request = new Request(promptIn("edge"), { deadline: performance.now() - 1 });
      const error = await failure(router.execute(request, edge, cloud));
      assert.deepEqual(made, []);
      assert.equal(triedText(error.tried), "edge=timeout,cloud=timeout");
      const again = await failure(router.execute(promptIn("edge"), edge, cloud, { deadline: performance.now() - 1 }));
      assert.equal(triedText(again.tried), "edge=timeout,cloud=timeout");
    } finally {
      await router.close();
    }
  });

  test("N endpoints: the first call cut at the deadline, the rest of the cascade skipped", async () => {
    const router = await Router.load(ENDPOINT_BUNDLE, { strict: true });
    try {
      const v = endpointVectors();
      const row = v.decisions.find((d) => d.variant === 0 && d.precision === null && !d.error && d.decision.cascade.length >= 2);
      const prompt = v.cases[row.case].prompt;
      const cascade = (await router.route(prompt)).cascade;
      const made = [];
      const endpoints = Object.fromEntries(router.endpointNames.map((name) => [name, (p, { signal }) => {
        made.push(name);
        return new Promise((resolve) => { signal.addEventListener("abort", () => resolve("late"), { once: true }); });
      }]));
      const error = await failure(router.execute(new Request(prompt, { deadline: performance.now() + 60 }), endpoints));
      assert.deepEqual(made, [cascade[0]]);
      assert.equal(triedText(error.tried), cascade.map((n) => `${n}=timeout`).join(","));
      assert.deepEqual(statuses(error), [`${cascade[0]}:timeout`, ...cascade.slice(1).map((n) => `${n}:skipped`)]);
      skippedAfter(error, cascade[0]);
    } finally {
      await router.close();
    }
  });
});

// RoutedChat over HTTP servers on 127.0.0.1.

/** A server on 127.0.0.1: `received` its requests, `closedEarly` the connections the client dropped. */
async function upstream(handler) {
  const received = [];
  const state = { closedEarly: 0 };
  const server = http.createServer(async (req, res) => {
    const parts = [];
    for await (const part of req) parts.push(part);
    received.push(JSON.parse(Buffer.concat(parts).toString("utf8")));
    res.on("close", () => { if (!res.writableFinished) state.closedEarly++; });
    await handler(received[received.length - 1], res);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { received, state, url: `http://127.0.0.1:${server.address().port}/v1`,
    close: () => { server.closeAllConnections(); return new Promise((resolve) => server.close(resolve)); } };
}
const answering = (name) => (body, res) => {
  if (body.stream) {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: `answer from ${name}` }, finish_reason: null }] })}\n\n`);
    res.end("data: [DONE]\n\n");
    return;
  }
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ choices: [{ index: 0, message: { role: "assistant", content: `answer from ${name}` }, finish_reason: "stop" }] }));
};
const silent = () => () => {};  // takes the request and never answers
const failing = (status) => (body, res) => { res.writeHead(status, { "content-type": "application/json" }); res.end("{}"); };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
async function until(condition) {
  for (let waited = 0; !condition() && waited < 10_000; waited += 10) await sleep(10);
  return condition();
}

describe("RoutedChat with a deadline (HTTP servers on 127.0.0.1)", () => {
  let router, names, messages, cascade;
  before(async () => {
    router = await Router.load(ENDPOINT_BUNDLE, { strict: true });
    names = router.endpointNames;
    const v = endpointVectors();
    const row = v.decisions.find((d) => d.variant === 0 && d.precision === null && !d.error && d.decision.cascade.length >= 3);
    messages = [{ role: "user", content: v.cases[row.case].prompt }];
    cascade = (await router.route(v.cases[row.case].prompt)).cascade;
  });
  after(() => router.close());

  async function fleet(handlers) {
    const byName = {};
    for (const name of names) byName[name] = await upstream(handlers[name] ?? answering(name));
    return { byName, received: (name) => byName[name].received.length, close: () => Promise.all(Object.values(byName).map((u) => u.close())) };
  }
  const chatOver = (f) => new RoutedChat(router, {
    endpoints: Object.fromEntries(names.map((n) => [n, new Endpoint({ baseUrl: f.byName[n].url, model: `${n}-model`, timeoutMs: 30_000 })])) });

  test("a silent first endpoint is dropped at the deadline; the others get nothing; EndpointsFailed of timeouts", async () => {
    const f = await fleet({ [cascade[0]]: silent() });
    try {
      const start = performance.now();
      const error = await failure(chatOver(f).create(messages, { deadline: start + 300 }));
      const took = performance.now() - start;
      assert.ok(took >= 300 && took < 5000, `at the deadline, not the endpoint's 30 s: ${took} ms`);
      assert.equal(f.received(cascade[0]), 1);
      for (const name of names.filter((n) => n !== cascade[0])) assert.equal(f.received(name), 0, `${name} got nothing`);
      assert.ok(await until(() => f.byName[cascade[0]].state.closedEarly === 1), "the first call's connection is closed at the deadline");
      assert.equal(triedText(error.tried), cascade.map((n) => `${n}=timeout`).join(","));
      assert.deepEqual(statuses(error), [`${cascade[0]}:timeout`, ...cascade.slice(1).map((n) => `${n}:skipped`)]);
      assert.ok(error.cause instanceof CallTimeoutError && error.cause.message === DEADLINE_PASSED);
    } finally { await f.close(); }
  });

  test("a failure before the deadline moves on, and the next endpoint answers in time", async () => {
    const f = await fleet({ [cascade[0]]: failing(503) });
    try {
      const { text, routing } = await chatOver(f).create(messages, { deadline: performance.now() + 20_000 });
      assert.equal(text, `answer from ${cascade[1]}`);
      assert.equal(triedText(routing.tried), `${cascade[0]}=error:UpstreamHTTPError,${cascade[1]}=served`);
      for (const name of cascade.slice(2)) assert.equal(f.received(name), 0);
    } finally { await f.close(); }
  });

  test("a stream's first token counts against the deadline; a Request's deadline is the option's", async () => {
    const f = await fleet({ [cascade[0]]: silent() });
    try {
      const request = new Request(null, { messages, deadline: performance.now() + 200 });
      const error = await failure(chatOver(f).create(request, { stream: true }));
      assert.deepEqual([f.received(cascade[0]), ...cascade.slice(1).map((n) => f.received(n))], [1, ...cascade.slice(1).map(() => 0)]);
      assert.equal(triedText(error.tried), cascade.map((n) => `${n}=timeout`).join(","));
    } finally { await f.close(); }
    const ok = await fleet({});
    try {
      const stream = await chatOver(ok).create(messages, { stream: true, deadline: performance.now() + 20_000 });
      const pieces = [];
      for await (const chunk of stream) pieces.push(chunk.choices[0].delta.content ?? "");
      assert.equal(pieces.join(""), `answer from ${cascade[0]}`);
    } finally { await ok.close(); }
  });
});
