// Conversations (serving/conversations/): what the router keeps of each conversation between its
// turns (ConversationState: _state.py), where it keeps it (MemoryStore, or the app's own store:
// _store.py), what moving a conversation to another endpoint costs (Stickiness, switchCosts:
// _switch.py), and the router's side of it (Conversations: _keeper.py): reading each request's state
// before it is decided, writing the turn's outcome after it ran.
//
// A cache holds a prefix of the conversation: a device's KV cache what it read and wrote (its prompt
// and its answer), a provider's prompt cache the prompt it was sent. A turn served elsewhere leaves
// the others' prefixes as they were: going back to an endpoint re-reads only what came after its
// prefix, while its cache lives (a provider's: CLOUD_CACHE_TTL_S; a device's: as long as the state).
//
// What a turn costs on endpoint e depends on where the conversation has been (switchCosts):
//
//     held_e    = the prefix of the history e's cache holds (0 once a provider's cache has expired)
//     missing_e = history tokens - held_e                     what e would read again
//     money_e   = e's call price with held_e tokens at the cached-input price, less its price with none
//     time_e    = missing_e / prefill_tokens_per_s x secondsPrice    the delay to the first token, priced
//     delta_e   = money_e + time_e
//
// An endpoint with no cache at all (no cached-input price, not on the device) reads everything on
// every turn wherever the conversation was: its delta is 0. The chooser (chooser.js) prices each
// endpoint at its call price + weight x delta_e (N endpoints), or moves the score by the same
// dollars in the bundle's own exchange rate (two endpoints). weight 0: every turn on its own; 1: the
// switch at its price; Infinity: always stay while the last endpoint may serve. A policy still forces
// and forbids.
//
// Stores: MemoryStore (the default, in this process, bounded by count and age), or any object with
// get(conversation) -> ConversationState | null and put(conversation, state), each synchronous or
// returning a Promise (a store shared by several processes: Redis, a database, the app's session).
// A store that throws (or rejects, or gives something that is no ConversationState) never fails a
// request: the turn is decided without the conversation's state and its reason says so; a turn it
// cannot write is logged and lost, the answer never. After a failure the store is not asked again for
// RETRY_S (1 s): a store that hangs costs a request nothing meanwhile (Python's _keeper.py).
import { parsePythonJson, PyFloat, pyFloatRepr, pyString } from "./canonical-json.js";
import { firstCodePoints, codePointLength } from "./pytext.js";
import { isPrintable, pyKind, pyRepr, strRepr } from "./pyrepr.js";

/** The outcomes a turn records (what the next turn reads as evidence). */
export const OUTCOMES = Object.freeze(["served", "fallback", "rejected", "failed", "regenerated"]);
export const DEFAULT_MAX_CONVERSATIONS = 100_000;
export const DEFAULT_MAX_AGE_S = 3600;
export const MAX_ID_CHARS = 256;
/** Prefill rates where an endpoint declares none (the seed's latency model: a phone's edge model 0.15 ms
 * a prompt token, the cloud 0.02 ms). */
export const DEFAULT_PREFILL_TOKENS_PER_S = Object.freeze({ device: 1 / 0.00015, cloud: 1 / 0.00002 });
/** How long a provider's prompt cache keeps a prefix (about five minutes without use). */
export const CLOUD_CACHE_TTL_S = 300;

/** The time conversation state is written and read in: seconds since the epoch, as Python's time.time(). */
export const nowSeconds = () => Date.now() / 1000;

/** The conversation store could not be read or written (the app's store threw, a stored state unreadable). */
export class ConversationStoreError extends Error {
  constructor(message, options) { super(message, options); this.name = "ConversationStoreError"; }
}

/** A conversation id: 1 to 256 printable characters (serving.conversations._store.check_conversation_id). */
export function checkConversationId(conversation, where = "conversation") {
  if (typeof conversation !== "string") throw new TypeError(`${where} must be a string, got ${conversation === null ? "null" : typeof conversation}`);
  if (!conversation || codePointLength(conversation) > MAX_ID_CHARS || !isPrintable(conversation)) {
    throw new RangeError(`${where} must be 1 to ${MAX_ID_CHARS} printable characters, got ${strRepr(firstCodePoints(conversation, 40))}`);
  }
  return conversation;
}

function count(value, where) {
  if (typeof value === "bigint" && value >= 0n && value <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(value);
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) {
    throw new RangeError(`${where}: ${pyRepr(value)} is not a token or turn count`);
  }
  return value;
}

function time(value, where) {
  const numeric = typeof value === "number" || value instanceof PyFloat;
  if (!numeric || !Number.isFinite(Number(value))) throw new RangeError(`${where}: ${pyRepr(value)} is not a time`);
  return Number(value);
}

function outcomeOf(outcome) {
  if (!OUTCOMES.includes(outcome)) throw new RangeError(`outcome=${pyRepr(outcome)}: one of ${OUTCOMES.join(", ")}`);
  return outcome;
}

/** How many of the conversation's tokens one endpoint's cache holds, and since when (seconds since the epoch). */
export class Held {
  constructor(endpoint, tokens, at) {
    if (typeof endpoint !== "string") throw new TypeError(`Held endpoint must be a string, got ${pyKind(endpoint)}`);
    Object.assign(this, { endpoint, tokens: count(tokens, "Held tokens"), at: time(at, "Held at") });
    Object.freeze(this);
  }
}

/**
 * What the router knows of a conversation after its last turn (frozen; fields as Python's).
 * turns: turns served so far. endpoint: where the last one was answered (null: none was). outcome:
 * how it went (OUTCOMES). history_tokens: the conversation's length after it (its prompt and its
 * answer). held: each endpoint's cached prefix (Held). updated: the time of the turn (seconds).
 */
export class ConversationState {
  constructor({ turns = 0, endpoint = null, outcome = null, history_tokens = 0, held = [], updated = 0 } = {}) {
    if (endpoint !== null && typeof endpoint !== "string") throw new TypeError(`endpoint must be a string or null, got ${pyKind(endpoint)}`);
    if (!Array.isArray(held) || !held.every((h) => h instanceof Held)) throw new TypeError("held must be a list of Held");
    Object.assign(this, { turns: count(turns, "turns"), endpoint, outcome: outcome === null ? null : outcomeOf(outcome),
      history_tokens: count(history_tokens, "history_tokens"), held: Object.freeze([...held]), updated: time(updated, "updated") });
    Object.freeze(this);
  }

  /** The prefix `endpoint`'s cache holds, or null. */
  holds(endpoint) {
    return this.held.find((h) => h.endpoint === endpoint) ?? null;
  }

  /** The state once a turn of `inputTokens` was answered by `endpoint` in `outputTokens` (null: no
   * endpoint answered; the caches stay as they were). */
  after(endpoint, { inputTokens, outputTokens, onDevice, outcome, now }) {
    outcomeOf(outcome);
    const input = Math.max(0, Math.trunc(inputTokens));
    const history = input + Math.max(0, Math.trunc(outputTokens));
    let held = this.held;
    if (endpoint !== null) {
      const cached = onDevice ? history : input;
      held = [...held.filter((h) => h.endpoint !== endpoint), new Held(endpoint, cached, now)];
    }
    return new ConversationState({ turns: this.turns + 1, endpoint, outcome, history_tokens: history, held, updated: now });
  }

  /** The same turn with its answer's length known later (a stream's, at its end): the history grows by
   * `outputTokens`, and so does the prefix `endpoint`'s cache holds when it is on the device (it wrote
   * the answer); a provider's cache holds the prompt it was sent. */
  answered(endpoint, outputTokens, { onDevice }) {
    const tokens = Math.max(0, Math.trunc(outputTokens));
    const held = onDevice ? this.held.map((h) => (h.endpoint === endpoint ? new Held(h.endpoint, h.tokens + tokens, h.at) : h)) : this.held;
    return new ConversationState({ ...this, history_tokens: this.history_tokens + tokens, held });
  }

  /** The same state with the last turn's outcome changed (feedback: the app regenerated it). */
  marked(outcome) {
    return new ConversationState({ ...this, outcome: outcomeOf(outcome) });
  }

  /** The JSON text Python's ConversationState.to_json writes (times as floats), which it reads back. */
  toJson() {
    const text = (v) => (v === null ? "null" : pyString(v));
    const held = this.held.map((h) => `[${pyString(h.endpoint)},${h.tokens},${pyFloatRepr(h.at)}]`).join(",");
    return `{"turns":${this.turns},"endpoint":${text(this.endpoint)},"outcome":${text(this.outcome)},` +
      `"history_tokens":${this.history_tokens},"held":[${held}],"updated":${pyFloatRepr(this.updated)}}`;
  }

  /** The state toJson (or Python's to_json) wrote; RangeError "not a conversation state: ..." otherwise. */
  static fromJson(text) {
    try {
      const data = parsePythonJson(typeof text === "string" ? text : new TextDecoder().decode(text));
      if (data === null || typeof data !== "object" || Array.isArray(data)) throw new RangeError(`${pyKind(data)}, not an object`);
      for (const key of ["turns", "endpoint", "outcome", "history_tokens", "held", "updated"]) {
        if (!Object.hasOwn(data, key)) throw new RangeError(`missing ${strRepr(key)}`);
      }
      if (!Array.isArray(data.held)) throw new RangeError("held is not a list");
      const held = data.held.map((item) => {
        if (!Array.isArray(item) || item.length !== 3) throw new RangeError(`held entry ${pyRepr(item)} is not [endpoint, tokens, at]`);
        return new Held(String(item[0]), item[1], item[2]);
      });
      const optional = (v, name) => {
        if (v !== null && typeof v !== "string") throw new RangeError(`${name} ${pyRepr(v)} is not text`);
        return v;
      };
      return new ConversationState({ turns: data.turns, endpoint: optional(data.endpoint, "endpoint"), outcome: optional(data.outcome, "outcome"),
        history_tokens: data.history_tokens, held, updated: data.updated });
    } catch (error) {
      throw new RangeError(`not a conversation state: ${error.message}`, { cause: error });
    }
  }
}

/** Conversation state in this process: at most `maxConversations` (the least recently used dropped
 * first), each forgotten `maxAgeS` seconds after its last turn. get and put are synchronous. */
export class MemoryStore {
  #states = new Map();

  constructor({ maxConversations = DEFAULT_MAX_CONVERSATIONS, maxAgeS = DEFAULT_MAX_AGE_S } = {}) {
    if (!Number.isInteger(maxConversations) || maxConversations < 1) {
      throw new RangeError(`maxConversations=${pyRepr(maxConversations)}: must be a whole number >= 1`);
    }
    if (typeof maxAgeS !== "number" || !(maxAgeS > 0)) throw new RangeError(`maxAgeS=${pyRepr(maxAgeS)}: must be a number of seconds > 0`);
    this.maxConversations = maxConversations;
    this.maxAgeS = maxAgeS;
  }

  /** How many conversations it holds. */
  get size() { return this.#states.size; }

  get(conversation) {
    const state = this.#states.get(conversation);
    if (state === undefined) return null;
    this.#states.delete(conversation);
    if (nowSeconds() - state.updated > this.maxAgeS) return null;
    this.#states.set(conversation, state);  // the most recently used, last
    return state;
  }

  put(conversation, state) {
    this.#states.delete(conversation);
    this.#states.set(conversation, state);
    for (const oldest of this.#states.keys()) {
      if (this.#states.size <= this.maxConversations) break;
      this.#states.delete(oldest);
    }
  }
}

function price(value, name) {
  if (typeof value !== "number") throw new TypeError(`Stickiness ${name} must be a number, got ${pyKind(value)}`);
  if (!(value >= 0)) throw new RangeError(`Stickiness ${name}=${pyRepr(value)}: must be a number >= 0 (Infinity allowed for weight)`);
  return value;
}

/**
 * How much a switch weighs (module doc), frozen.
 * weight: the multiple of the switch cost the chooser adds: 0 every turn on its own, 1 the switch at
 *   its price, Infinity always stay while the last endpoint may serve.
 * secondsPrice: dollars a second of time to first token is worth (re-reading history delays the first
 *   token): by default one cloud call of the seed's price ($0.003) a second.
 */
export class Stickiness {
  constructor({ weight = 1, secondsPrice = 0.003 } = {}) {
    this.weight = price(weight, "weight");
    this.secondsPrice = price(secondsPrice, "secondsPrice");
    if (!Number.isFinite(this.secondsPrice)) throw new RangeError("Stickiness secondsPrice must be finite");
    Object.freeze(this);
  }

  get always() { return this.weight === Infinity; }
  get never() { return this.weight === 0; }
}

/** The default: a switch at its price. */
export const PRICED = new Stickiness();

/**
 * [each endpoint's delta in dollars, the history tokens it would read again] for a turn of
 * `inputTokens` (the whole conversation as sent) in a conversation in `state` (module doc), at `now`.
 * @param {import("./endpoints.js").EndpointSpec[]} endpoints
 * @returns {[number[], number[]]}
 */
export function switchCosts(endpoints, state, inputTokens, outputTokens, secondsPrice, now) {
  const history = Math.min(state.history_tokens, Math.trunc(inputTokens));
  const delta = endpoints.map(() => 0), missing = endpoints.map(() => 0);
  endpoints.forEach((endpoint, k) => {
    const onDevice = endpoint.where === "device";
    const price = endpoint.price;
    const cachedPrice = price !== null && price.per_1m_cached_input !== null;
    if (!(onDevice || cachedPrice)) return;  // no cache: it reads everything on every turn, wherever the conversation was
    const held = state.holds(endpoint.name);
    const alive = held !== null && (onDevice || now - held.at <= CLOUD_CACHE_TTL_S);
    const holds = alive ? Math.min(held.tokens, history) : 0;
    missing[k] = history - holds;
    let money = 0;
    if (cachedPrice && holds) money = price.callCost(inputTokens, outputTokens, holds) - price.callCost(inputTokens, outputTokens);
    const rate = endpoint.prefill_tokens_per_s || DEFAULT_PREFILL_TOKENS_PER_S[endpoint.where || "cloud"];
    delta[k] = money + missing[k] / rate * secondsPrice;
  });
  return [delta, missing];
}

/** A store's failure as a ConversationStoreError naming what it was doing. */
function storeError(error, doing, conversation) {
  if (error instanceof ConversationStoreError) return error;
  return new ConversationStoreError(`conversation store: ${doing} ${strRepr(conversation)}: ${error?.name ?? typeof error}: ${error?.message ?? error}`,
    { cause: error });
}

/** After a store failure, the store is not asked again for this long (seconds; Python's
 * serving.conversations._keeper.RETRY_S). */
export const RETRY_S = 1.0;

/** A monotonic clock in seconds (Python's time.monotonic()). */
const monotonic = () => performance.now() / 1000;

/** The router's side of conversations: a store (default a MemoryStore) and what a switch weighs. After
 * a failure the store is not asked again for `retryS` (RETRY_S), so that a store that hangs (a Redis
 * behind a lost network: each call waits out its timeout) costs a request nothing meanwhile; each read
 * and write not tried is counted as a failure; one warning when it goes, one when it answers again. */
export class Conversations {
  #downUntil = 0;  // monotonic() before which the store is not asked again
  #down = false;

  /**
   * @param {{get: Function, put: Function} | null} store
   * @param {Stickiness | {weight?: number, secondsPrice?: number} | null} stickiness
   */
  constructor(store = null, stickiness = null, { logger = console } = {}) {
    if (store !== null && (typeof store?.get !== "function" || typeof store?.put !== "function")) {
      throw new TypeError("conversations must be a store: an object with get(conversation) and put(conversation, state)");
    }
    this.store = store ?? new MemoryStore();
    this.stickiness = stickiness === null ? PRICED : stickiness instanceof Stickiness ? stickiness : new Stickiness(stickiness);
    this.logger = logger;
    this.unavailable = 0;  // store reads and writes that failed, or were not tried while it was down
    this.retryS = RETRY_S;
  }

  async read(conversation) {
    let state;
    try {
      state = await this.store.get(conversation);
    } catch (error) {
      throw storeError(error, "reading", conversation);
    }
    if (state === null || state === undefined) return null;
    if (!(state instanceof ConversationState)) {
      throw new ConversationStoreError(`conversation store: reading ${strRepr(conversation)}: got ${typeof state}, not a ConversationState`);
    }
    return state;
  }

  /** Put `state` in the store; its failure as a ConversationStoreError. */
  async write(conversation, state) {
    try {
      await this.store.put(conversation, state);
    } catch (error) {
      throw storeError(error, "writing", conversation);
    }
  }

  /** [each request's conversation state, or null for all when none has a conversation or the store
   * failed; what the reason says of a failure]. */
  async states(requests) {
    if (requests.every((r) => r.conversation === null)) return [null, null];
    if (this.skipping()) {
      return [null, "conversation state unavailable (the store failed within the last second): decided as a turn on its own"];
    }
    const states = [];
    try {
      for (const request of requests) states.push(request.conversation === null ? null : await this.read(request.conversation));
    } catch (error) {
      const failure = storeError(error, "reading", "?");
      this.failed("deciding without conversation state", failure);
      return [null, `conversation state unavailable (${failure.message}): decided as a turn on its own`];
    }
    this.reachableAgain();
    return [states, null];
  }

  /** Whether the store failed less than retryS ago (then it is not asked: counted as failed). */
  skipping() {
    if (!this.#down || monotonic() >= this.#downUntil) return false;
    this.unavailable++;
    return true;
  }

  failed(doing, error) {
    this.unavailable++;
    const first = !this.#down;
    this.#down = true;
    this.#downUntil = monotonic() + this.retryS;
    if (first) {
      this.logger.warn(`${doing}: ${error.message}; until the store answers, turns are decided without their state and not written ` +
        `(asked again every ${this.retryS} s; counted in router.conversations.unavailable)`);
    } else {
      this.logger.debug?.(`${doing}: ${error.message}`);
    }
  }

  reachableAgain() {
    if (this.#down) {
      this.#down = false;
      this.logger.warn("conversation store reachable again");
    }
  }

  /** Write a turn's outcome into the conversation's state; false (logged, counted) when the store
   * cannot be read or written: the app's answer is never lost for it. */
  async record(conversation, endpoint, { inputTokens, outputTokens, onDevice, outcome }) {
    checkConversationId(conversation);
    if (this.skipping()) return false;
    try {
      const state = (await this.read(conversation)) ?? new ConversationState();
      await this.write(conversation, state.after(endpoint, { inputTokens, outputTokens, onDevice, outcome, now: nowSeconds() }));
    } catch (error) {
      if (!(error instanceof ConversationStoreError)) throw error;
      this.failed("conversation state not written", error);
      return false;
    }
    this.reachableAgain();
    return true;
  }

  /** Add the length of turn `turn`'s answer, known only later (a stream's, at its end), to the state
   * written when the turn was recorded; nothing when another turn was recorded since or `endpoint` did
   * not serve it. False when it was not written (that, or the store failing: logged, counted). */
  async answered(conversation, turn, endpoint, outputTokens, { onDevice }) {
    if (!(outputTokens > 0) || this.skipping()) return false;
    try {
      const state = await this.read(conversation);
      if (state === null || state.turns !== turn || state.endpoint !== endpoint) return false;
      await this.write(conversation, state.answered(endpoint, outputTokens, { onDevice }));
    } catch (error) {
      if (!(error instanceof ConversationStoreError)) throw error;
      this.failed("conversation state not written", error);
      return false;
    }
    return true;
  }

  /** Record the turn execute() ran: who served it and how (served, a fallback after an error, a
   * rejected answer), or that nothing served it (`execution` null). */
  async executed(request, decision, execution, outputTokens) {
    if (request.conversation === null) return;
    if (execution === null) {
      await this.record(request.conversation, null, { inputTokens: decision.n_tokens, outputTokens: 0, onDevice: false, outcome: "failed" });
      return;
    }
    const served = execution.served_by;
    const outcome = execution.fallback_reason === null ? "served"
      : execution.tried.some((t) => t.outcome === "rejected") ? "rejected" : "fallback";
    const at = decision.cascade.indexOf(served);
    await this.record(request.conversation, served, { inputTokens: decision.n_tokens, outputTokens,
      onDevice: at >= 0 ? decision.on_device[at] : false, outcome });
  }
}

/** The decisions, a store failure's note at the end of the reason of each in a conversation. */
export function withNote(requests, decisions, note) {
  if (note !== null) requests.forEach((request, i) => { if (request.conversation !== null) decisions[i].reason += `; ${note}`; });
  return decisions;
}

/** The answer's length in tokens: its usage's completion_tokens when it reports one (`usage`, or a
 * chat answer's `body.usage`), else the text counted with the bundle's tokenizer, else 0. */
export function answerTokens(response, countTokens) {
  let usage = response !== null && typeof response === "object" ? response.usage ?? null : null;
  if (usage === null && response !== null && typeof response === "object") {  // the chat client's answer: the upstream's JSON body
    const body = response.body;
    usage = body !== null && typeof body === "object" && !Array.isArray(body) ? body.usage ?? null : null;
  }
  const completion = usage !== null && typeof usage === "object" ? usage.completion_tokens : undefined;
  if (Number.isInteger(completion) && completion >= 0 && completion < 1e9) return completion;
  return typeof response === "string" ? countTokens(response) : 0;
}
