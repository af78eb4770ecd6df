"""`make bench`: how fast the SDK routes, next to the floor of what it has to do.

One thread unless said. route() latency at ~16 / ~128 / ~512-token prompts (p50, p99),
each with its parts measured alone in the same run, interleaved with it (tokenization,
text statistics, the model on prepared inputs, an onnxruntime call that does nothing),
the glue alone (building the inputs, building the Decision) and the same stages timed
inside route() calls; route_batch throughput on 1 and 2 threads; import + Router.load
time and RSS after load in a fresh process. Next to each route() p99 / p50, the same ratio
for a fixed Python loop as long as route(), interleaved with it: the machine's own jitter.
The policy layer's cost (serving.policy._rules): route() at ~128 tokens with no policy and with
the 20-rule POLICY_20, interleaved (`--policy-only` measures just that). Telemetry's cost
(serving.monitoring._telemetry): execute() with no provider and with the OpenTelemetry SDK's, interleaved
(`--telemetry-only` measures just that). Results go to bench/results.json.
"""

from __future__ import annotations

import itertools
import json
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

TEXT = (
    "The committee reviewed the quarterly report and noted that revenue grew in every region "
    "except the north, where supply problems delayed two large orders. Which of the following "
    "best explains the difference between gross margin and operating margin, and how would a "
    "one-time restructuring charge affect each of them? Show the calculation with 12.5% and 8%. "
)


def write_json(path: Path, figures: dict) -> Path:
    """`figures` as indented JSON at `path`, its folder made; the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2))
    return path


def bundle_tokenizer(bundle: Path):
    """The bundle's full tokenizer (`tokenizers.Tokenizer`), to cut prompts of a given length."""
    from serving import Router

    return Router.load(bundle, strict=True).stages.scorer.extractor.tokenizer.full


def prompt_of(tokenizer, n_tokens: int) -> str:
    """A realistic prompt of about n_tokens tokens (TEXT repeated and cut on a token boundary)."""
    text = TEXT * (n_tokens // 40 + 2)
    ids = tokenizer.encode(text, add_special_tokens=False).ids[:n_tokens]
    return tokenizer.decode(ids)


def timings_us(fns: dict[str, Callable[[], object]], *, repeat: int, rounds: int = 10, warmup: int = 20) -> dict:
    """p50 / p99 / mean of each function, `repeat` calls each, interleaved: `rounds` rounds
    in which every function takes its turn, so that all of them see the same load from the
    rest of the machine and route() stays comparable with its parts."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    per_round = max(repeat // rounds, 1)
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(min(warmup, per_round)):  # caches and branch predictors, after the others ran
                fn()
            for _ in range(per_round):
                start = time.perf_counter_ns()
                fn()
                samples[name].append((time.perf_counter_ns() - start) / 1000)
    return {
        name: {
            "p50_us": float(np.percentile(v, 50)),
            "p99_us": float(np.percentile(v, 99)),
            "mean_us": float(np.mean(v)),
            "n": len(v),
        }
        for name, v in samples.items()
    }


def paired_difference_us(
    base: Callable[[], object], other: Callable[[], object], *, repeat: int, rounds: int = 10
) -> dict:
    """What `other` adds to `base`, call by call: the two alternate, each pair's difference is
    kept, and each round's median difference reported (their median, min and max), so that the
    machine's drift, which moves both calls of a pair alike, cancels out of the figure."""
    per_round = max(repeat // rounds, 1)
    medians = []
    for _ in range(rounds):
        differences = []
        for _ in range(per_round):
            start = time.perf_counter_ns()
            base()
            middle = time.perf_counter_ns()
            other()
            differences.append((time.perf_counter_ns() - middle) - (middle - start))
        medians.append(float(np.median(differences)) / 1000)
    return {
        "median_us": float(np.median(medians)),
        "round_min_us": min(medians),
        "round_max_us": max(medians),
        "rounds": rounds,
        "pairs": per_round * rounds,
    }


def noop_session():
    """An onnxruntime session whose graph is one Identity: the fixed cost of any call."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "noop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def chain_session(nodes: int):
    """An onnxruntime session whose graph is `nodes` Add nodes in a chain on a [1, 1] float tensor
    (no graph optimization, so none is folded away): per node, the executor's own cost."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    chain = [helper.make_node("Add", ["x" if i == 0 else f"t{i - 1}", "one"], [f"t{i}"]) for i in range(nodes)]
    graph = helper.make_graph(
        chain,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info(f"t{nodes - 1}", TensorProto.FLOAT, [1, 1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def dispatch_figures(
    model: bytes, repeat: int, before: Callable[[], object], lengths: tuple[int, ...] = (1, 50, 100, 200)
) -> dict:
    """What a graph's node count costs apart from its work: p50 of a chain of N no-work nodes
    (chain_session) for each N in `lengths`, called as route() calls the model (the compiled
    session's run), alone and right after `before` ran (route()'s Python: how much of the model
    call's slowdown after it is dispatch), the least-squares slope per node, and how many nodes
    `model` (a bundle's model.onnx) holds once onnxruntime has optimized it."""
    import tempfile

    import onnx
    import onnxruntime as ort

    x = np.ones((1, 1), np.float32)
    runs = {}
    for n in lengths:
        session = chain_session(n)
        run, names = session._sess.run, [session.get_outputs()[0].name]
        runs[f"{n}_nodes"] = lambda run=run, names=names: run(names, {"x": x}, None)
    alone = timings_us(runs, repeat=repeat)
    p50 = [alone[f"{n}_nodes"]["p50_us"] for n in lengths]
    after = {}
    for name, run_chain in runs.items():
        ns: list[int] = []

        def timed(run_chain=run_chain, ns=ns) -> None:
            start = time.perf_counter_ns()
            run_chain()
            ns.append(time.perf_counter_ns() - start)

        timings_us({name: lambda timed=timed: (before(), timed())}, repeat=repeat)
        after[name] = round(float(np.percentile(ns, 50)) / 1000, 1)
    with tempfile.TemporaryDirectory() as folder:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # not the warning that the optimized file is for this machine only
        options.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
        ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        optimized = len(onnx.load(options.optimized_model_filepath).graph.node)
    return {
        "chain_p50_us": dict(zip((f"{n}_nodes" for n in lengths), (round(v, 1) for v in p50))),
        "chain_after_route_python_p50_us": after,
        "per_node_us": round(float(np.polyfit(lengths, p50, 1)[0]), 3),
        "model_nodes": len(onnx.load_from_string(model).graph.node),
        "model_nodes_optimized": optimized,
    }


def constant_work(target_us: float) -> Callable[[], int]:
    """A fixed pure-Python loop of about `target_us`: the same instructions every call, so its
    p99 / p50 is the machine's own jitter (timer interrupts, other tenants of the host) at
    that length, the best p99 / p50 any code of that length can show here."""

    def spin(n: int) -> int:
        total = 0
        for i in range(n):
            total += i
        return total

    start = time.perf_counter_ns()
    for _ in range(50):
        spin(1000)
    per_1000_us = (time.perf_counter_ns() - start) / 50 / 1000
    n = max(int(1000 * target_us / per_1000_us), 1)
    return lambda: spin(n)


def model_call(stages, prompt: str) -> Callable[[], object]:
    """The model alone on prepared inputs, called as the SDK calls it, then each head
    calibrated: model.onnx (fused) or encoder + router (staged). `stages`: Router.stages."""
    scorer = stages.scorer
    ids, mask, scalars, heads, _ = stages.features([prompt], ["exact"])

    def run(feeds):
        outputs = stages.model(scorer.outputs, feeds, None)
        return [calibrate(float(out[0, 1])) for calibrate, out in zip(scorer.calibrators, outputs)]

    if stages.encoder is None:  # fused
        feeds = {"input_ids": ids, "attention_mask": mask, "scalars": scalars}
        return lambda: run(feeds)
    features = scorer.extractor.transform([prompt], ["exact"])
    return lambda: (stages.encoder(ids, mask, heads), run({"features": features}))


def staged_route(router, prompt: str) -> tuple[Callable[[], object], dict[str, list[float]]]:
    """A route() call that times its stages (Router.stages: features, encoder if staged, model,
    decision) and the rest of the call, and the samples it fills (microseconds, one per call
    and stage: a stage called twice in one route() counts both). Alone, a part runs with its
    code and data hot in the CPU caches; inside route() the parts share them."""
    stages = router.stages
    samples: dict[str, list[float]] = {name: [] for name in (*stages.names, "rest")}
    this_call: dict[str, int] = {}

    def record(name: str, ns: int) -> None:
        this_call[name] = this_call.get(name, 0) + ns

    def call():
        this_call.clear()
        with stages.timed(record):
            start = time.perf_counter_ns()
            router.route(prompt, precision="exact")
            total = time.perf_counter_ns() - start
        for name in stages.names:
            samples[name].append(this_call.get(name, 0) / 1000)
        samples["rest"].append((total - sum(this_call.values())) / 1000)

    return call, samples


def route_figures(router, prompt: str, repeat: int) -> dict:
    """route(), each of its parts alone (the floor), and the glue between them, for one prompt."""
    from serving.features._text_stats import text_statistics
    from serving.routing._request import Request
    from serving.scoring._scorer import Scores

    stages = router.stages
    extractor = stages.scorer.extractor
    special = extractor.spec.add_special_tokens
    heads = extractor.heads([prompt])
    noop = noop_session()
    noop_run = getattr(noop, "_sess", noop).run  # called the way the SDK calls its model
    x = np.zeros((1, 1), dtype=np.float32)
    decision = router.route(prompt, precision="exact")
    requests = [Request(prompt, precision="exact")]
    probabilities = [(decision.p_edge, decision.p_cloud)] if decision.expected else [(decision.score,)]
    novelty = None if decision.novelty is None else [decision.novelty]
    scored = Scores([decision.n_tokens], scores=[decision.score], heads=probabilities, novelty=novelty)
    staged, stage_samples = staged_route(router, prompt)
    rough = timings_us({"route": lambda: router.route(prompt, precision="exact")}, repeat=200, rounds=1)
    figures = timings_us(
        {
            "route": lambda: router.route(prompt, precision="exact"),
            "tokenize": lambda: extractor.tokenizer.ids(heads, add_special_tokens=special),
            "text_statistics": lambda: text_statistics(prompt, heads[0]),
            "model": model_call(stages, prompt),
            "onnxruntime_noop": lambda: noop_run(["y"], {"x": x}, None),
            # Features end to end (cut, tokenize, statistics, the input arrays): minus the
            # tokenize and statistics floors, what building the inputs costs.
            "features": lambda: stages.features([prompt], ["exact"]),
            # Score -> Decision (the chooser: feasibility, zone, reason text, the dataclass).
            "decision": lambda: stages.decision(requests, scored),
            # The `tokenizers` library on the same head, which the ASCII shortcut replaces.
            "tokenizers_library": lambda: extractor.tokenizer.full.encode_batch(heads, add_special_tokens=special),
            "staged_route": staged,
            "constant_work": constant_work(rough["route"]["p50_us"]),
        },
        repeat=repeat,
    )
    return {
        "tokens": len(extractor.tokenizer.ids(heads, add_special_tokens=special)[0]),
        "route": figures["route"],
        "floor": {k: figures[k] for k in ("tokenize", "text_statistics", "model", "onnxruntime_noop")},
        "glue": {k: figures[k] for k in ("features", "decision")},
        "reference": {"tokenizers_library": figures["tokenizers_library"]},
        "jitter": {"constant_work": figures["constant_work"]},
        "inside_route": {name: {"p50_us": float(np.percentile(v, 50))} for name, v in stage_samples.items()},
    }


# The policy of issue 29's cost target: 20 rules of every kind, a privacy rule naming the detectors
# for personal data the app sends (email, IBAN, card numbers), the rest on metadata, size and
# precision. The benchmark prompt holds no personal data, so no rule matches it and every rule is
# checked: the policy's worst case short of a match.
_PRIVACY_DETECTORS = ["email", "iban", "payment_card"]
POLICY_20 = {
    "rules": [
        {"name": "pii-stays-local", "when": {"detected": _PRIVACY_DETECTORS}, "then": "force", "endpoint": "edge"},
        {"name": "declared-private", "when": {"metadata": {"privacy": "local"}}, "then": "forbid", "endpoint": "cloud"},
        {
            "name": "hipaa",
            "when": {"metadata": {"tenant_class": ["health", "insurer"]}},
            "then": "force",
            "endpoint": "edge",
        },
        {"name": "offline", "when": {"metadata": {"network": "offline"}}, "then": "forbid", "endpoint": "cloud"},
        {"name": "research", "when": {"metadata": {"feature": "research"}}, "then": "force", "endpoint": "cloud"},
        {
            "name": "code-review",
            "when": {"metadata": {"feature": "code_review"}},
            "then": "prefer",
            "endpoint": "cloud",
        },
        {
            "name": "autocomplete",
            "when": {"metadata": {"feature": "autocomplete"}},
            "then": "force",
            "endpoint": "edge",
        },
        {
            "name": "free-tier",
            "when": {"metadata": {"user_tier": "free"}, "min_tokens": 600},
            "then": "forbid",
            "endpoint": "cloud",
        },
        {"name": "trial-tier", "when": {"metadata": {"user_tier": "trial"}}, "then": "prefer", "endpoint": "edge"},
        {
            "name": "enterprise",
            "when": {"metadata": {"user_tier": "enterprise"}, "precision": "exact"},
            "then": "prefer",
            "endpoint": "cloud",
        },
        {
            "name": "eu-data",
            "when": {"metadata": {"region": ["eu-west", "eu-central"]}, "min_chars": 2000},
            "then": "prefer",
            "endpoint": "edge",
        },
        {"name": "tiny-prompts", "when": {"max_tokens": 8}, "then": "prefer", "endpoint": "edge"},
        {"name": "huge-prompts", "when": {"min_tokens": 4000}, "then": "force", "endpoint": "cloud"},
        {"name": "long-chars", "when": {"min_chars": 20000}, "then": "prefer", "endpoint": "cloud"},
        {
            "name": "exact-long",
            "when": {"precision": "exact", "min_tokens": 700},
            "then": "prefer",
            "endpoint": "cloud",
        },
        {"name": "tolerant-edge", "when": {"precision": "tolerant"}, "then": "prefer", "endpoint": "edge"},
        {"name": "batch-jobs", "when": {"metadata": {"mode": "batch"}}, "then": "prefer", "endpoint": "cloud"},
        {"name": "kiosk", "when": {"metadata": {"device": "kiosk"}}, "then": "forbid", "endpoint": "cloud"},
        {
            "name": "staff-debug",
            "when": {"metadata": {"role": "staff", "debug": "1"}},
            "then": "force",
            "endpoint": "cloud",
        },
        {"name": "beta-edge", "when": {"metadata": {"cohort": "edge-beta"}}, "then": "prefer", "endpoint": "edge"},
    ]
}


def policy_figures(bundle: Path, prompt: str, repeat: int) -> dict:
    """route() p50 on `prompt` without a policy, with POLICY_20, and with POLICY_20 whose privacy
    rule names all seven detectors or none (the rules' own cost); each detector alone; interleaved, each on its own Router of the same bundle, with
    metadata that matches no rule (as an app passes it)."""
    from serving import Router
    from serving.policy import DETECTORS, PolicySet
    from serving.routing._chooser import zone_decision
    from serving.routing._request import Request

    every, none = json.loads(json.dumps(POLICY_20)), json.loads(json.dumps(POLICY_20))
    every["rules"][0]["when"]["detected"] = list(DETECTORS)
    none["rules"][0]["when"] = {"metadata": {"contains": "pii"}}  # the rules' own cost, no detector
    policies = {
        "policy_20_rules": PolicySet.from_dict(POLICY_20),
        "policy_20_rules_no_detector": PolicySet.from_dict(none),
        "policy_20_rules_all_detectors": PolicySet.from_dict(every),
    }
    routers = {"no_policy": Router.load(bundle, strict=True)}
    routers.update({name: Router.load(bundle, strict=True, policy=policy) for name, policy in policies.items()})
    metadata = {"user_tier": "pro", "feature": "chat"}
    for name, router in routers.items():
        assert router.route(prompt, metadata=metadata).rule is None, f"{name}: a rule matched the benchmark prompt"
    decision = routers["no_policy"].route(prompt)
    request = Request(prompt, metadata=metadata)
    # The layer alone: what route() adds to the model's decision (no rule matches: nothing changes).
    layer = {
        f"layer_{name}": (lambda p=policy: zone_decision(decision.zone, request, decision.n_tokens, p))
        for name, policy in policies.items()
    }
    figures = timings_us(
        {name: (lambda r=router: r.route(prompt, metadata=metadata)) for name, router in routers.items()} | layer,
        repeat=repeat,
    )
    detectors = timings_us({name: (lambda d=d: d.found_in(prompt)) for name, d in DETECTORS.items()}, repeat=repeat)
    return {
        "detector_p50_us": {name: v["p50_us"] for name, v in detectors.items()},
        "rules": len(POLICY_20["rules"]),
        "privacy_detectors": _PRIVACY_DETECTORS,
        "chars": len(prompt),
        **figures,
        "added_p50_us": {name: figures[name]["p50_us"] - figures["no_policy"]["p50_us"] for name in policies},
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
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", LOAD_PROBE, str(bundle)], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(repeat)
    ]
    best = min(runs, key=lambda r: r["import_plus_load_s"])
    return {**best, "rss_mb_after_load": max(r["rss_mb_after_load"] for r in runs)}


ANSWER = (
    "First, 12 + 15 = 27 marbles in the jar. Then she gives away 27 / 3 = 9 of them, so 27 - 9 = 18 "
    "are left. I think that is right. "
)


def acceptance_figures(router, prompt: str, repeat: int) -> dict | None:
    """The learned acceptance check on answers of ~100, ~1,000 and ~4,000+ characters (cut to the
    bundle's max_response_chars), interleaved with route() on the prompt: what accept="learned"
    adds to an edge-first request, next to what routing it cost."""
    acceptor = router.acceptor
    if acceptor is None:
        return None
    answers = {f"{n}_chars": (ANSWER * (n // len(ANSWER) + 1))[:n] + "\n#### 18" for n in (100, 1000, 4000, 100_000)}
    fns = {
        "route": lambda: router.route(prompt),
        **{f"check_{name}": (lambda a=answer: acceptor.check(prompt, a)) for name, answer in answers.items()},
    }
    return timings_us(fns, repeat=repeat)


def logging_figures(bundle: Path, prompt: str, repeat: int, *, pause_s: float = 0.002) -> dict:
    """route() + execute() with trivial edge/cloud callables, with and without an OutcomeLog,
    alternating. Paced (`pause_s` between requests, as real LLM traffic is: each request waits
    on a model for far longer), the writer thread does its work between requests, and the
    added p50 is what recording costs the request itself; back to back, the writer's JSON
    encoding competes with the requests for the GIL and shows up in their latency too."""
    import tempfile

    from serving import Router
    from serving.monitoring._outcome_log import OutcomeLog

    answer = "An answer of a few words."
    with tempfile.TemporaryDirectory(prefix="bench-outcome-log-") as folder:
        log = OutcomeLog(folder)
        plain, logged = Router.load(bundle, strict=True), Router.load(bundle, strict=True, log=log)
        calls = {
            "execute": lambda: plain.execute(prompt, edge=lambda p: answer, cloud=lambda p: answer),
            "execute_logged": lambda: logged.execute(prompt, edge=lambda p: answer, cloud=lambda p: answer),
        }
        paced: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(repeat // 4):
            for name, call in calls.items():
                time.sleep(pause_s)
                start = time.perf_counter_ns()
                call()
                paced[name].append((time.perf_counter_ns() - start) / 1000)
        back_to_back = timings_us(calls, repeat=repeat)
        log.close()
    figures = {
        f"paced_{name}": {"p50_us": float(np.percentile(v, 50)), "p99_us": float(np.percentile(v, 99))}
        for name, v in paced.items()
    }
    return {
        **figures,
        "back_to_back": back_to_back,
        "pause_s": pause_s,
        "added_p50_us_paced": figures["paced_execute_logged"]["p50_us"] - figures["paced_execute"]["p50_us"],
        "added_p50_us_back_to_back": back_to_back["execute_logged"]["p50_us"] - back_to_back["execute"]["p50_us"],
        "records_written": log.written,
        "records_dropped": log.dropped,
    }


def conversation_figures(bundle: Path, prompt: str, repeat: int, *, stored: int = 1_000_000) -> dict:
    """What conversation state adds to a turn, in this process: route() of the prompt alone, and as
    the second turn of a conversation whose state is in a MemoryStore (read, its switch costs
    priced for every endpoint, weighed by the rule), interleaved, and their difference call by
    call (paired_difference_us); then the turn recorded
    (record_turn: read, update, write); and the memory of `stored` conversations of two turns
    each in one MemoryStore (tracemalloc)."""
    import gc
    import tracemalloc

    from serving import MemoryStore, Request, Router
    from serving.conversations._state import ConversationState

    store = MemoryStore(max_conversations=stored)
    router = Router.load(bundle, strict=True, conversations=store)
    n = router.route(prompt).n_tokens
    now = time.time()
    state = ConversationState().after(
        "cloud", input_tokens=n // 2, output_tokens=n // 4, on_device=False, outcome="served", now=now
    )
    store.put("bench", state)
    alone, turn = Request(prompt), Request(prompt, conversation="bench")
    timings = timings_us(
        {
            "route": lambda: router.route(alone),
            "route_turn": lambda: router.route(turn),
            "record_turn": lambda: router.record_turn("bench", "cloud", input_tokens=n, output_tokens=40),
        },
        repeat=repeat,
    )
    store.put("bench", state)
    paired = paired_difference_us(lambda: router.route(alone), lambda: router.route(turn), repeat=repeat)
    store.put("bench", state)
    gc.collect()
    tracemalloc.start()
    many = MemoryStore(max_conversations=stored)
    for k in range(stored):
        first = ConversationState().after(
            "edge", input_tokens=300, output_tokens=120, on_device=True, outcome="served", now=now
        )
        many.put(
            f"conversation-{k:09d}",
            first.after("cloud", input_tokens=600, output_tokens=150, on_device=False, outcome="served", now=now),
        )
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {
        **timings,
        "added_p50_us": timings["route_turn"]["p50_us"] - timings["route"]["p50_us"],
        "added_paired_us": paired,
        "memory": {"conversations": len(many), "mb": round(traced / 1e6, 1), "bytes_each": round(traced / len(many))},
    }


def print_conversations(c: dict) -> None:
    print(
        f"conversation state: route() {c['route']['p50_us']:.1f} us, as a conversation's second turn "
        f"{c['route_turn']['p50_us']:.1f} us (+{c['added_p50_us']:.1f} us; call by call "
        f"+{c['added_paired_us']['median_us']:.1f} us, rounds +{c['added_paired_us']['round_min_us']:.1f} to "
        f"+{c['added_paired_us']['round_max_us']:.1f}), record_turn "
        f"{c['record_turn']['p50_us']:.1f} us; {c['memory']['conversations']:,} conversations in a MemoryStore: "
        f"{c['memory']['mb']} MB ({c['memory']['bytes_each']} bytes each)"
    )


SPAN_8 = {
    "router.zone": "edge",
    "router.score": -0.2,
    "router.unfamiliar": False,
    "router.degraded": False,
    "router.model_version": "edge-cloud-router@run:bench",
    "router.p_edge": 0.8,
    "router.p_cloud": 0.6,
    "router.served_by": "edge",
}
SPAN_2 = {"router.attempt": "edge", "router.attempt.status": "ok"}


def telemetry_figures(bundle: Path, prompt: str, repeat: int) -> dict | None:
    """route() + execute() with trivial edge/cloud callables, interleaved: telemetry off (the
    OpenTelemetry API imported, no provider set: what an app that configured none pays) and on
    (the SDK's providers, every span exported to an in-memory exporter as it ends, metrics
    recorded for an in-memory reader). None without opentelemetry-sdk."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None
    from serving import Router
    from serving.monitoring import _telemetry as telemetry

    router = Router.load(bundle, strict=True)
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[reader])
    answer = "An answer of a few words."

    def execute_with(tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None) -> object:
        telemetry.use(tracer_provider, meter_provider)  # cached: a lookup, the same on both sides
        return router.execute(prompt, edge=lambda p: answer, cloud=lambda p: answer)

    # The floor: what the SDK alone takes to make the same output (a span with 8 attributes, a
    # child span with 2, four metric points), without routing or serving's bookkeeping.
    tracer = tracer_provider.get_tracer("bench")
    meter = meter_provider.get_meter("bench")
    counter, histogram = meter.create_counter("bench.count"), meter.create_histogram("bench.duration")

    def sdk_alone() -> None:
        from opentelemetry import trace

        root = tracer.start_span("router.execute")
        tracer.start_span("router.edge", context=trace.set_span_in_context(root), attributes=SPAN_2).end()
        root.set_attributes(SPAN_8)
        root.end()
        counter.add(1, {"router.zone": "edge"})
        counter.add(1, {"router.served_by": "edge"})
        counter.add(1, {"router.served_by": "edge"})
        histogram.record(0.001, {"router.served_by": "edge"})

    def scope_off() -> None:  # what telemetry adds to a request while off: two of these
        telemetry.use()
        with telemetry.request() as trace:
            trace.decided(decision)

    decision = router.route(prompt)
    try:
        figures = timings_us(
            {
                "scope_off": scope_off,
                "telemetry_off": lambda: execute_with(None, None),
                "telemetry_on": lambda: execute_with(tracer_provider, meter_provider),
                "sdk_alone": sdk_alone,
            },
            repeat=repeat,
        )
    finally:
        telemetry.use()
    spans = len(exporter.get_finished_spans())
    tracer_provider.shutdown()
    meter_provider.shutdown()
    return {
        **figures,
        "added_p50_us": figures["telemetry_on"]["p50_us"] - figures["telemetry_off"]["p50_us"],
        "spans_exported": spans,
    }


def run(bundle: Path, *, repeat: int = 2000, batch: int = 2048, load_runs: int = 5, lengths=(16, 128, 512)) -> dict:
    from serving import Router

    router = Router.load(bundle, strict=True, threads=1)
    tokenizer = router.stages.scorer.extractor.tokenizer.full
    routes = {
        f"{n}_tokens": route_figures(router, prompt_of(tokenizer, n), repeat if n < 512 else repeat // 2)
        for n in lengths
    }
    huge = "x " * 500_000  # a 1 MB prompt
    routes["1MB_prompt"] = timings_us(
        {"route": lambda: router.route(huge)}, repeat=max(repeat // 40, 5), rounds=5, warmup=1
    )
    batch_prompts = [prompt_of(tokenizer, 128)[: 400 + i % 97] + f" #{i}" for i in range(batch)]
    accept = acceptance_figures(router, prompt_of(tokenizer, 128), max(repeat // 4, 50))
    return {
        "outcome_log": logging_figures(bundle, prompt_of(tokenizer, 16), repeat),
        "telemetry": telemetry_figures(bundle, prompt_of(tokenizer, 16), repeat),
        "acceptance": accept,
        "bundle": str(bundle),
        "tier": router.manifest.feature_spec.tier,
        "machine": {
            "cpus": __import__("os").cpu_count(),
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
        },
        "route": routes,
        "route_batch": [batch_throughput(bundle, batch_prompts, threads=t) for t in (1, 2)],
        "load": load_figures(bundle, repeat=load_runs),
        "policy": policy_figures(bundle, prompt_of(tokenizer, 128), repeat),
        "conversations": conversation_figures(bundle, prompt_of(tokenizer, 128), repeat),
    }


def print_report(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"route() on one thread ({results['tier']} tier), microseconds, p50 unless said")
    for column in (
        "prompt",
        "tokens",
        "route p50",
        "route p99",
        "p99 / p50",
        "constant work p99 / p50",
        "tokenize",
        "text stats",
        "model",
        "ort no-op",
        "floor (sum)",
        "route / floor",
        "in route(): features",
        "model",
        "decision",
        "rest",
    ):
        table.add_column(column, justify="right")
    for name, fig in results["route"].items():
        if "floor" not in fig:
            table.add_row(name, "", f"{fig['route']['p50_us']:.0f}", f"{fig['route']['p99_us']:.0f}", *[""] * 12)
            continue
        floor = {k: v["p50_us"] for k, v in fig["floor"].items()}
        inside = {k: v["p50_us"] for k, v in fig["inside_route"].items()}
        route = fig["route"]["p50_us"]
        parts = floor["tokenize"] + floor["text_statistics"] + floor["model"]
        work = fig["jitter"]["constant_work"]
        table.add_row(
            name,
            str(fig["tokens"]),
            f"{route:.0f}",
            f"{fig['route']['p99_us']:.0f}",
            f"{fig['route']['p99_us'] / route:.1f}",
            f"{work['p99_us'] / work['p50_us']:.1f}",
            *(f"{floor[k]:.0f}" for k in ("tokenize", "text_statistics", "model", "onnxruntime_noop")),
            f"{parts:.0f}",
            f"{route / parts:.1f}x",
            f"{inside['features']:.0f}",
            f"{inside['model'] + inside.get('encoder', 0):.0f}",
            f"{inside['decision']:.0f}",
            f"{inside['rest']:.0f}",
        )
    console = Console(width=max(Console().width, 180))  # all 16 columns, even in a pipe
    console.print(table)
    console.print(
        "floor: each part alone on prepared inputs, interleaved with route() (model = the onnxruntime "
        "call(s) + calibration; ort no-op = the fixed cost of any call). in route(): the same stages timed "
        "inside route() calls (features = cut + tokenize + statistics + numpy inputs; model includes the "
        "encoder when staged; decision = zone, "
        "reason, Decision), slower than alone because they share the CPU caches there; rest = argument "
        "checks, calls and lists between them (per call). constant work: a fixed Python loop as long as "
        "route(), interleaved with it: its p99 / p50 is this machine's jitter at that length."
    )
    for name, fig in results["route"].items():
        if "reference" in fig:
            console.print(
                f"{name}: the `tokenizers` library alone takes "
                f"{fig['reference']['tokenizers_library']['p50_us']:.0f} us on the same text "
                f"(the SDK's tokenize: {fig['floor']['tokenize']['p50_us']:.0f} us)"
            )
    for b in results["route_batch"]:
        console.print(
            f"route_batch: {b['prompts_per_s']:,.0f} prompts/s ({b['batch']} prompts of ~128 tokens, "
            f"{b['threads']} thread(s))"
        )
    if results.get("acceptance"):
        a = results["acceptance"]
        checks = ", ".join(
            f"{k.removeprefix('check_').replace('_', ' ')} {v['p50_us']:.0f} us (p99 {v['p99_us']:.0f})"
            for k, v in a.items()
            if k.startswith("check_")
        )
        console.print(
            f'acceptance check (accept="learned"), p50: {checks}; route() on the ~128-token prompt '
            f"{a['route']['p50_us']:.0f} us in the same run"
        )
    if results.get("outcome_log"):
        o = results["outcome_log"]
        console.print(
            f"execute() p50 {o['paced_execute']['p50_us']:.0f} us without a log, "
            f"{o['paced_execute_logged']['p50_us']:.0f} us with an OutcomeLog: +{o['added_p50_us_paced']:.0f} us "
            f"paced {o['pause_s'] * 1000:g} ms apart, +{o['added_p50_us_back_to_back']:.0f} us back to back "
            f"({o['records_written']} records written, {o['records_dropped']} dropped)"
        )
    if results.get("telemetry"):
        print_telemetry(results["telemetry"], console)
    if results.get("policy"):
        print_policy(results["policy"], console)
    if results.get("conversations"):
        print_conversations(results["conversations"])
    load = results["load"]
    console.print(
        f"fresh process: import {load['import_s'] * 1000:.0f} ms + Router.load {load['load_s'] * 1000:.0f} ms"
        f" = {load['import_plus_load_s'] * 1000:.0f} ms; RSS after load {load['rss_mb_after_load']:.0f} MB"
    )


def print_telemetry(t: dict, console) -> None:
    console.print(
        f"execute() p50 with telemetry off (API imported, no provider) {t['telemetry_off']['p50_us']:.0f} us "
        f"(p99 {t['telemetry_off']['p99_us']:.0f}), on (SDK providers, in-memory exporter and reader) "
        f"{t['telemetry_on']['p50_us']:.0f} us (p99 {t['telemetry_on']['p99_us']:.0f}): "
        f"+{t['added_p50_us']:.0f} us for 2 spans and 4 metric points ({t['spans_exported']} spans exported); "
        f"the SDK alone making the same spans and points: {t['sdk_alone']['p50_us']:.0f} us; "
        f"off, one request scope (execute() opens two) with telemetry.use() before it: "
        f"{t['scope_off']['p50_us']:.1f} us"
    )


def print_policy(p: dict, console) -> None:
    added = p["added_p50_us"]
    console.print(
        "policy layer alone (PolicySet.apply) p50: "
        + ", ".join(f"{name} {p['layer_' + name]['p50_us']:.1f} us" for name in added)
        + "; "
        f"route() p50 at ~128 tokens ({p['chars']} characters): {p['no_policy']['p50_us']:.0f} us "
        f"without a policy, {p['policy_20_rules']['p50_us']:.0f} us with {p['rules']} rules "
        f"(+{added['policy_20_rules']:.1f} us; privacy rule on {', '.join(p['privacy_detectors'])}), "
        f"{p['policy_20_rules_all_detectors']['p50_us']:.0f} us when it names all seven detectors "
        f"(+{added['policy_20_rules_all_detectors']:.1f} us), {p['policy_20_rules_no_detector']['p50_us']:.0f} us "
        f"when it names none (+{added['policy_20_rules_no_detector']:.1f} us); each detector alone on the prompt: "
        + ", ".join(f"{name} {us:.1f} us" for name, us in p["detector_p50_us"].items())
    )


def varied_prompts(tokenizer, n_tokens: int, count: int = 64, seed: int = 0) -> list[str]:
    """`count` different prompts of about n_tokens tokens: TEXT's words shuffled (seeded), cut on
    a token boundary, so each call in turn takes another path through the trees."""
    import random

    rng, words = random.Random(seed), TEXT.split() * (n_tokens // 40 + 2)
    return [
        tokenizer.decode(
            tokenizer.encode(" ".join(rng.sample(words, len(words))), add_special_tokens=False).ids[:n_tokens]
        )
        for _ in range(count)
    ]


def route_python(router, prompt: str) -> Callable[[], None]:
    """All of route()'s Python on `prompt`: route() with the model call replaced by a copy of
    that call's outputs (the model call is put back after each call)."""
    stages = router.stages
    scorer = stages.scorer
    ids, mask, scalars, _, _ = stages.features([prompt], ["exact"])
    model = scorer.run_model
    outputs = model(scorer.outputs, {"input_ids": ids, "attention_mask": mask, "scalars": scalars}, None)

    def python_only() -> None:
        scorer.run_model = lambda names, given, options: [o.copy() for o in outputs]
        try:
            router.route(prompt, precision="exact")
        finally:
            scorer.run_model = model

    return python_only


def _timed_after(first: Callable[[], object], second: Callable[[], object], ns: list[int]) -> Callable[[], None]:
    """A call of `first` then `second`, appending `second`'s nanoseconds alone to `ns`."""

    def both() -> None:
        first()
        start = time.perf_counter_ns()
        second()
        ns.append(time.perf_counter_ns() - start)

    return both


def gap_figures(router, prompt: str, varied: list[str], repeat: int) -> dict:
    """route() taken apart (docs/performance.md): all of its Python with the model call replaced by
    a copy of that call's outputs, its parts alone, and the model call alone, right after route()'s
    Python, right after tokenization and statistics, and on `varied` prompts in turn; and the other
    way round, route()'s Python and tokenization with statistics right after a model call. The
    timers of the "after" variants cover the second step only."""
    from serving.features._text_stats import text_statistics

    stages = router.stages
    scorer, extractor = stages.scorer, stages.scorer.extractor
    special, model = extractor.spec.add_special_tokens, scorer.run_model
    head = extractor.heads([prompt])
    ids, mask, scalars, _, _ = stages.features([prompt], ["exact"])
    feeds = {"input_ids": ids, "attention_mask": mask, "scalars": scalars}
    varied_feeds = []
    for text in varied:
        v_ids, v_mask, v_scalars, _, _ = stages.features([text], ["exact"])
        varied_feeds.append({"input_ids": v_ids, "attention_mask": v_mask, "scalars": v_scalars})
    varied_heads = [extractor.heads([text]) for text in varied]
    turn = itertools.cycle(range(len(varied_feeds)))
    python_only = route_python(router, prompt)

    def model_alone() -> None:
        model(scorer.outputs, feeds, None)

    def parts() -> None:
        extractor.tokenizer.ids(head, add_special_tokens=special)
        text_statistics(prompt, head[0])

    fns = {
        "route": lambda: router.route(prompt, precision="exact"),
        "route_python": python_only,
        "tokenize": lambda: extractor.tokenizer.ids(head, add_special_tokens=special),
        "text_statistics": lambda: text_statistics(prompt, head[0]),
        "model": model_alone,
        "model_varied_prompts": lambda: model(scorer.outputs, varied_feeds[next(turn)], None),
        # The same prompts in turn through route() and each part: the ratio on varied traffic.
        "route_varied_prompts": lambda: router.route(varied[next(turn)], precision="exact"),
        "tokenize_varied_prompts": lambda: extractor.tokenizer.ids(
            varied_heads[next(turn)], add_special_tokens=special
        ),
        "text_statistics_varied_prompts": lambda: (lambda k: text_statistics(varied[k], varied_heads[k][0]))(
            next(turn)
        ),
    }
    figures = timings_us(fns, repeat=repeat)
    for name, first, second in (
        ("model_after_route_python", python_only, model_alone),
        ("model_after_tokenize_and_statistics", parts, model_alone),
        ("route_python_after_model", model_alone, python_only),
        ("tokenize_and_statistics_after_model", model_alone, parts),
    ):
        second_ns: list[int] = []
        timings_us({name: _timed_after(first, second, second_ns)}, repeat=repeat)
        figures[name] = {"p50_us": float(np.percentile(second_ns, 50)) / 1000}
    figures["glue"] = {
        "p50_us": figures["route_python"]["p50_us"]
        - figures["tokenize"]["p50_us"]
        - figures["text_statistics"]["p50_us"]
    }
    return {name: {"p50_us": round(v["p50_us"], 1)} for name, v in figures.items()}


# --- route() of this SDK against an earlier one (--against COMMIT) ----------------------------
# The earlier SDK is `git archive <commit> serving`, unpacked beside the run; each version times
# route() in its own process (one Python cannot import two `serving` packages), in rounds that
# alternate the versions, so that both see the same load from the rest of the machine. Each round
# takes every case's p50 over `repeat` calls; a version's figure is the median of its rounds, and
# the difference is paired by round (this minus the other, with the rounds' range). Cases: prompts
# of ~16 and ~128 tokens, each without a policy and with POLICY_20 (metadata that matches no rule,
# as an app passes it). Written to bench/versions.json.

SDK_ROOT = Path(__file__).resolve().parents[1]

VERSIONS_WORKER = """
import json, sys, time
request = json.load(sys.stdin)
import serving
from serving import Router
assert serving.__file__.startswith(request["root"]), serving.__file__
out = {}
for case in request["cases"]:
    options = {"policy": request["policy"]} if case["policy"] else {}
    router = Router.load(request["bundle"], strict=True, **options)
    prompt, metadata = case["prompt"], case["metadata"]
    for _ in range(50):
        router.route(prompt, precision="exact", metadata=metadata)
    samples = []
    for _ in range(request["repeat"]):
        start = time.perf_counter_ns()
        router.route(prompt, precision="exact", metadata=metadata)
        samples.append(time.perf_counter_ns() - start)
    samples.sort()
    out[case["name"]] = samples[len(samples) // 2] / 1000
json.dump(out, sys.stdout)
"""


def unpack_sdk(commit: str, folder: Path) -> Path:
    """The `serving` package at `commit`, from git, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(SDK_ROOT), "archive", commit, "serving"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def timed_round(root: Path, request: dict) -> dict[str, float]:
    run = subprocess.run(
        [sys.executable, "-c", VERSIONS_WORKER],
        input=json.dumps({**request, "root": str(root)}),
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )
    if run.returncode:
        raise SystemExit(f"route() timing of the SDK in {root} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout)


def version_cases(bundle: Path) -> list[dict]:
    """The cases both versions route (module doc): ~16 and ~128 tokens, without and with POLICY_20."""
    tokenizer = bundle_tokenizer(bundle)
    metadata = {"user_tier": "pro", "feature": "chat"}
    return [
        {
            "name": f"{n}_tokens{'_policy_20' if policy else ''}",
            "prompt": prompt_of(tokenizer, n),
            "policy": policy,
            "metadata": metadata,
        }
        for n in (16, 128)
        for policy in (False, True)
    ]


# Instructions instead of time (--instructions): the same cases, each version's route() counted by
# valgrind's callgrind, which counts only inside functools.reduce (--toggle-collect), so that loading
# the bundle is left out. A count does not move with the machine's load: it shows a difference of a
# few hundred nanoseconds that the timed rounds cannot tell from noise (docs/performance.md).
INSTRUCTIONS_WORKER = """
import functools, json, sys
request = json.load(sys.stdin)
import serving
from serving import Router
assert serving.__file__.startswith(request["root"]), serving.__file__
case = request["case"]
router = Router.load(request["bundle"], strict=True, **({"policy": request["policy"]} if case["policy"] else {}))
call = lambda: router.route(case["prompt"], precision="exact", metadata=case["metadata"])
for _ in range(50):
    call()
functools.reduce(lambda _, __: call(), range(request["calls"]), None)
"""


def counted_instructions(root: Path, request: dict) -> float:
    """Instructions per route() of the SDK in `root` on `request`'s case (callgrind)."""
    run = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=functools_reduce",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            INSTRUCTIONS_WORKER,
        ],
        input=json.dumps({**request, "root": str(root)}),
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )
    collected = re.search(r"Collected : (\d+)", run.stderr)
    if run.returncode or collected is None:
        raise SystemExit(f"counting route()'s instructions in {root} failed:\n{run.stderr[-2000:]}")
    return int(collected.group(1)) / request["calls"]


def instruction_figures(bundle: Path, commit: str, *, calls: int = 300) -> dict:
    """Each case's instructions per route() for this SDK and the one at `commit`, and their difference."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    figures = {}
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        policy = Path(tmp) / "policy.json"
        policy.write_text(json.dumps(POLICY_20))
        roots = {"this": SDK_ROOT, commit: unpack_sdk(commit, Path(tmp) / "old")}
        for case in version_cases(bundle):
            request = {"bundle": str(bundle.resolve()), "case": case, "calls": calls, "policy": str(policy)}
            counts = {name: counted_instructions(root, request) for name, root in roots.items()}
            figures[case["name"]] = {
                **counts,
                "difference": counts["this"] - counts[commit],
                "relative": counts["this"] / counts[commit] - 1,
            }
    return {"against": commit, "calls": calls, "cases": figures}


def versions_figures(bundle: Path, commit: str, *, rounds: int = 6, repeat: int = 2000) -> dict:
    """Each case's route() p50 (us) for this SDK and the one at `commit` (module doc)."""
    cases = version_cases(bundle)
    with tempfile.TemporaryDirectory(prefix="bench-versions-") as tmp:
        policy = Path(tmp) / "policy.json"
        policy.write_text(json.dumps(POLICY_20))
        request = {"bundle": str(bundle.resolve()), "cases": cases, "repeat": repeat, "policy": str(policy)}
        roots = {"this": SDK_ROOT, commit: unpack_sdk(commit, Path(tmp) / "old")}
        seen: dict[str, list[dict[str, float]]] = {name: [] for name in roots}
        for index in range(rounds):
            order = list(roots) if index % 2 == 0 else list(roots)[::-1]
            for name in order:
                seen[name].append(timed_round(roots[name], request))
    figures = {}
    for case in (c["name"] for c in cases):
        this = [r[case] for r in seen["this"]]
        other = [r[case] for r in seen[commit]]
        differences = [a - b for a, b in zip(this, other)]
        figures[case] = {
            "this_p50_us": statistics.median(this),
            f"{commit}_p50_us": statistics.median(other),
            "paired_difference_us": {
                "median": statistics.median(differences),
                "min": min(differences),
                "max": max(differences),
            },
        }
    return {"against": commit, "rounds": rounds, "repeat": repeat, "cases": figures}


def main(
    bundle: Path = Path("artifacts/router"),
    out: Path = Path("bench/results.json"),
    repeat: int = 2000,
    batch: int = 2048,
    load_runs: int = 5,
    policy_only: bool = False,
    telemetry_only: bool = False,
    gap_only: bool = False,
    conversations_only: bool = False,
    against: str | None = None,
    rounds: int = 6,
    instructions: bool = False,
) -> None:
    """Measure the SDK and write the results JSON (--policy-only: the policy layer's cost alone,
    printed and written to bench/policy.json; --telemetry-only: execute() with telemetry off and
    on, printed and written to bench/telemetry.json; --gap-only: route() taken apart, printed and
    written to bench/gap.json; --against COMMIT: route() of this SDK and the one at COMMIT, from
    git, in alternating rounds, written to bench/versions.json, or with --instructions its instructions
    counted by valgrind, written to bench/instructions.json; --conversations-only: what conversation
    state adds to a turn and the memory of 1e6 conversations, written to bench/conversations.json)."""
    if against and instructions:
        counted = instruction_figures(bundle, against)
        path = write_json(out.with_name("instructions.json"), counted)
        for case, figure in counted["cases"].items():
            print(
                f"{case}: this {figure['this']:,.0f} instructions a route(), {against} {figure[against]:,.0f}: "
                f"{figure['difference']:+,.0f} ({figure['relative']:+.2%})"
            )
        print(f"written to {path}")
        return
    if against:
        figures = versions_figures(bundle, against, rounds=rounds, repeat=repeat)
        path = write_json(out.with_name("versions.json"), figures)
        for case, figure in figures["cases"].items():
            difference = figure["paired_difference_us"]
            print(
                f"{case}: this {figure['this_p50_us']:.1f} us, {against} {figure[f'{against}_p50_us']:.1f} us; paired "
                f"difference {difference['median']:+.1f} us (rounds {difference['min']:+.1f} .. {difference['max']:+.1f})"
            )
        print(f"written to {path}")
        return
    if gap_only:
        from serving import Router
        from serving.bundle._bundle import read_bundle

        router = Router.load(bundle, strict=True)
        tokenizer = router.stages.scorer.extractor.tokenizer.full
        gap: dict = {
            f"{n}_tokens": gap_figures(router, prompt_of(tokenizer, n), varied_prompts(tokenizer, n), repeat)
            for n in (16, 128)
        }
        dispatch = dispatch_figures(
            read_bundle(bundle).content("model.onnx"), repeat, route_python(router, prompt_of(tokenizer, 16))
        )
        path = write_json(out.with_name("gap.json"), {**gap, "dispatch": dispatch})
        for length, figures in gap.items():
            print(length, ", ".join(f"{name} {v['p50_us']:.0f} us" for name, v in figures.items()))
        print(
            f"dispatch: {dispatch['per_node_us']} us a node (chains {dispatch['chain_p50_us']}, after route()'s "
            f"Python {dispatch['chain_after_route_python_p50_us']}); the model holds "
            f"{dispatch['model_nodes']} nodes, {dispatch['model_nodes_optimized']} once optimized"
        )
        print(f"written to {path}")
        return
    if conversations_only:
        tokenizer = bundle_tokenizer(bundle)
        figures = conversation_figures(bundle, prompt_of(tokenizer, 128), repeat)
        path = write_json(out.with_name("conversations.json"), figures)
        print_conversations(figures)
        print(f"written to {path}")
        return
    if telemetry_only:
        from rich.console import Console

        tokenizer = bundle_tokenizer(bundle)
        telemetry = telemetry_figures(bundle, prompt_of(tokenizer, 16), repeat)
        if telemetry is None:
            raise SystemExit("--telemetry-only needs opentelemetry-sdk (the test extra)")
        path = write_json(out.with_name("telemetry.json"), telemetry)
        print_telemetry(telemetry, Console())
        print(f"written to {path}")
        return
    if policy_only:
        from rich.console import Console

        tokenizer = bundle_tokenizer(bundle)
        figures = policy_figures(bundle, prompt_of(tokenizer, 128), repeat)
        path = write_json(out.with_name("policy.json"), figures)
        print_policy(figures, Console())
        print(f"written to {path}")
        return
    results = run(bundle, repeat=repeat, batch=batch, load_runs=load_runs)
    write_json(out, results)
    print_report(results)
    print(f"written to {out}")


if __name__ == "__main__":
    import typer

    typer.run(main)
