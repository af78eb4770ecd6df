"""`make language-eval`: the request-language detector (serving.features._language) on the labelled prompts
of data/languages/labelled.jsonl: per-language precision and recall at the detector's confidence
floor, the confusion counts (a detection below the floor is "unknown"), the floors around it,
and the cost of one detection at ~16 and ~128 tokens (docs/endpoints.md#capabilities-in-n-endpoint-routing).

    python -m pipelines.language_eval [--data PATH] [--floor 0.5] [--out report.json]

Precision of a language: of the prompts detected as it, the share that are in it. Recall: of its
prompts, the share detected as it (an unknown one is missed: it rules no endpoint out, but the
endpoints that declare the language get no help either).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from serving.features._language import CODE_SHAPE, CONFIDENCE_FLOOR, LanguageDetector, language_at

DATA = Path(__file__).resolve().parent.parent / "data" / "languages" / "labelled.jsonl"
UNKNOWN = "unknown"
SWEEP = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
CHARS_PER_TOKEN = 4  # English text with the bundles' tokenizer: ~16 tokens is ~64 characters
COST_TOKENS = (16, 128)


@dataclass(frozen=True)
class Labelled:
    language: str
    prompt: str


def read_labelled(path: Path) -> list[Labelled]:
    """The labelled prompts, one JSON object a line: {"language": "de", "prompt": "..."};
    ValueError naming the file and line for anything else."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON: {exc}") from exc
        if not isinstance(row, dict) or set(row) != {"language", "prompt"}:
            raise ValueError(f"{where}: want an object with exactly 'language' and 'prompt'")
        language, prompt = row["language"], row["prompt"]
        if not isinstance(language, str) or not CODE_SHAPE.fullmatch(language) or "-" in language:
            raise ValueError(f"{where}: language must be an ISO 639-1 code such as 'de', got {language!r}")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{where}: prompt must be non-empty text")
        rows.append(Labelled(language, prompt))
    if not rows:
        raise ValueError(f"{path}: no labelled prompts")
    return rows


def scores(gold: Sequence[str], detected: Sequence[str]) -> dict[str, Any]:
    """Per-language precision / recall, their macro means, and the confusion counts
    (gold -> detected -> count, UNKNOWN for below the floor)."""
    languages = sorted(set(gold))
    confusion: dict[str, Counter[str]] = {language: Counter() for language in languages}
    for g, d in zip(gold, detected):
        confusion[g][d] += 1
    called = Counter(detected)
    per_language = {}
    for language in languages:
        right = confusion[language][language]
        per_language[language] = {
            "prompts": sum(confusion[language].values()),
            "precision": right / called[language] if called[language] else None,
            "recall": right / sum(confusion[language].values()),
            "unknown": confusion[language][UNKNOWN],
        }
    precisions = [s["precision"] for s in per_language.values() if s["precision"] is not None]
    return {
        "per_language": per_language,
        "macro_precision": statistics.fmean(precisions) if precisions else 0.0,
        "macro_recall": statistics.fmean(s["recall"] for s in per_language.values()),
        "unknown": called[UNKNOWN],
        "wrong": sum(1 for g, d in zip(gold, detected) if d not in (g, UNKNOWN)),
        "confusion": {g: dict(sorted(c.items())) for g, c in confusion.items()},
    }


def detections(detector: LanguageDetector, rows: Sequence[Labelled]) -> list[tuple[str, float]]:
    return [detector.detect(row.prompt) for row in rows]


def at_floor(found: Sequence[tuple[str, float]], floor: float) -> list[str]:
    """What each detection counts as at `floor` (LanguageDetector.language's rule)."""
    return [language_at(code, confidence, floor) or UNKNOWN for code, confidence in found]


def cost_us(detector: LanguageDetector, rows: Sequence[Labelled], *, repeat: int = 2000) -> dict[str, float]:
    """Median microseconds of one LanguageDetector.language call on English text of ~16 and ~128
    tokens (CHARS_PER_TOKEN characters a token), each the median of 5 rounds of `repeat` calls."""
    text = " ".join(row.prompt for row in rows if row.language == "en")
    out = {}
    for tokens in COST_TOKENS:
        sample = text[: tokens * CHARS_PER_TOKEN]
        for _ in range(repeat // 10):
            detector.language(sample)
        rounds = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(repeat):
                detector.language(sample)
            rounds.append((time.perf_counter() - started) / repeat * 1e6)
        out[f"{tokens}_tokens"] = statistics.median(rounds)
    return out


def evaluate(path: Path = DATA, *, floor: float = CONFIDENCE_FLOOR, repeat: int = 2000) -> dict[str, Any]:
    rows = read_labelled(path)
    started = time.perf_counter()
    detector = LanguageDetector.load(floor=floor)
    load_s = time.perf_counter() - started
    found = detections(detector, rows)
    gold = [row.language for row in rows]
    sweep = []
    for f in sorted({*SWEEP, floor}):
        s = scores(gold, at_floor(found, f))
        sweep.append({"floor": f, "macro_recall": s["macro_recall"], "wrong": s["wrong"], "unknown": s["unknown"]})
    return {
        "data": str(path),
        "prompts": len(rows),
        "floor": floor,
        "max_chars": detector.max_chars,
        **scores(gold, at_floor(found, floor)),
        "sweep": sweep,
        "load_s": load_s,
        "us_per_call": cost_us(detector, rows, repeat=repeat),
    }


def show(report: dict[str, Any]) -> str:
    lines = [
        f"{report['prompts']} labelled prompts ({report['data']}); confidence floor {report['floor']}, "
        f"first {report['max_chars']} characters",
        f"{'lang':<6}{'n':>4}{'precision':>11}{'recall':>8}{'unknown':>9}  detected as",
    ]
    for language, s in report["per_language"].items():
        precision = "-" if s["precision"] is None else f"{s['precision']:.3f}"
        others = {d: c for d, c in report["confusion"][language].items() if d != language}
        said = ", ".join(f"{d} {c}" for d, c in others.items()) or "-"
        lines.append(f"{language:<6}{s['prompts']:>4}{precision:>11}{s['recall']:>8.3f}{s['unknown']:>9}  {said}")
    lines.append(
        f"macro precision {report['macro_precision']:.3f}, macro recall {report['macro_recall']:.3f}; "
        f"{report['wrong']} wrong, {report['unknown']} unknown"
    )
    lines.append(
        "floors: "
        + "; ".join(
            f"{s['floor']}: recall {s['macro_recall']:.3f}, {s['wrong']} wrong, {s['unknown']} unknown"
            for s in report["sweep"]
        )
    )
    cost = report["us_per_call"]
    lines.append(
        f"cost per call: {cost['16_tokens']:.1f} us at ~16 tokens, {cost['128_tokens']:.1f} us at ~128 tokens; "
        f"model load {report['load_s']:.2f} s"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DATA, help="labelled prompts, JSON lines")
    parser.add_argument("--floor", type=float, default=CONFIDENCE_FLOOR, help="the detector's confidence floor")
    parser.add_argument("--repeat", type=int, default=2000, help="calls per timing round")
    parser.add_argument("--out", type=Path, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    report = evaluate(args.data, floor=args.floor, repeat=args.repeat)
    print(show(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
