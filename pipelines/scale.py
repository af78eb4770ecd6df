"""`make scale`: wall time, rows/s and peak memory of `make train` with each engine on
simulated (synthetic) logs of growing size, stage by stage, each stage next to its floor
measured in the same run; the table of docs/scale-out.md.

Each run is a fresh `python -m pipelines.train` process with its own MLflow store and bundle
folder under `--work` (the distilled static table stays cached). Memory is sampled every
0.2 s over the whole process tree (the Dask client with its LocalCluster's scheduler and
workers, or the local engine with its featurizing processes): the figures are the peak of
the tree's summed RSS and the peak of the largest single process. The run writes when each
stage starts and ends (training.stages, ROUTER_STAGE_LOG), so each stage gets its own wall
time and peaks.

Floors: right before each run, the work of the main stages is measured alone, on a fixed
sample of the run's logs, in one process: reading and validating one shard
(data.logs.read_unit), finding repeated prompts (pandas.factorize), featurizing 4,096
prompts through the training featurizer (training.featurize.ChunkFeaturizer), and LightGBM
building trees with the run's parameters on random features. After the run, its bundle
scoring the parity rows through the SDK, and registering it in a fresh MLflow store. Scaled
to the run's rows (per row, per row and tree) and divided by the cores where the work is
split by rows, they say what the stage would cost at the speed of its parts.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

STAGES = ("cluster", "read_validate", "merge", "featurize", "fit", "acceptance", "thresholds", "familiarity",
          "export_parity", "mlflow")
FLOOR_SAMPLE_ROWS = 4096


def tree_rss(process) -> tuple[int, int]:
    """(sum, max) RSS in bytes over a process and all its descendants."""
    import psutil

    sizes = []
    for p in [process, *process.children(recursive=True)]:
        try:
            sizes.append(p.memory_info().rss)
        except psutil.Error:  # exited between listing and reading
            pass
    return sum(sizes), max(sizes, default=0)


def _tree_cpu(process, seen: dict[int, float]) -> None:
    """Record each live process's CPU seconds so far (a process that has exited keeps its last)."""
    import psutil

    for p in [process, *process.children(recursive=True)]:
        try:
            times = p.cpu_times()
            seen[p.pid] = times.user + times.system
        except psutil.Error:
            pass


def measure(command: list[str], log_path: Path, *, interval: float = 0.2, env: dict | None = None,
            time_limit: float | None = None) -> dict:
    """Run `command`, sampling its process tree's memory and CPU; its output goes to `log_path`.
    Past `time_limit` seconds the tree is stopped and the figures say so."""
    import psutil

    start, samples, cpu = time.perf_counter(), [], {}
    timed_out = False
    with open(log_path, "w", encoding="utf-8") as log:
        process = psutil.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        while process.poll() is None:
            total, largest = tree_rss(process)
            samples.append((time.time(), total / 2**20, largest / 2**20))
            _tree_cpu(process, cpu)
            if time_limit is not None and time.perf_counter() - start > time_limit:
                timed_out = True
                _stop_tree(process)
                break
            time.sleep(interval)
    return {"exit_code": process.returncode, "wall_s": time.perf_counter() - start, "timed_out": timed_out,
            "cpu_s": sum(cpu.values()),
            "peak_rss_total_mb": max((s[1] for s in samples), default=0.0),
            "peak_rss_largest_mb": max((s[2] for s in samples), default=0.0), "samples": samples}


def _stop_tree(process) -> None:
    import psutil

    tree = [process, *process.children(recursive=True)]
    for p in tree:
        try:
            p.terminate()
        except psutil.Error:
            pass
    psutil.wait_procs(tree, timeout=15)
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass
    process.wait()


def stage_figures(stages: list[dict], samples: list[tuple[float, float, float]]) -> dict[str, dict]:
    """Per stage (a stage logged twice adds up): wall time, this process's peak (VmHWM), and
    the peaks of the tree's summed RSS and of its largest process among the samples taken
    while it ran (the nearest sample when it was shorter than the sampling interval)."""
    out: dict[str, dict] = {}
    for stage in stages:
        inside = [s for s in samples if stage["start"] <= s[0] <= stage["end"]]
        if not inside and samples:
            inside = [min(samples, key=lambda s: abs(s[0] - (stage["start"] + stage["end"]) / 2))]
        figures = out.setdefault(stage["stage"], {"wall_s": 0.0, "peak_rss_main_mb": 0.0,
                                                  "peak_rss_total_mb": 0.0, "peak_rss_largest_mb": 0.0})
        figures["wall_s"] += stage["wall_s"]
        figures["peak_rss_main_mb"] = max(figures["peak_rss_main_mb"], stage["peak_rss_mb"])
        figures["peak_rss_total_mb"] = max([figures["peak_rss_total_mb"], *(s[1] for s in inside)])
        figures["peak_rss_largest_mb"] = max([figures["peak_rss_largest_mb"], *(s[2] for s in inside)])
    return out


def _unfinished(logged: list[dict], samples: list[tuple[float, float, float]]) -> dict:
    """A stopped run: how long the stage that was running had run, and the memory peaks since
    the last stage ended (that stage is not in the stage log: it never ended)."""
    since = max((s["end"] for s in logged), default=samples[0][0] if samples else 0.0)
    after = [s for s in samples if s[0] >= since] or samples[-1:]
    return {"after_stage": logged[-1]["stage"] if logged else None,
            "wall_s": (samples[-1][0] - since) if samples else 0.0,
            "peak_rss_total_mb": max((s[1] for s in after), default=0.0),
            "peak_rss_largest_mb": max((s[2] for s in after), default=0.0)}


def simulated(folder: Path, rows: int, rows_per_shard: int) -> Path:
    """The simulated logs for `rows` (seed 0), written once."""
    from data.simulator import MANIFEST_NAME, write_shards

    manifest = folder / MANIFEST_NAME
    if not (manifest.exists() and json.loads(manifest.read_text()).get("n") == rows):
        write_shards(folder, rows, rows_per_shard=rows_per_shard, seed=0)
    return folder


# --- floors: each main stage's work alone, on a fixed sample, in this process -----------------

def _best_of(runs: int, work) -> float:
    """The fastest of `runs` timed calls, after one untimed call (imports, caches)."""
    work()
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def floors_before(logs: Path, work: Path) -> dict[str, float]:
    """Seconds per row (per row and tree for LightGBM) of the main stages' work alone."""
    import numpy as np
    import pandas as pd

    from data.logs import read_unit
    from training.featurize import ChunkFeaturizer, masked_mean, raw_stage

    shard = sorted(logs.glob("*.parquet"))[0]
    read_s = _best_of(2, lambda: read_unit(shard))
    frame = read_unit(shard).frame()
    prompts = frame["prompt"].astype(object).to_numpy()
    factorize_s = _best_of(3, lambda: pd.factorize(prompts))
    sample = frame.head(FLOOR_SAMPLE_ROWS)
    texts, precisions = sample["prompt"].astype(object).tolist(), sample["precision"].tolist()
    _, raw = raw_stage("static", embedding_dim=32, max_tokens=None, max_chars=2048, cache_dir=work / "cache")
    featurizer = ChunkFeaturizer(raw)
    folded = np.random.default_rng(0).normal(size=(len(raw.table), 32)).astype(np.float32).astype(np.float64)
    train = np.random.default_rng(0).random(len(texts)) < 0.7

    def featurize():
        _, tokens = featurizer.prepare(texts, precisions)
        featurizer.embed(tokens.subset(train))
        masked_mean(tokens, folded)

    featurize_s = _best_of(3, featurize)
    return {"read_validate_s_per_row": read_s / len(frame), "merge_s_per_row": factorize_s / len(frame),
            "featurize_s_per_row": featurize_s / len(texts), "fit_s_per_row_tree": _lightgbm_per_row_tree()}


def _lightgbm_per_row_tree(rows: int = 30_000, columns: int = 51, trees: int = 30) -> float:
    """LightGBM with the training parameters (training.model.lgbm_params) on random features."""
    import lightgbm as lgb
    import numpy as np

    from training.model import lgbm_params

    rng = np.random.default_rng(0)
    x = rng.random((rows, columns), dtype=np.float32)
    y = 1 / (1 + np.exp(-(x[:, 0] - x[:, 1] + rng.normal(0, 0.5, rows))))
    data = lgb.Dataset(x, label=y, free_raw_data=False).construct()
    params = lgbm_params({}, seed=0, objective="cross_entropy")
    return _best_of(2, lambda: lgb.train(params, data, num_boost_round=trees)) / (rows * trees)


def floors_after(bundle: Path, logs: Path, work: Path, parity_rows: int = 5000) -> dict[str, float]:
    """Seconds of the run's parity check and MLflow registration done alone, with its bundle."""
    import pandas as pd

    from serving.bundle import read_bundle
    from serving.scorer import Scorer
    from training.tracking import register_bundle, tracked_run

    shards = sorted(logs.glob("*.parquet"))
    frame = pd.read_parquet(shards[-1], columns=["prompt", "precision"]).head(parity_rows)
    prompts = frame["prompt"].tolist()
    precisions = [p if isinstance(p, str) else None for p in frame["precision"]]
    scorer = Scorer(read_bundle(bundle))
    parity_s = _best_of(2, lambda: scorer.scores(prompts, precisions))
    # A new store each time, as each run has: MLflow keeps a connection per store address in the process.
    store = work / f"floor-mlflow-{time.time_ns()}"
    store.mkdir(parents=True)

    def register():
        with tracked_run(tracking_uri=f"sqlite:///{(store / 'mlflow.db').resolve()}",
                         artifact_root=str(store / "artifacts"), experiment="floor") as run:
            register_bundle(bundle, model_name="floor", run_id=run.info.run_id)

    start = time.perf_counter()
    register()  # once: a second registration in the same store would not create it again
    mlflow_s = time.perf_counter() - start
    shutil.rmtree(store, ignore_errors=True)
    return {"export_parity": parity_s, "mlflow": mlflow_s}


def stage_floors(per_row: dict, after: dict, *, rows: int, rows_read: int, train_rows: int, trees: int,
                 cores: int) -> dict[str, float]:
    """Each stage's floor in seconds for this run (module doc); stages without one are absent.
    `rows` are the rows featurized, `train_rows` those the boosters fit."""
    floors = {"read_validate": per_row["read_validate_s_per_row"] * rows_read / cores,
              "merge": per_row["merge_s_per_row"] * rows_read,
              "featurize": per_row["featurize_s_per_row"] * rows / cores}
    if trees:
        floors["fit"] = per_row["fit_s_per_row_tree"] * train_rows * trees
    return {**floors, **after}


def _mlflow_metrics(db: Path) -> dict[str, float]:
    import sqlite3

    if not db.exists():
        return {}
    with sqlite3.connect(str(db)) as conn:
        return dict(conn.execute("SELECT key, value FROM metrics"))


def _read_stages(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def train_once(engine: str, rows: int, logs: Path, work: Path, *, time_limit: float | None = None) -> dict:
    """One `make train` on simulated logs: wall time, CPU, peak memory, rows/s, test APGR, and
    per stage: wall time, peaks and floor."""
    run_dir = work / "runs" / f"{engine}-n{rows}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    (work / "cache" / "embeddings.sqlite").unlink(missing_ok=True)  # cold: nothing cached from an earlier run
    per_row = floors_before(logs, work)
    command = [sys.executable, "-m", "pipelines.train", "--engine", engine, "--data", str(logs),
               "--bundle", str(run_dir / "bundle"), "--set", f"cache_dir={work / 'cache'}",
               "--set", f"reports_dir={run_dir / 'reports'}",
               "--set", "cv_folds=0",  # one fit per run in both engines (the Dask engine does not cross-fit)
               "--set", f"tracking_uri=sqlite:///{(run_dir / 'mlflow.db').resolve()}",
               "--set", f"artifact_root={run_dir / 'artifacts'}"]
    env = {**os.environ, "ROUTER_STAGE_LOG": str(run_dir / "stages.jsonl")}
    load_before = os.getloadavg()[0]
    figures = measure(command, run_dir / "train.log", env=env, time_limit=time_limit)
    samples = figures.pop("samples")
    row = {"rows": rows, "engine": engine, **figures, "rows_per_s": rows / figures["wall_s"],
           "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)], "cores": os.cpu_count()}
    logged = _read_stages(run_dir / "stages.jsonl")
    stages = stage_figures(logged, samples)
    if figures["timed_out"]:
        row.update(rows_per_s=None, unfinished=_unfinished(logged, samples))
    manifest = run_dir / "bundle" / "manifest.json"
    metrics = _mlflow_metrics(run_dir / "mlflow.db")
    after, train_rows, featurized = {}, int(rows * 0.7), rows
    if figures["exit_code"] == 0 and manifest.exists():
        data = json.loads(manifest.read_text())
        test = data["metrics"]["test"]
        row.update(test_apgr=test["learned"]["apgr"], rule_apgr=test["rule_table"]["apgr"])
        after = floors_after(run_dir / "bundle", logs, work)
        # What the run featurized and fit: its training sample (max_train_rows) and its
        # validation and test rows (the Dask engine's are samples: eval_sample_rows).
        train_rows = data["data"].get("training_sample", {}).get("rows", train_rows)
        featurized = train_rows + data["metrics"]["val"]["rows"] + test["rows"]
        row.update(featurized_rows=featurized, fitted_rows=train_rows)
    trees = int(sum(v for k, v in metrics.items() if k.startswith("trees.")))
    floors = stage_floors(per_row, after, rows=featurized, rows_read=rows, train_rows=train_rows, trees=trees,
                          cores=os.cpu_count() or 1)
    for name, stage in stages.items():
        stage["floor_s"] = floors.get(name)
    row.update(stages=stages, floors_per_row=per_row, trees=trees)
    return row


def merged_with_earlier(results: list[dict], out: Path) -> list[dict]:
    """Earlier results for other (rows, engine) pairs stay: sizes can be measured one at a time."""
    measured = {(r["rows"], r["engine"]) for r in results}
    earlier = json.loads(out.read_text())["results"] if out.exists() else []
    return sorted([r for r in earlier if (r["rows"], r["engine"]) not in measured] + results,
                  key=lambda r: (r["rows"], r["engine"] != "local"))


def _mb(value) -> str:
    return f"{value:,.0f} MB" if value is not None else ""


def report(results: list[dict], console) -> None:
    """The table, each run's stages next to their floors, and how wall time grows with rows."""
    from rich.table import Table

    table = Table(title="make train on simulated logs (synthetic), static tier")
    for column in ("rows", "engine", "wall", "CPU", "rows/s", "peak RSS, all processes", "largest process",
                   "test APGR", "load avg"):
        table.add_column(column, justify="right")
    for r in results:
        if "skipped" in r:
            table.add_row(f"{r['rows']:,}", r["engine"], "skipped", "", "", "", "", "", "")
            continue
        state = "" if r["exit_code"] == 0 else (" (stopped)" if r.get("timed_out") else " (failed)")
        table.add_row(f"{r['rows']:,}", r["engine"], f"{r['wall_s']:.0f} s{state}", f"{r.get('cpu_s', 0):.0f} s",
                      f"{r['rows_per_s']:,.0f}" if r.get("rows_per_s") else "", _mb(r["peak_rss_total_mb"]),
                      _mb(r["peak_rss_largest_mb"]),
                      f"{r['test_apgr']:.3f}" if "test_apgr" in r else "",
                      "-".join(f"{v:.1f}" for v in r.get("load_average", [])))
    console.print(table)
    for r in results:
        if r.get("stages"):
            console.print(stage_table(r))
    for engine in ("local", "dask"):
        done = [r for r in results if r["engine"] == engine and r.get("exit_code") == 0]
        if len(done) >= 2:
            a, b = done[0], done[-1]
            slope = math.log(b["wall_s"] / a["wall_s"]) / math.log(b["rows"] / a["rows"])
            console.print(f"{engine}: wall time grows as rows^{slope:.2f} from {a['rows']:,} to {b['rows']:,} rows")


def stage_table(r: dict):
    from rich.table import Table

    table = Table(title=f"{r['engine']}, {r['rows']:,} rows: stages")
    for column in ("stage", "wall", "floor", "peak RSS, all processes", "largest process", "this process"):
        table.add_column(column, justify="right")
    for name in sorted(r["stages"], key=lambda n: STAGES.index(n) if n in STAGES else len(STAGES)):
        s = r["stages"][name]
        floor = f"{s['floor_s']:.1f} s" if s.get("floor_s") is not None else ""
        table.add_row(name, f"{s['wall_s']:.1f} s", floor, _mb(s["peak_rss_total_mb"]),
                      _mb(s["peak_rss_largest_mb"]), _mb(s["peak_rss_main_mb"]))
    if r.get("unfinished"):
        u = r["unfinished"]
        table.add_row("(stopped, running)", f"{u['wall_s']:.1f} s", "", _mb(u["peak_rss_total_mb"]),
                      _mb(u["peak_rss_largest_mb"]), "")
    return table


def main(
    rows: Annotated[str, typer.Option(help="comma-separated row counts")] = "1e4,1e5,1e6",
    engines: Annotated[str, typer.Option(help="comma-separated: local,dask")] = "local,dask",
    work: Annotated[Path, typer.Option(help="simulated logs, bundles, MLflow store and logs go here")] =
        Path("data/cache/scale"),
    rows_per_shard: Annotated[int, typer.Option(help="rows per Parquet shard (= per Dask partition)")] = 25_000,
    local_max_rows: Annotated[str, typer.Option(help="skip the local engine above this many rows")] = "1e6",
    time_limit: Annotated[float, typer.Option(help="stop a run after this many seconds (0: never)")] = 0,
    out: Annotated[Path, typer.Option(help="results file")] = Path("bench/scale.json"),
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
            results.append(train_once(engine, n, logs, work, time_limit=time_limit or None))
            console.print(stage_table(results[-1]))
    results = merged_with_earlier(results, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"synthetic": True, "rows_per_shard": rows_per_shard, "results": results}, indent=2))
    report(results, console)
    console.print(f"results: {out}")


if __name__ == "__main__":
    typer.run(main)
