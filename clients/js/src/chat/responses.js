// Reading what an OpenAI-compatible server sent back: a chat completion, or the chunks of a
// streamed one (serving/chat/responses.py). Anything that is not one is UpstreamMalformed, which
// falls back like any other edge failure.
import { MAX_DETAIL_CHARS, UpstreamMalformed, redact, redactValue, redactedJson } from "./errors.js";

/** A JSON object (not an array, not null). */
export const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);

/** Bytes of JSON text as Python's json.loads reads them: UTF-8, -16 or -32, told by a BOM or the
 * zero bytes of the first characters (json.detect_encoding); malformed sequences become U+FFFD. */
export function decodeJsonBytes(bytes) {
  const b = bytes;
  const starts = (...prefix) => prefix.every((x, i) => b[i] === x);
  if (starts(0, 0, 0xfe, 0xff) || starts(0xff, 0xfe, 0, 0)) return utf32(b.subarray(4), b[0] === 0);
  if (starts(0xfe, 0xff)) return new TextDecoder("utf-16be").decode(b.subarray(2));
  if (starts(0xff, 0xfe)) return new TextDecoder("utf-16le").decode(b.subarray(2));
  if (b.length >= 4) {
    if (!b[0]) return b[1] ? new TextDecoder("utf-16be").decode(b) : utf32(b, true);
    if (!b[1]) return b[2] || b[3] ? new TextDecoder("utf-16le").decode(b) : utf32(b, false);
  } else if (b.length === 2) {
    if (!b[0]) return new TextDecoder("utf-16be").decode(b);
    if (!b[1]) return new TextDecoder("utf-16le").decode(b);
  }
  return new TextDecoder("utf-8").decode(b);  // a UTF-8 BOM is dropped, as utf-8-sig does
}

/** UTF-32 (no WHATWG decoder has it); a unit that is no code point becomes U+FFFD. */
function utf32(bytes, bigEndian) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength - (bytes.byteLength % 4));
  let text = "";
  for (let i = 0; i < view.byteLength; i += 4) {
    const code = view.getUint32(i, !bigEndian);
    text += code <= 0x10ffff && !(code >= 0xd800 && code <= 0xdfff) ? String.fromCodePoint(code) : "\ufffd";
  }
  return text;
}

/** The JSON object in `raw` (bytes or text); UpstreamMalformed when it is not one. */
export function parseJsonObject(endpoint, raw, what) {
  let value;
  try {
    value = JSON.parse(typeof raw === "string" ? raw : decodeJsonBytes(raw));
  } catch (error) {
    throw new UpstreamMalformed(endpoint, `${what} is not valid JSON (${error.message})`.slice(0, MAX_DETAIL_CHARS));
  }
  if (!isObject(value)) throw new UpstreamMalformed(endpoint, `${what} is JSON but not an object`);
  return value;
}

/** The assistant text of a chat completion body (its first choice); "" for a tool-call-only
 * answer. UpstreamMalformed when the body has no choice with a message. */
export function completionText(endpoint, body) {
  const choices = body.choices;
  if (!Array.isArray(choices) || !choices.length || !isObject(choices[0])) {
    throw new UpstreamMalformed(endpoint, "the answer has no 'choices' (not a chat completion)");
  }
  const message = choices[0].message;
  if (!isObject(message)) throw new UpstreamMalformed(endpoint, "the answer's first choice has no 'message'");
  const content = message.content;
  if (content === null || content === undefined || typeof content === "string") return content || "";
  if (Array.isArray(content)) return content.filter((p) => isObject(p) && typeof p.text === "string").map((p) => p.text).join("");
  throw new UpstreamMalformed(endpoint, "the answer's message content is neither text nor null");
}

/** A stream event's object, if it is a chunk; UpstreamMalformed for an error event (its text
 * redacted of the secrets) or a non-chunk. */
export function checkChunk(endpoint, chunk, secrets = []) {
  if ("error" in chunk) {
    const detail = redactedJson(chunk.error, secrets);
    throw new UpstreamMalformed(endpoint, `the stream carried an error: ${detail}`.slice(0, MAX_DETAIL_CHARS));
  }
  if ("choices" in chunk && !Array.isArray(chunk.choices)) {
    throw new UpstreamMalformed(endpoint, "a stream chunk has 'choices' that is not a list");
  }
  return chunk;
}

/** Whether a chunk carries the answer's first token: content, a tool call, or the finish (an
 * empty answer). A role-only chunk or a usage-only chunk does not. */
export function startsAnswer(chunk) {
  for (const choice of Array.isArray(chunk.choices) ? chunk.choices : []) {
    if (!isObject(choice)) continue;
    const delta = choice.delta;
    if (isObject(delta) && (delta.content || (Array.isArray(delta.tool_calls) ? delta.tool_calls.length : delta.tool_calls))) return true;
    if (choice.finish_reason) return true;
  }
  return false;
}

/** The usage a chunk reports (the last chunk, when asked with stream_options.include_usage), or null. */
export function chunkUsage(chunk) {
  return isObject(chunk.usage) ? chunk.usage : null;
}

/** The message of an HTTP error body ({"error": {"message": ...}}, {"error": "..."}, or text),
 * with the secrets redacted, shortened. Redacted as the message reads (JSON escapes decoded),
 * before anything is cut; a body that is not JSON may stop where its read stopped, so an end that
 * begins a key goes too. */
export function errorDetail(raw, secrets) {
  let text = decodeJsonBytes(raw), body = null;
  try { body = JSON.parse(text); } catch { body = null; }
  if (isObject(body)) {
    let error = "error" in body ? body.error : "detail" in body ? body.detail : body;
    if (isObject(error) && "message" in error) error = error.message;
    text = typeof error === "string" ? error : redactedJson(error, secrets);
  }
  return redact(text.split(/\s+/).filter(Boolean).join(" "), secrets, { cut: body === null }).slice(0, MAX_DETAIL_CHARS);
}

/** A chunk as the caller gets it: redacted of the secrets when it held one. */
export function cleanChunk(endpoint, chunk, secrets) {
  return checkChunk(endpoint, redactValue(chunk, secrets), secrets);
}
