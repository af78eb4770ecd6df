"""`make bench`: how fast the SDK routes, next to the floor of what it has to do.

One thread unless said. route() latency at ~16 / ~128 / ~512-token prompts (p50, p99),
each with its parts measured alone in the same run (tokenization, text statistics, the
model on prepared inputs, an onnxruntime call that does nothing); route_batch
throughput on 2 threads; import + Router.load time and RSS after load in a fresh
process. Results go to bench/results.json.
"""
from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

TEXT = ("The committee reviewed the quarterly report and noted that revenue grew in every region "
        "except the north, where supply problems delayed two large orders. Which of the following "
        "best explains the difference between gross margin and operating margin, and how would a "
        "one-time restructuring charge affect each of them? Show the calculation with 12.5% and 8%. ")


def prompt_of(tokenizer, n_tokens: int) -> str:
    """A realistic prompt of about n_tokens tokens (TEXT repeated and cut on a token boundary)."""
    text = TEXT * (n_tokens // 40 + 2)
    ids = tokenizer.encode(text, add_special_tokens=False).ids[:n_tokens]
    return tokenizer.decode(ids)


def timings_us(fn: Callable[[], object], *, repeat: int, warmup: int = 50) -> dict:
    for _ in range(warmup):
        fn()
    samples = np.empty(repeat)
    for i in range(repeat):
        start = time.perf_counter_ns()
        fn()
        samples[i] = (time.perf_counter_ns() - start) / 1000
    return {"p50_us": float(np.percentile(samples, 50)), "p99_us": float(np.percentile(samples, 99)),
            "mean_us": float(samples.mean()), "n": repeat}


def noop_session():
    """An onnxruntime session whose graph is one Identity: the fixed cost of any call."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "noop",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def model_call(scorer, prompt: str) -> Callable[[], object]:
    """The model alone on prepared inputs: model.onnx (fused) or encoder + router (staged)."""
    if scorer.spec.fused:
        ids, mask, scalars, _ = scorer.extractor.prepare([prompt], ["exact"])
        feeds = {"input_ids": ids, "attention_mask": mask, "scalars": scalars}
        output = "score" if scorer.calibrated_in_graph else "probabilities"
        return lambda: scorer.session.run([output], feeds)
    features = scorer.extractor.transform([prompt], ["exact"])
    ids, mask, _, heads = scorer.extractor.prepare([prompt], ["exact"])
    encoder = scorer.extractor.encoder
    return lambda: (encoder(ids, mask, heads), scorer.session.run(["probabilities"], {"features": features}))


def route_figures(router, prompt: str, repeat: int) -> dict:
    """route() and each of its parts alone, for one prompt."""
    from features.text_stats import statistics_matrix

    scorer = router._scorer
    extractor = scorer.extractor
    heads = extractor.heads([prompt])
    noop = noop_session()
    x = np.zeros((1, 1), dtype=np.float32)
    return {
        "tokens": len(extractor.tokenizer.ids(heads, add_special_tokens=False)[0]),
        "route": timings_us(lambda: router.route(prompt, precision="exact"), repeat=repeat),
        "floor": {
            "tokenize": timings_us(lambda: extractor.tokenizer.ids(heads, add_special_tokens=False), repeat=repeat),
            "text_statistics": timings_us(lambda: statistics_matrix([prompt], heads), repeat=repeat),
            "model": timings_us(model_call(scorer, prompt), repeat=repeat),
            "onnxruntime_noop": timings_us(lambda: noop.run(None, {"x": x}), repeat=repeat),
        },
    }


def batch_throughput(bundle: Path, prompts: list[str], *, threads: int, rounds: int = 5) -> dict:
    from serving import Router

    router = Router.load(bundle, strict=True, threads=threads)
    router.route_batch(prompts[:64])
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        router.route_batch(prompts)
        best = min(best, time.perf_counter() - start)
    return {"threads": threads, "batch": len(prompts), "prompts_per_s": len(prompts) / best}


LOAD_PROBE = """
import json, sys, time
start = time.perf_counter()
from serving import Router
imported = time.perf_counter()
router = Router.load(sys.argv[1], strict=True)
loaded = time.perf_counter()
router.route("warm up", precision="exact")
rss_kb = int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])
print(json.dumps({"import_s": imported - start, "load_s": loaded - imported,
                  "import_plus_load_s": loaded - start, "rss_mb_after_load": rss_kb / 1024}))
"""


def load_figures(bundle: Path, repeat: int = 5) -> dict:
    """Fresh-process import + load time (best of `repeat`) and RSS after load."""
    runs = [json.loads(subprocess.run([sys.executable, "-c", LOAD_PROBE, str(bundle)], capture_output=True,
                                      text=True, check=True).stdout) for _ in range(repeat)]
    best = min(runs, key=lambda r: r["import_plus_load_s"])
    return {**best, "rss_mb_after_load": max(r["rss_mb_after_load"] for r in runs)}


def run(bundle: Path, *, repeat: int = 2000, batch: int = 2048, load_runs: int = 5,
        lengths=(16, 128, 512)) -> dict:
    from serving import Router

    router = Router.load(bundle, strict=True, threads=1)
    tokenizer = router._scorer.extractor.tokenizer.full
    routes = {f"{n}_tokens": route_figures(router, prompt_of(tokenizer, n), repeat if n < 512 else repeat // 2)
              for n in lengths}
    huge = "x " * 500_000  # a 1 MB prompt
    routes["1MB_prompt"] = {"route": timings_us(lambda: router.route(huge), repeat=max(repeat // 40, 5), warmup=3)}
    batch_prompts = [prompt_of(tokenizer, 128)[: 400 + i % 97] + f" #{i}" for i in range(batch)]
    return {
        "bundle": str(bundle), "tier": router.manifest["feature_spec"]["tier"],
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version(),
                    "processor": platform.processor() or platform.machine()},
        "route": routes,
        "route_batch": [batch_throughput(bundle, batch_prompts, threads=t) for t in (1, 2)],
        "load": load_figures(bundle, repeat=load_runs),
    }


def print_report(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"route() on one thread ({results['tier']} tier), microseconds")
    for column in ("prompt", "tokens", "route p50", "route p99", "tokenize", "text stats", "model",
                   "ort no-op", "sum of parts", "route - parts"):
        table.add_column(column, justify="right")
    for name, fig in results["route"].items():
        if "floor" not in fig:
            table.add_row(name, "", f"{fig['route']['p50_us']:.0f}", f"{fig['route']['p99_us']:.0f}", *[""] * 6)
            continue
        floor = {k: v["p50_us"] for k, v in fig["floor"].items()}
        parts = floor["tokenize"] + floor["text_statistics"] + floor["model"]
        table.add_row(name, str(fig["tokens"]), f"{fig['route']['p50_us']:.0f}", f"{fig['route']['p99_us']:.0f}",
                      *(f"{floor[k]:.0f}" for k in ("tokenize", "text_statistics", "model", "onnxruntime_noop")),
                      f"{parts:.0f}", f"{fig['route']['p50_us'] - parts:.0f}")
    console = Console()
    console.print(table)
    for b in results["route_batch"]:
        console.print(f"route_batch: {b['prompts_per_s']:,.0f} prompts/s ({b['batch']} prompts of ~128 tokens, "
                      f"{b['threads']} thread(s))")
    load = results["load"]
    console.print(f"fresh process: import {load['import_s']*1000:.0f} ms + Router.load {load['load_s']*1000:.0f} ms"
                  f" = {load['import_plus_load_s']*1000:.0f} ms; RSS after load {load['rss_mb_after_load']:.0f} MB")


def main(bundle: Path = Path("artifacts/router"), out: Path = Path("bench/results.json"), repeat: int = 2000,
         batch: int = 2048, load_runs: int = 5) -> None:
    """Measure the SDK and write the results JSON."""
    results = run(bundle, repeat=repeat, batch=batch, load_runs=load_runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print_report(results)
    print(f"written to {out}")


if __name__ == "__main__":
    import typer

    typer.run(main)
