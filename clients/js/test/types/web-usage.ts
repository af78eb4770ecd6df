// Compiled by `npm run typecheck` only: the browser build's declarations as a page uses them.
import { Router, type Decision } from "../../src/web.js";

async function page(): Promise<void> {
  const router = await Router.load(new URL("/bundle/", "https://example.test"), { publicKey: "-----BEGIN PUBLIC KEY-----",
    fetchOptions: { credentials: "include" } });
  const decision: Decision = await router.route("Bonjour", { precision: "tolerant" });
  console.log(decision.zone, router.degraded);
}
void page;
