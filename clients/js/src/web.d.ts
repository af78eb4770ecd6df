// Types of the browser build (src/web.js): the Router of index.d.ts, loaded from a base URL.
import type { CapabilityMap, Metadata, Needs, PolicySet, RouteOptions, Spending } from "./index.js";
import type { Acceptor, ChatCompletion, ChatMessage, ChatStream, Completion, CreateOptions, Decision, Endpoint, EndpointCall, EndpointCalls,
  ExecuteOptions, Execution, LoadOptions, LocalModel, Manifest, Precision, RoutedChatOptions, UnfamiliarPolicy } from "./index.js";
export type { Acceptor, Decision, EdgeCall, EndpointCall, EndpointCalls, ExecuteOptions, Execution, LoadOptions, Manifest, Outcome, Precision,
  RunOptions, SpecFields, SpecsInput, Step, UnfamiliarPolicy, Zone, Target } from "./index.js";
export type { ChatCompletion, ChatCompletionChunk, ChatMessage, Completion, CreateOptions, EndpointOptions, FallbackKind, LocalCall,
  LocalCallOptions, RoutedChatOptions, RoutingInfo } from "./index.js";
export { ChatStream, Endpoint, LocalModel, SlowFirstToken, StreamInterrupted, UpstreamError, UpstreamHTTPError, UpstreamMalformed,
  UpstreamTimeout, UpstreamUnreachable, conversationPrompt } from "./index.js";
export { BundleError, SigningError, CloudCallError, EdgeTimeoutError, CallTimeoutError, EndpointsFailed, Tried, OUTCOMES, execute, triedText,
  failureKind, fallbackKind, RuleRouter, inferRuleDomain, ruleScore, EDGE, FALLBACK, CLOUD, ZONES, PRECISIONS,
  UNFAMILIAR_POLICIES, ENDPOINT_RULES, NoFeasibleEndpoint, Needs, needsOf, CAPABILITIES, PolicySet, ENDPOINTS, Spending, PERIODS, detect,
  anyDetected, DETECTORS, PolicyError, FallbackForbidden, PolicyFileError, LanguageDetectorMissing } from "./index.js";
export type { Capability, CapabilityMap, Finding, Metadata, PolicyRule, RouteOptions } from "./index.js";
export type { EndpointRule } from "./index.js";

/** The policy file at `url` (JSON); `fetchOptions` go to the request. */
export function fetchPolicy(url: string | URL, options?: { endpoints?: readonly string[]; fetchOptions?: RequestInit }): Promise<PolicySet>;

export interface WebLoadOptions extends Omit<LoadOptions, "publicKey"> {
  /** PEM text (SubjectPublicKeyInfo), the 32 raw bytes, or a WebCrypto CryptoKey */
  publicKey?: string | Uint8Array | CryptoKey | null;
  /** passed to every fetch of the bundle's files (credentials, headers) */
  fetchOptions?: RequestInit;
}

export class Router {
  /** Load and verify the bundle whose files are under `baseUrl` (fetch, WebCrypto, onnxruntime-web). */
  static load(baseUrl: string | URL, options?: WebLoadOptions): Promise<Router>;
  route(prompt: string, options?: RouteOptions): Promise<Decision>;
  routeBatch(prompts: Iterable<string>, precisions?: Iterable<Precision | null> | null,
    options?: { metadata?: (Metadata | null)[] | null; needs?: (Needs | null)[] | null; capabilities?: CapabilityMap | null }):
    Promise<Decision[]>;
  policy: PolicySet | null;
  readonly policyEndpoints: string[];
  readonly spending: Spending | null;
  recordSpend(metadata: Metadata | null, amount: number): Promise<void>;
  execute<T>(prompt: string, endpoints: EndpointCalls<T>, options?: ExecuteOptions<T>): Promise<Execution<T>>;
  execute<T>(prompt: string, edge: EndpointCall<T>, cloud: EndpointCall<T>, options?: ExecuteOptions<T>): Promise<Execution<T>>;
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
  readonly endpoints: Readonly<Record<string, Endpoint | LocalModel>>;
  readonly edge: Endpoint | LocalModel | null;
  readonly cloud: Endpoint | LocalModel | null;
  create(messages: ChatMessage[], options: CreateOptions & { stream: true; accept?: null }): Promise<ChatStream>;
  create(messages: ChatMessage[], options?: CreateOptions & { stream?: false;
    accept?: ((text: string, body: ChatCompletion) => unknown) | "learned" | null }): Promise<Completion>;
}
