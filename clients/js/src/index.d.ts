// Types of the Node SDK (src/index.js): every declaration the two builds share (types.d.ts, their one
// home), the Router loaded from a bundle folder, and what reads files and keys with node:fs and
// node:crypto.
import type { KeyObject } from "node:crypto";
import type { LoadOptionsBase, Manifest, PolicySet, RouterMethods } from "./types.js";

export * from "./types.js";

/** A public key to pin: a KeyObject, PEM text, a path to a PEM file (router.pub), PEM bytes or
 * the 32 raw key bytes. A string starting with "-----BEGIN" is PEM, any other a path. */
export type PublicKeyInput = KeyObject | string | Uint8Array;

export interface LoadOptions extends LoadOptionsBase {
  /** pin the team's Ed25519 key: a bundle without its signature counts as tampered */
  publicKey?: PublicKeyInput | null;
}

/** The router of a bundle folder: RouterMethods (types.d.ts), loaded by Router.load. */
export interface Router extends RouterMethods {}
export class Router {
  /** Load and verify a bundle folder. Never rejects unless `strict` (BundleError) or an option is
   * invalid (RangeError): a bundle that cannot serve gives a router on the rule table. */
  static load(source: string, options?: LoadOptions): Promise<Router>;
}

/** The policy file at `path` (JSON) for a router whose endpoints are `endpoints` (default edge and cloud). */
export function loadPolicy(path: string, options?: { endpoints?: readonly string[] }): Promise<PolicySet>;

export function readBundle(folder: string, options?: { publicKey?: PublicKeyInput | null }):
  Promise<{ folder: string; manifest: Manifest; contents: Map<string, Buffer> }>;
/** SHA-256 of the manifest's canonical JSON (Python's json.dumps(sort_keys=True, ensure_ascii=True)) without manifest_sha256. */
export function manifestDigest(manifest: Record<string, unknown>): string;
export function loadPublicKey(key: PublicKeyInput): KeyObject;
