"""`make scale`: wall time, rows/s and peak memory of `make train` with each engine on
simulated (synthetic) logs of growing size, stage by stage, each stage next to its floor
measured in the same run; the table of docs/scale-out.md.

Each run is a fresh `python -m pipelines.train` process with its own MLflow store and bundle
folder under `--work` (the distilled static table stays cached), profiled from outside by
training.profiling: its whole process tree's memory and CPU sampled every 0.2 s and matched
with the stages the run logs (training.stages). The floors come from training.floors. This
command parses the options, runs the sizes and engines, and reports.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from evaluation.figures import SplitSummary

STAGES = (
    "cluster",
    "read_validate",
    "merge",
    "featurize",
    "fit",
    "acceptance",
    "thresholds",
    "familiarity",
    "export_parity",
    "mlflow",
)


def simulated(folder: Path, rows: int, rows_per_shard: int) -> Path:
    """The simulated logs for `rows` (seed 0), written once."""
    from data.simulator import MANIFEST_NAME, write_shards

    manifest = folder / MANIFEST_NAME
    if not (manifest.exists() and json.loads(manifest.read_text()).get("n") == rows):
        write_shards(folder, rows, rows_per_shard=rows_per_shard, seed=0)
    return folder


def _mlflow_metrics(db: Path) -> dict[str, float]:
    import sqlite3

    if not db.exists():
        return {}
    with sqlite3.connect(str(db)) as conn:
        return dict(conn.execute("SELECT key, value FROM metrics"))


def train_once(
    engine: str, rows: int, logs: Path, work: Path, *, time_limit: float | None = None, options: tuple[str, ...] = ()
) -> dict:
    """One `make train` on simulated logs: wall time, CPU, peak memory, rows/s, test APGR, what
    the bundle carries (its lexical evidence and the prompts its regressions read), and per
    stage: wall time, peaks and floor. `options`: KEY=VALUE training options on top of the
    defaults (`--set`)."""
    from training.config import TrainConfig
    from training.floors import floors_after, floors_before, stage_floors
    from training.profiling import profile_training
    from training.sampling import training_share

    run_dir = work / "runs" / f"{engine}-n{rows}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    (work / "cache" / "embeddings.sqlite").unlink(missing_ok=True)  # cold: nothing cached from an earlier run
    share = training_share(TrainConfig())  # the run trains with the defaults but for the options below
    per_row = floors_before(logs, work, train_share=share)
    command = [
        sys.executable,
        "-m",
        "pipelines.train",
        "--engine",
        engine,
        "--data",
        str(logs),
        "--bundle",
        str(run_dir / "bundle"),
        "--set",
        f"cache_dir={work / 'cache'}",
        "--set",
        f"reports_dir={run_dir / 'reports'}",
        "--set",
        "split.cv_folds=0",  # one fit per run in both engines (the Dask engine does not cross-fit)
        "--set",
        f"mlflow.tracking_uri=sqlite:///{(run_dir / 'mlflow.db').resolve()}",
        "--set",
        f"mlflow.artifact_root={run_dir / 'artifacts'}",
        *(part for option in options for part in ("--set", option)),
    ]
    load_before = os.getloadavg()[0]
    profile = profile_training(command, run_dir / "train.log", run_dir / "stages.jsonl", time_limit=time_limit)
    figures = profile.figures
    row = {
        "rows": rows,
        "engine": engine,
        **figures,
        "rows_per_s": rows / figures["wall_s"],
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cores": os.cpu_count(),
        **({"options": list(options)} if options else {}),
    }
    if profile.unfinished is not None:
        row.update(rows_per_s=None, unfinished=profile.unfinished)
    manifest = run_dir / "bundle" / "manifest.json"
    metrics = _mlflow_metrics(run_dir / "mlflow.db")
    after, train_rows, featurized = {}, round(rows * share), rows
    if figures["exit_code"] == 0 and manifest.exists():
        data = json.loads(manifest.read_text())
        test = SplitSummary.from_dict(data["metrics"]["test"])
        row.update(test_apgr=test.policies["learned"].apgr, rule_apgr=test.policies["rule_table"].apgr)
        # The bundle's lexical evidence (absent from the manifest: none) and the training
        # prompts its regressions read (all of them below lexical_sample_rows).
        lexical = data["feature_spec"].get("lexical", "none")
        row.update(lexical=lexical)
        if lexical != "none":
            row.update(lexical_rows=data["data"].get("lexical_sample", {}).get("rows"))
        after = floors_after(run_dir / "bundle", logs, work)
        # What the run featurized and fit: its training sample (max_train_rows) and its
        # validation and test rows (the Dask engine's are samples: eval_sample_rows).
        train_rows = data["data"].get("training_sample", {}).get("rows", train_rows)
        featurized = train_rows + SplitSummary.from_dict(data["metrics"]["val"]).population.rows + test.population.rows
        row.update(featurized_rows=featurized, fitted_rows=train_rows)
    trees = int(sum(v for k, v in metrics.items() if k.startswith("trees.")))
    floors = stage_floors(
        per_row, after, rows=featurized, rows_read=rows, train_rows=train_rows, trees=trees, cores=os.cpu_count() or 1
    )
    for name, stage in profile.stages.items():
        stage["floor_s"] = floors.get(name)
    row.update(stages=profile.stages, floors_per_row=per_row, trees=trees)
    return row


def merged_with_earlier(results: list[dict], out: Path) -> list[dict]:
    """Earlier results for other (rows, engine) pairs stay: sizes can be measured one at a time."""
    measured = {(r["rows"], r["engine"]) for r in results}
    earlier = json.loads(out.read_text())["results"] if out.exists() else []
    return sorted(
        [r for r in earlier if (r["rows"], r["engine"]) not in measured] + results,
        key=lambda r: (r["rows"], r["engine"] != "local"),
    )


def _mb(value) -> str:
    return f"{value:,.0f} MB" if value is not None else ""


def report(results: list[dict], console) -> None:
    """The table, each run's stages next to their floors, and how wall time grows with rows."""
    from rich.table import Table

    table = Table(title="make train on simulated logs (synthetic), static tier")
    for column in (
        "rows",
        "engine",
        "wall",
        "CPU",
        "rows/s",
        "peak RSS, all processes",
        "largest process",
        "test APGR",
        "lexical",
        "load avg",
    ):
        table.add_column(column, justify="right")
    for r in results:
        if "skipped" in r:
            table.add_row(f"{r['rows']:,}", r["engine"], "skipped", "", "", "", "", "", "", "")
            continue
        state = "" if r["exit_code"] == 0 else (" (stopped)" if r.get("timed_out") else " (failed)")
        table.add_row(
            f"{r['rows']:,}",
            r["engine"],
            f"{r['wall_s']:.0f} s{state}",
            f"{r.get('cpu_s', 0):.0f} s",
            f"{r['rows_per_s']:,.0f}" if r.get("rows_per_s") else "",
            _mb(r["peak_rss_total_mb"]),
            _mb(r["peak_rss_largest_mb"]),
            f"{r['test_apgr']:.3f}" if "test_apgr" in r else "",
            r.get("lexical", "") + (f" ({r['lexical_rows']:,})" if r.get("lexical_rows") else ""),
            "-".join(f"{v:.1f}" for v in r.get("load_average", [])),
        )
    console.print(table)
    for r in results:
        if r.get("stages"):
            console.print(stage_table(r))
    for engine in ("local", "dask"):
        done = [r for r in results if r["engine"] == engine and r.get("exit_code") == 0]
        if len(done) >= 2:
            a, b = done[0], done[-1]
            console.print(
                f"{engine}, from {a['rows']:,} to {b['rows']:,} rows: wall time grows as "
                f"rows^{growth(a, b, 'wall_s'):.2f}, the largest process's peak as "
                f"rows^{growth(a, b, 'peak_rss_largest_mb'):.2f}, all processes' as "
                f"rows^{growth(a, b, 'peak_rss_total_mb'):.2f}"
            )


def growth(a: dict, b: dict, key: str) -> float:
    """The exponent k of `key` growing as rows^k from run `a` to run `b` (1: as fast as the rows)."""
    return math.log(b[key] / a[key]) / math.log(b["rows"] / a["rows"])


def stage_table(r: dict):
    from rich.table import Table

    table = Table(title=f"{r['engine']}, {r['rows']:,} rows: stages")
    for column in ("stage", "wall", "floor", "peak RSS, all processes", "largest process", "this process"):
        table.add_column(column, justify="right")
    for name in sorted(r["stages"], key=lambda n: STAGES.index(n) if n in STAGES else len(STAGES)):
        s = r["stages"][name]
        floor = f"{s['floor_s']:.1f} s" if s.get("floor_s") is not None else ""
        table.add_row(
            name,
            f"{s['wall_s']:.1f} s",
            floor,
            _mb(s["peak_rss_total_mb"]),
            _mb(s["peak_rss_largest_mb"]),
            _mb(s["peak_rss_main_mb"]),
        )
    if r.get("unfinished"):
        u = r["unfinished"]
        table.add_row(
            "(stopped, running)",
            f"{u['wall_s']:.1f} s",
            "",
            _mb(u["peak_rss_total_mb"]),
            _mb(u["peak_rss_largest_mb"]),
            "",
        )
    return table


def main(
    rows: Annotated[str, typer.Option(help="comma-separated row counts")] = "1e4,1e5,1e6",
    engines: Annotated[str, typer.Option(help="comma-separated: local,dask")] = "local,dask",
    work: Annotated[Path, typer.Option(help="simulated logs, bundles, MLflow store and logs go here")] = Path(
        "data/cache/scale"
    ),
    rows_per_shard: Annotated[int, typer.Option(help="rows per Parquet shard (= per Dask partition)")] = 25_000,
    local_max_rows: Annotated[str, typer.Option(help="skip the local engine above this many rows")] = "1e6",
    time_limit: Annotated[float, typer.Option(help="stop a run after this many seconds (0: never)")] = 0,
    out: Annotated[Path, typer.Option(help="results file")] = Path("bench/scale.json"),
    set_: Annotated[
        Optional[list[str]], typer.Option("--set", help="a training option for every run, KEY=VALUE (repeatable)")
    ] = None,
) -> None:
    """Train with each engine at each size and report time, throughput and peak memory, per stage."""
    from rich.console import Console

    from data.simulator import parse_count

    console = Console()
    try:
        counts = [parse_count(r.strip()) for r in rows.split(",")]
        local_cap = parse_count(local_max_rows)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--rows") from None
    results = []
    for n in counts:
        logs = simulated(work / "logs" / f"n{n}", n, rows_per_shard)
        for engine in (e.strip() for e in engines.split(",")):
            if engine == "local" and n > local_cap:
                results.append({"rows": n, "engine": engine, "skipped": f"above --local-max-rows {local_cap}"})
                continue
            console.print(f"{engine} engine, {n:,} rows ...")
            results.append(train_once(engine, n, logs, work, time_limit=time_limit or None, options=tuple(set_ or ())))
            console.print(stage_table(results[-1]))
    results = merged_with_earlier(results, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"synthetic": True, "rows_per_shard": rows_per_shard, "results": results}, indent=2))
    report(results, console)
    console.print(f"results: {out}")


if __name__ == "__main__":
    typer.run(main)
