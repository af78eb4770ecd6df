// What Node provides to the platform-neutral SDK: a bundle folder read with node:fs (plain files
// only, opened with O_NOFOLLOW so a symlink is refused by the open itself), SHA-256 and Ed25519
// from node:crypto (OpenSSL), and onnxruntime-node.
import { createHash, createPublicKey, verify as cryptoVerify, KeyObject } from "node:crypto";
import { MAX_POLICY_BYTES } from "../policy/rules.js";
import { PolicyFileError } from "../policy/errors.js";
import { constants, mkdtempSync, readFileSync, rmSync, promises as fs } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import ort from "onnxruntime-node";
import { BundleError, SigningError } from "../bundle.js";

/** The bytes of folder/name: a regular file, not a symlink, at most `cap` bytes. */
async function readPlainFile(folder, name, cap, { optional = false } = {}) {
  let handle;
  try {
    handle = await fs.open(path.join(folder, name), constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0));
  } catch (error) {
    if (error.code === "ENOENT") {
      if (optional) return null;
      throw new BundleError(`${folder}: ${name} is listed in the manifest but missing`);
    }
    const kind = error.code === "ELOOP" ? "a symlink" : "unreadable";
    throw new BundleError(`${folder}: ${name} is ${kind} (${error.code}); bundle files must be plain files`);
  }
  try {
    const info = await handle.stat();
    if (!info.isFile()) throw new BundleError(`${folder}: ${name} is not a regular file`);
    if (info.size > cap) throw new BundleError(`${folder}: ${name} is ${info.size} bytes, over the limit of ${cap}`);
    const buffer = Buffer.alloc(info.size + 1);  // one byte more: a file that grew is seen
    let length = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
      if (bytesRead === 0 || (length += bytesRead) === buffer.length) break;
    }
    if (length > info.size) throw new BundleError(`${folder}: ${name} grew while being read`);
    return buffer.subarray(0, length);
  } finally {
    await handle.close();
  }
}

/** The reader of a bundle folder (bundle.js's `files`). */
export function folderFiles(folder) {
  return {
    exists: async () => (await fs.stat(folder).catch(() => null))?.isDirectory() === true,
    read: (name, cap, options) => readPlainFile(folder, name, cap, options),
  };
}

function keyFromBytes(data) {
  if (data.length === 32) {
    return createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(data).toString("base64url") }, format: "jwk" });
  }
  return createPublicKey(Buffer.from(data));  // PEM
}

/**
 * An Ed25519 public key from a KeyObject, PEM text, a path to a PEM file (router.pub), PEM bytes,
 * or the 32 raw key bytes. A string is PEM when it starts with "-----BEGIN", else a path.
 */
export function loadPublicKey(key) {
  let loaded;
  try {
    if (key instanceof KeyObject) loaded = key;
    else if (typeof key === "string") loaded = keyFromBytes(key.startsWith("-----BEGIN") ? Buffer.from(key) : readFileSync(key));
    else if (key instanceof Uint8Array) loaded = keyFromBytes(key);
    else throw new TypeError(`a key must be a KeyObject, PEM, a path or bytes, got ${typeof key}`);
  } catch (error) {
    throw new SigningError(`not an Ed25519 public key: ${error.message}`);
  }
  if (loaded.type !== "public" || loaded.asymmetricKeyType !== "ed25519") {
    throw new SigningError(`not an Ed25519 public key: ${loaded.type} ${loaded.asymmetricKeyType}`);
  }
  return loaded;
}

/** node:crypto for bundle.js. */
export const nodeCrypto = {
  sha256: async (bytes) => createHash("sha256").update(bytes).digest("hex"),
  loadPublicKey: async (key) => loadPublicKey(key),
  verify: async (key, data, signature) => cryptoVerify(null, data, key, signature),
};

/** An onnxruntime-node session on `threads` threads from a graph's bytes. External data may only
 * come from an empty temporary folder, so a graph pointing at any file (an unverified weights
 * file beside the bundle, or ../ anywhere) fails to load, as in Python. */
async function createSession(bytes, threads) {
  const empty = mkdtempSync(path.join(tmpdir(), "router-no-external-data-"));
  try {
    return await ort.InferenceSession.create(bytes, {
      executionProviders: ["cpu"], intraOpNumThreads: threads, interOpNumThreads: 1,
      extra: { session: { model_external_initializers_file_folder_path: empty } },
    });
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
}

/** Everything Router.load needs on Node. */
/** A policy file's bytes (at most MAX_POLICY_BYTES + 1, so that a larger file is refused by size);
 * PolicyFileError when it cannot be read, as the Python SDK says it. */
export async function readPolicyFile(file) {
  let handle;
  try {
    handle = await fs.open(file, "r");
    const buffer = new Uint8Array(MAX_POLICY_BYTES + 1);
    let size = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, size, buffer.length - size, null);
      if (bytesRead === 0 || size + bytesRead >= buffer.length) { size += bytesRead; break; }
      size += bytesRead;
    }
    return buffer.subarray(0, size);
  } catch (error) {
    throw new PolicyFileError(`cannot read policy file ${file}: ${error.code === "ENOENT" ? "No such file or directory" : error.message}`);
  } finally {
    await handle?.close();
  }
}

export const nodePlatform = {
  readPolicy: readPolicyFile,
  files: (source) => folderFiles(String(source)),
  crypto: nodeCrypto,
  runtime: { createSession, Tensor: ort.Tensor },
};
