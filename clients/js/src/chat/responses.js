// Reading what an OpenAI-compatible server sent back: a chat completion, or the chunks of a
// streamed one (serving/chat/_responses.py). Anything that is not one is UpstreamMalformed, which
// falls back like any other edge failure.
import { MAX_DETAIL_CHARS, StreamRedactor, UpstreamMalformed, huntedSecrets, redact, redactValue, redactedJson } from "./errors.js";

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

// The texts a stream spells out piece by piece in its chunks' deltas, which a caller joins: each
// choice's content (and refusal, reasoning), each tool call's arguments. Other delta fields
// (role, a tool call's id or name) come whole in one chunk.
const DELTA_TEXTS = ["content", "refusal", "reasoning_content", "reasoning"];

/** A stream's chunks as the caller gets them, with each text they spell out (DELTA_TEXTS, a
 * tool call's arguments) redacted across chunks by a StreamRedactor of its own: what could still
 * become a key is held back, and given in the choice's finish chunk, or in one more chunk by
 * end() when the stream ends without one or breaks. A chunk is redacted on its own before this
 * (cleanChunk), so each chunk holds no key either. With no key to hunt, chunks pass as they are. */
export class ChunkRedactor {
  // Private: the keys, and what is held back of a text (which may begin a key), are never shown by inspect.
  #secrets;
  #active;
  #texts = new Map();  // "choice/place" -> {choice, place, redactor}
  #last = null;        // the latest chunk, whose id and model a chunk made by end() carries

  constructor(secrets) {
    this.#secrets = secrets;
    this.#active = huntedSecrets(secrets).length > 0;
  }

  /** `chunk` with its texts cut where a key could still follow (held back), redacted. */
  chunk(chunk) {
    if (!this.#active || !Array.isArray(chunk.choices)) return chunk;
    this.#last = chunk;
    const choices = chunk.choices.map((choice, position) => {
      if (!isObject(choice)) return choice;
      const index = Number.isInteger(choice.index) ? choice.index : position;
      let delta = isObject(choice.delta) ? this.delta(index, choice.delta) : choice.delta;
      if (choice.finish_reason) delta = this.flushed(index, delta);  // the choice's texts are complete
      return delta === choice.delta ? choice : { ...choice, delta };
    });
    return choices.some((c, i) => c !== chunk.choices[i]) ? { ...chunk, choices } : chunk;
  }

  /** What is still held back, as one more chunk (null when nothing is); `cut`: the stream broke,
   * so an end that begins a key goes too. */
  end({ cut = false } = {}) {
    const indexes = [...new Set([...this.#texts.values()].map((t) => t.choice))];
    const choices = indexes.map((index) => ({ index, delta: this.flushed(index, undefined, { cut }), finish_reason: null }))
      .filter((choice) => choice.delta !== undefined);
    if (!choices.length) return null;
    const { id = "chatcmpl-redacted", object = "chat.completion.chunk", created, model } = this.#last ?? {};
    return { id, object, ...(created === undefined ? {} : { created }), ...(model === undefined ? {} : { model }), choices };
  }

  /** `delta` with its texts pushed through their redactors; `delta` itself when that changes none. */
  delta(index, delta) {
    const out = { ...delta };
    for (const field of DELTA_TEXTS) {
      if (typeof delta[field] === "string") out[field] = this.push(index, field, delta[field]);
    }
    if (isObject(delta.function_call) && typeof delta.function_call.arguments === "string") {
      const args = this.push(index, "function_call", delta.function_call.arguments);
      if (args !== delta.function_call.arguments) out.function_call = { ...delta.function_call, arguments: args };
    }
    if (Array.isArray(delta.tool_calls)) {
      out.tool_calls = delta.tool_calls.map((call, position) => {
        if (!isObject(call) || !isObject(call.function) || typeof call.function.arguments !== "string") return call;
        const place = `tool_calls/${Number.isInteger(call.index) ? call.index : position}`;
        const args = this.push(index, place, call.function.arguments);
        return args === call.function.arguments ? call : { ...call, function: { ...call.function, arguments: args } };
      });
      if (out.tool_calls.every((c, i) => c === delta.tool_calls[i])) out.tool_calls = delta.tool_calls;
    }
    return Object.keys(out).every((k) => out[k] === delta[k]) ? delta : out;
  }

  push(choice, place, piece) {
    const name = `${choice}/${place}`;
    if (!this.#texts.has(name)) this.#texts.set(name, { choice, place, redactor: new StreamRedactor(this.#secrets) });
    return /** @type {{redactor: StreamRedactor}} */ (this.#texts.get(name)).redactor.push(piece);
  }

  /** `delta` (undefined: none) with what is held back of the choice's texts appended, redacted;
   * `delta` itself when nothing is. */
  flushed(index, delta, { cut = false } = {}) {
    let out = delta;
    for (const [name, { choice, place, redactor }] of this.#texts) {
      if (choice !== index) continue;
      this.#texts.delete(name);
      const tail = redactor.flush({ cut });
      if (!tail) continue;
      out = isObject(out) ? { ...out } : {};
      if (DELTA_TEXTS.includes(place)) out[place] = (typeof out[place] === "string" ? out[place] : "") + tail;
      else if (place === "function_call") {
        const call = isObject(out.function_call) ? out.function_call : {};
        out.function_call = { ...call, arguments: (typeof call.arguments === "string" ? call.arguments : "") + tail };
      } else {
        const k = Number(place.split("/")[1]);
        const calls = Array.isArray(out.tool_calls) ? [...out.tool_calls] : [];
        const at = calls.findIndex((c, position) => isObject(c) && (Number.isInteger(c.index) ? c.index : position) === k);
        const call = at === -1 ? { index: k, function: { arguments: "" } } : calls[at];
        const fn = isObject(call.function) ? call.function : {};
        const joined = { ...call, function: { ...fn, arguments: (typeof fn.arguments === "string" ? fn.arguments : "") + tail } };
        if (at === -1) calls.push(joined); else calls[at] = joined;
        out.tool_calls = calls;
      }
    }
    return out;
  }
}
