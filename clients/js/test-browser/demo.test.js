// The demo page (demo/index.html) in headless Chromium: served as `npm run demo` serves it (the
// package at /, the bundle at /bundle/), a prompt typed into it shows the decision the SDK makes
// for the same prompt and precision. With DEMO_SCREENSHOT=path it saves a screenshot there
// (`npm run demo:screenshot` refreshes demo/screenshot.png, which the README shows); a test run
// leaves the checkout as it was.
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { demoFiles, serveStatic } from "../demo/serve.mjs";
import { Router } from "../src/index.js";
import { BUNDLE, vectors } from "../test/fixtures.js";
import { launchChromium } from "./chromium.js";

const PROMPTS = [
  { name: "short chit-chat", precision: "", text: "hey, how's it going?" },
  {
    name: "long math, exact",
    precision: "exact",
    text: "Solve exactly, showing every step: a tank holds 2,400 litres and is filled by two pipes. Pipe A alone " +
      "fills it in 6 hours and pipe B alone in 9 hours, while a drain at the bottom empties a full tank in 12 hours. " +
      "All three are opened at 8:15 am when the tank holds 350 litres. At what exact time is the tank full? Then " +
      "compute the definite integral of x^3 e^(2x) from 0 to 2 in closed form, prove that the sum of the first n odd " +
      "numbers is n^2 by induction, and give the final answers as exact fractions, not decimals.",
  },
];
const NUMBERS = ["p_edge", "p_cloud", "score", "novelty"];

/** What the page shows for the decision on screen: each field's text and data-value, where the
 * gauge's marker sits (edge, fallback or cloud band), and which prompt and precision it is for. */
function rendered(page) {
  return page.evaluate(() => {
    const field = (id) => ({ text: document.getElementById(id).textContent, value: document.getElementById(id).dataset.value });
    const right = (id) => document.getElementById(id).getBoundingClientRect().right;
    const marker = document.getElementById("gauge-marker").getBoundingClientRect();
    const x = (marker.left + marker.right) / 2;
    const out = document.querySelector("dl").dataset;
    return {
      prompt: out.prompt, precision: out.precision,
      ...Object.fromEntries(["zone", "p_edge", "p_cloud", "score", "lo", "hi", "unfamiliar", "novelty", "reason", "n_tokens"]
        .map((id) => [id, field(id)])),
      band: x < right("gauge-edge") ? "edge" : x < right("gauge-fallback") ? "fallback" : "cloud",
    };
  });
}

test("the demo page shows the SDK's decision for what is typed", { timeout: 5 * 60_000 }, async () => {
  vectors();  // fails early, saying how to make the bundle, when there is none
  const browser = await launchChromium();  // first: without a Chromium, nothing is left open
  let sdk, server;
  try {
    sdk = await Router.load(BUNDLE, { strict: true });
    server = await serveStatic(demoFiles(BUNDLE));
    const page = await browser.newPage();
    await page.setViewport({ width: 720, height: 540, deviceScaleFactor: 1 });
    const errors = [];
    page.on("pageerror", (error) => errors.push(String(error)));
    page.on("console", (message) => { if (message.type() === "error") errors.push(message.text()); });
    page.on("response", (response) => { if (response.status() >= 400) errors.push(`${response.status()} ${response.url()}`); });
    await page.goto(`http://127.0.0.1:${server.address().port}/demo/`);
    await page.waitForFunction(() => document.getElementById("status").dataset.state, { timeout: 120_000 });
    const status = await page.$eval("#status", (element) => [element.dataset.state, element.textContent]);
    assert.deepEqual(status, ["ready", `bundle ${sdk.modelVersion} from http://127.0.0.1:${server.address().port}/bundle/, ` +
      "in this page (onnxruntime-web, WebAssembly)"]);
    for (const { name, precision, text } of PROMPTS) {
      await page.select("#precision", precision);
      await page.$eval("#prompt", (element) => { element.value = ""; });
      await page.type("#prompt", text);
      await page.waitForFunction((want, tag) => {
        const out = document.querySelector("dl").dataset;
        return out.prompt === want && out.precision === tag;
      }, { timeout: 60_000 }, text, precision);
      const shown = await rendered(page);
      const decision = await sdk.route(text, { precision: precision || null });
      const band = sdk.manifest.thresholds[precision || "default"];
      const message = `${name}: shown ${JSON.stringify(shown)}, SDK ${JSON.stringify(decision)}`;
      assert.equal(shown.zone.text, decision.zone, message);
      assert.equal(shown.reason.text, decision.reason, message);
      assert.equal(shown.unfamiliar.value, String(decision.unfamiliar), message);
      assert.equal(shown.unfamiliar.text, decision.unfamiliar ? "yes" : "no", message);
      assert.equal(Number(shown.n_tokens.value), decision.n_tokens, message);
      for (const key of NUMBERS) {  // the web build's kernels round a little differently (README: 6e-8)
        assert.ok(Math.abs(Number(shown[key].value) - decision[key]) <= 1e-5, `${key}: ${message}`);
        if (key !== "novelty") assert.equal(shown[key].text, decision[key].toFixed(3), `${key}: ${message}`);
      }
      assert.equal(Number(shown.lo.value), band.lo, message);
      assert.equal(Number(shown.hi.value), band.hi, message);
      assert.equal(shown.band, decision.score < band.lo ? "edge" : decision.score > band.hi ? "cloud" : "fallback", message);
    }
    if (process.env.DEMO_SCREENSHOT) await page.screenshot({ path: path.resolve(process.env.DEMO_SCREENSHOT) });
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
    server?.close();
    await sdk?.close();
  }
});
