// Python's string and number semantics the features and reasons depend on, against what
// Python gives (the values in comments were printed by Python 3).
import assert from "node:assert/strict";
import { test } from "node:test";
import { codePointLength, encodable, firstCodePoints, formatFixed, hasNonSpace, lastCodePoints, pyRstrip, roundHalfEven } from "../src/pytext.js";
import { pyFloatRepr } from "../src/canonical-json.js";

test("lengths and cuts are in code points, a lone surrogate counting as one", () => {
  assert.equal(codePointLength("a😀b"), 3);                 // len("a😀b") == 3
  assert.equal(codePointLength("\ud800\ud800\udc00"), 2);  // a lone high, then a pair
  assert.equal(firstCodePoints("a😀b", 2), "a😀");         // "a😀b"[:2]
  assert.equal(firstCodePoints("😀😀", 1), "😀");
  assert.equal(lastCodePoints("ab😀", 1), "😀");            // "ab😀"[-1:]
  assert.equal(lastCodePoints("ab", 5), "ab");
});

test("encodable replaces lone surrogates with ? and keeps pairs", () => {
  assert.equal(encodable("a\ud800b\udc00😀"), "a?b?😀");  // .encode("utf-8", "replace").decode()
});

test("whitespace is Python's str.isspace()", () => {
  assert.equal(pyRstrip("a\x1c\x85 "), "a");         // JS trimEnd keeps \x1c and \x85
  assert.equal(pyRstrip("a\ufeff"), "a\ufeff");      // and strips \ufeff, which Python keeps
  assert.equal(hasNonSpace("\x1f\u3000"), false);
});

test("rounding and formatting halve to even, as round() and format() do", () => {
  assert.deepEqual([0.5, 1.5, 2.5, -0.5, 3.7].map(roundHalfEven), [0, 2, 2, 0, 4]);
  assert.equal(formatFixed(0.0625, 3), "0.062");     // f"{0.0625:.3f}"
  assert.equal(formatFixed(-0.0625, 3), "-0.062");
  assert.equal(formatFixed(0.125, 2), "0.12");
  assert.equal(formatFixed(0.1255, 3), "0.126");     // not a tie in binary: 0.12550000000000000155
  assert.equal(formatFixed(-0.0001, 3), "-0.000");
  assert.equal(formatFixed(-0, 3), "-0.000");
  assert.equal(formatFixed(1.005, 2), "1.00");       // 1.00499999999999989...
});

test("float repr is Python's", () => {
  const cases = [[1, "1.0"], [-0, "-0.0"], [1e-5, "1e-05"], [1e-4, "0.0001"], [1e16, "1e+16"], [1234567890123456, "1234567890123456.0"],
    [0.1, "0.1"], [5e-324, "5e-324"], [1.7976931348623157e308, "1.7976931348623157e+308"], [2.5e-7, "2.5e-07"], [123.456, "123.456"]];
  for (const [x, repr] of cases) assert.equal(pyFloatRepr(x), repr, String(x));
});
