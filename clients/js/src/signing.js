// Ed25519 signatures of bundles (serving/signing.py): training signs the manifest's canonical
// JSON, which lists every file's SHA-256; an app that pins the team's public key accepts only
// bundles carrying that key's signature. The cryptography is node:crypto's (OpenSSL), never
// written here.
import { createPublicKey, verify as cryptoVerify, KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { canonicalJson } from "./canonical-json.js";
import { SIGNATURE_NAME } from "./contract.js";

export const SIGNATURE_BYTES = 64;

/** A key could not be read, or a signature does not verify. */
export class SigningError extends Error {
  constructor(message) { super(message); this.name = "SigningError"; }
}

/** What is signed: the manifest's canonical JSON, as Python's json.dumps(sort_keys, ensure_ascii) writes it. */
export function signedBytes(manifest) {
  return Buffer.from(canonicalJson(manifest), "latin1");  // ensure_ascii: every character is ASCII
}

function fromBytes(data) {
  if (data.length === 32) {
    return createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(data).toString("base64url") }, format: "jwk" });
  }
  return createPublicKey(Buffer.from(data));  // PEM (or DER-less text) as node:crypto reads it
}

/**
 * An Ed25519 public key from a KeyObject, PEM text, a path to a PEM file (router.pub), PEM bytes,
 * or the 32 raw key bytes. A string is PEM when it starts with "-----BEGIN", else a path.
 * @param {import("node:crypto").KeyObject | string | Uint8Array} key
 */
export function loadPublicKey(key) {
  let loaded;
  try {
    if (key instanceof KeyObject) loaded = key;
    else if (typeof key === "string") loaded = fromBytes(key.startsWith("-----BEGIN") ? Buffer.from(key) : readFileSync(key));
    else if (key instanceof Uint8Array) loaded = fromBytes(key);
    else throw new TypeError(`a key must be a KeyObject, PEM, a path or bytes, got ${typeof key}`);
  } catch (error) {
    throw new SigningError(`not an Ed25519 public key: ${error.message}`);
  }
  if (loaded.type !== "public" || loaded.asymmetricKeyType !== "ed25519") {
    throw new SigningError(`not an Ed25519 public key: ${loaded.type} ${loaded.asymmetricKeyType}`);
  }
  return loaded;
}

/** SigningError unless `signature` is `publicKey`'s signature of the (parsed) manifest. */
export function verify(manifest, signature, publicKey) {
  if (signature.length !== SIGNATURE_BYTES) {
    throw new SigningError(`${SIGNATURE_NAME} holds ${signature.length} bytes, not an Ed25519 signature`);
  }
  if (!cryptoVerify(null, signedBytes(manifest), publicKey, signature)) {
    throw new SigningError(`${SIGNATURE_NAME} is not a signature of this manifest by the pinned key`);
  }
}
