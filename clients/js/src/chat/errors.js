// What can go wrong with a chat endpoint, as errors the fallback rules understand, and the
// redaction of keys from whatever an endpoint sends back (serving/chat/_errors.py).
//
// Every failure of an endpoint's call moves on to the next endpoint of the cascade (execute.js); an
// UpstreamTimeout counts as a timeout there (its step says "timeout"), as Python's TimeoutError
// does. Messages name the endpoint (its name: "edge", "cloud", "phone-3b") and its model, never its URL or key, and any text an endpoint sent
// back passes through `redact` with the client's keys first, so a server that echoes a key cannot
// put it into an error, a step or a log line. A JSON value is redacted once decoded
// (`redactValue`), where an escaped `sk\u002d...` reads as the key.
import { failureKind as callFailureKind } from "../execute.js";

export const REDACTED = "[redacted]";
export const MAX_DETAIL_CHARS = 300;  // of an endpoint's error text kept in a message
export const MIN_SECRET_CHARS = 4;    // shorter "keys" (a local server's placeholder such as "x") are not hunted

/** An endpoint did not give a usable answer. `endpoint` is its name; `kind` a short fixed name. */
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

/** A short, fixed name for why a call failed (serving/chat/_errors.py failure_kind): an
 * UpstreamError's kind, else execute.js's (timeout, connection_error, error). */
export function failureKind(error) {
  if (error instanceof UpstreamError) return error.kind;
  return callFailureKind(error);
}

/** The secrets redaction hunts: strings of MIN_SECRET_CHARS or more. */
export const huntedSecrets = (secrets) => secrets.filter((s) => typeof s === "string" && s.length >= MIN_SECRET_CHARS);

/** `text` with every secret (of MIN_SECRET_CHARS or more) replaced by [redacted]. `cut`: the text
 * may end where a read stopped, so an end that begins a secret goes too. */
export function redact(text, secrets, { cut = false } = {}) {
  for (const secret of huntedSecrets(secrets)) {
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

/** One text that arrives in pieces (a stream's content, say), redacted across the pieces: each
 * push() gives the text that is safe to show so far, redacted; flush() the rest at the end. A
 * key split over any number of pieces is replaced as a whole, and the joined text is `redact` of
 * the joined pieces (a stream cut short: with `cut`), however the text was cut into pieces.
 *
 * What is held back is only what could still become a key: the end of the text seen so far that
 * begins one (so at most the longest key's length - 1 characters), kept unredacted until the next
 * piece says whether the key follows. Text that ends in no beginning of a key is passed on
 * whole; with no key to hunt every piece comes back as it went in. As `redact` replaces one key
 * after the other, each key has a stage of its own, fed what the stage before it gives. */
export class StreamRedactor {
  #stages;

  constructor(secrets) {
    this.#stages = huntedSecrets(secrets).map((secret) => new KeyStage(secret));
  }

  /** The text of `piece` (and of what was held before it) that no later piece can make part of a key, redacted. */
  push(piece) {
    return this.#stages.reduce((text, stage) => stage.push(text), piece);
  }

  /** What is held back, redacted (`cut`: the text stopped short, so an end that begins a key goes
   * too); the redactor starts afresh. */
  flush({ cut = false } = {}) {
    return this.#stages.reduce((text, stage) => stage.push(text) + stage.flush(cut), "");
  }
}

/** One key of a StreamRedactor (private fields: the key and what is held of it are never shown by inspect). */
class KeyStage {
  #secret;
  #tail = "";

  constructor(secret) {
    this.#secret = secret;
  }

  push(piece) {
    const secret = this.#secret;
    const text = this.#tail + piece;
    let cut = text.length - this.#keyStart(text);
    if (cut > 0 && cut < text.length && isHighSurrogate(text.charCodeAt(cut - 1))) cut--;  // not between a pair's halves
    // Never cut in two a key `redact` replaces (found as it finds them: leftmost first, not
    // overlapping): one that starts before the cut is whole in `text`, so the cut moves to its end.
    for (let at = text.indexOf(secret); at !== -1 && at < cut; at = text.indexOf(secret, at + secret.length)) {
      if (at + secret.length > cut) cut = at + secret.length;
    }
    this.#tail = text.slice(cut);
    return redact(text.slice(0, cut), [secret]);
  }

  flush(cut) {
    const tail = this.#tail;
    this.#tail = "";
    return tail && redact(tail, [this.#secret], { cut });
  }

  /** The length of the longest end of `text` that begins the key (and is not all of it). */
  #keyStart(text) {
    for (let length = Math.min(this.#secret.length - 1, text.length); length > 0; length--) {
      if (text.endsWith(this.#secret.slice(0, length))) return length;
    }
    return 0;
  }
}

const isHighSurrogate = (code) => code >= 0xd800 && code <= 0xdbff;

/** A decoded JSON value with every secret in its strings and keys replaced; `value` itself when
 * none holds one. */
export function redactValue(value, secrets) {
  const kept = huntedSecrets(secrets);
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
