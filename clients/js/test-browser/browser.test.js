// The web build (src/web.js: fetch, WebCrypto, onnxruntime-web) in headless Chromium against
// the same vectors as the Node tests. Needs a Chromium (Debian's `chromium`; CHROMIUM names
// another; none fails the test), driven by puppeteer-core, which downloads no browser.
// Run: npm run test:browser (make test-js runs it).
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { PACKAGE, fileUnder, serveStatic } from "../demo/serve.mjs";
import { BUNDLE, CONVERSATION_VECTORS, ENDPOINT_BUNDLE, ENDPOINT_VECTORS, EXECUTE_VECTORS, POLICY_VECTORS, VECTORS, conversationVectors,
  endpointVectors, executeVectors, policyVectors, vectors } from "../test/fixtures.js";
import { launchChromium } from "./chromium.js";

/** The file a URL path names: the package (/pkg/), the bundle (/bundle/), the bundle with its
 * signature (/signed/), the vectors; null for anything else. */
function fileFor(urlPath) {
  const [, root, ...rest] = urlPath.split("/");
  const name = rest.join("/");
  if (root === "vectors.json") return VECTORS;
  if (root === "endpoint-vectors.json") return ENDPOINT_VECTORS;
  if (root === "policy-vectors.json") return POLICY_VECTORS;
  if (root === "execute-vectors.json") return EXECUTE_VECTORS;
  if (root === "conversation-vectors.json") return CONVERSATION_VECTORS;
  // /conversations/<two|n>/<i>/<file>: a conversation vectors' bundle variant (its manifest below, in handle)
  if (root === "conversations" && /^(two|n)\/[0-9]+\/[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) {
    return path.join(rest[0] === "two" ? BUNDLE : ENDPOINT_BUNDLE, rest[2]);
  }
  if (root === "endpoints" && /^[0-9]+\/[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) return path.join(ENDPOINT_BUNDLE, rest[1]);
  // /evidence-loads/<i>/<file>: the two-endpoint bundle with a turn_evidence.json Python refuses (its manifest and file in handle)
  if (root === "evidence-loads" && /^[0-9]+\/[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) return path.join(BUNDLE, rest[1]);
  if (root === "page.html") return path.join(PACKAGE, "test-browser/page.html");
  if (root === "pkg") return fileUnder(PACKAGE, name);
  if ((root === "bundle" || root === "signed") && /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) return path.join(BUNDLE, name);
  return null;
}

/** A static server on 127.0.0.1 that also takes the page's POST /result. */
function serve(onResult) {
  return serveStatic(fileFor, {
    handle(request, response, url) {
      if (request.method === "POST" && url.pathname === "/result") {
        let body = "";
        request.on("data", (chunk) => { body += chunk; });
        request.on("end", () => { response.end("ok"); onResult(JSON.parse(body)); });
        return true;
      }
      // page.js nEndpointChat: /v1/<behaviour>/<endpoint>/chat/completions answers, fails (503) or, streamed, never gives a first token
      const routed = /^\/v1\/(answer|fail|silent)\/([A-Za-z0-9._:-]+)\/chat\/completions$/.exec(url.pathname);
      if (request.method === "POST" && routed) {
        let body = "";
        request.on("data", (chunk) => { body += chunk; });
        request.on("end", () => {
          const [, behaviour, name] = routed;
          const stream = JSON.parse(body).stream === true;
          const event = (delta, finish = null) =>
            `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
          if (behaviour === "fail") {
            response.writeHead(503, { "content-type": "application/json" });
            response.end('{"error": {"message": "overloaded"}}');
          } else if (behaviour === "silent" && stream) {
            response.writeHead(200, { "content-type": "text/event-stream" });
            response.write(event({ role: "assistant" }));  // and nothing more: the client gives up at firstTokenTimeoutMs
            setTimeout(() => response.end(), 3000);
          } else if (behaviour === "silent") {
            response.writeHead(500, { "content-type": "application/json" });
            response.end('{"error": {"message": "down"}}');
          } else if (stream) {
            response.writeHead(200, { "content-type": "text/event-stream" });
            response.end(event({ content: `answer from ${name}` }) + event({}, "stop") + "data: [DONE]\n\n");
          } else {
            response.writeHead(200, { "content-type": "application/json" });
            response.end(JSON.stringify({ id: "c", object: "chat.completion", choices: [{ index: 0,
              message: { role: "assistant", content: `answer from ${name}` }, finish_reason: "stop" }] }));
          }
        });
        return true;
      }
      if (request.method === "POST" && url.pathname === "/v1/chat/completions") {  // page.js streamRedaction
        let body = "";
        request.on("data", (chunk) => { body += chunk; });
        request.on("end", () => {
          const text = `your key is ${(request.headers.authorization ?? "").replace(/^Bearer /, "")}`;
          const at = "your key is ".length + JSON.parse(body).cut;
          const event = (delta, finish = null) =>
            `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
          response.writeHead(200, { "content-type": "text/event-stream" });
          response.end(event({ content: text.slice(0, at) }) + event({ content: text.slice(at) }) + event({}, "stop") + "data: [DONE]\n\n");
        });
        return true;
      }
      // /endpoints/<i>/: the N-endpoint bundle under its choice rule variant i (unsigned but the bundle's own)
      const variant = /^\/endpoints\/([0-9]+)\/(manifest\.json|manifest\.sig)$/.exec(url.pathname);
      const text = variant ? endpointVectors().variants[Number(variant[1])]?.manifest_text : null;
      if (variant && text !== null) {
        if (variant[2] === "manifest.sig") response.writeHead(404);
        response.end(variant[2] === "manifest.json" ? text : "");
        return true;
      }
      // /conversations/<kind>/<i>/: a variant of the conversation vectors, unsigned when its manifest is edited, with its
      // turn_evidence.json when it has one
      const talk = /^\/conversations\/(two|n)\/([0-9]+)\/(manifest\.json|manifest\.sig|turn_evidence\.json)$/.exec(url.pathname);
      const shown = talk ? conversationVectors().bundles[talk[1]].variants[Number(talk[2])] : null;
      const edited = talk ? (talk[3] === "turn_evidence.json" ? shown?.evidence_text : shown?.manifest_text) : null;
      if (talk && edited !== null && edited !== undefined) {
        if (talk[3] === "manifest.sig") response.writeHead(404);
        response.end(talk[3] === "manifest.sig" ? "" : edited);
        return true;
      }
      const refused = /^\/evidence-loads\/([0-9]+)\/(manifest\.json|manifest\.sig|turn_evidence\.json)$/.exec(url.pathname);
      const bad = refused ? conversationVectors().evidence.loads[Number(refused[1])] : null;
      if (bad) {
        if (refused[2] === "manifest.sig") response.writeHead(404);
        response.end(refused[2] === "manifest.json" ? bad.manifest_text : refused[2] === "turn_evidence.json" ? bad.evidence_text : "");
        return true;
      }
      if (url.pathname === "/signed/manifest.sig") {
        response.end(Buffer.from(vectors().signature.signature_hex, "hex"));
        return true;
      }
      return false;
    },
  });
}

test("the web build gives Python's decisions in headless Chromium", { timeout: 15 * 60_000 }, async () => {
  vectors();  // fails early, saying how to make them, when they are missing
  endpointVectors();
  policyVectors();
  executeVectors();
  conversationVectors();
  let resolveResult;
  const result = new Promise((resolve) => { resolveResult = resolve; });
  const browser = await launchChromium();  // first: without a Chromium, nothing is left open
  const server = await serve(resolveResult);
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (error) => errors.push(String(error)));
    await page.goto(`http://127.0.0.1:${server.address().port}/page.html`);
    const summary = await result;
    assert.equal(summary.error, undefined, summary.error);
    assert.deepEqual(errors, []);
    console.log(`browser: ${summary.decisions} route() and ${summary.batched} routeBatch() decisions; ` +
      `max |score - python| ${summary.worst.score}, max |novelty - python| ${summary.worst.novelty}; ` +
      `load ${summary.loadMs.toFixed(0)} ms, route() ${(summary.routeMs / summary.decisions).toFixed(2)} ms each`);
    assert.deepEqual(summary.mismatches, []);
    console.log(`browser: acceptance check on ${summary.acceptance.answers} answers, max |probability - python| ${summary.acceptance.worst}`);
    assert.equal(summary.acceptance.answers, vectors().acceptance.length);
    assert.equal(summary.acceptance.verdictsDiffering, 0);
    assert.ok(summary.acceptance.worst <= 1e-5);
    assert.equal(summary.decisions, vectors().decisions.filter((d) => d.router === "bundle").length);
    assert.equal(summary.batched, summary.decisions);
    assert.equal(summary.ruleMismatches, 0);
    assert.equal(summary.modelVersion, vectors().bundle.model_version);
    assert.equal(summary.signedLoads, true, "a bundle signed by training.keys loads under its key (WebCrypto Ed25519)");
    assert.equal(summary.unsignedRefused, true, "an unsigned bundle under a pinned key is degraded");
    assert.equal(summary.missingDegraded, true, "a missing bundle routes on the rule table");
    const { endpoints } = summary;
    console.log(`browser: N endpoints: ${endpoints.decisions} decisions over ${endpoints.rules} rules, ${endpoints.infeasible} ` +
      `NoFeasibleEndpoint; max |expected - python| ${endpoints.worst}`);
    assert.deepEqual(endpoints.mismatches, []);
    assert.equal(endpoints.decisions + endpoints.infeasible, endpointVectors().decisions.length);
    assert.equal(endpoints.infeasible, endpointVectors().decisions.filter((d) => d.error).length);
    assert.ok(endpoints.worst <= 1e-5);
    const { policy } = summary;
    const total = policyVectors().scenarios.reduce((n, s) => n + s.steps.filter((x) => x.route).length, 0);
    console.log(`browser: policies: ${policy.decisions} decisions and ${policy.errors} NoFeasibleEndpoint over ${policy.rules} rule ` +
      `names, ${policy.spends} spends; detectors on ${policy.detectorTexts} texts`);
    assert.deepEqual(policy.mismatches, []);
    assert.equal(policy.decisions + policy.errors, total);
    assert.equal(policy.detectorMismatches, 0);
    const { executions } = summary;
    console.log(`browser: execute parity: ${executions.scenarios} scenarios (${JSON.stringify(executions.kinds)}, ${executions.timeouts} with a timeout)`);
    assert.deepEqual(executions.mismatches, []);
    assert.equal(executions.scenarios, executeVectors().scenarios.length);
    const { conversations } = summary;
    const ev = conversations.evidence;
    console.log(`browser: conversations: ${conversations.decisions} decisions equal (${conversations.moves} move, ${conversations.stays} stay, ` +
      `${conversations.shifted} scores moved for the switch; ${conversations.withEvidence} on bundles with turn evidence, ${conversations.weighed} ` +
      `with the last turn weighed in, max |expected - python| ${conversations.worstExpected.toExponential(1)}), ${conversations.routed} through ` +
      `route() and a store, ${conversations.switchCosts} switchCosts rows, ${conversations.json} JSON texts; turn evidence: ${ev.adjusted} ` +
      `adjusted probabilities (${ev.bitEqual} bit for bit, max |difference| ${ev.worst.toExponential(1)}), ${ev.refused} files refused and ` +
      `${ev.taken} taken as Python's, ${conversations.loads} bundles refused alike`);
    assert.deepEqual(conversations.mismatches, []);
    assert.equal(conversations.decisions + conversations.errors,
      Object.values(conversationVectors().bundles).reduce((n, b) => n + b.decisions.length, 0));
    assert.equal(conversations.loads, conversationVectors().evidence.loads.length);
    assert.ok(conversations.weighed > 10_000 && ev.adjusted > 5000 && ev.refused > 20);
    const { nChat } = summary;
    const [first, second, third] = nChat.cascade;
    assert.deepEqual([nChat.served, nChat.text], [third, `answer from ${third}`]);
    assert.deepEqual(nChat.tried, [`${first}=error:UpstreamHTTPError`, `${second}=error:UpstreamHTTPError`, `${third}=served`]);
    assert.deepEqual([nChat.streamServed, nChat.streamText], [third, `answer from ${third}`]);
    assert.deepEqual(nChat.streamTried, [`${first}=error:UpstreamHTTPError`, `${second}=timeout`, `${third}=served`]);
    const { streamRedaction } = summary;
    assert.deepEqual(streamRedaction.texts, Array(streamRedaction.cuts).fill("your key is [redacted]"),
      "a key split across two stream chunks at any point reads [redacted] in the joined text (the web build)");
  } finally {
    await browser.close();
    server.close();
  }
});
