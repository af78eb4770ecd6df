"""Drift (serving.monitoring._drift, make drift): the statistics on known distributions, the thresholds, the
reference a bundle carries, bundles without one, bad input, the simulator's mixes, and the
done-criterion: a small bundle trained on simulated logs, prompts of the same mix routed through
the SDK with an OutcomeLog read as stable, prompts of a shifted mix as retrain."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from data.simulator import DifficultyModel, generate_rows, parse_mix
from serving.bundle._bundle import BundleError, manifest_digest, read_bundle
from serving.monitoring._drift import (
    DRIFT_REFERENCE_FILE,
    Distribution,
    DriftInputError,
    DriftReference,
    DriftThresholds,
    drift_report,
    ks_test,
    psi,
    read_records,
    rescore,
)
from serving.monitoring._outcome_log import LOG_FORMAT, OutcomeLog
from tests.conftest import QUICK_ACCEPTANCE_ROUNDS, ROOT, config_for

SAME = DifficultyModel()
# A shifted app: mostly finance and medical questions, and harder task forms (proofs, code).
SHIFTED = DifficultyModel(
    domain_mix=parse_mix("finance=0.6,medical=0.3"), task_mix=parse_mix("prove=0.5,code=0.3", "task")
)
ROUTED = 600


# The statistics.
def test_psi_of_known_share_vectors():
    assert psi([0.5, 0.5], [0.5, 0.5]) == 0.0
    # (0.25 - 0.5) ln(0.25 / 0.5) + (0.75 - 0.5) ln(0.75 / 0.5)
    assert psi([0.5, 0.5], [0.25, 0.75]) == pytest.approx(0.25 * np.log(2) + 0.25 * np.log(1.5))
    floored = 0.5 * np.log(2) + (0.5 - 1e-4) * np.log(0.5 / 1e-4)  # the empty bin counts as 1e-4
    assert psi([0.5, 0.5], [1.0, 0.0]) == pytest.approx(floored)
    with pytest.raises(ValueError, match="shapes"):
        psi([0.5, 0.5], [1.0])


def test_psi_of_normal_samples_grows_with_the_shift():
    """For two normals one sd apart, PSI (a symmetrised KL divergence) is about the squared shift:
    deciles see a little less of it."""
    rng = np.random.default_rng(0)
    reference = Distribution.of(rng.normal(0, 1, 20_000))
    assert reference.cuts == pytest.approx(np.quantile(rng.normal(0, 1, 200_000), np.arange(1, 10) / 10), abs=0.05)
    same, small, large = (psi(reference.shares, reference.shares_of(rng.normal(m, 1, 20_000))) for m in (0, 0.2, 1))
    assert same < 0.005
    assert 0.02 < small < 0.06  # 0.2 ** 2 = 0.04
    assert 0.7 < large < 1.0  # 1 ** 2 = 1


def test_ks_against_the_reference_quantiles_matches_the_two_sample_test():
    from scipy.stats import ks_2samp

    rng = np.random.default_rng(1)
    for shift in (0.0, 0.15, 0.5):
        ref, cur = rng.normal(0, 1, 5_000), rng.normal(shift, 1, 800)
        d, p = ks_test(Distribution.of(ref).quantiles, len(ref), cur)
        exact = ks_2samp(ref, cur, method="asymp")
        assert d == pytest.approx(exact.statistic, abs=0.01)
        assert p == pytest.approx(exact.pvalue, abs=0.05, rel=0.5)


def test_thresholds_are_checked():
    for bad in (
        dict(psi_watch=0.3, psi_retrain=0.2),
        dict(psi_watch=0),
        dict(rate_watch=0.2, rate_retrain=0.1),
        dict(ks_alpha=1.5),
        dict(min_records=0),
    ):
        with pytest.raises(ValueError):
            DriftThresholds(**bad)


# Reports on records made by hand.
def reference_of(rng, n=2_000) -> DriftReference:
    scores = rng.normal(0, 0.2, n)
    return DriftReference.build(
        model_version="m1",
        score=scores,
        precisions=["exact", "standard", None, "tolerant"] * (n // 4),
        zones=np.where(scores > 0.2, "cloud", np.where(scores < -0.1, "edge", "edge_with_cloud_fallback")),
        prompt_chars=rng.integers(20, 400, n),
        novelty=rng.uniform(0, 1.05, n),
        edge_quality=(rng.random(n) > 0.2).astype(float),
    )


def records_of(rng, n, *, shift=0.0, version="m1", edge_failure=0.2):
    out = []
    for i, score in enumerate(rng.normal(shift, 0.2, n)):
        zone = "cloud" if score > 0.2 else "edge" if score < -0.1 else "edge_with_cloud_fallback"
        out.append(
            {
                "log": LOG_FORMAT,
                "type": "request",
                "request_id": f"r{i}",
                "model_version": version,
                "prompt": "x" * int(rng.integers(20, 400)),
                "precision": ["exact", "standard", None, "tolerant"][i % 4],
                "score": float(score),
                "zone": zone,
                "novelty": float(rng.uniform(0, 1.05)),
                "edge_quality": None,
            }
        )
        out.append(
            {
                "log": LOG_FORMAT,
                "type": "feedback",
                "request_id": f"r{i}",
                "edge_quality": float(rng.random() > edge_failure),
            }
        )
    return out


def test_verdicts_follow_the_thresholds():
    rng = np.random.default_rng(2)
    reference = reference_of(rng)
    stable = drift_report(reference, records_of(rng, 1_000))
    assert stable.verdict == "stable", stable.reason
    checks = {(c.name, c.statistic): c for c in stable.checks}
    assert set(checks) >= {("score", "psi"), ("score", "ks"), ("novelty", "psi"), ("prompt_chars", "psi")}
    assert {("precision", "psi"), ("zone", "psi"), ("unfamiliar", "change"), ("edge_failure", "change")} <= set(checks)
    # p_edge, p_cloud, n_tokens: neither side has them, so no check
    assert not {name for name, _ in checks} & {"p_edge", "p_cloud", "n_tokens"}

    shifted = drift_report(reference, records_of(rng, 1_000, shift=0.25))  # 1.25 sd
    assert shifted.verdict == "retrain"
    assert {c.status for c in shifted.checks if c.name == "score"} == {"retrain", "watch"}  # psi, ks
    # the same shift under looser thresholds only says watch (KS says watch at most)
    loose = DriftThresholds(psi_watch=0.2, psi_retrain=5.0, rate_retrain=0.5)
    assert drift_report(reference, records_of(rng, 1_000, shift=0.25), loose).verdict == "watch"

    failing = drift_report(reference, records_of(rng, 1_000, edge_failure=0.5))
    edge = next(c for c in failing.checks if c.name == "edge_failure")
    assert edge.status == "retrain" and edge.reference == pytest.approx(0.2, abs=0.03)
    assert edge.current == pytest.approx(0.5, abs=0.06) and failing.verdict == "retrain"


def test_as_dict_has_the_shape_the_dashboard_renders():
    rng = np.random.default_rng(3)
    report = drift_report(reference_of(rng), records_of(rng, 300)).as_dict()
    assert {"verdict", "checks", "reason", "records", "reference", "thresholds"} <= set(report)
    assert report["verdict"] in ("stable", "watch", "retrain") and report["reference"] == "present"
    for check in report["checks"]:
        assert {"name", "statistic", "value", "status"} <= set(check)
    json.dumps(report)  # JSON as is


def test_too_few_records_skip_the_checks_with_a_note():
    rng = np.random.default_rng(4)
    report = drift_report(reference_of(rng), records_of(rng, 20))
    assert report.verdict == "unknown"
    assert {c.status for c in report.checks} == {"skipped"}
    assert all(c.value is None and "needed" in c.note for c in report.checks)


def test_records_of_another_bundle_version_are_compared_on_what_does_not_depend_on_it():
    rng = np.random.default_rng(5)
    report = drift_report(reference_of(rng), records_of(rng, 500, shift=0.5, version="m0"))
    assert report.compared == 0 and "another bundle version" in report.reason
    statuses = {c.name: c.status for c in report.checks}
    assert statuses["score"] == statuses["zone"] == "skipped"
    assert statuses["precision"] == statuses["prompt_chars"] == "stable"


def test_reference_round_trips_and_bad_references_are_refused():
    reference = reference_of(np.random.default_rng(6))
    again = DriftReference.from_bytes(reference.to_bytes())
    assert again == reference
    data = reference.to_dict()
    for broken, message in (
        ({**data, "format": "other"}, "not a drift reference"),
        ({**data, "numeric": {"score": {"cuts": [1, 0], "shares": [1, 0, 0], "quantiles": [0], "n": 3}}}, "increasing"),
        ({**data, "rates": {"unfamiliar": {"value": 2, "n": 3}}}, r"\[0, 1\]"),
        ({**data, "numeric": {"colour": {}}}, "unknown"),
    ):
        with pytest.raises(DriftInputError, match=message):
            DriftReference.from_dict(broken)
    with pytest.raises(DriftInputError, match="not valid JSON"):
        DriftReference.from_bytes(b"{")


def test_bad_input_gets_a_clear_error(tmp_path):
    reference = reference_of(np.random.default_rng(7))
    with pytest.raises(DriftInputError, match="no request records"):
        drift_report(reference, [])
    with pytest.raises(DriftInputError, match="no request records"):
        drift_report(reference, [{"log": LOG_FORMAT, "type": "feedback", "request_id": "a", "edge_quality": 1}])
    canonical = {"prompt": "What is 2+2?", "edge_quality": 1, "cloud_quality": 1}  # a training log row
    with pytest.raises(DriftInputError, match="record 1: not an outcome record"):
        drift_report(reference, [canonical])
    with pytest.raises(DriftInputError, match="record 1: not a JSON object"):
        drift_report(reference, ["text"])  # type: ignore[list-item]
    bad_score = {"log": LOG_FORMAT, "type": "request", "request_id": "a", "score": "high"}
    with pytest.raises(DriftInputError, match="score must be a finite number"):
        drift_report(reference, [bad_score])
    with pytest.raises(DriftInputError, match="no outcomes-"):
        read_records(str(tmp_path))
    (tmp_path / "outcomes-1.jsonl").write_text(json.dumps({"log": LOG_FORMAT, "type": "feedback"}) + "\nnot json\n")
    with pytest.raises(DriftInputError, match="outcomes-1.jsonl line 2: not JSON"):
        read_records(str(tmp_path))
    (tmp_path / "outcomes-1.jsonl").write_text(json.dumps({"log": LOG_FORMAT, "type": "feedback"}) + '\n{"cut')
    assert len(read_records(str(tmp_path))) == 1  # a last line a killed process cut short is left out
    (tmp_path / "outcomes-1.jsonl").write_text('{"log": "x"}\n')
    with pytest.raises(DriftInputError, match="outcomes-1.jsonl line 1: not an outcome record of"):
        read_records(str(tmp_path))


def test_a_missing_reference_says_so():
    report = drift_report(None, records_of(np.random.default_rng(8), 10))
    assert report.verdict == "unknown" and report.reference_missing and report.checks == ()
    assert "no drift reference" in report.reason and report.as_dict()["reference"] == "missing"


# The simulator's mixes (make simulate --domain-mix / --task-mix).
def test_mixes_shift_the_simulated_traffic_and_the_default_stays_as_it_was():
    mix = parse_mix("finance=0.6,legal=0.2")
    shares = dict(mix)
    assert shares["finance"] == 0.6 and shares["legal"] == 0.2 and sum(shares.values()) == pytest.approx(1)
    assert shares["math"] / shares["general"] == pytest.approx(0.14 / 0.16)  # the rest keeps its proportions
    rows = generate_rows(3, 0, 2_000, model=DifficultyModel(domain_mix=mix))
    assert (rows["domain"] == "finance").mean() == pytest.approx(0.6, abs=0.04)
    default = generate_rows(3, 0, 500)
    assert default.equals(generate_rows(3, 0, 500, model=DifficultyModel(domain_mix=parse_mix("legal=0.11"))))
    for bad, message in (
        ("finance=1.2", r"in \[0, 1\]"),
        ("crypto=0.5", "among"),
        ("finance=0.7,legal=0.5", "over 1"),
        ("finance=0.5,finance=0.1", "twice"),
        ("finance", "domain=share"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_mix(bad)
    assert dict(parse_mix("prove=1", "task"))["prove"] == 1.0


def test_simulate_cli_takes_a_domain_mix(tmp_path):
    out = tmp_path / "sim"
    cmd = [sys.executable, "-m", "pipelines.simulate", "--n", "1000", "--out", str(out)]
    done = subprocess.run([*cmd, "--domain-mix", "code=0.9"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    import pandas as pd

    assert (pd.read_parquet(out)["domain"] == "code").mean() > 0.85
    bad = subprocess.run([*cmd, "--domain-mix", "code=2"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "--domain-mix" in bad.stderr


# The done-criterion: a trained bundle, its reference, and traffic through the SDK.
@pytest.fixture(scope="module")
def drift_bundle(tmp_path_factory, encoder_cache):
    """A small bundle trained on 3,000 simulated rows of the default mix (single split)."""
    from data.simulator import write_shards
    from training.engines.base import train

    tmp = tmp_path_factory.mktemp("drift")
    write_shards(tmp / "sim", 3_000, seed=0)
    result = train(config_for(tmp, tmp / "sim", encoder_cache, acceptance={"rounds": QUICK_ACCEPTANCE_ROUNDS}))
    return result


def route_through_the_sdk(bundle, folder, model: DifficultyModel, *, seed: int, privacy: str = "text"):
    """ROUTED prompts of `model`'s mix executed by the SDK with an OutcomeLog, each with the edge's
    outcome as feedback; returns the folder."""
    from serving import Router

    rows = generate_rows(seed, 0, ROUTED, model=model)
    log = OutcomeLog(folder, privacy=privacy)
    router = Router.load(bundle, log=log)
    for row in rows.itertuples():
        precision = row.precision if isinstance(row.precision, str) else None
        done = router.execute(row.prompt, edge=lambda p: "edge", cloud=lambda p: "cloud", precision=precision)
        router.feedback(done.request_id, edge_quality=float(row.edge_quality))
    log.close()
    assert log.written == 2 * ROUTED
    return folder


def test_the_bundle_carries_its_reference_listed_with_its_checksum(drift_bundle):
    bundle = read_bundle(drift_bundle.bundle)
    assert DRIFT_REFERENCE_FILE in bundle.manifest.files
    reference = DriftReference.from_bundle(bundle)
    assert reference is not None and reference.model_version == bundle.manifest.model_version
    assert set(reference.numeric) == {"score", "p_edge", "p_cloud", "novelty", "n_tokens", "prompt_chars"}
    assert 350 < reference.rows < 550 and reference.numeric["score"].n == reference.rows  # the 15% validation split
    assert set(reference.rates) == {"unfamiliar", "edge_failure"}  # simulated logs carry no edge answers
    assert "drift_reference_s" in drift_bundle.timings
    from serving import Router

    assert Router.load(drift_bundle.bundle).drift_reference() == reference  # what the proxy's dashboard compares with


def test_a_tampered_reference_fails_the_bundle_check(drift_bundle, tmp_path):
    copy = tmp_path / "b"
    shutil.copytree(drift_bundle.bundle, copy)
    (copy / DRIFT_REFERENCE_FILE).write_text("{}")
    with pytest.raises(BundleError, match="drift_reference.json does not match its checksum"):
        read_bundle(copy)


def test_same_mix_is_stable_and_a_shifted_mix_says_retrain(drift_bundle, tmp_path):
    from evaluation.drift import bundle_drift

    same = route_through_the_sdk(drift_bundle.bundle, tmp_path / "same", SAME, seed=1)
    report = bundle_drift(drift_bundle.bundle, [same])
    assert report.verdict == "stable", report.as_dict()
    assert report.records == report.compared == ROUTED
    names = {c.name for c in report.checks}
    assert names >= {"score", "p_edge", "p_cloud", "novelty", "prompt_chars", "precision", "zone", "edge_failure"}
    assert max(c.value for c in report.checks if c.statistic == "psi") < 0.1

    # token ids instead of text: the prompt's length is the bundle's token estimate
    shifted = route_through_the_sdk(drift_bundle.bundle, tmp_path / "shifted", SHIFTED, seed=2, privacy="token_ids")
    report = bundle_drift(drift_bundle.bundle, [shifted])
    assert report.verdict == "retrain", report.as_dict()
    statuses = {(c.name, c.statistic): c.status for c in report.checks}
    assert statuses[("score", "psi")] == statuses[("n_tokens", "psi")] == "retrain"
    assert ("prompt_chars", "psi") not in statuses


def test_make_drift_prints_writes_and_exits_as_documented(drift_bundle, tmp_path):
    logs = route_through_the_sdk(drift_bundle.bundle, tmp_path / "shifted", SHIFTED, seed=2)
    out = tmp_path / "drift.json"
    cmd = [sys.executable, "-m", "pipelines.drift", "--bundle", str(drift_bundle.bundle), "--logs", str(logs)]
    done = subprocess.run([*cmd, "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "verdict: retrain" in done.stdout and "p_cloud" in done.stdout
    assert json.loads(out.read_text())["verdict"] == "retrain"
    failing = subprocess.run([*cmd, "--out", str(out), "--fail-on", "retrain"], cwd=ROOT, capture_output=True)
    assert failing.returncode == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = subprocess.run([*cmd[:-1], str(empty)], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "no outcomes-" in bad.stderr


def test_rescore_gives_another_versions_records_this_bundles_decisions(drift_bundle, tmp_path):
    from serving import Router

    logs = route_through_the_sdk(drift_bundle.bundle, tmp_path / "same", SAME, seed=1)
    records = read_records(str(logs))
    other = [{**r, "model_version": "older", "score": 0.0} if r["type"] == "request" else r for r in records]
    assert drift_report(DriftReference.from_bundle(read_bundle(drift_bundle.bundle)), other).compared == 0
    again = rescore(other, Router.load(drift_bundle.bundle))
    assert [r.get("score") for r in again] == [r.get("score") for r in records]


def test_a_bundle_without_a_reference_loads_and_decides_as_before(drift_bundle, tmp_path):
    """A bundle from before drift references: the same bundle with the file and its manifest
    entry removed."""
    from evaluation.drift import bundle_drift
    from serving import Router

    old = tmp_path / "old"
    shutil.copytree(drift_bundle.bundle, old)
    (old / DRIFT_REFERENCE_FILE).unlink()
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["files"][DRIFT_REFERENCE_FILE]
    manifest["manifest_sha256"] = manifest_digest(manifest)
    (old / "manifest.json").write_text(json.dumps(manifest))

    prompts = list(generate_rows(4, 0, 50)["prompt"])
    before, after = Router.load(drift_bundle.bundle), Router.load(old)
    assert not after.degraded
    assert [d.to_dict() for d in after.route_batch(prompts)] == [d.to_dict() for d in before.route_batch(prompts)]
    assert DriftReference.from_bundle(read_bundle(old)) is None and after.drift_reference() is None
    logs = route_through_the_sdk(old, tmp_path / "logs", SAME, seed=1)
    report = bundle_drift(old, [logs])
    assert report.verdict == "unknown" and "no drift reference" in report.reason


def test_make_promote_shows_the_drift_report_when_its_logs_are_outcome_logs(drift_bundle, tmp_path):
    from rich.console import Console

    from pipelines.promote import _show_drift

    logs = route_through_the_sdk(drift_bundle.bundle, tmp_path / "same", SAME, seed=1)
    console = Console(record=True, width=200)
    _show_drift(console, drift_bundle.bundle, [str(tmp_path / "not-a-log"), str(logs)])
    shown = console.export_text()
    assert "drift: stable (600 requests)" in shown and "drift verdict: stable" in shown
    quiet = Console(record=True)
    _show_drift(quiet, drift_bundle.bundle, [str(tmp_path / "not-a-log")])
    assert quiet.export_text() == ""


def test_the_proxy_dashboards_window_judges_drift_as_the_outcome_log_does(drift_bundle, tmp_path):
    """serving.proxy._dashboard keeps what drift reads of each routed request (decision_record):
    on the same requests its panel gives the outcome log's verdict and the same figure for every
    check both can make (the log has the prompt's length in characters too)."""
    from serving import Router
    from serving.chat._routing_info import RoutingInfo
    from serving.proxy._dashboard import RecentRequests, drift_of

    for model, seed, verdict in ((SAME, 1, "stable"), (SHIFTED, 2, "retrain")):
        window, log = RecentRequests(), OutcomeLog(tmp_path / f"log{seed}")
        router = Router.load(drift_bundle.bundle, log=log)
        for row in generate_rows(seed, 0, ROUTED, model=model).itertuples():
            precision = row.precision if isinstance(row.precision, str) else None
            done = router.execute(row.prompt, edge=lambda p: "edge", cloud=lambda p: "cloud", precision=precision)
            window.add(RoutingInfo.of(done, model="stub"))
        log.close()
        live = drift_of([record for _, record in window.snapshot()], router)
        logged = drift_report(router.drift_reference(), read_records(str(tmp_path / f"log{seed}"))).as_dict()
        assert live is not None and live["verdict"] == logged["verdict"] == verdict, (live, logged)
        assert live["records"] == logged["records"] == ROUTED
        by_name = {(c["name"], c["statistic"]): c["value"] for c in logged["checks"]}
        shared = [c for c in live["checks"] if (c["name"], c["statistic"]) in by_name]
        assert len(shared) == len(live["checks"]) >= 8
        for check in shared:
            assert check["value"] == pytest.approx(by_name[(check["name"], check["statistic"])]), check


def test_the_live_windows_records_count_the_first_endpoints_failure_for_every_bundle():
    """decision_record writes the first endpoint's failure where _read looks for it: edge_quality
    for two endpoints, the first endpoint's outcome for N (not only a step named edge)."""
    from serving.execution._steps import Step
    from serving.monitoring._drift import _read, decision_record
    from serving.routing._decision import Decision

    def decided(cascade, on_device, first_status):
        decision = Decision(
            cascade, 0.7, "", False, "v", on_device, cascade[:-1], n_tokens=12, expected={name: 0.5 for name in cascade}
        )
        return decision_record(decision, [Step(cascade[0], first_status, 0.01), Step(cascade[-1], "ok", 0.02)])

    n_endpoint = [decided(("phone-3b", "frontier"), (True, False), s) for s in ("error", "timeout", "ok", "ok")]
    two = [decided(("edge", "cloud"), (True, False), s) for s in ("error", "ok", "ok", "ok")]
    assert n_endpoint[0]["outcomes"] == {"phone-3b": 0.0} and n_endpoint[2]["outcomes"] is None
    assert two[0]["edge_quality"] == 0.0 and "outcomes" not in two[0]
    for records, rate in ((n_endpoint, 0.5), (two, 0.25)):
        failures = [f for f in _read(records, "v").of("edge_failure", own_only=False) if f is not None]
        assert sum(failures) / len(records) == rate
