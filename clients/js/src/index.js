// The edge-cloud router's SDK for Node: the Python SDK's Router contract (docs/sdk.md) on a
// bundle folder, node:crypto and onnxruntime-node. Browsers import web.js instead.
import { BaseRouter } from "./router.js";
import { nodeCrypto, nodePlatform, readPolicyFile } from "./node/platform.js";
import { createHash } from "node:crypto";
import { canonicalBytes, verifiedBundle, withoutDigest } from "./bundle.js";

export class Router extends BaseRouter {
  /**
   * Load and verify a bundle folder; see index.d.ts.
   * @param {string} folder
   * @param {import("./index.js").LoadOptions} [options]
   */
  static load(folder, options) {
    return this.loadWith(nodePlatform, folder, options);
  }
}

/** Read and verify a bundle folder without loading its model (BundleError on any problem). */
export function readBundle(folder, { publicKey = null } = {}) {
  return verifiedBundle(String(folder), nodePlatform.files(folder), nodeCrypto, { publicKey });
}

/** The SHA-256 a manifest's manifest_sha256 must hold (of Python's canonical JSON without it). */
export function manifestDigest(manifest) {
  return createHash("sha256").update(canonicalBytes(withoutDigest(manifest))).digest("hex");
}

export { loadPublicKey } from "./node/platform.js";

/** The policy file at `path` (JSON) for a router whose endpoints are `endpoints` (default edge and
 * cloud; an N-endpoint bundle's: router.policyEndpoints). PolicyFileError naming the rule and key. */
export async function loadPolicy(path, { endpoints } = {}) {
  const { PolicySet } = await import("./policy/rules.js");
  return PolicySet.parse(await readPolicyFile(String(path)), { source: String(path), ...(endpoints ? { endpoints } : {}) });
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
