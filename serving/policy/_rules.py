"""Policy rules: a declarative file of ordered rules that force, forbid or prefer endpoints, or set
the zone, for a request; the Router applies them to every decision and the model cannot override
them. The file format, each condition and how matching rules combine: docs/policies.md#rules.

Everything is checked and compiled when the file is loaded, so applying a policy costs a few
dictionary look-ups per rule, and only the detectors rules name run, each at most once a request,
on the prompt folded once (serving.policy._detectors.fold).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from serving._contract import CLOUD, EDGE, PRECISIONS, ZONES
from serving._json_values import finite_number, json_kind
from serving._router_error import RouterError
from serving.endpoints._capabilities import CAPABILITIES, RULE_PREFIX
from serving.features._documents import decode_document, quoted, read_bytes
from serving.policy._budgets import PERIODS, Spending
from serving.policy._detectors import DETECTORS, fold
from serving.policy._errors import NoFeasibleEndpoint

if TYPE_CHECKING:
    from serving.endpoints._capabilities import Needs
    from serving.policy._detectors import Detector, Folded
    from serving.routing._request import Request

ENDPOINTS = (EDGE, CLOUD)  # the endpoints of today's two-endpoint router
ACTIONS = ("force", "forbid", "prefer", "route")
SOFT_ACTIONS = ("prefer", "route")  # they order or pick among the allowed endpoints; the first that matches decides
RULE_KEYS = ("name", "when", "then", "endpoint", "zone", "description")
_SIZE_KEYS = ("min_tokens", "max_tokens", "min_chars", "max_chars")
WHEN_KEYS = ("metadata", "detected", *_SIZE_KEYS, "precision", "matches", "budget", "needs")
BUDGET_KEYS = ("key", "limit", "period")
MAX_PATTERN_CHARS = 4096  # one `matches` expression
MAX_REPEAT = 1000  # RE2's largest repetition count: a{n}, a{m,n}
FILE_KEYS = ("rules", "description")
MAX_POLICY_BYTES = 1 << 20
# A rule name is written to logs, reasons and response headers as is: a short code, no spaces.
NAME_SHAPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_YAML_END = re.compile(rb"\.\.\.(?:[ \t]+#.*)?")  # a YAML file's last line: the end-of-document marker


class PolicyFileError(RouterError, ValueError):
    """A policy file (or dict) that cannot be used; the message names the file, the rule (its
    index in `rules` and its name) and the key."""


class _Facts:
    """What the rules look at for one request; each detector runs at most once."""

    __slots__ = ("text", "n_tokens", "precision", "metadata", "found", "spending", "needs", "_utf8", "_folded")

    def __init__(
        self,
        text: str,
        n_tokens: int,
        precision: str | None,
        metadata: Mapping[str, str] | None,
        spending: Spending | None = None,
        needs: Needs | None = None,
    ) -> None:
        self.text, self.n_tokens, self.precision = text, n_tokens, precision
        self.metadata: Mapping[str, str] = metadata or {}
        self.found: dict[str, bool] = {}
        self.spending, self.needs = spending, needs
        self._utf8: dict[int | None, bytes] = {}
        self._folded: Folded | None = None

    def utf8(self, head_chars: int | None) -> bytes:
        """The prompt, or its first `head_chars` characters, as the UTF-8 that `matches` searches
        (encoded once a request; a lone surrogate, which UTF-8 cannot hold, stays as its 3 bytes)."""
        data = self._utf8.get(head_chars)
        if data is None:
            data = self._utf8[head_chars] = self.text[:head_chars].encode("utf-8", "surrogatepass")
        return data

    def over_budget(self, key: str, limit: float, period: str) -> bool:
        """Whether the holder the metadata names under `key` has spent `limit` (no holder: no)."""
        holder = self.metadata.get(key)
        return holder is not None and self.spending is not None and self.spending.spent(key, holder, period) >= limit

    def detected(self, detectors: tuple[Detector, ...]) -> bool:
        for detector in detectors:
            found = self.found.get(detector.name)
            if found is None:
                if self._folded is None:  # the prompt as the detectors read it, folded once a request
                    self._folded = fold(self.text)
                found = self.found[detector.name] = detector.found_in(self._folded)
            if found:
                return True
        return False


@dataclass(frozen=True)
class Rule:
    """One checked rule. Conditions left out are None (or empty) and always hold."""

    index: int
    name: str
    action: str  # "force" | "forbid" | "prefer" | "route"
    endpoint: str  # a route rule's endpoint is its zone's first target
    zone: str | None = None  # route rules only: the zone they set
    metadata: tuple[tuple[str, frozenset[str]], ...] = ()
    precision: frozenset[str | None] | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    min_chars: int | None = None
    max_chars: int | None = None
    detectors: tuple[Detector, ...] = ()
    pattern: Any = None  # `matches`, its expressions joined and compiled by RE2 (re2 ships no types)
    head_chars: int | None = None  # `matches` looks at this many first characters; None: all
    budget: tuple[str, float, str] | None = None  # (metadata key, limit, period): holds when spent
    needs: tuple[str, ...] = ()  # capabilities (serving.endpoints._capabilities): holds when the request needs any
    description: str = ""

    def matches(self, request: _Facts) -> bool:
        """Whether every condition holds: the cheap ones first, the detectors last."""
        for key, values in self.metadata:
            if request.metadata.get(key) not in values:
                return False
        if self.precision is not None and request.precision not in self.precision:
            return False
        if self.min_tokens is not None and request.n_tokens < self.min_tokens:
            return False
        if self.max_tokens is not None and request.n_tokens > self.max_tokens:
            return False
        if self.min_chars is not None and len(request.text) < self.min_chars:
            return False
        if self.max_chars is not None and len(request.text) > self.max_chars:
            return False
        if self.pattern is not None and self.pattern.search(request.utf8(self.head_chars)) is None:
            return False
        if self.budget is not None and not request.over_budget(*self.budget):
            return False
        if self.needs and (request.needs is None or not any(getattr(request.needs, c) for c in self.needs)):
            return False
        return not self.detectors or request.detected(self.detectors)


@dataclass
class Verdict:
    """What the matching rules say of one request: the endpoints allowed, in the policy's order, and the
    rules that decided (the force, each removed endpoint's first forbid, the first matching prefer or route)."""

    allowed: tuple[str, ...]
    forced: Rule | None = None
    forbidden_by: dict[str, Rule] | None = None
    preferred: Rule | None = None

    @property
    def rule(self) -> Rule | None:
        """The rule that decided most: a force, else the first forbid, else a prefer."""
        if self.forced is not None:
            return self.forced
        if self.forbidden_by:
            return min(self.forbidden_by.values(), key=lambda rule: rule.index)
        return self.preferred


class PolicySet:
    """An ordered, checked set of rules for `endpoints` (module doc), built by load, parse or from_dict."""

    def __init__(
        self,
        rules: Sequence[Rule],
        *,
        endpoints: Sequence[str] = ENDPOINTS,
        source: str = "<policy>",
        version: str = "",
    ) -> None:
        self.rules = tuple(rules)
        self.endpoints = tuple(endpoints)
        self.source, self.version = source, version
        # (rule, its first metadata key, that key's values): most rules of a real policy fail on
        # their first metadata condition, tested inline before the rule's own `matches`.
        self._hard = tuple(_screened(rule) for rule in self.rules if rule.action not in SOFT_ACTIONS)
        self._soft = tuple(_screened(rule) for rule in self.rules if rule.action in SOFT_ACTIONS)
        self.detectors = tuple(dict.fromkeys(d.name for rule in self.rules for d in rule.detectors))
        # the metadata keys whose holders' spend budget rules read (Router.record_spend counts these)
        self.budget_keys = frozenset(rule.budget[0] for rule in self.rules if rule.budget is not None)

    def __repr__(self) -> str:
        return f"PolicySet({len(self.rules)} rules from {self.source}, version {self.version})"

    @classmethod
    def load(cls, path: str | Path, *, endpoints: Sequence[str] = ENDPOINTS) -> "PolicySet":
        """The policy file at `path`: JSON (.json), or YAML (.yaml / .yml) when PyYAML is installed
        (the `yaml` extra). PolicyFileError for anything wrong, naming the rule and the key."""
        raw = read_bytes(path, what="policy file", error=PolicyFileError, max_bytes=MAX_POLICY_BYTES)
        return cls.parse(raw, source=str(path), endpoints=endpoints)

    @classmethod
    def parse(cls, raw: bytes, *, source: str, endpoints: Sequence[str] = ENDPOINTS) -> "PolicySet":
        """A policy from a file's bytes; `source` names it in errors, and its suffix says the format.
        A YAML file must end with the line `...`, YAML's end-of-document marker: the first part of a
        YAML file is often valid YAML with fewer rules, so a file read while it is being written
        would load as a whole one (JSON needs nothing: a JSON document cut short never parses)."""
        data = decode_document(raw, source=source, what="policy file", error=PolicyFileError)
        if source.endswith((".yaml", ".yml")) and not _YAML_END.fullmatch(raw.rstrip().rsplit(b"\n", 1)[-1]):
            raise PolicyFileError(
                f"{source}: a YAML policy file ends with the line `...` (YAML's end-of-document marker), and this one "
                "does not: it may have been read while being written, with rules missing. Add the line `...` at its end"
            )
        return cls.from_dict(data, source=source, endpoints=endpoints, version=hashlib.sha256(raw).hexdigest()[:12])

    @classmethod
    def from_dict(
        cls, data: object, *, source: str = "<policy>", endpoints: Sequence[str] = ENDPOINTS, version: str = ""
    ) -> "PolicySet":
        """A policy from its decoded document `{"rules": [...]}`; PolicyFileError naming what is wrong."""
        endpoints = tuple(endpoints)
        if not isinstance(data, dict):
            raise PolicyFileError(f'{source}: a policy is an object {{"rules": [...]}}, got {json_kind(data)}')
        for key in data:
            if key not in FILE_KEYS:
                raise PolicyFileError(f"{source}: unknown key {quoted(key)}; a policy has {', '.join(FILE_KEYS)}")
        rules = data.get("rules")
        if not isinstance(rules, list):
            raise PolicyFileError(f"{source}: key 'rules' must be a list of rules, got {json_kind(rules)}")
        checked: dict[str, Rule] = {}  # by name, in the file's order
        for index, item in enumerate(rules):
            rule = _rule(item, index, source, endpoints)
            if rule.name in checked:
                raise _error(source, index, rule.name, "name", f"also the name of rules[{checked[rule.name].index}]")
            checked[rule.name] = rule
        if not version:
            version = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]
        return cls(tuple(checked.values()), endpoints=endpoints, source=source, version=version)

    def evaluate(
        self,
        request: Request | str,
        n_tokens: int,
        precision: str | None = None,
        metadata: Mapping[str, str] | None = None,
        spending: Spending | None = None,
        needs: Needs | None = None,
    ) -> Verdict:
        """What the rules say of one request with `n_tokens` tokens: a serving.Request (its text,
        precision, metadata and needs; `needs` given here stands for its own, as the chooser passes
        them with the language read from the text), or its text with the other facts given one by
        one. `spending`: the budgets' ledger (the Router's). NoFeasibleEndpoint when none is left."""
        if isinstance(request, str):
            facts = _Facts(request, n_tokens, precision, metadata, spending, needs)
        else:
            if precision is not None or metadata is not None:
                raise TypeError("give precision and metadata in the Request, not beside it")
            needs = request.needs if needs is None else needs
            facts = _Facts(request.text, n_tokens, request.precision, request.metadata, spending, needs)
        given = facts.metadata
        forced: Rule | None = None
        forbidden_by: dict[str, Rule] = {}
        for rule, key, values in self._hard:
            if key is not None and given.get(key) not in values:
                continue
            if rule.action == "force" and forced is not None:
                continue  # the first matching force wins
            if (rule.action == "forbid" and rule.endpoint in forbidden_by) or not rule.matches(facts):
                continue
            if rule.action == "force":
                forced = rule
            else:
                forbidden_by[rule.endpoint] = rule
        if forced is not None:
            against = forbidden_by.get(forced.endpoint)
            if against is not None:
                raise NoFeasibleEndpoint(
                    f"policy '{forced.name}' forces {forced.endpoint}, which policy '{against.name}' forbids: "
                    "no endpoint may serve this request",
                    rules=[forced.name, against.name],
                )
            return Verdict((forced.endpoint,), forced=forced, forbidden_by=forbidden_by)
        allowed = tuple(endpoint for endpoint in self.endpoints if endpoint not in forbidden_by)
        if not allowed:
            names = [rule.name for rule in forbidden_by.values()]
            raise NoFeasibleEndpoint(
                f"policies {', '.join(repr(name) for name in names)} forbid every endpoint "
                f"({', '.join(self.endpoints)}): no endpoint may serve this request",
                rules=names,
            )
        for rule, key, values in self._soft:
            if key is not None and given.get(key) not in values:
                continue
            if (rule.action == "route" or rule.endpoint in allowed) and rule.matches(facts):
                return Verdict(allowed, forbidden_by=forbidden_by, preferred=rule)
        return Verdict(allowed, forbidden_by=forbidden_by)


def _screened(rule: Rule) -> tuple[Rule, str | None, frozenset[str]]:
    key, values = rule.metadata[0] if rule.metadata else (None, frozenset())
    return rule, key, values


# Checking one rule.
def _error(source: str, index: int, name: object, key: str, message: str) -> PolicyFileError:
    shown = f" ({quoted(name)})" if isinstance(name, str) else ""
    return PolicyFileError(f"{source}: rules[{index}]{shown}, key {quoted(key)}: {message}")


def _rule(item: object, index: int, source: str, endpoints: tuple[str, ...]) -> Rule:
    if not isinstance(item, dict):
        raise PolicyFileError(f"{source}: rules[{index}] must be an object, got {json_kind(item)}")
    name = item.get("name")
    fail = functools.partial(_error, source, index, name)  # fail(key, message): the error naming this rule
    for key in item:
        if key not in RULE_KEYS:
            raise fail(key, f"unknown key; a rule has {', '.join(RULE_KEYS)}")
    if not isinstance(name, str) or not NAME_SHAPE.fullmatch(name):
        raise fail(
            "name", "required: 1-64 letters, digits and _.:- (it is logged as is), starting with a letter or digit"
        )
    if name.startswith(RULE_PREFIX):
        raise fail("name", f"names starting with {RULE_PREFIX!r} are the built-in capability rules' (needs:images)")
    action, endpoint, zone = item.get("then"), item.get("endpoint"), item.get("zone")
    if action not in ACTIONS:
        raise fail("then", f"must be one of {', '.join(ACTIONS)}, got {quoted(action)}")
    if action == "route":
        if endpoints != ENDPOINTS:
            raise fail("then", f"route sets a zone of the two-endpoint router ({', '.join(ENDPOINTS)}); use prefer")
        if zone not in ZONES:
            raise fail("zone", f"a route rule sets a zone: one of {', '.join(ZONES)}, got {quoted(zone)}")
        if "endpoint" in item:
            raise fail("endpoint", "a route rule names a zone, not an endpoint")
        endpoint = CLOUD if zone == CLOUD else EDGE  # where a request in this zone runs first
    else:
        if "zone" in item:
            raise fail("zone", f"only route rules set a zone; a {action} rule names an endpoint")
        if endpoint not in endpoints:
            raise fail("endpoint", f"unknown endpoint {quoted(endpoint)}; the endpoints are {', '.join(endpoints)}")
    description = item.get("description", "")
    if not isinstance(description, str):
        raise fail("description", f"must be a string, got {json_kind(description)}")
    when = item.get("when", {})
    if not isinstance(when, dict):
        raise fail("when", f"must be an object of conditions, got {json_kind(when)}")
    for key in when:
        if key not in WHEN_KEYS:
            raise fail(f"when.{key}", f"unknown condition; conditions are {', '.join(WHEN_KEYS)}")
    sizes = {key: _size(when[key], fail, f"when.{key}") for key in _SIZE_KEYS if key in when}
    for low, high in (("min_tokens", "max_tokens"), ("min_chars", "max_chars")):
        if low in sizes and high in sizes and sizes[low] > sizes[high]:
            raise fail(f"when.{low}", f"{sizes[low]} is above when.{high} ({sizes[high]}): the rule never matches")
    pattern, head_chars = _matches(when["matches"], fail) if "matches" in when else (None, None)
    budget = _budget(when["budget"], fail) if "budget" in when else None
    return Rule(
        index=index,
        name=name,
        action=action,
        endpoint=endpoint,
        metadata=_metadata(when["metadata"], fail) if "metadata" in when else (),
        precision=_precision(when["precision"], fail) if "precision" in when else None,
        detectors=_detectors(when["detected"], fail) if "detected" in when else (),
        zone=zone if action == "route" else None,
        pattern=pattern,
        head_chars=head_chars,
        budget=budget,
        needs=_needs(when["needs"], fail) if "needs" in when else (),
        description=description,
        **sizes,
    )


def _size(value: object, fail: Any, key: str) -> int:  # Any: the rule's fail(key, message) -> error
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(key, f"must be a whole number >= 0, got {quoted(value)}")
    return value


def _strings(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else [value]


def _metadata(value: object, fail: Any) -> tuple[tuple[str, frozenset[str]], ...]:
    if not isinstance(value, dict) or not value:
        raise fail("when.metadata", f"must be a non-empty object of key -> value or [values], got {quoted(value)}")
    conditions = []
    for key, wanted in value.items():
        values = _strings(wanted)
        if not values or not all(isinstance(v, str) for v in values):
            raise fail(f"when.metadata.{key}", f"must be a string or a non-empty list of strings, got {quoted(wanted)}")
        conditions.append((key, frozenset(str(v) for v in values)))
    return tuple(conditions)


def _precision(value: object, fail: Any) -> frozenset[str | None]:
    values = _strings(value)
    known = (*PRECISIONS, None)
    for item in values:
        if item not in known:
            raise fail(
                "when.precision",
                f"unknown precision {quoted(item)}; use {', '.join(PRECISIONS)} or null (none declared)",
            )
    if not values:
        raise fail("when.precision", "must not be an empty list")
    return frozenset(item for item in values if item is None or isinstance(item, str))


def _matches(value: object, fail: Any) -> tuple[Any, int | None]:
    """`matches`: an expression, a list of them, or {"pattern": ..., "head_chars": n}; the
    expressions joined into one case-insensitive RE2 expression (Rule.pattern, Rule.head_chars).
    An expression RE2 cannot run, or would read otherwise than Python's re, is refused here."""
    head_chars = None
    if isinstance(value, dict):
        for key in value:
            if key not in ("pattern", "head_chars"):
                raise fail(f"when.matches.{key}", "unknown key; use pattern and head_chars")
        if "head_chars" in value:
            head_chars = _size(value["head_chars"], fail, "when.matches.head_chars")
        value = value.get("pattern")
    patterns = _strings(value)
    if not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise fail("when.matches", f"must be a regular expression or a non-empty list of them, got {quoted(value)}")
    texts = [p for p in patterns if isinstance(p, str)]
    joined = "|".join(f"(?:{p})" for p in texts)
    if len(joined) > MAX_PATTERN_CHARS:
        raise fail("when.matches", f"over {MAX_PATTERN_CHARS} characters")
    re2 = _re2(fail)
    options = re2.Options()
    options.case_sensitive, options.log_errors = False, False
    for number, text in enumerate(texts, 1):
        which = f"expression {quoted(text)}" + (f" ({number} of {len(texts)})" if len(texts) > 1 else "")
        problem = _repeat_problem(text)
        if problem is None:
            try:
                re2.compile(text, options)
            except re2.error as exc:
                problem = _re2_said(exc)
            except UnicodeEncodeError:
                problem = "it holds a lone surrogate, which is not text"
        if problem is not None:
            raise fail(
                "when.matches", f"{which} is not a regular expression RE2 runs: {_said_briefly(problem)}. {RE2_SYNTAX}"
            )
    try:
        return re2.compile(joined, options), head_chars
    except re2.error as exc:  # each compiled alone: only the whole can be too large for RE2's memory
        raise fail("when.matches", f"the expressions together: {_said_briefly(_re2_said(exc))}") from None


# What a refused expression's message ends with.
RE2_SYNTAX = (
    "RE2 runs expressions in time linear in the prompt: no backreferences, lookarounds, atomic groups, "
    "possessive quantifiers or \\Z (write \\z); docs/policies.md#file-format"
)
_REPEAT = re.compile(r"\{(\d*)(,?)(\d*)\}")  # at a `{`: a repetition as Python's re reads one


def _said_briefly(problem: str) -> str:
    return " ".join(problem.split())[:100]


def _re2_said(exc: Exception) -> str:
    """RE2's message (re2.error carries it as bytes)."""
    said = exc.args[0] if exc.args else ""
    return said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)


def _re2(fail: Any) -> Any:  # Any: the re2 module, which ships no type information
    """google-re2's `re2` module (a dependency of the SDK); the rule's error when it is missing."""
    try:
        module = importlib.import_module("re2")
    except ImportError:
        module = None
    if module is None or not hasattr(module, "Options"):
        raise fail(
            "when.matches",
            "needs google-re2, a dependency of edge-cloud-router missing here (pip install google-re2); "
            "another package named re2 does not do",
        )
    return module


def _repeat_problem(pattern: str) -> str | None:
    """Why a repetition in `pattern` would mean something else to RE2 than to Python's re, or None.
    Python reads a{,5} as a{0,5} and a{4294967295} as a repetition; RE2 reads both as text, and
    refuses counts over 1000 (MAX_REPEAT). Braces in a character class or escaped are text to both."""
    index, end, in_class = 0, len(pattern), False
    while index < end:
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            if pattern.startswith("[:", index):  # a POSIX class inside a class, [[:alpha:]]
                close = pattern.find(":]", index + 2)
                index = close + 2 if close >= 0 else index + 1
                continue
            in_class = char != "]"
        elif char == "[":
            in_class = True
            index += 1
            if pattern.startswith("^", index):
                index += 1
            if pattern.startswith("]", index):  # a first ] is text
                index += 1
            continue
        elif char == "{" and (repeat := _REPEAT.match(pattern, index)) is not None:
            low, comma, high = repeat.groups()  # all three empty: {}, text to both
            if comma and not low:
                return f"{repeat.group()} is a repetition to Python's re and text to RE2: write {{0,{high}}}"
            if any(len(count) > 4 or int(count) > MAX_REPEAT for count in (low, high) if count):
                return f"the repetition {quoted(repeat.group(), 40)} counts over {MAX_REPEAT}, RE2's limit"
        index += 1
    return None


def _budget(value: object, fail: Any) -> tuple[str, float, str]:
    """`budget`: {"key": metadata key, "limit": amount >= 0, "period": hour | day | month}."""
    if not isinstance(value, dict):
        raise fail("when.budget", f'must be an object {{"key", "limit", "period"}}, got {json_kind(value)}')
    for key in value:
        if key not in BUDGET_KEYS:
            raise fail(f"when.budget.{key}", f"unknown key; a budget has {', '.join(BUDGET_KEYS)}")
    holder, limit, period = value.get("key"), value.get("limit"), value.get("period")
    if not isinstance(holder, str) or not holder:
        raise fail("when.budget.key", f"required: the metadata key naming whose budget it is, got {quoted(holder)}")
    amount = finite_number(limit)
    if amount is None or amount < 0:
        raise fail("when.budget.limit", f"required: a finite number >= 0, got {quoted(limit)}")
    if period not in PERIODS:
        raise fail("when.budget.period", f"must be one of {', '.join(PERIODS)}, got {quoted(period)}")
    return holder, amount, period


def _needs(value: object, fail: Any) -> tuple[str, ...]:
    """`needs`: a capability or a non-empty list of them (serving.endpoints._capabilities.CAPABILITIES)."""
    names = _strings(value)
    if not names or not all(isinstance(name, str) for name in names):
        raise fail("when.needs", f"must be a capability or a non-empty list of them, got {quoted(value)}")
    for name in names:
        if name not in CAPABILITIES:
            raise fail("when.needs", f"unknown capability {quoted(name)}; capabilities are {', '.join(CAPABILITIES)}")
    return tuple(str(name) for name in dict.fromkeys(names))


def _detectors(value: object, fail: Any) -> tuple[Detector, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(name, str) for name in value):
        raise fail("when.detected", f"must be a non-empty list of detector names, got {quoted(value)}")
    for name in value:
        if name not in DETECTORS:
            raise fail("when.detected", f"unknown detector {quoted(name)}; known detectors: {', '.join(DETECTORS)}")
    return tuple(DETECTORS[name] for name in dict.fromkeys(value))
