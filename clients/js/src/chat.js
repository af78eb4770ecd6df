// RoutedChat: an OpenAI-style chat client over the router's endpoints (serving/chat/_client.py, with
// fetch): two, the edge and the cloud, or N by name (an N-endpoint bundle's endpoints). It asks the
// router where each conversation runs and carries the decision's cascade out.
//
//   const chat = new RoutedChat(router, {
//     edge: new Endpoint({ baseUrl: "http://127.0.0.1:11434/v1", model: "llama3.2:3b" }),
//     cloud: new Endpoint({ baseUrl: "https://api.example.com/v1", model: "big-model", apiKey }) });
//   const chat = new RoutedChat(router, { endpoints: { "phone-3b": ..., "onprem-8b": ..., frontier: ... } });
//   const completion = await chat.create([{ role: "user", content: "What is 2 + 2?" }], { precision: "exact" });
//   completion.text, completion.body, completion.routing.served_by, completion.routing.tried
//
// One home for the rules: a request is router.execute() (execute.js) whose calls are the
// endpoints' calls; a stream is router.execute() whose calls open a stream up to its first token.
// So an endpoint that fails in any way (an error, a deadline, an HTTP error, an answer that is not a
// chat completion), a prompt over its context limit, an accept check that says no, and an endpoint
// the policy forbids all move on to the next endpoint of the cascade; when none serves,
// EndpointsFailed (a CloudCallError) names every attempt, FallbackForbidden the rule. The router
// reads the conversation as one prompt (chat/conversation.js).
import { checkMessages, checkJsonValue, conversationPrompt } from "./chat/conversation.js";
import { credentials, Endpoint, LocalModel } from "./chat/endpoint.js";
import { routingInfo } from "./chat/routing-info.js";
import { ChatStream } from "./chat/stream.js";
import { upstreamFor } from "./chat/upstream.js";
import { checkNames, namedCalls, specsByName } from "./execute.js";
import { needsOf } from "./policy/capabilities.js";
import { Request, asRequest } from "./request.js";

const RESERVED = ["model", "messages"];

/** An endpoint option as an Endpoint or LocalModel (a bare function is a LocalModel). */
function endpointOf(value, name) {
  if (typeof value === "function") return new LocalModel(value);
  if (value instanceof Endpoint || value instanceof LocalModel) return value;
  const what = name === "edge" || name === "cloud" ? name : `endpoints[${JSON.stringify(name)}]`;
  throw new TypeError(`${what} must be an Endpoint, a LocalModel or a function, got ${value === null ? "null" : typeof value}`);
}

export class RoutedChat {
  /**
   * @param {import("./router.js").BaseRouter} router
   * @param {{edge?: Endpoint | LocalModel | Function, cloud?: Endpoint | LocalModel | Function,
   *   endpoints?: Record<string, Endpoint | LocalModel | Function> | Map<string, Endpoint | LocalModel | Function>,
   *   specs?: any, verifyEdgeZone?: boolean, toPrompt?: (messages: object[]) => string,
   *   onRouted?: ((routing: object) => void) | null, logger?: {warn(message: string): void}}} options
   */
  constructor(router, { edge = null, cloud = null, endpoints = null, specs = null, verifyEdgeZone = false, toPrompt = conversationPrompt,
    onRouted = null, logger = console } = /** @type {any} */ ({})) {
    if (typeof router?.execute !== "function" || !router.routing) throw new TypeError("router must be a Router (Router.load)");
    if (typeof toPrompt !== "function") throw new TypeError("toPrompt must be a function (messages) => string");
    if (onRouted !== null && typeof onRouted !== "function") throw new TypeError("onRouted must be a function or null");
    let given;
    try {
      given = namedCalls(edge, cloud, endpoints);
    } catch (error) {
      throw new TypeError("RoutedChat takes edge and cloud, or endpoints ({name: Endpoint}), not both and not neither");
    }
    checkNames(given, "endpoints");
    const named = new Map([...given].map(([name, value]) => [name, endpointOf(value, name)]));
    this.router = router;
    /** The endpoints by name, tried in each decision's cascade order. */
    this.endpoints = Object.freeze(Object.fromEntries(named));
    this.edge = named.get("edge") ?? null;
    this.cloud = named.get("cloud") ?? null;
    /** The endpoints' specs (context limits, prices, where each runs) given to router.execute; null: the bundle's. */
    this.specs = specs === null ? null : specsByName(specs);
    const keys = [...named.values()].map((e) => credentials(e).apiKey).filter(Boolean);
    this.upstreams = Object.fromEntries([...named].map(([name, endpoint]) => [name, upstreamFor(name, endpoint, keys)]));
    Object.defineProperty(this, "upstreams", { enumerable: false });  // they hold the keys to redact: never shown
    this.verifyEdgeZone = Boolean(verifyEdgeZone);
    this.toPrompt = toPrompt;
    this.onRouted = onRouted;
    this.logger = logger;
  }

  /**
   * The answer to a conversation, from the first endpoint of the decision's cascade that serves it
   * (the module doc): a Completion {body, routing, text}, or with `stream: true` a ChatStream.
   * `messages`: the conversation, or a Request (request.js) holding it (its `messages`) with the
   * request's fields; else they are options:
   * precision: as router.route takes it. metadata: the request's metadata for the router's policy
   * (string to string), never sent to an endpoint; an answer's cost counts against the budgets it
   * names (router.recordSpend). deadline: a performance.now() value by which the answer must be
   * complete (a stream: its first token): each endpoint's call is cut to what is left, and once it
   * has passed the endpoints left are skipped (EndpointsFailed names them as timeouts).
   * conversation: the conversation's id (an app's): the turn is decided with its state and recorded
   * (router.execute): a completion with its usage's completion_tokens; a stream when it opens, its
   * answer's length added at its end from the usage it reported (router.recordAnswer).
   * accept: checks the answers the decision checks (the edge's in the fallback zone; every answer
   * but the last of an N-endpoint cascade; every one with verifyEdgeZone): `(text, body) =>
   * boolean`, or "learned" for the bundle's check; not for streams. signal: the caller's
   * AbortSignal; an abort stops every call and rejects with its reason. Any other option is a
   * chat-completions parameter (temperature, max_tokens, tools, stream_options, ...), sent to
   * whichever endpoint serves. What the request needs (image parts, tools, a JSON response format)
   * is read from it and passed to the router. Bad messages or parameters throw TypeError /
   * RangeError before any call.
   */
  async create(messages, options = {}) {
    if (options === null || typeof options !== "object") throw new TypeError("options must be an object");
    const { precision = null, stream = false, accept = null, signal = null, metadata = null, deadline = null, conversation = null,
      ...params } = options;
    for (const name of RESERVED) {
      if (name in params) {
        throw new TypeError(`${name} is not a request option here: the model is set per endpoint, the messages are the first argument`);
      }
    }
    if (signal !== null && !(signal instanceof AbortSignal)) throw new TypeError("signal must be an AbortSignal");
    if (typeof stream !== "boolean") throw new TypeError("stream must be true or false");
    let given = null;
    if (messages instanceof Request) {
      if (messages.messages === null) throw new TypeError("a Request given to create() must hold the conversation's messages");
      given = asRequest(messages, { precision, metadata, deadline, conversation });
      messages = given.messages;
    }
    checkJsonValue(checkMessages(messages), "messages");
    checkJsonValue(params, "");
    const text = given === null ? this.toPrompt(messages) : null;
    signal?.throwIfAborted();
    const started = performance.now();
    const needs = needsOf(messages, params);
    // the request record, built once: what the router routes, the policy reads and execute() is held to
    const request = given === null ? new Request(text, { messages, precision, metadata, needs: needs.any ? needs : null, deadline, conversation })
      : given.needs === null && needs.any ? given.but({ needs }) : given;
    const routed = { specs: this.specs, signal };

    if (stream) {
      if (accept !== null) {
        throw new TypeError("accept does not apply to streams: an answer can only be judged once it is complete, and a stream has reached the caller by then");
      }
      const execution = await this.execute(request, (up, callSignal) => up.openStream(messages, params, signal, callSignal), routed, signal);
      const upstream = this.upstreams[execution.served_by];
      return new ChatStream(execution.response, routingInfo(execution, upstream.model), { started, signal,
        onEnd: (routing, usage) => this.streamed(request, routing, usage) });
    }

    const complete = (up, callSignal) => up.complete(messages, params, signal, callSignal);
    const execution = await this.execute(request, complete,
      { ...routed, accept: this.check(accept, request.text), verifyEdgeZone: this.verifyEdgeZone }, signal);
    const answer = execution.response;
    const routing = routingInfo(execution, this.upstreams[execution.served_by].model);
    routing.estimated_cost = this.cost(execution.steps);
    routing.seconds = (performance.now() - started) / 1000;
    await this.answered(request.metadata, routing);
    return { body: answer.body, routing, text: answer.text };
  }

  /** router.execute of `request` with `call(upstream, callSignal)` as each endpoint's call (each
   * upstream call runs under the caller's signal, the runner's signal for the call (its timeout, cut
   * to the request's deadline) and its endpoint's deadlines: chat/clock.js); the abort's reason (not
   * an EndpointsFailed) when the caller aborted. */
  async execute(request, call, options, signal) {
    const calls = Object.fromEntries(Object.entries(this.upstreams).map(([name, up]) => [name, (_, { signal: callSignal }) => call(up, callSignal)]));
    try {
      return await this.router.execute(request, calls, options);
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      throw error;
    }
  }

  /** The price of every answer the request produced (each call's step result: a rejected answer
   * too), by its endpoint's prices; null when any is unknown. */
  cost(steps) {
    const costs = steps.filter((s) => s.result?.body !== undefined && s.name in this.upstreams)
      .map((s) => this.upstreams[s.name].endpoint.cost(s.result.body.usage));
    return costs.length && costs.every((c) => c !== null) ? costs.reduce((a, b) => a + b, 0) : null;
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

  /** A stream's end: its answer complete (answered), and in a conversation the answer's length from
   * the usage it reported added to the turn execute() recorded when it opened (router.recordAnswer;
   * a failure there is logged, never thrown). */
  async streamed(request, routing, usage) {
    const tokens = usage?.completion_tokens;
    if (request.conversation !== null && Number.isInteger(tokens) && tokens > 0 && routing.decision.turn !== null) {
      try {
        await this.router.recordAnswer(request.conversation, { turn: routing.decision.turn, endpoint: routing.served_by, outputTokens: tokens });
      } catch (error) {
        this.logger.warn(`recording the stream's answer length failed: ${error}`);
      }
    }
    await this.answered(request.metadata, routing);
  }

  /** A request's answer is complete (a stream: at its end): its cost counts against the budgets its
   * metadata names (router.recordSpend; a failure there is logged, never thrown), and onRouted hears of it. */
  async answered(metadata, routing) {
    if (metadata && routing.estimated_cost) {
      try {
        await this.router.recordSpend(metadata, routing.estimated_cost);
      } catch (error) {  // the answer is the app's already: never break it here
        this.logger.warn(`recording the request's spend failed: ${error}`);
      }
    }
    this.report(routing);
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
