// The learned router (serving/routing/_router.py): bundle in, Decision out; the rule table whenever the
// bundle cannot serve. Loading and routing never throw for valid arguments: a bad bundle gives a
// router on the rule table (degraded), unless `strict`, which throws BundleError and only that.
import { BundleError, content, verifiedBundle } from "./bundle.js";
import { FILE as TURN_EVIDENCE, TurnEvidence } from "./evidence.js";
import { UNFAMILIAR_POLICIES } from "./contract.js";
import { Acceptor } from "./acceptance.js";
import { Conversations, answerTokens, withNote } from "./conversations.js";
import { execute, specsByName } from "./execute.js";
import { noDetector } from "./chooser.js";
import { Request, asRequest, checkCapabilities } from "./request.js";
import { Routing } from "./routing.js";
import { Scorer } from "./scorer.js";
import { checkBatch } from "./validation.js";
import { pyRepr } from "./pyrepr.js";
import { holderIds, limitsOf, checkAmount, Spending } from "./policy/budgets.js";
import { declaresLanguages } from "./policy/capabilities.js";
import { checkMetadata, PolicySet } from "./policy/rules.js";

/** Router.execute's arguments after the prompt: (endpoints, options) or (edge, cloud, options), as
 * [the calls by name, the options]. */
function executeArguments(rest) {
  const [first, second, third] = rest;
  if (typeof first === "function") {
    if (typeof second !== "function") throw new TypeError("edge and cloud must be functions taking the prompt");
    return [new Map([["edge", first], ["cloud", second]]), optionsOf(third)];
  }
  if (first !== null && typeof first === "object") {
    if (rest.length > 2) throw new TypeError("execute(prompt, endpoints, options): the endpoints' calls in one object, then the options");
    return [first instanceof Map ? first : new Map(Object.entries(first)), optionsOf(second)];
  }
  throw new TypeError("execute() needs the endpoints' calls ({name: call}), or edge and cloud functions");
}

function optionsOf(options) {
  if (options === undefined || options === null) return {};
  if (typeof options !== "object") throw new TypeError(`options must be an object, got ${typeof options}`);
  return options;
}

/** The policy a router was given: a PolicySet for its endpoints, or a source the platform reads. */
async function policyFor(policy, routing, platform) {
  if (policy === null || policy === undefined) return null;
  const endpoints = routing.policyEndpoints;
  if (typeof policy === "string" || policy instanceof URL) {
    if (!platform.readPolicy) throw new TypeError("this platform cannot read a policy file: pass a PolicySet");
    return PolicySet.parse(await platform.readPolicy(String(policy)), { source: String(policy), endpoints });
  }
  if (!(policy instanceof PolicySet)) throw new TypeError(`policy must be a PolicySet or the policy file's path or URL, got ${typeof policy}`);
  routing.chooser.checkPolicy(policy);
  return policy;
}

/** A verified, loaded bundle's Routing; BundleError for anything wrong with the bundle,
 * onnxruntime refusing it included, or a turn_evidence.json that cannot be used (evidence.js). */
async function loadRouting(platform, source, { threads, unfamiliarPolicy, publicKey, logger }) {
  let scorer, acceptor;
  try {
    const bundle = await verifiedBundle(String(source), platform.files(source), platform.crypto, { publicKey });
    scorer = await Scorer.create(bundle, platform.runtime, { threads });
    acceptor = await Acceptor.fromBundle(bundle, scorer, platform.runtime);
    const routing = new Routing(scorer, { unfamiliarPolicy, logger, acceptor });
    if (Object.hasOwn(scorer.manifest.files, TURN_EVIDENCE)) {  // the previous turn as evidence (evidence.js)
      routing.chooser.evidence = TurnEvidence.fromJson(content(bundle, TURN_EVIDENCE), routing.chooser.names);
    }
    return routing;
  } catch (error) {
    await scorer?.release();
    await acceptor?.release();
    if (error instanceof BundleError) throw error;
    throw new BundleError(`cannot load bundle ${source}: ${error?.message ?? error}`.slice(0, 500), { cause: error });
  }
}

/** The Router of every platform; index.js (Node) and web.js (browsers) give it theirs. */
export class BaseRouter {
  /** Use Router.load. */
  constructor(routing) {
    this.routing = routing;
    this.currentPolicy = null;
    this.ledger = null;  // the budgets' Spending, made at the first spend; kept across policy changes
    /** Conversations (conversations.js): the store conversation state lives in between turns, and the
     * Stickiness a switch weighs; `unavailable` counts the times the store failed. */
    this.conversations = new Conversations(null, null, { logger: routing.logger ?? console });
  }

  /**
   * Load and verify a bundle with `platform` (node/platform.js, web/platform.js).
   * @param {string} source the bundle: a folder, or a base URL in a browser
   * `policy`: a PolicySet, or the policy file's path (Node) or URL (browsers), applied to every
   * decision; a bad one rejects with PolicyFileError even without `strict` (routing without the rules
   * is never a fallback). `languageDetector`: prompt -> ISO 639-1 code or null, for bundles whose
   * endpoints declare `languages` (without it such a bundle is refused: LanguageDetectorMissing).
   * `conversations`: where conversation state lives between turns (default a MemoryStore in this
   * process; any {get, put} store, sync or async); `stickiness`: what a switch between endpoints
   * weighs (a Stickiness, or its {weight, secondsPrice}).
   * @param {{strict?: boolean, threads?: number, unfamiliarPolicy?: string | null, publicKey?: any,
   *   logger?: {warn(message: string): void}, policy?: any, languageDetector?: ((prompt: string) => string | null) | null,
   *   conversations?: any, stickiness?: any}} [options]
   */
  static async loadWith(platform, source, { strict = false, threads = 1, unfamiliarPolicy = null, publicKey = null,
    logger = console, policy = null, languageDetector = null, conversations = null, stickiness = null } = {}) {
    if (languageDetector !== null && typeof languageDetector !== "function") throw new TypeError("languageDetector must be a function or null");
    const keeper = new Conversations(conversations, stickiness, { logger });  // its argument errors before any loading
    const router = await this.loadRouting(platform, source, { strict, threads, unfamiliarPolicy, publicKey, logger });
    router.conversations = keeper;
    router.routing.languageDetector = languageDetector;
    if (router.routing.chooser.readsLanguage && languageDetector === null) {
      await router.close();
      throw noDetector();
    }
    try {
      router.currentPolicy = await policyFor(policy, router.routing, platform);
    } catch (error) {
      await router.close();
      throw error;
    }
    return router;
  }

  static async loadRouting(platform, source, { strict, threads, unfamiliarPolicy, publicKey, logger }) {
    if (unfamiliarPolicy !== null && !UNFAMILIAR_POLICIES.includes(unfamiliarPolicy)) {
      throw new RangeError(`unfamiliarPolicy=${JSON.stringify(unfamiliarPolicy)}; use one of ${UNFAMILIAR_POLICIES.join(", ")}`);
    }
    if (!Number.isInteger(threads) || threads < 1) throw new RangeError(`threads must be a positive integer, got ${threads}`);
    try {
      return new this(await loadRouting(platform, source, { threads, unfamiliarPolicy, publicKey, logger }));
    } catch (error) {
      if (strict) throw error;
      logger.warn(`routing bundle unavailable, using the rule table: ${error.message}`);
      return new this(new Routing(null, { degradedReason: error.message, logger }));
    }
  }

  /** True when the rule table decides. */
  get degraded() { return this.routing.degraded; }
  /** Why the rule table decides, or null. */
  get degradedReason() { return this.routing.degradedReason; }
  get modelVersion() { return this.routing.modelVersion; }
  get edgeContextTokens() { return this.routing.edgeContextTokens; }
  get unfamiliarPolicy() { return this.routing.unfamiliarPolicy; }
  /** An N-endpoint bundle's endpoints in its order (decisions then carry `endpoint` and
   * `cascade`); null for a two-endpoint bundle or the rule table. */
  get endpointNames() { return this.routing.endpointNames; }
  /** The validated manifest (null when degraded); `.raw` is the manifest as parsed. */
  get manifest() { return this.routing.manifest; }
  /** The bundle's learned acceptance check ({check(prompt, answer, {logprobMean, logprobMin})}),
   * or null when it has none (trained without edge answers, older, or degraded). */
  get acceptor() { return this.routing.acceptor; }

  /** The policy applied to every decision (a PolicySet), or null. Setting it swaps it in one
   * assignment: each decision follows the old or the new one wholly. */
  get policy() { return this.currentPolicy; }

  set policy(policy) {
    if (policy !== null && !(policy instanceof PolicySet)) throw new TypeError("policy must be a PolicySet or null");
    if (policy !== null) this.routing.chooser.checkPolicy(policy);
    this.currentPolicy = policy;
  }

  /** The endpoint names a policy for this router names: an N-endpoint bundle's, else edge and cloud. */
  get policyEndpoints() { return this.routing.policyEndpoints; }

  /** The budgets' ledger (policy/budgets.js Spending), null before anything was spent. */
  get spending() { return this.ledger; }

  /** Count what a request cost against the budgets its metadata names (the metadata keys the policy's
   * `budget` conditions read). Nothing is counted without a policy that has budgets. */
  async recordSpend(metadata, amount) {
    checkAmount(amount);
    const policy = this.currentPolicy;
    metadata = checkMetadata(metadata);
    if (policy === null || !policy.budgetKeys.length || !metadata) return;
    this.ledger ??= new Spending();
    await this.ledger.add(metadata, amount, policy.budgetKeys, null, { limits: limitsOf(policy) });
  }

  /** The policy, the ledger and the budget holders' ids the policy reads of each request's metadata,
   * for Routing.decideAll. */
  async decideOptions(requests) {
    const policy = this.currentPolicy, spending = this.ledger;
    const holders = policy !== null && spending !== null && policy.budgetKeys.length
      ? await Promise.all(requests.map((r) => holderIds(r.metadata, policy.budgetKeys))) : null;
    return { policy, spending, holders };
  }

  /** Where one request should run. `prompt`: a Request (request.js), or its text with the request's
   * other fields as options: `precision`; `metadata`: what the policy's rules read (string to string);
   * `needs`: what it needs of its endpoint (a Needs: images, tools, json, language); `capabilities`:
   * the endpoints' by name (default: the bundle's specs; two-endpoint routers know none unless told).
   * `conversation`: the conversation the request belongs to (an app's id): the turn is decided with
   * its state (its turn, where it ran, what moving it costs; Decision.turn and switched), which
   * execute() and recordTurn() write. Rejects only for argument errors (TypeError, RangeError) and
   * NoFeasibleEndpoint when the policy, the needs or the context limits leave no endpoint. */
  async route(prompt, { precision = null, metadata = null, needs = null, capabilities = null, conversation = null } = {}) {
    const request = asRequest(prompt, { precision, metadata, needs, capabilities, conversation });
    if (request.conversation === null) return (await this.routing.decideAll([request], await this.decideOptions([request])))[0];
    return (await this.decided([request], this.routing))[0];
  }

  /** The decisions of requests of which some are in a conversation: each one's state read, its switch
   * costs weighed (a store that fails: decided without, the reasons say so). */
  async decided(requests, routing) {
    const keeper = this.conversations;
    const [states, note] = await keeper.states(requests);
    const options = { ...await this.decideOptions(requests), states, stickiness: keeper.stickiness };
    return withNote(requests, await routing.decideAll(requests, options), note);
  }

  /**
   * Record a conversation's turn that the app ran itself after route(): which endpoint answered (null:
   * none did), the prompt's and the answer's tokens, and how it went (served, fallback, rejected,
   * failed, regenerated). execute() and RoutedChat record their turns themselves. Resolves false when
   * the store could not be written (logged; never rejects for it).
   */
  async recordTurn(conversation, endpoint, { inputTokens, outputTokens = 0, outcome = "served" } = /** @type {any} */ ({})) {
    const names = this.routing.chooser.names;
    if (endpoint !== null && !names.includes(endpoint)) {
      throw new RangeError(`endpoint=${pyRepr(endpoint)}: this router's endpoints are ${names.join(", ")}`);
    }
    if (!Number.isFinite(inputTokens) || !Number.isFinite(outputTokens)) throw new TypeError("inputTokens and outputTokens must be numbers");
    const onDevice = endpoint !== null && this.routing.chooser.onDevice[names.indexOf(endpoint)];
    return this.conversations.record(conversation, endpoint, { inputTokens, outputTokens, onDevice, outcome });
  }

  /** Add the length of a turn's answer known only once it was read (a stream's, from the usage at its
   * end; RoutedChat calls it) to what execute() recorded of turn `turn` (the Decision's). Resolves
   * false when nothing was written: another turn recorded since, another endpoint recorded as serving
   * it, no tokens, or the store failing. */
  async recordAnswer(conversation, { turn, endpoint, outputTokens } = /** @type {any} */ ({})) {
    const names = this.routing.chooser.names;
    if (!names.includes(endpoint)) throw new RangeError(`endpoint=${pyRepr(endpoint)}: this router's endpoints are ${names.join(", ")}`);
    const onDevice = this.routing.chooser.onDevice[names.indexOf(endpoint)];
    return this.conversations.answered(conversation, turn, endpoint, outputTokens, { onDevice });
  }

  /** Decisions for many requests, scored in one onnxruntime call: Requests, or texts with
   * `precisions`, `metadata` and `needs` one each (or null) per prompt and `capabilities` for all. */
  async routeBatch(prompts, precisions = null, { metadata = null, needs = null, capabilities = null } = {}) {
    const [list, tags] = checkBatch(prompts, precisions, (p) => p instanceof Request);
    for (const [name, given] of [["metadata", metadata], ["needs", needs]]) {
      if (given !== null && given.length !== list.length) throw new RangeError(`${given.length} ${name} for ${list.length} prompts`);
    }
    if (!list.length) return [];
    const known = checkCapabilities(capabilities);
    const requests = list.map((p, i) => asRequest(p, { precision: tags[i], metadata: metadata?.[i] ?? null,
      needs: needs?.[i] ?? null, capabilities: known }, `prompts[${i}]`));
    if (requests.every((r) => r.conversation === null)) return this.routing.decideAll(requests, await this.decideOptions(requests));
    return this.decided(requests, this.routing);
  }

  /**
   * Route, then run the decision's cascade (execute.js): `endpoints` maps each of the bundle's
   * endpoints to its call, `call(prompt, {signal, endpoint})` returning the answer or a Promise of
   * it; a two-endpoint app may pass `edge` and `cloud` functions instead:
   *
   *   router.execute(prompt, { "phone-3b": onDevice, "onprem-8b": onPrem, frontier: cloudApi }, options)
   *   router.execute(prompt, edge, cloud, options)
   *
   * `prompt`: a Request (request.js), or its text with the request's fields among the options:
   * `precision`, `metadata`, `needs`, `capabilities` as route() takes them, `deadline` (a
   * performance.now() value: each call's timeout is cut to what is left before it, and once it has
   * passed the endpoints left are skipped, as timeouts). Each call gets the request's text.
   * Options: `specs` the endpoints' specs (EndpointSpecs, or objects of their fields: context limits,
   * prices, where each runs), default the bundle's own (their declared capabilities are what the
   * request's needs are checked against when it has any); `timeoutsMs` name -> milliseconds
   * (`edgeTimeoutMs` the edge's): a call that overruns is abandoned (its signal aborted) and the next
   * endpoint serves; `accept`: answer -> boolean, or "learned" (the bundle's acceptance check; the
   * call must then answer a string, anything else counts as a check that threw), reading the answers
   * the decision checks (Decision.checked; every answer but the last with `verifyEdgeZone`);
   * `signal`: the caller's abort, which stops the run and rejects with its reason. A forbidden
   * endpoint is never called: FallbackForbidden names the rule when the others did not serve,
   * NoFeasibleEndpoint when none was left; EndpointsFailed (a CloudCallError) when every call failed.
   * A request in a `conversation` is decided with its state, and the turn is recorded once the run
   * ends: who served it and how (served, fallback, rejected), or failed when none did; the answer's
   * tokens from its usage.completion_tokens (a chat answer's body's), else its text counted.
   */
  async execute(prompt, ...rest) {
    const [calls, options] = executeArguments(rest);
    const { precision = null, edgeTimeoutMs = null, timeoutsMs = null, accept = null, verifyEdgeZone = false, metadata = null,
      needs = null, capabilities = null, deadline = null, specs = null, signal = null, conversation = null } = options;
    if (accept !== null && accept !== "learned" && typeof accept !== "function") {
      throw new TypeError(`accept must be a function, "learned" or null, got ${typeof accept}`);
    }
    if (edgeTimeoutMs !== null && !(Number.isFinite(edgeTimeoutMs) && edgeTimeoutMs >= 0)) {
      throw new RangeError(`edgeTimeoutMs must be a non-negative number or null, got ${edgeTimeoutMs}`);
    }
    let request = asRequest(prompt, { precision, metadata, needs, capabilities, deadline, conversation });
    const routing = this.routing;  // one bundle for the decision, the specs and the check it is carried out with
    const given = specs === null ? null : specsByName(specs);
    if (given !== null && request.capabilities === null) {
      // The given specs' capabilities decide when the request needs something, or when one of them
      // declares languages (every request has a language); a spec declaring none leaves it to the bundle's.
      const declared = new Map([...given].filter(([, spec]) => spec.capabilities !== null).map(([n, spec]) => [n, spec.capabilities]));
      if (declared.size && (request.needs !== null || declaresLanguages(declared))) request = request.but({ capabilities: declared });
    }
    const [decision] = request.conversation === null ? await routing.decideAll([request], await this.decideOptions([request]))
      : await this.decided([request], routing);
    const check = accept === "learned" ? routing.learnedAccept(request.text) : accept;
    const bundle = new Map(routing.chooser.endpoints.map((e) => [e.name, e]));
    // each given spec's context limit, price and place, the bundle's where it declares none
    const specsRun = given === null ? bundle : new Map([...given].map(([name, spec]) => [name, spec.filledFrom(bundle.get(name))]));
    const run = () => execute(decision, request.text, { endpoints: calls, specs: specsRun, timeoutsMs, edgeTimeoutMs, accept: check,
      verifyEdgeZone, outputTokens: routing.outputTokens, deadline: request.deadline, signal });
    if (request.conversation === null) return run();
    let execution = null;
    try {
      execution = await run();
      return execution;
    } finally {  // the turn's outcome recorded on the way out, a failure included
      const tokens = execution === null ? 0 : answerTokens(execution.response, (text) => routing.rules.countTokens(text));
      await this.conversations.executed(request, decision, execution, tokens);
    }
  }

  /** Release the onnxruntime session; the router must not be used after. */
  async close() {
    if (this.routing.scorer) await this.routing.scorer.release();
    if (this.routing.acceptor) await this.routing.acceptor.release();
  }
}
