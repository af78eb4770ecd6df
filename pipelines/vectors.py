"""`make vectors BUNDLE=dir OUT=file`: the Python SDK's decisions on a fixed set of prompts, as
JSON, so that another runtime of the same bundle (clients/js) can be held to them.

The prompts: the logs' test split as the bundle's own split assigns it (prompts the model never
saw, what users send), plus hard cases generated here (empty, whitespace, long, 1 MB, emoji, CJK,
RTL, lone surrogates, control characters, added-token strings, Unicode whitespace quirks), each
routed with every precision (undeclared, exact, standard, tolerant).

What the file holds, so that a mismatch can be traced to its stage:
- `cases`: each prompt once, with the ids the model is fed and the scalar inputs (text statistics,
  undeclared precision) the Python SDK computed for it;
- `decisions`: per case, precision and router, the Decision as a dict. Routers: `bundle` (the
  bundle as shipped), `unfamiliar_rule_table` and `unfamiliar_learned` (the same bundle with
  unfamiliar_policy="rule_table" or "learned", hard cases only: the unfamiliar ones) and
  `rule_table` (the hand rule table without a tokenizer: what a degraded router decides);
- `canonical_json`: JSON texts with their canonical form as the manifest's checksum and
  signature see it (json.dumps(sort_keys=True, ensure_ascii=True)), the bundle's manifest first;
- `signature`: the bundle's manifest signed by training.keys with a key made for the file (the
  public key as PEM and raw hex, the signature hex): a runtime must accept it from the bundle's
  folder as manifest.sig, and refuse it under any other key;
- `acceptance` (bundles with an acceptance check): the logs' edge answers and generated hard
  answers with their prompts and log-probabilities, the acceptance model's input row
  (serving.scoring._acceptance.Acceptor.features, float32) and Python's verdict (probability, accepted);
- `codepoints`: the bundle tokenizer's ids of "x" + c + "x" for every code point c but the
  surrogates, as runs [first, last, ids] of equal ids: where another tokenizer's Unicode tables
  (categories, CJK ranges, lower-casing) differ from the Rust library's, this finds it.

Every prompt is written with ASCII escapes and read back identically (checked here), lone
surrogates included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

PRECISIONS = (None, "exact", "standard", "tolerant")
FORMAT = 1


def log_prompts(logs: list[str], manifest, split: str = "test") -> list[str]:
    """The distinct prompts of `logs` that the bundle's own split puts in `split`, in hash order
    (the order does not depend on the files' layout)."""
    import numpy as np

    from data.logs import load_logs
    from data.prepare import assign_splits, hash_uniform

    frame = load_logs(logs, max_reject_share=1.0).frame().drop_duplicates("prompt")
    settings = manifest.split
    splits = assign_splits(
        frame["prompt"],
        val_share=settings.get("val_share", 0.15),
        test_share=settings.get("test_share", 0.15),
        salt=settings.get("salt", ""),
        offset=settings.get("offset", 0.0),
    )
    chosen = frame[splits == split]["prompt"]
    return chosen.iloc[np.argsort(hash_uniform(chosen, "vectors:"), kind="stable")].tolist()


def hard_cases() -> list[tuple[str, str]]:
    """(id, prompt) of inputs a port gets wrong first: the cut at max_chars, surrogates, Unicode
    whitespace and case rules, the tokenizer's normaliser, the statistics' patterns."""
    sentence = "The quick brown fox jumps over the lazy dog near 12 banks. "
    cases = [
        ("empty", ""),
        ("space", " "),
        ("whitespace", " \t\n \r\n  "),
        ("padded", "   What is 2 + 2?   "),
        ("greeting", "hi"),
        ("thanks", "Thanks a lot!"),
        ("long_2049", "a" * 2049),
        ("long_words", sentence * 60),
        ("many_tokens", "a " * 1000),
        ("over_edge_context", "tell me, " * 1500),
        ("one_word_150", "x" * 150),
        ("subwords", "Supercalifragilisticexpialidocious antidisestablishmentarianism"),
        ("one_mb_ascii", (sentence * (1 + (1 << 20) // len(sentence)))[: 1 << 20]),
        ("one_mb_emoji", "😀" * (1 << 19)),
        ("one_mb_cjk_answer", "漢字" * (1 << 19) + "\nAnswer:"),
        ("astral_at_cut", "a" * 2047 + "😀tail"),
        ("surrogate_pair_after_cut", "b" * 2048 + "😀"),
        ("emoji", "What does 😀 mean? 👍🏽 🇫🇷 👨‍👩‍👧‍👦 🫠"),
        ("emoji_only", "🙂🙃"),
        ("japanese", "日本の首都はどこですか？"),
        ("chinese", "请把这句话翻译成英文：你好，世界。"),
        ("korean", "안녕하세요, 잘 지내세요?"),
        ("mixed_cjk", "translate 你好 to English, please"),
        ("arabic", "ما هي عاصمة فرنسا؟"),
        ("hebrew", "מה השעה עכשיו?"),
        ("rtl_marks", "abc \u202edcba\u202c \u200f"),
        ("lone_high", "abc\ud800def"),
        ("lone_low", "\udc00 starts"),
        ("high_at_end", "ends with \ud83d"),
        ("reversed_pair", "x\ude00\ud83dy"),
        ("surrogates_question", "\ud800? (A) yes\n(B) no"),
        ("controls", "\x00\x01\x07 bell\x08 and \x1b[31m escape"),
        ("vt_ff", "a\x0bb\x0cc"),
        ("del", "x\x7fy"),
        ("python_space_quirks", "\x1c\x1d\x1e\x1f\x85A. first\x85B) second \x1c"),
        ("unicode_spaces", "\u2003em\u3000ideographic\u00a0nbsp\u2028line\u2029para\u202fnarrow"),
        ("bom", "\ufeffWhat is a BOM?\ufeff"),
        ("zero_width", "zero\u200bwidth\u200cjoin\u200dend\u2060"),
        ("carriage_returns", "Hello\r\nWorld\rA. one\rB. two"),
        ("replacement_char", "bad \ufffd byte"),
        ("private_use", "\ue000\U000f0000 private"),
        ("combining", "e\u0301 cafe\u0301 \u0301alone"),
        ("greek_sigma", "ΟΔΟΣ ΣΟΦΙΑΣ Σ"),
        ("turkish", "İSTANBUL ıi İnvestment"),
        ("german", "STRASSE Straße ß"),
        ("accents", "Café naïve résumé ÅNGSTRÖM Ǆ ǅ"),
        ("kelvin_longs", "\u212a \u017ftock \ufb01nance"),
        ("fullwidth", "ＡＢＣ１２３？"),
        ("math_unicode", "x² + y² ≤ 10 ± 2, 6 ÷ 3 × 2 ≥ 4"),
        ("latex", "Compute \\frac{1}{2} + \\sqrt{x} \\cdot \\pi, x^{2}, a_{i}, \\sum \\int \\times"),
        ("code", "```python\ndef f(x):\n    return x\n```\nimport os; class A {\n} => SELECT * #include"),
        ("options", "Which one?\n(A) foo\n(B) bar\nC) baz\n  d. qux\nE.nospace\n\tF) tab"),
        ("currency", "$5 €3 £2 ¥1 costs? $$"),
        ("percent", "What is 12.5% of 3,000,000? 1/3 = 0.333..."),
        ("answer_cue", "2 + 2 = ?\nAnswer:"),
        ("answer_cue_spaced", "Q: why?\nANSWER :  \n\t"),
        ("a_cue", "Q: what?\nA:"),
        ("answer_cue_unicode_space", "Answer:\u3000"),
        ("sentences", "One. Two? Three! Four.\nFive?\nSix!\n"),
        ("ends_period", "Done."),
        ("added_tokens", "[CLS] what is [MASK]? [SEP] [UNK] [PAD]"),
        ("added_lower", "[cls] [mask] [sep]"),
        ("unk_word", "\u0378\u0379 unassigned"),
        ("tabs_newlines", "a\tb\nc\r\nd\n\n\ne"),
        ("domains", "The plaintiff sued the defendant in court; the patient's diagnosis and the bank's loan."),
        ("law_boundaries", "law élaw lawé _law law_ LAW Law"),
        ("finance_words", "What is the interest rate on a mortgage?"),
        ("upper", "WHAT IS THE CAPITAL OF FRANCE?"),
        ("digits", "0123456789 ٠١٢٣ ０１２"),
        ("thai", "สวัสดีครับ"),
        ("devanagari", "नमस्ते दुनिया"),
        ("cyrillic", "Привет, как дела?"),
    ]
    return cases


def fuzz_cases(n: int = 200, seed: int = 28) -> list[tuple[str, str]]:
    """(id, prompt) of random text drawn from many scripts, punctuation, whitespace and
    controls: what no list of hard cases thinks of. Lone surrogates only where JSON keeps them
    apart (never a high one right before a low one)."""
    import random

    rng = random.Random(seed)
    ranges = [
        (0x20, 0x7E),
        (0x00, 0x1F),
        (0x80, 0xFF),
        (0x100, 0x24F),
        (0x370, 0x3FF),
        (0x400, 0x4FF),
        (0x590, 0x6FF),
        (0x900, 0x97F),
        (0xE00, 0xE7F),
        (0x2000, 0x206F),
        (0x20A0, 0x20CF),
        (0x2200, 0x22FF),
        (0x3000, 0x30FF),
        (0x4E00, 0x9FFF),
        (0xAC00, 0xD7A3),
        (0xFF00, 0xFFEF),
        (0x1F300, 0x1FAFF),
        (0x1D400, 0x1D7FF),
        (0xD800, 0xDFFF),
    ]
    words = ["the", "what", "is", "answer", "law", "patient", "stock", "A.", "(B)", "?", "\\frac", "```", "\n", " "]
    cases = []
    for i in range(n):
        parts: list[str] = []
        for _ in range(rng.randint(0, 40)):
            if rng.random() < 0.3:
                parts.append(rng.choice(words))
                continue
            lo, hi = rng.choice(ranges)
            c = chr(rng.randint(lo, hi))
            if 0xDC00 <= ord(c) <= 0xDFFF and parts and parts[-1] and 0xD800 <= ord(parts[-1][-1]) <= 0xDBFF:
                c = "?"  # a high surrogate before a low one reads back from JSON as one character
            parts.append(c)
        cases.append((f"fuzz_{i:03d}", "".join(parts)))
    return cases


def hard_answers() -> list[str]:
    """Answers that exercise serving/features/_response_features.py's rules: calculator annotations and
    arithmetic steps (valid, wrong, Python-only literal forms, Unicode digits), final-answer
    markers, doubt phrases, repetition, truncation, every kind of line break, and sizes."""
    return [
        "",
        " ",
        "\n\n",
        "#### 18",
        "The answer is 42.",
        "I think the answer is (B)",
        "B.",
        "answer: C",
        "Janet has 16 - 3 - 4 = 9 eggs.\nShe sells them for 9 * $2 = $<<9*2=18>>18.\n#### 18",
        "<<0x10+1=17>> <<1_000*2=2000>> <<2**3=8>> <<(1+2)*3=9>> <<7/0=0>> <<1e400*1=1>> <<10/3=3.33>> <<3=3>>",
        "<<٣+٤=٧>> <<1 # note=1>> <<-(-2)=2>> <<+5 - -5=10>> <<1.5e3/3=500>> <<007+1=8>> <<.5*4=2>> <<5.*2=10>>",
        "<<1__0+1=11>> <<(1+2=3>> <<1<2=1>> <<2 x 3=6>> <<6 ÷ 3=2>> <<4×5=20>> <<1,000+1=1001>> <<a+1=2>>",
        "<<2*3=6 eggs>> <<2*3= 6 >> <<2*3=$6>> <<2*3=6%>> <<50%*2=1>> <<1/3=0.33>> <<1e308*10=1>> <<1j+1=1>>",
        "٣ + ٤ = ٧ and ١٢ × ٣ = ٣٦ so ٣٦",
        "１２ + ３ = １５",
        "$5 + $3 = $8",
        "50% x 20 = 10",
        "(2 + 3) x $4 = $20",
        "16 - 3 - 4 = 9\n9 * 2 = 19\n19 / 0 = 0\n1,000,000.50 + 0.5 = 1,000,001\n-5 + 3 = -2",
        "\n".join(f"{i} + {i} = {2 * i + (i % 3 == 0)}" for i in range(60)),
        "I'm not sure, but perhaps it might be 7. Actually, wait, let me recalculate: I made an error. 8",
        "I'm sorry, as an AI I cannot help with that. I am unable to provide an answer.",
        "Hmm \u0130 ΟΔΟΣ İstanbul AŞK final answer: ΣΟΦΙΑΣ",
        "the same line again and again\n" * 12,
        "buffalo " * 300,
        "open code\n```python\nprint(1)\n",
        "lines\rwith\x0bodd\x0cbreaks\x1cand\x1dseparators\x1e\x85here\u2028and\u2029there 3 + 4 = 7",
        "trailing CJK punctuation。",
        "（答案）",
        "ends with a quote'",
        "ends with an open comma,",
        "12.5",
        "The result is 3.0000000001",
        "x" * 5000 + " 2 + 2 = 4",
        "9 " * 1500,
        "😀 " * 800 + "#### 5",
        "lone \ud800 surrogate 1 + 1 = 2",
        "control\x00chars\x07 2 * 2 = 4",
        "\\boxed{12}",
        "Final Answer: 3 (C)",
        "a" * 70 + " = 5 + 5 = 10",
        "3 * (4 + 5) = 27\n(2 + 3) * (4 - 1) = 15\n((1)) + 2 = 3",
        "=" * 50,
    ]


def arithmetic_answers(n: int = 300, seed: int = 30) -> list[str]:
    """Answers stating random arithmetic, in calculator annotations and as steps: expressions
    drawn from a grammar of Python's literal forms (hex, octal, binary, underscores, exponents,
    leading zeros, imaginary), unary signs, parentheses, comments, continuations and line breaks,
    one in five with a token Python does not evaluate (**, //, %, names, Unicode digits); what a
    port of its parser gets wrong first."""
    import random

    rng = random.Random(seed)
    literals = [
        "1",
        "7",
        "12",
        "250",
        "0x1f",
        "0X1F",
        "0b101",
        "0o17",
        "1_000",
        "09.5",
        "00",
        "1e5",
        "2E-3",
        ".5",
        "5.",
        "3.25",
        "1e400",
        "0",
    ]
    junk = ["**", "//", "%", "1j", "09", "if", "٣", "１２", "_", "1__0", "\x0b", "\xa0", ",", "$"]
    spaces = ["", "", " ", "  ", "\t", "\f", " #c\n", "\\\n"]

    def expression(depth: int) -> str:
        out = [operand(depth)]
        for _ in range(rng.randint(0, 3)):
            out += [rng.choice(spaces), rng.choice("+-*/x×÷"), rng.choice(spaces), operand(depth)]
        return "".join(out)

    def operand(depth: int) -> str:
        roll = rng.random()
        if roll < 0.15 and depth < 2:
            inner = expression(depth + 1).replace("\n", rng.choice(["\n", "\r\n", " "]))
            return f"({inner})"
        if roll < 0.25:
            return rng.choice("+-") + operand(depth)
        return rng.choice(literals)

    answers = []
    for i in range(n):
        expr = expression(0)
        if i % 5 == 0:
            cut = rng.randint(0, len(expr))
            expr = expr[:cut] + rng.choice(junk) + expr[cut:]
        stated = rng.choice(["1", "12", "0", "-3", "8.5", "1,000", "$5", "15%", "abc", " 7 ", "١٢", "1e5", "nan"])
        answers.append(f"<<{expr}={stated}>>" if i % 2 else f"so {expr} = {stated}\n#### {stated}")
    return answers


def acceptance_rows(router, logs: list[str]) -> list[dict]:
    """The acceptance model's inputs and Python's verdicts on the logs' edge answers and
    `hard_answers()` (each paired with a few prompts, with and without log-probabilities)."""
    from data.logs import load_logs

    acceptor = router.acceptor
    if acceptor is None:
        return []
    frame = load_logs(logs, max_reject_share=1.0).frame()
    answered = frame[frame["edge_response"].notna()]
    pairs = [
        (p, a, m if m == m else None, lo if lo == lo else None)
        for p, a, m, lo in zip(
            answered["prompt"], answered["edge_response"], answered["edge_logprob_mean"], answered["edge_logprob_min"]
        )
    ]
    prompts = [
        "What is 3 + 4? Give 12 and 36 as well.",
        "",
        "Natalia sold clips to 48 of her friends in April, and "
        "then she sold half as many clips in May. How many clips did Natalia sell altogether?",
    ]
    for i, answer in enumerate(hard_answers() + arithmetic_answers() + [text for _, text in fuzz_cases(120, seed=29)]):
        pairs.append((prompts[i % len(prompts)], answer, -0.25 if i % 2 else None, -3.5 if i % 2 else None))
    rows = []
    for prompt, answer, mean, low in checked_round_trip_pairs(pairs):
        verdict = acceptor.check(prompt, answer, logprob_mean=mean, logprob_min=low)
        rows.append(
            {
                "prompt": prompt,
                "answer": answer,
                "logprob_mean": mean,
                "logprob_min": low,
                # NaN (a log-probability not given) as null: JSON has no NaN
                "features": [
                    None if v != v else v for v in acceptor.features([prompt], [answer], [mean], [low])[0].tolist()
                ],
                "probability": verdict.probability,
                "accepted": verdict.accepted,
            }
        )
    return rows


def checked_round_trip_pairs(pairs: list[tuple]) -> list[tuple]:
    """The pairs whose texts read back from JSON as themselves (the others are left out)."""
    return [pair for pair in pairs if all(json.loads(json.dumps(t)) == t for t in pair[:2])]


def canonical_json_cases(manifest_text: str) -> list[dict]:
    """JSON texts and their canonical form (what the manifest's checksum and signature hash):
    the bundle's manifest, then values whose Python form a JSON parser loses (1.0 against 1,
    exponents, big integers, escapes, key order by code point)."""
    texts = [
        manifest_text,
        '{"b": 1.0, "a": 1, "c": -0.0, "d": -0, "e": 1E5, "f": 1e+2, "g": 0.1, "h": 1e-05}',
        "[0.0001, 0.00001, 1e15, 1e16, 1234567890123456.0, 12345678901234567.0, 1e22, 1e100, 5e-324, "
        "1.7976931348623157e308, 2.5e-7, 3.14e-10, 123456789012345678901234567890, -12, 0.5, 100.0]",
        '{"\\ufb01": 1, "\\ud83d\\ude00": 2, "a": 3, "B": 4, "": 5, "\\u00e9": 6}',
        '{"s": "tab\\t nl\\n cr\\r bs\\b ff\\f q\\" bsl\\\\ sl\\/ del\\u007f nul\\u0000 us\\u001f é 😀 \\udc00"}',
        '{"n": NaN, "i": Infinity, "m": -Infinity, "t": true, "f": false, "z": null, "e": {}, "l": [], '
        '"nested": [[1, [2.0]], {"k": "v"}]}',
    ]
    return [{"text": t, "canonical": json.dumps(json.loads(t), sort_keys=True, ensure_ascii=True)} for t in texts]


def checked_round_trip(cases: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The cases, each prompt checked to read back from the JSON file as itself."""
    for case_id, prompt in cases:
        if json.loads(json.dumps(prompt)) != prompt:
            raise ValueError(f"hard case {case_id!r} does not survive JSON: a high surrogate before a low one")
    return cases


def codepoint_runs(tokenizer) -> list[list]:
    """[first, last, ids] runs of equal ids of "x" + chr(c) + "x" over every code point c
    (surrogates excepted: the SDK never tokenizes them), in order."""
    runs: list[list] = []
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(points), 65536):
        chunk = points[start : start + 65536]
        encoded = tokenizer.encode_batch([f"x{chr(c)}x" for c in chunk], add_special_tokens=False)
        for c, e in zip(chunk, encoded):
            if runs and runs[-1][2] == e.ids and runs[-1][1] in (c - 1, 0xD7FF):
                runs[-1][1] = c
            else:
                runs.append([c, c, e.ids])
    return runs


def signature_case(manifest: dict) -> dict:
    """The manifest signed by a throw-away key, as `make train SIGNING_KEY=...` signs it."""
    import tempfile

    from cryptography.hazmat.primitives import serialization

    from training.keys import generate, sign

    with tempfile.TemporaryDirectory(prefix="vectors-key-") as folder:
        private, public = generate(Path(folder))
        pem = public.read_bytes()
        signature = sign(manifest, private)
    raw = serialization.load_pem_public_key(pem).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return {"public_key_pem": pem.decode("ascii"), "public_key_hex": raw.hex(), "signature_hex": signature.hex()}


def decision_rows(router, cases: list[tuple[str, str]], name: str, first: int = 0) -> list[dict]:
    """One row per case and precision: the router's Decision for it."""
    rows = []
    for precision in PRECISIONS:
        prompts = [prompt for _, prompt in cases]
        for i, decision in enumerate(router.route_batch(prompts, [precision] * len(prompts))):
            rows.append({"case": first + i, "precision": precision, "router": name, "decision": decision.to_dict()})
    return rows


def case_rows(router, cases: list[tuple[str, str]], kind: str) -> list[dict]:
    """Each case with the ids the model is fed and its scalar inputs (undeclared precision), as
    the Python SDK computes them."""
    rows = []
    for case_id, prompt in cases:
        ids, mask, scalars, _, _ = router.stages.features([prompt], [None])
        rows.append(
            {
                "id": case_id,
                "kind": kind,
                "prompt": prompt,
                "input_ids": ids[0][mask[0] > 0].tolist(),
                "scalars": scalars[0].tolist(),
            }
        )
    return rows


def build(bundle: Path, logs: list[str], max_log_prompts: int | None = None) -> dict:
    """The whole vectors document (module doc)."""
    from serving import Router, RuleRouter

    router = Router.load(bundle, strict=True)
    logged = [(f"log_{i:05d}", p) for i, p in enumerate(log_prompts(logs, router.manifest)[:max_log_prompts])]
    hard = checked_round_trip(hard_cases() + fuzz_cases())
    cases = case_rows(router, logged, "log") + case_rows(router, hard, "hard")
    everything = logged + hard
    manifest_text = (bundle / "manifest.json").read_text(encoding="utf-8")
    decisions = (
        decision_rows(router, everything, "bundle")
        + decision_rows(
            Router.load(bundle, strict=True, unfamiliar_policy="rule_table"),
            hard,
            "unfamiliar_rule_table",
            first=len(logged),
        )
        + decision_rows(
            Router.load(bundle, strict=True, unfamiliar_policy="learned"),
            hard,
            "unfamiliar_learned",
            first=len(logged),
        )
        + decision_rows(RuleRouter(), everything, "rule_table")
    )
    return {
        "format": FORMAT,
        "bundle": {"model_version": router.model_version, "manifest_sha256": router.manifest.manifest_sha256},
        "precisions": list(PRECISIONS),
        "cases": cases,
        "decisions": decisions,
        "canonical_json": canonical_json_cases(manifest_text),
        "signature": signature_case(json.loads(manifest_text)),
        "acceptance": acceptance_rows(router, logs),
        "codepoints": codepoint_runs(router.stages.scorer.extractor.tokenizer.full),
    }


def main(
    bundle: Annotated[Path, typer.Option(help="the bundle whose decisions are written")],
    out: Annotated[Path, typer.Option(help="the JSON file to write")],
    logs: Annotated[
        Optional[list[str]],
        typer.Option(
            help="log file, glob or folder whose test split is routed (repeatable); default: the shipped logs"
        ),
    ] = None,
    max_log_prompts: Annotated[Optional[int], typer.Option(help="at most this many log prompts")] = None,
) -> None:
    """Write the Python SDK's decisions on the logs' test prompts and generated hard cases."""
    from data.location import default_data_paths

    document = build(bundle, logs or [str(p) for p in default_data_paths()], max_log_prompts)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(document, ensure_ascii=True, allow_nan=False), encoding="ascii")
    partial.replace(out)  # a reader never sees half a file
    kinds = [c["kind"] for c in document["cases"]]
    typer.echo(
        f"{out}: {kinds.count('log')} log prompts, {kinds.count('hard')} hard cases, "
        f"{len(document['decisions'])} decisions ({document['bundle']['model_version']})"
    )


if __name__ == "__main__":
    typer.run(main)
