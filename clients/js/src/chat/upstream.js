// Calls to one endpoint (serving/chat/_upstream.py): a non-streamed chat completion, and a stream
// opened up to its first token. HttpUpstream speaks OpenAI's chat-completions API with fetch;
// LocalUpstream calls a LocalModel. Both give the same shapes and the same errors:
//
// - an Answer {text, body, endpoint}: the assistant text (what an accept check reads), the whole
//   chat completion, and who gave it;
// - an OpenStream: the chunks read up to the first one carrying the answer (`head`), and next()
//   for the rest;
// - every failure an UpstreamError (errors.js), the caller's abort excepted (its signal's reason).
//
// Bounds: an answer, streamed or not, must be complete within the endpoint's timeoutMs of the
// call (connecting, the headers, the whole body); a stream's first token within
// firstTokenTimeoutMs; a non-streamed answer or one stream event at most maxResponseBytes; an
// error body is read to 16 KiB. Redirects are not followed (the key would go with them). What an
// endpoint sends back is redacted of every key the client holds (both endpoints') before it is
// kept: an answer, each chunk, an error body, an error event, a quoted header, a transport error.
import { CallClock } from "./clock.js";
import { credentials, Endpoint } from "./endpoint.js";
import { MAX_DETAIL_CHARS, SlowFirstToken, UpstreamError, UpstreamHTTPError, UpstreamMalformed, UpstreamTimeout,
  UpstreamUnreachable, redact, redactValue } from "./errors.js";
import { cleanChunk, checkChunk, completionText, errorDetail, isObject, parseJsonObject, startsAnswer } from "./responses.js";

export const MAX_ERROR_BODY_BYTES = 16 << 10;

/** A stream read up to its first token: `head` holds the chunks read so far (the last of them the
 * first to carry the answer); next() gives the rest (null at the end) within the call's deadline. */
export class OpenStream {
  constructor(upstream, head, events, clock, release) {
    this.upstream = upstream;
    this.head = head;
    this.events = events;
    this.clock = clock;
    this.release = release;
  }

  async next() {
    try {
      const { value, done } = await this.clock.run(this.events.next());
      return done ? null : value;
    } catch (error) {
      throw this.upstream.failure(error, this.clock);
    }
  }

  /** Stop reading and release the connection (safe to call more than once). */
  close() {
    this.clock.end();
    this.release();
  }
}

class Upstream {
  /** @param {string} name the endpoint's name @param {string[]} secrets every key the client holds */
  constructor(name, endpoint, secrets) {
    this.name = name;
    this.endpoint = endpoint;
    Object.defineProperty(this, "secrets", { value: secrets, enumerable: false });  // never shown by inspect
  }

  get model() { return this.endpoint.model; }

  /** The keys a stream's text is redacted of across its chunks (ChatStream). */
  get streamSecrets() { return this.secrets; }

  tooSlow() {
    return new UpstreamTimeout(this.name, `no complete answer from ${this.model} within ${this.endpoint.timeoutMs} ms`);
  }

  /** A clock with the call's deadlines: the first token's (streams), then the whole answer's; it
   * follows the caller's signal and the runner's `callSignal` (the call's timeout, cut to the
   * request's deadline). */
  clock(callerSignal, stream, callSignal = null) {
    const clock = new CallClock(callerSignal, callSignal);
    const firstMs = this.endpoint.firstChunkTimeoutMs;
    const stopFirst = stream
      ? clock.after(firstMs, () => new SlowFirstToken(this.name, `no first token from ${this.model} within ${firstMs} ms`))
      : () => {};
    clock.after(this.endpoint.timeoutMs, () => this.tooSlow());
    return [clock, stopFirst];
  }

  /** What a failed call throws: an UpstreamError as it is; else the deadline's error or the
   * caller's abort reason when the signal was aborted; else `other(error)`. */
  failure(error, clock) {
    if (error instanceof UpstreamError) return error;
    if (clock.signal.aborted) return clock.signal.reason;
    return this.other(error);
  }

  /** The chunks of `events` up to the first that carries the answer (within the first-token
   * deadline), as an OpenStream; closed again on any failure. */
  async opened(events, clock, stopFirst, release) {
    const head = [];
    for (;;) {
      const { value, done } = await clock.run(events.next());
      if (done) throw new UpstreamMalformed(this.name, `the stream of ${this.model} ended before its first token`);
      head.push(value);
      if (startsAnswer(value)) {
        stopFirst();
        return new OpenStream(this, head, events, clock, release);
      }
    }
  }
}

/** An OpenAI-compatible server, with fetch. */
export class HttpUpstream extends Upstream {
  other(error) {
    // The cause's code (ECONNREFUSED, UND_ERR_SOCKET), not its message, which names the host and port.
    const code = error?.cause?.code ?? error?.cause?.name;
    const cause = code ? ` (${code})` : "";
    const text = redact(`${error?.name ?? "Error"}: ${error?.message ?? error}${cause}`, this.secrets).slice(0, MAX_DETAIL_CHARS);
    return new UpstreamUnreachable(this.name, `connection to ${this.model} failed (${text})`);
  }

  async post(messages, params, stream, clock) {
    const { apiKey, headers } = credentials(this.endpoint);
    const body = JSON.stringify({ ...params, model: this.model, messages, ...(stream ? { stream: true } : {}) });
    const request = {
      method: "POST", body, signal: clock.signal, redirect: /** @type {const} */ ("manual"),
      headers: { ...headers, Accept: "application/json, text/event-stream", "Content-Type": "application/json",
        ...(apiKey ? { Authorization: `Bearer ${apiKey}` } : {}) },
    };
    const response = await clock.run(globalThis.fetch(this.endpoint.url, request));
    if (response.status >= 400) {
      const raw = await readBody(response, MAX_ERROR_BODY_BYTES, clock, null);
      const detail = errorDetail(raw, this.secrets);
      throw new UpstreamHTTPError(this.name, `${this.model} answered HTTP ${response.status}` + (detail ? `: ${detail}` : ""),
        { status: response.status, detail });
    }
    if (response.status < 200 || response.status > 299) {  // a redirect (status 0 in a browser): not followed
      await response.body?.cancel().catch(() => {});
      throw new UpstreamMalformed(this.name, `${this.model} answered HTTP ${response.status}, not a chat completion (redirects are not followed)`);
    }
    return response;
  }

  /** The endpoint's chat completion within timeoutMs; an UpstreamError for anything else. */
  async complete(messages, params, callerSignal, callSignal = null) {
    const [clock] = this.clock(callerSignal, false, callSignal);
    try {
      const response = await this.post(messages, params, false, clock);
      const limit = this.endpoint.maxResponseBytes;
      const tooLarge = (size) => new UpstreamMalformed(this.name, `the answer of ${this.model} is over ${limit} bytes (${size} so far)`);
      const declared = Number(response.headers.get("content-length") ?? "");
      if (Number.isInteger(declared) && declared > limit) throw tooLarge(declared);
      const raw = await readBody(response, limit, clock, tooLarge);
      const body = redactValue(parseJsonObject(this.name, raw, `the answer of ${this.model}`), this.secrets);
      return { text: completionText(this.name, body), body, endpoint: this.name };
    } catch (error) {
      throw this.failure(error, clock);
    } finally {
      clock.end();
    }
  }

  /** The endpoint's stream, read up to its first token (SlowFirstToken past firstTokenTimeoutMs). */
  async openStream(messages, params, callerSignal, callSignal = null) {
    const [clock, stopFirst] = this.clock(callerSignal, true, callSignal);
    let reader = null;
    const release = () => { reader?.cancel().catch(() => {}); };
    try {
      const response = await this.post(messages, params, true, clock);
      const type = response.headers.get("content-type") ?? "";
      if (type.split(";")[0].trim().toLowerCase() !== "text/event-stream") {
        const shown = redact(type, this.secrets).slice(0, 100) || "no content type";  // before any case change
        await response.body?.cancel().catch(() => {});
        throw new UpstreamMalformed(this.name, `asked for a stream, ${this.model} answered ${shown}`);
      }
      if (!response.body) throw new UpstreamMalformed(this.name, `the stream of ${this.model} has no body`);
      reader = response.body.getReader();
      return await this.opened(this.chunks(reader), clock, stopFirst, release);
    } catch (error) {
      const failure = this.failure(error, clock);
      clock.end();
      release();
      throw failure;
    }
  }

  /** The chunks of an open stream up to `data: [DONE]`, redacted; UpstreamMalformed for an event
   * that is not a chunk or is over maxResponseBytes. */
  async *chunks(reader) {
    const limit = this.endpoint.maxResponseBytes;
    const tooLarge = () => new UpstreamMalformed(this.name, `a stream event of ${this.model} is over ${limit} bytes`);
    for await (const data of sseData(reader, limit, tooLarge)) {
      if (data === "[DONE]") return;
      yield cleanChunk(this.name, parseJsonObject(this.name, data, `a stream event of ${this.model}`), this.secrets);
    }
  }
}

/** A LocalModel: the page's or the process's own model, called as a function. */
export class LocalUpstream extends Upstream {
  other(error) {
    return error;  // the model's own error, as it threw it (no key of the client ever reached it)
  }

  /** None: what the model streams is not redacted, as its chunks are not (no key of the client ever reached it). */
  get streamSecrets() { return []; }

  async call(messages, params, stream, clock) {
    return clock.run(Promise.resolve().then(() => this.endpoint.call(messages, { params, stream, signal: clock.signal })));
  }

  async complete(messages, params, callerSignal, callSignal = null) {
    const [clock] = this.clock(callerSignal, false, callSignal);
    try {
      const body = this.completion(await this.call(messages, params, false, clock));
      return { text: completionText(this.name, body), body, endpoint: this.name };
    } catch (error) {
      throw this.failure(error, clock);
    } finally {
      clock.end();
    }
  }

  async openStream(messages, params, callerSignal, callSignal = null) {
    const [clock, stopFirst] = this.clock(callerSignal, true, callSignal);
    let source = null;
    const release = () => { Promise.resolve().then(() => source?.return?.()).catch(() => {}); };
    try {
      const result = await this.call(messages, params, true, clock);
      if (result !== null && typeof result === "object" && typeof result[Symbol.asyncIterator] === "function") {
        source = result[Symbol.asyncIterator]();
      } else {
        const text = completionText(this.name, this.completion(result));
        source = (async function* pieces() { yield text; })();
      }
      return await this.opened(this.pieces(source), clock, stopFirst, release);
    } catch (error) {
      const failure = this.failure(error, clock);
      clock.end();
      release();
      throw failure;
    }
  }

  /** A chat completion body from what the model answered: text, or a completion object. */
  completion(result) {
    if (typeof result === "string") {
      return { id: `chatcmpl-local-${Date.now()}`, object: "chat.completion", created: Math.floor(Date.now() / 1000),
        model: this.model, choices: [{ index: 0, message: { role: "assistant", content: result }, finish_reason: "stop" }] };
    }
    if (isObject(result)) return result;
    throw new UpstreamMalformed(this.name, `${this.model} answered ${result === null ? "null" : typeof result}, not text or a chat completion`);
  }

  /** Chunks from the model's stream: text pieces become content chunks (and a finish chunk at the
   * end), objects are checked as chunks. */
  async *pieces(source) {
    let texts = false;
    for (;;) {
      const { value, done } = await source.next();
      if (done) break;
      if (typeof value === "string") {
        texts = true;
        if (value) yield this.chunk({ content: value }, null);
      } else if (isObject(value)) {
        yield checkChunk(this.name, value);
      } else {
        throw new UpstreamMalformed(this.name, `the stream of ${this.model} yielded ${value === null ? "null" : typeof value}, not text or a chunk`);
      }
    }
    if (texts) yield this.chunk({}, "stop");
  }

  chunk(delta, finish) {
    return { id: "chatcmpl-local", object: "chat.completion.chunk", created: Math.floor(Date.now() / 1000), model: this.model,
      choices: [{ index: 0, delta, finish_reason: finish }] };
  }
}

/** The Upstream of an Endpoint or a LocalModel. */
export function upstreamFor(name, endpoint, secrets) {
  return endpoint instanceof Endpoint ? new HttpUpstream(name, endpoint, secrets) : new LocalUpstream(name, endpoint, secrets);
}

/** A body read whole, at most `limit` bytes: past it, `tooLarge(size)` is thrown, or (null) the
 * read stops there and the first `limit` bytes are kept (an error body). */
async function readBody(response, limit, clock, tooLarge) {
  if (!response.body) return new Uint8Array(0);
  const reader = response.body.getReader();
  const parts = [];
  let size = 0;
  try {
    for (;;) {
      const { value, done } = await clock.run(reader.read());
      if (done) break;
      parts.push(value);
      size += value.byteLength;
      if (size > limit) {
        if (tooLarge) throw tooLarge(size);
        break;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
  const all = new Uint8Array(size);
  let offset = 0;
  for (const part of parts) { all.set(part, offset); offset += part.byteLength; }
  return all.subarray(0, Math.min(size, limit));
}

/** The data of each server-sent event (the WHATWG rules: lines end in CRLF, LF or CR; `data:`
 * lines joined by newlines; comments and other fields ignored; an event ends at a blank line).
 * An event, or a line, over `limit` characters throws tooLarge(). */
async function* sseData(reader, limit, tooLarge) {
  const decoder = new TextDecoder();
  let buffer = "", data = [], size = 0;
  for (;;) {
    const { value, done } = await reader.read();
    buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
    let start = 0;
    for (let i = 0; i < buffer.length; i++) {
      const c = buffer[i];
      if (c !== "\n" && c !== "\r") continue;
      if (c === "\r" && i === buffer.length - 1 && !done) break;  // a CR whose LF may come next
      const line = buffer.slice(start, i);
      if (c === "\r" && buffer[i + 1] === "\n") i++;
      start = i + 1;
      if (line === "") {
        if (data.length) yield data.join("\n");
        data = [];
        size = 0;
      } else if (line.startsWith("data:") || line === "data") {
        const field = line.slice(5);
        data.push(field.startsWith(" ") ? field.slice(1) : field);
        size += field.length;
        if (size > limit) throw tooLarge();
      }
    }
    buffer = buffer.slice(start);
    if (buffer.length > limit) throw tooLarge();
    if (done) return;
  }
}
