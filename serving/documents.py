"""Reading the small declarative files the SDK takes (policy files, endpoint specs): JSON, or YAML
when PyYAML is installed (the `yaml` extra). Each caller names what the file is and the error
type it raises, so a message reads "policy file x.yaml is not valid YAML: ..."."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

MAX_DOCUMENT_BYTES = 1 << 20


def read_document(path: str | Path, *, what: str, error: type[Exception], max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """The decoded document in the file at `path` (unchecked: the caller checks its shape); `error`
    when it cannot be read, is over `max_bytes`, or cannot be decoded."""
    return decode_document(
        read_bytes(path, what=what, error=error, max_bytes=max_bytes), source=str(path), what=what, error=error
    )


def read_bytes(path: str | Path, *, what: str, error: type[Exception], max_bytes: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The file's bytes, at most `max_bytes` of them; `error` when it cannot be read or is larger."""
    try:
        with Path(path).open("rb") as file:
            raw = file.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise error(f"{what} {path}: over {max_bytes:,} bytes")
    return raw


def decode_document(raw: bytes, *, source: str, what: str, error: type[Exception]) -> Any:
    """A file's bytes decoded by its name's suffix: .json, or .yaml / .yml with PyYAML."""
    if source.endswith((".yaml", ".yml")):
        try:  # by name: PyYAML is an extra, and ships no type information
            yaml = importlib.import_module("yaml")
        except ImportError:
            raise error(
                f"{what} {source}: reading YAML needs PyYAML, the `yaml` extra "
                f"(pip install 'edge-cloud-router[yaml]'); or write the {what} as JSON"
            ) from None
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise error(f"{what} {source} is not valid YAML: {exc}") from None
    if source.endswith(".json"):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise error(f"{what} {source} is not valid JSON: {exc}") from None
    raise error(f"{what} {source}: name it .json (or .yaml / .yml with PyYAML)")
