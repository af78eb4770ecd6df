"""pipelines/vectors.py writes what other runtimes are held to (clients/js): the logs' test split
as the bundle's own split assigns it, the hard cases intact, the Python SDK's decisions, the
features behind them, the canonical JSON, a signature and every code point's token ids."""

from __future__ import annotations

import bisect
import json
import subprocess

import pytest

from pipelines import vectors as vectors_command
from serving import Router, RuleRouter
from serving.bundle._bundle import manifest_digest
from serving.bundle._signing import SigningError, load_public_key, verify
from tests.conftest import ROOT, make_env


@pytest.fixture(scope="module")
def written(bundle, small_routellm, tmp_path_factory):
    """(the vectors file's path, its document) for the session's bundle and its logs."""
    out = tmp_path_factory.mktemp("vectors") / "vectors.json"
    vectors_command.main(bundle=bundle, out=out, logs=[str(small_routellm)], max_log_prompts=None)
    return out, json.loads(out.read_text(encoding="ascii"))


def test_the_file_is_ascii_json_of_this_bundle(written, bundle):
    out, document = written
    out.read_bytes().decode("ascii")  # ensure_ascii: lone surrogates travel as escapes
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert document["format"] == vectors_command.FORMAT
    assert document["bundle"] == {
        "model_version": manifest["model_version"],
        "manifest_sha256": manifest["manifest_sha256"],
    }
    assert not out.with_name(out.name + ".partial").exists()


def test_the_log_prompts_are_the_bundles_test_split(written, bundle):
    """As many distinct prompts as training counted in its test split, and none twice."""
    _, document = written
    manifest = json.loads((bundle / "manifest.json").read_text())
    logged = [c["prompt"] for c in document["cases"] if c["kind"] == "log"]
    assert len(logged) == manifest["metrics"]["test"]["rows"] > 100
    assert len(set(logged)) == len(logged)


def test_the_hard_cases_read_back_as_generated(written):
    _, document = written
    hard = {c["id"]: c["prompt"] for c in document["cases"] if c["kind"] == "hard"}
    generated = dict(vectors_command.hard_cases() + vectors_command.fuzz_cases())
    assert hard == generated
    assert len(hard["one_mb_ascii"]) == 1 << 20 and hard["lone_high"] == "abc\ud800def"
    assert any("\ud800" <= ch <= "\udfff" for p in hard.values() for ch in p if len(p) < 100)


def test_a_case_that_json_would_change_is_refused():
    with pytest.raises(ValueError, match="does not survive JSON"):
        vectors_command.checked_round_trip([("pair_from_halves", "\ud83d" + "\ude00")])


def test_the_decisions_are_the_sdks(written, bundle):
    """Every case with every precision, per router; each decision the SDK's own route() gives."""
    _, document = written
    cases, rows = document["cases"], document["decisions"]
    router, rules = Router.load(bundle, strict=True), RuleRouter()
    ruled = Router.load(bundle, strict=True, unfamiliar_policy="rule_table")
    first_hard = next(i for i, c in enumerate(cases) if c["kind"] == "hard")
    by_router: dict[str, list[dict]] = {}
    for row in rows:
        by_router.setdefault(row["router"], []).append(row)
    assert len(by_router["bundle"]) == len(by_router["rule_table"]) == 4 * len(cases)
    assert len(by_router["unfamiliar_rule_table"]) == 4 * (len(cases) - first_hard)
    assert {r["precision"] for r in rows} == {None, "exact", "standard", "tolerant"}
    for name, route in (("bundle", router.route), ("rule_table", rules.route), ("unfamiliar_rule_table", ruled.route)):
        for row in by_router[name]:
            assert row["decision"] == route(cases[row["case"]]["prompt"], precision=row["precision"]).to_dict(), (
                name,
                cases[row["case"]]["id"],
                row["precision"],
            )
    assert any(r["decision"]["unfamiliar"] for r in by_router["bundle"])
    assert any(r["decision"]["truncated"] for r in by_router["bundle"])


def test_the_features_are_the_ones_the_model_is_fed(written, bundle):
    _, document = written
    features = Router.load(bundle, strict=True).stages.features
    for case in document["cases"][::50] + [
        c for c in document["cases"] if c["id"] in ("empty", "lone_high", "one_mb_emoji")
    ]:
        ids, mask, scalars, _, _ = features([case["prompt"]], [None])
        assert case["input_ids"] == ids[0][mask[0] > 0].tolist(), case["id"]
        assert case["scalars"] == scalars[0].tolist(), case["id"]


def test_the_acceptance_rows_are_the_acceptors(written, bundle):
    """Every generated answer is there (with the logs' edge answers), each with the acceptance
    model's input row and the verdict the SDK's acceptor gives."""
    _, document = written
    acceptor = Router.load(bundle, strict=True).acceptor
    assert acceptor is not None, "the session's bundle was trained with edge answers"
    rows = document["acceptance"]
    answers = {row["answer"] for row in rows}
    generated = (
        vectors_command.hard_answers()
        + vectors_command.arithmetic_answers()
        + [text for _, text in vectors_command.fuzz_cases(120, seed=29)]
    )
    assert {a for a in generated if json.loads(json.dumps(a)) == a} <= answers
    assert len(rows) > len(generated)  # and the logs' edge answers
    for row in rows:
        options = {"logprob_mean": row["logprob_mean"], "logprob_min": row["logprob_min"]}
        features = acceptor.features([row["prompt"]], [row["answer"]], [row["logprob_mean"]], [row["logprob_min"]])
        assert row["features"] == [None if v != v else v for v in features[0].tolist()]
        verdict = acceptor.check(row["prompt"], row["answer"], **options)
        assert (row["probability"], row["accepted"]) == (verdict.probability, verdict.accepted)
    assert {row["accepted"] for row in rows} == {True, False}


def test_the_canonical_json_is_what_the_checksum_and_signature_hash(written, bundle):
    _, document = written
    manifest = json.loads((bundle / "manifest.json").read_text())
    first = document["canonical_json"][0]
    assert json.loads(first["text"]) == manifest
    body = {k: v for k, v in json.loads(first["canonical"]).items() if k != "manifest_sha256"}
    assert manifest_digest(body) == manifest["manifest_sha256"]
    for case in document["canonical_json"]:
        assert case["canonical"] == json.dumps(json.loads(case["text"]), sort_keys=True, ensure_ascii=True)


def test_the_signature_verifies_under_its_key_only(written, bundle):
    _, document = written
    manifest = json.loads((bundle / "manifest.json").read_text())
    signature = document["signature"]
    key = load_public_key(signature["public_key_pem"].encode())
    assert load_public_key(bytes.fromhex(signature["public_key_hex"])).public_bytes_raw() == key.public_bytes_raw()
    verify(manifest, bytes.fromhex(signature["signature_hex"]), key)
    with pytest.raises(SigningError):
        verify({**manifest, "model_version": "other"}, bytes.fromhex(signature["signature_hex"]), key)


def test_every_code_point_has_its_ids(written, bundle):
    """Runs in order, covering every code point but the surrogates once; spot checks against the tokenizer."""
    from serving.features._tokenizer import load_tokenizer

    _, document = written
    runs = document["codepoints"]
    covered = sum(last - first + 1 - (0x800 if first <= 0xD800 and last >= 0xDFFF else 0) for first, last, _ in runs)
    assert covered == 0x110000 - 0x800
    assert all(b[0] == a[1] + 1 or (a[1] == 0xD7FF and b[0] == 0xE000) for a, b in zip(runs, runs[1:]))
    tokenizer = load_tokenizer((bundle / "tokenizer.json").read_bytes())
    starts = [first for first, _, _ in runs]
    for char in "a?é😀\U00020000\u0378\x00 ":
        first, last, ids = runs[bisect.bisect_right(starts, ord(char)) - 1]
        assert first <= ord(char) <= last and ids == tokenizer.encode(f"x{char}x", add_special_tokens=False).ids, char


def dry_make(*args: str) -> str:
    """What `make -n ARGS` would run."""
    return subprocess.run(
        ["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, env=make_env(), check=True
    ).stdout


def test_make_vectors_and_test_js_run_these_commands(tmp_path):
    """The Makefile targets (dry run): vectors writes OUT from BUNDLE; test-js trains only a
    missing bundle (and a missing N-endpoint bundle), writes the vectors on both, installs
    clients/js from its lock file, runs npm test and the browser tests."""
    dry = dry_make("vectors", "BUNDLE=some/bundle", "OUT=some/vectors.json")
    assert "-m pipelines.vectors --bundle some/bundle --out some/vectors.json" in dry
    dry = dry_make("test-js", "JS_BUNDLE=b", "JS_VECTORS=v.json")
    assert "-m pipelines.train --bundle b --set split.cv_folds=0" in dry  # b/manifest.json is missing
    assert "-m pipelines.vectors --bundle b --out v.json" in dry
    assert "npm ci --ignore-scripts" in dry and "npm test" in dry and "npm run test:browser" in dry
    (tmp_path / "manifest.json").write_text("{}")
    present = dry_make("test-js", f"JS_BUNDLE={tmp_path}", "JS_VECTORS=v.json")
    assert "pipelines.train" not in present and f"-m pipelines.vectors --bundle {tmp_path}" in present
    # the N-endpoint bundle (docs/js.md#n-endpoint-bundles): trained by make endpoints' command when missing
    dry = dry_make("test-js", "JS_ENDPOINT_BUNDLE=e", "JS_ENDPOINT_VECTORS=ev.json")
    assert "-m pipelines.endpoints --n 3000 --folds 3 --out artifacts/js/endpoint-report --bundle e" in dry
    assert "clients/js/scripts/endpoint_vectors.py --bundle e --out ev.json" in dry
    assert dry.count("ROUTER_ENDPOINT_VECTORS=") == 2  # npm test and the browser tests
    present = dry_make("test-js", f"JS_ENDPOINT_BUNDLE={tmp_path}")
    assert "pipelines.endpoints" not in present
    assert (ROOT / "clients/js/package-lock.json").is_file()  # what npm ci installs from
