// Compiled by `npm run typecheck` only: the declarations describe how the package is used.
import { ENDPOINT_RULES, EndpointSpecError, NONE, NoFeasibleEndpoint, type EndpointRule, bestUnderPrice, callCosts, cascade, cascadeExpectation, cheapestWithin, escalation, parseEndpoints,
  type EndpointSpec, type Endpoints } from "../../src/index.js";
import { BundleError, CloudCallError, Endpoint, LocalModel, RoutedChat, Router, RuleRouter, StreamInterrupted, UpstreamHTTPError,
  type ChatCompletionChunk, type Completion, type Decision, type RoutingInfo } from "../../src/index.js";
import { EndpointsFailed, FallbackForbidden, Needs, Request, execute, triedText, type Tried } from "../../src/index.js";

async function main(): Promise<void> {
  const router = await Router.load("artifacts/js/bundle", { strict: false, publicKey: "keys/router.pub", threads: 1 });
  const decision: Decision = await router.route("What is 2 + 2?", { precision: "exact" });
  const zone: "edge" | "edge_with_cloud_fallback" | "cloud" = decision.zone;
  const many: Decision[] = await router.routeBatch(["a", "b"], ["exact", null]);
  const rules: Decision = new RuleRouter().route("hello");
  console.log(zone, many.length, rules.score, router.degraded, router.manifest?.limits.edgeContextTokens);
  try {
    await Router.load("missing", { strict: true });
  } catch (error) {
    if (error instanceof BundleError) console.log(error.message);
  }
  const run = await router.execute("hi", async (p, { signal }) => (signal.aborted ? "" : p), (p) => p.toUpperCase(),
    { edgeTimeoutMs: 500, accept: (answer) => answer !== "" });
  const served: string = run.served_by;
  console.log(served, run.steps.map((s) => s.status), run.fallback_reason, triedText(run.tried), run.expected_cost);
  // N endpoints: the calls by name, per-endpoint timeouts, specs of plain fields, the caller's abort
  const spreadRun = await router.execute("hi", { "phone-3b": async (p: string, { signal }) => (signal.aborted ? "" : p), frontier: (p: string) => p },
    { timeoutsMs: { "phone-3b": 800 }, specs: { "phone-3b": { where: "device", context_tokens: 4096 }, frontier: { where: "cloud" } },
      signal: AbortSignal.timeout(10_000) });
  const first: Tried | undefined = spreadRun.tried[0];
  console.log(first?.label(), first?.outcome === "timeout");
  try {
    await execute(decision, "hi", { endpoints: { edge: () => "e", cloud: () => "c" }, edgeContextTokens: 1024, outputTokens: 250 });
  } catch (error) {
    if (error instanceof EndpointsFailed) console.log(error.tried.map((t) => t.label()), error.cause);
    if (error instanceof FallbackForbidden) console.log(error.rule, error.endpoint, triedText(error.tried));
  }
  // The request record: built once, routed and carried out; its deadline cuts every call
  const request = new Request("What is 2 + 2?", { precision: "exact", metadata: { tier: "free" }, needs: new Needs({ json: true }),
    deadline: performance.now() + 5000, conversation: "c-1" });
  const routed: Decision = await router.route(request);
  const batch: Decision[] = await router.routeBatch([request, "hello"]);
  const byRequest = await router.execute(request, { edge: (p: string) => p, cloud: (p: string) => p });
  const later: Request = request.but({ deadline: null });
  const deadlineRun = await router.execute("hi", () => "e", () => "c", { deadline: performance.now() + 100 });
  await execute(decision, "hi", { endpoints: { edge: () => "e" }, deadline: performance.now() + 100 });
  console.log(routed.cascade, batch.length, byRequest.served_by, later.deadline, request.metadata?.tier, deadlineRun.tried.length);
  const verdict = await router.acceptor?.check("What is 2 + 2?", "4", { logprobMean: -0.2 });
  const learned = await router.execute("What is 2 + 2?", () => "4", () => "4", { accept: "learned" });
  console.log(verdict?.accepted, learned.served_by);
  const chat = new RoutedChat(router, {
    edge: new Endpoint({ baseUrl: "http://127.0.0.1:11434/v1", model: "llama3.2:3b", timeoutMs: 20_000, firstTokenTimeoutMs: 1500,
      inputPricePer1M: 0, outputPricePer1M: 0 }),
    cloud: new Endpoint({ baseUrl: new URL("https://api.example.com/v1"), model: "big-model", apiKey: "sk-...", headers: { "OpenAI-Organization": "org" } }),
    onRouted: (routing: RoutingInfo) => console.log(routing.served_by, routing.fallback_kind),
  });
  const messages = [{ role: "user", content: "What is 2 + 2?" }];
  const completion: Completion = await chat.create(messages, { precision: "exact", temperature: 0, signal: AbortSignal.timeout(30_000),
    accept: (text: string, body) => text.length > 0 && body.choices.length > 0 });
  console.log(completion.text, completion.routing.estimated_cost, completion.body.usage?.completion_tokens);
  const stream = await chat.create(messages, { stream: true, stream_options: { include_usage: true } });
  try {
    for await (const chunk of stream) {
      const piece: ChatCompletionChunk = chunk;
      console.log(piece.choices?.[0]?.delta?.content ?? "");
    }
  } catch (error) {
    if (error instanceof StreamInterrupted) console.log(error.kind, error.endpoint);
  }
  const local = new RoutedChat(router, { edge: new LocalModel(async (msgs, { signal, params }) => (signal.aborted ? "" : `${msgs.length} ${Object.keys(params)}`),
    { model: "in-page", timeoutMs: 5000 }), cloud: async function* () { yield "cloud piece"; } });
  try {
    await local.create(messages, { accept: "learned" });
  } catch (error) {
    if (error instanceof CloudCallError && error.cause instanceof UpstreamHTTPError) console.log(error.cause.status, error.cause.detail);
  }
  const spread = new RoutedChat(router, { endpoints: { "phone-3b": new LocalModel(async () => "local"),
    frontier: new Endpoint({ baseUrl: "https://api.example.com/v1", model: "big-model" }) },
  specs: { "phone-3b": { where: "device", context_tokens: 4096 } } });
  const answered = await spread.create(messages, { metadata: { user: "ana" }, deadline: performance.now() + 10_000 });
  const asked = await spread.create(new Request(null, { messages, precision: "standard", deadline: performance.now() + 10_000 }));
  console.log(asked.routing.served_by);
  console.log(answered.routing.tried.map((t) => t.label()), answered.routing.expected_cost, spread.endpoints["phone-3b"], spread.edge);
  await router.close();
}
void main;

// Endpoints as data and the choice among them (endpoints.js, endpoint-choice.js).
function endpointsUsage(): void {
  const spec: Endpoints = parseEndpoints({ edge: {}, cloud: {} }, { source: "inline" });
  const phone: EndpointSpec = spec.get("edge");
  const price: number | null = phone.callCost(120, 250);
  const ok: boolean = phone.fits(900) && phone.supports({ json: true, language: "en" });
  const { cost, fits } = callCosts(spec, [120, 5000], 250);
  const first: number[] = cheapestWithin([[0.7, 0.9]], cost.slice(0, 1), 0.02, fits.slice(0, 1));
  const steps: number[][] = escalation([[0.7, 0.9]], cost.slice(0, 1), first);
  const whole = cascadeExpectation(cascade([[0.7, 0.9]], cost.slice(0, 1), 0.15), [[0.7, 0.9]], cost.slice(0, 1), 0.5);
  console.log(price, ok, steps, whole.quality[0], whole.cost[0], bestUnderPrice([[0.7, 0.9]], [[0, 1]], 0.1)[0] === NONE);
  try { parseEndpoints([]); } catch (error) { if (error instanceof EndpointSpecError) console.log(error.message); }
}
void endpointsUsage;

async function endpointDecisions(router: Router): Promise<void> {
  try {
    const decision: Decision = await router.route("Solve 3x = 9");
    const first: string | null = decision.endpoint;
    const steps: string[] = decision.cascade;
    const p: number | undefined = decision.expected?.[first ?? "edge"];
    const rule: EndpointRule | undefined = router.manifest?.endpoints?.rule;
    console.log(first, steps, p, rule, router.endpointNames?.join(", "), ENDPOINT_RULES.cascade);
  } catch (error) {
    if (error instanceof NoFeasibleEndpoint) console.log(error.message, error.rules.length);
  }
}
void endpointDecisions;

async function policies(): Promise<void> {
  const { FallbackForbidden, Needs, PolicySet, detect, loadPolicy } = await import("../../src/index.js");
  const router = await Router.load("artifacts/js/bundle", { policy: "data/policy/example.json" });
  const policy = await loadPolicy("policy.json", { endpoints: router.policyEndpoints });
  router.policy = await PolicySet.fromObject({ rules: [{ name: "r", then: "forbid", endpoint: "cloud" }] });
  router.policy = policy;
  const decision: Decision = await router.route("my mail is a@b.fr", { metadata: { tier: "free" }, needs: new Needs({ images: true }),
    capabilities: { edge: null, cloud: { images: true } } });
  const rule: string | null = decision.rule;
  const forbidden: string[] = decision.forbidden;
  await router.recordSpend({ user: "ana" }, 0.01);
  const spent: number | undefined = await router.spending?.spent("user", "ana", "day");
  console.log(rule, forbidden, spent, detect("a@b.fr").map((f) => `${f.detector} ${f.start}-${f.end}`));
  try {
    await router.execute("x", () => "edge", () => "cloud", { metadata: { privacy: "local" } });
  } catch (error) {
    if (error instanceof FallbackForbidden) console.log(error.rule, error.endpoint, error.steps.length);
  }
}
void policies;

async function conversations(): Promise<void> {
  const { ConversationState, MemoryStore, Stickiness, switchCosts, twoEndpointSpecs, TURN_OUTCOMES } = await import("../../src/index.js");
  const store = new MemoryStore({ maxConversations: 1000, maxAgeS: 600 });
  const router = await Router.load("artifacts/js/bundle", { conversations: store, stickiness: new Stickiness({ weight: Infinity }) });
  const shared = await Router.load("artifacts/js/bundle", { conversations: { get: async () => null, put: async () => {} }, stickiness: { weight: 1 } });
  const decision: Decision = await router.route("hi", { conversation: "chat-1" });
  const turn: number | null = decision.turn, moved: boolean | null = decision.switched;
  const run = await router.execute("hi", () => "e", () => "c", { conversation: "chat-1" });
  const written: boolean = await router.recordTurn("chat-1", "edge", { inputTokens: 10, outputTokens: 3, outcome: "regenerated" });
  const state = store.get("chat-1") ?? new ConversationState();
  const [delta, missing] = switchCosts(twoEndpointSpecs(1024), state, 10, 0, 0.003, Date.now() / 1000);
  console.log(turn, moved, run.served_by, written, state.toJson(), ConversationState.fromJson(state.toJson()).turns, delta, missing,
    TURN_OUTCOMES, shared.conversations.unavailable, router.conversations.stickiness.always);
  const { TurnEvidence, TurnEvidenceError, TURN_EVIDENCE_FEATURES, RETRY_S } = await import("../../src/index.js");
  router.conversations.retryS = RETRY_S;
  const evidence = new TurnEvidence({ edge: [1, 0, 0, 0, 0, 0, 0], cloud: [1, 0, 0, 0, 0, 0, 0] });
  const read = TurnEvidence.fromJson(new TextEncoder().encode("{}"), ["edge", "cloud"]);
  const moved2: number[] = evidence.adjusted([0.4, 0.8], ["edge", "cloud"], state);
  console.log(read.rows, read.weights.get("edge"), moved2, TURN_EVIDENCE_FEATURES.length, new TurnEvidenceError("x").message);
}
void conversations;
