// Compiled by `npm run typecheck` only: the declarations describe how the package is used.
import { BundleError, Router, RuleRouter, type Decision } from "../../src/index.js";

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
  const served: "edge" | "cloud" = run.served_by;
  console.log(served, run.steps.map((s) => s.status), run.fallback_reason);
  const verdict = await router.acceptor?.check("What is 2 + 2?", "4", { logprobMean: -0.2 });
  const learned = await router.execute("What is 2 + 2?", () => "4", () => "4", { accept: "learned" });
  console.log(verdict?.accepted, learned.served_by);
  await router.close();
}
void main;
