// Loading: every problem with a bundle gives a router on the rule table (one warning, the reason
// kept), or BundleError with strict; a pinned key accepts only that key's signature. The bundles
// are real copies of the test bundle, broken on disk; a re-sealed manifest (checksum rewritten)
// leaves only the SDK's own checks between it and the app.
import assert from "node:assert/strict";
import { createHash, generateKeyPairSync, sign } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { BundleError, Router } from "../src/index.js";
import { canonicalJson, parsePythonJson } from "../src/canonical-json.js";
import { manifestDigest } from "../src/index.js";
import { BUNDLE, bundleCopy, quietLogger, vectors } from "./fixtures.js";

// A graph with the fused layout's inputs and outputs whose initializer "w" lives in weights.bin
// (onnx.external_data_helper.set_external_data, made once with the onnx package).
const EXTERNAL_DATA_MODEL = Buffer.from("CAg6vAQKMQoHc2NhbGFycwoGc3RhcnRzCgRlbmRzCgRheGVzEgtzY2FsYXJzX3JvdyIFU2xpY2UKGAoLc2NhbGFyc19yb3cKAXcSAXAiA0FkZAohCgFwEhJlZGdlX3Byb2JhYmlsaXRpZXMiCElkZW50aXR5CiIKAXASE2Nsb3VkX3Byb2JhYmlsaXRpZXMiCElkZW50aXR5CiMKCWlucHV0X2lkcxIFaWRzX2YiBENhc3QqCQoCdG8YC6ABAgopCg5hdHRlbnRpb25fbWFzaxIGbWFza19mIgRDYXN0KgkKAnRvGAugAQIKLAoFaWRzX2YSB25vdmVsdHkiCVJlZHVjZVN1bSoPCghrZWVwZGltcxgAoAECEgFnKiIIAhABQgF3ahcKCGxvY2F0aW9uEgt3ZWlnaHRzLmJpbnABKhYIARAHQgZzdGFydHNKCAAAAAAAAAAAKhQIARAHQgRlbmRzSggCAAAAAAAAACoUCAEQB0IEYXhlc0oIAQAAAAAAAABaHQoJaW5wdXRfaWRzEhAKDggHEgoKAxIBbgoDEgF0WiIKDmF0dGVudGlvbl9tYXNrEhAKDggHEgoKAxIBbgoDEgF0WhoKB3NjYWxhcnMSDwoNCAESCQoDEgFuCgIIE2IlChJlZGdlX3Byb2JhYmlsaXRpZXMSDwoNCAESCQoDEgFuCgIIAmImChNjbG91ZF9wcm9iYWJpbGl0aWVzEg8KDQgBEgkKAxIBbgoCCAJiDwoHbm92ZWx0eRIECgIIC0IECgAQDw==", "base64");

const manifestPath = (folder) => path.join(folder, "manifest.json");
const readManifest = (folder) => parsePythonJson(fs.readFileSync(manifestPath(folder), "utf8"));

/** Write a manifest with a correct manifest_sha256, as someone who can write the folder would. */
function reseal(folder, manifest) {
  manifest.manifest_sha256 = manifestDigest(manifest);
  fs.writeFileSync(manifestPath(folder), canonicalJson(manifest));
}

/** The bundle broken by `breakIt(folder)` loads degraded, saying `expected`; strict throws it. */
async function refused(breakIt, expected, options = {}) {
  const folder = bundleCopy();
  try {
    breakIt(folder);
    const logger = quietLogger();
    const router = await Router.load(folder, { ...options, logger });
    assert.equal(router.degraded, true);
    assert.match(router.degradedReason, expected);
    assert.equal(logger.messages.length, 1, "one warning");
    assert.equal(router.modelVersion, "rule-table");
    const decision = await router.route("What is the interest rate on a loan?", { precision: "exact" });
    assert.equal(decision.degraded, true);
    assert.equal(decision.zone, "edge_with_cloud_fallback");  // finance 0.3 + exact 0.3: inside the 0.3-0.7 band
    assert.ok(decision.reason.startsWith("rule table score 0.6, finance domain, exact precision (degraded: "), decision.reason);
    await assert.rejects(Router.load(folder, { ...options, strict: true }), (error) => error instanceof BundleError && expected.test(error.message));
  } finally {
    fs.rmSync(folder, { recursive: true, force: true });
  }
}

describe("a sound bundle", () => {
  test("loads, not degraded, with the manifest's values", async () => {
    const router = await Router.load(BUNDLE, { strict: true });
    assert.equal(router.degraded, false);
    assert.equal(router.degradedReason, null);
    assert.equal(router.modelVersion, vectors().bundle.model_version);
    assert.equal(router.edgeContextTokens, router.manifest.limits.edgeContextTokens);
    await router.close();
  });
});

describe("a bundle that cannot serve", () => {
  test("no folder", () => refused((folder) => fs.rmSync(folder, { recursive: true }), /no bundle folder/));
  test("no manifest", () => refused((folder) => fs.rmSync(manifestPath(folder)), /manifest.json is listed in the manifest but missing|missing/));
  test("a manifest that is not JSON", () => refused((folder) => fs.writeFileSync(manifestPath(folder), "{not json"), /not valid JSON/));
  test("a manifest with a BOM (Python's json refuses it)", () => refused((folder) => {
    fs.writeFileSync(manifestPath(folder), "\ufeff" + fs.readFileSync(manifestPath(folder), "utf8"));
  }, /not valid JSON/));
  test("a manifest that is not UTF-8", () => refused((folder) => {
    fs.writeFileSync(manifestPath(folder), Buffer.concat([Buffer.from('{"a": "'), Buffer.from([0xff]), Buffer.from('"}')]));
  }, /not valid JSON/));
  test("an edited manifest", () => refused((folder) => {
    fs.writeFileSync(manifestPath(folder), fs.readFileSync(manifestPath(folder), "utf8").replace('"max_chars": 2048', '"max_chars": 2047'));
  }, /does not match its manifest_sha256/));
  test("another schema version", () => refused((folder) => reseal(folder, { ...readManifest(folder), schema_version: 2 }), /schema_version: is not supported/));
  test("a truncated model", () => refused((folder) => {
    const model = path.join(folder, "model.onnx");
    fs.truncateSync(model, fs.statSync(model).size - 100);
  }, /model.onnx does not match its checksum/));
  test("a missing tokenizer", () => refused((folder) => fs.rmSync(path.join(folder, "tokenizer.json")), /tokenizer.json is listed in the manifest but missing/));
  test("a symlinked file", () => refused((folder) => {
    const tokenizer = path.join(folder, "tokenizer.json");
    fs.renameSync(tokenizer, path.join(folder, "real.json"));
    fs.symlinkSync(path.join(folder, "real.json"), tokenizer);
  }, /tokenizer.json is a symlink/));
  test("a file rewritten with its checksum: onnxruntime refuses it", () => refused((folder) => {
    fs.writeFileSync(path.join(folder, "model.onnx"), "not a graph");
    const manifest = readManifest(folder);
    manifest.files["model.onnx"] = createHash("sha256").update("not a graph").digest("hex");
    reseal(folder, manifest);
  }, /cannot load bundle/));
  test("a path as a file name", () => refused((folder) => {
    const manifest = readManifest(folder);
    manifest.files["../model.onnx"] = manifest.files["model.onnx"];
    reseal(folder, manifest);
  }, /files: names must be plain file names/));
  test("thresholds out of order", () => refused((folder) => {
    const manifest = readManifest(folder);
    manifest.thresholds.default.lo = 0.9;
    manifest.thresholds.default.hi = 0.1;
    reseal(folder, manifest);
  }, /thresholds.default: needs lo <= hi/));
  test("a max_chars out of bounds", () => refused((folder) => {
    const manifest = readManifest(folder);
    manifest.feature_spec.max_chars = 0;
    reseal(folder, manifest);
  }, /feature_spec.max_chars: must be an integer/));
  test("a float where an integer is required (Python's int check)", () => refused((folder) => {
    const manifest = readManifest(folder);
    manifest.limits.edge_context_tokens = parsePythonJson("1024.0");
    reseal(folder, manifest);
  }, /limits.edge_context_tokens: must be an integer/));
  test("a novelty output the model does not have", () => refused((folder) => {
    const manifest = readManifest(folder);
    manifest.novelty.output = "elsewhere";
    reseal(folder, manifest);
  }, /model output\(s\) \["elsewhere"\]/));
  test("a model that reads external data beside it, unlisted, fails to load", () => refused((folder) => {
    fs.writeFileSync(path.join(folder, "model.onnx"), EXTERNAL_DATA_MODEL);
    fs.writeFileSync(path.join(folder, "weights.bin"), Buffer.alloc(8));  // exists, never read
    const manifest = readManifest(folder);
    manifest.files["model.onnx"] = createHash("sha256").update(EXTERNAL_DATA_MODEL).digest("hex");
    reseal(folder, manifest);
  }, /External data path/));
  test("the transformer tier's staged layout", () => refused((folder) => {
    const manifest = readManifest(folder);
    manifest.feature_spec.fused = false;
    manifest.feature_spec.lexical = "none";
    reseal(folder, manifest);
  }, /fused bundles \(model.onnx\) only/));
});

describe("signatures", () => {
  const signed = () => {
    const folder = bundleCopy();
    fs.writeFileSync(path.join(folder, "manifest.sig"), Buffer.from(vectors().signature.signature_hex, "hex"));
    return folder;
  };

  test("a bundle signed by training.keys loads under its key, given as PEM text, a path or the raw bytes", async () => {
    const folder = signed();
    const { public_key_pem: pem, public_key_hex: raw } = vectors().signature;
    fs.writeFileSync(path.join(folder, "router.pub"), pem);  // unlisted: never read as part of the bundle
    for (const publicKey of [pem, path.join(folder, "router.pub"), Buffer.from(raw, "hex"), Buffer.from(pem)]) {
      const router = await Router.load(folder, { strict: true, publicKey });
      assert.equal(router.degraded, false);
      await router.close();
    }
    fs.rmSync(folder, { recursive: true, force: true });
  });

  test("an unsigned bundle under a pinned key is refused", () =>
    refused(() => {}, /the bundle is unsigned, but a public key is pinned/, { publicKey: vectors().signature.public_key_pem }));

  test("another key's signature is refused", () => {
    const other = generateKeyPairSync("ed25519").publicKey.export({ type: "spki", format: "pem" });
    return refused((folder) => fs.writeFileSync(path.join(folder, "manifest.sig"), Buffer.from(vectors().signature.signature_hex, "hex")),
      /not a signature of this manifest by the pinned key/, { publicKey: other });
  });

  test("a file rewritten with its checksum and the old signature is refused", () => refused((folder) => {
    fs.writeFileSync(path.join(folder, "manifest.sig"), Buffer.from(vectors().signature.signature_hex, "hex"));
    const manifest = readManifest(folder);
    manifest.thresholds.default.hi = 0.99;
    reseal(folder, manifest);
  }, /not a signature of this manifest/, { publicKey: vectors().signature.public_key_pem }));

  test("a signature made here over the canonical JSON verifies (the same bytes as Python signs)", async () => {
    const folder = bundleCopy();
    const { publicKey, privateKey } = generateKeyPairSync("ed25519");
    fs.writeFileSync(path.join(folder, "manifest.sig"), sign(null, Buffer.from(canonicalJson(readManifest(folder))), privateKey));
    const router = await Router.load(folder, { strict: true, publicKey });
    assert.equal(router.degraded, false);
    await router.close();
    fs.rmSync(folder, { recursive: true, force: true });
  });

  test("a key that is not Ed25519 is refused", () => {
    const rsa = generateKeyPairSync("rsa", { modulusLength: 1024 }).publicKey;
    return refused(() => {}, /not an Ed25519 public key/, { publicKey: rsa });
  });
});
