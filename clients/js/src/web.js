// The edge-cloud router's SDK for browsers: the same Router on a bundle published at a URL,
// WebCrypto and onnxruntime-web. The page maps "onnxruntime-web" and "@huggingface/tokenizers"
// (an import map or a bundler) and tells onnxruntime-web where its .wasm files are
// (ort.env.wasm.wasmPaths).
import { BaseRouter } from "./router.js";
import { fetchPolicyBytes, webPlatform } from "./web/platform.js";
import { PolicySet } from "./policy/rules.js";

export class Router extends BaseRouter {
  /**
   * Load and verify the bundle whose files are under `baseUrl`; the options of index.js, and
   * `fetchOptions` for every request (credentials, headers).
   */
  static load(baseUrl, { fetchOptions = {}, ...options } = {}) {
    return this.loadWith(webPlatform(fetchOptions), baseUrl, options);
  }
}

/** The policy file at `url` (JSON) for a router whose endpoints are `endpoints` (default edge and
 * cloud); `fetchOptions` go to the request. */
export async function fetchPolicy(url, { endpoints, fetchOptions = {} } = {}) {
  return PolicySet.parse(await fetchPolicyBytes(String(url), fetchOptions), { source: String(url), ...(endpoints ? { endpoints } : {}) });
}

export { BundleError, SigningError } from "./bundle.js";
export { RuleRouter, inferRuleDomain, ruleScore } from "./rules.js";
export { CallTimeoutError, CloudCallError, EdgeTimeoutError, EndpointsFailed, OUTCOMES, Tried, execute, fallbackKind, failureKind, triedText } from "./execute.js";
export { ChatStream, Endpoint, LocalModel, RoutedChat, SlowFirstToken, StreamInterrupted, UpstreamError, UpstreamHTTPError,
  UpstreamMalformed, UpstreamTimeout, UpstreamUnreachable, conversationPrompt } from "./chat.js";
export { CLOUD, EDGE, ENDPOINT_RULES, FALLBACK, PRECISIONS, UNFAMILIAR_POLICIES, ZONES } from "./contract.js";
export { Request } from "./request.js";
export { CLOUD_CACHE_TTL_S, ConversationState, ConversationStoreError, Conversations, Held, MemoryStore, OUTCOMES as TURN_OUTCOMES, RETRY_S,
  Stickiness, switchCosts } from "./conversations.js";
export { FEATURES as TURN_EVIDENCE_FEATURES, TurnEvidence, TurnEvidenceError } from "./evidence.js";
export { Capabilities, EndpointSpec, EndpointSpecError, Endpoints, Price, parseEndpoint, parseEndpoints, twoEndpointSpecs } from "./endpoints.js";
export { CAPABILITIES, DETECTORS, ENDPOINTS, FallbackForbidden, LanguageDetectorMissing, Needs, NoFeasibleEndpoint, PERIODS,
  PolicyError, PolicyFileError, PolicySet, Spending, anyDetected, detect, fold, needsOf } from "./policy/index.js";
export { NONE, bestUnderPrice, callCosts, cascade, cascadeExpectation, cheapestWithin, escalation } from "./endpoint-choice.js";
