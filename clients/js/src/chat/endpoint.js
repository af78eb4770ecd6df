// Where the routed chat client sends a conversation (serving/chat/_endpoint.py): an
// OpenAI-compatible server (Endpoint: llama.cpp's server, Ollama, vLLM, a cloud API) or a model
// the page or process runs itself (LocalModel: an async function, e.g. WebLLM's engine). Each
// has a deadline for the whole answer, one for a stream's first token, and token prices.
//
// The API key and the extra headers are kept out of the object (a WeakMap of this module), so
// JSON.stringify, console.log and util.inspect of an Endpoint, or of anything holding one, never
// show them; only upstream.js reads them, to send them.

const secrets = new WeakMap();  // Endpoint -> {apiKey, headers}

export const DEFAULT_TIMEOUT_MS = 60_000;
export const MIN_RESPONSE_BYTES = 1024;

/** Options shared by both kinds, checked; RangeError / TypeError naming the option. */
function common(options, where) {
  const { model, timeoutMs = DEFAULT_TIMEOUT_MS, firstTokenTimeoutMs = null, inputPricePer1M = null,
    outputPricePer1M = null } = options;
  if (typeof model !== "string" || !model) throw new TypeError(`${where}: model must be the model name the server expects, got ${JSON.stringify(model)}`);
  for (const [name, value] of [["timeoutMs", timeoutMs], ["firstTokenTimeoutMs", firstTokenTimeoutMs]]) {
    if (value !== null && !(typeof value === "number" && value > 0 && Number.isFinite(value))) {
      throw new RangeError(`${where}: ${name} must be a positive number of milliseconds, got ${value}`);
    }
  }
  for (const [name, value] of [["inputPricePer1M", inputPricePer1M], ["outputPricePer1M", outputPricePer1M]]) {
    if (value !== null && !(typeof value === "number" && value >= 0 && Number.isFinite(value))) {
      throw new RangeError(`${where}: ${name} must be a non-negative price or null, got ${value}`);
    }
  }
  return { model, timeoutMs, firstTokenTimeoutMs, inputPricePer1M, outputPricePer1M };
}

const isCount = (n) => Number.isInteger(n) && n >= 0;

class Priced {
  /** How long a stream's first token may take: firstTokenTimeoutMs, at most timeoutMs. */
  get firstChunkTimeoutMs() {
    return Math.min(this.firstTokenTimeoutMs ?? this.timeoutMs, this.timeoutMs);
  }

  /** The price of one answer from its `usage` ({prompt_tokens, completion_tokens}); null when a
   * price is not configured or the usage is missing or not counts. */
  cost(usage) {
    if (this.inputPricePer1M === null || this.outputPricePer1M === null || usage === null || typeof usage !== "object") return null;
    const { prompt_tokens: prompt, completion_tokens: completion } = usage;
    if (!isCount(prompt) || !isCount(completion)) return null;
    return (prompt * this.inputPricePer1M + completion * this.outputPricePer1M) / 1e6;
  }
}

/** An OpenAI-compatible chat-completions server and model. */
export class Endpoint extends Priced {
  /**
   * @param {{baseUrl: string | URL, model: string, apiKey?: string | null, timeoutMs?: number,
   *   firstTokenTimeoutMs?: number | null, inputPricePer1M?: number | null, outputPricePer1M?: number | null,
   *   maxResponseBytes?: number, headers?: Record<string, string>}} options
   */
  constructor(options) {
    super();
    if (options === null || typeof options !== "object") throw new TypeError("Endpoint takes an options object: {baseUrl, model, ...}");
    const { baseUrl, apiKey = null, maxResponseBytes = 8 << 20, headers = {} } = options;
    if (typeof baseUrl !== "string" && !(baseUrl instanceof URL)) {
      throw new TypeError(`baseUrl must be a string or a URL, got ${baseUrl === null ? "null" : typeof baseUrl}`);
    }
    let url;
    try {
      url = new URL(String(baseUrl));
    } catch {
      url = null;
    }
    if (!url || !["http:", "https:"].includes(url.protocol) || !url.hostname) {
      throw new RangeError(`baseUrl=${JSON.stringify(String(baseUrl))}: expected an http:// or https:// URL such as "http://127.0.0.1:11434/v1"`);
    }
    if (url.username || url.password || url.search || url.hash || String(baseUrl).includes("?") || String(baseUrl).includes("#")) {
      throw new RangeError("baseUrl must not carry credentials, a query or a fragment: put the key in apiKey");
    }
    Object.assign(this, common(options, "Endpoint"));
    if (apiKey !== null && typeof apiKey !== "string") throw new TypeError("apiKey must be a string or null");
    if (!Number.isInteger(maxResponseBytes) || maxResponseBytes < MIN_RESPONSE_BYTES) {
      throw new RangeError(`maxResponseBytes must be an integer >= ${MIN_RESPONSE_BYTES}, got ${maxResponseBytes}`);
    }
    if (headers === null || typeof headers !== "object" || Object.values(headers).some((v) => typeof v !== "string")) {
      throw new TypeError("headers must be an object of string values");
    }
    if (Object.keys(headers).some((name) => name.toLowerCase() === "authorization")) {
      throw new RangeError("headers must not carry Authorization: put the key in apiKey");
    }
    this.baseUrl = url.href.replace(/\/+$/, "");
    this.maxResponseBytes = maxResponseBytes;
    secrets.set(this, { apiKey: apiKey || null, headers: { ...headers } });
    Object.freeze(this);
  }

  /** Where chat completions are posted. */
  get url() {
    return `${this.baseUrl}/chat/completions`;
  }

  /** Whether a key is set (the key itself is never shown). */
  get hasApiKey() {
    return secrets.get(this).apiKey !== null;
  }
}

/** A model the page or process runs itself: `call(messages, {params, stream, signal})` returns
 * the assistant text, a chat completion object, or (for a stream) an async iterable of text
 * pieces or chat.completion.chunk objects. `signal` is aborted at the deadline or when the
 * caller aborts; the call is abandoned then whether or not it stops. */
export class LocalModel extends Priced {
  /**
   * @param {Function} call
   * @param {{model?: string, timeoutMs?: number, firstTokenTimeoutMs?: number | null,
   *   inputPricePer1M?: number | null, outputPricePer1M?: number | null}} [options]
   */
  constructor(call, options = {}) {
    super();
    if (typeof call !== "function") throw new TypeError("LocalModel takes a function (messages, {params, stream, signal}) => answer");
    Object.assign(this, common({ model: "local", ...options }, "LocalModel"));
    this.call = call;
    Object.freeze(this);
  }
}

/** The key of an endpoint ("" when none) and the headers it sends: for upstream.js only. */
export function credentials(endpoint) {
  return secrets.get(endpoint) ?? { apiKey: null, headers: {} };
}
