"""A policy on N-endpoint logs (`make endpoints ARGS="--policy FILE"`, evaluation.rules_effect,
docs/endpoints.md#policies-on-n-endpoint-logs): on a small simulated four-endpoint log whose rows
carry request metadata (data/endpoints/four.yaml, 500 rows, 3 prompt-hash folds, separate heads),
per-rule counts equal the rows each rule applies to, a forbidden endpoint gets no first call, a
force by metadata forces every such row, rows left no endpoint are counted and left out of the
figures, and a bad policy file or --metadata fails first, naming the file and the problem."""

from __future__ import annotations

import json

import pytest
import typer

from data.endpoint_logs import check_endpoint_row, read_endpoint_logs
from data.schema import RowError
from data.simulator_endpoints import ROWS_FILE, load_simulation, write_simulation
from evaluation.rules_effect import policy_effect
from serving.policy._rules import PolicySet

N, FOLDS = 500, 3
EMAIL = " Please reply to ana.silva@empresa.com.br."


def tier(i: int) -> str:
    return "free" if i % 3 == 0 else "pro"


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """The simulated log, every row's metadata `tier` free (one in three) or pro, and an e-mail
    address in one prompt in five; the last row carries no metadata."""
    folder = tmp_path_factory.mktemp("policy-logs")
    write_simulation(folder, load_simulation(None), N, seed=3)
    path = folder / ROWS_FILE
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for i, row in enumerate(rows[:-1]):
        row["metadata"] = {"tier": tier(i)}
        if i % 5 == 0:
            row["prompt"] += EMAIL
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return folder


RUN_POLICY = {
    "rules": [
        {"name": "free-no-frontier", "when": {"metadata": {"tier": "free"}}, "then": "forbid", "endpoint": "frontier"},
        {"name": "long-to-mid", "when": {"min_tokens": 40}, "then": "prefer", "endpoint": "cloud-mid"},
    ]
}


@pytest.fixture(scope="module")
def run(logs, encoder_cache, tmp_path_factory):
    """`make endpoints --data LOGS --folds 3 --policy P` once (the file's one training): its
    metrics.json's `policy`, the policy file, and each fold's held-out rows as it built them
    (pipelines.endpoints.policy_folds on the folds' fits, recorded as the command ran), on which
    the tests below try other policies."""
    import training.endpoints
    from evaluation.endpoints import Choosers
    from pipelines.endpoints import main, policy_folds
    from training.endpoints import EndpointRows

    folder = tmp_path_factory.mktemp("policy-run")
    path = folder / "policy.json"
    path.write_text(json.dumps(RUN_POLICY))
    fits: list = []
    results: list = []
    fit_folds = training.endpoints.cross_validate_endpoints

    def recording(*args, on_fold, **kwargs):
        def both(fit):
            fits.append(fit)
            on_fold(fit)

        results.append(fit_folds(*args, on_fold=both, **kwargs))
        return results[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training.endpoints, "cross_validate_endpoints", recording)
        main(data=[str(logs)], folds=FOLDS, cache_dir=encoder_cache, out=folder / "out", policy=path, metadata=None)
    sim = load_simulation(None)
    frame, rejects = read_endpoint_logs([logs], sim.names)
    assert not rejects
    held = policy_folds(
        EndpointRows.from_frame(frame, sim.names),
        fits,
        results[0]["per_fold"],
        sim.endpoints,
        mode=results[0]["chosen_mode"],
        rule="cheapest_within",
        choosers=Choosers(),
        output_tokens=sim.output_tokens,
        metadata=frame["metadata"].tolist(),
    )
    report = json.loads((folder / "out" / "metrics.json").read_text())["policy"]
    return report, path, held


@pytest.fixture(scope="module")
def held_out(run):
    return run[2]


def policy(*rules) -> PolicySet:
    return PolicySet.from_dict({"rules": list(rules)}, endpoints=load_simulation(None).names)


def held_out_rows(held_out) -> int:
    return sum(len(fold.prompts) for fold in held_out)


def free_rows(held_out) -> int:
    return sum(1 for fold in held_out for m in fold.metadata if m and m["tier"] == "free")


def test_rows_carry_their_metadata_and_bad_metadata_is_a_reject(logs):
    frame, _ = read_endpoint_logs([logs], load_simulation(None).names)
    assert frame["metadata"].iloc[0] == {"tier": "free"} and frame["metadata"].iloc[-1] is None
    names = ("small", "big")
    row = {"prompt": "hi", "outcomes": {"small": 1, "big": 0}}
    assert check_endpoint_row({**row, "metadata": '{"team": "legal"}'}, names, default_source="x")["metadata"] == {
        "team": "legal"
    }
    for bad, message in [
        ({**row, "metadata": {"tier": 3}}, r"metadata.tier must be text \(request metadata is str to str\), got 3"),
        ({**row, "metadata": ["free"]}, r"metadata must be an object \{key: text\}, got list"),
        ({**row, "metadata": "{"}, "metadata is not a JSON object"),
    ]:
        with pytest.raises(RowError, match=message):
            check_endpoint_row(bad, names, default_source="x")


def test_a_forbidden_endpoint_gets_no_first_call_and_its_rule_counts_the_rows_it_applies_to(held_out):
    everywhere = policy({"name": "no-frontier", "then": "forbid", "endpoint": "frontier"})
    effect = policy_effect(held_out, everywhere)
    rows = held_out_rows(held_out)
    assert effect["rows"] == rows == effect["servable_rows"]
    assert effect["rules"]["no-frontier"]["rows"] == rows
    assert effect["shares"]["without_rules"]["frontier"] > 0.2  # the model sends many rows there
    assert effect["shares"]["with_rules"]["frontier"] == 0.0
    assert effect["rules"]["no-frontier"]["first_endpoint_changed"] > 0
    # the frontier is the priciest endpoint: forbidding it costs less
    assert effect["figures"]["cost"]["interval"][1] < 0

    free_only = policy(
        {"name": "free-no-frontier", "when": {"metadata": {"tier": "free"}}, "then": "forbid", "endpoint": "frontier"}
    )
    effect = policy_effect(held_out, free_only)
    assert effect["rules"]["free-no-frontier"]["rows"] == free_rows(held_out) > 0
    assert effect["no_rule"] == rows - free_rows(held_out)
    assert 0 < effect["shares"]["with_rules"]["frontier"] < effect["shares"]["without_rules"]["frontier"]


def test_a_force_by_metadata_forces_every_row_with_that_metadata(held_out):
    force = policy(
        {"name": "free-on-phone", "when": {"metadata": {"tier": "free"}}, "then": "force", "endpoint": "phone-3b"}
    )
    effect = policy_effect(held_out, force)
    free = free_rows(held_out)
    assert effect["rules"]["free-on-phone"]["rows"] == free
    rows = effect["servable_rows"]
    forced_share = effect["shares"]["with_rules"]["phone-3b"] - effect["shares"]["without_rules"]["phone-3b"]
    # every free row now starts on the phone: the phone gains exactly the free rows that did not before
    assert round(forced_share * rows) == effect["rules"]["free-on-phone"]["first_endpoint_changed"] > 0
    # the metadata given on the command line lies over every row's own: every row is forced
    everyone = policy_effect(held_out, force, metadata={"tier": "free"})
    assert everyone["rules"]["free-on-phone"]["rows"] == held_out_rows(held_out)
    assert everyone["shares"]["with_rules"]["phone-3b"] == 1.0
    assert everyone["figures"]["cost"]["with_rules"] == 0.0  # the phone's calls are free


def test_a_detector_rule_reads_each_rows_prompt(held_out):
    pii = policy({"name": "pii-on-phone", "when": {"detected": ["email"]}, "then": "force", "endpoint": "phone-3b"})
    effect = policy_effect(held_out, pii)
    with_email = sum(1 for fold in held_out for p in fold.prompts if p.endswith(EMAIL))
    assert effect["rules"]["pii-on-phone"]["rows"] == with_email > 0


def test_rows_left_no_endpoint_are_counted_by_rule_and_left_out_not_scored(held_out):
    clash = policy(
        {"name": "free-on-phone", "when": {"metadata": {"tier": "free"}}, "then": "force", "endpoint": "phone-3b"},
        {"name": "free-no-phone", "when": {"metadata": {"tier": "free"}}, "then": "forbid", "endpoint": "phone-3b"},
    )
    effect = policy_effect(held_out, clash)
    free, rows = free_rows(held_out), held_out_rows(held_out)
    closed = effect["no_feasible_endpoint"]
    assert closed["rows"] == free and closed["by_rules"] == {"free-on-phone + free-no-phone": free}
    assert closed["share"] == pytest.approx(free / rows)
    assert effect["rules"]["free-on-phone"]["no_feasible_endpoint"] == free
    assert effect["rules"]["free-no-phone"]["no_feasible_endpoint"] == free
    assert effect["servable_rows"] == rows - free
    # the other rows route as without the policy: had the closed rows been scored 0 (or sent to
    # another endpoint), quality with the rules would differ from quality without them
    assert effect["shares"]["with_rules"] == pytest.approx(effect["shares"]["without_rules"], abs=1e-12)
    for figure in effect["figures"].values():
        assert figure["difference"] == pytest.approx(0.0, abs=1e-12)
    assert effect["figures"]["quality"]["with_rules"] > 0.5


def test_make_endpoints_reports_the_policy_in_metrics_json(run):
    report, path, held = run
    assert report["source"] == str(path) and report["choice_rule"] == "cheapest_within"
    assert report["rows"] == report["servable_rows"] == N  # every simulated row is held out once
    assert report["rows_with_metadata"] == N - 1
    assert report["rules"]["free-no-frontier"]["rows"] == sum(1 for i in range(N - 1) if tier(i) == "free")
    assert report["shares"]["with_rules"]["frontier"] < report["shares"]["without_rules"]["frontier"]
    for figure in ("quality", "cost"):
        assert report["figures"][figure]["folds_interval"]["n"] == FOLDS
        low, high = report["figures"][figure]["interval"]
        assert low <= report["figures"][figure]["difference"] <= high
    # what the command reported is what its folds give (the tests below use the same folds)
    again = policy_effect(held, PolicySet.load(path, endpoints=load_simulation(None).names))
    assert again["rules"] == report["rules"]
    for side in ("without_rules", "with_rules"):
        assert again["shares"][side] == pytest.approx(report["shares"][side])


@pytest.mark.parametrize(
    "document, message",
    [
        ("{", "is not valid JSON"),
        (
            json.dumps({"rules": [{"name": "x", "then": "forbid", "endpoint": "gpt-9"}]}),
            r"rules\[0\] \('x'\), key 'endpoint': unknown endpoint 'gpt-9'; the endpoints are phone-3b, onprem-8b",
        ),
        (
            json.dumps({"rules": [{"name": "x", "then": "route", "zone": "cloud"}]}),
            r"route sets a zone of the two-endpoint router \(edge, cloud\); use prefer",
        ),
    ],
)
def test_a_bad_policy_file_fails_first_naming_the_file_and_the_problem(tmp_path, document, message):
    from pipelines.endpoints import main

    path = tmp_path / "policy.json"
    path.write_text(document)
    with pytest.raises(typer.BadParameter, match=message) as error:
        main(out=tmp_path / "out", policy=path, metadata=None)
    assert str(path) in str(error.value)
    assert not (tmp_path / "out").exists()  # nothing simulated or fitted


def test_bad_metadata_or_metadata_without_a_policy_fails_first(tmp_path):
    from pipelines.endpoints import main

    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"rules": []}))
    with pytest.raises(typer.BadParameter, match="--metadata expects KEY=VALUE, got 'free'"):
        main(out=tmp_path / "out", policy=path, metadata=["free"])
    with pytest.raises(typer.BadParameter, match="give --policy FILE too"):
        main(out=tmp_path / "out", policy=None, metadata=["tier=free"])
    assert not (tmp_path / "out").exists()


def test_no_held_out_rows_is_an_error():
    with pytest.raises(ValueError, match="at least one fold"):
        policy_effect([], policy())
