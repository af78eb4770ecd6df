// The web build (src/web.js: fetch, WebCrypto, onnxruntime-web) in headless Chromium against
// the same vectors as the Node tests. Needs a Chromium (Debian's `chromium`; CHROMIUM names
// another), driven by puppeteer-core, which downloads no browser. Run: npm run test:browser.
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";
import { BUNDLE, VECTORS, vectors } from "../test/fixtures.js";

const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
  ".json": "application/json" };

/** The file a URL path names: the package (/pkg/), the bundle (/bundle/), the bundle with its
 * signature (/signed/), the vectors; null for anything else. */
function fileFor(urlPath) {
  const [, root, ...rest] = decodeURIComponent(urlPath).split("/");
  const name = rest.join("/");
  if (root === "vectors.json") return VECTORS;
  if (root === "page.html") return path.join(PACKAGE, "test-browser/page.html");
  if (root === "pkg" && !name.split("/").includes("..")) return path.join(PACKAGE, name);
  if ((root === "bundle" || root === "signed") && /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) return path.join(BUNDLE, name);
  return null;
}

/** A static server on 127.0.0.1 that also takes the page's POST /result. */
function serve(onResult) {
  const server = http.createServer((request, response) => {
    if (request.method === "POST" && request.url === "/result") {
      let body = "";
      request.on("data", (chunk) => { body += chunk; });
      request.on("end", () => { response.end("ok"); onResult(JSON.parse(body)); });
      return;
    }
    const url = new URL(request.url, "http://127.0.0.1");
    if (url.pathname === "/signed/manifest.sig") {
      response.end(Buffer.from(vectors().signature.signature_hex, "hex"));
      return;
    }
    const file = fileFor(url.pathname);
    if (!file || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      response.writeHead(404).end();
      return;
    }
    response.writeHead(200, { "content-type": TYPES[path.extname(file)] || "application/octet-stream",
      "content-length": fs.statSync(file).size });
    fs.createReadStream(file).pipe(response);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

test("the web build gives Python's decisions in headless Chromium", { timeout: 15 * 60_000 }, async () => {
  vectors();  // fails early, saying how to make them, when they are missing
  let resolveResult;
  const result = new Promise((resolve) => { resolveResult = resolve; });
  const server = await serve(resolveResult);
  const browser = await puppeteer.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true,
    args: ["--no-sandbox", "--disable-gpu"] });
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
  } finally {
    await browser.close();
    server.close();
  }
});
