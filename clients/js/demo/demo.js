// The demo page: loads a bundle over HTTP with the package's ./web entry (onnxruntime-web) and
// routes the prompt as it is typed. The bundle is ?bundle=URL, else /bundle/ (what serve.mjs
// serves). Every shown number also sits unrounded in its element's data-value, and the output
// list carries data-prompt and data-precision of the decision shown, for the browser test.
import * as ort from "onnxruntime-web";
import { Router } from "@edge-cloud-router/client/web";

ort.env.wasm.wasmPaths = new URL("/node_modules/onnxruntime-web/dist/", location.href).href;
ort.env.wasm.numThreads = 1;

const $ = (id) => document.getElementById(id);
const input = $("prompt"), precisionSelect = $("precision"), status = $("status"), output = document.querySelector("dl");

/** Show `value` in element `id`: `text` as its text, the value itself in data-value. */
function show(id, value, text = String(value)) {
  $(id).textContent = text;
  $(id).dataset.value = value === null ? "null" : String(value);
}

const fixed = (x, digits = 3) => (x === null ? "–" : x.toFixed(digits));

/** The score's range for the gauge: expected gain in [-1, 1]; P(cloud needed) and the rule table's score in [0, 1]. */
function scoreRange(router) {
  return router.manifest?.score.kind === "expected_gain" ? [-1, 1] : [0, 1];
}

function render(router, decision, prompt, precision, ms) {
  const band = router.manifest ? router.manifest.thresholds[precision ?? "default"] ?? router.manifest.thresholds.default : null;
  const [min, max] = scoreRange(router);
  const at = (x) => `${(100 * Math.min(Math.max((x - min) / (max - min), 0), 1)).toFixed(2)}%`;
  show("zone", decision.zone);
  show("p_edge", decision.p_edge, fixed(decision.p_edge));
  show("p_cloud", decision.p_cloud, fixed(decision.p_cloud));
  show("score", decision.score, fixed(decision.score));
  $("score-kind").textContent = router.manifest ? `(${router.manifest.score.kind.replace("_", " ")})` : "(rule table)";
  show("lo", band ? band.lo : null, band ? fixed(band.lo) : "–");
  show("hi", band ? band.hi : null, band ? fixed(band.hi) : "–");
  $("gauge-edge").style.width = band ? at(band.lo) : "0";
  $("gauge-fallback").style.left = band ? at(band.lo) : "0";
  $("gauge-fallback").style.width = band ? `calc(${at(band.hi)} - ${at(band.lo)})` : "0";
  $("gauge-marker").style.left = at(decision.score);
  $("gauge-marker").hidden = false;
  $("scale-min").textContent = String(min);
  $("scale-max").textContent = String(max);
  show("unfamiliar", decision.unfamiliar, decision.unfamiliar ? "yes" : "no");
  show("novelty", decision.novelty, decision.novelty === null ? "" : `(novelty ${fixed(decision.novelty, 2)}; above 1 is unfamiliar)`);
  show("reason", decision.reason);
  show("n_tokens", decision.n_tokens, `~${decision.n_tokens}${decision.truncated ? " (features from the first characters)" : ""}`);
  show("latency", ms, `${ms.toFixed(2)} ms`);
  output.dataset.precision = precision ?? "";
  output.dataset.prompt = prompt;
}

async function main() {
  const bundle = new URL(new URLSearchParams(location.search).get("bundle") || "/bundle/", location.href).href;
  const router = await Router.load(bundle);
  status.textContent = router.degraded
    ? `the bundle did not load (${router.degradedReason}): the rule table decides`
    : `bundle ${router.modelVersion} from ${bundle}, in this page (onnxruntime-web, WebAssembly)`;
  status.dataset.state = router.degraded ? "degraded" : "ready";
  // One route() at a time; typing while it runs routes the newest text when it ends.
  let running = false, again = false;
  async function update() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        const prompt = input.value, precision = precisionSelect.value || null;
        const started = performance.now();
        const decision = await router.route(prompt, { precision });
        render(router, decision, prompt, precision, performance.now() - started);
      } while (again);
    } finally {
      running = false;
    }
  }
  input.addEventListener("input", update);
  precisionSelect.addEventListener("change", update);
  await update();
}

main().catch((error) => {
  status.textContent = `error: ${error.message}`;
  status.dataset.state = "error";
});
