"""Reading the small declarative files the SDK takes (policy files, endpoint specs): JSON, or YAML
when PyYAML is installed (the `yaml` extra). Each caller names what the file is and the error
type it raises, so a message reads "policy file x.yaml is not valid YAML: ...".

What a file may hold is bounded before any caller looks at it, and every way it can be wrong is
the caller's error type with a one-line message of bounded length:
- at most `max_bytes` (1 MiB by default);
- objects and lists nested at most MAX_DEPTH levels (deeper: refused, never a RecursionError);
- YAML: no aliases (`*name`) and no merge keys (`<<`), so a document holds no more values than its
  bytes spell out (aliases let 320 bytes expand to hundreds of millions of values); every key is
  text (`on:` or `1:` load as a boolean or a number: quote them); no key twice in one mapping;
- JSON: no key twice in one object.
Values a message quotes go through `quoted`, which shortens them: a message never grows with the file.
"""

from __future__ import annotations

import functools
import importlib
import json
import reprlib
from pathlib import Path
from typing import Any

from serving._json_values import nests_deeper_than

MAX_DOCUMENT_BYTES = 1 << 20
MAX_DEPTH = 32  # objects and lists inside each other; the SDK's own files need 6
QUOTED_CHARS = 80  # the most a quoted value takes in a message
MESSAGE_CHARS = 400  # the most a decoder's own message (PyYAML's, json's) takes

_SHORT = reprlib.Repr()
_SHORT.maxlevel = 2
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = QUOTED_CHARS
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = _SHORT.maxfrozenset = 4


def quoted(value: object, limit: int = QUOTED_CHARS) -> str:
    """`repr(value)` for an error message, in at most `limit` characters and one line: a long
    string keeps its start and end around "...", a large or deep list or object its first items."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value[: limit + 1])
    try:
        text = _SHORT.repr(value)
    except (ValueError, RecursionError):  # an int past Python's 4,300-digit str limit; a custom repr
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def one_line(message: str) -> str:
    """`message` on one line (runs of whitespace, newlines included, become one space), at most MESSAGE_CHARS."""
    flat = " ".join(message.split())
    return flat if len(flat) <= MESSAGE_CHARS else f"{flat[: MESSAGE_CHARS - 3]}..."


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
        raise error(one_line(f"cannot read {what} {path}: {exc.strerror or exc}")) from None
    if len(raw) > max_bytes:
        raise error(f"{what} {path}: over {max_bytes:,} bytes")
    return raw


def decode_document(raw: bytes, *, source: str, what: str, error: type[Exception]) -> Any:
    """A file's bytes decoded by its suffix: .json, or .yaml / .yml with PyYAML (module doc: what either may hold)."""
    if source.endswith((".yaml", ".yml")):
        try:  # by name: PyYAML is an extra, and ships no type information
            yaml = importlib.import_module("yaml")
        except ImportError:
            raise error(
                f"{what} {source}: reading YAML needs PyYAML, the `yaml` extra "
                f"(pip install 'edge-cloud-router[yaml]'); or write the {what} as JSON"
            ) from None
        try:
            return yaml.load(raw, Loader=_strict_yaml_loader(yaml))  # a SafeLoader, stricter
        except yaml.YAMLError as exc:
            raise error(f"{what} {source} is not valid YAML: {_yaml_problem(exc)}") from None
        except RecursionError:  # not reached within MAX_DEPTH; kept so that no input escapes as one
            raise error(f"{what} {source} is not valid YAML: nested too deep") from None
    if source.endswith(".json"):
        try:
            data = json.loads(raw, object_pairs_hook=_unique_keys)
        except RecursionError:
            raise error(f"{what} {source} is not valid JSON: nested deeper than {MAX_DEPTH} levels") from None
        except ValueError as exc:  # JSONDecodeError, a duplicate key, bytes that are not text
            raise error(f"{what} {source} is not valid JSON: {one_line(str(exc))}") from None
        if nests_deeper_than(data, MAX_DEPTH):
            raise error(f"{what} {source} is not valid JSON: nested deeper than {MAX_DEPTH} levels")
        return data
    raise error(f"{what} {source}: name it .json (or .yaml / .yml with PyYAML)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: the object, or ValueError for a key given twice (json.loads keeps the last)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"key {quoted(key)} appears twice in one object")
        data[key] = value
    return data


def _yaml_problem(exc: Exception) -> str:
    """PyYAML's error on one line: where (line and column, from 1) and what; PyYAML's own message
    spans several lines and quotes the line it stopped at."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if problem is None:
        return one_line(str(exc))
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return one_line(f"{where}{problem}" + (f" ({context})" if context else ""))


@functools.lru_cache(maxsize=None)
def _strict_yaml_loader(yaml: Any) -> Any:  # Any: the yaml module, and a Loader class
    """PyYAML's SafeLoader, refusing what the module doc says a document may not hold."""
    ComposerError, ConstructorError = yaml.composer.ComposerError, yaml.constructor.ConstructorError
    MappingNode, ScalarNode = yaml.nodes.MappingNode, yaml.nodes.ScalarNode
    merge_tag = "tag:yaml.org,2002:merge"

    class StrictLoader(yaml.SafeLoader):  # type: ignore[misc]
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            nests = self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent)
            problem = None  # what this node may not be: an alias, or a list or mapping too deep
            if self.check_event(yaml.AliasEvent):
                problem = (
                    f"found the alias *{self.peek_event().anchor[:40]}: aliases are not accepted (write the value out)"
                )
            elif nests and self.depth >= MAX_DEPTH:
                problem = f"lists and mappings nested deeper than {MAX_DEPTH} levels"
            if problem is not None:
                raise ComposerError(None, None, problem, self.peek_event().start_mark)
            self.depth += nests
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= nests

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, MappingNode):
                seen: set[str] = set()
                for key_node, _ in node.value:
                    if key_node.tag == merge_tag:
                        raise ConstructorError(None, None, "merge keys (<<) are not accepted", key_node.start_mark)
                    key = self.construct_object(key_node, deep=True)
                    if not isinstance(key, str):
                        said = (
                            f"the key {quoted(key_node.value)} loads as {type(key).__name__}, not text: quote it"
                            if isinstance(key_node, ScalarNode)
                            else f"a {type(key).__name__} as a key: keys are text"
                        )
                        raise ConstructorError(None, None, said, key_node.start_mark)
                    if key in seen:
                        raise ConstructorError(
                            None, None, f"the key {quoted(key)} appears twice in one mapping", key_node.start_mark
                        )
                    seen.add(key)
            return super().construct_mapping(node, deep)

        def construct_yaml_int(self, node: Any) -> Any:
            try:
                return super().construct_yaml_int(node)
            except ValueError:  # over Python's 4,300-digit limit for str -> int
                raise ConstructorError(
                    None, None, f"the number {quoted(node.value)} has too many digits", node.start_mark
                ) from None

    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    return StrictLoader
