"""The outcome log's promises: what each privacy mode keeps on disk (no request text escapes
through an error message), what `written` and `dropped` count on a real full disk, and that a
log folder is recognised from any of its records."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from serving import Router
from serving.monitoring._outcome_log import LOG_FORMAT, OutcomeLog
from tests.conftest import ROOT

SSN, EMAIL = "078-05-1120", "alice@example.com"
PROMPT = f"My SSN is {SSN} and my email is {EMAIL}: what is 2 + 2?"


def scrub(text: str) -> str:
    """The app's redact hook: social security numbers and e-mail addresses."""
    return re.sub(r"\b\d{3}-\d{2}-\d{4}\b", "[ssn]", re.sub(r"[\w.+-]+@[\w-]+\.[\w.]+", "[email]", text))


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob("outcomes-*.jsonl"))


def records(folder: Path) -> list[dict]:
    return [
        json.loads(line)
        for file in files(folder)
        for line in file.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def on_disk(folder: Path) -> str:
    return "".join(file.read_text(encoding="utf-8") for file in files(folder))


def quoting(prompt: str):
    """A call that fails the way real clients do: its message quotes the request."""
    raise ValueError(f"upstream refused the request {prompt!r}")


def string_paths(value, path: str = "") -> set[str]:
    """The paths of every string in a record, as serving.monitoring._outcome_log names them."""
    if isinstance(value, str):
        return {path}
    if isinstance(value, dict):
        return {p for key, item in value.items() for p in string_paths(item, f"{path}.{key}" if path else key)}
    if isinstance(value, list):
        return {p for item in value for p in string_paths(item, f"{path}[]")}
    return set()


def traffic_with_failures(router: Router) -> None:
    """Every way the SDK can put an exception's text in a record: an edge call that fails, an
    accept check that raises, a cloud call that fails after both (CloudCallError), a shadow run
    that fails, feedback; each exception quotes the prompt or the answer."""
    router.execute(PROMPT, edge=quoting, cloud=lambda p: "4")
    router.execute(
        PROMPT,
        edge=lambda p: f"You said {p}",
        cloud=lambda p: "4",
        verify_edge_zone=True,
        accept=lambda answer: quoting(answer),
    )
    with pytest.raises(Exception, match="no endpoint served"):
        router.execute(PROMPT, edge=quoting, cloud=quoting)
    # The SSN straddles the 300th character of the fallback reason, where it used to be cut
    # ("... 078-05") before a redact hook saw it.
    reason = f"left edge=error:ValueError: {ValueError(f'upstream refused the request {PROMPT!r}')!r}"
    padded = "x" * (294 - reason.index(SSN)) + PROMPT
    router.execute(padded, edge=quoting, cloud=lambda p: "4")
    run = router.execute(PROMPT, edge=lambda p: "4", cloud=quoting)  # the shadow (cloud) run fails
    router.feedback(run.request_id, edge_quality=1.0, source=f"user wrote: {EMAIL}")
    router.feedback(run.request_id, edge_quality=1.0, source="judge:gpt-4o")


def wait_for_shadows(router: Router, log: OutcomeLog) -> None:
    import time

    deadline = time.monotonic() + 10
    while not any(r["type"] == "shadow" for r in records(log.folder)) and time.monotonic() < deadline:
        log.flush()
        time.sleep(0.02)


# --- privacy: every free-text field goes through the mode ---------------------------------


def test_with_a_redact_hook_no_free_text_field_carries_the_secret(tmp_path):
    """privacy="text" with redact=: exception messages (the edge's, the accept check's, the
    cloud's, a shadow run's) and feedback sources are redacted like the prompt, whole, before
    they are cut to length."""
    log = OutcomeLog(tmp_path / "logs", redact=scrub)
    router = Router.load(tmp_path / "no-bundle", log=log, shadow_rate=1.0, seed=0)  # the rule table routes
    traffic_with_failures(router)
    wait_for_shadows(router, log)
    log.close()
    text = on_disk(log.folder)
    assert SSN not in text and EMAIL not in text and "078-05" not in text
    assert log.dropped == 0 and text.count("[ssn]") >= 6
    logged = records(log.folder)
    requests = [r for r in logged if r["type"] == "request"]
    assert requests[0]["fallback_reason"] == "left edge=error:ValueError"
    assert "[ssn]" in requests[0]["fallback_error"] and requests[0]["prompt"].startswith("My SSN is [ssn]")
    assert requests[1]["fallback_reason"] == "left edge=rejected:ValueError"
    assert (
        "no endpoint served: edge=error:ValueError; cloud=error:ValueError (edge: upstream refused"
        in (requests[2]["error"])
    )
    assert "[ssn]" in requests[2]["error"]  # each call's error text, redacted like the prompt
    (shadow,) = [r for r in logged if r["type"] == "shadow"]
    assert shadow["error"].startswith("ValueError(") and "[ssn]" in shadow["error"]
    assert [r["source"] for r in logged if r["type"] == "feedback"] == ["user wrote: [email]", "judge:gpt-4o"]


@pytest.mark.parametrize("mode", [{"store_prompts": False}, {"privacy": "token_ids"}, {"privacy": "embedding"}])
def test_without_text_error_messages_become_codes(tmp_path, mode):
    """The modes that keep no text write an exception as its class (and its cause's), a
    fallback as its fixed reason: nothing of the prompt, without any redact hook."""
    log = OutcomeLog(tmp_path / "logs", **mode)
    router = Router.load(tmp_path / "no-bundle", log=log, shadow_rate=1.0, seed=0)
    traffic_with_failures(router)
    wait_for_shadows(router, log)
    log.close()
    text = on_disk(log.folder)
    assert SSN not in text and EMAIL not in text and "078-05" not in text and "2 + 2" not in text
    assert log.dropped == 0
    logged = records(log.folder)
    requests = [r for r in logged if r["type"] == "request"]
    assert [r["fallback_reason"] for r in requests[:2]] == [
        "left edge=error:ValueError",
        "left edge=rejected:ValueError",
    ]
    assert [r["fallback_error"] for r in requests[:2]] == ["ValueError", "ValueError"]
    assert requests[2]["error"] == "EndpointsFailed from ValueError"
    assert all(r["prompt"] is None and r["edge_response"] is None and r["cloud_response"] is None for r in requests)
    (shadow,) = [r for r in logged if r["type"] == "shadow"]
    assert shadow["error"] == "ValueError" and shadow["response"] is None
    # A feedback source is kept when it is a label, not text.
    assert [r["source"] for r in logged if r["type"] == "feedback"] == [None, "judge:gpt-4o"]


def test_every_string_a_record_holds_is_declared_and_an_undeclared_one_is_refused(tmp_path, caplog):
    """One list says what every string field is (serving.monitoring._outcome_log.STRING_FIELDS); the writer
    refuses a record with a string anywhere else, so a new field cannot slip text past the
    privacy mode. Every field the SDK writes, of every record type, is on the list."""
    from serving.monitoring._outcome_log import STRING_FIELDS

    log = OutcomeLog(tmp_path / "logs", redact=scrub)
    router = Router.load(tmp_path / "no-bundle", log=log, shadow_rate=1.0, seed=0)
    traffic_with_failures(router)
    wait_for_shadows(router, log)
    log.flush()
    seen = set().union(*(string_paths(r) for r in records(log.folder)))
    assert {"prompt", "fallback_error", "error", "source", "steps[].name", "fallback_reason"} <= seen
    assert seen <= set(STRING_FIELDS), seen - set(STRING_FIELDS)
    written = log.written
    with caplog.at_level(logging.WARNING, logger="serving"):
        assert log.append({"log": LOG_FORMAT, "type": "feedback", "request_id": "r1", "note": f"from {EMAIL}"})
        assert log.append(
            {
                "log": LOG_FORMAT,
                "type": "request",
                "request_id": "r2",
                "steps": [{"name": "edge", "status": "ok", "detail": PROMPT}],
            }
        )
        log.close()
    assert log.written == written and log.dropped == 2 and EMAIL not in on_disk(log.folder)
    assert any("'note'" in r.getMessage() and "STRING_FIELDS" in r.getMessage() for r in caplog.records)


def test_privacy_options_are_checked():
    with pytest.raises(ValueError, match="privacy='words'.*text, token_ids, embedding"):
        OutcomeLog("unused", privacy="words")
    with pytest.raises(ValueError, match="store_prompts=True contradicts privacy='token_ids'"):
        OutcomeLog("unused", store_prompts=True, privacy="token_ids")
    for options, mode in [
        ({}, "text"),
        ({"store_prompts": True}, "text"),
        ({"store_prompts": False}, "token_ids"),
        ({"privacy": "embedding"}, "embedding"),
    ]:
        log = OutcomeLog("unused", **options)
        assert (log.privacy, log.store_prompts) == (mode, mode == "text")
        log.close()


# --- accounting on a real full disk ---------------------------------------------------------


FILL_THE_DISK = """
import json, os, resource, signal, sys
sys.path.insert(0, {root!r})
from serving.monitoring._outcome_log import LOG_FORMAT, OutcomeLog

folder, filler, limit = {folder!r}, {filler!r}, {limit!r}
if limit:  # no tmpfs: a file-size limit stands in for the full disk
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
log = OutcomeLog(folder, fsync={fsync!r})

def send(first, n):
    for i in range(first, first + n):
        log.append({{"log": LOG_FORMAT, "type": "feedback", "request_id": f"r{{i:04d}}", "edge_quality": 1.0,
                    "source": "s" * 300}})
        if i % 40 == 39:
            assert log.flush()  # many batches, most of them refused

send(0, 600)
assert log.flush()
full = {{"written": log.written, "dropped": log.dropped, "error": log.last_error}}
if limit:
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
else:
    os.remove(filler)  # room again
send(600, 20)
log.close()
print(json.dumps({{"full": full, "written": log.written, "dropped": log.dropped}}))
"""


@pytest.fixture
def small_disk(tmp_path):
    """(folder on a 64 KiB file system, a filler file on it or None, file-size limit or None): a
    real tmpfs where this process may mount one, else RLIMIT_FSIZE in the writing process."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode
        == 0
    )
    if mounted:
        filler = mount / "filler"
        filler.write_bytes(b"f" * 16384)
        yield mount / "logs", filler, None
        subprocess.run(["umount", str(mount)], check=True)
    else:
        yield mount / "logs", None, 48 * 1024


@pytest.mark.parametrize("fsync", [False, True])
def test_on_a_full_disk_written_counts_what_is_on_it_and_no_file_is_left_empty(small_disk, fsync):
    """600 records of ~400 bytes for a 64 KiB disk: `written` is what reached the file (whole
    lines, nothing cut), `dropped` the rest; a refused batch does not start a new file; when
    room returns, writing goes on in the same file."""
    folder, filler, limit = small_disk
    script = FILL_THE_DISK.format(root=str(ROOT), folder=str(folder), filler=str(filler), limit=limit, fsync=fsync)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    full = counts["full"]
    assert 40 < full["written"] < 200 and full["written"] + full["dropped"] == 600
    assert ("No space" if limit is None else "too large") in full["error"]
    logged = files(folder)
    assert all(f.stat().st_size > 0 for f in logged) and len(logged) == 1  # no empty file, no rotation
    lines = logged[0].read_bytes().split(b"\n")
    assert lines[-1] == b""  # ends with a whole record
    ids = [json.loads(line)["request_id"] for line in lines[:-1]]  # every line is whole
    assert counts["written"] == len(ids) and counts["dropped"] == 620 - len(ids)
    assert ids[-20:] == [f"r{i:04d}" for i in range(600, 620)]  # room again: the same file goes on
    assert ids[: full["written"]] == [f"r{i:04d}" for i in range(full["written"])]


# --- recognising the folder -----------------------------------------------------------------


def test_a_log_folder_is_recognised_from_any_record_even_when_its_first_file_is_empty(tmp_path):
    from data.logs import load_logs, loader_for
    from data.sdk_logs import is_outcome_log_folder

    folder = tmp_path / "logs"
    log = OutcomeLog(folder)
    for i in range(30):
        log.append(
            {
                "log": LOG_FORMAT,
                "type": "request",
                "request_id": f"r{i}",
                "prompt": f"What is {i} + {i}?",
                "target": "edge",
                "propensity": 0.9,
                "edge_quality": 1.0,
                "cloud_quality": 0.0,
            }
        )
    log.close()
    (folder / "outcomes-00000000T000000-1-0001.jsonl").write_bytes(b"")  # a batch refused by a full disk
    (folder / "outcomes-00000000T000000-1-0002.jsonl").write_bytes(b"\n\n")  # blank lines first
    assert is_outcome_log_folder(folder) and loader_for(folder) == "sdk-outcome-log"
    loaded = load_logs([folder])
    assert len(loaded.rows) == 30 and loaded.rejects == []
    assert not is_outcome_log_folder(tmp_path / "nothing-here")
    other = tmp_path / "other"
    other.mkdir()
    (other / "outcomes-1.jsonl").write_text('{"prompt": "p", "edge_quality": 1, "cloud_quality": 0}\n')
    assert not is_outcome_log_folder(other)  # outcome-like names, but not the SDK's records


# --- privacy="embedding", end to end --------------------------------------------------------


@pytest.mark.real_data
@pytest.mark.slow
def test_make_train_learns_from_a_log_that_kept_only_embeddings(small_routellm, encoder_cache, tmp_path, caplog):
    """A bundle trained with bundle_encoder logs each prompt as its encoder's pooled embedding and
    scalars: no text and no token ids on disk. The next training run uses every row whose
    encoder is its own, and counts the others with the reason. A bundle without its encoder
    warns, and its rows are rejected saying why."""
    from data.logs import load_logs, read_unit
    from data.prepare import merge_duplicates
    from tests.conftest import config_for
    from training.engines.base import train

    # Both runs train on the slice's MMLU rows: no edge answers, so no acceptance check to fit.
    v0 = train(config_for(tmp_path / "v0", small_routellm / "mmlu", encoder_cache, bundle={"encoder": True}))
    assert "encoder.onnx" in v0.manifest.files
    frame = merge_duplicates(load_logs([small_routellm]).frame()).sample(n=300, random_state=2)
    folder = tmp_path / "private"
    log = OutcomeLog(folder, privacy="embedding")
    router = Router.load(v0.bundle, strict=True, log=log, explore_rate=0.2, seed=0)
    for prompt, precision, edge_q, cloud_q in zip(
        frame["prompt"], frame["precision"], frame["edge_quality"], frame["cloud_quality"]
    ):
        run = router.execute(prompt, edge=lambda p: "edge answer", cloud=lambda p: "cloud answer", precision=precision)
        side = run.decision.target
        router.feedback(run.request_id, **{f"{side}_quality": float(edge_q if side == "edge" else cloud_q)})
    log.close()
    assert (log.written, log.dropped) == (600, 0)
    text = on_disk(folder)
    assert not any(prompt in text for prompt in frame["prompt"]) and "input_ids" not in text
    assert "edge answer" not in text and "cloud answer" not in text
    requests = [r for r in records(folder) if r["type"] == "request"]
    assert all(
        r["features"]["encoder_sha256"] == v0.manifest.files["encoder.onnx"] and len(r["features"]["embedding"]) == 384
        for r in requests
    )
    # Ten rows as if logged by a bundle with another encoder.
    (file,) = files(folder)
    lines = file.read_text(encoding="utf-8").splitlines()
    for i in [i for i, line in enumerate(lines) if '"type": "request"' in line][:10]:
        lines[i] = lines[i].replace(v0.manifest.files["encoder.onnx"], "0" * 64)
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")

    config = config_for(tmp_path / "v1", small_routellm / "mmlu", encoder_cache)
    config.data.append(str(folder))
    v1 = train(config)
    assert v1.manifest.data["token_rows"] == {
        "read": 300,
        "used": 290,
        "skipped": {"logged by a bundle with another encoder_sha256 than this run's": 10},
    }
    outcomes = v1.manifest.data["outcomes"]
    assert outcomes["edge_only"] + outcomes["cloud_only"] >= 290

    # v1 was trained without bundle_encoder: logging embeddings with it warns, and says why its rows cannot train.
    log = OutcomeLog(tmp_path / "no-encoder", privacy="embedding")
    router = Router.load(v1.bundle, strict=True, log=log)
    with caplog.at_level(logging.WARNING, logger="serving"):
        run = router.execute(PROMPT, edge=lambda p: "4", cloud=lambda p: "4")
        router.feedback(run.request_id, edge_quality=1.0, cloud_quality=1.0)
        log.close()
    assert any("holds no encoder before its projection" in r.getMessage() for r in caplog.records)
    (reject,) = read_unit(tmp_path / "no-encoder").rejects
    assert "logged without its text and without model inputs" in reject.reason and SSN not in on_disk(log.folder)


def test_a_record_no_reader_would_read_is_counted_as_not_written(tmp_path, caplog):
    """Readers skip a line over MAX_LINE_BYTES (serving.monitoring._outcome_log.read_log_lines): the writer
    does not write one. A request whose prompt makes its record that long is counted in `dropped`
    with a warning saying why; the records around it are written and read back."""
    from serving.monitoring._outcome_log import MAX_LINE_BYTES, read_log_lines

    log = OutcomeLog(tmp_path / "logs")
    small = {"log": LOG_FORMAT, "type": "request", "request_id": "r1", "prompt": "short"}
    with caplog.at_level(logging.WARNING, logger="serving"):
        assert log.append(small)
        assert log.append({**small, "request_id": "r2", "prompt": "x" * MAX_LINE_BYTES})
        assert log.append({**small, "request_id": "r3"})
        log.close()
    assert (log.written, log.dropped) == (2, 1)
    assert [r["request_id"] for r in records(log.folder)] == ["r1", "r3"]
    assert all(line.problem is None for line in read_log_lines(log.folder))
    assert any("over the readers'" in r.getMessage() for r in caplog.records)
