"""An N-endpoint bundle (docs/endpoints.md#n-endpoint-bundles): one calibrated outcome model per
endpoint (training.endpoints, the head mode cross-validation chose) exported into the one fused
model.onnx, whose output `expected` [n, N] is every endpoint's calibrated P(good answer) from the
inputs today's graph takes (token ids, mask, scalars); the manifest's `endpoints` section holds the
spec in head order and the choice rule with its parameter set on validation rows.

Rows are split by prompt hash as one fold of the cross-validation (training.endpoints.fold_masks,
fold 0): the models train on its training rows, stop early, calibrate and set the rule's parameter
on its validation rows, and its test rows are the bundle's unseen rows (figures, parity). The bundle
is written like every bundle (training.writer: checksums, signature, atomic swap) once the SDK's
probabilities from raw text equal the training models' within training.engines.base.PARITY_TOLERANCE.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from serving.manifest import ENDPOINT_RULES, ENDPOINTS_KIND, EndpointsSection, Limits, Manifest, ScoreSpec
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

    def expected(self, prompts, precisions=None) -> np.ndarray:
        """The training models' calibrated probabilities of these prompts, [n, N] (what the
        bundle's graph must output)."""
        precisions = list(precisions) if precisions is not None else [None] * len(prompts)
        return self.models.predict(self.plan.serving.transform(list(prompts), precisions))


def _heads(models: OutcomeModels) -> list:
    """training.model.Head per endpoint, in its order (a shared booster read with the endpoint's side)."""
    from training.model import Head

    shared = models.mode == "shared"
    return [
        Head(f"endpoint{k}", models.boosters[0 if shared else k], calibration, side=k if shared else None)
        for k, calibration in enumerate(models.calibrations)
    ]


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


def _choices(rule: str, parameter: float, expected, cost, feasible) -> np.ndarray:
    """Each row's first endpoint under the rule (serving.endpoint_choice), NONE where none is feasible."""
    from serving.endpoint_choice import NONE, best_under_price, cascade, cheapest_within

    if rule == "cheapest_within":
        return cheapest_within(expected, cost, parameter, feasible)
    if rule == "best_under_price":
        return best_under_price(expected, cost, parameter, feasible)
    return np.array([order[0] if order else NONE for order in cascade(expected, cost, parameter, feasible)])


def _figures(names, rule: str, parameter: float, expected, cost, feasible, quality, logged_cost) -> dict:
    """The rule's choices on some rows: endpoint shares, mean expected quality and cost, and where
    every outcome is logged the realized quality and cost (`logged_cost`: the logged price, else
    the expected one) against each endpoint alone."""
    from evaluation.endpoints import realized, shares

    choice = _choices(rule, parameter, expected, cost, feasible)
    out: dict[str, Any] = {
        "rows": int(len(choice)),
        "shares": shares(choice, names),
        "expected_quality": realized(choice, expected, cost)[0],
        "expected_cost": realized(choice, expected, cost)[1],
    }
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


def _parity(folder: Path, prompts, precisions, expected: np.ndarray, *, public_key=None) -> float:
    """Largest |SDK - training| probability over these rows, the SDK reading the bundle from raw
    text (signature verified when a key is given); RuntimeError above PARITY_TOLERANCE."""
    from serving.bundle import read_bundle
    from serving.scorer import Scorer
    from training.engines.base import PARITY_TOLERANCE

    sdk = Scorer(read_bundle(folder, public_key=public_key)).expected(list(prompts), list(precisions))[0]
    parity = float(np.max(np.abs(sdk - expected))) if len(expected) else 0.0
    if parity > PARITY_TOLERANCE:
        raise RuntimeError(
            f"bundle probabilities differ from the training models' by {parity:.2e} (> {PARITY_TOLERANCE}); "
            "the bundle was not written"
        )
    return parity


def _edge_context(endpoints) -> int:
    """The Limits a two-side reader sees: the smallest context among the endpoints on the device
    (the largest endpoint's when none runs there)."""
    device = [e.context_tokens for e in endpoints if e.where == "device"]
    return min(device) if device else max(e.context_tokens for e in endpoints)


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
    from serving.endpoint_choice import call_costs
    from training.config import TrainConfig
    from training.endpoints import featurized, fit_outcome_models, fold_masks
    from training.engines.base import _public_key
    from training.export import endpoint_heads_to_onnx
    from training.writer import staged_bundle

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
    feats = featurized(rows, masks["train"], config)
    plan, x = feats.plan, feats.matrix
    if plan.fused_prefix is None:
        raise EndpointDataError(
            f"an N-endpoint bundle needs the fused layout (the static tier), not tier {config.features.tier!r}"
        )
    parts = {split: rows.subset(mask) for split, mask in masks.items()}
    models = fit_outcome_models(
        x[masks["train"]], parts["train"], x[masks["val"]], parts["val"], mode=mode, config=config
    )
    trees = endpoint_heads_to_onnx(_heads(models), len(plan.spec.model_feature_names))
    files = plan.bundle_files(trees)

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
    names = rows.names
    manifest = Manifest(
        model_version=f"edge-cloud-router@endpoints:{hashlib.sha256(files['model.onnx']).hexdigest()[:12]}",
        feature_spec=plan.spec,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        encoder={"tier": config.features.tier, "key": plan.built.key},
        score=ScoreSpec(ENDPOINTS_KIND, names, ("expected",)),
        calibration={n: {**c, "in_model": c.get("method") == "sigmoid"} for n, c in zip(names, models.calibrations)},
        thresholds={},
        split={
            "val_share": config.split.val_share,
            "test_share": 1.0 / folds,
            "salt": config.split.salt,
            "cv_folds": 0,
        },
        limits=Limits(edge_context_tokens=_edge_context(endpoints)),
        endpoints=section,
        metrics={"test": figures["test"], "trees": dict(zip(names, models.trees))},
        data={
            "rows": int(len(rows)),
            "train": int(masks["train"].sum()),
            "val": int(masks["val"].sum()),
            "test": int(masks["test"].sum()),
        },
        training={"engine": "endpoints", "head_mode": mode},
    )
    test = parts["test"]
    checked = slice(0, PARITY_ROWS)
    with staged_bundle(Path(bundle), files, manifest, signing_key=signing_key) as staged:
        parity = _parity(
            staged.folder,
            test.prompts[checked],
            test.precisions[checked],
            models.predict(x[masks["test"]][checked]),
            public_key=_public_key(signing_key),
        )
        staged.publish()
    return EndpointBundle(Path(bundle), staged.manifest, models, plan, masks, parity)
