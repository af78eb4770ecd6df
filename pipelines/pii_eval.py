"""`make pii-eval`: the content detectors' precision and recall on the shipped labelled set, and their speed.

Per detector, span-level precision and recall with Wilson 95% intervals, under two matchings (overlap:
a found span counts when it overlaps a labelled span of its detector; exact: equal spans). The same per
form (each line of the set has a `form` tag: "plain", "card_nbsp", "iban_dashes", ...), the recall over
the forms the hardening issue names, and the false-positive rate on the set's ordinary prompts (forms
"ordinary:..."): the share of them on which any detector fires. Speed, one thread: p50 of detect() and
any_detected() on ~128-token prompts (with and without personal data, ASCII and not, so that the cost
of normalisation shows), of detect() on a 1 MB and a 4 MiB prompt of prose with scattered values, and
the slowest of a few adversarial 1 MB inputs (long digit runs, separators, invisible characters,
repeated prefixes), each also at 250 kB (linear time: a quarter of the time). And, when the training
logs are at hand (ROUTER_DATA_DIR, data/raw/routellm or ../shared/data/routellm; never downloaded
here), the share of their distinct prompts, public benchmark questions taken to hold no personal data,
on which any detector fires. Writes reports/pii/metrics.json.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer

PROMPT_PII = (
    "Hi! Please draft a short, friendly email to our new supplier confirming the delivery on Thursday. "
    "Mention that invoices should go to accounts.kalomi@renvo-tek.net and that they can call me on "
    "+44 20 7946 0321 if the truck is late. Also ask whether they accept payment by bank transfer, and "
    "if so which details they need from us; keep it under 150 words and sign it from the purchasing "
    "team. Add a line thanking them for the quick quote last week."
)
PROMPT_CLEAN = (
    "Hi! Please draft a short, friendly email to our new supplier confirming the delivery on Thursday. "
    "Mention that invoices should go to the accounts team and that they can call the front desk if the "
    "truck is late. Also ask whether they accept payment by bank transfer, and if so which details they "
    "need from us; keep it under 150 words and sign it from the purchasing team. Add a line thanking "
    "them for the quick quote last week, and one about the 12 pallets on order 2024-118."
)
# The same request written as people write it in French and in Chinese: no-break and narrow no-break
# spaces, typographic quotes and dashes, full-width punctuation; these go through normalisation.
PROMPT_PII_FR = (
    "Bonjour\u00a0! Peux-tu rédiger un court e-mail, aimable, à notre nouveau fournisseur pour confirmer la "
    "livraison de jeudi\u00a0? Indique que les factures vont à compta.kalomi@renvo-tek.fr et qu’il peut "
    "m’appeler au +33\u00a06\u00a012\u00a034\u00a056\u00a078 si le camion a du retard. Demande aussi s’il "
    "accepte le virement – et, si oui, quelles coordonnées il lui faut\u00a0; moins de 150\u00a0mots, "
    "signé «\u202fservice achats\u202f». Remercie-le pour le devis rapide de la semaine dernière."
)
PROMPT_CLEAN_ZH = (
    "你好！请帮我给新的供应商写一封简短、友好的邮件，确认周四的交货。说明发票寄给财务部，如果卡车晚到，"
    "可以打前台的电话。另外问一下他们是否接受银行转账，如果接受，需要我们提供哪些信息；不超过一百五十字，"
    "以采购部的名义署名。最后感谢他们上周很快就报了价，并提一下订单２０２４－１１８的十二个托盘。"
)
PROSE = (
    "The committee reviewed the quarterly report and noted that revenue grew in every region except the "
    "north, where supply problems delayed two large orders (order 2024-5581, 12 pallets, v3.2.1 of the "
    "spec). Which of the following best explains the difference between gross margin and operating "
    "margin? Show the calculation with 12.5% and 8%. "
)
VALUES = (
    "Contact renkalo.mi@solvo-tek.de or +49 30 1234567. IBAN DE89 3704 0044 0532 0130 00, "
    "card 4111 1111 1111 1111, api_key = 'Zx81!kqP0wL3'. "
)
ADVERSARIAL = {
    "digits": "7" * 1_000_000,
    "fullwidth_digits": "\uff17" * 1_000_000,
    "zero_width_digits": "4\u200b" * 500_000,
    "nbsp_digit_groups": "4111\u00a0" * 200_000,
    "newline_digit_groups": "1234\n" * 200_000,
    "dotted_digit_groups": "1234." * 200_000,
    "soft_hyphen_letters": "a\u00ad" * 500_000,
    "ellipsis_digits": "1\u2026" * 500_000,
    "iban_dashes": "DE12-" * 200_000,
    "digit_groups": "1234 " * 200_000,
    "hyphenated_digits": "12-" * 333_334,
    "letters": "a" * 1_000_000,
    "at_signs": "a@" * 500_000,
    "dotted_numbers": "1.2." * 250_000,
    "plus_digits": "+1 2" * 250_000,
    "jwt_prefix": "eyJ" * 333_334,
    "iban_like": "DE12 " * 200_000,
    "keyword_assignments": "password=" * 111_112,
}


def p50_ms(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(samples)


def token_count(text: str, tokenizer: Path) -> int | None:
    """Tokens of text under a bundle's tokenizer, when one is there (only to state the prompt's size)."""
    if not tokenizer.is_file():
        return None
    from tokenizers import Tokenizer

    return len(Tokenizer.from_file(str(tokenizer)).encode(text, add_special_tokens=False).ids)


def prose_with_values(chars: int) -> str:
    unit = PROSE * 2 + VALUES
    return (unit * (chars // len(unit) + 1))[:chars]


def speed(repeat: int, tokenizer: Path) -> dict[str, object]:
    from serving.policy import any_detected, detect

    megabyte = prose_with_values(1_000_000)
    four_mib = prose_with_values(4 * 2**20)
    # the same prose, each value's separators and "@" written the way normalisation has to undo
    four_mib_folded = four_mib.replace(" ", "\u00a0", 200_000).replace("@", "\uff20").replace("0", "0\u200b")
    for _ in range(50):  # warm the regex caches and the interpreter
        detect(PROMPT_PII)
    adversarial = {name: p50_ms(lambda t=text: detect(t), 5) for name, text in ADVERSARIAL.items()}
    # linear time: a quarter of each input should take about a quarter of the time
    quarters = {name: text[: len(text) // 4] for name, text in ADVERSARIAL.items()}
    quarter = {name: p50_ms(lambda t=text: detect(t), 5) for name, text in quarters.items()}
    return {
        "prompt_128": {
            "chars": len(PROMPT_PII),
            "tokens": token_count(PROMPT_PII, tokenizer),
            "detect_p50_us": p50_ms(lambda: detect(PROMPT_PII), repeat) * 1000,
            "detect_clean_p50_us": p50_ms(lambda: detect(PROMPT_CLEAN), repeat) * 1000,
            "any_detected_p50_us": p50_ms(lambda: any_detected(PROMPT_PII), repeat) * 1000,
            "any_detected_clean_p50_us": p50_ms(lambda: any_detected(PROMPT_CLEAN), repeat) * 1000,
        },
        "prompt_128_non_ascii": {
            "chars": len(PROMPT_PII_FR),
            "tokens": token_count(PROMPT_PII_FR, tokenizer),
            "detect_p50_us": p50_ms(lambda: detect(PROMPT_PII_FR), repeat) * 1000,
            "detect_clean_zh_p50_us": p50_ms(lambda: detect(PROMPT_CLEAN_ZH), repeat) * 1000,
            "any_detected_p50_us": p50_ms(lambda: any_detected(PROMPT_PII_FR), repeat) * 1000,
            "any_detected_clean_zh_p50_us": p50_ms(lambda: any_detected(PROMPT_CLEAN_ZH), repeat) * 1000,
        },
        "prompt_1mb": {
            "chars": len(megabyte),
            "findings": len(detect(megabyte)),
            "detect_p50_ms": p50_ms(lambda: detect(megabyte), 5),
            "any_detected_clean_p50_ms": p50_ms(lambda: any_detected(PROSE * (1_000_000 // len(PROSE))), 5),
        },
        "prompt_4mib": {
            "chars": len(four_mib),
            "findings": len(detect(four_mib)),
            "detect_p50_ms": p50_ms(lambda: detect(four_mib), 3),
            "findings_to_normalise": len(detect(four_mib_folded)),
            "detect_to_normalise_p50_ms": p50_ms(lambda: detect(four_mib_folded), 3),
        },
        "adversarial_1mb_p50_ms": adversarial,
        "adversarial_1mb_slowest": max(adversarial, key=adversarial.__getitem__),
        "adversarial_1mb_over_250kb": {name: adversarial[name] / quarter[name] for name in ADVERSARIAL},
    }


def benchmark_prompts(paths: list[Path] | None) -> tuple[list[str], str] | None:
    """The distinct prompts of the given logs, else of the first default log folder that exists."""
    import os

    from data.location import FALLBACKS
    from data.logs import load_logs

    if not paths:
        env = os.environ.get("ROUTER_DATA_DIR")
        found = [p for p in ([Path(env)] if env else []) + list(FALLBACKS) if p.exists()][:1]
        if not found:
            return None
        paths = found
    rows = load_logs(paths).rows
    return sorted({row["prompt"] for row in rows}), ", ".join(map(str, paths))


def flagged(prompts: list[str]) -> dict[str, object]:
    """How many prompts any detector fires on, overall and per detector, with the Wilson interval."""
    from evaluation.detection import Proportion
    from serving.policy import detect

    per: dict[str, int] = {}
    any_finding = 0
    for prompt in prompts:
        names = {f.detector for f in detect(prompt)}
        any_finding += bool(names)
        for name in names:
            per[name] = per.get(name, 0) + 1
    return {"prompts_flagged": Proportion(any_finding, len(prompts)).as_dict(), "per_detector": per}


def by_form(lines: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for line in lines:
        groups.setdefault(str(line.get("form", "untagged")), []).append(line)
    return dict(sorted(groups.items()))


def form_figures(lines: list[dict]) -> dict[str, dict[str, object]]:
    """Per form, overlap matching: its prompts, the precision and recall of all detectors together
    ("all"), and of each detector that has a label or a finding on the form's lines."""
    from evaluation.detection import Counts, score

    out: dict[str, dict[str, object]] = {}
    for form, group in by_form(lines).items():
        counts = score(group)[0]["overlap"]
        total = Counts(
            found=sum(c.found for c in counts.values()),
            labelled=sum(c.labelled for c in counts.values()),
            found_right=sum(c.found_right for c in counts.values()),
            labels_recalled=sum(c.labels_recalled for c in counts.values()),
        )
        out[form] = {"prompts": len(group), "all": total.figures()}
        out[form].update({name: c.figures() for name, c in counts.items() if c.found or c.labelled})
    return out


def named_forms_recall(lines: list[dict]) -> dict[str, object]:
    """Recall over the labels of the forms the hardening issue names (data.pii_synthetic.NAMED_FORMS)."""
    from data.pii_synthetic import NAMED_FORMS
    from evaluation.detection import Proportion, score

    named = [line for line in lines if line.get("form") in NAMED_FORMS]
    counts = score(named)[0]["overlap"].values()
    recalled, labelled = sum(c.labels_recalled for c in counts), sum(c.labelled for c in counts)
    return {"forms": list(NAMED_FORMS), "recall": Proportion(recalled, labelled).as_dict()}


def ordinary_false_positives(lines: list[dict]) -> dict[str, object]:
    """The share of the set's ordinary prompts (forms "ordinary:...", no personal data) that any detector
    fires on, overall and per category, and how many each detector fires on."""
    from evaluation.detection import Proportion
    from serving.policy import detect

    ordinary = [line for line in lines if str(line.get("form", "")).startswith("ordinary:")]
    per_detector: dict[str, int] = {}
    per_category: dict[str, list[int]] = {}
    for line in ordinary:
        names = {f.detector for f in detect(line["text"])}
        tally = per_category.setdefault(str(line["form"]).split(":", 1)[1], [0, 0])
        tally[0], tally[1] = tally[0] + bool(names), tally[1] + 1
        for name in names:
            per_detector[name] = per_detector.get(name, 0) + 1
    flagged = sum(t[0] for t in per_category.values())
    return {
        "prompts_flagged": Proportion(flagged, len(ordinary)).as_dict(),
        "per_category": {k: Proportion(*v).as_dict() for k, v in sorted(per_category.items())},
        "per_detector": per_detector,
    }


def interval(f: dict) -> str:
    value = "n/a" if f["value"] is None else f"{f['value']:.3f}"
    lo, hi = f["wilson95"]
    return f"{value} [{lo:.3f}, {hi:.3f}] ({f['successes']}/{f['n']})"


def print_report(results: dict) -> None:
    print(
        f"labelled set {results['set']['path']}: {results['set']['prompts']} prompts, {results['set']['labels']} labels"
    )
    print(f"{'detector':<14}{'matching':<9}{'precision [95% Wilson]':>34}{'recall [95% Wilson]':>34}")
    for matching, per in results["figures"].items():
        for name, fig in per.items():
            cells = []
            for key in ("precision", "recall"):
                f = fig[key]
                value = "n/a" if f["value"] is None else f"{f['value']:.3f}"
                lo, hi = f["wilson95"]
                cells.append(f"{value} [{lo:.3f}, {hi:.3f}] ({f['successes']}/{f['n']})")
            print(f"{name:<14}{matching:<9}{cells[0]:>34}{cells[1]:>34}")
    print("\nper form (overlap matching, all detectors together; each detector's figures in the JSON)")
    print(f"{'form':<28}{'prompts':>8}{'precision [95% Wilson]':>34}{'recall [95% Wilson]':>34}")
    for form, fig in results["forms"].items():
        print(
            f"{form:<28}{fig['prompts']:>8}{interval(fig['all']['precision']):>34}{interval(fig['all']['recall']):>34}"
        )
    named = results["named_forms"]["recall"]
    print(f"\nrecall over the {len(results['named_forms']['forms'])} forms the issue names: {interval(named)}")
    o = results["ordinary_prompts"]
    print(
        f"ordinary prompts flagged by any detector: {interval(o['prompts_flagged'])}; per detector "
        f"{o['per_detector'] or '{}'}"
    )
    s = results["speed"]
    p = s["prompt_128"]
    print(
        f"\n~128-token prompt ({p['chars']} chars, {p['tokens']} tokens): detect p50 {p['detect_p50_us']:.0f} us "
        f"(no personal data: {p['detect_clean_p50_us']:.0f} us), any_detected p50 {p['any_detected_p50_us']:.0f} us "
        f"(no personal data: {p['any_detected_clean_p50_us']:.0f} us)"
    )
    q = s["prompt_128_non_ascii"]
    print(
        f"the same in French with no-break spaces ({q['chars']} chars, {q['tokens']} tokens): detect p50 "
        f"{q['detect_p50_us']:.0f} us, any_detected p50 {q['any_detected_p50_us']:.0f} us; in Chinese without "
        f"personal data: detect p50 {q['detect_clean_zh_p50_us']:.0f} us, any_detected p50 "
        f"{q['any_detected_clean_zh_p50_us']:.0f} us"
    )
    m = s["prompt_1mb"]
    print(
        f"1 MB prompt: detect p50 {m['detect_p50_ms']:.0f} ms ({m['findings']} findings), any_detected on 1 MB "
        f"without personal data {m['any_detected_clean_p50_ms']:.0f} ms"
    )
    g = s["prompt_4mib"]
    print(
        f"4 MiB prompt: detect p50 {g['detect_p50_ms']:.0f} ms ({g['findings']} findings); written with no-break "
        f"spaces, full-width @ and zero-width spaces: {g['detect_to_normalise_p50_ms']:.0f} ms "
        f"({g['findings_to_normalise']} findings)"
    )
    if results.get("benchmark_prompts"):
        b = results["benchmark_prompts"]
        f = b["prompts_flagged"]
        print(
            f"{f['n']} distinct prompts of {b['logs']} (public benchmarks, no personal data): {f['successes']} "
            f"flagged, share {f['value']:.5f} [{f['wilson95'][0]:.5f}, {f['wilson95'][1]:.5f}] {b['per_detector']}"
        )
    slowest = s["adversarial_1mb_slowest"]
    ratios = s["adversarial_1mb_over_250kb"].values()
    print(
        f"adversarial 1 MB inputs: slowest {slowest} {s['adversarial_1mb_p50_ms'][slowest]:.0f} ms; "
        f"time at 1 MB over time at 250 kB: {min(ratios):.1f} to {max(ratios):.1f} (linear: 4)"
    )


def main(
    labelled: Annotated[Path, typer.Option(help="the labelled set (JSONL)")] = Path("data/policy/pii_labelled.jsonl"),
    out: Annotated[Path, typer.Option(help="where the figures go")] = Path("reports/pii/metrics.json"),
    repeat: Annotated[int, typer.Option(help="calls per ~128-token timing")] = 2000,
    tokenizer: Annotated[Path, typer.Option(help="a bundle's tokenizer, to count the prompt's tokens")] = Path(
        "artifacts/router/tokenizer.json"
    ),
    show_errors: Annotated[bool, typer.Option(help="print every wrong or missed span of the set")] = False,
    benchmark_logs: Annotated[
        Optional[list[Path]],
        typer.Option(help="logs whose prompts hold no personal data (default: the training logs, when present)"),
    ] = None,
) -> None:
    """Measure the content detectors: precision and recall on the labelled set, and speed."""
    from data.pii_synthetic import read
    from evaluation.detection import figures, score

    if not labelled.is_file():
        raise typer.BadParameter(f"no labelled set at {labelled} (python -m pipelines.pii_set writes it)")
    lines = read(labelled)
    counts, misses = score(lines)
    results = {
        "set": {"path": str(labelled), "prompts": len(lines), "labels": sum(len(line["labels"]) for line in lines)},
        "figures": figures(counts),
        "forms": form_figures(lines),
        "named_forms": named_forms_recall(lines),
        "ordinary_prompts": ordinary_false_positives(lines),
        "speed": speed(repeat, tokenizer),
        "benchmark_prompts": None,
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
    }
    benchmark = benchmark_prompts(benchmark_logs)
    if benchmark is not None:
        results["benchmark_prompts"] = {"logs": benchmark[1], **flagged(benchmark[0])}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print_report(results)
    if show_errors:
        for miss in misses:
            text = lines[miss.line - 1]["text"]
            form = lines[miss.line - 1].get("form")
            print(f"line {miss.line} ({form}) {miss.kind} {miss.detector}: {text[miss.start : miss.end]!r}")
    print(f"written to {out}")


if __name__ == "__main__":
    typer.run(main)
