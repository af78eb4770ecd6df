// Types of the browser build (src/web.js): the Router of index.d.ts, loaded from a base URL.
import type { Acceptor, Decision, EdgeCall, ExecuteOptions, Execution, LoadOptions, Manifest, Precision, UnfamiliarPolicy } from "./index.js";
export type { Acceptor, Decision, EdgeCall, ExecuteOptions, Execution, LoadOptions, Manifest, Precision, Step, UnfamiliarPolicy, Zone,
  Target } from "./index.js";
export { BundleError, SigningError, CloudCallError, EdgeTimeoutError, RuleRouter, inferRuleDomain, ruleScore, EDGE, FALLBACK, CLOUD, ZONES, PRECISIONS,
  UNFAMILIAR_POLICIES } from "./index.js";

export interface WebLoadOptions extends Omit<LoadOptions, "publicKey"> {
  /** PEM text (SubjectPublicKeyInfo), the 32 raw bytes, or a WebCrypto CryptoKey */
  publicKey?: string | Uint8Array | CryptoKey | null;
  /** passed to every fetch of the bundle's files (credentials, headers) */
  fetchOptions?: RequestInit;
}

export class Router {
  /** Load and verify the bundle whose files are under `baseUrl` (fetch, WebCrypto, onnxruntime-web). */
  static load(baseUrl: string | URL, options?: WebLoadOptions): Promise<Router>;
  route(prompt: string, options?: { precision?: Precision | null }): Promise<Decision>;
  routeBatch(prompts: Iterable<string>, precisions?: Iterable<Precision | null> | null): Promise<Decision[]>;
  execute<T>(prompt: string, edge: EdgeCall<T>, cloud: (prompt: string) => T | Promise<T>, options?: ExecuteOptions<T>):
    Promise<Execution<T>>;
  close(): Promise<void>;
  readonly degraded: boolean;
  readonly degradedReason: string | null;
  readonly modelVersion: string;
  readonly edgeContextTokens: number;
  readonly unfamiliarPolicy: UnfamiliarPolicy | null;
  readonly manifest: Manifest | null;
  readonly acceptor: Acceptor | null;
}
