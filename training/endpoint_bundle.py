"""An N-endpoint bundle (docs/training.md#n-endpoint-bundles): every endpoint's calibrated
outcome model (training.endpoints, the head mode cross-validation chose) in the one fused
model.onnx, whose output `expected` [n, N] is each endpoint's P(good answer); the manifest's
`endpoints` section holds the spec in head order and the choice rule with its parameter.

The rows are split as fold 0 of the cross-validation: the models train on its training rows,
stop early, calibrate, blend and set the rule's parameter on its validation rows, and its test
rows are the bundle's unseen rows. Every other part comes from the two-endpoint code: the
lexical blend, the familiarity reference (training.held_out), the acceptance check on every
endpoint's logged answers (training.acceptance), the drift reference of its validation rows as
the SDK's chooser decides them (training.drift_reference), the parity checks and the writing
(training.engines.base.checked_bundle, training.writer).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from serving.bundle._manifest import ENDPOINT_RULES, ENDPOINTS_KIND, EndpointsSection, Limits, Manifest, ScoreSpec
from training.endpoints import EndpointDataError, EndpointRows, OutcomeModels

if TYPE_CHECKING:
    from training.config import TrainConfig

BUNDLE_FOLD = 0  # the fold of fold_masks whose test rows the bundle never sees
PARITY_ROWS = 256  # test rows the SDK re-scores from raw text before the bundle is published


@dataclass
class EndpointBundle:
    """What train_endpoint_bundle made: the bundle folder, its manifest, the fitted models and the
    feature plan (the SDK's features of any prompt: `plan.serving.transform`), the rows' split."""

    folder: Path
    manifest: Manifest
    models: OutcomeModels
    plan: Any  # training.featurize.FeaturePlan
    masks: dict[str, np.ndarray]
    parity: float
    novelty: dict[str, np.ndarray] | None = None  # the familiarity reference's novelty of the val / test rows
    acceptance: Any = None  # training.acceptance.AcceptanceFit: the check, or why there is none
    acceptance_parity: float = 0.0

    def expected(self, prompts, precisions=None) -> np.ndarray:
        """The training models' calibrated probabilities of these prompts, [n, N] (what the
        bundle's graph must output)."""
        precisions = list(precisions) if precisions is not None else [None] * len(prompts)
        return self.models.predict(self.plan.served(list(prompts), precisions))


def input_tokens(x: np.ndarray) -> np.ndarray:
    """The SDK's token count of each row (the features' first column, `n_tokens`), rounded as a
    Decision's n_tokens is."""
    return np.round(np.asarray(x, dtype=np.float64)[:, 0])


def choice_parameter(rule: str, expected, cost, feasible, quality, *, choosers) -> tuple[float, dict]:
    """The rule's parameter (ENDPOINT_RULES) and what set it, on validation rows: cheapest_within's
    margin and cascade's start margin as given (`choosers`, evaluation.endpoints.Choosers);
    best_under_price's price is the least that keeps the mean expected cost within the budget,
    `budget_share` of the best single endpoint's (evaluation.endpoints.price_for_budget)."""
    from evaluation.endpoints import price_for_budget

    if rule == "cheapest_within":
        return choosers.margin, {}
    if rule == "cascade":
        return choosers.start_margin, {"catch_rate": choosers.catch_rate}
    means = np.array(
        [np.nanmean(quality[:, k]) if np.isfinite(quality[:, k]).any() else -np.inf for k in range(quality.shape[1])]
    )
    best = int(np.argmax(means))
    budget = choosers.budget_share * float(cost[:, best].mean())
    price = price_for_budget(expected, cost, budget, feasible)
    return price, {"budget": budget, "budget_share": choosers.budget_share}


def _figures(names, rule: str, parameter: float, expected, cost, feasible, quality, logged_cost) -> dict:
    """The rule's choices on some rows: endpoint shares, mean expected quality and cost, and where
    every outcome is logged the realized quality and cost (`logged_cost`: the logged price, else
    the expected one) against each endpoint alone."""
    from evaluation.endpoints import realized, shares
    from serving.endpoints._choice import NONE, best_under_price, cascade, cheapest_within

    # each row's first endpoint under the rule (serving.endpoints._choice), NONE where none is feasible
    if rule == "cascade":
        choice = np.array([order[0] if order else NONE for order in cascade(expected, cost, parameter, feasible)])
    else:
        choice = (cheapest_within if rule == "cheapest_within" else best_under_price)(
            expected, cost, parameter, feasible
        )
    out: dict[str, Any] = {"rows": int(len(choice)), "shares": shares(choice, names)}
    out["expected_quality"], out["expected_cost"] = realized(choice, expected, cost)
    complete = np.isfinite(quality).all(axis=1)
    if complete.any():
        q, c = realized(choice[complete], quality[complete], logged_cost[complete])
        out["complete_rows"] = int(complete.sum())
        out["quality"], out["cost"] = q, c
        out["single"] = {
            n: {"quality": float(quality[complete, k].mean()), "cost": float(logged_cost[complete, k].mean())}
            for k, n in enumerate(names)
        }
    return out


def answer_rows(rows: EndpointRows, masks: dict[str, np.ndarray]):
    """Every logged answer of the rows with its endpoint's outcome, in data.prepare.response_rows'
    columns (what training.acceptance reads: the answer as `edge_response`, its outcome as
    `edge_quality`, its endpoint's name as `source`, its prompt's split from `masks`); None
    without answers."""
    import pandas as pd

    if rows.responses is None:
        return None
    answered = np.vectorize(lambda t: isinstance(t, str), otypes=[bool])(rows.responses) & np.isfinite(rows.quality)
    row, k = np.nonzero(answered)
    if not len(row):
        return None
    split = np.where(masks["test"], "test", np.where(masks["val"], "val", "train"))
    return pd.DataFrame(
        {
            "request_id": rows.request_ids[row],
            "prompt": rows.prompts[row],
            "precision": [rows.precisions[i] for i in row],
            "source": np.asarray(rows.names, dtype=object)[k],
            "edge_quality": rows.quality[row, k],
            "edge_response": rows.responses[row, k],
            "edge_logprob_mean": np.nan,
            "edge_logprob_min": np.nan,
            "split": split[row],
        }
    )


def _drift_reference(config, section, model_version: str, val, x_val, models, novelty, max_chars: int, acceptance):
    """The bundle's drift reference (training.drift_reference.decisions_reference): its validation
    rows as the SDK's chooser decides them (serving.routing._chooser.Choice, the bundle's unfamiliar policy)
    on the training models' probabilities and the familiarity reference's novelty, rows no endpoint's
    context holds left out; each device-first row's edge quality is its first endpoint's logged one,
    and what the acceptance check rejects of its answers."""
    from serving.endpoints._choice import call_costs
    from serving.routing._chooser import Choice, Chooser
    from serving.routing._request import Request
    from serving.scoring._scorer import Scores
    from training.drift_reference import decisions_reference

    tokens = input_tokens(x_val)
    _, fits = call_costs(list(section.spec), tokens, section.output_tokens)
    kept = np.flatnonzero(fits.any(axis=1))
    choice = Choice(section, unfamiliar_policy=config.novelty.unfamiliar_policy)
    chooser = Chooser(tuple(section.spec), choice, model_version=model_version, max_chars=max_chars)
    requests = [Request(str(val.prompts[i]), val.precisions[i]) for i in kept]
    scores = Scores(
        tokens[kept].tolist(), expected=models.predict(x_val[kept]), novelty=np.asarray(novelty)[kept].tolist()
    )
    decisions = chooser.decisions(requests, scores)
    index = {name: k for k, name in enumerate(section.names)}
    first = np.array([index[d.endpoint] for d in decisions], dtype=np.int64)
    quality = val.quality[kept, first] if len(kept) else np.zeros(0)
    prompts = [r.text for r in requests]
    return decisions_reference(
        model_version,
        decisions,
        prompts,
        edge_quality=np.where([d.on_device[0] for d in decisions], quality, np.nan),
        rejected=acceptance.rejected_share("val", prompts, [d.endpoint for d in decisions]),
        source=f"{len(decisions)} validation rows (the chooser on the training models' probabilities)",
    )


def train_endpoint_bundle(
    rows: EndpointRows,
    endpoints,
    bundle: Path,
    *,
    mode: str,
    rule: str,
    choosers,
    output_tokens: float,
    folds: int = 5,
    config: TrainConfig | None = None,
    signing_key: Path | None = None,
    chosen_by: dict | None = None,
) -> EndpointBundle:
    """Fit every endpoint's model (`mode`), set the rule's parameter on validation rows, export the
    one graph and write the bundle at `bundle` (module doc). `chosen_by`: how `mode` was chosen
    (the head comparison), kept beside it in the manifest's `endpoints.head_mode`."""
    from serving.endpoints._choice import call_costs
    from serving.monitoring._drift import DRIFT_REFERENCE_FILE
    from training.acceptance import AcceptanceFit, fit_acceptance
    from training.config import TrainConfig
    from training.endpoints import fit_outcome_models, fold_masks, served
    from training.engines.base import _calibration_section, checked_bundle
    from training.export import endpoint_heads_to_onnx
    from training.held_out import bundle_files, fit_familiarity
    from training.novelty import MIN_HALF_ROWS, first_half, too_few_rows

    config = config or TrainConfig()
    if rule not in ENDPOINT_RULES:
        raise EndpointDataError(f"unknown choice rule {rule!r}; choose one of {', '.join(ENDPOINT_RULES)}")
    if tuple(e.name for e in endpoints) != rows.names:
        raise EndpointDataError(
            f"the rows' endpoints {rows.names} are not the spec's {tuple(e.name for e in endpoints)}"
        )
    masks = fold_masks(
        rows.prompts, folds=folds, fold=BUNDLE_FOLD, val_share=config.split.val_share, salt=config.split.salt
    )
    plan, features, x = served(rows, masks["train"], config)
    if plan.fused_prefix is None:
        raise EndpointDataError(
            f"an N-endpoint bundle needs the fused layout (the static tier), not tier {config.features.tier!r}"
        )
    parts = {split: rows.subset(mask) for split, mask in masks.items()}
    models = fit_outcome_models(
        x[masks["train"]], parts["train"], x[masks["val"]], parts["val"], mode=mode, config=config
    )
    trees = endpoint_heads_to_onnx(models.heads, len(plan.spec.model_feature_names))
    # The familiarity reference, as every bundle's (training.held_out): fitted on the validation rows,
    # computed in the fused graph.
    embeddings = {split: features[masks[split]][:, -plan.spec.embedding_dim :] for split in ("val", "test")}
    if too_few_rows(parts["val"].prompts) is not None:
        first = int(first_half(parts["val"].prompts).sum())
        raise EndpointDataError(
            f"too few validation rows to fit the bundle's familiarity reference: {len(parts['val'])} ({first} and "
            f"{len(parts['val']) - first} in the two halves of its hash split, at least {MIN_HALF_ROWS} in each)"
        )
    reference, familiar, novelty = fit_familiarity(
        config, plan, {split: parts[split].prompts for split in ("val", "test")}, embeddings
    )
    # The acceptance check, as every bundle's (training.acceptance), on every endpoint's logged answers.
    answers = answer_rows(rows, masks)
    acceptance = (
        AcceptanceFit({"file": None, "reason": "the training logs carry no answers (responses)"})
        if answers is None
        else fit_acceptance(config, answers, plan.serving.extractor())
    )
    files, familiar = bundle_files(plan, trees, reference, familiar, acceptance)
    model_version = f"edge-cloud-router@endpoints:{hashlib.sha256(files['model.onnx']).hexdigest()[:12]}"

    figures, parameter, setting = {}, 0.0, {}
    for split in ("val", "test"):
        xs, part = x[masks[split]], parts[split]
        expected = models.predict(xs)
        cost, feasible = call_costs(list(endpoints), input_tokens(xs), output_tokens)
        if split == "val":
            parameter, setting = choice_parameter(rule, expected, cost, feasible, part.quality, choosers=choosers)
        logged = np.where(np.isfinite(part.cost), part.cost, cost)
        figures[split] = _figures(rows.names, rule, parameter, expected, cost, feasible, part.quality, logged)
    section = EndpointsSection(
        endpoints,
        float(output_tokens),
        rule,
        float(parameter),
        {
            "head_mode": {"mode": mode, **(chosen_by or {})},
            "choice": {"set_on": "validation rows", **setting},
            "validation": figures["val"],
        },
    )
    validation = (parts["val"], x[masks["val"]], models, novelty["val"], plan.spec.max_chars, acceptance)
    files[DRIFT_REFERENCE_FILE] = _drift_reference(config, section, model_version, *validation).to_bytes()
    accepted = {k: acceptance.section[k] for k in ("cross_fitted", "test") if k in acceptance.section}
    names, on_device = rows.names, [e.context_tokens for e in endpoints if e.where == "device"]
    manifest = Manifest(
        model_version=model_version,
        feature_spec=plan.spec,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        encoder={"tier": config.features.tier, "key": plan.built.key},
        score=ScoreSpec(ENDPOINTS_KIND, names, ("expected",)),
        calibration={n: _calibration_section(head) for n, head in zip(names, models.heads)},
        thresholds={},
        split={
            "val_share": config.split.val_share,
            "test_share": 1.0 / folds,
            "salt": config.split.salt,
            "cv_folds": 0,
        },
        # what a two-side reader sees: the smallest context on the device (the largest anywhere when none runs there)
        limits=Limits(edge_context_tokens=min(on_device or [max(e.context_tokens for e in endpoints)])),
        endpoints=section,
        novelty=familiar,
        acceptance=acceptance.section,
        metrics={
            "test": figures["test"],
            "trees": dict(zip(names, models.trees)),
            **({"acceptance": accepted} if accepted else {}),
        },
        data={"rows": int(len(rows)), **{split: int(mask.sum()) for split, mask in masks.items()}},
        training={"engine": "endpoints", "head_mode": mode},
    )
    test, checked = parts["test"], slice(0, PARITY_ROWS)
    rows, expected = (test.prompts[checked], test.precisions[checked]), models.predict(x[masks["test"]][checked])
    with checked_bundle(bundle, files, manifest, rows, expected, acceptance, answers, signing_key=signing_key) as done:
        staged, parity, acceptance_parity = done
        staged.publish()
    return EndpointBundle(
        Path(bundle), staged.manifest, models, plan, masks, parity, novelty, acceptance, acceptance_parity
    )
