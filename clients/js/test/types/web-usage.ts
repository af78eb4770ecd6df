// Compiled by `npm run typecheck` only: the browser build's declarations as a page uses them.
import { Endpoint, LocalModel, MemoryStore, Request, RoutedChat, Router, parseEndpoints, type Decision } from "../../src/web.js";

async function page(): Promise<void> {
  const router = await Router.load(new URL("/bundle/", "https://example.test"), { publicKey: "-----BEGIN PUBLIC KEY-----",
    fetchOptions: { credentials: "include" } });
  const decision: Decision = await router.route("Bonjour", { precision: "tolerant" });
  console.log(decision.zone, router.degraded);
  const chat = new RoutedChat(router, { edge: new LocalModel(async () => "on the page", { model: "webllm" }),
    cloud: new Endpoint({ baseUrl: "https://my-backend.example/v1", model: "big-model" }) });
  const stream = await chat.create([{ role: "user", content: "Bonjour" }], { stream: true });
  for await (const chunk of stream) console.log(chunk.choices?.[0]?.delta?.content, stream.routing.served_by);
  const run = await router.execute("Bonjour", { "phone-3b": (p) => p, frontier: async (p, { signal }) => (signal.aborted ? "" : p) },
    { timeoutsMs: { "phone-3b": 2000 } });
  console.log(run.tried.map((t) => t.label()), run.served_by);
  const request = new Request("Bonjour", { precision: "tolerant", deadline: performance.now() + 3000 });
  const routed: Decision = await router.route(request);
  const answered = await chat.create(new Request(null, { messages: [{ role: "user", content: "Bonjour" }] }), { temperature: 0 });
  console.log(routed.endpoint, answered.text, parseEndpoints({ edge: {}, cloud: {} }).names);
  const talking = await Router.load("/bundle/", { conversations: new MemoryStore(), stickiness: { weight: 2 } });
  const turn = await chat.create([{ role: "user", content: "Bonjour" }], { conversation: "tab-1" });
  console.log((await talking.route("Bonjour", { conversation: "tab-1" })).turn, turn.routing.decision.switched);
}
void page;
