// Read and verify a routing bundle folder (serving/bundle.py), before anything of it is used:
// - manifest.json is a plain file of at most 4 MiB, valid UTF-8 JSON (as Python's json reads it),
//   of schema version 1, unedited (its manifest_sha256 is the SHA-256 of its canonical JSON), and
//   every value valid (manifest.js);
// - every listed file is a plain file directly in the folder (opened with O_NOFOLLOW, so a
//   symlink is refused by the open itself), at most 512 MiB, matching its SHA-256; each is read
//   once and handed to the runtime from memory: nothing is read from disk after it was checked,
//   and nothing unlisted is read at all;
// - with a pinned public key, manifest.sig is that key's Ed25519 signature of the manifest.
import { createHash } from "node:crypto";
import { constants, promises as fs } from "node:fs";
import path from "node:path";
import { JsonError, canonicalJson, parsePythonJson } from "./canonical-json.js";
import { MANIFEST_NAME, MAX_FILE_BYTES, MAX_MANIFEST_BYTES, SIGNATURE_NAME } from "./contract.js";
import { ManifestError, checkManifest, isSchemaVersion } from "./manifest.js";
import { SigningError, loadPublicKey, verify } from "./signing.js";

/** The bundle is missing, incomplete, tampered with, invalid, of an unknown schema version, or
 * one this runtime cannot run. The only error `Router.load(..., {strict: true})` throws. */
export class BundleError extends Error {
  constructor(message, options) { super(message, options); this.name = "BundleError"; }
}

const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");

/** SHA-256 of the manifest's canonical JSON without its own manifest_sha256 field. */
export function manifestDigest(data) {
  const body = Object.create(null);
  for (const [k, v] of Object.entries(data)) if (k !== "manifest_sha256") body[k] = v;
  return sha256(Buffer.from(canonicalJson(body), "latin1"));
}

/** The bytes of folder/name: a regular file, not a symlink, at most `cap` bytes. */
async function readPlainFile(folder, name, cap) {
  let handle;
  try {
    handle = await fs.open(path.join(folder, name), constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0));
  } catch (error) {
    if (error.code === "ENOENT") throw new BundleError(`${folder}: ${name} is listed in the manifest but missing`);
    const kind = error.code === "ELOOP" ? "a symlink" : "unreadable";
    throw new BundleError(`${folder}: ${name} is ${kind} (${error.code}); bundle files must be plain files`);
  }
  try {
    const info = await handle.stat();
    if (!info.isFile()) throw new BundleError(`${folder}: ${name} is not a regular file`);
    if (info.size > cap) throw new BundleError(`${folder}: ${name} is ${info.size} bytes, over the limit of ${cap}`);
    const buffer = Buffer.alloc(Math.min(info.size, cap) + 1);
    let length = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
      if (bytesRead === 0) break;
      length += bytesRead;
      if (length === buffer.length) break;
    }
    if (length > cap) throw new BundleError(`${folder}: ${name} grew over the limit of ${cap} bytes while being read`);
    if (length > info.size) throw new BundleError(`${folder}: ${name} grew while being read`);
    return buffer.subarray(0, length);
  } finally {
    await handle.close();
  }
}

function parseManifest(folder, raw) {
  const where = path.join(folder, MANIFEST_NAME);
  let data;
  try {
    data = parsePythonJson(new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(raw));
  } catch (error) {
    if (error instanceof JsonError || error instanceof TypeError) {
      throw new BundleError(`${where} is not valid JSON: ${error.message}`.slice(0, 300));
    }
    throw error;
  }
  if (data === null || typeof data !== "object" || Array.isArray(data)) throw new BundleError(`${where} must hold a JSON object`);
  return data;
}

async function checkSignature(folder, data, publicKey) {
  try {
    const key = loadPublicKey(publicKey);
    let signature;
    try {
      signature = await readPlainFile(folder, SIGNATURE_NAME, 1024);
    } catch (error) {
      if (error instanceof BundleError && error.message.endsWith("missing")) {
        throw new SigningError(`no ${SIGNATURE_NAME}: the bundle is unsigned, but a public key is pinned`);
      }
      throw error;
    }
    verify(data, signature, key);
  } catch (error) {
    if (error instanceof SigningError) throw new BundleError(`${folder}: signature check failed: ${error.message}`);
    throw error;
  }
}

/**
 * Read, check and verify a bundle folder (module doc); BundleError on any problem.
 * @returns {Promise<{folder: string, manifest: ReturnType<typeof checkManifest>, contents: Map<string, Buffer>}>}
 */
export async function readBundle(folder, { publicKey = null } = {}) {
  folder = String(folder);
  const info = await fs.stat(folder).catch(() => null);
  if (!info || !info.isDirectory()) throw new BundleError(`no bundle folder at ${folder} (is this a bundle written by \`make train\`?)`);
  const data = parseManifest(folder, await readPlainFile(folder, MANIFEST_NAME, MAX_MANIFEST_BYTES));
  if (isSchemaVersion(data.schema_version) && data.manifest_sha256 !== manifestDigest(data)) {
    throw new BundleError(`${path.join(folder, MANIFEST_NAME)} does not match its manifest_sha256: edited after it was written`);
  }
  let manifest;
  try {
    manifest = checkManifest(data);
  } catch (error) {
    if (error instanceof ManifestError) throw new BundleError(`${path.join(folder, MANIFEST_NAME)}: ${error.message}`);
    throw error;
  }
  if (Object.keys(manifest.files).length === 0) throw new BundleError(`${path.join(folder, MANIFEST_NAME)}: no 'files' table`);
  const contents = new Map();
  for (const [name, expected] of Object.entries(manifest.files)) {
    const content = await readPlainFile(folder, name, MAX_FILE_BYTES);
    const actual = sha256(content);
    if (actual !== expected) {
      throw new BundleError(`${folder}: ${name} does not match its checksum (expected ${expected.slice(0, 12)}..., ` +
        `found ${actual.slice(0, 12)}...): modified or truncated`);
    }
    contents.set(name, content);
  }
  if (publicKey !== null && publicKey !== undefined) await checkSignature(folder, data, publicKey);
  return { folder, manifest, contents };
}

/** A listed file's verified bytes; BundleError if the manifest does not list it. */
export function content(bundle, name) {
  const bytes = bundle.contents.get(name);
  if (bytes === undefined) throw new BundleError(`${bundle.folder}: the model needs ${name}, which the manifest does not list`);
  return bytes;
}
