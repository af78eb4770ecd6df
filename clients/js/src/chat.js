// RoutedChat: an OpenAI-style chat client over two endpoints, the edge and the cloud, that asks
// the router where each conversation runs and carries the decision out with the cloud as
// fallback (serving/chat/client.py, with fetch).
//
//   const chat = new RoutedChat(router, {
//     edge: new Endpoint({ baseUrl: "http://127.0.0.1:11434/v1", model: "llama3.2:3b" }),
//     cloud: new Endpoint({ baseUrl: "https://api.example.com/v1", model: "big-model", apiKey }) });
//   const completion = await chat.create([{ role: "user", content: "What is 2 + 2?" }], { precision: "exact" });
//   completion.text, completion.body, completion.routing.served_by
//
// One home for the rules: a request is router.execute() (execute.js) whose edge and cloud calls
// are the endpoints' calls; a stream is router.execute() whose calls open a stream up to its
// first token. So an edge that fails in any way (an error, a deadline, an HTTP error, an answer
// that is not a chat completion), a prompt over the edge context limit, and an accept check that
// says no all fall back to the cloud, and a cloud failure throws CloudCallError with the edge's
// error attached. The router reads the conversation as one prompt (chat/conversation.js).
import { checkMessages, checkJsonValue, conversationPrompt } from "./chat/conversation.js";
import { credentials, Endpoint, LocalModel } from "./chat/endpoint.js";
import { routingInfo } from "./chat/routing-info.js";
import { ChatStream } from "./chat/stream.js";
import { upstreamFor } from "./chat/upstream.js";

const RESERVED = ["model", "messages"];

/** An edge or cloud option as an Endpoint or LocalModel (a bare function is a LocalModel). */
function endpointOf(value, name) {
  if (typeof value === "function") return new LocalModel(value);
  if (value instanceof Endpoint || value instanceof LocalModel) return value;
  throw new TypeError(`${name} must be an Endpoint, a LocalModel or a function, got ${value === null ? "null" : typeof value}`);
}

export class RoutedChat {
  /**
   * @param {import("./router.js").BaseRouter} router
   * @param {{edge: Endpoint | LocalModel | Function, cloud: Endpoint | LocalModel | Function, verifyEdgeZone?: boolean,
   *   toPrompt?: (messages: object[]) => string, onRouted?: ((routing: object) => void) | null,
   *   logger?: {warn(message: string): void}}} options
   */
  constructor(router, { edge, cloud, verifyEdgeZone = false, toPrompt = conversationPrompt, onRouted = null, logger = console } = /** @type {any} */ ({})) {
    if (typeof router?.execute !== "function" || !router.routing) throw new TypeError("router must be a Router (Router.load)");
    if (typeof toPrompt !== "function") throw new TypeError("toPrompt must be a function (messages) => string");
    if (onRouted !== null && typeof onRouted !== "function") throw new TypeError("onRouted must be a function or null");
    this.router = router;
    this.edge = endpointOf(edge, "edge");
    this.cloud = endpointOf(cloud, "cloud");
    const keys = [this.edge, this.cloud].map((e) => credentials(e).apiKey).filter(Boolean);
    this.upstreams = { edge: upstreamFor("edge", this.edge, keys), cloud: upstreamFor("cloud", this.cloud, keys) };
    Object.defineProperty(this, "upstreams", { enumerable: false });  // they hold the keys to redact: never shown
    this.verifyEdgeZone = Boolean(verifyEdgeZone);
    this.toPrompt = toPrompt;
    this.onRouted = onRouted;
    this.logger = logger;
  }

  /**
   * The answer to a conversation, from the edge or the cloud (the module doc): a Completion
   * {body, routing, text}, or with `stream: true` a ChatStream.
   * precision: as router.route takes it. accept: checks an edge answer in the fallback zone (every
   * edge answer with verifyEdgeZone): `(text, body) => boolean`, or "learned" for the bundle's
   * check; not for streams. signal: the caller's AbortSignal; an abort stops every call and
   * rejects with its reason. Any other option is a chat-completions parameter (temperature,
   * max_tokens, tools, stream_options, ...), sent to whichever endpoint serves.
   * Bad messages or parameters throw TypeError / RangeError before any call.
   */
  async create(messages, options = {}) {
    if (options === null || typeof options !== "object") throw new TypeError("options must be an object");
    const { precision = null, stream = false, accept = null, signal = null, ...params } = options;
    for (const name of RESERVED) {
      if (name in params) {
        throw new TypeError(`${name} is not a request option here: the model is set per endpoint, the messages are the first argument`);
      }
    }
    if (signal !== null && !(signal instanceof AbortSignal)) throw new TypeError("signal must be an AbortSignal");
    if (typeof stream !== "boolean") throw new TypeError("stream must be true or false");
    checkJsonValue(checkMessages(messages), "messages");
    checkJsonValue(params, "");
    const prompt = this.toPrompt(messages);
    signal?.throwIfAborted();
    const started = performance.now();
    const { edge, cloud } = this.upstreams;

    if (stream) {
      if (accept !== null) {
        throw new TypeError("accept does not apply to streams: an answer can only be judged once it is complete, and a stream has reached the caller by then");
      }
      const execution = await this.execute(prompt, signal, (up) => up.openStream(messages, params, signal), { precision });
      const upstream = execution.served_by === "edge" ? edge : cloud;
      return new ChatStream(execution.response, routingInfo(execution, upstream.model),
        { started, signal, onEnd: (routing) => this.report(routing) });
    }

    const produced = [];
    const complete = async (up) => {
      const answer = await up.complete(messages, params, signal);
      produced.push(answer);
      return answer;
    };
    const execution = await this.execute(prompt, signal, complete, { precision, accept: this.check(accept, prompt), verifyEdgeZone: this.verifyEdgeZone });
    const answer = execution.response;
    const routing = routingInfo(execution, this.upstreams[execution.served_by].model);
    const costs = produced.map((a) => this.upstreams[a.endpoint].endpoint.cost(a.body.usage));
    routing.estimated_cost = costs.length && costs.every((c) => c !== null) ? costs.reduce((a, b) => a + b, 0) : null;
    routing.seconds = (performance.now() - started) / 1000;
    this.report(routing);
    return { body: answer.body, routing, text: answer.text };
  }

  /** router.execute with `call(upstream)` as the edge and cloud calls; no cloud call once the
   * caller has aborted, and the abort's reason (not a CloudCallError) when it did. */
  async execute(prompt, signal, call, options) {
    const edge = () => call(this.upstreams.edge);
    const cloud = () => {
      signal?.throwIfAborted();
      return call(this.upstreams.cloud);
    };
    try {
      return await this.router.execute(prompt, edge, cloud, options);
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      throw error;
    }
  }

  /** The accept option as execute() takes it: a check of an Answer {text, body}. */
  check(accept, prompt) {
    if (accept === null) return null;
    if (accept === "learned") {
      const learned = this.router.routing.learnedAccept(prompt);  // null (one warning) when the bundle has none
      return learned && ((answer) => learned(answer.text));
    }
    if (typeof accept !== "function") throw new TypeError(`accept must be a function, "learned" or null, got ${typeof accept}`);
    return (answer) => accept(answer.text, answer.body);
  }

  report(routing) {
    if (this.onRouted === null) return;
    try {
      this.onRouted(routing);
    } catch (error) {  // an observer must never break the app's request
      this.logger.warn(`onRouted threw: ${error}`);
    }
  }
}

export { ChatStream } from "./chat/stream.js";
export { conversationPrompt } from "./chat/conversation.js";
export { Endpoint, LocalModel } from "./chat/endpoint.js";
export { SlowFirstToken, StreamInterrupted, UpstreamError, UpstreamHTTPError, UpstreamMalformed, UpstreamTimeout,
  UpstreamUnreachable } from "./chat/errors.js";
