// The policy layer (docs/js.md#policies): rules, content detectors, budgets, capabilities.
export { DETECTORS, Detector, Folded, anyDetected, detect, fold, foldChar } from "./detectors.js";
export { FallbackForbidden, LanguageDetectorMissing, NoFeasibleEndpoint, PolicyError, PolicyFileError } from "./errors.js";
export { ENDPOINTS, MAX_POLICY_BYTES, PolicySet, Rule, Verdict, checkMetadata, decodePolicy } from "./rules.js";
export { PERIODS, Spending, holderId, limitsOf } from "./budgets.js";
export { CAPABILITIES, Needs, needsOf } from "./capabilities.js";
