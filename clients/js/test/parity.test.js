// The JS SDK against the Python SDK's decisions on the same bundle (pipelines/vectors.py): the
// logs' test prompts and the generated hard cases, every precision. Every stage is compared on
// its own too (token ids, scalar inputs, every code point's ids, canonical JSON), so a mismatch
// names where it starts.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Router, RuleRouter } from "../src/index.js";
import { canonicalJson, parsePythonJson } from "../src/canonical-json.js";
import { FeatureExtractor } from "../src/features.js";
import { BundleTokenizer } from "../src/tokenizer.js";
import { readBundle } from "../src/index.js";
import { BUNDLE, vectors } from "./fixtures.js";

const SCORE_TOLERANCE = 1e-5;
const NOVELTY_TOLERANCE = 1e-6;
const BATCH = 64;

/** Fields that must be equal, and the numeric ones held to a tolerance. */
function compare(js, py, where) {
  for (const field of ["zone", "target", "reason", "n_tokens", "truncated", "unfamiliar", "degraded", "model_version", "precision"]) {
    assert.equal(js[field], py[field], `${where}: ${field}`);
  }
  for (const [field, tolerance] of [["score", SCORE_TOLERANCE], ["p_edge", SCORE_TOLERANCE], ["p_cloud", SCORE_TOLERANCE],
    ["novelty", NOVELTY_TOLERANCE]]) {
    if (py[field] === null) assert.equal(js[field], null, `${where}: ${field}`);
    else assert.ok(Math.abs(js[field] - py[field]) <= tolerance, `${where}: ${field} ${js[field]} vs Python ${py[field]}`);
  }
  // expected ({edge, cloud} of a two-endpoint bundle), endpoint and cascade (N-endpoint bundles only)
  assert.deepEqual([js.endpoint, js.cascade], [py.endpoint, py.cascade], `${where}: endpoint, cascade`);
  if (py.expected === null) assert.equal(js.expected, null, `${where}: expected`);
  else {
    assert.deepEqual(Object.keys(js.expected), Object.keys(py.expected), `${where}: expected's endpoints`);
    for (const [name, p] of Object.entries(py.expected)) {
      assert.ok(Math.abs(js.expected[name] - p) <= SCORE_TOLERANCE, `${where}: expected.${name} ${js.expected[name]} vs Python ${p}`);
    }
  }
  return { score: Math.abs(js.score - py.score), novelty: py.novelty === null ? 0 : Math.abs(js.novelty - py.novelty) };
}

const rowsOf = (name) => vectors().decisions.filter((d) => d.router === name);
const where = (row) => `${vectors().cases[row.case].id} (${row.precision ?? "undeclared"})`;

describe("the vectors and the bundle", () => {
  test("are of the same bundle, and cover the logs' test prompts and the hard cases", async () => {
    const { manifest } = await readBundle(BUNDLE);
    assert.equal(vectors().bundle.manifest_sha256, manifest.manifestSha256, "vectors written for another bundle: rerun make vectors");
    const kinds = vectors().cases.map((c) => c.kind);
    assert.ok(kinds.filter((k) => k === "log").length >= 1000, "at least a thousand test prompts");
    assert.ok(kinds.filter((k) => k === "hard").length >= 100, "the hard cases");
    assert.ok(vectors().cases.some((c) => c.prompt.length >= 1 << 20), "a 1 MB prompt");
  });
});

describe("features, stage by stage", () => {
  let extractor;
  before(async () => {
    const bundle = await readBundle(BUNDLE);
    extractor = new FeatureExtractor(bundle.manifest.featureSpec, new BundleTokenizer(bundle.contents.get("tokenizer.json").toString("utf8")));
  });

  test("token ids equal Python's on every case", () => {
    for (const c of vectors().cases) {
      const head = extractor.head(c.prompt);
      assert.deepEqual(extractor.tokenRow(c.prompt, head).ids, c.input_ids, c.id);
    }
  });

  test("scalar inputs equal Python's, bit for bit, on every case", () => {
    for (const c of vectors().cases) {
      const { scalars } = extractor.prepare([c.prompt], [null]);
      assert.deepEqual(Array.from(scalars), c.scalars, c.id);
    }
  });

  test("every code point tokenizes as in Python", () => {
    const tokenizer = extractor.tokenizer;
    let checked = 0;
    for (const [first, last, expected] of vectors().codepoints) {
      for (let code = first; code <= last; code++) {
        if (code >= 0xd800 && code <= 0xdfff) continue;
        const ids = tokenizer.ids(`x${String.fromCodePoint(code)}x`, false);
        if (ids.length !== expected.length || ids.some((v, i) => v !== expected[i])) {
          assert.deepEqual(ids, expected, `U+${code.toString(16).toUpperCase()}`);
        }
        checked++;
      }
    }
    assert.equal(checked, 0x110000 - 0x800);
  });
});

describe("the acceptance check", () => {
  test("its input rows equal Python's bit for bit, and its verdicts Python's", async () => {
    const rows = vectors().acceptance;
    assert.ok(rows.length >= 1000, "the logs' edge answers and the generated ones");
    const router = await Router.load(BUNDLE, { strict: true });
    let worst = 0;
    for (const [i, row] of rows.entries()) {
      const options = { logprobMean: row.logprob_mean, logprobMin: row.logprob_min };
      const features = Array.from(await router.acceptor.features(row.prompt, row.answer, options), (v) => (Number.isNaN(v) ? null : v));
      assert.deepEqual(features, row.features, `answer ${i}: ${JSON.stringify(row.answer.slice(0, 60))}`);
      const verdict = await router.acceptor.check(row.prompt, row.answer, options);
      assert.equal(verdict.accepted, row.accepted, `answer ${i}`);
      worst = Math.max(worst, Math.abs(verdict.probability - row.probability));
    }
    assert.ok(worst <= SCORE_TOLERANCE, `max |probability - python| ${worst}`);
    console.log(`acceptance: ${rows.length} answers, rows equal, verdicts equal, max |probability - python| ${worst}`);
    await router.close();
  });
});

describe("canonical JSON and signatures", () => {
  test("the manifest's canonical JSON is Python's, on the manifest and on tricky values", () => {
    for (const { text, canonical } of vectors().canonical_json) assert.equal(canonicalJson(parsePythonJson(text)), canonical);
  });
});

describe("decisions", () => {
  let router, ruled;
  before(async () => {
    router = await Router.load(BUNDLE, { strict: true });
    ruled = await Router.load(BUNDLE, { strict: true, unfamiliarPolicy: "rule_table" });
  });
  after(async () => { await router.close(); await ruled.close(); });

  test("route() gives Python's decision on every vector", async () => {
    let worst = { score: 0, novelty: 0 };
    const rows = rowsOf("bundle");
    for (const row of rows) {
      const js = await router.route(vectors().cases[row.case].prompt, { precision: row.precision });
      const diff = compare(js, row.decision, where(row));
      worst = { score: Math.max(worst.score, diff.score), novelty: Math.max(worst.novelty, diff.novelty) };
    }
    console.log(`route(): ${rows.length} decisions equal; max |score - python| ${worst.score}, max |novelty - python| ${worst.novelty}`);
  });

  test("routeBatch() gives Python's decisions, in batches of 64", async () => {
    const rows = rowsOf("bundle");
    for (let i = 0; i < rows.length; i += BATCH) {
      const chunk = rows.slice(i, i + BATCH);
      const decisions = await router.routeBatch(chunk.map((r) => vectors().cases[r.case].prompt), chunk.map((r) => r.precision));
      chunk.forEach((row, k) => compare(decisions[k], row.decision, where(row)));
    }
  });

  test("the rule_table unfamiliar policy gives Python's decisions", async () => {
    for (const row of rowsOf("unfamiliar_rule_table")) {
      compare(await ruled.route(vectors().cases[row.case].prompt, { precision: row.precision }), row.decision, where(row));
    }
  });

  test("the rule table alone gives Python's decisions exactly", () => {
    const rules = new RuleRouter();
    for (const row of rowsOf("rule_table")) {
      assert.deepEqual(rules.route(vectors().cases[row.case].prompt, { precision: row.precision }), row.decision, where(row));
    }
  });
});

describe("the learned unfamiliar policy", () => {
  test("keeps the model's zone and says so, as Python's decisions do", async () => {
    const rows = rowsOf("unfamiliar_learned");
    assert.ok(rows.some((r) => r.decision.unfamiliar), "vectors written before the learned policy's rows: rerun make test-js");
    const learned = await Router.load(BUNDLE, { strict: true, unfamiliarPolicy: "learned" });
    try {
      for (const row of rows) {
        compare(await learned.route(vectors().cases[row.case].prompt, { precision: row.precision }), row.decision, where(row));
      }
    } finally {
      await learned.close();
    }
    console.log(`unfamiliar learned: ${rows.length} decisions equal (${rows.filter((r) => r.decision.unfamiliar).length} unfamiliar)`);
  });
});
