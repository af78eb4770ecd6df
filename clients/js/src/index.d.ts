// Types of the Node SDK (the sources are JavaScript with JSDoc; this file is what users' editors
// and TypeScript read). Field names of Decision are the Python SDK's, so both serialise alike.
import type { KeyObject } from "node:crypto";

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
}

/** A public key to pin: a KeyObject, PEM text, a path to a PEM file (router.pub), PEM bytes or
 * the 32 raw key bytes. A string starting with "-----BEGIN" is PEM, any other a path. */
export type PublicKeyInput = KeyObject | string | Uint8Array;

export interface LoadOptions {
  /** throw BundleError instead of routing on the rule table when the bundle cannot serve */
  strict?: boolean;
  /** onnxruntime's intra-op threads (default 1) */
  threads?: number;
  /** overrides the bundle's policy for prompts unlike its training data */
  unfamiliarPolicy?: UnfamiliarPolicy | null;
  /** pin the team's Ed25519 key: a bundle without its signature counts as tampered */
  publicKey?: PublicKeyInput | null;
  /** where the one warning of a degraded load (and of a scoring failure) goes; default console */
  logger?: { warn(message: string): void };
}

export interface Manifest {
  modelVersion: string;
  featureSpec: { tier: string; maxTokens: number; maxChars: number; embeddingDim: number; addSpecialTokens: boolean;
    encoderRowWise: boolean; fused: boolean; precisions: readonly Precision[]; lexical: string };
  score: { kind: "expected_gain" | "cloud_needed"; heads: string[]; outputs: string[] };
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

export class Router {
  /** Load and verify a bundle folder. Never rejects unless `strict` (BundleError) or an option is
   * invalid (RangeError): a bundle that cannot serve gives a router on the rule table. */
  static load(source: string, options?: LoadOptions): Promise<Router>;
  /** Where one prompt should run. Rejects only for argument errors (TypeError, RangeError). */
  route(prompt: string, options?: { precision?: Precision | null }): Promise<Decision>;
  /** Decisions for many prompts, scored in one onnxruntime call. */
  routeBatch(prompts: Iterable<string>, precisions?: Iterable<Precision | null> | null): Promise<Decision[]>;
  /** Route, then run: edge or cloud first as decided, the cloud as fallback. Throws
   * CloudCallError when the cloud fails. */
  execute<T>(prompt: string, edge: EdgeCall<T>, cloud: (prompt: string) => T | Promise<T>, options?: ExecuteOptions<T>):
    Promise<Execution<T>>;
  /** Release the onnxruntime session. */
  close(): Promise<void>;
  readonly degraded: boolean;
  readonly degradedReason: string | null;
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

/** An edge call: its signal is aborted when edgeTimeoutMs passes. */
export type EdgeCall<T> = (prompt: string, options: { signal: AbortSignal }) => T | Promise<T>;

export interface ExecuteOptions<T> {
  precision?: Precision | null;
  /** fall back to the cloud when the edge has not answered by then (its signal is aborted) */
  edgeTimeoutMs?: number | null;
  /** checks an edge answer in the edge_with_cloud_fallback zone; false or a throw falls back.
   * "learned": the bundle's acceptance check (the edge must answer a string). */
  accept?: ((answer: T) => unknown) | "learned" | null;
  /** check confident edge answers too */
  verifyEdgeZone?: boolean;
}

/** One call that ran. */
export interface Step {
  name: "edge" | "accept" | "cloud";
  status: "ok" | "error" | "timeout" | "rejected" | "skipped";
  seconds: number;
  detail: string;
}

/** The answer and how it was obtained (the Python SDK's Execution, field for field). */
export interface Execution<T> {
  response: T;
  served_by: "edge" | "cloud";
  decision: Decision;
  fallback_reason: string | null;
  fell_back: boolean;
  /** the edge failure the cloud answered after, if any */
  edge_error: unknown;
  steps: Step[];
  /** the fallback reason without anything from the request */
  fallback_code: string | null;
}

/** The cloud call failed. */
export class CloudCallError extends Error {
  edge_error: unknown;
  steps: Step[];
  decision: Decision;
}
/** The edge call did not answer within edgeTimeoutMs. */
export class EdgeTimeoutError extends Error {}

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

export function readBundle(folder: string, options?: { publicKey?: PublicKeyInput | null }):
  Promise<{ folder: string; manifest: Manifest; contents: Map<string, Buffer> }>;
/** SHA-256 of the manifest's canonical JSON (Python's json.dumps(sort_keys=True, ensure_ascii=True)) without manifest_sha256. */
export function manifestDigest(manifest: Record<string, unknown>): string;
export function loadPublicKey(key: PublicKeyInput): KeyObject;
