// Read and verify a routing bundle (serving/bundle/_bundle.py), before anything of it is used:
// - manifest.json is at most 4 MiB, valid UTF-8 JSON (as Python's json reads it), of schema
//   version 1, unedited (its manifest_sha256 is the SHA-256 of its canonical JSON), and every
//   value valid (manifest.js);
// - every listed file is at most 512 MiB and matches its SHA-256; each is read once and handed
//   to the runtime from memory: nothing is read again after it was checked, and nothing unlisted
//   is read at all;
// - with a pinned public key, manifest.sig is that key's Ed25519 signature of the manifest.
// The checks are the same for every platform; reading and cryptography are the platform's
// (node/platform.js: a folder, node:crypto; web/platform.js: a URL, WebCrypto).
import { JsonError, canonicalJson, parsePythonJson } from "./canonical-json.js";
import { MANIFEST_NAME, MAX_FILE_BYTES, MAX_MANIFEST_BYTES, SIGNATURE_NAME } from "./contract.js";
import { ManifestError, checkManifest, isSchemaVersion } from "./manifest.js";

/** The bundle is missing, incomplete, tampered with, invalid, of an unknown schema version, or
 * one this runtime cannot run. The only error `Router.load(..., {strict: true})` throws. */
export class BundleError extends Error {
  constructor(message, options) { super(message, options); this.name = "BundleError"; }
}

/** A key could not be read, or a signature does not verify. */
export class SigningError extends Error {
  constructor(message) { super(message); this.name = "SigningError"; }
}

export const SIGNATURE_BYTES = 64;

/** The manifest without its own checksum, whose canonical JSON the checksum covers. */
export function withoutDigest(data) {
  const body = Object.create(null);
  for (const [k, v] of Object.entries(data)) if (k !== "manifest_sha256") body[k] = v;
  return body;
}

/** The bytes the checksum and the signature cover: Python's json.dumps(sort_keys=True,
 * ensure_ascii=True), all ASCII. */
export function canonicalBytes(value) {
  return new TextEncoder().encode(canonicalJson(value));
}

function parseManifest(where, raw) {
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

async function checkSignature(source, files, crypto, data, publicKey) {
  try {
    const key = await crypto.loadPublicKey(publicKey);
    const signature = await files.read(SIGNATURE_NAME, 1024, { optional: true });
    if (signature === null) throw new SigningError(`no ${SIGNATURE_NAME}: the bundle is unsigned, but a public key is pinned`);
    if (signature.length !== SIGNATURE_BYTES) {
      throw new SigningError(`${SIGNATURE_NAME} holds ${signature.length} bytes, not an Ed25519 signature`);
    }
    if (!(await crypto.verify(key, canonicalBytes(data), signature))) {
      throw new SigningError(`${SIGNATURE_NAME} is not a signature of this manifest by the pinned key`);
    }
  } catch (error) {
    if (error instanceof SigningError) throw new BundleError(`${source}: signature check failed: ${error.message}`);
    throw error;
  }
}

/**
 * Read, check and verify a bundle (module doc); BundleError on any problem.
 * @param {string} source what the messages call the bundle (its folder or URL)
 * @param {{exists(): Promise<boolean>, read(name: string, cap: number, options?: {optional?: boolean}): Promise<Uint8Array | null>}} files
 *   the platform's reader: `read` gives a listed file's bytes (null when optional and absent) or
 *   throws BundleError (missing, not a plain file, over `cap`)
 * @param {{sha256(bytes: Uint8Array): Promise<string>, loadPublicKey(key: unknown): Promise<unknown>,
 *   verify(key: unknown, data: Uint8Array, signature: Uint8Array): Promise<boolean>}} crypto the platform's
 */
export async function verifiedBundle(source, files, crypto, { publicKey = null } = {}) {
  if (!(await files.exists())) throw new BundleError(`no bundle folder at ${source} (is this a bundle written by \`make train\`?)`);
  const where = `${source}/${MANIFEST_NAME}`;
  const data = parseManifest(where, await files.read(MANIFEST_NAME, MAX_MANIFEST_BYTES));
  if (isSchemaVersion(data.schema_version) && data.manifest_sha256 !== await crypto.sha256(canonicalBytes(withoutDigest(data)))) {
    throw new BundleError(`${where} does not match its manifest_sha256: edited after it was written`);
  }
  let manifest;
  try {
    manifest = checkManifest(data);
  } catch (error) {
    if (error instanceof ManifestError) throw new BundleError(`${where}: ${error.message}`);
    throw error;
  }
  if (Object.keys(manifest.files).length === 0) throw new BundleError(`${where}: no 'files' table`);
  const contents = new Map();
  for (const [name, expected] of Object.entries(manifest.files)) {
    const content = await files.read(name, MAX_FILE_BYTES);
    const actual = await crypto.sha256(content);
    if (actual !== expected) {
      throw new BundleError(`${source}: ${name} does not match its checksum (expected ${expected.slice(0, 12)}..., ` +
        `found ${actual.slice(0, 12)}...): modified or truncated`);
    }
    contents.set(name, content);
  }
  if (publicKey !== null && publicKey !== undefined) await checkSignature(source, files, crypto, data, publicKey);
  return { folder: source, manifest, contents };
}

/** A listed file's verified bytes; BundleError if the manifest does not list it. */
export function content(bundle, name) {
  const bytes = bundle.contents.get(name);
  if (bytes === undefined) throw new BundleError(`${bundle.folder}: the model needs ${name}, which the manifest does not list`);
  return bytes;
}
