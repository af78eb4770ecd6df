"""What a training run was made from (docs/architecture.md#tests): SHA-256 digests of the
project's source (SOURCE_PACKAGES' code and shipped data files), the installed packages
(`name==version` of every distribution, kept by a process while their metadata folders stay the
same), the logs' files (by path under their roots; a source that is no local path by its name)
and the options (without where the run writes, OUTPUT_OPTIONS, nor `data`). `make train` writes
them beside the run's figures to `<reports_dir>/run.json` (`write_run`), and `matching_run` tells
whether a recorded run is what training would give now (the suite's README check reuses it).
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib
import json
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from training.config import TrainConfig

SOURCE_PACKAGES = ("data", "evaluation", "pipelines", "serving", "training")
OUTPUT_OPTIONS = ("bundle.path", "cache_dir", "mlflow.tracking_uri", "mlflow.artifact_root", "reports_dir", "data")
RUN_FILE = "run.json"
SOURCE_SUFFIXES = (".py", ".yaml", ".json", ".jsonl")  # code, and the data files it ships
SKIPPED_FOLDERS = frozenset({"__pycache__", "cache", "raw"})  # data/cache, data/raw: caches and fetched logs


def _files_digest(
    roots: Iterable[tuple[str, Path]], suffixes: tuple[str, ...] = ("",), skipped: frozenset[str] = frozenset()
) -> str:
    """SHA-256 over (name / path inside the root, length, bytes) of every file under each root, in
    order: those ending in one of `suffixes`, none inside a folder named in `skipped`."""
    digest = hashlib.sha256()
    for name, root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            inside = path.relative_to(root).parts if path != root else (path.name,)
            if skipped.intersection(inside[:-1]) or not path.name.endswith(suffixes):
                continue
            content = path.read_bytes()
            digest.update(f"{name}/{'/'.join(inside)}\0{len(content)}\0".encode())
            digest.update(content)
    return digest.hexdigest()


def source_sha256() -> str:
    """The project's code as this process imports it."""
    packages = [(name, Path(str(importlib.import_module(name).__file__)).parent) for name in SOURCE_PACKAGES]
    return _files_digest(packages, SOURCE_SUFFIXES, SKIPPED_FOLDERS)


def packages_sha256() -> str:
    """Every installed distribution's name and version (module doc)."""
    return _packages_sha256(_install_folders())


def _install_folders() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each folder on sys.path with its distributions' metadata folders (`name-version.dist-info`,
    `.egg-info`): what installing, upgrading or removing one changes (~1 ms to list)."""
    found = []
    for entry in sys.path:
        try:
            names = sorted(n for n in os.listdir(entry or ".") if n.endswith((".dist-info", ".egg-info")))
        except OSError:  # not a folder, or not there (yet)
            names = []
        found.append((entry, tuple(names)))
    return tuple(found)


@functools.lru_cache(maxsize=4)
def _packages_sha256(install_folders: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    """packages_sha256, kept per `install_folders` (_install_folders: only the cache's key)."""
    names = sorted(f"{d.metadata['Name']}=={d.version}".lower() for d in metadata.distributions())
    return hashlib.sha256("\n".join(names).encode()).hexdigest()


def data_sha256(config: TrainConfig) -> str:
    """The logs the run reads: every file under each local path or glob match, else the source's name."""
    from data.hf_datasets import source_name
    from data.location import default_data_paths

    sources = [source_name(item) for item in config.data] or [str(p) for p in default_data_paths()]
    local: list[tuple[str, Path]] = []
    named: list[str] = []
    for index, source in enumerate(sources):
        matches = sorted(glob.glob(source)) if any(c in source for c in "*?[") else [source]
        found = [Path(m) for m in matches if Path(m).exists()]
        local.extend((f"{index}.{k}", path) for k, path in enumerate(found))
        if not found:
            named.append(source)
    digest = hashlib.sha256(_files_digest(local).encode())
    digest.update("\n".join(named).encode())
    return digest.hexdigest()


def options(config: TrainConfig | dict[str, Any]) -> dict[str, Any]:
    """The options a run's figures depend on, nested: a TrainConfig's, or those of a record (either
    form; an option the record predates at its default)."""
    if not isinstance(config, TrainConfig):
        config = TrainConfig.of(TrainConfig.nested(config, warn=False))
    values = config.to_dict()
    for key in OUTPUT_OPTIONS:
        group, _, option = key.rpartition(".")
        (values.get(group, {}) if group else values).pop(option, None)
    return values


def provenance(config: TrainConfig) -> dict[str, Any]:
    return {
        "source": source_sha256(),
        "packages": packages_sha256(),
        "data": data_sha256(config),
        "options": options(config),
    }


def write_run(config: TrainConfig, made_from: dict[str, Any], bundle: Path, run_id: str, metrics: dict) -> Path:
    """`<reports_dir>/run.json`: what the run was made from (`provenance(config)` as it started),
    its bundle, MLflow run and figures."""
    path = Path(config.reports_dir) / RUN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"provenance": made_from, "bundle": str(bundle), "run_id": run_id, "metrics": metrics}
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(record, allow_nan=True), encoding="utf-8")
    temporary.replace(path)
    return path


def matching_run(path: Path, config: TrainConfig) -> dict[str, Any] | None:
    """The run recorded at `path` when it was made from what `config` would train on now (same
    source, packages, logs and options) and its bundle is still the one it wrote; else None."""
    from serving.bundle._bundle import read_manifest

    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        manifest = read_manifest(record["bundle"])
        made_from = {**record["provenance"], "options": options(record["provenance"]["options"])}
    except Exception:  # no record, no bundle it names, or options of no known form: nothing to reuse
        return None
    if manifest.mlflow.get("run_id") != record.get("run_id"):
        return None  # the bundle was written by another run since
    return record if made_from == provenance(config) else None
