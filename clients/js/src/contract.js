// The contract between training and the SDKs (serving/_contract.py): names and bounds both sides
// agree on. Kept in step with the Python module by hand; the parity vectors catch a drift.

export const SCHEMA_VERSION = 1;
export const MANIFEST_NAME = "manifest.json";
export const SIGNATURE_NAME = "manifest.sig";

export const PRECISIONS = Object.freeze(["exact", "standard", "tolerant"]);
export const EDGE = "edge";
export const FALLBACK = "edge_with_cloud_fallback";
export const CLOUD = "cloud";
export const ZONES = Object.freeze([EDGE, FALLBACK, CLOUD]);
export const UNFAMILIAR_POLICIES = Object.freeze(["edge_with_cloud_fallback", "rule_table", "learned"]);
/** An N-endpoint bundle's choice rule -> the name of its one parameter (serving.bundle._manifest.ENDPOINT_RULES). */
export const ENDPOINT_RULES = Object.freeze({ cheapest_within: "margin", best_under_price: "price", cascade: "start_margin" });

export const DEFAULT_MAX_CHARS = 2048;
export const DEFAULT_EDGE_CONTEXT_TOKENS = 1024;

export const MAX_MANIFEST_BYTES = 4 << 20;
export const MAX_FILE_BYTES = 512 << 20;
export const MAX_TOKENS_LIMIT = 8192;
export const MAX_CHARS_LIMIT = 1 << 20;
export const MAX_EMBEDDING_DIM = 4096;
export const MAX_CALIBRATION_POINTS = 100_000;

/** edge below `lo`, cloud above `hi`, edge_with_cloud_fallback in between (inclusive). */
export function zoneFor(score, lo, hi) {
  if (score < lo) return EDGE;
  if (score > hi) return CLOUD;
  return FALLBACK;
}

/** Where a request in this zone runs first. */
export function firstTarget(zone) {
  return zone === CLOUD ? "cloud" : "edge";
}
