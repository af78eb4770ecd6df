"""Option groups with declared constraints, checked in one place (training.config's TrainConfig;
docs/training.md#options).

A group is a dataclass whose options are declared `option(rule, default)`: a `Rule` (a test,
what a value must be, one value it rejects and a few it accepts, which the tests try) beside
the default, as scikit-learn's `_parameter_constraints`. Rules across options: `Needs` (one line
each of a table, `needs`) and `Check`; `Default` fills an option left empty from the others.
`check` applies them and raises ValueError naming the dotted key; `nested` reads options as
given (nested mappings, dotted keys, the flat keys of before the groups with a FutureWarning).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Rule:
    """An option's constraint: `test(value)`, what a value `must` be, a value it rejects (`bad`)
    and values it accepts (`good`)."""

    test: Callable[[Any], bool]
    must: str
    bad: Any
    good: tuple = ()


def one_of(*choices) -> Rule:
    return Rule(lambda v: v in choices, f"must be one of {', '.join(map(str, choices))}", "<none of these>", choices)


def integer(low: int, high: int | None = None, *, empty: bool = False) -> Rule:
    """An integer in [low, high] (>= low without high); `empty`: None too."""
    span = f"in [{low}, {high}]" if high is not None else f">= {low}"
    return Rule(
        lambda v: (
            (empty and v is None)
            or (isinstance(v, int) and not isinstance(v, bool) and low <= v <= (high if high is not None else v))
        ),
        f"must be {'empty or ' if empty else ''}an integer {span}",
        low - 1,
        (low,) if high is None else (low, high),
    )


def number(low: float, high: float | None = None, *, open_low: bool = False, open_high: bool = False) -> Rule:
    """A number from `low` to `high` (no bound without high), either end open or closed."""
    if high is None:
        span = f"{'>' if open_low else '>='} {low:g}"
    else:
        span = f"in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"

    def test(v) -> bool:
        return (
            isinstance(v, (int, float))
            and not isinstance(v, bool)
            and (v > low if open_low else v >= low)
            and (high is None or (v < high if open_high else v <= high))
        )

    return Rule(
        test, f"must be a number {span}", low if open_low else low - 1, ((low + high) / 2 if high else low + 1,)
    )


FLAG = Rule(lambda v: isinstance(v, bool), "must be true or false", "yes", (False, True))
TEXT = Rule(lambda v: isinstance(v, str), "must be text", 7, ("",))
NAME = Rule(lambda v: isinstance(v, str) and bool(v), "must be non-empty text", "", ("name",))
PATH = Rule(lambda v: isinstance(v, (str, os.PathLike)) and bool(str(v)), "must be a path", 7, ("folder",))
OPTIONAL_PATH = Rule(lambda v: v is None or isinstance(v, (str, os.PathLike)), "must be empty or a path", 7, (None,))
PATHS = Rule(
    lambda v: isinstance(v, list) and all(not isinstance(p, (bytes, Mapping)) for p in v),
    "must be a list of paths",
    "logs/",
    ([],),
)


def mapping(of: str) -> Rule:
    return Rule(lambda v: isinstance(v, dict), f"must be a mapping of {of}", ["num_leaves", 63], ({},))


def option(rule: Rule, default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING) -> Any:
    """A group's option: a dataclass field with its `default` (or its default's `factory`) and its `rule`."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"rule": rule})


@dataclass(frozen=True)
class Needs:
    """When option `key` holds one of `values`, option `other` must hold one of `allowed`: `why`."""

    key: str
    values: tuple
    other: str
    allowed: tuple
    why: str

    def holds(self, value_of: Callable[[str], Any]) -> bool:
        """Whether the rule holds where option `k` has value `value_of(k)`."""
        return value_of(self.key) not in self.values or value_of(self.other) in self.allowed

    def broken(self, config) -> str | None:
        if self.holds(lambda key: value_at(config, key)):
            return None
        shown = " or ".join(str(a).lower() if isinstance(a, bool) else str(a) for a in self.allowed)
        return f"needs {self.other}={shown}, not {value_at(config, self.other)!r}: {self.why}"

    def example(self, rules: Mapping[str, Rule]) -> dict:
        """Options that break this rule (and, declared well, no rule before it)."""
        return {self.key: self.values[0], self.other: next(v for v in rules[self.other].good if v not in self.allowed)}


def needs(table: str) -> list[Needs]:
    """Needs rules from a table, one a line: `key=v|v needs other=a|a: why` (values: names, integers, true)."""

    def values(text: str) -> tuple:
        return tuple(True if v == "true" else int(v) if v.isdigit() else v for v in text.split("|"))

    rules = []
    for line in filter(None, table.splitlines()):
        rule, _, why = line.partition(": ")
        (key, given), (other, allowed) = (side.split("=") for side in rule.split(" needs "))
        rules.append(Needs(key, values(given), other, values(allowed), why))
    return rules


@dataclass(frozen=True)
class Check:
    """Any other rule over the configuration: `test(config)`, named by `key`, with the options
    of one configuration that breaks it (`bad`)."""

    key: str
    test: Callable[[Any], bool]
    must: str
    bad: dict

    def broken(self, config) -> str | None:
        return None if self.test(config) else self.must

    def example(self, rules: Mapping[str, Rule]) -> dict:
        return self.bad


@dataclass(frozen=True)
class Default:
    """Option `key` left empty (None or "") gets `value(config)`, from the options before it."""

    key: str
    value: Callable[[Any], Any]


def preferring(key: str, *candidates) -> Callable[[Any], Any]:
    """A Default's value: the first of `candidates` that breaks no Needs rule on `key`, else the last."""

    def value(config) -> Any:
        rules = [r for r in type(config).rules if isinstance(r, Needs) and key in (r.key, r.other)]
        for candidate in candidates:
            trial = {**dotted(config), key: candidate}
            if all(rule.holds(trial.__getitem__) for rule in rules):
                return candidate
        return candidates[-1]

    return value


def by(key: str, table: Mapping, otherwise) -> Callable[[Any], Any]:
    """A Default's value: `table[value of key]`, else `otherwise`."""
    return lambda config: next((v for k, v in table.items() if k == value_at(config, key)), otherwise)


def groups_of(cls) -> dict[str, type]:
    """The option groups of a configuration class: field name -> its group dataclass."""
    return {
        f.name: f.default_factory
        for f in dataclasses.fields(cls)
        if isinstance(f.default_factory, type) and dataclasses.is_dataclass(f.default_factory)
    }


def _rules(cls) -> dict[str, Rule]:
    return {f.name: f.metadata["rule"] for f in dataclasses.fields(cls) if "rule" in f.metadata}


def constraints_of(cls) -> dict[str, Rule]:
    """Every option's Rule by dotted key: the class's own and its groups'."""
    found = {f"{name}.{key}": rule for name, group in groups_of(cls).items() for key, rule in _rules(group).items()}
    return {**_rules(cls), **found}


def value_at(config, key: str):
    group, _, name = key.rpartition(".")
    return getattr(getattr(config, group) if group else config, name)


def _set_at(config, key: str, value) -> None:
    group, _, name = key.rpartition(".")
    setattr(getattr(config, group) if group else config, name, value)


def flat(values: Mapping) -> dict[str, Any]:
    """Nested options ({group: {option: value}, option: value}) by dotted key: `group.option`."""
    return {
        f"{key}.{option}" if isinstance(value, Mapping) else key: inner
        for key, value in values.items()
        for option, inner in (value.items() if isinstance(value, Mapping) else [(None, value)])
    }


def options_of(config) -> dict[str, Any]:
    """Every option of `config` as given to its constructor: {group: {option: value}, option: value}."""
    return {
        f.name: dict(vars(value)) if dataclasses.is_dataclass(value) else value
        for f in dataclasses.fields(config)
        for value in [getattr(config, f.name)]
    }


def dotted(config) -> dict[str, Any]:
    """Every option of `config` by dotted key."""
    return flat(options_of(config))


def check(config) -> None:
    """Fill the declared defaults, then apply every option's Rule and every cross-option rule of
    `config`'s class; ValueError naming the first dotted key whose value breaks one."""
    cls = type(config)
    for default in cls.defaults:
        if value_at(config, default.key) in (None, ""):
            _set_at(config, default.key, default.value(config))
    for key, rule in constraints_of(cls).items():
        value = value_at(config, key)
        if not rule.test(value):
            raise ValueError(f"config {key}={value!r}: {rule.must}")
    for rule in cls.rules:
        broken = rule.broken(config)
        if broken:
            raise ValueError(f"config {rule.key}={value_at(config, rule.key)!r}: {broken}")


def nested(values: Mapping, cls, *, renamed: Mapping[str, str], where: str = "config", warn: bool = True) -> dict:
    """`values` as {group: {option: value}, option: value} for configuration class `cls`: nested
    mappings and dotted keys both; a key of `renamed` (a flat key of before the groups) becomes
    its dotted key, with a FutureWarning naming it (unless not `warn`). An option whose default
    is a mapping (LightGBM's parameters) takes dotted keys inside it. ValueError naming an
    unknown key and the known keys of its group."""
    if not isinstance(values, Mapping):
        raise ValueError(f"{where}: expected a mapping of option -> value, got {type(values).__name__}")
    groups = groups_of(cls)
    top = [f.name for f in dataclasses.fields(cls) if f.name not in groups]
    out: dict = {}

    def place(path: list[str], value) -> None:
        head = path[0]
        if head in groups and (len(path) > 1 or isinstance(value, Mapping)):
            if len(path) == 1:
                for key, inner in value.items():
                    place([head, *str(key).split(".")], inner)
                return
            defaults = groups[head]()
            known = sorted(f.name for f in dataclasses.fields(defaults))
            takes_keys = path[1] in known and isinstance(getattr(defaults, path[1]), dict)  # LightGBM's parameters
            if len(path) == 2 and isinstance(value, Mapping) and not takes_keys:
                path = [*path, *map(str, value)][:3]  # keys under an option of one value: the first is unknown
            if path[1] not in known or (len(path) > 2 and not takes_keys):
                raise ValueError(f"{where}: unknown option {'.'.join(path)}; the options of {head}: {', '.join(known)}")
            _assign(out, path[:2], _nest_inside(path[2:], value))
        elif head in groups and head not in renamed:
            raise ValueError(
                f"{where}: {head}={value!r}: {head} is a group of options, give a mapping or {head}.OPTION"
            )
        elif head in top and len(path) == 1:
            _assign(out, path, value)
        elif head in renamed:
            if warn:
                warnings.warn(
                    f"{where}: option {head!r} is now {renamed[head]!r} (the flat name is deprecated)",
                    FutureWarning,
                    stacklevel=4,
                )
            place(renamed[head].split(".") + path[1:], value)
        else:
            known = sorted([*top, *(f"{g}.*" for g in groups)])
            raise ValueError(f"{where}: unknown option {'.'.join(path)}; known: {', '.join(known)}")

    for key, value in values.items():
        place(str(key).split("."), value)
    return out


def _nest_inside(path: list[str], value):
    for part in reversed(path):
        value = {part: value}
    return value


def _assign(out: dict, path: list[str], value) -> None:
    """out[path] = value, a mapping merged into the mapping already there (recursively)."""
    *parents, leaf = path
    for part in parents:
        out = out.setdefault(part, {})
    if not isinstance(value, Mapping):
        out[leaf] = value
        return
    if not isinstance(out.get(leaf), dict):
        out[leaf] = {}  # a copy: merging a later layer never changes the mapping given
    for key, inner in value.items():
        _assign(out[leaf], [key], inner)


def merged(*layers: dict) -> dict:
    """Nested option mappings, each on top of the ones before (mappings merged key by key)."""
    out: dict = {}
    for layer in layers:
        for key, value in layer.items():
            _assign(out, [key], value)
    return out
