// What a browser provides to the platform-neutral SDK: a bundle published at a URL (the folder's
// files under one base URL) read with fetch, SHA-256 and Ed25519 from WebCrypto, and
// onnxruntime-web (WebAssembly). The page maps the bare names "onnxruntime-web" and
// "@huggingface/tokenizers" (an import map, or a bundler).
import * as ort from "onnxruntime-web";
import { BundleError, SigningError } from "../bundle.js";
import { PolicyFileError } from "../policy/errors.js";
import { MAX_POLICY_BYTES } from "../policy/rules.js";

/** The body of `url`, at most `cap` bytes (checked before and while reading); null for a 404
 * when optional. */
async function fetchCapped(url, name, cap, { optional = false, fetchOptions = {} } = {}) {
  let response;
  try {
    response = await fetch(url, { cache: "no-store", ...fetchOptions });
  } catch (error) {
    throw new BundleError(`${url}: ${name} could not be fetched (${error.message})`);
  }
  if (response.status === 404) {
    if (optional) return null;
    throw new BundleError(`${url}: ${name} is listed in the manifest but missing (404)`);
  }
  if (!response.ok) throw new BundleError(`${url}: ${name} could not be fetched (HTTP ${response.status})`);
  const declared = Number(response.headers.get("content-length"));
  if (declared > cap) throw new BundleError(`${url}: ${name} is ${declared} bytes, over the limit of ${cap}`);
  const reader = response.body.getReader();
  const chunks = [];
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    length += value.length;
    if (length > cap) {
      await reader.cancel();
      throw new BundleError(`${url}: ${name} is over the limit of ${cap} bytes`);
    }
    chunks.push(value);
  }
  if (declared && length !== declared) throw new BundleError(`${url}: ${name} ended after ${length} of its ${declared} bytes`);
  const bytes = new Uint8Array(length);
  let offset = 0;
  for (const chunk of chunks) { bytes.set(chunk, offset); offset += chunk.length; }
  return bytes;
}

/** The reader of a bundle under a base URL (bundle.js's `files`): base + name, names being plain
 * file names (manifest.js refuses any other). */
export function urlFiles(base, fetchOptions = {}) {
  const root = String(base).endsWith("/") ? String(base) : `${base}/`;
  return {
    exists: async () => true,  // a missing bundle shows as a missing manifest
    read: (name, cap, options = {}) => fetchCapped(new URL(name, root).href, name, cap, { ...options, fetchOptions }),
  };
}

const hex = (buffer) => Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");

/** An Ed25519 public key for WebCrypto from a CryptoKey, PEM text (SubjectPublicKeyInfo) or the
 * 32 raw bytes. */
async function loadPublicKey(key) {
  try {
    if (typeof CryptoKey !== "undefined" && key instanceof CryptoKey) return key;
    if (typeof key === "string") {
      const body = key.replace(/-----(BEGIN|END) PUBLIC KEY-----/g, "").replace(/\s+/g, "");
      const der = Uint8Array.from(atob(body), (c) => c.charCodeAt(0));
      return await crypto.subtle.importKey("spki", der, { name: "Ed25519" }, false, ["verify"]);
    }
    if (key instanceof Uint8Array && key.length === 32) {
      return await crypto.subtle.importKey("raw", key, { name: "Ed25519" }, false, ["verify"]);
    }
    throw new TypeError("a key must be a CryptoKey, PEM text or the 32 raw bytes");
  } catch (error) {
    throw new SigningError(`not an Ed25519 public key: ${error.message}`);
  }
}

/** A policy file's bytes from `url` (at most MAX_POLICY_BYTES + 1); PolicyFileError when it cannot be fetched. */
export async function fetchPolicyBytes(url, fetchOptions = {}) {
  let response;
  try {
    response = await fetch(url, fetchOptions);
  } catch (error) {
    throw new PolicyFileError(`cannot read policy file ${url}: ${error.message}`);
  }
  if (!response.ok) throw new PolicyFileError(`cannot read policy file ${url}: HTTP ${response.status}`);
  const bytes = new Uint8Array(await response.arrayBuffer());
  return bytes.length > MAX_POLICY_BYTES ? bytes.subarray(0, MAX_POLICY_BYTES + 1) : bytes;
}

/** WebCrypto for bundle.js. */
export const webCrypto = {
  sha256: async (bytes) => hex(await crypto.subtle.digest("SHA-256", bytes)),
  loadPublicKey,
  verify: (key, data, signature) => crypto.subtle.verify({ name: "Ed25519" }, key, signature, data),
};

/** An onnxruntime-web session (WebAssembly, one thread unless the page is cross-origin
 * isolated). A graph loaded from bytes has no folder to read external data from. */
async function createSession(bytes) {
  return ort.InferenceSession.create(bytes, { executionProviders: ["wasm"] });
}

/** Everything Router.load needs in a browser. `fetchOptions` go to every fetch (credentials,
 * headers). */
export function webPlatform(fetchOptions = {}) {
  return { files: (source) => urlFiles(source, fetchOptions), crypto: webCrypto, runtime: { createSession, Tensor: ort.Tensor },
    readPolicy: (url) => fetchPolicyBytes(url, fetchOptions) };
}
