"""The stages fitted on held-out rows after the heads, in the order they depend on each other:
the acceptance check (its held-out verdicts mark the rows), the fallback thresholds (which
count those verdicts as the fallback's rates), the familiarity reference (which flags the
rows). Each step takes the rows it reads and returns what it produces, the rows it marked
among them; `make train` and every cross-validation fold (training.crossval) run exactly
these, through fit_held_out_stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from evaluation.rows import Rows
from serving.bundle._manifest import SCORE_KINDS, band_of
from training.config import TrainConfig

if TYPE_CHECKING:
    from serving.scoring._novelty import Novelty
    from training.acceptance import AcceptanceFit
    from training.fitted import Fitted

Splits = dict[str, Rows]  # "val" / "test": the held-out rows with both outcomes

NOVELTY_FILE = "novelty.npz"
MIN_TEST_ROWS = 10  # test rows with both outcomes, at least: the figures and the parity check are computed on them


def check_held_out_rows(val_prompts, test_rows: int) -> None:
    """DataQualityError, saying what is missing and what to add, unless the validation and
    test splits hold enough rows with both outcomes: the thresholds, the familiarity
    reference (training.novelty), the figures and the parity check compare both outcomes
    of a request. Each engine asks before fitting when it can, and `finish` asks again."""
    from data.logs import DataQualityError
    from training.novelty import MIN_HALF_ROWS, first_half, too_few_rows
    from training.partial import BOTH_OUTCOMES_NEEDED

    if too_few_rows(val_prompts) is None and test_rows >= MIN_TEST_ROWS:
        return
    first = first_half(val_prompts)
    raise DataQualityError(
        f"too few rows with both outcomes to validate and test a router: the validation split has {len(first)} "
        f"({int(first.sum())} and {int((~first).sum())} in the two halves of the familiarity reference's hash "
        f"split: at least {MIN_HALF_ROWS} in each half are needed, for it and the fallback thresholds), the test "
        f"split {test_rows} (at least {MIN_TEST_ROWS}, for the figures and the bundle's parity check). "
        f"{BOTH_OUTCOMES_NEEDED}"
    )


def choose_thresholds(config: TrainConfig, fitted: Fitted, val: Rows) -> dict:
    """Per-precision fallback thresholds on the validation rows `val` (evaluation.thresholds),
    with the acceptance check's out-of-fold verdicts as the fallback's rates where the rows
    have an edge answer, and the configured catch rate elsewhere (evaluation.fallback)."""
    from evaluation.fallback import Catch
    from evaluation.thresholds import select_per_precision

    return select_per_precision(
        val.scores,
        val.q_edge,
        val.q_cloud,
        val.precisions,
        tags=fitted.plan.spec.precisions,
        bounds=SCORE_KINDS[fitted.objective][1],
        min_rows=config.routing.min_rows_per_tag,
        target=config.routing.target,
        max_quality_drop=config.routing.max_quality_drop,
        cloud_budget=config.routing.cloud_budget,
        catch_rate=Catch.for_rows(val.rejected, config.routing.fallback_catch_rate),
    )


def with_learned_zones(config: TrainConfig, rows: Rows, thresholds: dict) -> Rows:
    """The rows with the zones the SDK gives them at these thresholds, unfamiliar prompts included."""
    from evaluation.policies import unfamiliar_policy_zones

    return rows.with_zones(
        lambda p: band_of(thresholds, p),
        edge_context_tokens=config.routing.edge_context_tokens,
        unfamiliar_zones=unfamiliar_policy_zones(rows, config.novelty.unfamiliar_policy),
    )


def fit_familiarity(
    config: TrainConfig, plan, prompts: dict, embeddings: dict, tokens: dict | None = None
) -> tuple[Novelty, dict, dict]:
    """The familiarity reference of any bundle (training.novelty): fitted on the "val" prompts'
    token ids and projected embeddings (`embeddings`, per split; the feature matrix's last columns),
    with its manifest figures and policy (config.novelty), and each split's novelty. `tokens`: the
    splits' token ids where featurizing kept them, else tokenized here as the SDK does (`plan`'s
    extractor)."""
    from training.novelty import fit_novelty, token_rows

    extractor = plan.serving.featurizer().extractor
    tokens = tokens or {name: token_rows(extractor, texts) for name, texts in prompts.items()}
    reference, info = fit_novelty(
        prompts["val"],
        tokens["val"],
        embeddings["val"],
        vocabulary=extractor.tokenizer.full.get_vocab_size(),
        share=config.novelty.share,
        min_unseen_share=config.novelty.min_unseen_share,
    )
    novelty = {
        name: reference.scores_flat(embeddings[name], tokens[name].ids, tokens[name].lengths) for name in prompts
    }
    return reference, {**info, "policy": config.novelty.unfamiliar_policy}, novelty


def bundle_files(plan, trees: bytes, reference: Novelty, section: dict, acceptance, **options) -> tuple[dict, dict]:
    """Any bundle's files (`plan.bundle_files` of the heads' `trees`, `options` its own) with the
    familiarity reference and the acceptance check when fitted, and the manifest's novelty section:
    the reference computed in the fused model.onnx (`in_model`, its `output`; no file), or as
    NOVELTY_FILE beside a staged bundle, whose router.onnx never sees the token ids."""
    from training.acceptance import ACCEPTANCE_FILE
    from training.novelty import NOVELTY_OUTPUT, append_to_graph

    files = plan.bundle_files(trees, **options)
    if plan.fused_prefix is None:
        files[NOVELTY_FILE], section = reference.to_bytes(), {"file": NOVELTY_FILE, **section}
    else:
        files["model.onnx"] = append_to_graph(files["model.onnx"], reference, embedding_dim=plan.spec.embedding_dim)
        section = {**section, "in_model": True, "output": NOVELTY_OUTPUT}
    return {**files, **({ACCEPTANCE_FILE: acceptance.file} if acceptance.fitted else {})}, section


@dataclass
class HeldOutStages:
    """What the stages after the heads fit on the held-out rows (see fit_held_out_stages)."""

    acceptance: AcceptanceFit
    thresholds: dict  # per-precision fallback thresholds (evaluation.thresholds)
    reference: Novelty  # the familiarity reference (serving.scoring._novelty)
    novelty: dict  # its manifest figures (bundle_files adds where it lives)
    splits: Splits  # the engine's val / test rows with the acceptance verdicts and novelty


def fit_held_out_stages(config: TrainConfig, fitted: Fitted, clock) -> HeldOutStages:
    """The acceptance check, the fallback thresholds and the familiarity reference, in the
    order they depend on each other: the acceptance check's held-out verdicts mark the rows
    (the thresholds count them as the fallback's rates), then the familiarity reference flags
    them. The engine's `fitted.splits` stay as they were; the marked rows are `splits` of the
    result. `make train` and every cross-validation fold (training.crossval) run exactly this."""
    from training.acceptance import fit_acceptance

    check_held_out_rows(fitted.splits["val"].prompts, len(fitted.splits["test"]))
    clock.begin("acceptance")  # fitted on the logged edge answers; each row marked with the share it rejects
    acceptance = fit_acceptance(config, fitted.responses, fitted.plan.serving.extractor())
    verdicts = {
        name: rows.with_rejections(acceptance.rejected_share(name, rows.prompts))
        for name, rows in fitted.splits.items()
    }
    clock.begin("thresholds")
    thresholds = choose_thresholds(config, fitted, verdicts["val"])
    clock.begin("familiarity")  # fitted on the validation rows; each row flagged with its novelty
    prompts = {name: rows.prompts for name, rows in verdicts.items()}
    reference, info, novelty = fit_familiarity(config, fitted.plan, prompts, fitted.embeddings, fitted.tokens)
    flagged = {name: rows.with_novelty(novelty[name]) for name, rows in verdicts.items()}
    return HeldOutStages(acceptance, thresholds, reference, info, flagged)
