// `make bench-js`: how fast the JS SDK routes, next to the Python SDK in the same session. A
// benchmark, not a test: it prints figures and writes them to a JSON file, and asserts nothing.
//
//   node scripts/bench.mjs --bundle DIR [--out FILE] [--python PATH] [--repeat N] [--rounds R]
//
// The prompts are pipelines/bench.py's (~16 and ~128 tokens: its TEXT cut on a token boundary by
// its prompt_of), made by the Python SDK, which is also timed on them (pipelines.bench.timings_us,
// one thread). Per round, in turn: Python route() (a fresh process), Node route() (one router,
// one thread), Chromium route() (onnxruntime-web, WebAssembly, one thread, in a cross-origin
// isolated page so performance.now() has 5 us steps instead of 100 us); Node's features and model
// alone too. Also: import + load of the bundle in fresh Node processes, load in a fresh Chromium
// page, and the npm package's size.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { PACKAGE, demoFiles, serveStatic } from "../demo/serve.mjs";
import { Router } from "../src/index.js";
import { CHROMIUM, launchChromium } from "../test-browser/chromium.js";

const REPO = path.resolve(PACKAGE, "../..");
const LENGTHS = [16, 128];

// The Python side: pipelines/bench.py's prompts and its timer, route(prompt, precision="exact").
const PYTHON_PROBE = `
import json, sys
from pipelines.bench import prompt_of, timings_us
from serving import Router
router = Router.load(sys.argv[1], strict=True, threads=1)
tokenizer = router.stages.scorer.extractor.tokenizer.full
repeat = int(sys.argv[3])
out = {"prompts": {}, "route": {}}
for n in map(int, sys.argv[2].split(",")):
    prompt = prompt_of(tokenizer, n)
    out["prompts"][f"{n}_tokens"] = prompt
    if repeat:
        call = lambda p=prompt: router.route(p, precision="exact")
        out["route"][f"{n}_tokens"] = timings_us({"route": call}, repeat=repeat)["route"]
print(json.dumps(out))
`;

// A fresh Node process: import the SDK, load the bundle, route once.
const NODE_LOAD_PROBE = `
const start = performance.now();
const { Router } = await import(process.argv[1]);
const imported = performance.now();
const router = await Router.load(process.argv[2], { strict: true });
const loaded = performance.now();
await router.route("warm up", { precision: "exact" });
console.log(JSON.stringify({ import_ms: imported - start, load_ms: loaded - imported, import_plus_load_ms: loaded - start,
  rss_mb_after_load: process.memoryUsage().rss / 2 ** 20 }));
`;

function usage(message) {
  console.error(`bench: ${message}\nusage: node scripts/bench.mjs --bundle DIR [--out FILE] [--python PATH] [--repeat N] [--rounds R]`);
  process.exit(2);
}

function parseArgs(argv) {
  const options = { bundle: null, out: path.join(REPO, "bench/js.json"), python: path.join(REPO, ".venv/bin/python"),
    repeat: 2000, rounds: 3 };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    const key = flag?.replace(/^--/, "");
    if (!(key in options) || value === undefined) usage(`unknown option or missing value: ${flag}`);
    options[key] = ["repeat", "rounds"].includes(key) ? Number(value) : path.resolve(value);
  }
  if (!options.bundle || !fs.existsSync(path.join(options.bundle, "manifest.json"))) usage(`no bundle (manifest.json) at ${options.bundle}`);
  if (!fs.existsSync(options.python)) usage(`no Python at ${options.python} (--python; the repository's .venv: make venv)`);
  for (const key of ["repeat", "rounds"]) if (!Number.isInteger(options[key]) || options[key] < 1) usage(`--${key} must be a positive integer`);
  return options;
}

/** p50 / p90 / p99 / mean of microsecond samples. */
function summary(samples) {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return { p50_us: at(0.5), p90_us: at(0.9), p99_us: at(0.99), mean_us: samples.reduce((a, b) => a + b, 0) / samples.length,
    n: samples.length };
}

function python(options, repeat) {
  const stdout = execFileSync(options.python, ["-c", PYTHON_PROBE, options.bundle, LENGTHS.join(","), String(repeat)],
    { cwd: REPO, encoding: "utf8", env: { ...process.env, HF_HUB_OFFLINE: "1", TRANSFORMERS_OFFLINE: "1" } });
  return JSON.parse(stdout);
}

/** `repeat` awaited calls of `fn` after 50 to warm up, in microseconds. */
async function timed(fn, repeat) {
  for (let i = 0; i < 50; i++) await fn();
  const samples = [];
  for (let i = 0; i < repeat; i++) {
    const start = process.hrtime.bigint();
    await fn();
    samples.push(Number(process.hrtime.bigint() - start) / 1000);
  }
  return summary(samples);
}

/** Node route(), and its big parts alone: the features (cut, tokenize, text statistics, the input
 * arrays: FeatureExtractor.prepare), the tokenizer within them (Tokenizers.js after the compat
 * pass), and the model (onnxruntime-node's session.run on prepared tensors). */
async function nodeRoute(router, prompt, repeat) {
  const { extractor, session, outputs, Tensor } = router.routing.scorer;
  const { ids, mask, width, scalars } = extractor.prepare([prompt], ["exact"]);
  const feeds = { input_ids: new Tensor("int64", ids, [1, width]), attention_mask: new Tensor("int64", mask, [1, width]),
    scalars: new Tensor("float32", scalars, [1, extractor.nScalars]) };
  return {
    ...(await timed(() => router.route(prompt, { precision: "exact" }), repeat)),
    parts_p50_us: {
      features: (await timed(() => extractor.prepare([prompt], ["exact"]), repeat)).p50_us,
      tokenize: (await timed(() => extractor.tokenizer.ids(extractor.head(prompt), extractor.spec.addSpecialTokens), repeat)).p50_us,
      model: (await timed(() => session.run(feeds, outputs), repeat)).p50_us,
    },
  };
}

function nodeLoads(bundle, runs = 5) {
  const loads = Array.from({ length: runs }, () => JSON.parse(execFileSync(process.execPath,
    ["--input-type=module", "-e", NODE_LOAD_PROBE, path.join(PACKAGE, "src/index.js"), bundle], { encoding: "utf8" })));
  const sorted = loads.map((l) => l.import_plus_load_ms).sort((a, b) => a - b);
  return { runs: loads, best_import_plus_load_ms: sorted[0], median_import_plus_load_ms: sorted[Math.floor(runs / 2)] };
}

function packageSize() {
  const [pack] = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: PACKAGE, encoding: "utf8" }));
  return { tarball_bytes: pack.size, unpacked_bytes: pack.unpackedSize, files: pack.entryCount };
}

/** A page with the demo's import map and nothing else, served cross-origin isolated. */
async function chromiumPage(bundle) {
  const importMap = fs.readFileSync(path.join(PACKAGE, "demo/index.html"), "utf8").match(/<script type="importmap">[^]*?<\/script>/)[0];
  const isolated = { "cross-origin-opener-policy": "same-origin", "cross-origin-embedder-policy": "require-corp" };
  const browser = await launchChromium();
  const server = await serveStatic(demoFiles(bundle), {
    headers: isolated,
    handle(request, response, url) {
      if (url.pathname !== "/bench.html") return false;
      response.writeHead(200, { ...isolated, "content-type": "text/html; charset=utf-8" });
      response.end(`<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">${importMap}`);
      return true;
    },
  });
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${server.address().port}/bench.html`);
  const load = await page.evaluate(async () => {
    const started = performance.now();
    const ort = await import("onnxruntime-web");
    ort.env.wasm.wasmPaths = new URL("/node_modules/onnxruntime-web/dist/", location.href).href;
    ort.env.wasm.numThreads = 1;
    const { Router } = await import("@edge-cloud-router/client/web");
    const imported = performance.now();
    globalThis.router = await Router.load(new URL("/bundle/", location.href).href, { strict: true });
    return { import_ms: imported - started, load_ms: performance.now() - imported, crossOriginIsolated };
  });
  const version = await browser.version();
  return { page, load, version, close: async () => { await browser.close(); server.close(); } };
}

async function chromiumRoute(page, prompt, repeat) {
  const samples = await page.evaluate(async (prompt, repeat) => {
    for (let i = 0; i < 50; i++) await globalThis.router.route(prompt, { precision: "exact" });
    const samples = [];
    for (let i = 0; i < repeat; i++) {
      const start = performance.now();
      await globalThis.router.route(prompt, { precision: "exact" });
      samples.push((performance.now() - start) * 1000);
    }
    return samples;
  }, prompt, repeat);
  return summary(samples);
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const { prompts } = python(options, 0);
  const router = await Router.load(options.bundle, { strict: true, threads: 1 });
  const tokens = Object.fromEntries(await Promise.all(Object.entries(prompts).map(async ([name, prompt]) =>
    [name, { n_tokens: (await router.route(prompt)).n_tokens, chars: prompt.length }])));
  const chromium = await chromiumPage(options.bundle);
  const rounds = [];
  try {
    for (let round = 0; round < options.rounds; round++) {
      const figures = { python: python(options, options.repeat).route, node: {}, chromium: {} };
      for (const [name, prompt] of Object.entries(prompts)) figures.node[name] = await nodeRoute(router, prompt, options.repeat);
      for (const [name, prompt] of Object.entries(prompts)) figures.chromium[name] = await chromiumRoute(chromium.page, prompt, options.repeat);
      rounds.push(figures);
      console.log(`round ${round + 1}: route() p50 ` + Object.keys(prompts).map((name) =>
        `${name}: python ${figures.python[name].p50_us.toFixed(0)} us, node ${figures.node[name].p50_us.toFixed(0)} us ` +
        `(p90 ${figures.node[name].p90_us.toFixed(0)}; features ${figures.node[name].parts_p50_us.features.toFixed(0)}, ` +
        `tokenize ${figures.node[name].parts_p50_us.tokenize.toFixed(0)}, ` +
        `model ${figures.node[name].parts_p50_us.model.toFixed(0)} alone), chromium ${figures.chromium[name].p50_us.toFixed(0)} us ` +
        `(p90 ${figures.chromium[name].p90_us.toFixed(0)})`).join("; "));
    }
  } finally {
    await chromium.close();
    await router.close();
  }
  const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
  const p50 = (side, name) => median(rounds.map((r) => r[side][name].p50_us));
  const results = {
    bundle: options.bundle,
    machine: { cpus: os.cpus().length, cpu: os.cpus()[0]?.model, node: process.version, chromium: chromium.version,
      chromium_path: CHROMIUM, loadavg: os.loadavg() },
    prompts: tokens,
    repeat: options.repeat,
    rounds,
    median_p50_us: Object.fromEntries(Object.keys(prompts).map((name) => [name, {
      python: p50("python", name), node: p50("node", name), chromium: p50("chromium", name),
      node_over_python: median(rounds.map((r) => r.node[name].p50_us / r.python[name].p50_us)),
      node_features_alone: median(rounds.map((r) => r.node[name].parts_p50_us.features)),
      node_tokenize_alone: median(rounds.map((r) => r.node[name].parts_p50_us.tokenize)),
      node_model_alone: median(rounds.map((r) => r.node[name].parts_p50_us.model)) }])),
    load: { node_fresh_process: nodeLoads(options.bundle), chromium_fresh_page: chromium.load },
    package: packageSize(),
  };
  fs.mkdirSync(path.dirname(options.out), { recursive: true });
  fs.writeFileSync(options.out, `${JSON.stringify(results, null, 2)}\n`);
  for (const [name, m] of Object.entries(results.median_p50_us)) {
    console.log(`${name} (~${tokens[name].n_tokens} tokens): median route() p50 over ${options.rounds} rounds: python ` +
      `${m.python.toFixed(0)} us, node ${m.node.toFixed(0)} us (${m.node_over_python.toFixed(2)}x python), chromium ${m.chromium.toFixed(0)} us`);
  }
  const load = results.load;
  console.log(`load: node fresh process import + load ${load.node_fresh_process.best_import_plus_load_ms.toFixed(0)} ms best, ` +
    `${load.node_fresh_process.median_import_plus_load_ms.toFixed(0)} ms median; chromium fresh page import ` +
    `${load.chromium_fresh_page.import_ms.toFixed(0)} ms + load ${load.chromium_fresh_page.load_ms.toFixed(0)} ms ` +
    `(crossOriginIsolated ${load.chromium_fresh_page.crossOriginIsolated})`);
  console.log(`package: ${results.package.files} files, ${results.package.tarball_bytes} bytes packed, ${results.package.unpacked_bytes} unpacked`);
  console.log(`written to ${options.out}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
