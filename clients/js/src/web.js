// The edge-cloud router's SDK for browsers: the same Router on a bundle published at a URL,
// WebCrypto and onnxruntime-web. The page maps "onnxruntime-web" and "@huggingface/tokenizers"
// (an import map or a bundler) and tells onnxruntime-web where its .wasm files are
// (ort.env.wasm.wasmPaths).
import { BaseRouter } from "./router.js";
import { webPlatform } from "./web/platform.js";

export class Router extends BaseRouter {
  /**
   * Load and verify the bundle whose files are under `baseUrl`; the options of index.js, and
   * `fetchOptions` for every request (credentials, headers).
   */
  static load(baseUrl, { fetchOptions = {}, ...options } = {}) {
    return this.loadWith(webPlatform(fetchOptions), baseUrl, options);
  }
}

export { BundleError, SigningError } from "./bundle.js";
export { RuleRouter, inferRuleDomain, ruleScore } from "./rules.js";
export { CloudCallError, EdgeTimeoutError } from "./execute.js";
export { ChatStream, Endpoint, LocalModel, RoutedChat, SlowFirstToken, StreamInterrupted, UpstreamError, UpstreamHTTPError,
  UpstreamMalformed, UpstreamTimeout, UpstreamUnreachable, conversationPrompt } from "./chat.js";
export { CLOUD, EDGE, FALLBACK, PRECISIONS, UNFAMILIAR_POLICIES, ZONES } from "./contract.js";
export { ENDPOINT_RULES, NoFeasibleEndpoint } from "./endpoint-routing.js";
