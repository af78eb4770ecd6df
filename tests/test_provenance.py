"""What a training run was made from (training.provenance): `make train` records it with its figures
in reports/train/run.json, and a run counts as what training would give now only when its source,
packages, logs and options all match and its bundle is still the one it wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import config_for
from training.provenance import (
    RUN_FILE,
    SKIPPED_FOLDERS,
    SOURCE_SUFFIXES,
    _files_digest,
    _packages_sha256,
    matching_run,
    packages_sha256,
    provenance,
    write_run,
)


def test_make_train_writes_its_run_with_what_it_was_made_from(trained_small):
    config, result = trained_small
    path = Path(config.reports_dir) / RUN_FILE
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["run_id"] == result.run_id and Path(record["bundle"]) == result.bundle.resolve()
    assert json.dumps(record["metrics"], sort_keys=True) == json.dumps(result.metrics, sort_keys=True)
    assert set(record["provenance"]) == {"source", "packages", "data", "options"}
    options = record["provenance"]["options"]
    assert (
        "path" not in options["bundle"] and "tracking_uri" not in options["mlflow"] and "cv_folds" in options["split"]
    )
    made = matching_run(path, config)
    assert made is not None and made["run_id"] == result.run_id


def test_a_run_from_other_logs_or_options_or_a_replaced_bundle_is_not_reused(trained_small, small_routellm, tmp_path):
    trained_config, result = trained_small
    logs = tmp_path / "logs"
    shutil.copytree(small_routellm, logs)
    config = config_for(tmp_path, logs, Path(trained_config.cache_dir))
    path = write_run(config, provenance(config), result.bundle, result.run_id, {"figure": 1.0})
    assert path == tmp_path / "reports" / RUN_FILE
    assert matching_run(path, config)["metrics"] == {"figure": 1.0}
    # the same logs elsewhere, and other output folders: the same run
    moved = tmp_path / "elsewhere"
    shutil.copytree(logs, moved)
    elsewhere = config.with_options({"data": [str(moved)], "bundle": {"path": str(tmp_path / "b2")}})
    assert matching_run(path, elsewhere) is not None
    assert matching_run(path, config.with_options({"split": {"cv_folds": 3}})) is None  # another option
    with (logs / "gsm8k" / next(p.name for p in (logs / "gsm8k").iterdir())).open("a") as log:
        log.write("\n")
    assert matching_run(path, config) is None  # the logs changed since
    write_run(config, provenance(config), result.bundle, "another-run", {})
    assert matching_run(path, config) is None  # the bundle is not the one that run wrote
    assert matching_run(tmp_path / "missing" / RUN_FILE, config) is None


def test_the_source_digest_reads_code_and_shipped_data_not_caches(tmp_path):
    package = tmp_path / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "cache").mkdir()
    (package / "module.py").write_text("x = 1\n")
    (package / "table.yaml").write_text("a: 1\n")

    def digest() -> str:
        return _files_digest([("pkg", package)], SOURCE_SUFFIXES, SKIPPED_FOLDERS)

    before = digest()
    (package / "__pycache__" / "module.cpython-311.pyc").write_bytes(b"\x00")
    (package / "cache" / "table.json").write_text("{}")
    (package / "notes.txt").write_text("not source")
    assert digest() == before
    (package / "table.yaml").write_text("a: 2\n")
    changed = digest()
    assert changed != before
    (package / "module.py").rename(package / "renamed.py")
    assert digest() not in (before, changed)  # a file's path counts, not only its bytes


def test_the_packages_digest_follows_installs_upgrades_and_removals(tmp_path, monkeypatch):
    """The digest is kept while nothing is installed (reading every distribution takes ~0.5 s a
    training) and read again when a distribution comes, changes version or goes."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = packages_sha256()
    hits = _packages_sha256.cache_info().hits
    assert packages_sha256() == before and _packages_sha256.cache_info().hits == hits + 1  # kept, not read again

    def install(version: str) -> Path:
        info = tmp_path / f"router_probe-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: router-probe\nVersion: {version}\n")
        return info

    first = install("1.0")
    installed = packages_sha256()
    assert installed != before
    shutil.rmtree(first)
    install("2.0")
    upgraded = packages_sha256()
    assert upgraded not in (before, installed)
    shutil.rmtree(tmp_path / "router_probe-2.0.dist-info")
    assert packages_sha256() == before
