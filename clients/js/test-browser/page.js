// In the browser: the web build routes the vectors (pipelines/vectors.py) and posts a summary
// to /result, which browser.test.js checks. The bundle is served at /bundle/, the same bundle
// with training.keys' signature at /signed/.
import * as ort from "onnxruntime-web";
import { BundleError, ConversationState, Conversations, Endpoint, Held, Needs, NoFeasibleEndpoint, PolicySet, Request, RoutedChat, Router,
  RuleRouter, Stickiness, TurnEvidence, TurnEvidenceError, detect, switchCosts } from "/pkg/src/web.js";
import { replayConversations, replayEvidenceLoads } from "/pkg/test/shared/conversation-parity.js";
import { replayScenarios } from "/pkg/test/shared/policy-parity.js";
import { replayExecutions } from "/pkg/test/shared/execute-parity.js";
import { errorClass, execute } from "/pkg/src/execute.js";
import { decisionOf } from "/pkg/src/decision.js";
import { parseEndpoints } from "/pkg/src/endpoints.js";

ort.env.wasm.wasmPaths = "/pkg/node_modules/onnxruntime-web/dist/";
ort.env.wasm.numThreads = 1;

const FIELDS = ["zone", "target", "reason", "n_tokens", "truncated", "unfamiliar", "degraded", "model_version", "precision", "endpoint"];
const TOLERANCES = { score: 1e-5, p_edge: 1e-5, p_cloud: 1e-5, novelty: 1e-6 };

/** Mismatches of one decision against Python's (field names), and its numeric differences
 * (`expected`: the largest over its endpoints). */
function compare(js, py) {
  const wrong = FIELDS.filter((f) => js[f] !== py[f]);
  if (JSON.stringify(js.cascade) !== JSON.stringify(py.cascade)) wrong.push("cascade");
  const diffs = { expected: 0 };
  if (py.expected === null || js.expected === null) {
    if (js.expected !== py.expected) wrong.push("expected");
  } else {
    const names = Object.keys(py.expected);
    if (JSON.stringify(Object.keys(js.expected)) !== JSON.stringify(names)) wrong.push("expected");
    for (const n of names) diffs.expected = Math.max(diffs.expected, Math.abs(js.expected[n] - py.expected[n]));
    if (!(diffs.expected <= 1e-5)) wrong.push("expected");
  }
  for (const [field, tolerance] of Object.entries(TOLERANCES)) {
    if (py[field] === null) { if (js[field] !== null) wrong.push(field); continue; }
    diffs[field] = Math.abs(js[field] - py[field]);
    if (!(diffs[field] <= tolerance)) wrong.push(field);
  }
  return { wrong, diffs };
}

async function run() {
  const vectors = await (await fetch("/vectors.json")).json();
  const rows = vectors.decisions.filter((d) => d.router === "bundle");
  const summary = { decisions: rows.length, batched: 0, mismatches: [], worst: { score: 0, novelty: 0 }, ruleMismatches: 0 };
  const note = (row, result, how) => {
    if (result.wrong.length && summary.mismatches.length < 20) {
      summary.mismatches.push({ how, id: vectors.cases[row.case].id, precision: row.precision, fields: result.wrong });
    }
    summary.worst.score = Math.max(summary.worst.score, result.diffs.score ?? 0);
    summary.worst.novelty = Math.max(summary.worst.novelty, result.diffs.novelty ?? 0);
  };
  const started = performance.now();
  const router = await Router.load(`${location.origin}/bundle/`, { strict: true });
  summary.loadMs = performance.now() - started;
  summary.modelVersion = router.modelVersion;
  for (const row of rows) note(row, compare(await router.route(vectors.cases[row.case].prompt, { precision: row.precision }), row.decision), "route");
  summary.routeMs = performance.now() - started - summary.loadMs;
  for (let i = 0; i < rows.length; i += 64) {
    const chunk = rows.slice(i, i + 64);
    const decisions = await router.routeBatch(chunk.map((r) => vectors.cases[r.case].prompt), chunk.map((r) => r.precision));
    chunk.forEach((row, k) => note(row, compare(decisions[k], row.decision), "routeBatch"));
    summary.batched += chunk.length;
  }
  const rules = new RuleRouter();
  for (const row of vectors.decisions.filter((d) => d.router === "rule_table")) {
    const js = rules.route(vectors.cases[row.case].prompt, { precision: row.precision });
    if (JSON.stringify(js) !== JSON.stringify({ ...js, ...row.decision })) summary.ruleMismatches++;
  }
  summary.acceptance = { answers: 0, verdictsDiffering: 0, worst: 0 };
  for (const row of vectors.acceptance) {
    const verdict = await router.acceptor.check(row.prompt, row.answer, { logprobMean: row.logprob_mean, logprobMin: row.logprob_min });
    summary.acceptance.answers++;
    summary.acceptance.worst = Math.max(summary.acceptance.worst, Math.abs(verdict.probability - row.probability));
    if (verdict.accepted !== row.accepted) summary.acceptance.verdictsDiffering++;
  }
  const pem = vectors.signature.public_key_pem;
  summary.signedLoads = !(await Router.load(`${location.origin}/signed/`, { strict: true, publicKey: pem })).degraded;
  const quiet = { warn: () => {} };
  const unsigned = await Router.load(`${location.origin}/bundle/`, { publicKey: pem, logger: quiet });
  summary.unsignedRefused = unsigned.degraded && /unsigned/.test(unsigned.degradedReason);
  const missing = await Router.load(`${location.origin}/nothing-here/`, { logger: quiet });
  summary.missingDegraded = missing.degraded && (await missing.route("What is a loan?")).degraded;
  summary.endpoints = await endpointParity();
  summary.streamRedaction = await streamRedaction(router);
  summary.policy = await policyParity();
  summary.executions = await replayExecutions(await (await fetch("/execute-vectors.json")).json(),
    { execute, errorClass, decisionOf, parseEndpoints });
  summary.nChat = await nEndpointChat();
  summary.conversations = await conversationParity();
  return summary;
}

/** RoutedChat streams (fetch's body reader) from the server's /v1, which streams back "your key
 * is KEY" with the key it was sent, in two chunks cut at `cut` characters into the key: the
 * caller's joined text for each cut. */
async function streamRedaction(router) {
  const key = "sk-page-4c1d9e0b7a2f5368-SECRET";
  const endpoint = (model) => new Endpoint({ baseUrl: `${location.origin}/v1`, model, apiKey: key });
  const chat = new RoutedChat(router, { edge: endpoint("edge-model"), cloud: endpoint("cloud-model") });
  const texts = [];
  for (let cut = 0; cut <= key.length; cut++) {
    let text = "";
    for await (const c of await chat.create([{ role: "user", content: "What is 2 + 2?" }], { stream: true, cut })) {
      text += c.choices[0]?.delta?.content ?? "";
    }
    texts.push(text);
  }
  return { cuts: key.length + 1, texts };
}

/** RoutedChat over N endpoints (the web build's fetch): four endpoints at /v1/<name>/, the first two of
 * a cascade failing (HTTP 503, then a stream that never gives its first token); the third serves. */
async function nEndpointChat() {
  const router = await Router.load(`${location.origin}/endpoints/0/`, { strict: true });
  const names = router.endpointNames;
  const vectors = await (await fetch("/endpoint-vectors.json")).json();
  const row = vectors.decisions.find((d) => d.variant === 0 && d.precision === null && !d.error && d.decision.cascade.length >= 3);
  const prompt = vectors.cases[row.case].prompt;
  const cascade = (await router.route(prompt)).cascade;
  const behaviour = { [cascade[0]]: "fail", [cascade[1]]: "silent" };
  const chat = new RoutedChat(router, { endpoints: Object.fromEntries(names.map((n) => [n, new Endpoint({
    baseUrl: `${location.origin}/v1/${behaviour[n] ?? "answer"}/${n}`, model: `${n}-model`, firstTokenTimeoutMs: 300 })])) });
  const messages = [{ role: "user", content: prompt }];
  const completion = await chat.create(messages);
  const stream = await chat.create(messages, { stream: true });
  let text = "";
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? "";
  return { cascade, served: completion.routing.served_by, tried: completion.routing.tried.map((t) => t.label()), text: completion.text,
    streamServed: stream.routing.served_by, streamTried: stream.routing.tried.map((t) => t.label()), streamText: text };
}

/** The conversation vectors (scripts/conversation_vectors.py) on both bundles' variants (/conversations/<kind>/<i>/). */
async function conversationParity() {
  const vectors = await (await fetch("/conversation-vectors.json")).json();
  const load = (kind, index, variant) => Router.load(`${location.origin}/conversations/${kind}/${index}/`,
    { strict: true, unfamiliarPolicy: variant.unfamiliar_policy });
  const result = await replayConversations(vectors, load, { Request, ConversationState, Held, Conversations, Stickiness, PolicySet,
    NoFeasibleEndpoint, switchCosts, TurnEvidence, TurnEvidenceError }, { routeEvery: 20 });
  // bundles whose turn_evidence.json Python refuses (/evidence-loads/<i>/): refused alike, strict or not
  const miss = (item) => { if (result.mismatches.length < 25) result.mismatches.push(item); };
  const loadBad = async (index, row, strict) => {
    const source = `${location.origin}/evidence-loads/${index}/`;
    try {
      return [await Router.load(source, { strict, logger: { warn() {} } }), null, source];
    } catch (error) {
      return [null, error, source];
    }
  };
  result.loads = await replayEvidenceLoads(vectors.evidence, loadBad, BundleError, miss);
  return result;
}

/** The policy vectors (scripts/policy_vectors.py) on the two bundles, and the detectors' findings. */
async function policyParity() {
  const vectors = await (await fetch("/policy-vectors.json")).json();
  const routers = { two: await Router.load(`${location.origin}/bundle/`, { strict: true }),
    n: await Router.load(`${location.origin}/endpoints/0/`, { strict: true }) };
  const result = await replayScenarios(vectors, routers, { PolicySet, Needs, NoFeasibleEndpoint });
  let detectorMismatches = 0;
  for (const c of vectors.detectors) {
    if (JSON.stringify(detect(c.text).map((f) => [f.detector, f.start, f.end])) !== JSON.stringify(c.findings)) detectorMismatches++;
  }
  return { decisions: result.decisions, errors: result.errors, spends: result.spends, rules: result.rules.size,
    mismatches: result.mismatches, detectorTexts: vectors.detectors.length, detectorMismatches };
}

/** The N-endpoint bundle under each choice rule (/endpoints/<i>/) against Python's decisions. */
async function endpointParity() {
  const vectors = await (await fetch("/endpoint-vectors.json")).json();
  const out = { decisions: 0, infeasible: 0, rules: vectors.variants.length, worst: 0, mismatches: [] };
  const routers = [];
  for (let i = 0; i < vectors.variants.length; i++) routers.push(await Router.load(`${location.origin}/endpoints/${i}/`, { strict: true }));
  for (const row of vectors.decisions) {
    const where = { rule: vectors.variants[row.variant].rule, id: vectors.cases[row.case].id, precision: row.precision };
    let js;
    try {
      js = await routers[row.variant].route(vectors.cases[row.case].prompt, { precision: row.precision });
    } catch (error) {
      if (row.error && error instanceof NoFeasibleEndpoint && error.message === row.message) out.infeasible++;
      else if (out.mismatches.length < 20) out.mismatches.push({ ...where, error: String(error) });
      continue;
    }
    const result = row.error ? { wrong: ["no NoFeasibleEndpoint"], diffs: {} } : compare(js, row.decision);
    if (result.wrong.length && out.mismatches.length < 20) out.mismatches.push({ ...where, fields: result.wrong });
    out.worst = Math.max(out.worst, result.diffs.expected ?? 0, result.diffs.score ?? 0);
    out.decisions++;
  }
  return out;
}

run().then((summary) => fetch("/result", { method: "POST", body: JSON.stringify(summary) }),
  (error) => fetch("/result", { method: "POST", body: JSON.stringify({ error: `${error}\n${error.stack}` }) }));
