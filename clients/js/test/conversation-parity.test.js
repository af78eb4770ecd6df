// Conversation turns against the Python SDK's (scripts/conversation_vectors.py): on the two-endpoint
// and the four-endpoint bundle (as trained, with prompt caches and a prefill rate in its manifest,
// under each choice rule, with other unfamiliar policies), requests in a conversation in each given
// state (none yet, each endpoint with histories of several lengths, several caches, expired caches, an
// endpoint the bundle lacks), under each Stickiness (weight 0, 1, 2.5, Infinity; several prices of a
// second), with and without a policy forbidding the last endpoint, and when the bundle cannot score:
// the same decision (cascade, reason word for word, turn, switched, score) at the vectors' fixed time;
// route() through a store gives it too; switchCosts bit for bit; the state's JSON text as Python's. Bundles
// carrying turn_evidence.json (the previous turn as evidence) decide every outcome's turns as Python's;
// TurnEvidence itself (adjusted(), the files it refuses) and bundles whose file is refused, as Python's.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { BundleError, Conversations, ConversationState, Held, NoFeasibleEndpoint, PolicySet, Request, Router, Stickiness, TurnEvidence, TurnEvidenceError,
  switchCosts } from "../src/index.js";
import { BUNDLE, ENDPOINT_BUNDLE, conversationVectors } from "./fixtures.js";
import { readBundle } from "../src/index.js";
import { replayConversations, replayEvidenceLoads } from "./shared/conversation-parity.js";

const folders = [];
after(() => { for (const folder of folders) fs.rmSync(folder, { recursive: true, force: true }); });

/** A folder of the bundle with a variant's manifest (unsigned), or the bundle itself. */
function folderOf(kind, variant) {
  const bundle = kind === "two" ? BUNDLE : ENDPOINT_BUNDLE;
  if (variant.manifest_text === null) return bundle;
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), `router-js-conversation-${variant.name}-`));
  folders.push(folder);
  for (const name of fs.readdirSync(bundle)) if (name !== "manifest.sig") fs.copyFileSync(path.join(bundle, name), path.join(folder, name));
  fs.writeFileSync(path.join(folder, "manifest.json"), variant.manifest_text);
  if (variant.evidence_text !== null && variant.evidence_text !== undefined) fs.writeFileSync(path.join(folder, "turn_evidence.json"), variant.evidence_text);
  return folder;
}

test("conversation turns decide as in Python on both bundles, every state, knob and policy", { timeout: 10 * 60_000 }, async () => {
  const vectors = conversationVectors();
  for (const [kind, bundle] of [["two", BUNDLE], ["n", ENDPOINT_BUNDLE]]) {
    const { manifest } = await readBundle(bundle);
    assert.equal(vectors.bundles[kind].manifest_sha256, manifest.manifestSha256, `vectors written for another ${kind} bundle: rerun make test-js`);
  }
  const routers = [];
  const load = async (kind, _, variant) => {
    const router = await Router.load(folderOf(kind, variant), { strict: true, unfamiliarPolicy: variant.unfamiliar_policy });
    routers.push(router);
    return router;
  };
  try {
    const result = await replayConversations(vectors, load,
      { Request, ConversationState, Held, Conversations, Stickiness, PolicySet, NoFeasibleEndpoint, switchCosts, TurnEvidence, TurnEvidenceError },
      { routeEvery: 5 });
    const ev = result.evidence;
    console.log(`conversation parity: ${result.decisions} decisions equal (two endpoints ${result.byBundle.two}, N endpoints ${result.byBundle.n}; ` +
      `${result.moves} move, ${result.stays} stay, ${result.firstTurns} first turns, ${result.shifted} scores moved for the switch, ` +
      `${result.priced} kept by the switch's price, ${result.withPolicy} with a policy forbidding the last endpoint, ${result.degraded} degraded; ` +
      `${result.withEvidence} on bundles with turn evidence, ${result.weighed} with the last turn weighed in; max |expected - python| ` +
      `${result.worstExpected.toExponential(1)}), ${result.errors} NoFeasibleEndpoint equal; ${result.routed} through route() and a store; ` +
      `${result.switchCosts} switchCosts rows bit for bit; ${result.json} JSON texts; turn evidence: ${ev.adjusted} adjusted probabilities ` +
      `(${ev.bitEqual} bit for bit, max |difference| ${ev.worst.toExponential(1)}), ${ev.refused} files refused and ${ev.taken} taken as ` +
      `Python's: ${result.mismatches.length ? "MISMATCHES" : "equal"}`);
    assert.deepEqual(result.mismatches, []);
    const total = Object.values(vectors.bundles).reduce((n, b) => n + b.decisions.length, 0);
    assert.equal(result.decisions + result.errors, total);
    assert.ok(result.moves > 1000 && result.stays > 1000 && result.shifted > 100 && result.priced > 100 && result.withPolicy > 100
      && result.degraded > 100 && result.routed > 1000 && result.weighed > 10_000 && ev.adjusted > 5000 && ev.refused > 20,
    `the vectors exercise every path: ${JSON.stringify(result)}`);
  } finally {
    for (const router of routers) await router.close();
  }
});

test("a bundle whose turn_evidence.json Python refuses is refused alike: BundleError when strict, else the rule table", async () => {
  const { evidence } = conversationVectors();
  const mismatches = [];
  const made = new Map();
  const load = async (index, row, strict) => {
    if (!made.has(index)) made.set(index, folderOf("two", { name: `refused-${index}`, manifest_text: row.manifest_text, evidence_text: row.evidence_text }));
    const folder = made.get(index);
    try {
      return [await Router.load(folder, { strict, logger: { warn() {} } }), null, folder];
    } catch (error) {
      return [null, error, folder];
    }
  };
  const count = await replayEvidenceLoads(evidence, load, BundleError, (m) => mismatches.push(m));
  assert.deepEqual(mismatches, []);
  assert.equal(count, evidence.loads.length);
  assert.ok(count >= 3);
});
