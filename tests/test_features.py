"""The shared feature extractor: statistics, tokens, precision, embedding, cache."""

from __future__ import annotations

import numpy as np
import pytest

from serving.features._extractor import FastTokenizer, FeatureExtractor, OnnxEncoder, Projection
from serving.features._spec import FeatureSpec
from serving.features._text_stats import STAT_NAMES, text_statistics
from training.embedding_cache import CachedEncoder, EmbeddingCache
from training.encoders import minilm_dir, static_encoder_graph

MCQ = "Which organ filters blood?\nA. Heart\nB. Kidney\nC. Lung\nD. Skin\nAnswer:"


@pytest.fixture(scope="module")
def extractor():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(30522, 8)).astype(np.float32)
    spec = FeatureSpec(tier="static", max_tokens=64, max_chars=400, embedding_dim=3)
    projection = Projection(np.zeros(8), rng.normal(size=(3, 8)))
    return FeatureExtractor(
        spec, FastTokenizer(minilm_dir() / "tokenizer.json"), OnnxEncoder(static_encoder_graph(table)), projection
    )


def stats(text):
    return dict(zip(STAT_NAMES, text_statistics(text, text)))


def test_text_statistics_see_the_precision_signals():
    mcq = stats(MCQ)
    assert (mcq["n_options"], mcq["ends_with_answer_cue"], mcq["n_questions"]) == (4, 1.0, 1)
    math = stats("If 3x + 5 = 20, what is x? Show $\\frac{15}{3}$.")
    assert math["n_math_ops"] >= 2 and math["n_digits"] >= 4 and math["n_latex"] >= 1
    code = stats("```python\ndef add(a, b):\n    return a + b\n```")
    assert code["n_code_markers"] >= 3
    assert stats("Write a poem about autumn")["n_code_markers"] == 0
    assert stats("")["mean_word_len"] == 0.0


def test_feature_matrix_layout(extractor):
    x = extractor.transform([MCQ, "hello"], ["exact", None])
    names = extractor.spec.feature_names
    assert x.shape == (2, len(names)) and x.dtype == np.float32
    row = dict(zip(names, x[0]))
    assert row["precision_exact"] == 1.0 and row["precision_tolerant"] == 0.0
    assert x[1, names.index("precision_exact") : names.index("emb_0")].sum() == 0.0  # undeclared
    assert row["n_tokens"] == len(extractor.tokenizer.full.encode(MCQ, add_special_tokens=False).ids)
    assert row["n_options"] == 4


def test_unknown_precision_is_rejected(extractor):
    with pytest.raises(ValueError):
        extractor.transform(["hi"], ["approximate"])
    with pytest.raises(ValueError, match="2 prompts but 1 precisions"):
        extractor.transform(["a", "b"], ["exact"])


def test_long_prompts_are_cut_but_their_length_is_kept(extractor):
    long = "word " * 20000  # 100k characters, far beyond max_chars
    x = extractor.transform([long])[0]
    names = extractor.spec.feature_names
    assert x[names.index("n_chars")] == 100000
    # Token count extrapolated from the head: about one token per word.
    assert 18000 < x[names.index("n_tokens")] < 22000
    ids, mask, _ = extractor.token_ids(extractor.heads([long]), [long])
    assert ids.shape[1] == extractor.spec.max_tokens


def test_rows_do_not_depend_on_their_batch(extractor):
    prompts = [MCQ, "short", "a much longer prompt " * 30, ""]
    together = extractor.transform(prompts, batch_size=4)
    alone = np.concatenate([extractor.transform([p]) for p in prompts])
    assert np.array_equal(together, alone)
    assert np.isfinite(together).all()  # the empty prompt included


def test_embedding_cache_skips_the_encoder_the_second_time(tmp_path):
    calls = []

    def encoder(ids, mask, texts):
        calls.append(len(texts))
        return np.tile(np.arange(4, dtype=np.float32), (len(texts), 1)) + mask.sum(1, keepdims=True)

    cache = EmbeddingCache(tmp_path / "cache.sqlite", "enc-v1")
    cached = CachedEncoder(encoder, cache)
    ids = np.array([[5, 6, 0], [7, 0, 0]])
    mask = (ids > 0).astype(np.int64)
    first = cached(ids, mask, ["a", "b"])
    second = cached(ids, mask, ["a", "b"])
    assert calls == [2] and np.array_equal(first, second)
    cached(ids, mask, ["a", "c"])
    assert calls == [2, 1] and (cache.hits, cache.misses) == (3, 3)
    other_model = EmbeddingCache(tmp_path / "cache.sqlite", "enc-v2").get_many(["a"])
    assert other_model == [None]  # another encoder never reads these vectors


def test_fast_tokenizer_gives_the_full_tokenizers_ids(real_data_dir):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    tokenizer = FastTokenizer(minilm_dir() / "tokenizer.json")
    prompts = [p for p in (real_data_dir / "mmlu" / "mmlu_professional_law.csv").read_text().split("\n\n")][:300]
    prompts += [MCQ, "Ünïcode café 日本語", "tab\there\r\nnew", "ctrl\x01char\x7f", "", "   ", "UPPER lower 123 $%^"]
    expected = [e.ids for e in tokenizer.full.encode_batch(prompts, add_special_tokens=False)]
    assert tokenizer.ids(prompts, add_special_tokens=False) == expected
    assert [tokenizer.ids([p], add_special_tokens=True)[0] for p in prompts[-7:]] == [
        tokenizer.full.encode(p, add_special_tokens=True).ids for p in prompts[-7:]
    ]

    # The shortcut is really taken on plain ASCII, and not where an added token may hide.
    assert tokenizer.shortcut and tokenizer.plain(MCQ) and tokenizer.plain("UPPER lower 123 $%^")
    assert not any(map(tokenizer.plain, ["Ünïcode", "ctrl\x01char", "a [MASK] b", "[cls] lower-cased"]))

    # Pieces that exercise each branch: vocabulary words, words split into sub-words, words
    # over WordPiece's 100-character limit, added tokens in any case, punctuation, whitespace.
    pieces = st.one_of(
        st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=30),
        st.sampled_from(
            [
                "The",
                "unaffable",
                "tokenization",
                "xqzv",
                "COVID-19",
                "e.g.",
                "a" * 101,
                "[MASK]",
                "[cls]",
                "[SEP",
                " ",
                "\n",
                "\t",
                "\r\n",
                "___",
                "$12.50",
                "##ing",
            ]
        ),
    )

    @settings(max_examples=400, deadline=None)
    @given(st.lists(pieces, max_size=12).map("".join))
    def same_on_any_ascii(text):
        assert (
            tokenizer.ids([text], add_special_tokens=False)[0]
            == tokenizer.full.encode(text, add_special_tokens=False).ids
        )

    same_on_any_ascii()


def reference_statistics(text: str, head: str) -> list[float]:
    """STAT_NAMES the obvious way (character loops, one marker at a time): the oracle of the
    fast counting in features.text_stats."""
    import re

    def count(needles):
        return sum(head.count(n) for n in needles)

    n_head = max(len(head), 1)
    digits = sum(c in "0123456789" for c in head)
    spaces = sum(c == " " for c in head)
    words = spaces + sum(c == "\n" for c in head) + 1 if head.strip() else 0
    return [
        float(len(text)),
        float(sum(c == "\n" for c in text) + 1),
        float(sum(c == " " for c in text)),
        float(digits),
        digits / n_head,
        float(sum(c in "+-*/=^<>%×÷±≤≥" for c in head)),
        float(count(["\\frac", "\\sqrt", "\\sum", "\\int", "\\cdot", "\\times", "\\pi", "^{", "_{"])),
        float(count(["```", "def ", "return ", "import ", "class ", ";\n", "{\n", "=>", "#include", "SELECT "])),
        float(len(re.findall(r"^\s*\(?[A-Ja-j][.)]\s", head, flags=re.MULTILINE))),
        float(head.count("?")),
        float(count([". ", "? ", "! ", ".\n", "?\n", "!\n"]) + head.rstrip().endswith((".", "?", "!"))),
        float(sum(c in "$€£¥" for c in head)),
        sum("A" <= c <= "Z" for c in head) / n_head,
        (len(head) - spaces) / words if words else 0.0,
        float(text[-256:].rstrip().lower().endswith(("answer:", "answer :", "a:"))),
    ]


def test_text_statistics_equal_their_obvious_definition():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    alphabet = st.sampled_from(
        list("aZ09 \n\r\t\u2028.?!$€£¥+-*/=^<>%×÷±≤≥\\{}_#;`:()Ab日é")
        + ["\ud800", "\\frac", "def ", "SELECT ", "answer:"]
    )

    @settings(max_examples=400, deadline=None)
    @given(st.lists(alphabet, max_size=60).map("".join), st.integers(0, 60))
    def same(text, cut):
        head = text[:cut]
        assert text_statistics(text, head) == reference_statistics(text, head)

    same()
    assert text_statistics(MCQ, MCQ) == reference_statistics(MCQ, MCQ)
    long = MCQ * 2000  # long prompts count their lines and spaces another way
    assert text_statistics(long, long[:2048]) == reference_statistics(long, long[:2048])
    assert text_statistics(long + "é", long[:2048]) == reference_statistics(long + "é", long[:2048])
