"""Adapter for the public RouteLLM outcome logs (lm-sys/RouteLLM evaluation data).

Folder layout (any subset may be present):
    mmlu/mmlu_<subject>.csv      prompt, <edge model>, <cloud model>  (True/False correct)
    gsm8k/gsm8k_responses.csv    prompt, <edge model>, <cloud model>, responses...
    mt_bench/question.jsonl      question_id, category, turns
    mt_bench/judgements.jsonl    question_id, model, turn, score (1-10, GPT-4 judge)

Each file yields raw rows in the canonical schema plus where they came from; the
caller validates them (data.schema.check_row) and collects rejects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from data.readers import RawRow, read_table
from data.schema import Reject

EDGE_MODEL = "mistralai/Mixtral-8x7B-Instruct-v0.1"
CLOUD_MODEL = "gpt-4-1106-preview"

# MMLU subject -> domain group. Finance, medical and legal are the groups the hand
# rule table knows; the rest follow MMLU's own STEM / humanities / social split.
SUBJECT_DOMAIN = {
    **dict.fromkeys(["international_law", "jurisprudence", "professional_law"], "legal"),
    **dict.fromkeys(
        [
            "anatomy",
            "clinical_knowledge",
            "college_medicine",
            "human_aging",
            "medical_genetics",
            "nutrition",
            "professional_medicine",
            "virology",
        ],
        "medical",
    ),
    **dict.fromkeys(
        ["professional_accounting", "econometrics", "high_school_macroeconomics", "high_school_microeconomics"],
        "finance",
    ),
    **dict.fromkeys(["business_ethics", "management", "marketing", "public_relations"], "business"),
    **dict.fromkeys(
        [
            "abstract_algebra",
            "college_mathematics",
            "elementary_mathematics",
            "high_school_mathematics",
            "high_school_statistics",
        ],
        "math",
    ),
    **dict.fromkeys(
        ["college_computer_science", "high_school_computer_science", "machine_learning", "computer_security"], "code"
    ),
    **dict.fromkeys(
        [
            "astronomy",
            "college_biology",
            "college_chemistry",
            "college_physics",
            "conceptual_physics",
            "electrical_engineering",
            "high_school_biology",
            "high_school_chemistry",
            "high_school_physics",
        ],
        "science",
    ),
    **dict.fromkeys(["formal_logic", "logical_fallacies"], "reasoning"),
    **dict.fromkeys(
        [
            "high_school_european_history",
            "high_school_us_history",
            "high_school_world_history",
            "philosophy",
            "prehistory",
            "world_religions",
            "moral_disputes",
            "moral_scenarios",
        ],
        "humanities",
    ),
    **dict.fromkeys(
        [
            "high_school_geography",
            "high_school_government_and_politics",
            "high_school_psychology",
            "professional_psychology",
            "sociology",
            "us_foreign_policy",
            "security_studies",
            "human_sexuality",
        ],
        "social_science",
    ),
    **dict.fromkeys(["global_facts", "miscellaneous"], "general"),
}

# MT-Bench category -> (domain group, precision). Single-answer tasks are exact,
# extraction and STEM explanations standard, open writing tolerant.
MT_BENCH_CATEGORY = {
    "math": ("math", "exact"),
    "reasoning": ("reasoning", "exact"),
    "coding": ("code", "exact"),
    "extraction": ("general", "standard"),
    "stem": ("science", "standard"),
    "humanities": ("humanities", "tolerant"),
    "writing": ("general", "tolerant"),
    "roleplay": ("general", "tolerant"),
}

JUDGE_SCALE = (1.0, 10.0)


def is_routellm_folder(path: Path) -> bool:
    """True when `path` holds at least one of the RouteLLM sub-folders."""
    return path.is_dir() and any((path / name).is_dir() for name in ("mmlu", "gsm8k", "mt_bench"))


def _bool_quality(value):
    """True/False (as bool or text) -> 1.0/0.0; anything else is returned for check_row to reject."""
    text = str(value).strip().lower()
    if text in ("true", "1", "1.0"):
        return 1.0
    if text in ("false", "0", "0.0"):
        return 0.0
    return value


def _correctness_rows(path: Path, source: str, domain: str | None, rejects: list[Reject]) -> Iterator[RawRow]:
    """Rows of a correctness CSV; the edge model's answer when the file has it (GSM8K)."""
    stem = path.stem.removeprefix("mmlu_")
    for raw in read_table(path, rejects):
        row = raw.row
        missing = [c for c in (EDGE_MODEL, CLOUD_MODEL) if c not in row]
        if missing:
            rejects.append(Reject(str(path), "file", f"missing column(s): {', '.join(missing)}"))
            return
        yield RawRow(
            raw.file,
            raw.location,
            {
                "request_id": f"{source}/{stem}/{raw.index}" if source == "mmlu" else f"{source}/{raw.index}",
                "prompt": row.get("prompt"),
                "domain": domain,
                "precision": "exact",
                "edge_quality": _bool_quality(row.get(EDGE_MODEL)),
                "cloud_quality": _bool_quality(row.get(CLOUD_MODEL)),
                "source": source,
                "edge_response": row.get(f"{EDGE_MODEL}_response"),
            },
        )


def answer_in_judge_prompt(judge_prompt: str, turn: int) -> str | None:
    """The judged model's answer inside an MT-Bench judge prompt: between the single-answer
    markers (turn 1), or the last assistant turn of the quoted conversation (turn 2)."""
    if turn == 1 and _ANSWER_START in judge_prompt:
        answer = judge_prompt.split(_ANSWER_START, 1)[1].rsplit(_ANSWER_END, 1)[0]
    elif turn == 2 and _CONVERSATION_TURN in judge_prompt:
        answer = judge_prompt.rsplit(_CONVERSATION_TURN, 1)[1].split(_CONVERSATION_END, 1)[0]
    else:
        return None
    return answer.strip() or None


_ANSWER_START, _ANSWER_END = "[The Start of Assistant's Answer]", "[The End of Assistant's Answer]"
_CONVERSATION_TURN, _CONVERSATION_END = "### Assistant A:", "<|The End of Assistant A's Conversation with User|>"


def iter_mt_bench(folder: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    questions_path, judgements_path = folder / "question.jsonl", folder / "judgements.jsonl"
    for p in (questions_path, judgements_path):
        if not p.is_file():
            rejects.append(Reject(str(p), "file", "MT-Bench file missing"))
            return
    scores: dict[tuple[int, int, str], float] = {}
    answers: dict[tuple[int, int], str | None] = {}  # the edge model's answers, from the judge prompts
    for raw in read_table(judgements_path, rejects):
        r = raw.row
        try:
            key = (int(r["question_id"]), int(r["turn"]), str(r["model"]))
            scores[key] = float(r["score"])
        except (KeyError, TypeError, ValueError) as exc:
            rejects.append(Reject(raw.file, raw.location, f"bad judgement: {exc!r}"))
            continue
        if key[2] == EDGE_MODEL and isinstance(r.get("user_prompt"), str):
            answers[key[:2]] = answer_in_judge_prompt(r["user_prompt"], key[1])
    low, high = JUDGE_SCALE
    for raw in read_table(questions_path, rejects):
        q = raw.row
        category = str(q.get("category", "")).lower()
        domain, precision = MT_BENCH_CATEGORY.get(category, ("general", None))
        turns = q.get("turns") or []
        for turn in (1, 2):
            if len(turns) < turn:
                rejects.append(Reject(raw.file, raw.location, f"question has no turn {turn}"))
                continue
            # Turn 2 is asked with turn 1 in context, so its prompt carries both.
            prompt = "\n\n".join(str(t) for t in turns[:turn])
            qualities = {}
            for field, model in (("edge_quality", EDGE_MODEL), ("cloud_quality", CLOUD_MODEL)):
                score = scores.get((int(q.get("question_id", -1)), turn, model))
                # A judge score outside 1-10 (RouteLLM uses -1 for "no verdict") stays out
                # of range after scaling, so check_row rejects it with the value shown.
                qualities[field] = None if score is None else (score - low) / (high - low)
            yield RawRow(
                raw.file,
                f"{raw.location}, turn {turn}",
                {
                    "request_id": f"mt_bench/{q.get('question_id')}/turn{turn}",
                    "prompt": prompt,
                    "domain": domain,
                    "precision": precision,
                    "source": "mt_bench",
                    **qualities,
                    "edge_response": answers.get((int(q.get("question_id", -1)), turn)),
                },
            )


def is_mt_bench_folder(path: Path) -> bool:
    return path.is_dir() and (path / "question.jsonl").is_file() and (path / "judgements.jsonl").is_file()


def is_correctness_csv(path: Path) -> bool:
    """A CSV whose header names both models' correctness columns (MMLU, GSM8K layout)."""
    if not (path.is_file() and path.suffix.lower() == ".csv"):
        return False
    with open(path, encoding="utf-8", errors="replace") as fh:
        header = fh.readline()
    return EDGE_MODEL in header and CLOUD_MODEL in header


def iter_correctness_csv(path: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """One MMLU subject file (subject from the name) or the GSM8K file."""
    if path.stem.startswith("mmlu_"):
        subject = path.stem.removeprefix("mmlu_")
        if subject not in SUBJECT_DOMAIN:
            rejects.append(Reject(str(path), "file", f"unknown MMLU subject {subject!r}; domain left empty"))
        yield from _correctness_rows(path, "mmlu", SUBJECT_DOMAIN.get(subject), rejects)
    elif "gsm8k" in path.stem:
        yield from _correctness_rows(path, "gsm8k", "math", rejects)
    else:
        yield from _correctness_rows(path, path.stem, None, rejects)


def iter_routellm(folder: Path, rejects: list[Reject]) -> Iterator[RawRow]:
    """All rows of a RouteLLM-style folder, whichever of its sources are present."""
    for path in sorted((folder / "mmlu").glob("mmlu_*.csv")):
        yield from iter_correctness_csv(path, rejects)
    gsm8k = folder / "gsm8k" / "gsm8k_responses.csv"
    if gsm8k.is_file():
        yield from iter_correctness_csv(gsm8k, rejects)
    if (folder / "mt_bench").is_dir():
        yield from iter_mt_bench(folder / "mt_bench", rejects)
