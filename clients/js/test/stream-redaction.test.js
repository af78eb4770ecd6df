// Redaction of a text that arrives in pieces (src/chat/errors.js StreamRedactor) and of a
// stream's chunks (src/chat/responses.js ChunkRedactor), without servers or a bundle: whatever
// the pieces, the joined text is `redact` of the whole and no piece carries a key. The same
// through RoutedChat and real servers: chat.test.js, "a key a stream spells out over several chunks".
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { StreamRedactor, redact } from "../src/chat/errors.js";
import { ChunkRedactor } from "../src/chat/responses.js";

const KEY = "sk-cloud-7f3a9c1e5b2d4086-SECRET";
const OTHER = "sk-edge-51d0c2b7e94a6f38-SECRET";

/** What a StreamRedactor of `keys` gives for `pieces`, piece by piece, the flush last. */
function through(keys, pieces, { cut = false } = {}) {
  const redactor = new StreamRedactor(keys);
  return [...pieces.map((p) => redactor.push(p)), redactor.flush({ cut })];
}

/** A small deterministic generator (a test that fails names its seed and case). */
function generator(seed) {
  return (n) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
}

describe("StreamRedactor", () => {
  test("a key cut anywhere into two or three pieces is replaced whole; no piece carries a key", () => {
    for (const text of [`your key is ${KEY}, keep it`, KEY, `${KEY}${KEY} and ${OTHER}`, `x ${OTHER}`]) {
      for (let a = 0; a <= text.length; a++) {
        for (let b = a; b <= text.length; b++) {
          const out = through([KEY, OTHER], [text.slice(0, a), text.slice(a, b), text.slice(b)]);
          assert.equal(out.join(""), redact(text, [KEY, OTHER]), `${text} cut at ${a}, ${b}`);
          assert.ok(!out.some((o) => o.includes(KEY.slice(0, 8)) || o.includes(OTHER.slice(0, 8))), `${text} cut at ${a}, ${b}`);
        }
      }
    }
  });

  test("the joined text is redact() of the whole for any pieces, keys that overlap themselves or each other included", () => {
    const random = generator(7);
    const word = (n, letters) => Array.from({ length: n }, () => letters[random(letters.length)]).join("");
    for (let i = 0; i < 20_000; i++) {
      const keys = [word(4 + random(4), "abc")];
      if (random(2)) keys.push(word(4 + random(5), "abc"));  // "aaaa" inside "aaaaaa", "abab" over "baba", ...
      const text = word(random(30), "abc");
      const pieces = [];
      for (let p = 0; p < text.length;) { const q = p + random(6); pieces.push(text.slice(p, q)); p = q; }
      const cut = random(2) === 1;  // a stream cut short: an end that begins a key goes too
      assert.equal(through(keys, pieces, { cut }).join(""), redact(text, keys, { cut }), JSON.stringify({ i, keys, pieces, cut }));
    }
  });

  test("only an end that could begin a key is held back; text without one passes piece by piece", () => {
    assert.deepEqual(through([KEY], ["Hello ", "world, ", "this is fine"]), ["Hello ", "world, ", "this is fine", ""]);
    assert.deepEqual(through([KEY], ["ask", "ing", " sk-cl", "ever"]), ["a", "sking", " ", "sk-clever", ""]);
    assert.deepEqual(through([KEY], ["the end: sk-cloud-7"]), ["the end: ", "sk-cloud-7"], "flushed as it is when the text ended");
    assert.deepEqual(through([KEY], ["the end: sk-cloud-7"], { cut: true }), ["the end: ", "[redacted]"],
      "when the text was cut short, an end that begins a key goes");
    const held = new StreamRedactor([KEY]);
    held.push("x sk-cloud");
    assert.equal(held.flush().length + "x ".length, "x sk-cloud".length, "at most the key's length - 1 held");
  });

  test("no key to hunt (none, or under 4 characters): every piece comes back as it went in", () => {
    assert.deepEqual(through([], ["a", "b s", "k"]), ["a", "b s", "k", ""]);
    assert.deepEqual(through(["x", null], ["x", "xx"]), ["x", "xx", ""]);
  });

  test("a held end never splits a surrogate pair", () => {
    const key = "\u{1F600}sk-key";  // a key that begins with an emoji: its beginning is half a pair
    const out = through([key], ["smile \u{1F600}", "s", "!"]);
    assert.equal(out.join(""), "smile \u{1F600}s!");
    for (const o of out) assert.ok(!/[\ud800-\udbff]$/.test(o), JSON.stringify(out));
  });
});

describe("ChunkRedactor", () => {
  const chunk = (choices, extra = {}) => ({ id: "c1", object: "chat.completion.chunk", model: "m", choices, ...extra });
  const joined = (chunks, index, read) => chunks.flatMap((c) => c.choices.filter((x) => x.index === index)).map(read).join("");

  test("each choice and each text of a delta is redacted on its own, and given whole by its finish", () => {
    const redactor = new ChunkRedactor([KEY]);
    const sent = [
      chunk([{ index: 0, delta: { role: "assistant", content: "A: sk-cl" } }, { index: 1, delta: { content: "B: sk-" } }]),
      chunk([{ index: 1, delta: { content: KEY.slice(3, 20), reasoning_content: "r sk-cloud" } }]),
      chunk([{ index: 0, delta: { content: KEY.slice(5) }, finish_reason: null }, { index: 1, delta: { content: KEY.slice(20) } }]),
      chunk([{ index: 0, delta: {}, finish_reason: "stop" }]),
      chunk([{ index: 1, delta: { reasoning_content: "-7f3a9 done" }, finish_reason: "stop" }]),
      chunk([], { usage: { prompt_tokens: 1, completion_tokens: 2 } }),
    ];
    const got = sent.map((c) => redactor.chunk(c));
    assert.equal(redactor.end(), null, "nothing left once every choice finished");
    assert.equal(joined(got, 0, (c) => c.delta.content ?? ""), "A: [redacted]");
    assert.equal(joined(got, 1, (c) => c.delta.content ?? ""), "B: [redacted]");
    assert.equal(joined(got, 1, (c) => c.delta.reasoning_content ?? ""), "r sk-cloud-7f3a9 done");
    assert.equal(got[0].choices[0].delta.role, "assistant");
    assert.equal(got[5], sent[5], "a chunk without text passes as it is");
    assert.ok(!JSON.stringify(got).includes(KEY), "a beginning of the key that does not go on to the key is shown as sent; the key never");
  });

  test("what a stream ending without a finish still holds comes as one more chunk", () => {
    const redactor = new ChunkRedactor([KEY]);
    const got = [redactor.chunk(chunk([{ index: 0, delta: { content: "ends in sk-cloud-7f" } }], { created: 5 }))];
    assert.deepEqual(redactor.end(), { id: "c1", object: "chat.completion.chunk", created: 5, model: "m",
      choices: [{ index: 0, delta: { content: "sk-cloud-7f" }, finish_reason: null }] });
    assert.equal(got[0].choices[0].delta.content, "ends in ");
    const broken = new ChunkRedactor([KEY]);
    broken.chunk(chunk([{ index: 0, delta: { content: "ends in sk-cloud-7f" } }]));
    assert.equal(broken.end({ cut: true }).choices[0].delta.content, "[redacted]", "a stream that broke: the key's beginning goes");
  });

  test("tool call arguments, by tool call index; the held end joins the finish chunk as that call's arguments", () => {
    const redactor = new ChunkRedactor([KEY]);
    const call = (index, args, more = {}) => ({ index, ...more, function: { arguments: args } });
    const got = [
      chunk([{ index: 0, delta: { tool_calls: [call(0, '{"k": "sk-clo', { id: "a", type: "function" }), call(1, '{"s": "s')] } }]),
      chunk([{ index: 0, delta: { tool_calls: [call(0, `${KEY.slice(6)}"}`), call(1, "k")] } }]),
      chunk([{ index: 0, delta: {}, finish_reason: "tool_calls" }]),
    ].map((c) => redactor.chunk(c));
    const calls = got.flatMap((c) => c.choices[0].delta.tool_calls ?? []);
    const args = (i) => calls.filter((c) => c.index === i).map((c) => c.function.arguments).join("");
    assert.equal(args(0), '{"k": "[redacted]"}');
    assert.equal(args(1), '{"s": "sk');
    assert.deepEqual(got[2].choices[0].delta, { tool_calls: [{ index: 1, function: { arguments: "sk" } }] });
  });

  test("with no key to hunt, every chunk is passed on as it is", () => {
    const redactor = new ChunkRedactor([]);
    const sent = chunk([{ index: 0, delta: { content: "sk-" } }]);
    assert.equal(redactor.chunk(sent), sent);
    assert.equal(redactor.end(), null);
  });
});
