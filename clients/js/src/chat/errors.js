// What can go wrong with a chat endpoint, as errors the fallback rules understand, and the
// redaction of keys from whatever an endpoint sends back (serving/chat/errors.py).
//
// Every failure of an edge call falls back to the cloud (execute.js); an UpstreamTimeout counts
// as a timeout there (its step says "timeout"), as Python's TimeoutError does. Messages name the
// endpoint ("edge"/"cloud") and its model, never its URL or key, and any text an endpoint sent
// back passes through `redact` with the client's keys first, so a server that echoes a key cannot
// put it into an error, a step or a log line. A JSON value is redacted once decoded
// (`redactValue`), where an escaped `sk\u002d...` reads as the key.
import { EdgeTimeoutError } from "../execute.js";

export const REDACTED = "[redacted]";
export const MAX_DETAIL_CHARS = 300;  // of an endpoint's error text kept in a message
export const MIN_SECRET_CHARS = 4;    // shorter "keys" (a local server's placeholder such as "x") are not hunted

/** An endpoint did not give a usable answer. `endpoint` is "edge" or "cloud"; `kind` a short fixed name. */
export class UpstreamError extends Error {
  constructor(endpoint, message) {
    super(`${endpoint}: ${message}`);
    this.name = new.target.name;
    this.endpoint = endpoint;
  }
  get kind() { return "error"; }
}

/** No connection, or the connection broke before a complete answer. */
export class UpstreamUnreachable extends UpstreamError {
  get kind() { return "connection_error"; }
}

/** No complete answer within the endpoint's `timeoutMs`. */
export class UpstreamTimeout extends UpstreamError {
  get kind() { return "timeout"; }
  /** execute.js reads a timeout by this mark (Python: a TimeoutError). */
  get isTimeout() { return true; }
}

/** A stream's first token did not arrive within `firstTokenTimeoutMs`. */
export class SlowFirstToken extends UpstreamTimeout {
  get kind() { return "slow_first_token"; }
}

/** The endpoint answered with an HTTP error status: `status`, and `detail` its redacted message. */
export class UpstreamHTTPError extends UpstreamError {
  constructor(endpoint, message, { status, detail = "" }) {
    super(endpoint, message);
    this.status = status;
    this.detail = detail;
  }
  get kind() { return "http_error"; }
}

/** The endpoint answered 2xx, but not with a chat completion (not JSON, no choices, too large...). */
export class UpstreamMalformed extends UpstreamError {
  get kind() { return "malformed"; }
}

/** A stream broke after chunks had reached the caller: too late for a fallback. */
export class StreamInterrupted extends UpstreamError {
  get kind() { return "stream_interrupted"; }
}

/** A short, fixed name for why a call failed (serving/chat/errors.py failure_kind). */
export function failureKind(error) {
  if (error instanceof UpstreamError) return error.kind;
  if (error === null || error === undefined) return "none";
  if (error instanceof EdgeTimeoutError || error?.name === "TimeoutError") return "timeout";
  return "error";
}

const hunted = (secrets) => secrets.filter((s) => typeof s === "string" && s.length >= MIN_SECRET_CHARS);

/** `text` with every secret (of MIN_SECRET_CHARS or more) replaced by [redacted]. `cut`: the text
 * may end where a read stopped, so an end that begins a secret goes too. */
export function redact(text, secrets, { cut = false } = {}) {
  for (const secret of hunted(secrets)) {
    text = text.split(secret).join(REDACTED);
    if (cut) {
      for (let length = secret.length - 1; length >= MIN_SECRET_CHARS; length--) {
        if (text.endsWith(secret.slice(0, length))) {
          text = text.slice(0, -length) + REDACTED;
          break;
        }
      }
    }
  }
  return text;
}

/** A decoded JSON value with every secret in its strings and keys replaced; `value` itself when
 * none holds one. */
export function redactValue(value, secrets) {
  const kept = hunted(secrets);
  return kept.length ? redacted(value, kept) : value;
}

/** `value` as JSON text holding no secret: redacted as decoded, then as written. */
export function redactedJson(value, secrets) {
  return redact(JSON.stringify(redactValue(value, secrets)) ?? String(value), secrets);
}

function redacted(value, secrets) {
  if (typeof value === "string") return secrets.some((s) => value.includes(s)) ? redact(value, secrets) : value;
  if (Array.isArray(value)) {
    const items = value.map((v) => redacted(v, secrets));
    return items.some((v, i) => v !== value[i]) ? items : value;
  }
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value);
    const items = entries.map(([k, v]) => [redacted(k, secrets), redacted(v, secrets)]);
    return items.some(([k, v], i) => k !== entries[i][0] || v !== entries[i][1]) ? Object.fromEntries(items) : value;
  }
  return value;
}
