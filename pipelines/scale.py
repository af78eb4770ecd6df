"""`make scale`: wall time, rows/s and peak memory of `make train` with each engine on
simulated (synthetic) logs of growing size; the README's scale-out table.

Each run is a fresh `python -m pipelines.train` process with a cold embedding cache (the
distilled static table stays cached), its own MLflow store and bundle folder under
`--work`. Memory is sampled every 0.2 s over the whole process tree (the Dask client
plus its LocalCluster's scheduler and worker processes): the figures are the peak of
the tree's summed RSS and the peak of the largest single process.
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer



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


def measure(command: list[str], log_path: Path, *, interval: float = 0.2) -> dict:
    """Run `command`, sampling its process tree's memory; its output goes to `log_path`."""
    import psutil

    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        process = psutil.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        peak_sum = peak_one = 0
        while process.poll() is None:
            total, largest = tree_rss(process)
            peak_sum, peak_one = max(peak_sum, total), max(peak_one, largest)
            time.sleep(interval)
    return {"exit_code": process.returncode, "wall_s": time.perf_counter() - start,
            "peak_rss_total_mb": peak_sum / 2**20, "peak_rss_largest_mb": peak_one / 2**20}


def simulated(folder: Path, rows: int, rows_per_shard: int) -> Path:
    """The simulated logs for `rows` (seed 0), written once."""
    from data.simulator import MANIFEST_NAME, write_shards

    manifest = folder / MANIFEST_NAME
    if not (manifest.exists() and json.loads(manifest.read_text()).get("n") == rows):
        write_shards(folder, rows, rows_per_shard=rows_per_shard, seed=0)
    return folder


def train_once(engine: str, rows: int, logs: Path, work: Path) -> dict:
    """One cold `make train` on simulated logs: wall time, peak memory, rows/s and test APGR."""
    run_dir = work / "runs" / f"{engine}-n{rows}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    (work / "cache" / "embeddings.sqlite").unlink(missing_ok=True)  # cold: every embedding computed
    command = [sys.executable, "-m", "pipelines.train", "--engine", engine, "--data", str(logs),
               "--bundle", str(run_dir / "bundle"), "--set", f"cache_dir={work / 'cache'}",
               "--set", f"reports_dir={run_dir / 'reports'}",
               "--set", f"tracking_uri=sqlite:///{(run_dir / 'mlflow.db').resolve()}",
               "--set", f"artifact_root={run_dir / 'artifacts'}"]
    figures = measure(command, run_dir / "train.log")
    row = {"rows": rows, "engine": engine, **figures, "rows_per_s": rows / figures["wall_s"]}
    manifest = run_dir / "bundle" / "manifest.json"
    if figures["exit_code"] == 0 and manifest.exists():
        test = json.loads(manifest.read_text())["metrics"]["test"]
        row.update(test_apgr=test["learned"]["apgr"], rule_apgr=test["rule_table"]["apgr"])
    return row


def merged_with_earlier(results: list[dict], out: Path) -> list[dict]:
    """Earlier results for other (rows, engine) pairs stay: sizes can be measured one at a time."""
    measured = {(r["rows"], r["engine"]) for r in results}
    earlier = json.loads(out.read_text())["results"] if out.exists() else []
    return sorted([r for r in earlier if (r["rows"], r["engine"]) not in measured] + results,
                  key=lambda r: (r["rows"], r["engine"] != "local"))


def report(results: list[dict], console) -> None:
    """The table, and how wall time grows with rows for each engine."""
    from rich.table import Table

    table = Table(title="make train on simulated logs (synthetic), static tier")
    for column in ("rows", "engine", "wall", "rows/s", "peak RSS, all processes", "largest process", "test APGR"):
        table.add_column(column, justify="right")
    for r in results:
        if "skipped" in r:
            table.add_row(f"{r['rows']:,}", r["engine"], "skipped", "", "", "", "")
            continue
        ok = r["exit_code"] == 0
        table.add_row(f"{r['rows']:,}", r["engine"], f"{r['wall_s']:.0f} s" + ("" if ok else " (failed)"),
                      f"{r['rows_per_s']:,.0f}", f"{r['peak_rss_total_mb']:,.0f} MB",
                      f"{r['peak_rss_largest_mb']:,.0f} MB",
                      f"{r['test_apgr']:.3f}" if "test_apgr" in r else "")
    console.print(table)
    for engine in ("local", "dask"):
        done = [r for r in results if r["engine"] == engine and r.get("exit_code") == 0]
        if len(done) >= 2:
            a, b = done[0], done[-1]
            slope = math.log(b["wall_s"] / a["wall_s"]) / math.log(b["rows"] / a["rows"])
            console.print(f"{engine}: wall time grows as rows^{slope:.2f} from {a['rows']:,} to {b['rows']:,} rows")


def main(
    rows: Annotated[str, typer.Option(help="comma-separated row counts")] = "1e4,1e5,1e6",
    engines: Annotated[str, typer.Option(help="comma-separated: local,dask")] = "local,dask",
    work: Annotated[Path, typer.Option(help="simulated logs, bundles, MLflow store and logs go here")] =
        Path("data/cache/scale"),
    rows_per_shard: Annotated[int, typer.Option(help="rows per Parquet shard (= per Dask partition)")] = 25_000,
    local_max_rows: Annotated[str, typer.Option(help="skip the local engine above this many rows")] = "1e6",
    out: Annotated[Path, typer.Option(help="results file")] = Path("bench/scale.json"),
) -> None:
    """Train with each engine at each size and report time, throughput and peak memory."""
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
            results.append(train_once(engine, n, logs, work))
            console.print(results[-1])
    results = merged_with_earlier(results, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"synthetic": True, "rows_per_shard": rows_per_shard, "results": results}, indent=2))
    report(results, console)
    console.print(f"results: {out}")


if __name__ == "__main__":
    typer.run(main)
