"""Prompt templates of the log simulator: domains, sub-topics, task forms and filler text.

Every sub-topic and task form carries a hidden difficulty offset (`data.simulator` adds
them up). The words that reveal it (sub-topic names, "Step 3:", code, answer options)
are in the text, at its head, where a learned router can read them; the hand rule
table sees only length, the finance/medical/legal label and the declared precision.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# (sub-topic, difficulty offset). Each domain spans easy to hard, so the domain label
# alone says little about difficulty.
SUBTOPICS: dict[str, tuple[tuple[str, float], ...]] = {
    "legal": (
        ("the elements of a valid contract", -0.8),
        ("small-claims court filing deadlines", -0.6),
        ("tenant rights when a landlord withholds a deposit", -0.3),
        ("the hearsay rule and its exceptions", 0.3),
        ("piercing the corporate veil", 0.6),
        ("conflict of laws in cross-border insolvency", 1.1),
        ("the rule against perpetuities applied to contingent remainders", 1.3),
    ),
    "medical": (
        ("normal resting heart rate in adults", -0.9),
        ("first aid for a minor burn", -0.7),
        ("how seasonal influenza vaccines work", -0.3),
        ("interpreting an arterial blood gas", 0.5),
        ("drug interactions of warfarin", 0.6),
        ("differential diagnosis of a wide-complex tachycardia", 1.1),
        ("pharmacokinetics of renally cleared antibiotics in dialysis", 1.3),
    ),
    "finance": (
        ("simple interest on a savings account", -0.9),
        ("what a household budget should cover", -0.7),
        ("the difference between stocks and bonds", -0.4),
        ("discounted cash flow valuation", 0.4),
        ("bond duration and convexity", 0.7),
        ("pricing a barrier option under stochastic volatility", 1.3),
        ("hedging a portfolio with interest rate swaps", 1.0),
    ),
    "math": (
        ("adding fractions with unlike denominators", -0.8),
        ("the area of a triangle", -0.8),
        ("solving a linear equation", -0.5),
        ("conditional probability with Bayes' rule", 0.4),
        ("eigenvalues of a symmetric matrix", 0.7),
        ("convergence of a power series at its boundary", 1.1),
        ("the number of lattice paths avoiding a diagonal", 1.3),
    ),
    "code": (
        ("reversing a string", -0.9),
        ("reading a CSV file line by line", -0.6),
        ("sorting a list of records by two keys", -0.3),
        ("a least-recently-used cache", 0.5),
        ("detecting a cycle in a directed graph", 0.6),
        ("a lock-free concurrent queue", 1.3),
        ("the amortized cost of a splay tree", 1.1),
    ),
    "science": (
        ("why the sky is blue", -0.8),
        ("the states of matter", -0.9),
        ("how photosynthesis works", -0.4),
        ("balancing a redox equation", 0.4),
        ("the Doppler shift of a moving source", 0.5),
        ("entropy change in an irreversible expansion", 1.0),
        ("perturbation theory for the Stark effect", 1.4),
    ),
    "humanities": (
        ("the main causes of the First World War", -0.5),
        ("the plot of a well-known novel", -0.9),
        ("what the Renaissance was", -0.7),
        ("Kant's categorical imperative", 0.4),
        ("the historiography of the fall of Rome", 0.8),
        ("Wittgenstein's private language argument", 1.2),
        ("dating a manuscript from its palaeography", 1.1),
    ),
    "general": (
        ("planning a weekend trip", -1.0),
        ("writing a polite email to a neighbour", -0.9),
        ("choosing a houseplant for a dark room", -0.8),
        ("organising a small team meeting", -0.6),
        ("comparing two phone contracts", -0.2),
        ("a fair way to split a shared bill with discounts", 0.5),
        ("scheduling six people across three rooms with constraints", 1.0),
    ),
}
DOMAIN_WEIGHTS = {
    "legal": 0.11,
    "medical": 0.12,
    "finance": 0.12,
    "math": 0.14,
    "code": 0.12,
    "science": 0.12,
    "humanities": 0.11,
    "general": 0.16,
}

# Task forms: (name, share of rows, difficulty offset, does it take reasoning steps?).
TASKS = (
    ("recall", 0.15, -0.9, False),
    ("mcq", 0.20, -0.3, False),
    ("explain", 0.14, 0.0, False),
    ("summarize", 0.13, -1.0, False),
    ("calculate", 0.12, 0.4, True),
    ("multistep", 0.10, 0.3, True),
    ("code", 0.08, 0.5, True),
    ("prove", 0.08, 1.2, False),
)
STEP_DIFFICULTY = 0.3  # per reasoning step beyond the first

FIRST = (
    "Ana",
    "Bilal",
    "Chen",
    "Dara",
    "Elif",
    "Femi",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kavya",
    "Luca",
    "Mira",
    "Nikos",
    "Olu",
    "Priya",
    "Quinn",
    "Rosa",
    "Sven",
    "Tariq",
    "Uma",
    "Viktor",
    "Wen",
    "Ximena",
    "Yusuf",
    "Zoe",
)
LAST = (
    "Adeyemi",
    "Brandt",
    "Costa",
    "Dubois",
    "Eriksen",
    "Fischer",
    "Garcia",
    "Haddad",
    "Ito",
    "Jansen",
    "Kowalski",
    "Larsen",
    "Moreau",
    "Novak",
    "Okafor",
    "Petrov",
    "Rossi",
    "Silva",
    "Tanaka",
    "Urban",
    "Varga",
    "Weber",
)
CITIES = (
    "Lisbon",
    "Nairobi",
    "Osaka",
    "Quito",
    "Tallinn",
    "Lyon",
    "Pune",
    "Austin",
    "Leeds",
    "Perth",
    "Porto",
    "Accra",
    "Busan",
    "Cork",
    "Graz",
    "Hanoi",
    "Malmo",
    "Recife",
    "Split",
    "Tucson",
)
AUDIENCES = (
    "a new colleague",
    "a high-school student",
    "a client",
    "a manager",
    "a first-year student",
    "a retired engineer",
    "a journalist",
    "a curious child",
)
DOCS = ("meeting notes", "report", "case file", "article", "memo", "transcript", "lab notebook", "email thread")
LANGS = ("Python", "JavaScript", "Go", "Java", "Rust")
VERBS = ("reviewed", "questioned", "documented", "compared", "revised", "summarised", "tested", "audited")
THINGS = (
    "the quarterly figures",
    "the draft agreement",
    "the patient chart",
    "the sample results",
    "the survey data",
    "the project plan",
    "the archive records",
    "the test suite",
    "the supplier invoices",
    "the field notes",
)
CONNECT = ("After that,", "Meanwhile,", "In the end,", "Earlier,", "As a result,", "By contrast,", "Later that week,")


def _name(r: random.Random) -> str:
    return f"{r.choice(FIRST)} {r.choice(LAST)}"


def _sentence(r: random.Random) -> str:
    return (
        f"{r.choice(CONNECT)} {_name(r)} from {r.choice(CITIES)} {r.choice(VERBS)} {r.choice(THINGS)} "
        f"on day {r.randint(1, 28)} and noted {r.randint(2, 990)} items worth about {r.randint(10, 9000)} units."
    )


def paragraph(r: random.Random) -> str:
    """One filler context paragraph (about 100 tokens), varied by names, places and numbers."""
    return " ".join(_sentence(r) for _ in range(r.randint(3, 6)))


def _mcq(r: random.Random, sub: str) -> str:
    options = "\n".join(
        f"{letter}. {_name(r).split()[0]}'s claim that {sub} depends on {r.choice(THINGS)} ({r.randint(1, 99)}%)"
        for letter in "ABCD"
    )
    return f"Which statement about {sub} is correct?\n{options}\nAnswer:"


def _steps(r: random.Random, sub: str, k: int) -> str:
    lines = [
        f"Step {i}: use the value {r.randint(2, 500)} from {r.choice(THINGS)} and combine it with step {i - 1}."
        if i > 1
        else f"Step 1: set up {sub} with the value {r.randint(2, 500)}."
        for i in range(1, k + 1)
    ]
    return "\n".join(lines)


def _code(r: random.Random, sub: str, k: int) -> str:
    lang = r.choice(LANGS)
    body = "\n".join(f"    x{i} = x{i - 1} * {r.randint(2, 9)} + {r.randint(0, 99)}" for i in range(1, k + 1))
    return (
        f"This {lang}-style function implements {sub} but returns the wrong result for n = {r.randint(3, 400)}. "
        f"Find the bug and fix it.\n```\ndef solve(x0):\n{body}\n    return x{k}\n```"
    )


def task_text(r: random.Random, task: str, sub: str, k: int) -> str:
    """The request itself, which carries every difficulty cue; context paragraphs come after it."""
    who, city = _name(r), r.choice(CITIES)
    if task == "recall":
        return f"What is {sub}? {who} from {city} needs a one-sentence answer."
    if task == "mcq":
        return _mcq(r, sub)
    if task == "explain":
        return f"Explain {sub} to {r.choice(AUDIENCES)}, using the situation of {who} in {city} as an example."
    if task == "summarize":
        return (
            f"Summarize the {r.choice(DOCS)} below in {r.randint(2, 6)} bullet points for {who}; "
            f"it mentions {sub} only in passing."
        )
    if task == "calculate":
        numbers = ", ".join(str(r.randint(2, 5000)) for _ in range(k + 1))
        return (
            f"{who} in {city} is working on {sub}. Given the values {numbers}, compute the final result "
            f"and show all {k} steps."
        )
    if task == "multistep":
        return f"Solve this problem on {sub} for {who}, carrying each result forward:\n{_steps(r, sub, k)}"
    if task == "code":
        return _code(r, sub, k)
    if task == "prove":
        return f"Prove rigorously, with no gaps, the claim {who} makes about {sub} (case n = {r.randint(2, 999)})."
    raise ValueError(f"unknown task form {task!r}")


@dataclass(frozen=True)
class PromptPlan:
    """What one prompt is made of; `data.simulator` draws these, `compose` writes the text."""

    domain: str
    subtopic: str
    task: str
    steps: int
    paragraphs: int


def compose(r: random.Random, plan: PromptPlan) -> str:
    """The prompt text: the task first, then any context paragraphs."""
    text = task_text(r, plan.task, plan.subtopic, plan.steps)
    if plan.paragraphs:
        label = "Document" if plan.task == "summarize" else "Background"
        text += f"\n\n{label}:\n" + "\n".join(paragraph(r) for _ in range(plan.paragraphs))
    return text
