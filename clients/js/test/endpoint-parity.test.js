// The JS SDK against the Python SDK on an N-endpoint bundle (scripts/endpoint_vectors.py): every
// decision's zone, target, endpoint, cascade, reason and counts equal, every expected probability
// within 1e-5, under each choice rule (the bundle's own and its manifest edited to the others);
// the same NoFeasibleEndpoint where Python raises it; and the same decisions by price when the
// graph fails.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { parsePythonJson } from "../src/canonical-json.js";
import { BundleError, NoFeasibleEndpoint, Router, manifestDigest, readBundle } from "../src/index.js";
import { ENDPOINT_BUNDLE, bundleCopy, endpointVectors, quietLogger } from "./fixtures.js";

const TOLERANCE = 1e-5;
const EXACT = ["target", "zone", "reason", "degraded", "model_version", "precision", "n_tokens", "truncated", "p_edge", "p_cloud",
  "novelty", "unfamiliar", "rule", "forbidden", "endpoint", "cascade"];

/** Equal fields, and expected probabilities (and the score, the first endpoint's) within TOLERANCE. */
function compare(js, py, where) {
  assert.deepEqual(Object.keys(js), Object.keys(py), `${where}: fields`);
  for (const field of EXACT) assert.deepEqual(js[field], py[field], `${where}: ${field}`);
  let worst = Math.abs(js.score - py.score);
  if (py.expected === null) assert.equal(js.expected, null, `${where}: expected`);
  else {
    assert.deepEqual(Object.keys(js.expected), Object.keys(py.expected), `${where}: expected's endpoints`);
    for (const [name, p] of Object.entries(py.expected)) worst = Math.max(worst, Math.abs(js.expected[name] - p));
  }
  assert.ok(worst <= TOLERANCE, `${where}: |expected - python| ${worst}`);
  return worst;
}

/** A folder holding the bundle with a variant's manifest (unsigned), or the bundle itself. */
function variantFolder(variant, prefix = variant.rule) {
  if (variant.manifest_text === null) return ENDPOINT_BUNDLE;
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), `router-js-${prefix}-`));
  for (const name of fs.readdirSync(ENDPOINT_BUNDLE)) {
    if (name !== "manifest.sig") fs.copyFileSync(path.join(ENDPOINT_BUNDLE, name), path.join(folder, name));
  }
  fs.writeFileSync(path.join(folder, "manifest.json"), variant.manifest_text);
  return folder;
}

describe("an N-endpoint bundle decides as in Python", () => {
  const vectors = endpointVectors();
  const routers = [];
  before(async () => {
    for (const variant of vectors.variants) routers.push(await Router.load(variantFolder(variant), { strict: true }));
  });
  after(async () => { for (const router of routers) await router.close(); });

  test("the vectors are of this bundle, and cover every rule and prompts no endpoint may serve", async () => {
    const { manifest } = await readBundle(ENDPOINT_BUNDLE);
    assert.equal(vectors.bundle.manifest_sha256, manifest.manifestSha256, "vectors written for another bundle: rerun make test-js");
    assert.deepEqual(vectors.variants.map((v) => v.rule).sort(), ["best_under_price", "cascade", "cheapest_within"]);
    assert.deepEqual(routers[0].endpointNames, vectors.endpoints);
    assert.ok(vectors.endpoints.length >= 3, "three or more endpoints");
    assert.ok(vectors.decisions.some((d) => d.error), "some prompt fits no endpoint");
  });

  test("route() gives Python's decision, or its NoFeasibleEndpoint, on every vector under every rule", async () => {
    let worst = 0, errors = 0;
    const cascades = new Set(), firsts = new Set();
    for (const row of vectors.decisions) {
      const { id, prompt } = vectors.cases[row.case];
      const where = `${vectors.variants[row.variant].rule}: ${id} (${row.precision ?? "undeclared"})`;
      const routed = routers[row.variant].route(prompt, { precision: row.precision });
      if (row.error) {
        await assert.rejects(routed, (error) => error instanceof NoFeasibleEndpoint && error.message === row.message
          ? true : assert.fail(`${where}: ${error.message}\n  Python: ${row.message}`));
        errors++;
        continue;
      }
      const js = await routed;
      worst = Math.max(worst, compare(js, row.decision, where));
      cascades.add(js.cascade.length);
      firsts.add(js.endpoint);
    }
    assert.ok(cascades.size >= 2 && firsts.size >= 3, "the vectors exercise cascades of several lengths and several first endpoints");
    console.log(`N endpoints: ${vectors.decisions.length - errors} decisions equal over ${vectors.variants.length} rules ` +
      `(${vectors.cases.length} prompts x 4 precisions), ${errors} NoFeasibleEndpoint equal; first endpoints ${[...firsts].join(", ")}; ` +
      `max |expected - python| ${worst}`);
  });

  test("routeBatch() gives Python's decisions, in batches of 64", async () => {
    const rows = vectors.decisions.filter((d) => !d.error && d.variant === 0);
    for (let i = 0; i < rows.length; i += 64) {
      const chunk = rows.slice(i, i + 64);
      const decisions = await routers[0].routeBatch(chunk.map((r) => vectors.cases[r.case].prompt), chunk.map((r) => r.precision));
      chunk.forEach((row, k) => compare(decisions[k], row.decision, `batch ${i + k}`));
    }
  });

  test("when the graph fails, the decisions by price are Python's", async () => {
    const logger = quietLogger();
    const router = await Router.load(ENDPOINT_BUNDLE, { strict: true, logger });
    const { prompts, decisions } = vectors.degraded;
    router.routing.scorer.expected = async () => { throw new Error("vectors"); };
    const js = await router.routeBatch(prompts);
    const note = "degraded: scoring failed: Error: vectors";
    js.forEach((d, i) => {
      const py = decisions[i];
      compare({ ...d, reason: d.reason.replace(note, vectors.degraded.note) }, py, `degraded ${i}`);
    });
    assert.equal(logger.messages.length, 1);
    await router.close();
  });
});

describe("an N-endpoint manifest is checked as in Python", () => {
  test("every edit Python's strict load refuses is refused, naming the same key; the one it accepts loads", async () => {
    const cases = endpointVectors().manifests;
    assert.ok(cases.filter((c) => c.error).length >= 12 && cases.some((c) => !c.error));
    for (const c of cases) {
      const load = Router.load(variantFolder(c, c.edit), { strict: true });
      if (c.error === null) {
        await (await load).close();
        continue;
      }
      const key = c.error.match(/: (manifest [^:]+:)/)?.[1];
      await assert.rejects(load, (error) => error instanceof BundleError && (key ? error.message.includes(key) : error.message.endsWith(c.error))
        ? true : assert.fail(`${c.edit}: ${error.message}\n  Python: ${c.error}`));
    }
  });

  test("without strict, a bad N-endpoint manifest degrades to the rule table with the reason", async () => {
    const bad = endpointVectors().manifests.find((c) => c.edit === "unknown_rule");
    const logger = quietLogger();
    const router = await Router.load(variantFolder(bad, bad.edit), { logger });
    assert.ok(router.degraded && router.endpointNames === null);
    assert.match(router.degradedReason, /manifest endpoints\.choice\.rule: must be one of cheapest_within, best_under_price, cascade/);
    const decision = await router.route("hello");
    assert.equal(decision.model_version, "rule-table");
    assert.deepEqual([decision.expected, decision.endpoint, decision.cascade], [null, decision.target, decision.zone === "cloud" ? ["cloud"] : ["edge", "cloud"]]);
  });

  test("a two-endpoint manifest with an endpoints section is refused", async () => {
    const folder = bundleCopy();
    const file = path.join(folder, "manifest.json");
    const section = JSON.stringify({ endpoints: [], output_tokens: 250, choice: { rule: "cascade", start_margin: 0.1 } });
    let text = fs.readFileSync(file, "utf8").replace("{", `{"endpoints": ${section}, `);
    text = text.replace(/"manifest_sha256": "[0-9a-f]{64}"/, `"manifest_sha256": "${manifestDigest(parsePythonJson(text))}"`);
    fs.writeFileSync(file, text);
    fs.rmSync(path.join(folder, "manifest.sig"), { force: true });
    await assert.rejects(Router.load(folder, { strict: true }), /manifest endpoints: belongs to an endpoints bundle \(score.kind 'endpoints'\)/);
  });
});

describe("an unfamiliar prompt on an N-endpoint bundle gets each unfamiliar policy as in Python", () => {
  test("rule_table (by price) and learned (the rule's cascade) give Python's decisions on every unfamiliar vector", async () => {
    const vectors = endpointVectors();
    assert.ok(vectors.unfamiliar, "vectors written before the unfamiliar policies' section: rerun make test-js");
    const { bundle_policy: own, decisions } = vectors.unfamiliar;
    const policies = [...new Set(decisions.map((d) => d.policy))].sort();
    assert.deepEqual(policies, ["edge_with_cloud_fallback", "learned", "rule_table"].filter((p) => p !== own));
    const routers = Object.fromEntries(await Promise.all(policies.map(async (policy) =>
      [policy, await Router.load(ENDPOINT_BUNDLE, { strict: true, unfamiliarPolicy: policy })])));
    try {
      let worst = 0, unfamiliar = 0;
      const cascades = new Set();
      for (const row of decisions) {
        const { id, prompt } = vectors.cases[row.case];
        const where = `unfamiliar ${row.policy}: ${id} (${row.precision ?? "undeclared"})`;
        const routed = routers[row.policy].route(prompt, { precision: row.precision });
        if (row.error) {
          await assert.rejects(routed, (error) => error instanceof NoFeasibleEndpoint && error.message === row.message
            ? true : assert.fail(`${where}: ${error.message}\n  Python: ${row.message}`));
          continue;
        }
        const js = await routed;
        worst = Math.max(worst, compare(js, row.decision, where));
        if (js.unfamiliar) unfamiliar++;
        cascades.add(`${row.policy}: ${js.cascade.join(" -> ")}`);
      }
      assert.ok(unfamiliar >= 100 * policies.length, `${unfamiliar} unfamiliar decisions`);
      console.log(`N endpoints, unfamiliar policies ${policies.join(", ")}: ${decisions.length} decisions equal ` +
        `(${unfamiliar} unfamiliar, ${cascades.size} distinct cascades); max |expected - python| ${worst}`);
    } finally {
      for (const router of Object.values(routers)) await router.close();
    }
  });
});
