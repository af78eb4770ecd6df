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
  bundle as shipped), `unfamiliar_rule_table` (the same bundle with
  unfamiliar_policy="rule_table", hard cases only: the unfamiliar ones) and `rule_table` (the
  hand rule table without a tokenizer: what a degraded router decides);
- `canonical_json`: JSON texts with their canonical form as the manifest's checksum and
  signature see it (json.dumps(sort_keys=True, ensure_ascii=True)), the bundle's manifest first;
- `signature`: the bundle's manifest signed by training.keys with a key made for the file (the
  public key as PEM and raw hex, the signature hex): a runtime must accept it from the bundle's
  folder as manifest.sig, and refuse it under any other key;
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
