// Types of the browser build (src/web.js): every declaration the two builds share (types.d.ts, their
// one home), and the Router loaded from a base URL with fetch, WebCrypto and onnxruntime-web. Nothing
// here needs Node's types.
import type { LoadOptionsBase, PolicySet, RouterMethods } from "./types.js";

export * from "./types.js";

export interface WebLoadOptions extends LoadOptionsBase {
  /** PEM text (SubjectPublicKeyInfo), the 32 raw bytes, or a WebCrypto CryptoKey */
  publicKey?: string | Uint8Array | CryptoKey | null;
  /** passed to every fetch of the bundle's files (credentials, headers) */
  fetchOptions?: RequestInit;
}
/** Router.load's options in a browser. */
export type LoadOptions = WebLoadOptions;

/** The router of a bundle published at a URL: RouterMethods (types.d.ts), loaded by Router.load. */
export interface Router extends RouterMethods {}
export class Router {
  /** Load and verify the bundle whose files are under `baseUrl` (fetch, WebCrypto, onnxruntime-web). */
  static load(baseUrl: string | URL, options?: WebLoadOptions): Promise<Router>;
}

/** The policy file at `url` (JSON); `fetchOptions` go to the request. */
export function fetchPolicy(url: string | URL, options?: { endpoints?: readonly string[]; fetchOptions?: RequestInit }): Promise<PolicySet>;
