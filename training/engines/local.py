"""The local engine: every row in memory on this machine (pandas frame, feature matrix,
LightGBM). The default, and the fastest below a few million rows."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from evaluation.rows import Rows
from training.config import TrainConfig
from training.crossval import Refit
from training.engines.base import label_of, note_training_sample, print_logs, split_and_label
from training.featurize import FirstPassMemo
from training.fitted import Fitted
from training.held_out import check_held_out_rows
from training.lexical import MARGINS_OUTPUT, OUTCOMES
from training.sampling import sample_fraction, sample_numbers, training_share
from training.stages import StageClock, return_freed_memory

if TYPE_CHECKING:
    import pandas as pd

    from training.lexical_stage import LexicalRows


class Prepared(NamedTuple):
    frame: "pd.DataFrame"  # one row per prompt, with split, label and outcome weights
    report: dict  # the data report
    responses: "pd.DataFrame"  # rows with an edge answer (data.prepare.response_rows), as logged
    token_rows: "pd.DataFrame"  # rows logged without text (training.token_rows), labelled and weighted
    # The rows' tokenization, kept for the next fit on them (cross-fitting's folds and refit);
    # None: each fit tokenizes its rows.
    first_pass: FirstPassMemo | None = None


def resplit(prepared: Prepared, config: TrainConfig) -> Prepared:
    """`prepared` (read once) with the split of `config`: what prepare_frame(config) returns for
    a configuration that differs only in its split, without reading the logs again (the folds
    of training.crossval)."""
    import copy

    from data.prepare import assign_splits

    frame = split_and_label(prepared.frame.drop(columns=["split", "label"]), config)
    responses = prepared.responses
    if responses is not None and len(responses):
        responses = responses.assign(split=assign_splits(responses["prompt"], **config.split.hashed))
    return Prepared(frame, copy.deepcopy(prepared.report), responses, prepared.token_rows, prepared.first_pass)


def prepare_frame(config: TrainConfig, clock=None) -> Prepared:
    """Validated, de-duplicated rows with split and label columns, the load report, the rows
    that carry an edge answer (as logged, not merged) and the rows logged without text.
    `clock` (training.stages.StageClock) times reading and merging as two stages."""
    import pandas as pd

    from data.hf_datasets import source_name
    from data.location import default_data_paths
    from data.prepare import fingerprint, response_rows
    from training.partial import partial_report, with_outcome_weights

    clock = clock or StageClock({})
    paths = config.data or default_data_paths()
    clock.begin("read_validate")
    valid, logs = read_valid_rows(paths, config)
    clock.begin("merge")
    weighing = {"estimator": config.model.partial_estimator, "max_weight": config.model.max_ipw_weight}
    frame = split_and_label(merge_repeats(with_outcome_weights(valid, **weighing)), config)
    tokens = with_outcome_weights(logs.token_frame(), **weighing)
    tokens = tokens.assign(split="train", label=label_of(tokens, config))  # token_rows: never held out
    logged = ["edge_quality", "cloud_quality", "propensity"]
    outcomes = partial_report(pd.concat([valid[logged], tokens[logged]], ignore_index=True), **weighing)
    report = {
        "paths": [source_name(p) for p in paths],
        "rows_read": logs.n_read,
        "rejected": len(logs.rejects),
        "unlabelled": sum(r.kind == "unlabelled" for r in logs.rejects),
        "rejects_file": str(config.rejects_path),
        "duplicates_merged": int((frame["n_merged"] - 1).sum()),
        **fingerprint(valid, frame),
        "outcomes": outcomes,
        "token_rows": {"read": len(tokens)},
    }
    responses = response_rows(valid, **config.split.hashed)
    return Prepared(frame, report, responses, tokens)


def read_valid_rows(paths, config: TrainConfig):
    """The valid rows as one frame, and a LoadedLogs with the rejects, the rows logged without
    text and the count of what was read: load_logs' result, read one loading unit at a time
    (data.logs.read_unit) and each turned into a frame at once, so the rows never exist as one
    list of dicts (~2 KB a row, more than the frame). Rejects are written and the reject share
    checked as load_logs does."""
    from data.logs import LoadedLogs, check_reject_share, loading_units, read_unit

    logs, frames = LoadedLogs(rows=[]), []
    for unit in loading_units(paths):
        loaded = read_unit(unit)
        frames.append(loaded.frame())
        # Prompts as Python strings (object column), not an Arrow string column: filtering and merging then copy
        # 8-byte references instead of every prompt's text, and a featurized chunk's list of prompts is free.
        frames[-1]["prompt"] = frames[-1]["prompt"].astype(object)
        logs.rejects.extend(loaded.rejects)
        logs.token_rows.extend(loaded.token_rows)
        logs.n_read += loaded.n_read
    logs.write_rejects(config.rejects_path)
    check_reject_share(
        n_valid=sum(map(len, frames)) + len(logs.token_rows),
        n_read=logs.n_read,
        rejects=logs.rejects,
        max_reject_share=config.max_reject_share,
        paths=paths,
        rejects_path=config.rejects_path,
    )
    return concat_like_one_frame(frames), logs


def concat_like_one_frame(frames):
    """The units' frames as one, with the column types one frame of all their rows would have
    had: a column absent from a unit is all None there (object), and takes the type of the
    units that have values in it (float, or pandas' string type)."""
    import pandas as pd

    whole = pd.concat(frames, ignore_index=True) if len(frames) != 1 else frames[0]
    for column in whole.columns:
        kinds = {f[column].dtype for f in frames if f[column].notna().any()}
        if len(kinds) == 1 and whole[column].dtype not in kinds:
            whole[column] = whole[column].astype(kinds.pop())
    return whole


def merge_repeats(valid):
    """data.prepare.merge_duplicates' result, the same rows in the same order, with only the
    repeated prompts going through it: each prompt's first row stands in place, and the merged
    values are written over the repeated ones. The frame is filtered once instead of copied
    several times (it holds every prompt)."""
    import pandas as pd

    from data.prepare import merge_duplicates, missing_text_as_none
    from data.schema import RESPONSE_COLUMNS

    valid = valid.drop(columns=[c for c in RESPONSE_COLUMNS if c in valid])  # as merge_duplicates does
    codes, _ = pd.factorize(valid["prompt"])
    repeated = np.bincount(codes)[codes] > 1
    first = np.zeros(len(codes), dtype=bool)
    first[np.unique(codes, return_index=True)[1]] = True
    out = valid[first].assign(n_merged=1)
    if repeated.any():
        merged = merge_duplicates(valid[repeated])  # in order of first appearance, like their rows in `out`
        at = np.flatnonzero(repeated[first])
        for column in merged.columns.drop("prompt"):
            out.iloc[at, out.columns.get_loc(column)] = merged[column].to_numpy()
    return missing_text_as_none(out.reset_index(drop=True))


def evaluation_frame(config: TrainConfig, console, *, splits: tuple[str, ...], max_rows: int):
    """Every prepared row, the report and the answer rows (the local engine holds them all;
    `splits` and `max_rows` are the Dask engine's sampling). Rows logged without text cannot
    be scored from their text: they are counted and left out; DataQualityError when nothing
    else is left."""
    from data.logs import TEXT_NEEDED, DataQualityError

    prepared = prepare_frame(config)
    if len(prepared.token_rows) and not len(prepared.frame):
        n = len(prepared.token_rows)
        raise DataQualityError(
            f"nothing to evaluate in {', '.join(prepared.report['paths'])}: {n} rows logged without their text "
            "(OutcomeLog(store_prompts=False)) and none with it, and the evaluation routes prompts from their "
            f"text; {TEXT_NEEDED}"
        )
    if len(prepared.token_rows):
        console.print(
            f"[yellow]{len(prepared.token_rows)} rows logged without text (store_prompts=False) are "
            "left out: the evaluation scores prompts from their text[/]"
        )
    return prepared.frame, prepared.report, prepared.responses


def _training_sample(frame, config: TrainConfig, report: dict, console):
    """The frame with its training rows cut to about `max_train_rows`, the same prompts the
    Dask engine keeps (training.sampling.sample_numbers); validation and test untouched."""
    fraction = sample_fraction(config.split.max_train_rows, len(frame) * training_share(config))
    if fraction >= 1.0:
        return frame
    train = (frame["split"] == "train").to_numpy()
    keep = ~train
    keep[train] = sample_numbers(frame["prompt"].to_numpy()[train], config) < fraction
    note_training_sample(console, report, config, fraction, kept=int((keep & train).sum()))
    return frame[keep].reset_index(drop=True)


def _features(config: TrainConfig, frame, console, keep_tokens: np.ndarray, memo: FirstPassMemo | None = None):
    from rich.progress import Progress

    from training.featurize import default_workers, featurize

    train = (frame["split"] == "train").to_numpy()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"features ({config.features.tier} tier)", total=len(frame))
        # The columns as they are (no list copies): each chunk is read from them while it is featurized.
        feats = featurize(
            config,
            frame["prompt"].to_numpy(),
            frame["precision"].to_numpy(),
            train,
            workers=default_workers(),
            on_batch=lambda n: progress.advance(task, n),
            keep_tokens=keep_tokens,
            memo=memo,
        )
    cache = (
        f"embedding cache {feats.cache_hits} hits / {feats.cache_misses} computed"
        if feats.cache_used
        else "no embedding cache (recomputing a static embedding is cheaper than reading it)"
    )
    console.print(f"[bold]features[/]: {feats.matrix.shape[1]} columns; {cache}")
    return feats


def _token_rows(plan, token_rows, data_report: dict, console):
    """(features of the usable rows logged without text, those rows); the data report says how
    many were read, used and left out, and why (training.token_rows). With lexical evidence,
    a row's margins come from its logged ids (missing for a row logged as an embedding)."""
    from data.schema import TOKENS
    from training.token_rows import token_features

    if not len(token_rows):
        return np.zeros((0, len(plan.spec.served_names)), dtype=np.float32), token_rows
    matrix, usable, skipped = token_features(plan, token_rows)
    if plan.lexical is not None:
        logged = token_rows[TOKENS][usable]
        matrix = np.concatenate([matrix, plan.lexical.margins_of_rows([r.get("input_ids") for r in logged])], axis=1)
    data_report["token_rows"].update(used=int(usable.sum()), skipped=skipped)
    left = f"; left out: {skipped}" if skipped else ""
    console.print(
        f"[bold]rows logged without text[/]: {int(usable.sum())} of {len(token_rows)} train from their token ids{left}"
    )
    return matrix, token_rows[usable].reset_index(drop=True)


def _with_lexical(
    config: TrainConfig, frame: "pd.DataFrame", feats: Any, kept: np.ndarray, rows: "LexicalRows", console: Any
) -> tuple[Any, np.ndarray]:
    """(the plan with lexical evidence, the feature matrix with its margins appended):
    training.lexical, out of fold on the training rows when the trees read them; NaN where
    nothing reads them (`rows.wanted`)."""
    from training.lexical_stage import for_training, outcome_arrays

    t0 = time.perf_counter()
    fits = 1 if rows.folds is None else config.lexical.folds + 1
    with console.status(f"lexical evidence: {fits} logistic regression(s) per outcome"):
        vocabulary = feats.plan.serving.featurizer().extractor.tokenizer.full.get_vocab_size()
        model, margins = for_training(config, *outcome_arrays(frame), feats.tokens, kept, *rows, vocabulary=vocabulary)
    how = (
        "blended into the heads"
        if config.lexical.mode == "blend"
        else f"trees' inputs, training rows' margins out of {config.lexical.folds} folds"
    )
    console.print(
        f"[bold]lexical evidence[/]: {how}; fitted on {int(rows.sample.sum())} training prompts "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    return feats.plan.with_lexical(model, config.lexical.mode), np.concatenate([feats.matrix, margins], axis=1)


def _as_served(x: np.ndarray, rows: np.ndarray, plan, tokens, kept: np.ndarray, out_of_fold: bool) -> np.ndarray:
    """The features of `rows` as the bundle computes them: a training row's lexical margins
    are out of fold in `x` (`out_of_fold`) when the trees read them or start from them, the
    bundle's come from the shipped model (a blend's `x` holds those otherwise). `tokens`: the
    ids of the rows where `kept` is true (every row when out of fold)."""
    if plan.lexical is None or not out_of_fold:
        return x[rows]
    served = x[rows]
    served[:, -len(plan.lexical.bias) :] = plan.lexical.margins_of_tokens(tokens.subset(rows[kept]))
    return served


def _unless_equal(weights: np.ndarray):
    """None when every weight is 1 (LightGBM then builds exactly the unweighted model), else the weights."""
    return None if np.all(weights == 1.0) else weights


def fit(
    config: TrainConfig,
    console,
    timings: dict,
    *,
    refit: Refit | None = None,
    prepared: Prepared | None = None,
    keep_train_rows: bool = False,
) -> Fitted:
    """Load, featurize and fit in this process. With `refit` (cross-fitting, training.crossval),
    every row trains, for the rounds and with the calibrations the folds chose, and both
    `splits` are every row with both outcomes, scored in sample: cross-fitting puts the
    out-of-fold scores in "val" and keeps "test" for the parity check. `prepared`: the logs as
    prepare_frame read them for another split (resplit puts this configuration's split on them).
    `keep_train_rows`: hand back the training rows (Fitted.train_rows), which cross-validation
    fits the reference and the tuned rule table on."""
    from training.model import (
        SIDE_FEATURE,
        blank_declared_precision,
        boosting,
        fit_booster,
        fit_heads,
        predict,
        stack_sides,
        target_columns,
    )
    from training.partial import both_known, head_rows, share_heads, sides_known

    clock = StageClock(timings)
    with clock.span("load"), console.status("loading and validating logs"):
        frame, data_report, responses, token_rows, memo = (
            prepare_frame(config, clock) if prepared is None else resplit(prepared, config)
        )
    print_logs(console, data_report)
    if refit is None:
        both, split = both_known(frame), frame["split"].to_numpy()  # too few to validate: stop before fitting
        check_held_out_rows(frame["prompt"][both & (split == "val")], int((both & (split == "test")).sum()))
    else:
        frame = frame.assign(split="train")
        # every answer is cross-fitted by the acceptance check, none held out as a test
        responses = responses.assign(split="val") if responses is not None else None
    prepared_rows = len(frame)  # before the training sample: what both engines draw samples from
    frame = _training_sample(frame, config, data_report, console)
    both = both_known(frame)

    clock.begin("featurize")
    split = frame["split"].to_numpy()
    train, val = (split == "train"), (split == "val")
    # The ids kept: the held-out rows' (the familiarity fit reads them), and with lexical
    # evidence those of its sample and of the rows whose margins are read (training_rows).
    keep_tokens = ~train if refit is None else both
    if config.lexical.mode != "none":
        from training.lexical_stage import note_sample, training_rows

        lexical_rows = training_rows(
            config, frame["prompt"].to_numpy(), train, rows=prepared_rows, refit=refit is not None
        )
        note_sample(console, data_report, config, prepared_rows, int(lexical_rows.sample.sum()))
        keep_tokens = keep_tokens | lexical_rows.sample | lexical_rows.wanted
    with clock.span("features"):
        feats = _features(config, frame, console, keep_tokens, memo)
    if refit is None and not keep_train_rows:
        # Featurized, the training rows' text is read no more (their lexical sample and folds
        # were drawn above; only the scored validation and test rows become Rows): ~0.85 GB of
        # Python strings at a million rows, the largest holder of the frame.
        frame["prompt"] = frame["prompt"].where(~train, None)
    return_freed_memory()  # that text, the chunks' ids and the pool's results (~0.4 GB) back to the system
    x, plan = feats.matrix, feats.plan
    if config.lexical.mode != "none":
        clock.begin("lexical")
        plan, x = _with_lexical(config, frame, feats, keep_tokens, lexical_rows, console)
    clock.begin("fit")

    names = plan.spec.model_feature_names
    columns = target_columns(config.model.objective)
    # Each head learns from the rows where its outcome is known (training.partial): the text
    # rows of the training split, then the usable rows logged without text (training.token_rows).
    x_tokens, token_rows = _token_rows(plan, token_rows, data_report, console)
    x_train = blank_declared_precision(
        np.concatenate([x[train], x_tokens]),
        names,
        feats.spec.precisions,
        config.model.precision_dropout,
        np.random.default_rng(config.seed),
    )
    targets = {c: frame[c].to_numpy() for c in columns}
    known = {c: head_rows(frame, c) for c in columns}
    known_train = {
        c: tuple(
            np.concatenate([part[train], from_tokens]) for part, from_tokens in zip(known[c], head_rows(token_rows, c))
        )
        for c in columns
    }
    targets_train = {c: np.concatenate([targets[c][train], token_rows[c].to_numpy(float)]) for c in columns}

    trees = slice(0, len(names))  # the trees' columns: a blend's margins follow them
    # lexical_start: each head's boosting starts from its outcome's margin column (out of fold on
    # the training rows; a row logged as an embedding only, without ids, has none and starts from 0).
    start = {c: len(names) + OUTCOMES.index(c) for c in columns} if config.lexical.start else {}

    def rows_of(column: str):
        """(train x, y, weights), (validation x, y, weights), (train, validation starting
        scores or None) of the head that learns `column`."""
        (fit_rows, weights), val_rows = known_train[column], known[column][0] & val
        starts = (None, None)
        if column in start:
            at = start[column]
            starts = (np.nan_to_num(x_train[fit_rows, at].astype(np.float64)), x[val_rows, at].astype(np.float64))
        return (
            (x_train[fit_rows, trees], targets_train[column][fit_rows], _unless_equal(weights[fit_rows])),
            (x[val_rows, trees], targets[column][val_rows], _unless_equal(known[column][1][val_rows])),
            starts,
        )

    def fit_booster_for(columns: tuple[str, ...], objective: str):
        parts = [rows_of(c) for c in columns]  # shared: each side's rows, stacked
        (x_fit, y_fit, w_fit), (x_val, y_val, w_val) = (stack_sides([part[k] for part in parts]) for k in (0, 1))
        init = val_init = None
        if start:  # each side's starting scores, stacked as its rows are
            init, val_init = (np.concatenate([starts[k] for _, _, starts in parts]) for k in (0, 1))
        if refit is not None:  # no validation rows: the rounds the folds' early stopping chose
            x_val = y_val = w_val = val_init = None
        rounds = None if refit is None else refit.rounds[columns[0]]
        options = dict(weight=w_fit, val_weight=w_val, init_score=init, val_init_score=val_init, objective=objective)
        feature_names = list(names) + [SIDE_FEATURE] * (len(columns) > 1)
        return fit_booster(
            x_fit, y_fit, x_val, y_val, feature_names=feature_names, rounds=rounds, **options, **boosting(config)
        )

    counts = sides_known(*(known_train[c][0] for c in columns))
    shared = share_heads(config.model.head_sharing, heads=len(columns), **{k: int(v) for k, v in counts.items()})
    if refit is not None:
        shared = refit.shared

    status = f"LightGBM heads for {config.model.objective} (early stopping on validation)"
    with clock.span("lightgbm"), console.status(status):  # the boosters alone; the "fit" stage adds scoring
        heads = fit_heads(
            config.model.objective,
            fit_booster_for,
            x[val],
            {c: v[val] for c, v in targets.items()},
            config,
            weights_val={c: np.where(known[c][0], known[c][1], 0.0)[val] for c in columns},
            shared=shared,
            refit=refit,
        )
    n_tokens = x[:, names.index("n_tokens")]
    # Thresholds and figures compare both outcomes of a request: the rows that have both
    # (scored here, not the training rows: at a million rows those took a minute).
    chosen = {name: (split == name) & both if refit is None else both for name in ("val", "test")}
    splits, raw = {}, {}
    for name, rows in chosen.items():
        served = _as_served(
            x, rows, plan, feats.tokens, keep_tokens, config.lexical.mode == "features" or config.lexical.start
        )
        raw[name] = {h.name: h.raw(served) for h in heads}  # the trees run once per split
        scores, probabilities = predict(config.model.objective, heads, served, raw[name])
        splits[name] = Rows.from_frame(frame[rows], n_tokens=n_tokens[rows], scores=scores, probabilities=probabilities)
        if config.lexical.mode == "blend":  # what cross-fitting fits the refit's blends on
            raw[name][MARGINS_OUTPUT] = served[:, len(names) :]
    embeddings = {name: feats.matrix[rows][:, -feats.spec.embedding_dim :] for name, rows in chosen.items()}
    tokens = (
        None
        if feats.tokens is None
        else {name: feats.tokens.subset(rows[keep_tokens]) for name, rows in chosen.items()}
    )
    train_rows = (
        Rows.from_frame(frame[train], n_tokens=n_tokens[train], scores=np.zeros(int(train.sum())))
        if keep_train_rows
        else None
    )
    clock.end()
    notes = {"embedding_cache": {"used": feats.cache_used, "hits": feats.cache_hits, "computed": feats.cache_misses}}
    fitted = (data_report, plan, config.model.objective, heads, splits, embeddings, responses)
    return Fitted(*fitted, tokens=tokens, notes=notes, train_rows=train_rows, raw=raw)
