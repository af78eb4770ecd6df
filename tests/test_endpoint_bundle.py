"""N-endpoint bundles (docs/endpoints.md#n-endpoint-bundles): trained on simulated four-endpoint
logs, one model.onnx whose `expected` output is every endpoint's calibrated probability; the SDK's
decisions are serving.endpoints._choice's on those probabilities, with the policy's forbidden
endpoints and the context limits as feasibility; a bad endpoints section is a clear error; and
two-endpoint bundles decide exactly as the SDK before N-endpoint bundles did."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from serving import BundleError, Router
from serving.bundle._bundle import manifest_digest, read_bundle
from serving.bundle._manifest import Manifest, ManifestError
from serving.endpoints._choice import best_under_price, call_costs, cascade, cheapest_within, escalation
from serving.policy import NoFeasibleEndpoint, PolicyFileError, PolicySet
from serving.scoring._scorer import Scorer

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("phone-3b", "onprem-8b", "cloud-mid", "frontier")
HARD = [
    "",
    "   ",
    "What is 2 + 2?",
    "请用中文解释量子纠缠，并给出一个日常生活中的类比。",
    "日本語の文章：東京は日本の首都です。",
    "🙂🚀🔥 can you summarise this? 👩‍👩‍👧‍👦",
    "Draft a lease termination clause for a commercial tenant in breach of covenant.",
    "def f(x):\n    return sorted(x, key=lambda v: -v)\n# why is this slow?",
    "word " * 3000,
    "x" * 200_000,
    "Ünïcödé ñ ß ø å \u200b zero-width \ufeff bom",
]
TOPICS = [
    "Solve for x: 3x^2 - 12x + 9 = 0, showing each step.",
    "Write a Python function that merges two sorted lists in linear time.",
    "My tenant stopped paying rent; what notice must I give before terminating the lease?",
    "A patient presents with chest pain radiating to the left arm; what is the differential diagnosis?",
    "How should I hedge currency risk on a bond portfolio denominated in yen?",
    "Tell me a joke about penguins.",
]
PRECISIONS = [None, "exact", "standard", "tolerant"]


def simulated_bundle(
    tmp: Path, cache: Path, *, n: int, seed: int = 0, answers: bool = False, signing_key=None, **options
):
    """(the EndpointBundle, its EndpointRows): one N-endpoint bundle (separate heads, cheapest_within)
    trained on `n` rows of the four simulated endpoints written to tmp/logs (with each outcome's
    answer: `answers`), in tmp/bundle; `options`, TrainConfig's beyond its cache."""
    from data.endpoint_logs import read_endpoint_logs
    from data.simulator_endpoints import load_simulation, write_simulation
    from evaluation.endpoints import Choosers
    from training.config import TrainConfig
    from training.endpoint_bundle import train_endpoint_bundle
    from training.endpoints import EndpointRows

    sim = load_simulation(None)
    write_simulation(tmp / "logs", sim, n, seed=seed, answers=answers)
    frame, _ = read_endpoint_logs([tmp / "logs"], sim.names)
    rows = EndpointRows.from_frame(frame, sim.names)
    made = train_endpoint_bundle(
        rows,
        sim.endpoints,
        tmp / "bundle",
        mode="separate",
        rule="cheapest_within",
        choosers=Choosers(),
        output_tokens=sim.output_tokens,
        config=TrainConfig(cache_dir=str(cache), **options),
        signing_key=signing_key,
    )
    return made, rows


@pytest.fixture(scope="module")
def trained(tmp_path_factory, encoder_cache):
    """One N-endpoint bundle (separate heads, cheapest_within) on 3,000 simulated four-endpoint rows,
    signed; and its public key. Trained once per test session (tests.conftest.once_per_session),
    whichever module (or xdist worker) asks first: test_proxy_endpoint_bundle uses it too."""
    from tests.conftest import once_per_session
    from training.keys import generate

    def build(tmp: Path):
        private, public = generate(tmp / "keys")
        made, _ = simulated_bundle(tmp, encoder_cache, n=3000, signing_key=private)
        return made, public

    return once_per_session(tmp_path_factory, "endpoint_bundle", build)


@pytest.fixture(scope="module")
def router(trained) -> Router:
    """The bundle's router deciding by its rule for every prompt: an unfamiliar one too (the unfamiliar
    policy `learned`; test_unfamiliar_prompts_get_the_unfamiliar_policy has the others)."""
    made, public = trained
    return Router.load(made.folder, strict=True, public_key=public, unfamiliar_policy="learned")


def variant(trained, tmp_path: Path, edit) -> Path:
    """A copy of the bundle with its manifest edited by `edit(dict)` and re-digested (unsigned)."""
    made, _ = trained
    folder = tmp_path / "variant"
    shutil.copytree(made.folder, folder)
    (folder / "manifest.sig").unlink(missing_ok=True)
    data = json.loads((folder / "manifest.json").read_text())
    edit(data)
    data["manifest_sha256"] = manifest_digest(data)
    (folder / "manifest.json").write_text(json.dumps(data))
    return folder


CLIMBING_MARGIN = 0.3


def climbing(trained, tmp_path: Path, **load) -> Router:
    """The session's bundle with cheapest_within's margin widened from the 0.02 training set to 0.3
    (a variant, unsigned), loaded with `load`'s keywords. The cheapest endpoint within 0.3 of the
    best then starts most cascades, so most prompts have a costlier endpoint to fall back to; at 0.02
    whether any of a handful of prompts has one is up to the trees, which another CPU trains a
    little differently (none of the test prompts had one on one machine)."""

    def widen(data: dict) -> None:
        data["endpoints"]["choice"]["margin"] = CLIMBING_MARGIN

    return Router.load(variant(trained, tmp_path, widen), strict=True, **load)


def recomputed(router: Router, decisions, prompts, feasible=None):
    """What serving.endpoints._choice gives on the decisions' probabilities and the bundle's prices."""
    section = router.manifest.endpoints
    expected = np.array([[d.expected[n] for n in section.names] for d in decisions])
    cost, fits = call_costs(list(section.spec), [d.n_tokens for d in decisions], section.output_tokens)
    ok = fits if feasible is None else fits & feasible
    return expected, cost, ok


def test_the_bundle_is_one_graph_with_an_endpoints_section_checksummed_and_signed(trained, router):
    made, public = trained
    assert sorted(p.name for p in made.folder.iterdir()) == [
        "drift_reference.json",
        "manifest.json",
        "manifest.sig",
        "model.onnx",
        "tokenizer.json",
    ]
    manifest = router.manifest
    assert manifest.score.kind == "endpoints" and manifest.score.heads == NAMES
    assert manifest.endpoints.names == NAMES and manifest.endpoints.rule == "cheapest_within"
    assert manifest.endpoints.parameter == 0.02 and manifest.endpoints.output_tokens == 250
    assert set(manifest.files) == {"model.onnx", "tokenizer.json", "drift_reference.json"}
    assert manifest.novelty["in_model"] and manifest.novelty["policy"] == "edge_with_cloud_fallback"
    assert all(manifest.calibration[n]["in_model"] for n in NAMES)
    scorer = Scorer(read_bundle(made.folder, public_key=public))
    assert sorted(o.name for o in scorer.session.get_outputs()) == ["expected", "features", "novelty"]
    assert [o.name for o in scorer.session.get_inputs()] == ["input_ids", "attention_mask", "scalars"]
    assert made.parity <= 1e-5
    # The section is in the signed manifest: edited, the bundle no longer loads.
    tampered = json.loads((made.folder / "manifest.json").read_text())
    tampered["endpoints"]["choice"]["margin"] = 0.5
    copy = made.folder.parent / "tampered"
    shutil.copytree(made.folder, copy)
    (copy / "manifest.json").write_text(json.dumps(tampered))
    with pytest.raises(BundleError, match="manifest_sha256"):
        Router.load(copy, strict=True)


def test_the_graphs_expected_equals_the_training_heads_on_hard_strings(trained, router):
    made, _ = trained
    scorer = router._routing._scorer
    for precision in PRECISIONS:
        graph, _ = scorer.expected(HARD, [precision] * len(HARD))
        training = made.expected(HARD, [precision] * len(HARD))
        assert graph.shape == (len(HARD), 4)
        assert np.max(np.abs(graph - training)) <= 1e-5, precision
        one_by_one = np.concatenate([scorer.expected([p], [precision])[0] for p in HARD])
        assert np.max(np.abs(one_by_one - training)) <= 1e-5
    decision = router.route(HARD[3])
    assert list(decision.expected) == list(NAMES)
    assert decision.expected == pytest.approx(dict(zip(NAMES, made.expected([HARD[3]])[0])), abs=1e-5)


def test_decisions_are_endpoint_choices_on_those_probabilities(trained, router):
    import pandas as pd

    made, _ = trained
    logged = pd.read_json(made.folder.parent / "logs" / "rows.jsonl", lines=True)  # the bundle's kind of prompt
    simulated = logged["prompt"][:60].tolist()
    prompts = [*HARD, *TOPICS, *simulated]
    decisions = router.route_batch(prompts)
    expected, cost, ok = recomputed(router, decisions, prompts)
    first = cheapest_within(expected, cost, 0.02, ok)
    orders = escalation(expected, cost, first, ok)
    for d, k, order, prompt in zip(decisions, first, orders, prompts):
        assert d.endpoint == NAMES[k] and d.cascade == tuple(NAMES[i] for i in order)
        assert d.score == d.expected[d.endpoint] and d.p_edge is None and d.p_cloud is None
        device_first = d.endpoint == "phone-3b"
        assert d.target == ("edge" if device_first else "cloud")
        assert d.zone == ("cloud" if not device_first else "edge_with_cloud_fallback" if len(d.cascade) > 1 else "edge")
        assert router.route(prompt).to_dict() == d.to_dict()  # route() and route_batch() agree
    assert len({d.endpoint for d in decisions}) >= 2  # the rule does choose among them
    assert json.loads(json.dumps(decisions[0].to_dict()))["cascade"] == list(decisions[0].cascade)


@pytest.mark.parametrize("rule, parameter", [("best_under_price", 400.0), ("cascade", 0.15)])
def test_the_other_rules_decide_as_endpoint_choice_does(trained, tmp_path, rule, parameter):
    def edit(data):
        data["endpoints"]["choice"] = {
            "rule": rule,
            {"best_under_price": "price", "cascade": "start_margin"}[rule]: parameter,
        }

    router = Router.load(variant(trained, tmp_path, edit), strict=True, unfamiliar_policy="learned")
    decisions = router.route_batch(HARD)
    expected, cost, ok = recomputed(router, decisions, HARD)
    if rule == "cascade":
        orders = cascade(expected, cost, parameter, ok)
    else:
        orders = escalation(expected, cost, best_under_price(expected, cost, parameter, ok), ok)
    assert [d.cascade for d in decisions] == [tuple(NAMES[i] for i in o) for o in orders]
    assert [d.endpoint for d in decisions] == [NAMES[o[0]] for o in orders]


def policy(*rules) -> PolicySet:
    return PolicySet.from_dict({"rules": list(rules)}, endpoints=NAMES)


def test_forbidden_endpoints_are_never_chosen_nor_in_the_cascade(trained):
    made, public = trained
    router = Router.load(
        made.folder,
        strict=True,
        public_key=public,
        unfamiliar_policy="learned",
        policy=policy(
            {"name": "no-frontier", "when": {"metadata": {"tier": "free"}}, "then": "forbid", "endpoint": "frontier"}
        ),
    )
    free = router.route_batch(HARD, metadata=[{"tier": "free"}] * len(HARD))
    paid = router.route_batch(HARD, metadata=[{"tier": "paid"}] * len(HARD))
    assert any("frontier" in d.cascade for d in paid)
    allowed = np.array([[n != "frontier" for n in NAMES]] * len(HARD))
    expected, cost, ok = recomputed(router, free, HARD, allowed)
    first = cheapest_within(expected, cost, 0.02, ok)
    for d, order in zip(free, escalation(expected, cost, first, ok)):
        assert "frontier" not in d.cascade and d.forbidden == ("frontier",) and d.rule == "no-frontier"
        assert d.cascade == tuple(NAMES[i] for i in order)
        assert d.reason.startswith("policy 'no-frontier': forbids frontier; model: ")
    assert all(d.forbidden == () and d.rule is None for d in paid)


def test_force_and_prefer_and_nothing_left(trained):
    made, public = trained
    rules = policy(
        {"name": "private", "when": {"metadata": {"privacy": "local"}}, "then": "force", "endpoint": "phone-3b"},
        {"name": "legal", "when": {"matches": "lease"}, "then": "prefer", "endpoint": "cloud-mid"},
        {"name": "none-1", "when": {"metadata": {"x": "y"}}, "then": "forbid", "endpoint": "phone-3b"},
    )
    router = Router.load(made.folder, strict=True, public_key=public, policy=rules)
    forced = router.route("Draft a lease for my flat at 12 Baker St", metadata={"privacy": "local"})
    assert (forced.endpoint, forced.cascade, forced.zone, forced.target) == ("phone-3b", ("phone-3b",), "edge", "edge")
    assert forced.forbidden == ("onprem-8b", "cloud-mid", "frontier") and forced.rule == "private"
    preferred = router.route("Draft a lease termination clause")
    assert preferred.endpoint == "cloud-mid" and preferred.cascade[0] == "cloud-mid" and preferred.rule == "legal"
    with pytest.raises(NoFeasibleEndpoint, match="forces phone-3b, which policy 'none-1' forbids"):
        router.route("hello", metadata={"privacy": "local", "x": "y"})


def test_context_limits_make_endpoints_infeasible(trained, tmp_path):
    def edit(data):
        data["endpoints"]["endpoints"][0]["context_tokens"] = 10  # phone-3b
        data["endpoints"]["endpoints"][1]["context_tokens"] = 50  # onprem-8b

    router = Router.load(
        variant(trained, tmp_path, edit),
        strict=True,
        unfamiliar_policy="learned",
        policy=policy(
            {"name": "private", "when": {"metadata": {"privacy": "local"}}, "then": "force", "endpoint": "phone-3b"}
        ),
    )
    long = "Please review the following agreement carefully and list every obligation. " * 8
    d = router.route(long)
    assert d.n_tokens > 50 and not {"phone-3b", "onprem-8b"} & set(d.cascade)
    assert "exceed the context of phone-3b, onprem-8b" in d.reason
    short = router.route_batch(["hi", "2+2?", "ok"])
    expected, cost, ok = recomputed(router, short, ["hi", "2+2?", "ok"])
    assert ok.all() and [d.endpoint for d in short] == [NAMES[k] for k in cheapest_within(expected, cost, 0.02, ok)]
    with pytest.raises(NoFeasibleEndpoint, match="exceed the context of phone-3b"):
        router.route(long, metadata={"privacy": "local"})  # forced onto an endpoint it does not fit


def test_a_policy_must_name_the_bundles_endpoints(trained, tmp_path):
    made, public = trained
    two = PolicySet.from_dict({"rules": [{"name": "r", "then": "forbid", "endpoint": "cloud"}]})
    with pytest.raises(PolicyFileError, match="routes among phone-3b, onprem-8b, cloud-mid, frontier"):
        Router.load(made.folder, strict=True, public_key=public, policy=two)
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"rules": [{"name": "r", "then": "forbid", "endpoint": "frontier"}]}))
    loaded = Router.load(made.folder, strict=True, public_key=public, policy=path)  # read with the bundle's names
    assert loaded.route("hello").forbidden == ("frontier",)
    router = Router.load(made.folder, strict=True, public_key=public)
    with pytest.raises(PolicyFileError):
        router.policy = two
    router.policy = path  # the setter reads a path as load() does, with the bundle's names
    assert router.route("hello").forbidden == ("frontier",)


def test_scoring_failure_degrades_to_endpoints_by_price_with_the_policy_kept(trained, monkeypatch):
    made, public = trained
    router = Router.load(
        made.folder,
        strict=True,
        public_key=public,
        policy=policy({"name": "no-phone", "then": "forbid", "endpoint": "phone-3b"}),
    )

    def broken(*args, **kwargs):
        raise RuntimeError("onnxruntime fell over")

    monkeypatch.setattr(router._routing._scorer, "score", broken)
    d = router.route("What is 2 + 2?")
    assert d.degraded and d.expected is None and d.forbidden == ("phone-3b",)
    section = router.manifest.endpoints
    cost, _ = call_costs(list(section.spec), [d.n_tokens], section.output_tokens)
    by_price = sorted(NAMES[1:], key=lambda n: cost[0, NAMES.index(n)])
    assert d.cascade == tuple(by_price) and d.endpoint == by_price[0]
    assert "scoring failed" in d.reason


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda d: d["endpoints"]["endpoints"].reverse(),
            r"endpoints.endpoints: must name the model's heads in their order",
        ),
        (lambda d: d.pop("endpoints"), "endpoints: must be an object"),
        (lambda d: d["endpoints"]["choice"].update(rule="fastest"), "endpoints.choice.rule: must be one of"),
        (lambda d: d["endpoints"]["choice"].pop("margin"), r"endpoints.choice.margin: must be a finite number"),
        (lambda d: d["endpoints"].update(extra=1), "endpoints: has unknown key"),
        (lambda d: d["endpoints"]["endpoints"][2]["price"].update(per_call=-1), r"price.per_call must be >= 0"),
        (lambda d: d.update(thresholds={"default": {"lo": 0, "hi": 1}}), "thresholds: must be empty"),
        (lambda d: d["score"].update(outputs=["a", "b"]), "score.outputs: must name the one graph output"),
    ],
)
def test_a_bad_endpoints_section_is_a_clear_error(trained, tmp_path, edit, message):
    folder = variant(trained, tmp_path, edit)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_dict(json.loads((folder / "manifest.json").read_text()))
    with pytest.raises(BundleError, match=message):
        Router.load(folder, strict=True)
    assert Router.load(folder).degraded  # not strict: the rule table, with the reason


def test_heads_that_do_not_match_the_graph_are_refused(trained, tmp_path):
    def three(data):
        for key in ("heads",):
            data["score"][key] = data["score"][key][:3]
        data["endpoints"]["endpoints"] = data["endpoints"]["endpoints"][:3]
        data["calibration"].pop("frontier")

    with pytest.raises(BundleError, match="holds 4 endpoints' probabilities; the manifest lists 3"):
        Router.load(variant(trained, tmp_path, three), strict=True)


def test_an_endpoints_section_in_a_two_endpoint_manifest_is_refused(bundle, trained, tmp_path):
    folder = tmp_path / "two"
    shutil.copytree(bundle, folder)
    data = json.loads((folder / "manifest.json").read_text())
    data["endpoints"] = json.loads((trained[0].folder / "manifest.json").read_text())["endpoints"]
    data["manifest_sha256"] = manifest_digest(data)
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match="belongs to an endpoints bundle"):
        Router.load(folder, strict=True)


def test_make_endpoints_writes_a_bundle_of_the_head_mode_its_folds_chose(tmp_path, encoder_cache):
    from pipelines.endpoints import main

    main(
        n=1500,
        folds=3,
        out=tmp_path / "report",
        cache_dir=encoder_cache,
        bundle=tmp_path / "bundle",
        rule="best_under_price",
        budget_share=0.5,
    )
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    router = Router.load(tmp_path / "bundle", strict=True)
    section = router.manifest.endpoints
    assert section.names == NAMES and section.rule == "best_under_price" and section.parameter > 0
    assert section.extra["head_mode"]["mode"] == metrics["chosen_mode"]
    budget = section.extra["choice"]["budget"]
    assert section.extra["validation"]["expected_cost"] <= budget + 1e-12  # the price keeps it on validation rows
    assert router.route("What is 2 + 2?").endpoint in NAMES


def test_the_policy_watcher_reads_policies_for_the_bundles_endpoints(trained, tmp_path):
    from serving.bundle._watcher import PolicyWatcher

    made, public = trained
    router = Router.load(made.folder, strict=True, public_key=public)
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"rules": [{"name": "r", "then": "forbid", "endpoint": "frontier"}]}))
    watcher = PolicyWatcher(router, path)
    assert watcher.check_now().reloaded and router.route("hello").forbidden == ("frontier",)
    path.write_text(json.dumps({"rules": [{"name": "r", "then": "forbid", "endpoint": "cloud"}]}))
    kept = watcher.check_now()
    assert not kept.reloaded and "unknown endpoint 'cloud'; the endpoints are phone-3b, onprem-8b" in kept.reason
    assert router.route("hello").forbidden == ("frontier",)


def test_the_router_runs_its_decisions_cascade_over_named_endpoints(trained, tmp_path):
    """Router.execute / aexecute with endpoints=: route, then the decision's cascade (the first
    endpoint failing hands the request to the next), with the attempts and their expected cost."""
    import asyncio

    router = climbing(trained, tmp_path)
    # a prompt with tokens (a priced call costs something) whose cascade has a step to fall back to
    prompt = next(p for p in TOPICS + HARD if p.strip() and len(router.route(p).cascade) >= 2)
    first, second = router.route(prompt).cascade[:2]
    called: list[str] = []

    def answer(name: str, text: str) -> str:
        called.append(name)
        if name == first:
            raise ConnectionError("down")
        return f"{name}: ok"

    run = router.execute(prompt, endpoints={n: (lambda text, n=n: answer(n, text)) for n in NAMES})
    assert called == [first, second] and run.response == f"{second}: ok" and run.served_by == second
    assert [t.label() for t in run.tried] == [f"{first}=error:ConnectionError", f"{second}=served"]
    # each call priced at the prompt's tokens and the answer tokens the bundle's choice expected
    section = router.manifest.endpoints
    prices = [section.spec[name].call_cost(run.decision.n_tokens, section.output_tokens) for name in (first, second)]
    assert run.expected_cost == pytest.approx(sum(prices)) and run.expected_cost > 0

    def async_call(name: str):
        async def call(text: str) -> str:
            await asyncio.sleep(0)
            return answer(name, text)

        return call

    called.clear()
    done = asyncio.run(router.aexecute(prompt, endpoints={n: async_call(n) for n in NAMES}))
    assert done.response == f"{second}: ok" and called == [first, second]


def test_make_evaluate_scores_an_n_endpoint_bundle_on_the_rows_it_never_saw(trained, tmp_path):
    from evaluation.config import EvalConfig
    from pipelines.evaluate import run

    made, _ = trained
    config = EvalConfig(bundle=str(made.folder), out=str(tmp_path / "report"), mlflow=False)
    with pytest.raises(ValueError, match=r"is an N-endpoint bundle, whose manifest names no logs: give them"):
        run(config)
    assert not (tmp_path / "report").exists()  # refused before reading anything
    logs = made.folder.parent / "logs"
    result = run(EvalConfig(bundle=str(made.folder), logs=[str(logs)], out=str(tmp_path / "report"), mlflow=False))
    figures = result.metrics["figures"]
    assert figures["rows"] == figures["complete_rows"] == int(made.masks["test"].sum())  # fold 0's test rows
    assert sum(figures["shares"].values()) == pytest.approx(1.0) and figures["best_single"] == "frontier"
    # the bundle's own held-out figures, from the SDK's decisions: what training measured on the same rows
    assert figures["router"]["quality"] == pytest.approx(made.manifest.metrics["test"]["quality"], abs=0.02)
    assert 0.0 <= figures["unfamiliar_share"] < 0.1
    report = (tmp_path / "report" / "report.md").read_text()
    assert "the bundle's first endpoint" in report and "`frontier` alone (best single)" in report
    assert json.loads((tmp_path / "report" / "metrics.json").read_text())["setup"]["endpoints"] == list(NAMES)
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.evaluate",
            "--bundle",
            str(made.folder),
            "--logs",
            str(logs),
            "--out",
            str(tmp_path / "cli"),
            "--split",
            "val",
            "--set",
            "mlflow=false",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert printed.returncode == 0, printed.stderr
    assert "the bundle's first endpoint" in printed.stdout


def test_the_n_endpoint_report_of_no_decisions_shows_missing_figures_as_dashes():
    from evaluation.endpoints import bundle_figures
    from evaluation.report import render

    empty = np.empty((0, len(NAMES)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean share of no rows: NaN
        figures = bundle_figures(NAMES, [], empty, empty)
    setup = {"model_version": "v", "split": "test", "logs": ["logs"], "endpoints": list(NAMES)}
    report = render({"setup": setup, "figures": figures})
    assert "nan" not in report.lower()
    assert "First calls: `phone-3b` —, `onprem-8b` —" in report and "Unfamiliar prompts: —." in report


def test_unfamiliar_prompts_get_the_unfamiliar_policy_for_n_endpoints(trained):
    """edge_with_cloud_fallback for N endpoints: the cheapest device endpoint that may serve the prompt
    first, then the best expected of the others; the rule's cascade when no device endpoint may serve it
    (here: the policy forbids the only one); a prefer decides before it; familiar prompts as the rule
    decides them. rule_table: by price. serving.routing._chooser.Choice."""
    made, public = trained
    router = Router.load(made.folder, strict=True, public_key=public)
    learned = Router.load(made.folder, strict=True, public_key=public, unfamiliar_policy="learned")
    prompts = [*HARD, *TOPICS]
    decisions, kept = router.route_batch(prompts), learned.route_batch(prompts)
    assert 3 <= sum(d.unfamiliar for d in decisions) < len(prompts)
    for d, rule in zip(decisions, kept):
        if not d.unfamiliar:
            assert d.to_dict() == rule.to_dict()
            continue
        expected, cost, ok = recomputed(router, [d], [None])
        others = [k for k in range(1, len(NAMES)) if ok[0, k]]
        best = max(others, key=lambda k: (expected[0, k], -cost[0, k]))
        assert d.cascade == ("phone-3b", NAMES[best]) and d.checked == ("phone-3b",)  # the one device endpoint
        assert d.reason.startswith(
            f"unfamiliar prompt (novelty {d.novelty:.2f} > 1): the cheapest device endpoint first"
        )
        assert rule.cascade != d.cascade or rule.endpoint == "phone-3b"
    unfamiliar = next(p for p, d in zip(prompts, decisions) if d.unfamiliar)
    no_phone = policy({"name": "no-phone", "then": "forbid", "endpoint": "phone-3b"})
    forbidden = Router.load(made.folder, strict=True, public_key=public, policy=no_phone).route(unfamiliar)
    by_rule = Router.load(
        made.folder, strict=True, public_key=public, policy=no_phone, unfamiliar_policy="learned"
    ).route(unfamiliar)
    assert forbidden.cascade == by_rule.cascade and "no device endpoint may serve it" in forbidden.reason
    prefer = policy({"name": "mid", "then": "prefer", "endpoint": "cloud-mid"})
    preferred = Router.load(made.folder, strict=True, public_key=public, policy=prefer).route(unfamiliar)
    assert preferred.cascade[0] == "cloud-mid" and preferred.unfamiliar and preferred.rule == "mid"
    ruled = Router.load(made.folder, strict=True, public_key=public, unfamiliar_policy="rule_table").route(unfamiliar)
    section = router.manifest.endpoints
    cost, _ = call_costs(list(section.spec), [ruled.n_tokens], section.output_tokens)
    assert ruled.endpoint == NAMES[int(np.argmin(cost[0]))] and "by price" in ruled.reason
