// Types of the SDK on every platform (the sources are JavaScript with JSDoc; this file, through
// index.d.ts for Node and web.d.ts for browsers, is what users' editors and TypeScript read): one home
// for every declaration both builds share; each adds its Router's load() and its platform's functions.
// Field names of Decision are the Python SDK's, so both serialise alike.

export type Zone = "edge" | "edge_with_cloud_fallback" | "cloud";
export type Target = "edge" | "cloud";
export type Precision = "exact" | "standard" | "tolerant";
export type UnfamiliarPolicy = "edge_with_cloud_fallback" | "rule_table" | "learned";

export const EDGE: "edge";
export const FALLBACK: "edge_with_cloud_fallback";
export const CLOUD: "cloud";
export const ZONES: readonly Zone[];
export const PRECISIONS: readonly Precision[];
export const UNFAMILIAR_POLICIES: readonly UnfamiliarPolicy[];

/** Where a request runs first, and why: the Python SDK's Decision, field for field. */
export interface Decision {
  /** where the request runs first */
  target: Target;
  zone: Zone;
  /** what the thresholds cut: the cloud's expected gain p_cloud - p_edge in [-1, 1] (older
   * bundles: P(cloud needed)); degraded: the rule table's complexity score */
  score: number;
  reason: string;
  /** true when the rule table decided */
  degraded: boolean;
  /** which model decided ("rule-table" for the rule table) */
  model_version: string;
  precision: Precision | null;
  /** estimated tokens of the whole prompt */
  n_tokens: number;
  /** the features came from the first max_chars characters only */
  truncated: boolean;
  p_edge: number | null;
  p_cloud: number | null;
  /** how unlike the training data the prompt is; above 1 it is `unfamiliar` */
  novelty: number | null;
  unfamiliar: boolean;
  /** the rule that decided: a policy rule (a force, else the first forbid, else a prefer or route) or
   * the built-in needs:<capability>; null when none did. The reason then starts with it */
  rule: string | null;
  /** the endpoints the policy forbids for this request, and those lacking what it needs: execute()
   * never calls them */
  forbidden: string[];
  /** for each endpoint of the cascade, whether it runs on the device */
  on_device: boolean[];
  /** the endpoints of the cascade whose answers execute()'s accept check reads */
  checked: string[];
  /** each endpoint's calibrated P(good answer) by name: {edge, cloud} for a two-endpoint bundle with
   * both heads, every endpoint's for an N-endpoint bundle; null otherwise (older bundles, the rule table) */
  expected: Record<string, number> | null;
  /** the endpoint to run first: the cascade's first ("edge" or "cloud" for a two-endpoint bundle) */
  endpoint: string;
  /** the endpoints to try in order when an answer fails, `endpoint` first; a two-endpoint zone is a
   * cascade: edge = [edge, cloud], edge_with_cloud_fallback = [edge, cloud] with the edge checked,
   * cloud = [cloud]; never an endpoint the policy forbids */
  cascade: string[];
  /** the request's turn in its conversation (1 for the first); null without a conversation (then left
   * out of the JSON, as Python's to_dict() leaves it out) */
  turn: number | null;
  /** whether the turn moves the conversation from the endpoint that answered its last turn (the reason
   * says what the switch costs); null without a conversation or a last endpoint */
  switched: boolean | null;
}

/** A capability a request may need of its endpoint. */
export type Capability = "images" | "tools" | "json";

/** What one request needs of the endpoint that serves it; `new Needs()` needs none. */
export class Needs {
  constructor(options?: { images?: boolean; tools?: boolean; json?: boolean; language?: string | null });
  readonly images: boolean;
  readonly tools: boolean;
  readonly json: boolean;
  /** an ISO 639-1 code (its primary subtag: "pt-BR" -> "pt"), or null when unknown */
  readonly language: string | null;
  readonly names: Capability[];
  readonly any: boolean;
}
/** What a chat-completions request needs: image parts, tools parameters, a JSON response format. */
export function needsOf(messages: readonly unknown[], params?: Record<string, unknown>): Needs;
export const CAPABILITIES: readonly Capability[];

/** Request metadata the policy's rules read: strings to strings. */
export type Metadata = Record<string, string>;
/** The endpoints' capabilities by name (null: unknown, no constraint). */
export type CapabilityMap = Record<string, Capabilities | { images?: boolean; tools?: boolean; json?: boolean;
  languages?: string[] | null } | null> | Map<string, Capabilities | null>;

/** What route(), routeBatch() and execute() take beside the prompt. */
export interface RouteOptions {
  precision?: Precision | null;
  /** the request's metadata the policy's rules read (feature, user tier, declared privacy, ...) */
  metadata?: Metadata | null;
  /** what the request needs of its endpoint: an endpoint lacking it is never chosen nor called */
  needs?: Needs | null;
  /** the endpoints' capabilities (default: an N-endpoint bundle's specs; two-endpoint routers know none) */
  capabilities?: CapabilityMap | null;
  /** the conversation the request belongs to (an app's id: 1 to 256 printable characters): the turn is
   * decided with its state, which execute() records */
  conversation?: string | null;
}

/** The request record (serving.Request's): what the app asks of the router, built once where it calls
 * the SDK, checked (TypeError or RangeError naming the field) and frozen; route(), routeBatch(),
 * execute() and RoutedChat.create() take it instead of a prompt and options. */
export class Request {
  /** `text` may be null when `messages` are given: it is then their conversationPrompt. */
  constructor(text: string | null, fields?: RequestFields);
  /** what is routed: the prompt, or a conversation's text */
  readonly text: string;
  readonly precision: Precision | null;
  /** what the policy's rules read (a frozen copy) */
  readonly metadata: Readonly<Metadata> | null;
  /** what the request needs of its endpoint; null when nothing */
  readonly needs: Needs | null;
  /** the endpoints' capabilities by name, overriding the bundle's; null: the bundle's */
  readonly capabilities: Map<string, Capabilities | null> | null;
  /** a performance.now() value (milliseconds) by which the answer must be complete; null: none */
  readonly deadline: number | null;
  /** the conversation the request belongs to (an app's id) */
  readonly conversation: string | null;
  /** the chat messages `text` was built from, or null */
  readonly messages: readonly ChatMessage[] | null;
  /** A copy with `changes`, checked again. */
  but(changes: RequestFields & { text?: string }): Request;
}

/** A Request's fields besides the text. */
export interface RequestFields extends RouteOptions {
  /** a performance.now() value (milliseconds) by which the answer must be complete: execute() cuts each
   * call's timeout to what is left, and calls nothing once it has passed (each endpoint left a timeout) */
  deadline?: number | null;
  messages?: ChatMessage[] | null;
}

/** One checked policy rule. */
export interface PolicyRule {
  readonly index: number;
  readonly name: string;
  readonly action: "force" | "forbid" | "prefer" | "route";
  readonly endpoint: string;
  readonly zone: Zone | null;
  readonly description: string;
}

/** An ordered, checked set of rules (docs/policies.md), loaded from JSON. */
export class PolicySet {
  /** A policy file's bytes or text; `source` names it in errors and says the format (.json). */
  static parse(raw: Uint8Array | string, options?: { source?: string; endpoints?: readonly string[] }): Promise<PolicySet>;
  /** A decoded policy document {"rules": [...]}. */
  static fromObject(data: unknown, options?: { source?: string; endpoints?: readonly string[]; version?: string }): Promise<PolicySet>;
  readonly rules: readonly PolicyRule[];
  readonly endpoints: readonly string[];
  readonly source: string;
  /** the first 12 hex digits of the file's SHA-256 */
  readonly version: string;
  /** the detectors its rules name */
  readonly detectors: readonly string[];
  /** the metadata keys whose holders' spend budget rules read */
  readonly budgetKeys: readonly string[];
}
/** The endpoints of today's two-endpoint router. */
export const ENDPOINTS: readonly ["edge", "cloud"];

/** The budgets' ledger: what each holder spent in the current UTC hour, day and month. */
export class Spending {
  constructor(maxHolders?: number);
  spent(key: string, value: string, period: "hour" | "day" | "month", now?: number | null): Promise<number>;
  readonly length: number;
}
export const PERIODS: readonly ["hour", "day", "month"];

/** A content detector's finding: its name and span [start, end) in code points; never the text. */
export interface Finding {
  readonly detector: string;
  readonly start: number;
  readonly end: number;
}
/** Every finding of the named detectors (all when null), ordered by position. */
export function detect(text: string, names?: Iterable<string> | null): Finding[];
/** Whether any of the named detectors finds anything. */
export function anyDetected(text: string, names?: Iterable<string> | null): boolean;
export const DETECTORS: Readonly<Record<string, { readonly name: string; readonly description: string }>>;

/** A request the policy leaves no way to serve. `rules`: the rules involved. */
export class PolicyError extends Error {
  readonly rules: readonly string[];
}
/** execute(): no allowed endpoint served and the policy forbids `endpoint` (by `rule`); nothing
 * forbidden was called. `tried`: each endpoint reached and why it was left. */
export class FallbackForbidden extends PolicyError {
  readonly rule: string;
  readonly endpoint: string;
  readonly edge_error: unknown;
  readonly steps: Step[];
  readonly decision: Decision;
  readonly tried: Tried[];
}
/** A policy file that cannot be used: names the file, the rule and the key. */
export class PolicyFileError extends Error {}
/** An endpoint declares `languages` and the request's language is neither declared nor detectable here. */
export class LanguageDetectorMissing extends Error {}

/** Router.load's options on every platform (index.d.ts and web.d.ts add how a public key is given). */
export interface LoadOptionsBase {
  /** throw BundleError instead of routing on the rule table when the bundle cannot serve */
  strict?: boolean;
  /** onnxruntime's intra-op threads (default 1) */
  threads?: number;
  /** overrides the bundle's policy for prompts unlike its training data */
  unfamiliarPolicy?: UnfamiliarPolicy | null;
  /** where the one warning of a degraded load (and of a scoring failure) goes; default console */
  logger?: { warn(message: string): void };
  /** the policy applied to every decision: a PolicySet, or the policy file's path (Node) / URL
   * (browsers); a bad one rejects with PolicyFileError even without `strict` */
  policy?: PolicySet | string | URL | null;
  /** prompt -> ISO 639-1 code or null, for endpoints that declare `languages` (this SDK has no detector) */
  languageDetector?: ((prompt: string) => string | null) | null;
  /** where conversation state lives between turns: default a MemoryStore in this process */
  conversations?: ConversationStore | null;
  /** what moving a conversation to another endpoint weighs: a Stickiness or its fields (default weight 1) */
  stickiness?: Stickiness | { weight?: number; secondsPrice?: number } | null;
}

// Conversations (src/conversations.js; serving.conversations).

/** The outcomes a turn records. */
export type TurnOutcome = "served" | "fallback" | "rejected" | "failed" | "regenerated";
export const TURN_OUTCOMES: readonly TurnOutcome[];
/** How long a provider's prompt cache keeps a prefix, in seconds (300). */
export const CLOUD_CACHE_TTL_S: number;

/** How many of the conversation's tokens one endpoint's cache holds, and since when (seconds since the epoch). */
export class Held {
  constructor(endpoint: string, tokens: number, at: number);
  readonly endpoint: string;
  readonly tokens: number;
  readonly at: number;
}

/** What the router knows of a conversation after its last turn (frozen; Python's field names). */
export class ConversationState {
  constructor(fields?: { turns?: number; endpoint?: string | null; outcome?: TurnOutcome | null; history_tokens?: number;
    held?: Held[]; updated?: number });
  readonly turns: number;
  /** where the last turn was answered; null: none was */
  readonly endpoint: string | null;
  readonly outcome: TurnOutcome | null;
  /** the conversation's length after the last turn (its prompt and its answer) */
  readonly history_tokens: number;
  /** each endpoint's cached prefix */
  readonly held: readonly Held[];
  /** when the last turn was recorded (seconds since the epoch) */
  readonly updated: number;
  holds(endpoint: string): Held | null;
  after(endpoint: string | null, turn: { inputTokens: number; outputTokens: number; onDevice: boolean; outcome: TurnOutcome; now: number }):
    ConversationState;
  marked(outcome: TurnOutcome): ConversationState;
  /** the same turn with its answer's length known later (a stream's, at its end) */
  answered(endpoint: string, outputTokens: number, options: { onDevice: boolean }): ConversationState;
  /** the JSON text Python's to_json writes */
  toJson(): string;
  /** RangeError "not a conversation state: ..." for anything else */
  static fromJson(text: string | Uint8Array): ConversationState;
}

/** Where conversation state lives: get and put, each synchronous or returning a Promise. Anything they
 * throw (or a get giving no ConversationState) is the store failing: the turn is decided without the
 * state (the reason says so), a turn not written is logged; never a failed request. */
export interface ConversationStore {
  get(conversation: string): ConversationState | null | undefined | Promise<ConversationState | null | undefined>;
  put(conversation: string, state: ConversationState): void | Promise<void>;
}

/** Conversation state in this process, at most `maxConversations` (the least recently used dropped
 * first; default 100,000), each forgotten `maxAgeS` after its last turn (default 3600). */
export class MemoryStore implements ConversationStore {
  constructor(options?: { maxConversations?: number; maxAgeS?: number });
  readonly size: number;
  readonly maxConversations: number;
  readonly maxAgeS: number;
  get(conversation: string): ConversationState | null;
  put(conversation: string, state: ConversationState): void;
}

/** A store that could not be read or written. */
export class ConversationStoreError extends Error {}

/** How much a switch weighs: weight 0 every turn on its own, 1 the switch at its price, Infinity always
 * stay while the last endpoint may serve; secondsPrice what a second of time to first token is worth. */
export class Stickiness {
  constructor(options?: { weight?: number; secondsPrice?: number });
  readonly weight: number;
  readonly secondsPrice: number;
  readonly always: boolean;
  readonly never: boolean;
}

/** After a store failure, the store is not asked again for this long (seconds): 1. */
export const RETRY_S: number;

/** The router's side of conversations (router.conversations): its store, its knob, how often the store
 * failed or was not asked (after a failure it is not asked again for `retryS` seconds, default RETRY_S). */
export class Conversations {
  constructor(store?: ConversationStore | null, stickiness?: Stickiness | { weight?: number; secondsPrice?: number } | null,
    options?: { logger?: { warn(message: string): void; debug?(message: string): void } });
  store: ConversationStore;
  stickiness: Stickiness;
  unavailable: number;
  retryS: number;
}

/** The inputs of the previous turn's evidence, in order: logit_p, intercept, log_turn, log_history,
 * served, served_trouble, trouble. */
export const TURN_EVIDENCE_FEATURES: readonly string[];

/** A turn_evidence.json that cannot be used; the message names what is wrong. */
export class TurnEvidenceError extends Error {}

/** The previous turn as evidence (a bundle's turn_evidence.json): each endpoint's weights over
 * TURN_EVIDENCE_FEATURES, moving its expected quality by how the conversation's last turn went. */
export class TurnEvidence {
  constructor(weights: Record<string, number[]> | Map<string, number[]>, rows?: number);
  readonly weights: ReadonlyMap<string, readonly number[]>;
  readonly rows: number;
  /** the weights a turn_evidence.json holds for `endpoints`; TurnEvidenceError naming what is wrong */
  static fromJson(raw: string | Uint8Array, endpoints: readonly string[]): TurnEvidence;
  /** each endpoint's expected quality (in `names`' order) given how the last turn went; a first turn's as it is */
  adjusted(expected: readonly number[], names: readonly string[], state: ConversationState): number[];
}

/** [each endpoint's switch cost in dollars, the history tokens it would read again] for a turn of
 * `inputTokens` in a conversation in `state`, at `now` (seconds). */
export function switchCosts(endpoints: readonly EndpointSpec[], state: ConversationState, inputTokens: number, outputTokens: number,
  secondsPrice: number, now: number): [number[], number[]];

export interface Manifest {
  modelVersion: string;
  featureSpec: { tier: string; maxTokens: number; maxChars: number; embeddingDim: number; addSpecialTokens: boolean;
    encoderRowWise: boolean; fused: boolean; precisions: readonly Precision[]; lexical: string };
  score: { kind: "expected_gain" | "cloud_needed" | "endpoints"; heads: string[]; outputs: string[] };
  /** an N-endpoint bundle's endpoints (in its heads' order) and choice rule; null for two-endpoint bundles */
  endpoints: { spec: Endpoints; names: string[]; outputTokens: number; rule: EndpointRule; parameter: number } | null;
  thresholds: Record<string, { lo: number; hi: number }>;
  limits: { edgeContextTokens: number };
  files: Record<string, string>;
  novelty: { inModel: boolean; output: string | null; file: string | null; embeddingThreshold: number;
    unseenThreshold: number; policy: UnfamiliarPolicy } | null;
  createdAt: string;
  manifestSha256: string;
  /** the manifest as parsed */
  raw: Record<string, unknown>;
}

/** The Router's methods and properties on every platform (index.d.ts and web.d.ts add its load()). */
export interface RouterMethods {
  /** Where one request should run, the policy and the request's needs applied: a Request, or its text
   * with the request's fields as options. Rejects for argument errors (TypeError, RangeError) and
   * NoFeasibleEndpoint when no endpoint may serve it. */
  route(prompt: string | Request, options?: RouteOptions): Promise<Decision>;
  /** Decisions for many requests, scored in one onnxruntime call: Requests, or texts with metadata and
   * needs one each per prompt. */
  routeBatch(prompts: Iterable<string | Request>, precisions?: Iterable<Precision | null> | null,
    options?: { metadata?: (Metadata | null)[] | null; needs?: (Needs | null)[] | null; capabilities?: CapabilityMap | null }):
    Promise<Decision[]>;
  /** The policy applied to every decision; setting it swaps it in one assignment. */
  policy: PolicySet | null;
  /** The endpoint names a policy for this router names. */
  readonly policyEndpoints: string[];
  /** The budgets' ledger, null before anything was spent. */
  readonly spending: Spending | null;
  /** Count what a request cost against the budgets its metadata names. */
  recordSpend(metadata: Metadata | null, amount: number): Promise<void>;
  /** Route, then run the decision's cascade over the endpoints' calls by name (the bundle's
   * endpoints: edge and cloud for a two-endpoint bundle); each call gets the request's text. Rejects
   * with EndpointsFailed (a CloudCallError) when no endpoint served (each endpoint past the request's
   * deadline a timeout), FallbackForbidden when the policy forbade the rest. */
  execute<T>(prompt: string | Request, endpoints: EndpointCalls<T>, options?: ExecuteOptions<T>): Promise<Execution<T>>;
  /** The two-endpoint spelling: the calls of the endpoints "edge" and "cloud". */
  execute<T>(prompt: string | Request, edge: EndpointCall<T>, cloud: EndpointCall<T>, options?: ExecuteOptions<T>): Promise<Execution<T>>;
  /** Record a conversation's turn the app ran itself after route() (execute() and RoutedChat record theirs);
   * false when the store could not be written. */
  recordTurn(conversation: string, endpoint: string | null,
    turn: { inputTokens: number; outputTokens?: number; outcome?: TurnOutcome }): Promise<boolean>;
  /** Add a turn's answer length known only once it was read (a stream's) to what execute() recorded of turn
   * `turn`; false when nothing was written (another turn since, another endpoint, no tokens, the store failing). */
  recordAnswer(conversation: string, answer: { turn: number; endpoint: string; outputTokens: number }): Promise<boolean>;
  /** The conversations' store and knob. */
  conversations: Conversations;
  /** Release the onnxruntime session. */
  close(): Promise<void>;
  readonly degraded: boolean;
  readonly degradedReason: string | null;
  /** an N-endpoint bundle's endpoints in its order; null for a two-endpoint bundle or the rule table */
  readonly endpointNames: string[] | null;
  readonly modelVersion: string;
  readonly edgeContextTokens: number;
  readonly unfamiliarPolicy: UnfamiliarPolicy | null;
  readonly manifest: Manifest | null;
  /** The bundle's learned acceptance check, or null (trained without edge answers, older, degraded). */
  readonly acceptor: Acceptor | null;
}

/** One checked answer. */
export interface Verdict {
  probability: number;
  threshold: number;
  accepted: boolean;
}

export interface Acceptor {
  readonly threshold: number;
  /** P(the edge answer is good), calibrated, against the bundle's threshold. TypeError for non-text. */
  check(prompt: string, answer: string, options?: { logprobMean?: number | null; logprobMin?: number | null }): Promise<Verdict>;
  /** The acceptance model's input row (float32). */
  features(prompt: string, answer: string, options?: { logprobMean?: number | null; logprobMin?: number | null }):
    Promise<Float32Array>;
}

/** One endpoint's call: the prompt, and a signal aborted when its timeout passes or the caller's
 * signal aborts (the call is abandoned then, whether or not it stops); `endpoint` is its name. */
export type EndpointCall<T> = (prompt: string, options: { signal: AbortSignal; endpoint: string }) => T | Promise<T>;
/** The earlier name of EndpointCall. */
export type EdgeCall<T> = EndpointCall<T>;
/** The endpoints' calls by name. */
export type EndpointCalls<T> = Record<string, EndpointCall<T>> | Map<string, EndpointCall<T>>;
/** The endpoints' specs: an Endpoints, EndpointSpecs, or by name an EndpointSpec or an object of its fields. */
export type SpecsInput = Endpoints | Iterable<EndpointSpec> | Map<string, EndpointSpec | SpecFields> | Record<string, EndpointSpec | SpecFields>;
/** An endpoint spec's fields as the runner reads them (what is left out is not declared). */
export interface SpecFields {
  where?: "device" | "cloud" | null;
  context_tokens?: number | null;
  price?: Price | { per_1m_input?: number; per_1m_output?: number; per_1m_cached_input?: number | null; per_call?: number;
    per_1k_input?: number; per_1k_output?: number } | null;
  latency_ms?: number | null;
  capabilities?: Capabilities | null;
}

export interface ExecuteOptions<T> {
  precision?: Precision | null;
  /** the endpoints' specs (context limits, prices, where each runs); default the bundle's own */
  specs?: SpecsInput | null;
  /** name -> milliseconds: a call not answered by then is abandoned (its signal aborted) and the next endpoint serves */
  timeoutsMs?: Record<string, number | null> | Map<string, number | null> | null;
  /** the edge's timeout (timeoutsMs.edge) */
  edgeTimeoutMs?: number | null;
  /** checks the answers the decision checks (Decision.checked; every answer but the last with
   * verifyEdgeZone); false or a throw moves on. "learned": the bundle's acceptance check (the call must answer a string). */
  accept?: ((answer: T) => unknown) | "learned" | null;
  /** check every answer but the last */
  verifyEdgeZone?: boolean;
  /** as route() takes them: a forbidden endpoint is never called (FallbackForbidden instead) */
  metadata?: Metadata | null;
  needs?: Needs | null;
  capabilities?: CapabilityMap | null;
  /** the request's conversation: decided with its state; the turn is recorded when the run ends */
  conversation?: string | null;
  /** the request's deadline (a performance.now() value): each call's timeout is cut to what is left;
   * once it has passed, the endpoints left are skipped as timeouts */
  deadline?: number | null;
  /** the caller's abort: stops the run and rejects with its reason */
  signal?: AbortSignal | null;
}

/** What the low-level execute() takes: the calls (endpoints, or edge and cloud) and the run's options. */
export interface RunOptions<T> {
  endpoints?: EndpointCalls<T> | null;
  edge?: EndpointCall<T> | null;
  cloud?: EndpointCall<T> | null;
  specs?: SpecsInput | null;
  /** the edge's context limit (a spec for "edge") */
  edgeContextTokens?: number | null;
  timeoutsMs?: Record<string, number | null> | Map<string, number | null> | null;
  edgeTimeoutMs?: number | null;
  accept?: ((answer: T) => unknown) | null;
  verifyEdgeZone?: boolean;
  /** the answer tokens expected_cost prices */
  outputTokens?: number;
  /** a performance.now() value no call outlives (the request's deadline) */
  deadline?: number | null;
  signal?: AbortSignal | null;
}

/** Carry out a decision (one from route(), or made elsewhere): its cascade over the calls. */
export function execute<T>(decision: Decision, prompt: string, options: RunOptions<T>): Promise<Execution<T>>;

/** One call that ran, or an accept check ("accept"). */
export interface Step {
  /** the endpoint's name, or "accept" */
  name: string;
  status: "ok" | "error" | "timeout" | "rejected" | "skipped";
  seconds: number;
  detail: string;
  /** what the call returned (not enumerable: never serialised) */
  readonly result?: unknown;
}

export type Outcome = "served" | "error" | "timeout" | "busy" | "context" | "rejected" | "forbidden";
export const OUTCOMES: readonly Outcome[];

/** One endpoint of the cascade, and why it was left. */
export class Tried {
  readonly endpoint: string;
  readonly outcome: Outcome;
  readonly seconds: number;
  /** the class name of what ended it (an error, a timeout, a throwing accept check), never its text */
  readonly error: string | null;
  /** the call's expected price: 0 when not called, null when called without a spec or price */
  readonly cost: number | null;
  /** what was thrown (not enumerable) */
  readonly exception: unknown;
  /** `name=outcome`, with the error class for errors and a throwing accept check */
  label(): string;
}
/** Every attempt as `name=outcome`, comma-separated. */
export function triedText(tried: readonly Tried[]): string;
/** none, timeout, connection_error or error. */
export function failureKind(error: unknown): string;
/** Why the endpoint before the serving one was left, as a fixed name; null when the first one reached served. */
export function fallbackKind(execution: Execution<unknown>, kindOf?: (error: unknown) => string): string | null;

/** The answer and how it was obtained (the Python SDK's Execution, field for field, without request_id). */
export interface Execution<T> {
  response: T;
  /** the serving endpoint's name */
  served_by: string;
  decision: Decision;
  /** why the endpoints before the serving one were left ("left edge=error:ConnectionError: ..."); null when the first one reached served */
  fallback_reason: string | null;
  fell_back: boolean;
  /** the first endpoint's failure, when another was to follow */
  edge_error: unknown;
  steps: Step[];
  /** the fallback reason without anything from the request ("left edge=error:ConnectionError") */
  fallback_code: string | null;
  /** each endpoint reached, in order, and why it was left */
  tried: Tried[];
  /** what the calls made are expected to cost by the specs; null when one has no spec or price */
  expected_cost: number | null;
}

/** No endpoint served (what code handling the cloud failing catches). */
export class CloudCallError extends Error {
  edge_error: unknown;
  steps: Step[];
  decision: Decision;
}
/** No endpoint of the cascade served: `tried` names each attempt; `cause` is the last call's error. */
export class EndpointsFailed extends CloudCallError {
  readonly tried: Tried[];
}
/** A call did not answer within its timeout (name "TimeoutError", as Python's). */
export class CallTimeoutError extends Error {
  readonly endpoint: string | null;
  readonly isTimeout: true;
}
/** The earlier name of CallTimeoutError. */
export { CallTimeoutError as EdgeTimeoutError };

/** The hand rule table (docs/baseline.md): the baseline, and what a degraded router uses. */
export class RuleRouter {
  static readonly modelVersion: "rule-table";
  constructor(tokenizer?: { ids(text: string, addSpecialTokens: boolean): number[] } | null, options?: { maxChars?: number });
  route(prompt: string, options?: { precision?: Precision | null }): Decision;
  routeBatch(prompts: Iterable<string>, precisions?: Iterable<Precision | null> | null): Decision[];
}

export function inferRuleDomain(text: string, headChars?: number): "finance" | "medical" | "legal" | null;
export function ruleScore(seqLen: number, domain: string | null, precision: Precision | null): number;

/** The bundle is missing, incomplete, tampered with, invalid, of an unknown schema version, or
 * one this runtime cannot run. */
export class BundleError extends Error {}
/** A key could not be read, or a signature does not verify. */
export class SigningError extends Error {}

// The routed chat client (src/chat.js): OpenAI-compatible chat calls with fetch, routed.

/** One chat message: role, content (text, an array of parts, or null) and whatever else the API carries. */
export interface ChatMessage {
  role: string;
  content?: string | Array<{ type: string; text?: string; [key: string]: unknown }> | null;
  [key: string]: unknown;
}

/** A chat completion as the serving model sent it (a key of the client in it reads [redacted]). */
export interface ChatCompletion {
  choices: Array<{ index?: number; message: { role?: string; content: string | null; [key: string]: unknown };
    finish_reason?: string | null; [key: string]: unknown }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number; [key: string]: unknown };
  [key: string]: unknown;
}

/** One chat.completion.chunk of a stream. */
export interface ChatCompletionChunk {
  choices?: Array<{ index?: number; delta?: { role?: string; content?: string | null; tool_calls?: unknown[]; [key: string]: unknown };
    finish_reason?: string | null; [key: string]: unknown }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number; [key: string]: unknown } | null;
  [key: string]: unknown;
}

interface Priced {
  readonly model: string;
  readonly timeoutMs: number;
  readonly firstTokenTimeoutMs: number | null;
  readonly inputPricePer1M: number | null;
  readonly outputPricePer1M: number | null;
  /** The price of one answer from its usage; null when a price or the usage is missing. */
  cost(usage: unknown): number | null;
}

export interface EndpointOptions {
  /** the API root as OpenAI clients take it ("http://127.0.0.1:11434/v1" for Ollama); no credentials, query or fragment */
  baseUrl: string | URL;
  /** the model name the server expects */
  model: string;
  /** sent as `Authorization: Bearer ...`; never shown (not in the object, errors or results) */
  apiKey?: string | null;
  /** the whole answer, streamed or not, within this of the call (default 60000) */
  timeoutMs?: number;
  /** a stream's first token within this (default and at most timeoutMs) */
  firstTokenTimeoutMs?: number | null;
  /** price of a million prompt / completion tokens; both set for routing.estimated_cost */
  inputPricePer1M?: number | null;
  outputPricePer1M?: number | null;
  /** a larger answer (or stream event) counts as malformed (default 8 MiB, at least 1024) */
  maxResponseBytes?: number;
  /** extra headers for every request (not the key: Authorization is refused); never shown */
  headers?: Record<string, string>;
}

/** An OpenAI-compatible chat-completions server and model (llama.cpp's server, Ollama, vLLM, a cloud API). */
export class Endpoint implements Priced {
  constructor(options: EndpointOptions);
  readonly baseUrl: string;
  readonly model: string;
  readonly timeoutMs: number;
  readonly firstTokenTimeoutMs: number | null;
  readonly inputPricePer1M: number | null;
  readonly outputPricePer1M: number | null;
  readonly maxResponseBytes: number;
  /** where chat completions are posted: baseUrl + "/chat/completions" */
  readonly url: string;
  readonly hasApiKey: boolean;
  cost(usage: unknown): number | null;
}

/** What a LocalModel is called with. */
export interface LocalCallOptions {
  /** the chat-completions parameters of the request (temperature, max_tokens, ...) */
  params: Record<string, unknown>;
  stream: boolean;
  /** aborted at the deadline, or when the caller aborts */
  signal: AbortSignal;
}

/** A model the page or process runs itself; answers text, a chat completion, or for a stream an
 * async iterable of text pieces or chunks. */
export type LocalCall = (messages: ChatMessage[], options: LocalCallOptions) =>
  string | ChatCompletion | AsyncIterable<string | ChatCompletionChunk> | Promise<string | ChatCompletion | AsyncIterable<string | ChatCompletionChunk>>;

export class LocalModel implements Priced {
  constructor(call: LocalCall, options?: { model?: string; timeoutMs?: number; firstTokenTimeoutMs?: number | null;
    inputPricePer1M?: number | null; outputPricePer1M?: number | null });
  readonly call: LocalCall;
  readonly model: string;
  readonly timeoutMs: number;
  readonly firstTokenTimeoutMs: number | null;
  readonly inputPricePer1M: number | null;
  readonly outputPricePer1M: number | null;
  cost(usage: unknown): number | null;
}

export type FallbackKind = "context_limit" | "rejected" | "accept_error" | "forbidden" | "connection_error" | "timeout"
  | "slow_first_token" | "http_error" | "malformed" | "error";

/** How one request was served (the Python SDK's RoutingInfo, field for field, without request_id). */
export interface RoutingInfo {
  decision: Decision;
  /** the serving endpoint's name */
  served_by: string;
  /** the model that answered */
  model: string;
  /** why the endpoints before the serving one were left; null when the first one reached served */
  fallback_reason: string | null;
  fallback_kind: FallbackKind | null;
  /** each call; for a stream a step's seconds run to its first token */
  steps: Step[];
  /** the price of every answer the request produced; null when any is unknown (a stream: set when it ends) */
  estimated_cost: number | null;
  /** from the call to the complete answer (a stream: set when it ends) */
  seconds: number | null;
  /** each endpoint reached, in order, and why it was left */
  tried: Tried[];
  /** what the calls made are expected to cost by the specs (the bundle's, or the client's) */
  expected_cost: number | null;
}

/** A non-streamed answer. */
export interface Completion {
  /** the chat completion of whichever model served, as it sent it (a key of the client in it reads [redacted]) */
  body: ChatCompletion;
  routing: RoutingInfo;
  /** the assistant text */
  text: string;
}

/** A streamed answer: `for await (const chunk of stream)`. No fallback once the first chunk is
 * out: a later break throws StreamInterrupted. `break` or close() releases the connection. */
export class ChatStream implements AsyncIterableIterator<ChatCompletionChunk> {
  readonly routing: RoutingInfo;
  next(): Promise<IteratorResult<ChatCompletionChunk>>;
  return(): Promise<IteratorResult<ChatCompletionChunk>>;
  close(): void;
  [Symbol.asyncIterator](): ChatStream;
}

export interface CreateOptions {
  precision?: Precision | null;
  /** the request's metadata for the router's policy, never sent; an answer's cost counts against the budgets it names */
  metadata?: Metadata | null;
  /** the caller's abort: stops every call and rejects with its reason */
  signal?: AbortSignal | null;
  /** a performance.now() value by which the answer (a stream: its first token) must be there: each
   * endpoint's call is cut to what is left, and once it has passed the endpoints left are skipped */
  deadline?: number | null;
  /** the conversation's id: the turn is decided with its state and recorded (a stream when it opens, its answer's length at its end) */
  conversation?: string | null;
  /** any other chat-completions parameter, sent as is (not `model` or `messages`) */
  [param: string]: unknown;
}

export interface RoutedChatOptions {
  /** the two endpoints of a two-endpoint bundle ... */
  edge?: Endpoint | LocalModel | LocalCall;
  cloud?: Endpoint | LocalModel | LocalCall;
  /** ... or the bundle's endpoints by name, tried in each decision's cascade order */
  endpoints?: Record<string, Endpoint | LocalModel | LocalCall> | Map<string, Endpoint | LocalModel | LocalCall>;
  /** the endpoints' specs for routing and execution (context limits, prices, where each runs); default the bundle's */
  specs?: SpecsInput | null;
  /** apply the accept check to confident edge answers too */
  verifyEdgeZone?: boolean;
  /** messages -> the text the router routes (default: conversationPrompt) */
  toPrompt?: (messages: ChatMessage[]) => string;
  /** called with the routing of every answered request once it is final; a throw is logged */
  onRouted?: ((routing: RoutingInfo) => void) | null;
  logger?: { warn(message: string): void };
}

/** Routed OpenAI-compatible chat: the router decides, the decision's cascade is carried out over the endpoints. */
export class RoutedChat {
  constructor(router: RouterMethods, options: RoutedChatOptions);
  /** the endpoints by name */
  readonly endpoints: Readonly<Record<string, Endpoint | LocalModel>>;
  /** the endpoints named edge and cloud, or null */
  readonly edge: Endpoint | LocalModel | null;
  readonly cloud: Endpoint | LocalModel | null;
  /** `messages`: the conversation, or a Request holding it (then precision, metadata and deadline are its own). */
  create(messages: ChatMessage[] | Request, options: CreateOptions & { stream: true; accept?: null }): Promise<ChatStream>;
  create(messages: ChatMessage[] | Request, options?: CreateOptions & { stream?: false;
    accept?: ((text: string, body: ChatCompletion) => unknown) | "learned" | null }): Promise<Completion>;
}

/** The text the router routes for a conversation: the latest user message, the other turns newest first, system messages last. */
export function conversationPrompt(messages: ChatMessage[]): string;

/** An endpoint did not give a usable answer. */
export class UpstreamError extends Error {
  constructor(endpoint: string, message: string);
  /** the endpoint's name */
  readonly endpoint: string;
  readonly kind: string;
}
/** No connection, or it broke before a complete answer. */
export class UpstreamUnreachable extends UpstreamError {}
/** No complete answer within timeoutMs. */
export class UpstreamTimeout extends UpstreamError {}
/** A stream's first token later than firstTokenTimeoutMs. */
export class SlowFirstToken extends UpstreamTimeout {}
/** An HTTP error status; `detail` is the server's message, redacted of the client's keys. */
export class UpstreamHTTPError extends UpstreamError {
  readonly status: number;
  readonly detail: string;
}
/** 2xx, but not a chat completion (not JSON, no choices, an error event, too large, a redirect). */
export class UpstreamMalformed extends UpstreamError {}
/** A stream broke after its first chunk had reached the caller. */
export class StreamInterrupted extends UpstreamError {}

/** An endpoint spec that cannot be used; the message names the source, the endpoint and the field
 * (the Python SDK's text). */
export class EndpointSpecError extends Error {}

/** Per 1M input tokens, per 1M output tokens, per 1M cached input tokens (null: priced as input)
 * and per call. A call is priced per 1,000 tokens: the per-1M figure / 1000 in decimal, or the per-1k
 * figures given (Price.fromPer1k, per_1k_* keys), bit for bit as the Python SDK prices it. */
export class Price {
  readonly per_1m_input: number;
  readonly per_1m_output: number;
  readonly per_1m_cached_input: number | null;
  readonly per_call: number;
  /** the per-1,000-token rates calls are priced with */
  readonly per_1k_input: number;
  readonly per_1k_output: number;
  /** per 1M, or the earlier per_1k_input / per_1k_output (then as fromPer1k) */
  constructor(fields?: { per_1m_input?: number; per_1m_output?: number; per_1m_cached_input?: number | null; per_call?: number;
    per_1k_input?: number; per_1k_output?: number });
  static fromPer1k(fields?: { per_1k_input?: number; per_1k_output?: number; per_call?: number; per_1m_cached_input?: number | null }): Price;
  callCost(inputTokens: number, outputTokens?: number, cachedInputTokens?: number): number;
  /** callCost, by its earlier name */
  cost(inputTokens: number, outputTokens?: number): number;
  asDict(): { per_1m_input: number; per_1m_output: number; per_call: number; per_1m_cached_input?: number };
}

/** What an endpoint accepts; `languages` null when not known. */
export class Capabilities {
  readonly images: boolean;
  readonly tools: boolean;
  readonly json: boolean;
  readonly languages: readonly string[] | null;
  constructor(fields?: { images?: boolean; tools?: boolean; json?: boolean; languages?: string[] | null });
  asDict(): Record<string, unknown>;
}

/** One model a request may run on (serving.endpoints._record.Endpoint's decision fields); null is "not
 * declared": no context limit, no constraint of capabilities, no price. */
export class EndpointSpec {
  constructor(fields: { name: string; where?: "device" | "cloud" | null; price?: Price | null; latency_ms?: number | null;
    context_tokens?: number | null; capabilities?: Capabilities | null; description?: string; prefill_tokens_per_s?: number | null });
  readonly name: string;
  readonly where: "device" | "cloud" | null;
  readonly price: Price | null;
  readonly latency_ms: number | null;
  readonly context_tokens: number | null;
  readonly capabilities: Capabilities | null;
  readonly description: string;
  readonly prefill_tokens_per_s: number | null;
  /** the expected price of one call; null without a price */
  callCost(inputTokens: number, outputTokens?: number, cachedInputTokens?: number): number | null;
  cost(inputTokens: number, outputTokens?: number): number | null;
  fits(inputTokens: number): boolean;
  supports(needs?: { images?: boolean; tools?: boolean; json?: boolean; language?: string | null }): boolean;
  /** this spec with each field it does not declare (null) taken from `other` */
  filledFrom(other: EndpointSpec | null | undefined): EndpointSpec;
  asDict(): Record<string, unknown>;
}

/** The endpoints of a deployment, in their spec's order. */
export class Endpoints implements Iterable<EndpointSpec> {
  readonly endpoints: readonly EndpointSpec[];
  readonly source: string;
  readonly names: string[];
  readonly length: number;
  [Symbol.iterator](): Iterator<EndpointSpec>;
  /** RangeError when there is no endpoint of that name */
  get(name: string): EndpointSpec;
  costs(inputTokens: number, outputTokens?: number): Record<string, number | null>;
  asDict(): { endpoints: Record<string, unknown>[] };
}

/** Endpoints from a decoded spec ({"endpoints": [...]} or {"edge": {...}, "cloud": {...}}); `callSettings`
 * (default true): the file may say how each is called (accepted, not kept here; a key is refused). */
export function parseEndpoints(data: unknown, options?: { source?: string; callSettings?: boolean }): Endpoints;
export function parseEndpoint(item: unknown, options: { where: string; name?: string | null; callSettings?: boolean }): EndpointSpec;
/** A two-endpoint bundle's endpoints as its router sees them: the edge with that context limit, the cloud with none. */
export function twoEndpointSpecs(edgeContextTokens: number): [EndpointSpec, EndpointSpec];

/** A choice rule among N endpoints and the name of its one parameter. */
export type EndpointRule = "cheapest_within" | "best_under_price" | "cascade";
export const ENDPOINT_RULES: Readonly<Record<EndpointRule, "margin" | "price" | "start_margin">>;

/** route(): the policy, what the request needs or the context limits leave no endpoint. Nothing was called. */
export class NoFeasibleEndpoint extends PolicyError {}

/** No feasible endpoint (serving.endpoints._choice.NONE). */
export const NONE: -1;
export function callCosts(endpoints: Iterable<EndpointSpec>, inputTokens: Iterable<number>, outputTokens: number):
  { cost: number[][]; fits: boolean[][] };
export function cheapestWithin(expected: number[][], cost: number[][], margin: number, feasible?: boolean[][] | null): number[];
export function bestUnderPrice(expected: number[][], cost: number[][], price: number, feasible?: boolean[][] | null): number[];
export function cascade(expected: number[][], cost: number[][], startMargin: number, feasible?: boolean[][] | null): number[][];
export function escalation(expected: number[][], cost: number[][], first: number[], feasible?: boolean[][] | null): number[][];
export function cascadeExpectation(orders: number[][], quality: number[][], cost: number[][], catchRate: number):
  { quality: number[]; cost: number[] };
