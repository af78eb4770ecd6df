// endpoints.js and endpoint-choice.js against the Python SDK (serving/endpoints/_record.py,
// serving/endpoints/_choice.py): scripts/endpoint_cases.py writes random matrices, specs and
// Python's answers on them when this file runs; every choice must be Python's, every cost within
// 1e-12, every spec error Python's text.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parsePythonJson } from "../src/canonical-json.js";
import {
  NONE, bestUnderPrice, callCosts, cascade, cascadeExpectation, cheapestWithin, escalation,
} from "../src/endpoint-choice.js";
import { EndpointSpec, EndpointSpecError, Price, parseEndpoints, scaled, twoEndpointSpecs } from "../src/endpoints.js";
import { pythonOutput } from "./fixtures.js";

const COST_TOLERANCE = 1e-12;
const cases = parsePythonJson(pythonOutput("clients/js/scripts/endpoint_cases.py"));

/** A decoded value with plain numbers and ordinary objects (what deepEqual compares to). */
const plain = (v) => (Array.isArray(v) ? v.map(plain) : v instanceof Number ? Number(v)
  : v !== null && typeof v === "object" ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)])) : v);

/** Equal numbers within the tolerance, NaN where Python has NaN. */
function close(js, py, where) {
  assert.equal(js.length, py.length, where);
  js.forEach((v, i) => {
    const expected = Number(py[i]);
    if (Number.isNaN(expected)) assert.ok(Number.isNaN(v), `${where}[${i}]: ${v} vs Python NaN`);
    else assert.ok(Math.abs(v - expected) <= COST_TOLERANCE, `${where}[${i}]: ${v} vs Python ${expected}`);
  });
}

describe("endpoint choice equals serving.endpoints._choice", () => {
  const choices = cases.choices.map(plain);

  test("on random matrices with ties, non-finite entries and rows with nothing feasible", () => {
    let rows = 0, none = 0, ties = 0;
    for (const [i, c] of choices.entries()) {
      const where = `case ${i}`;
      const first = cheapestWithin(c.expected, c.cost, c.margin, c.feasible);
      assert.deepEqual(first, c.cheapest_within, `${where}: cheapestWithin`);
      assert.deepEqual(bestUnderPrice(c.expected, c.cost, c.price, c.feasible), c.best_under_price, `${where}: bestUnderPrice`);
      const orders = cascade(c.expected, c.cost, c.start_margin, c.feasible);
      assert.deepEqual(orders, c.cascade, `${where}: cascade`);
      assert.deepEqual(escalation(c.expected, c.cost, first, c.feasible), c.escalation, `${where}: escalation`);
      const expectation = cascadeExpectation(orders, c.expectation_quality, c.cost, c.catch_rate);
      close(expectation.quality, c.cascade_quality, `${where}: cascade quality`);
      close(expectation.cost, c.cascade_cost, `${where}: cascade cost`);
      rows += first.length;
      none += first.filter((k) => k === NONE).length;
      ties += c.expected.filter((row) => new Set(row).size < row.length).length;
    }
    assert.ok(none > 0 && ties > rows / 10, `the cases hold rows with nothing feasible (${none}) and tied rows (${ties})`);
    console.log(`endpoint choice: ${choices.length} cases, ${rows} requests (${none} with nothing feasible, ${ties} with tied expectations): equal`);
  });

  test("callCosts gives Python's prices and fits", () => {
    for (const [i, c] of cases.call_costs.entries()) {
      const { cost, fits } = callCosts(parseEndpoints(c.spec), plain(c.tokens), Number(c.output_tokens));
      cost.forEach((row, r) => close(row, c.cost[r], `call_costs ${i} row ${r}`));
      // bit for bit, prices per 1k and per 1M alike (Python's decimal scaling, its arithmetic's order)
      cost.forEach((row, r) => assert.deepEqual(row, c.cost[r].map(Number), `call_costs ${i} row ${r}, exactly`));
      assert.deepEqual(fits, c.fits, `call_costs ${i}`);
    }
  });

  test("bad arguments are refused", () => {
    assert.throws(() => cheapestWithin([[0.5]], [[1]], -0.1), /margin must be >= 0/);
    assert.throws(() => bestUnderPrice([[0.5]], [[1]], NaN), /price must be >= 0/);
    assert.throws(() => cascade([[0.5]], [[1]], -1), /start_margin must be >= 0/);
    assert.throws(() => cheapestWithin([[0.5, 0.2]], [[1]], 0), /one shape/);
    assert.throws(() => cheapestWithin([[0.5]], [[1]], 0, [[true, false]]), /feasible must have the shape/);
    assert.throws(() => escalation([[0.5]], [[1]], [0, 0]), /one endpoint per request/);
    assert.throws(() => escalation([[0.5, 0.7]], [[1, 2]], [1], [[true, false]]), /not a feasible endpoint/);
    assert.throws(() => cascadeExpectation([[0]], [[0.5]], [[1]], 1.5), /catch_rate must be in \[0, 1\]/);
  });
});

describe("endpoint specs equal serving.endpoints._record", () => {
  test("good specs parse to Python's endpoints, bad ones fail with Python's message", () => {
    let errors = 0;
    for (const c of cases.specs) {
      if (c.error !== undefined) {
        assert.throws(() => parseEndpoints(c.spec, { source: c.source }),
          (error) => error instanceof EndpointSpecError && error.message === c.error ? true
            : assert.fail(`${c.source}: ${error.message}\n  Python: ${c.error}`));
        errors++;
      } else {
        assert.deepEqual(plain(parseEndpoints(c.spec, { source: c.source }).asDict()), plain(c.parsed), c.source);
      }
    }
    assert.ok(errors >= 40, `${errors} bad specs`);
  });

  test("supports(), fits(), cost() and lookups by name answer as Python's", () => {
    const spec = parseEndpoints(cases.specs[0].spec);
    for (const c of cases.supports) assert.equal(spec.get(c.endpoint).supports(plain(c.ask)), c.answer, JSON.stringify(c));
    const phone = spec.get("phone-3b");
    assert.ok(phone.fits(4096) && !phone.fits(4097));
    assert.equal(spec.get("frontier").cost(1000, 1000), 0.003 + 0.015);
    assert.deepEqual(spec.names, ["phone-3b", "cloud-mid", "frontier"]);
    assert.throws(() => spec.get("nope"), /no endpoint named 'nope'; the endpoints are phone-3b, cloud-mid, frontier/);
  });

  test("a price per 1M tokens and the earlier per 1k: the same rates, the call priced with the figure given", () => {
    const perMillion = new Price({ per_1m_input: 3, per_1m_output: 15 });
    assert.deepEqual([perMillion.per_1k_input, perMillion.per_1k_output], [0.003, 0.015]);
    const perThousand = Price.fromPer1k({ per_1k_input: 3e-5, per_1k_output: 0.0001 });
    assert.deepEqual(perThousand.asDict(), { per_1m_input: 0.03, per_1m_output: 0.1, per_call: 0 });  // not 0.030000000000000002
    assert.equal(perThousand.callCost(1000, 1000), 3e-5 * 1000 / 1000 + 0.0001 * 1000 / 1000);
    assert.deepEqual(new Price({ per_1k_input: 0.001 }).asDict(), { per_1m_input: 1, per_1m_output: 0, per_call: 0 });
    const cached = new Price({ per_1m_input: 1, per_1m_cached_input: 0.1 });
    assert.equal(cached.callCost(1000, 0, 400), 0 + 0.001 * 600 / 1000 + 0.0001 * 400 / 1000 + 0 * 0 / 1000);
    assert.equal(scaled(0.1, -3), 0.0001);
    const unbounded = new EndpointSpec({ name: "x" });
    assert.ok(unbounded.fits(10 ** 9) && unbounded.supports({ images: true }));
    assert.equal(unbounded.callCost(100), null);
    const [edge, cloud] = twoEndpointSpecs(2048);
    assert.deepEqual([edge.context_tokens, cloud.context_tokens, edge.capabilities, cloud.callCost(5000)], [2048, null, null, 0.003]);
  });
});
