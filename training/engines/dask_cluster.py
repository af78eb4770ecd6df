"""The Dask engine (`make train ENGINE=dask`; docs/scale-out.md#how-it-works): the training
stages on a Dask cluster, returning the local engine's `Fitted`, so everything after the fit is
shared (training.engines.base).

Every log file is a partition read, validated, split, labelled and featurized on the workers, and
LightGBM trains data-parallel on them (lightgbm.dask). The client holds bounded samples chosen by
prompt hash only: at most `pca_sample_rows` training rows for the projection, `eval_sample_rows`
each of validation and test, and the lexical regressions' sample of token ids. The logs are read
once into a per-run checkpoint (`dask_scratch`); later passes read it: the projection sample and
the repeated prompts merged on the workers, then every row's features.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evaluation.rows import Rows
from training.config import TrainConfig
from training.engines.base import note_training_sample, print_logs
from training.fitted import Fitted
from training.lexical import MARGINS_OUTPUT
from training.sampling import sample_fraction, training_share


def _read_and_check(config: TrainConfig, folder: str):
    """Pass 1: every unit read and validated on the workers, its valid rows written to
    `folder` (checkpoint_partition) for the later passes; rejects written here; the run
    stops on too many. Returns the valid rows (read back, with a prompt key), the repeated
    keys, the report and the rows with an edge answer (data.prepare.response_rows)."""
    import dask
    import dask.dataframe as dd

    from data.hf_datasets import source_name
    from data.location import default_data_paths
    from data.logs import LoadedLogs, check_reject_share, loading_units
    from data.prepare import response_rows
    from data.schema import COLUMNS, Reject
    from training.engines import dask_partitions as de
    from training.partial import COUNTED, WEIGHT_COLUMNS, combined_report

    paths = config.data or default_data_paths()
    units = [str(u) for u in loading_units(paths)]
    logs = dd.from_map(de.unit_frame, units, meta=de.frame_meta(de.UNIT_COLUMNS), enforce_metadata=False)
    is_reject = logs["reject_reason"].notnull()
    weighing = {"estimator": config.model.partial_estimator, "max_weight": config.model.max_ipw_weight}
    valid = logs[~is_reject][list(COLUMNS)].map_partitions(de.with_keys, meta=de.frame_meta(COLUMNS, key=np.uint64))
    valid = valid.map_partitions(
        de.with_weights, **weighing, meta=de.frame_meta(COLUMNS, key=np.uint64, **dict.fromkeys(WEIGHT_COLUMNS, float))
    )
    key_counts = valid["key"].value_counts()
    with de.stage("reading and validating logs"):
        n_read, rejects, repeated, per_source, digests, outcomes, answered, _ = dask.compute(
            logs.shape[0],
            logs[is_reject][list(de.REJECT_COLUMNS)],
            key_counts[key_counts > 1],
            valid["source"].value_counts(),
            valid.map_partitions(de.content_digest, meta={"digest": object}),
            valid.map_partitions(de.outcome_counts, **weighing, meta={k: np.int64 for k in COUNTED}),
            valid[valid["edge_response"].notnull()].drop(columns="key"),
            valid.map_partitions(de.checkpoint_partition, folder, meta={"rows": np.int64}),
        )

    rejects_path = config.rejects_path
    reject_list = [Reject(*row) for row in rejects.itertuples(index=False)]
    LoadedLogs(rows=[], rejects=reject_list).write_rejects(rejects_path)
    check_reject_share(
        n_valid=int(per_source.sum()),
        n_read=int(n_read),
        rejects=reject_list,
        max_reject_share=config.max_reject_share,
        paths=paths,
        rejects_path=rejects_path,
    )
    report = {
        "paths": [source_name(p) for p in paths],
        "units": len(units),
        "rows_read": int(n_read),
        "rejected": len(reject_list),
        "unlabelled": sum(r.kind == "unlabelled" for r in reject_list),
        "rejects_file": str(rejects_path),
        "outcomes": combined_report(outcomes, **weighing),
        "rows_per_source": per_source.astype(np.int64),
        "content_sum64": str(sum(int(d) for d in digests["digest"]) % 2**64),
    }  # as data.prepare's
    checkpoint = dd.from_map(
        de.read_checkpoint,
        [de.checkpoint_file(folder, i) for i in range(len(units))],
        meta=de.checkpoint_meta(),
        enforce_metadata=False,
    )
    responses = response_rows(answered, **config.split.hashed)
    return checkpoint, repeated, report, responses


def _merge_repeated(valid, repeated, report: dict, folder: str):
    """One row per prompt. The rows of repeated prompts are gathered by prompt key on the
    workers (a shuffle), put back in the order they were read and merged there by the local
    engine's merge_duplicates; the merged rows are written to the checkpoint (`folder`/merged)
    and read from there after the untouched ones, so no worker holds them between passes.
    Completes `report` (rows, per source, merged)."""
    import dask
    import dask.dataframe as dd

    from training.engines import dask_partitions as de

    per_source, n_rows, merged_away = report["rows_per_source"], int(report["rows_per_source"].sum()), 0
    keys = repeated.index.to_numpy(np.uint64)
    is_repeated = valid["key"].isin(keys)
    singles = valid[~is_repeated].drop(columns="key").assign(n_merged=1)
    rows = singles
    if len(keys):
        gathered = valid[is_repeated].map_partitions(de.with_read_order, meta=de.checkpoint_meta(read_order=np.int64))
        partitions = -(-int(repeated.sum()) // de.MERGE_PARTITION_ROWS)
        shuffled = gathered.shuffle("key", npartitions=partitions, shuffle_method="tasks")
        merged = shuffled.map_partitions(de.merge_partition, singles.dtypes.to_dict(), meta=singles._meta)
        merged_folder = str(Path(folder) / "merged")
        with de.stage("merging repeated prompts"):  # one computation: the shuffle runs once
            before, after, _ = dask.compute(
                shuffled["source"].value_counts(),
                merged["source"].value_counts(),
                merged.map_partitions(
                    de.checkpoint_partition, merged_folder, tuple(singles.columns), meta={"rows": np.int64}
                ),
            )
        merged = dd.from_map(
            de.read_checkpoint,
            [de.checkpoint_file(merged_folder, i) for i in range(partitions)],
            meta=singles._meta,
            enforce_metadata=False,
        )
        per_source = per_source.sub(before, fill_value=0).add(after, fill_value=0)
        merged_away = int(repeated.sum()) - int(after.sum())
        n_rows -= merged_away
        rows = dd.concat([singles, merged])
    report.update(
        rows=n_rows,
        duplicates_merged=merged_away,
        rows_per_source={str(k): int(v) for k, v in per_source.sort_index().items() if v},
    )
    return rows


def _prepare(rows, config: TrainConfig):
    """Split, label and sampling number on every partition."""
    from training.engines import dask_partitions as de

    return rows.map_partitions(de.prepare_partition, config, meta=de.frame_meta(de.ROUTING_COLUMNS, **de.PREPARED))


def _sample(prepared, split: str, cap: int | None, report: dict, config: TrainConfig):
    """At most about `cap` rows of a split ("all": every row; cap None: no limit), chosen by
    prompt hash (training.sampling.sample_numbers)."""
    shares = {
        "train": training_share(config),
        "val": config.split.val_share,
        "test": config.split.test_share,
        "all": 1.0,
    }
    rows = prepared if split == "all" else prepared[prepared["split"] == split]
    fraction = sample_fraction(cap, report["rows"] * shares[split])
    return rows if fraction >= 1.0 else rows[rows["sample_u"] < fraction]


def evaluation_frame(config: TrainConfig, console, *, splits: tuple[str, ...], max_rows: int):
    """For `make evaluate ENGINE=dask`: prepared rows of `splits` ("all" = every row), at most
    about `max_rows` per split, chosen by prompt hash on the cluster and collected here."""
    from training.engines import dask_partitions as de

    with (
        de.cluster(config.engine.dask_scheduler, workers=config.engine.dask_workers) as client,
        de.scratch(config) as folder,
    ):
        valid, repeated, report, responses = _read_and_check(config, folder)
        prepared = _prepare(_merge_repeated(valid, repeated, report, folder), config)
        print_logs(console, report)
        with de.stage("collecting the evaluation samples"):
            frames = de.collected(client, *(_sample(prepared, name, max_rows, report, config) for name in splits))
    frame = pd.concat(frames, ignore_index=True)  # distinct splits of merged rows: no prompt twice
    report["notes"] = [
        f"Dask engine: {report['rows']} prompts read on the cluster; figures on hash samples of "
        f"at most about {max_rows} rows per split ({len(frame)} rows here)"
    ]
    return frame.drop(columns="sample_u"), report, responses


def _plan_and_rows(client, config: TrainConfig, valid, repeated, report: dict, folder: str):
    """Pass 2: the projection fitted on raw embeddings of a training sample (drawn before
    merging: a repeated prompt in it weighs twice, harmlessly), and the repeated rows merged.
    Returns the feature plan, the prepared rows and the sample's size."""
    from training.engines import dask_partitions as de
    from training.featurize import configured_raw_stage, fit_projection, plan_from, raw_width

    built, raw = configured_raw_stage(config)
    width = raw_width(raw)
    report["rows"] = int(report["rows_per_source"].sum())  # for the sample fraction; exact below
    unmerged = _prepare(valid[list(de.ROUTING_COLUMNS)].assign(n_merged=1), config)
    pca_rows = _sample(unmerged, "train", config.engine.pca_sample_rows, report, config)
    recipe = client.scatter(raw.for_workers(), broadcast=True)
    raw_embeddings = pca_rows.map_partitions(
        de.raw_embedding_partition, recipe, meta={f"raw_{i}": np.float32 for i in range(width)}
    )
    with de.stage("raw embeddings for the projection"):
        raw_sample = raw_embeddings.compute()
    prepared = _prepare(_merge_repeated(valid, repeated, report, folder), config)
    plan = plan_from(built, raw, fit_projection(raw_sample.to_numpy(), config.features.embedding_dim, seed=config.seed))
    return plan, prepared, len(raw_sample)


# What evaluation.rows.Rows.from_frame reads of a prepared row (with its token count).
ROW_COLUMNS = ("request_id", "prompt", "precision", "domain", "source", "edge_quality", "cloud_quality", "label")


def _features(
    client, config: TrainConfig, plan, prepared, report: dict, targets: tuple[str, ...], keep_train_rows: bool = False
):
    """Pass 3, on the workers (persisted, not collected): features of the validation and test
    samples, with their token ids, and of the training rows (at most about `max_train_rows`),
    which stay there for LightGBM. With `keep_train_rows`, a sample of the training rows (at
    most about `eval_sample_rows`, by prompt hash) as rows with their token count and no
    features: what the reference policy and the tuned rule table are fitted on
    (training.crossval); else None. With lexical evidence, the token ids and outcomes of the
    training rows its regressions are fitted on (at most about `lexical_sample_rows`, the local
    engine's sample); else None. Returns (train, val, test, train sample, lexical sample)."""
    from training.engines import dask_partitions as de
    from training.lexical import OUTCOMES
    from training.lexical_stage import sample_fraction_of
    from training.partial import WEIGHT_COLUMNS

    recipe = client.scatter(plan.serving.for_workers(), broadcast=True)
    keep = (*ROW_COLUMNS, "split", *WEIGHT_COLUMNS)
    val, test = (
        _sample(prepared, name, config.engine.eval_sample_rows, report, config).map_partitions(
            de.feature_partition, recipe, keep=keep, with_tokens=True, meta=de.feature_meta(plan.serving, keep, True)
        )
        for name in ("val", "test")
    )
    lexical = config.lexical.mode != "none"
    # With lexical evidence the training rows of its sample keep their token ids (the local
    # engine's sample: training.lexical_stage.sample_fraction_of), which come here to be fitted on.
    train_keep = tuple(dict.fromkeys((*targets, *WEIGHT_COLUMNS, *(OUTCOMES if lexical else ()))))
    train = _sample(prepared, "train", config.split.max_train_rows, report, config).map_partitions(
        de.feature_partition,
        recipe,
        keep=train_keep,
        blank_precision=config.model.precision_dropout,
        seed=config.seed,
        tokens_below=sample_fraction_of(config, report["rows"]) if lexical else None,
        meta=de.feature_meta(plan.serving, train_keep, lexical),
    )
    train_sample = (
        _sample(prepared, "train", config.engine.eval_sample_rows, report, config).map_partitions(
            de.counted_partition, recipe, keep=ROW_COLUMNS, meta=de.counted_meta(ROW_COLUMNS)
        )
        if keep_train_rows
        else None
    )
    wanted = [f for f in (train, val, test, train_sample) if f is not None]
    with de.stage("features"):
        persisted = iter(client.persist(wanted))  # one graph: each partition is read once
    train, val, test, train_sample = (None if f is None else next(persisted) for f in (train, val, test, train_sample))
    lexical_sample = (
        train[train[de.TOKEN_IDS].notnull()][[*OUTCOMES, *WEIGHT_COLUMNS, de.TOKEN_IDS]] if lexical else None
    )
    return train, val, test, train_sample, lexical_sample


def _lexical(
    client: Any, config: TrainConfig, plan: Any, rows: pd.DataFrame, report: dict[str, Any], console: Any
) -> tuple[Any, Any]:
    """The lexical regressions (training.lexical_stage.fit_sample, as the local engine fits them),
    here, on the sample's token ids and outcomes (`rows`, collected from the workers). Returns
    the plan with lexical evidence and the model sent to every worker (for margin_partition)."""
    from training.engines import dask_partitions as de
    from training.featurize import TokenRows
    from training.lexical_stage import fit_sample, note_sample, outcome_arrays

    note_sample(console, report, config, report["rows"], len(rows))
    vocabulary = plan.serving.featurizer().extractor.tokenizer.full.get_vocab_size()
    ids = rows[de.TOKEN_IDS].tolist()
    model = fit_sample(config, TokenRows.from_rows(ids), *outcome_arrays(rows), vocabulary=vocabulary)
    console.print(f"[bold]lexical evidence[/]: blended into the heads; fitted on {len(rows)} training prompts")
    return plan.with_lexical(model, config.lexical.mode), client.scatter(model, broadcast=True)


def _fit_heads(client, config: TrainConfig, train, val, names, served: list[str]) -> list:
    """Each head of the objective on the cluster, from the rows where its outcome is known
    (training.partial, as the local engine), early-stopped and calibrated on the validation
    sample; separate or shared as the local engine decides (training.partial.share_heads).
    The trees read `names`; `served` are the validation sample's columns the heads are
    calibrated on: `names`, then a blend's lexical margins (blended in as the local engine does)."""
    import dask.dataframe as dd

    from training.engines import dask_partitions as de
    from training.model import SIDE_FEATURE, boosting, fit_booster_dask, fit_heads, stack_sides, target_columns
    from training.partial import SIDES, head_rows, known_rows, share_heads, sides_known

    x_val = val[served].to_numpy()
    columns = target_columns(config.model.objective)
    known_val = {c: head_rows(val, c) for c in columns}
    weighted = config.model.partial_estimator == "ipw" and all(c in SIDES for c in columns)

    def rows_of(column: str, side: int | None):
        """The head's training rows (features, SIDE_FEATURE for a shared head, target_y and,
        weighted, target_weight) and its validation (x, y, weight or None)."""
        rows = train[known_rows(train, column)]
        extra = {} if side is None else {SIDE_FEATURE: np.float32(side)}
        weight = {"target_weight": rows[SIDES[column]]} if weighted else {}
        part = rows[names].assign(**extra, target_y=rows[column], **weight)
        val_rows, val_weights = known_val[column]
        x_v = x_val[val_rows, : len(names)]
        return part, (x_v, val[column].to_numpy()[val_rows], val_weights[val_rows] if weighted else None)

    def fit_booster_for(heads: tuple[str, ...], objective: str):
        shared = len(heads) > 1
        parts = [rows_of(c, side if shared else None) for side, c in enumerate(heads)]
        rows = dd.concat([part for part, _ in parts]) if shared else parts[0][0]
        x_v, y_v, w_v = stack_sides([v for _, v in parts])
        with de.stage(f"LightGBM training ({', '.join(heads)})"):
            return fit_booster_dask(
                client,
                rows[list(names) + [SIDE_FEATURE] * shared],
                rows["target_y"],
                x_v,
                y_v,
                weight=rows["target_weight"] if weighted else None,
                val_weight=w_v if weighted else None,
                objective=objective,
                **boosting(config),
            )

    counts = sides_known(*[known_rows(train, c) for c in columns])
    if len(columns) > 1:  # lazy sums over the cluster's rows
        counts = dict(zip(counts, client.compute(list(counts.values()), sync=True)))
    shared = share_heads(config.model.head_sharing, heads=len(columns), **counts)
    return fit_heads(
        config.model.objective,
        fit_booster_for,
        x_val,
        {c: val[c].to_numpy() for c in columns},
        config,
        shared=shared,
        weights_val={c: np.where(known, weights, 0.0) for c, (known, weights) in known_val.items()},
    )


def fit(config: TrainConfig, console, timings: dict, *, keep_train_rows: bool = False) -> Fitted:
    """The Dask engine (see module doc). `keep_train_rows`: hand back a sample of the training
    rows (Fitted.train_rows), which cross-validation fits the reference on."""
    from training.engines import dask_partitions as de
    from training.featurize import TokenRows
    from training.model import predict, target_columns
    from training.partial import both_known
    from training.stages import StageClock

    clock = StageClock(timings)
    clock.begin("cluster")
    with (
        de.cluster(config.engine.dask_scheduler, workers=config.engine.dask_workers) as client,
        de.scratch(config) as folder,
    ):
        workers = len(client.scheduler_info()["workers"])
        console.print(f"[bold]dask[/]: {workers} workers at {client.scheduler.address}")
        clock.begin("read_validate")
        with clock.span("load"):
            valid, repeated, report, responses = _read_and_check(config, folder)

        with clock.span("features"):  # merging and featurizing
            clock.begin("merge")  # one pass: the repeated rows, and the projection sample's raw embeddings
            plan, prepared, pca_rows = _plan_and_rows(client, config, valid, repeated, report, folder)
            print_logs(console, report)
            fraction = sample_fraction(config.split.max_train_rows, report["rows"] * training_share(config))
            note_training_sample(console, report, config, fraction)
            clock.begin("featurize")
            train, val, test, train_sample, lexical_sample = _features(
                client, config, plan, prepared, report, target_columns(config.model.objective), keep_train_rows
            )
            model = None
            if lexical_sample is not None:
                with de.stage("features"):  # it comes as its partitions are featurized
                    [rows] = de.collected(client, lexical_sample)
                del lexical_sample
                clock.begin("lexical")  # the regressions' fit, here; the margins are computed on the workers
                with console.status("lexical evidence: 1 logistic regression per outcome"):
                    plan, model = _lexical(client, config, plan, rows, report, console)
                del rows
                clock.begin("featurize")
            # The samples here (pandas), the validation and test ones with their lexical margins computed on the
            # workers that hold them. One sample at a time: its partitions and their concatenation are here
            # together, and both samples' at once were most of the client's peak (~1 GB at 200,000 rows each).
            if model is not None:
                val, test = (
                    f.map_partitions(de.margin_partition, model, meta=de.margin_meta(f._meta)) for f in (val, test)
                )
            with de.stage("features"):
                [val], [test] = de.collected(client, val), de.collected(client, test)
                train_sample = de.collected(client, train_sample)[0] if train_sample is not None else None
        names = plan.spec.feature_names
        served = list(plan.spec.served_names)  # the trees' columns, then a blend's margins
        console.print(
            f"[bold]features[/]: {len(names)} columns; projection fitted on {pca_rows} "
            f"training rows; samples: {len(val)} validation, {len(test)} test rows"
            + (f", {len(train_sample)} training rows" if train_sample is not None else "")
        )

        clock.begin("fit")
        status = "LightGBM on the cluster (lightgbm.dask, early stopping on the validation sample)"
        with clock.span("lightgbm"), console.status(status):  # the boosters alone; the "fit" stage adds scoring
            heads = _fit_heads(client, config, train, val, names, served)
    splits, embeddings, tokens, raw = {}, {}, {}, {}
    for name, frame in (("val", val), ("test", test)):
        frame = frame[both_known(frame)]  # thresholds and figures compare both outcomes of a request
        x = frame[served].to_numpy()
        raw[name] = {h.name: h.raw(x) for h in heads}  # the trees run once per split
        scores, probabilities = predict(config.model.objective, heads, x, raw[name])
        splits[name] = Rows.from_frame(frame, n_tokens=frame["n_tokens"], scores=scores, probabilities=probabilities)
        if config.lexical.mode == "blend":  # as the local engine hands them back (cross-validation's blends)
            raw[name][MARGINS_OUTPUT] = x[:, len(names) :]
        embeddings[name] = x[:, len(names) - plan.spec.embedding_dim : len(names)]
        ids = frame[de.TOKEN_IDS].tolist()
        tokens[name] = None if ids and ids[0] is None else TokenRows.from_rows(ids)
    train_rows = (
        None
        if train_sample is None
        else Rows.from_frame(
            train_sample, n_tokens=train_sample["n_tokens"].to_numpy(), scores=np.zeros(len(train_sample))
        )
    )
    notes = {
        "dask": {
            "workers": workers,
            "partitions": report["units"],
            "pca_rows": pca_rows,
            "val_rows": len(val),
            "test_rows": len(test),
            **({"train_sample_rows": len(train_rows)} if train_rows is not None else {}),
        }
    }
    del frame, val, test, ids, train_sample  # the token arrays were copied into `tokens`
    de.return_freed_memory()
    clock.end()
    tokens = tokens if all(t is not None for t in tokens.values()) else None
    fitted = (report, plan, config.model.objective, heads, splits, embeddings, responses)
    return Fitted(*fitted, notes=notes, tokens=tokens, train_rows=train_rows, raw=raw)
