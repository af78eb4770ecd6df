"""route() of this SDK against an earlier one, in one run (`make bench AGAINST=<commit>`).

The earlier SDK is `git archive <commit> serving`, unpacked beside the run; each version times
route() in its own process (one Python cannot import two `serving` packages), in rounds that
alternate the versions, so that both see the same load from the rest of the machine. Each round
takes every case's p50 over `repeat` calls; a version's figure is the median of its rounds, and
the difference is paired by round (this minus the other, with the rounds' range). Cases: prompts
of ~16 and ~128 tokens, each without a policy and with pipelines.bench's 20-rule policy (metadata
that matches no rule, as an app passes it). Writes bench/versions.json.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = """
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


def unpack(commit: str, folder: Path) -> Path:
    """The `serving` package at `commit`, from git, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "serving"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def round_of(root: Path, request: dict) -> dict[str, float]:
    run = subprocess.run(
        [sys.executable, "-c", WORKER],
        input=json.dumps({**request, "root": str(root)}),
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )
    if run.returncode:
        raise SystemExit(f"route() timing of the SDK in {root} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout)


def compare(bundle: Path, commit: str, *, rounds: int = 6, repeat: int = 2000) -> dict:
    """Each case's route() p50 (us) for this SDK and the one at `commit` (module doc)."""
    from pipelines.bench import POLICY_20, prompt_of
    from serving import Router

    tokenizer = Router.load(bundle, strict=True).stages.scorer.extractor.tokenizer.full
    metadata = {"user_tier": "pro", "feature": "chat"}
    cases = [
        {
            "name": f"{n}_tokens{'_policy_20' if policy else ''}",
            "prompt": prompt_of(tokenizer, n),
            "policy": policy,
            "metadata": metadata,
        }
        for n in (16, 128)
        for policy in (False, True)
    ]
    with tempfile.TemporaryDirectory(prefix="bench-versions-") as tmp:
        policy = Path(tmp) / "policy.json"
        policy.write_text(json.dumps(POLICY_20))
        request = {"bundle": str(bundle.resolve()), "cases": cases, "repeat": repeat, "policy": str(policy)}
        roots = {"this": ROOT, commit: unpack(commit, Path(tmp) / "old")}
        seen: dict[str, list[dict[str, float]]] = {name: [] for name in roots}
        for index in range(rounds):
            order = list(roots) if index % 2 == 0 else list(roots)[::-1]
            for name in order:
                seen[name].append(round_of(roots[name], request))
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
    bundle: Path, against: str, out: Path = Path("bench/versions.json"), rounds: int = 6, repeat: int = 2000
) -> None:
    results = compare(bundle, against, rounds=rounds, repeat=repeat)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    for case, figure in results["cases"].items():
        difference = figure["paired_difference_us"]
        print(
            f"{case}: this {figure['this_p50_us']:.1f} us, {against} {figure[f'{against}_p50_us']:.1f} us; paired "
            f"difference {difference['median']:+.1f} us (rounds {difference['min']:+.1f} .. {difference['max']:+.1f})"
        )
    print(f"written to {out}")


if __name__ == "__main__":
    import typer

    typer.run(main)
