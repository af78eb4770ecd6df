// The edge-cloud router's SDK for Node: the Python SDK's Router contract (docs/sdk.md).
export { Router } from "./router.js";
export { RuleRouter, inferRuleDomain, ruleScore } from "./rules.js";
export { BundleError, manifestDigest, readBundle } from "./bundle.js";
export { SigningError, loadPublicKey } from "./signing.js";
export { CLOUD, EDGE, FALLBACK, PRECISIONS, UNFAMILIAR_POLICIES, ZONES } from "./contract.js";
