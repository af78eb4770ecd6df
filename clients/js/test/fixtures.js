// Where the tests find the bundle and the Python SDK's vectors on it: ROUTER_BUNDLE and
// ROUTER_VECTORS, else what `make test-js` writes (artifacts/js/ in the repository). A missing
// file fails the tests with the command that makes it: parity is never skipped.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
export const BUNDLE = process.env.ROUTER_BUNDLE || path.join(REPO, "artifacts/js/bundle");
export const VECTORS = process.env.ROUTER_VECTORS || path.join(REPO, "artifacts/js/vectors.json");

let cached;
/** The vectors document (pipelines/vectors.py), read once per test file. */
export function vectors() {
  if (!fs.existsSync(VECTORS) || !fs.existsSync(path.join(BUNDLE, "manifest.json"))) {
    throw new Error(`no parity vectors at ${VECTORS} or no bundle at ${BUNDLE}: run \`make test-js\` from the ` +
      "repository root (or set ROUTER_BUNDLE and ROUTER_VECTORS; `make vectors BUNDLE=dir OUT=file` writes the vectors)");
  }
  cached ??= JSON.parse(fs.readFileSync(VECTORS, "utf8"));
  return cached;
}

/** A prompt whose undeclared-precision decision, in Python, is in `zone`, familiar and not truncated. */
export function promptIn(zone) {
  const row = vectors().decisions.find((d) => d.router === "bundle" && d.precision === null && d.decision.zone === zone
    && !d.decision.unfamiliar && !d.decision.truncated);
  return vectors().cases[row.case].prompt;
}

/** A logger that keeps what it was told, for tests that check the one warning. */
export function quietLogger() {
  const messages = [];
  return { messages, warn: (message) => messages.push(String(message)) };
}

/** A copy of the bundle folder in a fresh temporary folder, for tests that break it. */
export function bundleCopy() {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "router-js-bundle-"));
  for (const name of fs.readdirSync(BUNDLE)) fs.copyFileSync(path.join(BUNDLE, name), path.join(folder, name));
  return folder;
}

/** The Python interpreter of the repository's venv (ROUTER_PYTHON to use another). */
export const PYTHON = process.env.ROUTER_PYTHON || path.join(REPO, ".venv/bin/python");

/** What a Python script of the repository writes on stdout (its path relative to the repository);
 * a missing interpreter fails with what to do. */
export function pythonOutput(script, args = []) {
  if (!fs.existsSync(PYTHON)) {
    throw new Error(`no Python at ${PYTHON}: run \`make venv\` from the repository root, or set ROUTER_PYTHON`);
  }
  return execFileSync(PYTHON, [path.join(REPO, script), ...args], { cwd: REPO, encoding: "utf8", maxBuffer: 256 << 20,
    env: { ...process.env, HF_HUB_OFFLINE: "1" } });
}

// An N-endpoint bundle (`make endpoints ARGS="--bundle DIR"`) and the Python SDK's decisions on it
// (scripts/endpoint_vectors.py): ROUTER_ENDPOINT_BUNDLE and ROUTER_ENDPOINT_VECTORS, else what
// `make test-js` writes.
export const ENDPOINT_BUNDLE = process.env.ROUTER_ENDPOINT_BUNDLE || path.join(REPO, "artifacts/js/endpoint-bundle");
export const ENDPOINT_VECTORS = process.env.ROUTER_ENDPOINT_VECTORS || path.join(REPO, "artifacts/js/endpoint-vectors.json");

let endpointCached;
/** The N-endpoint vectors document, read once per test file; missing files fail with the command. */
export function endpointVectors() {
  if (!fs.existsSync(ENDPOINT_VECTORS) || !fs.existsSync(path.join(ENDPOINT_BUNDLE, "manifest.json"))) {
    throw new Error(`no N-endpoint vectors at ${ENDPOINT_VECTORS} or no bundle at ${ENDPOINT_BUNDLE}: run \`make test-js\` from ` +
      "the repository root (or set ROUTER_ENDPOINT_BUNDLE and ROUTER_ENDPOINT_VECTORS; clients/js/scripts/endpoint_vectors.py " +
      "writes the vectors)");
  }
  endpointCached ??= JSON.parse(fs.readFileSync(ENDPOINT_VECTORS, "utf8"));
  return endpointCached;
}

// The Python SDK's policy layer on both bundles (scripts/policy_vectors.py): ROUTER_POLICY_VECTORS,
// else what `make test-js` writes.
export const POLICY_VECTORS = process.env.ROUTER_POLICY_VECTORS || path.join(REPO, "artifacts/js/policy-vectors.json");

let policyCached;
/** The policy vectors document, read once per test file; a missing file fails with the command. */
export function policyVectors() {
  if (!fs.existsSync(POLICY_VECTORS)) {
    throw new Error(`no policy vectors at ${POLICY_VECTORS}: run \`make test-js\` from the repository root (or set ` +
      "ROUTER_POLICY_VECTORS; clients/js/scripts/policy_vectors.py writes them)");
  }
  policyCached ??= JSON.parse(fs.readFileSync(POLICY_VECTORS, "utf8"));
  return policyCached;
}

// The Python SDK's execute outcomes on scripted endpoint behaviours (scripts/execute_vectors.py):
// ROUTER_EXECUTE_VECTORS, else what `make test-js` writes.
export const EXECUTE_VECTORS = process.env.ROUTER_EXECUTE_VECTORS || path.join(REPO, "artifacts/js/execute-vectors.json");

let executeCached;
/** The execute vectors document, read once per test file; a missing file fails with the command. */
export function executeVectors() {
  if (!fs.existsSync(EXECUTE_VECTORS)) {
    throw new Error(`no execute vectors at ${EXECUTE_VECTORS}: run \`make test-js\` from the repository root (or set ` +
      "ROUTER_EXECUTE_VECTORS; clients/js/scripts/execute_vectors.py --out FILE writes them)");
  }
  executeCached ??= JSON.parse(fs.readFileSync(EXECUTE_VECTORS, "utf8"));
  return executeCached;
}

// The Python SDK's conversation turns on both bundles (scripts/conversation_vectors.py):
// ROUTER_CONVERSATION_VECTORS, else what `make test-js` writes.
export const CONVERSATION_VECTORS = process.env.ROUTER_CONVERSATION_VECTORS || path.join(REPO, "artifacts/js/conversation-vectors.json");

let conversationCached;
/** The conversation vectors document, read once per test file; a missing file fails with the command. */
export function conversationVectors() {
  if (!fs.existsSync(CONVERSATION_VECTORS)) {
    throw new Error(`no conversation vectors at ${CONVERSATION_VECTORS}: run \`make test-js\` from the repository root (or set ` +
      "ROUTER_CONVERSATION_VECTORS; clients/js/scripts/conversation_vectors.py writes them)");
  }
  conversationCached ??= JSON.parse(fs.readFileSync(CONVERSATION_VECTORS, "utf8"));
  return conversationCached;
}
