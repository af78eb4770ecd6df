"""Redaction of a text that arrives in pieces (serving.chat._errors.StreamRedactor) and of a stream's
chunks (serving.chat._responses.ChunkRedactor), without servers or a bundle: whatever the pieces, the
joined text is `redact` of the whole and no piece carries a key. The same cases as the JS SDK's
clients/js/test/stream-redaction.test.js. Through RoutedChat, the proxy and real servers:
tests/test_chat_hardening.py."""

from __future__ import annotations

import json
import random

from serving.chat._errors import StreamRedactor, redact
from serving.chat._responses import ChunkRedactor

KEY = "sk-cloud-7f3a9c1e5b2d4086-SECRET"
OTHER = "sk-edge-51d0c2b7e94a6f38-SECRET"


def through(keys, pieces, *, cut: bool = False) -> list[str]:
    """What a StreamRedactor of `keys` gives for `pieces`, piece by piece, the flush last."""
    redactor = StreamRedactor(keys)
    return [*(redactor.push(p) for p in pieces), redactor.flush(cut=cut)]


def test_a_key_cut_anywhere_into_two_or_three_pieces_is_replaced_whole_and_no_piece_carries_one():
    for text in (f"your key is {KEY}, keep it", KEY, f"{KEY}{KEY} and {OTHER}", f"x {OTHER}"):
        for a in range(len(text) + 1):
            for b in range(a, len(text) + 1):
                out = through([KEY, OTHER], [text[:a], text[a:b], text[b:]])
                assert "".join(out) == redact(text, [KEY, OTHER]), (text, a, b)
                assert not any(KEY[:8] in o or OTHER[:8] in o for o in out), (text, a, b)


def test_the_joined_text_is_redact_of_the_whole_for_any_pieces_and_keys_that_overlap():
    draw = random.Random(7)

    def word(n: int) -> str:
        return "".join(draw.choice("abc") for _ in range(n))

    for i in range(20_000):
        keys = [word(4 + draw.randrange(4))]
        if draw.randrange(2):
            keys.append(word(4 + draw.randrange(5)))  # "aaaa" inside "aaaaaa", "abab" over "baba", ...
        text = word(draw.randrange(30))
        pieces, p = [], 0
        while p < len(text):
            q = p + draw.randrange(6)
            pieces.append(text[p:q])
            p = q
        cut = draw.randrange(2) == 1  # a stream cut short: an end that begins a key goes too
        assert "".join(through(keys, pieces, cut=cut)) == redact(text, keys, cut=cut), (i, keys, pieces, cut)


def test_only_an_end_that_could_begin_a_key_is_held_back():
    assert through([KEY], ["Hello ", "world, ", "this is fine"]) == ["Hello ", "world, ", "this is fine", ""]
    assert through([KEY], ["ask", "ing", " sk-cl", "ever"]) == ["a", "sking", " ", "sk-clever", ""]
    assert through([KEY], ["the end: sk-cloud-7"]) == ["the end: ", "sk-cloud-7"]  # the text ended: as it is
    assert through([KEY], ["the end: sk-cloud-7"], cut=True) == ["the end: ", "[redacted]"]  # cut short: it goes
    held = StreamRedactor([KEY])
    held.push("x sk-cloud")
    assert len(held.flush()) + len("x ") == len("x sk-cloud")  # at most the key's length - 1 held
    assert KEY not in repr(held) and "sk-" not in repr(held)


def test_with_no_key_to_hunt_every_piece_comes_back_as_it_went_in():
    assert through([], ["a", "b s", "k"]) == ["a", "b s", "k", ""]
    assert through(["x", ""], ["x", "xx"]) == ["x", "xx", ""]


def chunk(choices, **extra):
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": choices, **extra}


def joined(chunks, index, read) -> str:
    return "".join(read(c) for ch in chunks for c in ch["choices"] if c["index"] == index)


def test_each_choice_and_each_text_of_a_delta_is_redacted_on_its_own_and_given_whole_by_its_finish():
    redactor = ChunkRedactor([KEY])
    sent = [
        chunk(
            [
                {"index": 0, "delta": {"role": "assistant", "content": "A: sk-cl"}},
                {"index": 1, "delta": {"content": "B: sk-"}},
            ]
        ),
        chunk([{"index": 1, "delta": {"content": KEY[3:20], "reasoning_content": "r sk-cloud"}}]),
        chunk(
            [
                {"index": 0, "delta": {"content": KEY[5:]}, "finish_reason": None},
                {"index": 1, "delta": {"content": KEY[20:]}},
            ]
        ),
        chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
        chunk([{"index": 1, "delta": {"reasoning_content": "-7f3a9 done"}, "finish_reason": "stop"}]),
        chunk([], usage={"prompt_tokens": 1, "completion_tokens": 2}),
    ]
    got = [redactor.chunk(c) for c in sent]
    assert redactor.end() is None  # nothing left once every choice finished
    assert joined(got, 0, lambda c: c["delta"].get("content", "")) == "A: [redacted]"
    assert joined(got, 1, lambda c: c["delta"].get("content", "")) == "B: [redacted]"
    assert joined(got, 1, lambda c: c["delta"].get("reasoning_content", "")) == "r sk-cloud-7f3a9 done"
    assert got[0]["choices"][0]["delta"]["role"] == "assistant"
    assert got[5] is sent[5]  # a chunk without text passes as it is
    assert KEY not in json.dumps(got)


def test_what_a_stream_ending_without_a_finish_still_holds_comes_as_one_more_chunk():
    redactor = ChunkRedactor([KEY])
    got = redactor.chunk(chunk([{"index": 0, "delta": {"content": "ends in sk-cloud-7f"}}], created=5))
    assert redactor.end() == {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 5,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "sk-cloud-7f"}, "finish_reason": None}],
    }
    assert got["choices"][0]["delta"]["content"] == "ends in "
    broken = ChunkRedactor([KEY])
    broken.chunk(chunk([{"index": 0, "delta": {"content": "ends in sk-cloud-7f"}}]))
    assert broken.end(cut=True)["choices"][0]["delta"]["content"] == "[redacted]"  # broke: the key's beginning goes


def test_tool_call_arguments_are_redacted_by_tool_call_index():
    redactor = ChunkRedactor([KEY])

    def call(index, arguments, **more):
        return {"index": index, **more, "function": {"arguments": arguments}}

    got = [
        redactor.chunk(c)
        for c in (
            chunk([{"index": 0, "delta": {"tool_calls": [call(0, '{"k": "sk-clo', id="a"), call(1, '{"s": "s')]}}]),
            chunk([{"index": 0, "delta": {"tool_calls": [call(0, f'{KEY[6:]}"}}'), call(1, "k")]}}]),
            chunk([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
        )
    ]
    calls = [c for ch in got for c in ch["choices"][0]["delta"].get("tool_calls", [])]

    def arguments(i):
        return "".join(c["function"]["arguments"] for c in calls if c["index"] == i)

    assert arguments(0) == '{"k": "[redacted]"}'
    assert arguments(1) == '{"s": "sk'
    assert got[2]["choices"][0]["delta"] == {"tool_calls": [{"index": 1, "function": {"arguments": "sk"}}]}


def test_with_no_key_to_hunt_every_chunk_passes_as_it_is():
    redactor = ChunkRedactor([])
    sent = chunk([{"index": 0, "delta": {"content": "sk-"}}])
    assert redactor.chunk(sent) is sent and redactor.end() is None
