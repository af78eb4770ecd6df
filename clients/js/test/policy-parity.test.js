// The JS SDK's policy layer against the Python SDK's (scripts/policy_vectors.py): the same decisions,
// rule names, forbidden endpoints and reasons on both bundles for every policy, prompt, metadata, needs
// and capabilities of the vectors, budgets with spends recorded in order; the same NoFeasibleEndpoint;
// the same refusals of bad policy files and expressions; the same matches; the same detector findings;
// and the Unicode tables the detectors read equal to the Python SDK's.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { FallbackForbidden, LanguageDetectorMissing, Needs, NoFeasibleEndpoint, PolicyFileError, PolicySet, Router, triedText } from "../src/index.js";
import { DETECTORS, detect } from "../src/policy/detectors.js";
import { CASELESS, FOLD, SPACED, UNIDATA_VERSION, WORD, WORD_I } from "../src/policy/unicode-data.js";
import { BUNDLE, ENDPOINT_BUNDLE, policyVectors } from "./fixtures.js";
import { replayScenarios } from "./shared/policy-parity.js";

const sha = (text) => createHash("sha256").update(text).digest("hex");
const ranges = (text) => text.split(",").map((r) => r.split("-").map((n) => parseInt(n, 36).toString(16)).join("-")).join("\n");

function foldText() {
  const rows = [];
  for (const item of FOLD.split(",")) {
    const run = /^([0-9a-z]+)\+([0-9a-z]+)>([0-9a-z]+)$/.exec(item);
    if (run) {
      const [start, count, target] = run.slice(1).map((n) => parseInt(n, 36));
      for (let k = 0; k < count; k++) rows.push([start + k, (target + k).toString(16)]);
    } else {
      const [cp, out] = item.split("=");
      rows.push([parseInt(cp, 36), out === "" ? "" : out.split(" ").map((c) => parseInt(c, 36).toString(16)).join(" ")]);
    }
  }
  return rows.sort((a, b) => a[0] - b[0]).map(([cp, out]) => `${cp.toString(16)}:${out}`).join("\n");
}

describe("the Unicode tables and the detectors", () => {
  test("unicode-data.js holds the Python SDK's tables (else: regenerate it with scripts/policy_unicode.py)", () => {
    const { unicode } = policyVectors();
    const caseless = Object.keys(CASELESS).sort((a, b) => a.codePointAt(0) - b.codePointAt(0))
      .map((k) => `${k.codePointAt(0).toString(16)}:${[...CASELESS[k]].map((c) => c.codePointAt(0).toString(16)).join(" ")}`).join("\n");
    const said = `rerun: .venv/bin/python clients/js/scripts/policy_unicode.py > clients/js/src/policy/unicode-data.js`;
    assert.equal(UNIDATA_VERSION, unicode.unidata_version, said);
    assert.equal(sha(foldText()), unicode.fold_sha256, `fold table: ${said}`);
    assert.equal(sha(ranges(WORD)), unicode.word_sha256, `\\w ranges: ${said}`);
    assert.equal(sha(ranges(WORD_I)), unicode.word_i_sha256, `WORD ranges: ${said}`);
    assert.equal(sha(ranges(SPACED)), unicode.spaced_sha256, `spaced-word ranges: ${said}`);
    assert.equal(sha(caseless), unicode.caseless_sha256, `caseless letters: ${said}`);
  });

  test("detect() finds what Python's finds, with the same spans; each detector's foundIn as Python's found_in", () => {
    const cases = policyVectors().detectors;
    let findings = 0;
    const wrong = [];
    for (const c of cases) {
      const js = detect(c.text).map((f) => [f.detector, f.start, f.end]);
      const found = Object.values(DETECTORS).filter((d) => d.foundIn(c.text)).map((d) => d.name);
      if (JSON.stringify(js) !== JSON.stringify(c.findings) || JSON.stringify(found) !== JSON.stringify(c.found_in)) {
        wrong.push({ text: c.text.slice(0, 120), js, python: c.findings, found, pythonFound: c.found_in });
      }
      findings += c.findings.length;
    }
    assert.deepEqual(wrong.slice(0, 5), []);
    assert.ok(cases.length >= 1500 && findings >= 1000, `${cases.length} texts, ${findings} findings`);
    console.log(`detectors: ${cases.length} texts, ${findings} findings equal, spans included`);
  });
});

describe("policy files and expressions are checked as in Python", () => {
  test("every file Python refuses is refused with Python's message; JSON errors with its start", async () => {
    const cases = policyVectors().load_errors;
    for (const c of cases) {
      const source = c.source ?? "bad.json";
      const bytes = c.latin1 ? Uint8Array.from(c.text, (ch) => ch.charCodeAt(0)) : c.text;
      const loading = PolicySet.parse(bytes, { source });
      if (c.error === null) { await loading; continue; }
      await assert.rejects(loading, (error) => {
        assert.ok(error instanceof PolicyFileError, `${c.text.slice(0, 80)}: ${error}`);
        if (c.error === "yaml") assert.match(error.message, /YAML policy files are read by the Python SDK only/);
        else if (c.json_error) {
          const start = c.error.replace(/ is not valid JSON: .*/, " is not valid JSON: ");
          assert.ok(error.message.startsWith(start), `${error.message}\n  Python: ${c.error}`);
        } else if (/RE2 runs: /.test(c.error)) {  // RE2's own words through re2js: the same up to them
          assert.ok(error.message.startsWith(c.error.replace(/RE2 runs: .*/, "RE2 runs: ")), `${error.message}\n  Python: ${c.error}`);
        } else assert.equal(error.message, c.error);
        return true;
      });
    }
    assert.ok(cases.filter((c) => c.error !== null).length >= 45);
  });

  test("matches: each expression holds on the same texts as RE2; the same expressions refused", async () => {
    const { patterns, texts, found, heads, refused } = policyVectors().matches;
    const policy = (matches) => PolicySet.fromObject({ rules: [{ name: "m", when: { matches }, then: "forbid", endpoint: "cloud" }] },
      { source: "matches.json" });
    const holds = (set, text) => set.evaluate(text, 0, null).forbiddenBy.size > 0;
    const wrong = [];
    for (const [k, pattern] of patterns.entries()) {
      const set = await policy(pattern);
      texts.forEach((text, t) => { if (holds(set, text) !== found[k][t]) wrong.push({ pattern, text, python: found[k][t] }); });
    }
    for (const { head_chars: head, found: expected } of heads) {
      const set = await policy({ pattern: "\\p{Han}|é", head_chars: head });
      texts.forEach((text, t) => { if (holds(set, text) !== expected[t]) wrong.push({ head, text, python: expected[t] }); });
    }
    assert.deepEqual(wrong, []);
    let same = 0;
    for (const { pattern, error } of refused) {
      if (error === null) { await policy(pattern); continue; }
      await assert.rejects(policy(pattern), (e) => {
        const prefix = error.replace(/: [^:]*RE2 runs: .*/, "");
        assert.ok(e instanceof PolicyFileError && e.message.startsWith(prefix), `${JSON.stringify(pattern)}: ${e.message}\n  Python: ${error}`);
        if (e.message === error) same++;
        return true;
      });
    }
    console.log(`matches: ${patterns.length} expressions x ${texts.length} texts and head_chars equal; ` +
      `${refused.filter((r) => r.error).length} refused (${same} with Python's message word for word)`);
  });
});

describe("decisions under a policy are Python's", () => {
  const routers = {};
  before(async () => {
    routers.two = await Router.load(BUNDLE, { strict: true });
    routers.n = await Router.load(ENDPOINT_BUNDLE, { strict: true });
  });
  after(async () => { await routers.two.close(); await routers.n.close(); });

  test("the vectors are of these bundles", async () => {
    const { bundles } = policyVectors();
    assert.equal(routers.two.manifest.manifestSha256, bundles.two, "policy vectors written for another bundle: rerun make test-js");
    assert.equal(routers.n.manifest.manifestSha256, bundles.n, "policy vectors written for another bundle: rerun make test-js");
  });

  test("every scenario: route() gives Python's decision (rule, forbidden, reason, zone, endpoint, cascade) or NoFeasibleEndpoint", async () => {
    const vectors = policyVectors();
    const result = await replayScenarios(vectors, routers, { PolicySet, Needs, NoFeasibleEndpoint });
    assert.deepEqual(result.mismatches, []);
    const total = vectors.scenarios.reduce((n, s) => n + s.steps.filter((x) => x.route).length, 0);
    assert.equal(result.decisions + result.errors, total);
    assert.ok(result.rules.size >= 40 && result.errors >= 100 && result.spends >= 5, `${result.rules.size} rules, ${result.errors} errors`);
    console.log(`policies: ${result.decisions} decisions and ${result.errors} NoFeasibleEndpoint equal over ${vectors.scenarios.length} ` +
      `scenarios (${vectors.policies.length} policies, ${result.spends} spends); ${result.rules.size} rule names decided`);
  });
});

describe("execute() never calls a forbidden endpoint", () => {
  let router;
  before(async () => {
    router = await Router.load(BUNDLE, { strict: true });
    router.policy = await PolicySet.fromObject({ rules: [
      { name: "pii-local", when: { detected: ["email"] }, then: "force", endpoint: "edge" },
      { name: "no-edge", when: { metadata: { feature: "audit" } }, then: "forbid", endpoint: "edge" },
      { name: "private", when: { metadata: { privacy: "local" } }, then: "forbid", endpoint: "cloud" },
    ] }, { source: "execute.json" });
  });
  after(async () => { await router.close(); });
  const calls = () => {
    const made = [];
    return { made, edge: async () => { made.push("edge"); throw new Error("edge down"); },
      cloud: async () => { made.push("cloud"); return "from the cloud"; } };
  };

  test("the edge fails and the rule forbids the cloud: FallbackForbidden, the cloud never called", async () => {
    for (const [prompt, options] of [["mail ana.vo@lin-mar.fr please", {}], ["What is 2+2?", { metadata: { privacy: "local" } }]]) {
      const { made, edge, cloud } = calls();
      await assert.rejects(router.execute(prompt, edge, cloud, options), (error) => {
        assert.ok(error instanceof FallbackForbidden, String(error));
        assert.equal(error.endpoint, "cloud");
        assert.equal(error.rule, error.decision.rule);
        assert.match(error.message, /^policy '(pii-local|private)' forbids cloud, and no allowed endpoint served: edge=error:Error$/);
        assert.equal(triedText(error.tried), "edge=error:Error");
        assert.deepEqual(error.steps.map((s) => [s.name, s.status]), [["edge", "error"]]);
        return true;
      });
      assert.deepEqual(made, ["edge"]);
    }
  });

  test("a forbidden edge is never called; the same requests without the rule's trigger reach the cloud", async () => {
    let { made, edge, cloud } = calls();
    const served = await router.execute("mail ana.vo@lin-mar.fr please", edge, cloud, { metadata: { feature: "audit" } })
      .catch((e) => e);
    assert.ok(served instanceof NoFeasibleEndpoint, "force edge + forbid edge: nothing may serve");
    assert.deepEqual(made, []);
    ({ made, edge, cloud } = calls());
    const result = await router.execute("What is 2+2?", edge, cloud, { metadata: { feature: "audit" } });
    assert.equal(result.served_by, "cloud");
    assert.deepEqual(made, ["cloud"]);
    assert.deepEqual(result.decision.forbidden, ["edge"]);
    ({ made, edge, cloud } = calls());
    const plain = await router.execute("What is 2+2?", edge, cloud);
    assert.equal(plain.served_by, "cloud");
    assert.deepEqual(made, plain.decision.zone === "cloud" ? ["cloud"] : ["edge", "cloud"]);
  });

  test("a YAML policy or one for other endpoints is refused at load; a bundle declaring languages needs a detector", async () => {
    await assert.rejects(Router.load(BUNDLE, { policy: "policy.yaml" }), PolicyFileError);
    const other = await PolicySet.fromObject({ rules: [] }, { endpoints: ["a", "b"] });
    await assert.rejects(Router.load(BUNDLE, { strict: true, policy: other }), /the policy is for endpoints a, b/);
    const d = await router.route("Olá, tudo bem?", { needs: new Needs({ language: "pt-BR" }),
      capabilities: { edge: { languages: ["en"] }, cloud: { languages: ["pt"] } } });
    assert.deepEqual([d.rule, d.forbidden, d.cascade], ["needs:language=pt", ["edge"], ["cloud"]]);
    await assert.rejects(router.route("Olá", { capabilities: { edge: { languages: ["en"] }, cloud: null } }), LanguageDetectorMissing);
  });
});
