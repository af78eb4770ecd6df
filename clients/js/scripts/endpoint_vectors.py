"""The Python SDK's decisions on an N-endpoint bundle (docs/endpoints.md#n-endpoint-bundles), as
JSON, so that the JS SDK can be held to them (clients/js/test/endpoint-parity.test.js):

    .venv/bin/python clients/js/scripts/endpoint_vectors.py --bundle DIR --out FILE

The bundle is one `make endpoints ARGS="--bundle DIR ..."` wrote. The prompts: the simulator's
prompts (what such a bundle is trained on; a fresh draw, seed 7), pipelines/vectors.py's hard and
random cases, and prompts longer than some or every endpoint's context; each routed with every
precision, under each choice rule: the bundle's own and the two others (the same bundle with its
manifest's `choice` edited and re-digested, unsigned: `variants` holds each manifest's text, so
the other runtime loads exactly these bytes). A prompt no endpoint may serve is written with the
NoFeasibleEndpoint's message instead of a decision. `manifests`: the bundle's manifest edited in
ways the SDK must refuse (and one it must accept), with the Python SDK's verdict. `degraded`: the chooser's decisions by price
(what the SDK decides when the graph fails), with their note, on the same prompts. `unfamiliar`: the
prompts the bundle finds unfamiliar (novelty above 1 at some precision), routed with every precision
by the bundle loaded with each other unfamiliar policy (Router.load(unfamiliar_policy=...): the
bundle's own one is the decisions' above): rule_table (by price) and learned (the rule's cascade).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

PRECISIONS = (None, "exact", "standard", "tolerant")
UNFAMILIAR_POLICIES = ("edge_with_cloud_fallback", "rule_table", "learned")  # serving.scoring._novelty's
# The rules' parameters for the variants (the bundle's own rule keeps its trained parameter).
VARIANT_PARAMETERS = {"cheapest_within": 0.05, "best_under_price": 20.0, "cascade": 0.15}
DEGRADED_NOTE = "degraded: scoring failed: RuntimeError('vectors')"
FORMAT = 1


def simulated_prompts(n: int = 400, seed: int = 7) -> list[str]:
    """Distinct prompts of a fresh simulation of the default four-endpoint spec."""
    from data.endpoint_logs import read_endpoint_logs
    from data.simulator_endpoints import load_simulation, write_simulation

    sim = load_simulation(None)
    with tempfile.TemporaryDirectory(prefix="endpoint-vectors-") as folder:
        write_simulation(Path(folder) / "logs", sim, n, seed=seed)
        frame, _ = read_endpoint_logs([Path(folder) / "logs"], sim.names)
    return list(dict.fromkeys(frame["prompt"].tolist()))


def long_prompts() -> list[tuple[str, str]]:
    """Prompts over some endpoints' context limits, and one over every limit."""
    return [
        ("over_4k", "word " * 5000),
        ("over_8k", "tell me, " * 6000),
        ("over_128k", "word " * 150_000),
        ("over_all", "word " * 260_000),
    ]


def variant(bundle: Path, folder: Path, rule: str, parameter: float) -> str:
    """`bundle` copied into `folder` with its choice rule set, re-digested and unsigned; its manifest text."""
    from serving.bundle._bundle import manifest_digest

    shutil.copytree(bundle, folder)
    (folder / "manifest.sig").unlink(missing_ok=True)
    data = json.loads((folder / "manifest.json").read_text())
    choice = data["endpoints"]["choice"]
    data["endpoints"]["choice"] = {
        **{k: v for k, v in choice.items() if k not in ("rule", "margin", "price", "start_margin")},
        "rule": rule,
        VARIANT_KEY[rule]: parameter,
    }
    data["manifest_sha256"] = manifest_digest(data)
    text = json.dumps(data, indent=2)
    (folder / "manifest.json").write_text(text)
    return text


VARIANT_KEY = {"cheapest_within": "margin", "best_under_price": "price", "cascade": "start_margin"}


def _drop_last_endpoint(data: dict) -> None:
    last = data["score"]["heads"].pop()
    data["endpoints"]["endpoints"].pop()
    del data["calibration"][last]


MANIFEST_EDITS = {
    "unknown_key": lambda d: d["endpoints"].update(colour="red"),
    "heads_reordered": lambda d: d["score"].update(heads=d["score"]["heads"][::-1]),
    "bad_where": lambda d: d["endpoints"]["endpoints"][0].update(where="edge"),
    "bad_price": lambda d: d["endpoints"]["endpoints"][1].update(price={"per_call": -1}),
    "unknown_rule": lambda d: d["endpoints"].update(choice={"rule": "random"}),
    "missing_parameter": lambda d: d["endpoints"].update(choice={"rule": "cascade", "margin": 0.1}),
    "negative_parameter": lambda d: d["endpoints"].update(choice={"rule": "best_under_price", "price": -1}),
    "negative_output_tokens": lambda d: d["endpoints"].update(output_tokens=-5),
    "thresholds": lambda d: d.update(thresholds={"default": {"lo": 0.3, "hi": 0.6}}),
    "no_section": lambda d: d.pop("endpoints"),
    "two_outputs": lambda d: d["score"].update(outputs=["expected", "features"]),
    "no_heads": lambda d: d["score"].update(heads=[]),
    "graph_wider_than_heads": _drop_last_endpoint,
    "calibration_outside": lambda d: d["calibration"].update(
        {d["score"]["heads"][0]: {"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 1.0]}}
    ),
    "description_kept": lambda d: d["endpoints"]["choice"].update(note="kept as written"),
}


def manifest_cases(bundle: Path, tmp: Path) -> list[dict]:
    """Each edit of MANIFEST_EDITS applied to the bundle's manifest (re-digested, unsigned), with
    what the Python SDK's strict load says of it: None when it loads, else its error message."""
    from serving import BundleError, Router
    from serving.bundle._bundle import manifest_digest

    cases = []
    for name, edit in MANIFEST_EDITS.items():
        folder = tmp / f"edit-{name}"
        shutil.copytree(bundle, folder)
        (folder / "manifest.sig").unlink(missing_ok=True)
        data = json.loads((folder / "manifest.json").read_text())
        edit(data)
        data["manifest_sha256"] = manifest_digest(data)
        text = json.dumps(data, indent=2)
        (folder / "manifest.json").write_text(text)
        try:
            Router.load(folder, strict=True)
            error = None
        except BundleError as exc:
            error = str(exc)
        cases.append({"edit": name, "manifest_text": text, "error": error})
    return cases


def decide(router, prompt: str, precision: str | None) -> dict:
    from serving.policy import NoFeasibleEndpoint

    try:
        return {"decision": router.route(prompt, precision=precision).to_dict()}
    except NoFeasibleEndpoint as error:
        return {"error": "NoFeasibleEndpoint", "message": str(error)}


def main() -> None:
    from pipelines.vectors import checked_round_trip, fuzz_cases, hard_cases
    from serving import Router
    from serving.bundle._bundle import read_bundle
    from serving.scoring._scorer import Scores
    from serving.routing._request import Request

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True, help="an N-endpoint bundle (make endpoints --bundle)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    manifest = read_bundle(args.bundle).manifest
    section = manifest.endpoints
    if section is None:
        raise SystemExit(f"{args.bundle} is not an N-endpoint bundle (its manifest has no endpoints section)")
    cases = [(f"sim_{i:03d}", p) for i, p in enumerate(simulated_prompts())]
    cases += hard_cases() + fuzz_cases(100) + long_prompts()
    cases = checked_round_trip(cases)
    rules = {section.rule: section.parameter, **{r: p for r, p in VARIANT_PARAMETERS.items() if r != section.rule}}

    variants, decisions = [], []
    with tempfile.TemporaryDirectory(prefix="endpoint-vectors-") as tmp:
        for index, (rule, parameter) in enumerate(rules.items()):
            own = rule == section.rule
            folder = args.bundle if own else Path(tmp) / rule
            text = None if own else variant(args.bundle, folder, rule, parameter)
            variants.append({"rule": rule, "parameter": parameter, "manifest_text": text})
            router = Router.load(folder, strict=True)
            for case, (_, prompt) in enumerate(cases):
                for precision in PRECISIONS:
                    decisions.append(
                        {"variant": index, "case": case, "precision": precision, **decide(router, prompt, precision)}
                    )
        router = Router.load(args.bundle, strict=True)
        routing = router._routing
        prompts = [p for _, p in cases if len(p) < 100_000]
        counts = [routing._rules.count_tokens(p) for p in prompts]
        degraded = routing.chooser.decisions([Request(p) for p in prompts], Scores(counts, note=DEGRADED_NOTE))
        manifests = manifest_cases(args.bundle, Path(tmp))

    own_policy = manifest.novelty.get("policy") if manifest.novelty else None
    strange = sorted({d["case"] for d in decisions if d["variant"] == 0 and d.get("decision", {}).get("unfamiliar")})
    unfamiliar = []
    for policy in (p for p in UNFAMILIAR_POLICIES if p != own_policy):
        router = Router.load(args.bundle, strict=True, unfamiliar_policy=policy)
        for case in strange:
            for precision in PRECISIONS:
                unfamiliar.append({"policy": policy, "case": case, "precision": precision, **decide(router, cases[case][1], precision)})

    document = {
        "format": FORMAT,
        "bundle": {"manifest_sha256": manifest.manifest_sha256, "model_version": manifest.model_version},
        "endpoints": list(section.names),
        "cases": [{"id": case_id, "prompt": prompt} for case_id, prompt in cases],
        "variants": variants,
        "decisions": decisions,
        "manifests": manifests,
        "degraded": {"note": DEGRADED_NOTE, "prompts": prompts, "decisions": [d.to_dict() for d in degraded]},
        "unfamiliar": {"bundle_policy": own_policy, "decisions": unfamiliar},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document))
    errors = sum("error" in d for d in decisions)
    print(
        f"wrote {args.out}: {len(cases)} prompts x {len(PRECISIONS)} precisions x {len(variants)} rules "
        f"({len(decisions)} decisions, {errors} NoFeasibleEndpoint), {len(degraded)} degraded decisions, "
        f"{len(unfamiliar)} decisions of {len(strange)} unfamiliar prompts under the other unfamiliar policies"
    )


if __name__ == "__main__":
    main()
