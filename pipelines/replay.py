"""`make replay OUT=dir`: learning from one-outcome traffic, measured on real logs.

The RouteLLM logs know both models' outcome for every prompt; production traffic knows one.
This command replays the logs as an app's traffic through the real SDK path and measures
what a router retrained from that traffic recovers:

1. **initial** (v0) is trained on a small share (`--v0-share`, 15%) of the non-test
   prompts, both outcomes known: the team's first labelled set.
2. The other prompts (the test split's too) go through `Router.execute` with v0, an OutcomeLog and
   `--explore-rate`. The edge and cloud callables answer with the logged outcome of that
   prompt ("good" or "bad"), and in the fallback zone a bad edge answer is caught by an
   accept check, as a real one would, and the cloud answers. `router.feedback` then
   reveals the outcome of the side that ran first, and nothing else.
3. **partial_feedback** (v1) is trained on v0's rows plus the outcome-log folder, read as
   is (data.sdk_logs), with the default estimator and head sharing (training.partial;
   `--head-sharing` to choose); with `--compare-ipw` also with inverse-propensity weights.
   **full_information** is trained with both outcomes of every non-test prompt: the ceiling.
4. v1 is evaluated off-policy on the outcome log's test-split requests, which no training
   fitted (evaluation.off_policy): IPS, SNIPS and DR estimates of its quality with 95%
   intervals, next to the true value, which the replay knows from the full logs.
5. `make promote` decides (training.promotion): v0 becomes the champion, then v1 is compared
   with it on the test prompts with both outcomes, and the alias moves or stays.
Every training keeps the same test split (prompt hash) with both outcomes. Written to OUT:
metrics.json, v1's bundle (OUT/bundle), the outcome log (OUT/outcomes).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer


def _rows(data: list[str]):
    from data.logs import load_logs
    from data.prepare import assign_splits, hash_uniform, merge_duplicates

    frame = merge_duplicates(load_logs(data).frame())
    frame["split"] = assign_splits(frame["prompt"], val_share=0.15, test_share=0.15)
    frame["u"] = hash_uniform(frame["prompt"], "replay-v0")
    return frame


def _write(frame, path: Path) -> Path:
    from data.schema import COLUMNS

    frame.reindex(columns=list(COLUMNS)).to_json(path, orient="records", lines=True, force_ascii=False)
    return path


def _train(work: Path, name: str, data: list[str], *, bundle: Path | None = None, **options):
    from rich.console import Console

    from training.config import TrainConfig
    from training.engines.base import train

    folder = work / "runs" / name
    # split.cv_folds=0: the single split, whose test rows the replayed traffic is scored on
    config = TrainConfig.of(
        {
            "data": data,
            "bundle": {"path": str(bundle or folder / "bundle")},
            "reports_dir": str(folder / "reports"),
            "mlflow": {"tracking_uri": f"sqlite:///{work}/mlflow.db", "artifact_root": str(work / "artifacts")},
            "split": {"cv_folds": 0},
        },
        options,
    )
    result = train(config, console=Console(quiet=True))
    test = result.summary("test")
    learned = test.policies["learned"]
    return result, {
        "test_rows": test.population.rows,
        "test_apgr": learned.apgr,
        "cpt50": learned.cpt50,
        "cloud_share": learned.cloud_share,
        "quality": learned.quality,
        "quality_with_fallback": learned.quality_with_fallback,
        "expected_cloud_calls": learned.expected_cloud_calls,
        "heads": result.metrics["heads"],
        "outcomes": result.manifest.data.get("outcomes") or {},
    }


def replay(frame, bundle: Path, folder: Path, *, explore_rate: float, seed: int, store_prompts: bool = True) -> dict:
    """Stream `frame`'s prompts through Router.execute with an outcome log (module doc, step 2);
    store_prompts=False logs token ids and scalar inputs instead of text (training.token_rows)."""
    from serving import Router
    from serving.monitoring._outcome_log import OutcomeLog

    log = OutcomeLog(folder, store_prompts=store_prompts)
    router = Router.load(bundle, strict=True, log=log, explore_rate=explore_rate, seed=seed)
    first = {"edge": 0, "cloud": 0}
    explored = caught = 0
    for prompt, precision, edge_q, cloud_q in zip(
        frame["prompt"], frame["precision"], frame["edge_quality"], frame["cloud_quality"]
    ):
        answers = {"edge": "good" if edge_q >= 0.5 else "bad", "cloud": "good" if cloud_q >= 0.5 else "bad"}
        run = router.execute(
            prompt,
            edge=lambda p, answer=answers["edge"]: answer,
            cloud=lambda p, answer=answers["cloud"]: answer,
            precision=precision,
            accept=lambda answer: answer == "good",
        )
        side = run.decision.target
        first[side] += 1
        explored += run.decision.reason.startswith("explored")
        caught += run.fallback_reason == "accept check rejected the edge answer"
        router.feedback(run.request_id, **{f"{side}_quality": float(edge_q if side == "edge" else cloud_q)})
    log.close()
    return {
        "requests": len(frame),
        "first_side": first,
        "explored": explored,
        "edge_failures_caught": caught,
        "written": log.written,
        "dropped": log.dropped,
    }


def promote_v1(work: Path, v0: Path, v1: Path, frame) -> dict:
    """`make promote` as a team would run it: the first bundle (v0) becomes champion, then v1
    is compared with it on the test prompts with both outcomes (no router trained on them;
    the outcome log itself holds v1's training prompts, which would flatter it)."""
    from training.promotion import promote

    test = _write(frame[frame["split"] == "test"], work / "test.jsonl")
    tracking = f"sqlite:///{work}/mlflow.db"
    first = promote(v0, logs=[], full_logs=[str(test)], tracking_uri=tracking)
    second = promote(v1, logs=[], full_logs=[str(test)], tracking_uri=tracking)
    return {
        "v0": {k: first[k] for k in ("promote", "why")},
        "v1": {k: second[k] for k in ("promote", "why", "challenger", "champion")},
    }


def off_policy_check(bundle: Path, outcomes: Path, truth) -> dict:
    """v1's off-policy estimates on the outcome log's test-split requests (v1 was fitted on the
    others: judging a router on the requests it learned from flatters it), next to its true
    quality and cloud share on the same prompts (from `truth`: both outcomes of every prompt)."""
    import numpy as np

    from data.logs import load_logs
    from data.prepare import assign_splits
    from evaluation.run import logged_traffic
    from serving import Router

    router = Router.load(bundle, strict=True)
    logged = load_logs([outcomes], max_reject_share=1.0).frame()
    logged = logged[assign_splits(logged["prompt"], val_share=0.15, test_share=0.15) == "test"]
    ope = logged_traffic(router, logged, batch_size=256)
    known = truth.set_index("prompt")
    targets = [d.target for d in router.route_batch(logged["prompt"].tolist(), logged["precision"].tolist())]
    both = known.loc[logged["prompt"]]
    true_quality = float(np.where(np.array(targets) == "cloud", both["cloud_quality"], both["edge_quality"]).mean())
    true_cloud = float(np.mean(np.array(targets) == "cloud"))
    for estimate in ope["quality"].values():
        low, high = estimate["ci95"]
        estimate["covers_truth"] = bool(low <= true_quality <= high)
    return {**ope, "truth": {"quality": true_quality, "cloud_share": true_cloud}}


def main(
    data: Annotated[list[str], typer.Option(help="logs with both outcomes (default: the training logs)")] = None,
    out: Annotated[Path, typer.Option(help="output folder")] = Path("reports/replay"),
    v0_share: float = 0.15,
    explore_rate: float = 0.1,
    seed: int = 0,
    head_sharing: Annotated[str, typer.Option(help="v1's heads: auto | separate | shared (training.partial)")] = "auto",
    compare_ipw: Annotated[bool, typer.Option(help="also train v1 with inverse-propensity weights")] = True,
    bench: Annotated[Path, typer.Option(help="copy of metrics.json for the repository")] = Path("bench/replay.json"),
) -> None:
    """Replay labelled logs as one-outcome traffic, retrain, and measure (module doc)."""
    import shutil

    from rich.console import Console

    from data.location import default_data_paths

    console = Console()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    frame = _rows(data or [str(p) for p in default_data_paths()])
    rest = frame[frame["split"] != "test"]
    # The test prompts are traffic too: no training fits them (they are in every router's test
    # split), so they are where v1 is judged off-policy without having learned from them.
    stream = frame[(frame["split"] == "test") | (frame["u"] >= v0_share)].sample(frac=1.0, random_state=seed)
    v0_data = _write(frame[(frame["split"] == "test") | (frame["u"] < v0_share)], out / "v0.jsonl")
    routers, started = {}, time.perf_counter()
    with console.status("initial (v0): trained on the first labelled share"):
        v0, routers["initial"] = _train(out, "initial", [str(v0_data)])
    with console.status(f"replaying {len(stream)} requests through Router.execute (explore_rate {explore_rate})"):
        traffic = replay(stream, v0.bundle, out / "outcomes", explore_rate=explore_rate, seed=seed)
    with console.status("partial_feedback (v1): v0's rows + the outcome log"):
        v1, routers["partial_feedback"] = _train(
            out,
            "partial_feedback",
            [str(v0_data), str(out / "outcomes")],
            bundle=out / "bundle",
            model={"head_sharing": head_sharing},
        )
    if compare_ipw:
        with console.status("partial_feedback with inverse-propensity weights"):
            _, routers["partial_feedback_ipw"] = _train(
                out,
                "partial_feedback_ipw",
                [str(v0_data), str(out / "outcomes")],
                model={"partial_estimator": "ipw", "head_sharing": head_sharing},
            )
    with console.status("full_information: both outcomes of every prompt (the ceiling)"):
        _, routers["full_information"] = _train(out, "full_information", [str(_write(frame, out / "all.jsonl"))])
    with console.status("off-policy estimates of v1 on the outcome log"):
        ope = off_policy_check(v1.bundle, out / "outcomes", frame)
    with console.status("make promote: v0 becomes champion, then v1 is judged against it"):
        promotion = promote_v1(out, v0.bundle, v1.bundle, frame)
    metrics = {
        **routers,
        "ope": ope,
        "promotion": promotion,
        "traffic": traffic,
        "v0_rows": int((rest["u"] < v0_share).sum()),
        "explore_rate": explore_rate,
        "seed": seed,
        "head_sharing": head_sharing,
        "wall_s": time.perf_counter() - started,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    bench.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "metrics.json", bench)
    print_summary(console, metrics)
    console.print(f"written to {out}/ (metrics.json, bundle/, outcomes/) and {bench}")


def print_summary(console, metrics: dict) -> None:
    from rich.table import Table

    table = Table(
        title=f"test split ({metrics['initial']['test_rows']} prompts); v0 on {metrics['v0_rows']} "
        f"labelled prompts, {metrics['traffic']['requests']} replayed, explore_rate "
        f"{metrics['explore_rate']}"
    )
    for column in ("router", "test APGR", "CPT(50%)", "cloud share", "quality", "with fallback"):
        table.add_column(column, justify="left" if column == "router" else "right")
    for name in ("initial", "partial_feedback", "partial_feedback_ipw", "full_information"):
        if name in metrics:
            r = metrics[name]
            table.add_row(
                name,
                f"{r['test_apgr']:.3f}",
                f"{r['cpt50']:.1%}",
                f"{r['cloud_share']:.1%}",
                f"{r['quality']:.3f}",
                f"{r['quality_with_fallback']:.3f}",
            )
    console.print(table)
    ope = metrics["ope"]
    for name, e in ope["quality"].items():
        console.print(
            f"v1 off-policy {name.upper()}: {e['estimate']:.3f} [{e['ci95'][0]:.3f}, {e['ci95'][1]:.3f}]"
            f" (true {ope['truth']['quality']:.3f}{'' if e['covers_truth'] else ', outside'})"
        )
    console.print(f"v1 cloud-first share on the logged prompts: {ope['cloud_share']['exact']:.1%} (exact)")
    if "promotion" in metrics:
        v1 = metrics["promotion"]["v1"]
        console.print(
            f"make promote: v0 {'became champion' if metrics['promotion']['v0']['promote'] else 'not promoted'}"
            f"; v1 {'promoted' if v1['promote'] else 'not promoted'}: {v1['why']}"
        )


if __name__ == "__main__":
    typer.run(main)
