// Types of the browser build (src/web.js): the Router of index.d.ts, loaded from a base URL.
import type { Acceptor, ChatCompletion, ChatMessage, ChatStream, Completion, CreateOptions, Decision, EdgeCall, Endpoint, ExecuteOptions,
  Execution, LoadOptions, LocalModel, Manifest, Precision, RoutedChatOptions, UnfamiliarPolicy } from "./index.js";
export type { Acceptor, Decision, EdgeCall, ExecuteOptions, Execution, LoadOptions, Manifest, Precision, Step, UnfamiliarPolicy, Zone,
  Target } from "./index.js";
export type { ChatCompletion, ChatCompletionChunk, ChatMessage, Completion, CreateOptions, EndpointOptions, FallbackKind, LocalCall,
  LocalCallOptions, RoutedChatOptions, RoutingInfo } from "./index.js";
export { ChatStream, Endpoint, LocalModel, SlowFirstToken, StreamInterrupted, UpstreamError, UpstreamHTTPError, UpstreamMalformed,
  UpstreamTimeout, UpstreamUnreachable, conversationPrompt } from "./index.js";
export { BundleError, SigningError, CloudCallError, EdgeTimeoutError, RuleRouter, inferRuleDomain, ruleScore, EDGE, FALLBACK, CLOUD, ZONES, PRECISIONS,
  UNFAMILIAR_POLICIES, ENDPOINT_RULES, NoFeasibleEndpoint } from "./index.js";
export type { EndpointRule } from "./index.js";

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
  readonly endpointNames: string[] | null;
  readonly modelVersion: string;
  readonly edgeContextTokens: number;
  readonly unfamiliarPolicy: UnfamiliarPolicy | null;
  readonly manifest: Manifest | null;
  readonly acceptor: Acceptor | null;
}

/** RoutedChat of index.d.ts, on this build's Router. */
export class RoutedChat {
  constructor(router: Router, options: RoutedChatOptions);
  readonly edge: Endpoint | LocalModel;
  readonly cloud: Endpoint | LocalModel;
  create(messages: ChatMessage[], options: CreateOptions & { stream: true; accept?: null }): Promise<ChatStream>;
  create(messages: ChatMessage[], options?: CreateOptions & { stream?: false;
    accept?: ((text: string, body: ChatCompletion) => unknown) | "learned" | null }): Promise<Completion>;
}
