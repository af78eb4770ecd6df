// A streamed answer of the routed chat client (serving/chat/_streams.py): `for await (const chunk
// of stream)` gives the chunks of the serving endpoint's stream as it sent them (redacted of the
// client's keys). `stream.routing` says who serves it and why from the start; its `seconds` and
// `estimated_cost` are set when the stream ends.
//
// A key the endpoint spells out over several chunks is redacted too (ChunkRedactor): the end of a
// chunk's text that could begin a key is held back until the next chunk says whether it does, and
// given with the choice's finish chunk, or in one more chunk when the stream ends or breaks
// without one (then the break is thrown at the next step). The caller's joined text is that of the
// endpoint with each key replaced by [redacted], however the endpoint cut it into chunks.
//
// Once the first chunk has reached the caller there is no fallback: a stream that breaks later
// (connection lost, a malformed event, not complete within timeoutMs of its request) throws
// StreamInterrupted from the iteration. The caller's own abort throws its signal's reason. A
// `break` out of the loop, or close(), releases the connection.
import { StreamInterrupted, redact } from "./errors.js";
import { ChunkRedactor, chunkUsage } from "./responses.js";

export class ChatStream {
  /**
   * @param {import("./upstream.js").OpenStream} opened
   * @param {object} routing
   * @param {{started: number, signal: AbortSignal | null, onEnd: (routing: object, usage: object | null) => void}} options
   *   `onEnd` hears the routing and the usage the stream reported (null when it reported none, or broke)
   */
  constructor(opened, routing, { started, signal, onEnd }) {
    this.routing = routing;
    this.opened = opened;
    this.started = started;
    this.signal = signal;
    this.onEnd = onEnd;
    this.head = [...opened.head];
    this.usage = null;  // the latest usage a chunk reported
    this.done = false;
    Object.defineProperty(this, "redactor", { value: new ChunkRedactor(opened.upstream.streamSecrets), enumerable: false });
    this.broken = null;  // the StreamInterrupted to throw once the text held back has been given
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  /** The next chunk. */
  async next() {
    let chunk;
    if (this.broken) {
      const broken = this.broken;
      this.broken = null;
      throw broken;
    }
    if (this.head.length) chunk = this.head.shift();
    else if (this.done) return { done: true, value: undefined };
    else {
      try {
        chunk = await this.opened.next();
      } catch (error) {
        this.finish(true);
        if (this.signal?.aborted) throw this.signal.reason;
        const upstream = this.opened.upstream;
        const text = redact(String(error), upstream.secrets).slice(0, 300);
        const broken = new StreamInterrupted(upstream.name, `the stream of ${upstream.model} broke after its first chunk: ${text}`);
        const held = this.redactor.end({ cut: true });  // the text held back, then the break
        if (held === null) throw broken;
        this.broken = broken;
        return { done: false, value: held };
      }
      if (chunk === null) {
        this.finish(false);
        const held = this.redactor.end();
        return held === null ? { done: true, value: undefined } : { done: false, value: held };
      }
    }
    this.usage = chunkUsage(chunk) ?? this.usage;
    return { done: false, value: this.redactor.chunk(chunk) };
  }

  /** `break` in a for-await loop: close. */
  async return() {
    this.close();
    return { done: true, value: undefined };
  }

  /** Stop reading and release the connection (safe to call more than once). */
  close() {
    this.broken = null;
    if (!this.done) this.finish(true);
  }

  finish(failed) {
    this.done = true;
    this.head = [];
    this.opened.close();
    this.routing.seconds = (performance.now() - this.started) / 1000;
    this.routing.estimated_cost = failed ? null : this.opened.upstream.endpoint.cost(this.usage);
    this.onEnd(this.routing, failed ? null : this.usage);
  }
}
