"""The SDK's public face: what `serving` and its subpackages export (pinned here, so adding or
removing a name is a deliberate change), that every exported name imports, that every exception
the SDK defines is a serving.errors.RouterError listed in serving.errors and keeps the standard
base its callers catch, that every name the guides import resolves from `serving` or a
subpackage, and that `import serving` stays as light as it was."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
import subprocess
import sys

import pytest

import serving
import serving.errors
from serving.errors import RouterError
from tests.conftest import ROOT

EXPORTS = {
    "serving": [
        "BundleError",
        "BundleURLWatcher",
        "BundleWatcher",
        "Capabilities",
        "CloudCallError",
        "ConversationState",
        "ConversationStore",
        "ConversationStoreError",
        "Decision",
        "DownloadError",
        "DriftInputError",
        "DriftReference",
        "DriftThresholds",
        "EdgeBusy",
        "EdgePool",
        "Endpoint",
        "EndpointSpecError",
        "EndpointsFailed",
        "Execution",
        "LanguageDetectorMissing",
        "ManifestError",
        "MemoryStore",
        "Needs",
        "OutcomeLog",
        "PolicyWatcher",
        "Price",
        "RecordError",
        "RedisStore",
        "Request",
        "Routable",
        "RouteStages",
        "Router",
        "RouterError",
        "RuleRouter",
        "SigningError",
        "Step",
        "Stickiness",
        "TurnEvidenceError",
        "UndeclaredText",
        "Update",
        "aexecute",
        "drift_report",
        "execute",
        "load_endpoints",
        "needs_of",
        "parse_endpoints",
        "read_bundle",
        "read_records",
    ],
    "serving.errors": [
        "BundleError",
        "CloudCallError",
        "ConfigError",
        "ConversationStoreError",
        "DownloadError",
        "DriftInputError",
        "EdgeBusy",
        "EndpointSpecError",
        "EndpointsFailed",
        "FallbackForbidden",
        "LanguageDetectorMissing",
        "ManifestError",
        "NoFeasibleEndpoint",
        "PolicyError",
        "PolicyFileError",
        "RecordError",
        "RecordShapeError",
        "RequestError",
        "RouterError",
        "SigningError",
        "SlowFirstToken",
        "StreamInterrupted",
        "TurnEvidenceError",
        "UndeclaredText",
        "UpstreamError",
        "UpstreamHTTPError",
        "UpstreamMalformed",
        "UpstreamTimeout",
        "UpstreamUnreachable",
    ],
    "serving.chat": [
        "AsyncChatStream",
        "ChatStream",
        "Completion",
        "Endpoint",
        "RoutedChat",
        "RoutingInfo",
        "SlowFirstToken",
        "StreamInterrupted",
        "UpstreamError",
        "UpstreamHTTPError",
        "UpstreamMalformed",
        "UpstreamTimeout",
        "UpstreamUnreachable",
        "conversation_prompt",
    ],
    "serving.policy": [
        "DETECTORS",
        "ENDPOINTS",
        "Detector",
        "FallbackForbidden",
        "Finding",
        "NoFeasibleEndpoint",
        "PolicyError",
        "PolicyFileError",
        "PolicySet",
        "RedisSpending",
        "Rule",
        "Spending",
        "Verdict",
        "any_detected",
        "check_metadata",
        "detect",
    ],
    "serving.dashboard": [
        "CallPrices",
        "RecordShapeError",
        "RequestSummary",
        "Views",
        "compute_views",
        "from_record",
        "outcomes_from_feedback",
        "render_page",
    ],
    "serving.testing": ["Behaviour", "LocalServer", "Received", "StubUpstream", "dead_url"],
    "serving.proxy": [],  # the server: `python -m serving serve`; its modules hold its parts
}

# Each exception's bases as written (the SDK's tree and the standard base it keeps).
BASES = {
    "RouterError": ("Exception",),
    "BundleError": ("RouterError", "RuntimeError"),
    "CloudCallError": ("RouterError", "RuntimeError"),
    "ConfigError": ("RouterError", "ValueError"),
    "ConversationStoreError": ("RouterError",),
    "DownloadError": ("RouterError", "RuntimeError"),
    "DriftInputError": ("RouterError", "ValueError"),
    "EdgeBusy": ("RouterError", "RuntimeError"),
    "EndpointSpecError": ("RouterError", "ValueError"),
    "EndpointsFailed": ("CloudCallError",),
    "FallbackForbidden": ("PolicyError",),
    "LanguageDetectorMissing": ("RouterError", "RuntimeError"),
    "ManifestError": ("RouterError", "ValueError"),
    "NoFeasibleEndpoint": ("PolicyError",),
    "PolicyError": ("RouterError", "RuntimeError"),
    "PolicyFileError": ("RouterError", "ValueError"),
    "RecordError": ("RouterError", "ValueError"),
    "RecordShapeError": ("RouterError", "ValueError"),
    "RequestError": ("RouterError",),
    "SigningError": ("RouterError", "ValueError"),
    "SlowFirstToken": ("UpstreamTimeout",),
    "StreamInterrupted": ("UpstreamError",),
    "TurnEvidenceError": ("RouterError", "ValueError"),
    "UndeclaredText": ("RecordError",),
    "UpstreamError": ("RouterError",),
    "UpstreamHTTPError": ("UpstreamError",),
    "UpstreamMalformed": ("UpstreamError",),
    "UpstreamTimeout": ("UpstreamError", "TimeoutError"),
    "UpstreamUnreachable": ("UpstreamError", "ConnectionError"),
}

# Named in the guides' imports from a module, and not re-exported from `serving` on purpose.
NOT_AT_THE_TOP = {
    # `serving.execution._execute` is the module the guides also write to (serving.execution._execute.default_edge_pool
    # = EdgePool(n)): a function of that name on the package would hide it. Router.execute and
    # Router.aexecute are the calls from `serving`.
    ("serving.execution._execute", "execute"),
    ("serving.execution._execute", "aexecute"),
}
SUBPACKAGES = ("serving.chat", "serving.policy", "serving.dashboard", "serving.testing", "serving.proxy")


def sdk_modules() -> list[str]:
    """Every module of serving/, but the ones that run a command when imported."""
    return sorted(
        m.name for m in pkgutil.walk_packages(serving.__path__, "serving.") if not m.name.endswith(".__main__")
    )


def defined_exceptions() -> dict[str, type[BaseException]]:
    """module.Class -> every exception class defined in serving/ (importing every module)."""
    found = {}
    for name in ["serving", *sdk_modules()]:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return found


@pytest.mark.parametrize("package", sorted(EXPORTS))
def test_the_exported_names_are_pinned_and_each_imports(package):
    module = importlib.import_module(package)
    assert getattr(module, "__all__", []) == EXPORTS[package]
    for name in EXPORTS[package]:
        assert getattr(module, name) is not None, f"{package}.{name}"
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    assert set(EXPORTS[package]) <= set(namespace)
    assert set(EXPORTS[package]) <= set(dir(module))


def test_every_exception_the_sdk_defines_is_a_router_error_listed_in_serving_errors():
    found = defined_exceptions()
    assert len(found) >= len(BASES)  # the walk found them (27 public ones, and private ones)
    assert [name for name, cls in found.items() if not issubclass(cls, RouterError)] == []
    public = {cls.__name__: cls for cls in found.values() if not cls.__name__.startswith("_")}
    assert sorted(public) == EXPORTS["serving.errors"]
    assert len(public) == len([c for c in found.values() if not c.__name__.startswith("_")])  # one class a name
    for name, cls in public.items():
        assert getattr(serving.errors, name) is cls


def test_each_exception_keeps_its_standard_base():
    assert sorted(BASES) == EXPORTS["serving.errors"]
    for name, bases in BASES.items():
        assert tuple(b.__name__ for b in getattr(serving.errors, name).__bases__) == bases, name
    errors = serving.errors
    # what callers caught before RouterError, and still can
    assert issubclass(errors.UpstreamTimeout, TimeoutError)
    assert issubclass(errors.SlowFirstToken, TimeoutError)
    assert issubclass(errors.UpstreamUnreachable, ConnectionError)
    assert issubclass(errors.EndpointsFailed, errors.CloudCallError)
    assert issubclass(errors.EndpointsFailed, RuntimeError)
    for name in ("ManifestError", "SigningError", "EndpointSpecError", "PolicyFileError", "ConfigError"):
        assert issubclass(getattr(errors, name), ValueError), name
    for name in ("BundleError", "CloudCallError", "PolicyError", "NoFeasibleEndpoint", "FallbackForbidden"):
        assert issubclass(getattr(errors, name), RuntimeError), name


def test_each_exception_is_exported_by_its_package():
    """Besides serving.errors, an exception is importable from the package of the module that
    defines it (the proxy's from their modules: the proxy exports nothing)."""
    for name in EXPORTS["serving.errors"]:
        home = getattr(serving.errors, name).__module__
        package = next((p for p in SUBPACKAGES if home.startswith(p + ".")), "serving")
        if package != "serving.proxy":
            assert name in EXPORTS[package], (name, package)


def documented_imports() -> set[tuple[str, str]]:
    """(module, name) for every `from serving... import a, b` in README.md and docs/*.md."""
    found = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for module, wrapped, line in re.findall(r"from (serving(?:\.\w+)*) import (?:\(([^)]*)\)|([^\n#`]*))", text):
            found |= {(module, part.split()[0]) for part in (wrapped or line).split(",") if part.strip()}
    return found


def test_every_name_the_guides_import_is_exported_from_serving_or_its_subpackage():
    documented = documented_imports()
    assert ("serving", "Router") in documented and ("serving.chat", "RoutedChat") in documented
    for module, name in sorted(documented):
        assert hasattr(importlib.import_module(module), name), f"from {module} import {name}"
        if (module, name) in NOT_AT_THE_TOP:
            continue
        package = next((p for p in SUBPACKAGES if module == p or module.startswith(p + ".")), "serving")
        assert name in EXPORTS[package], f"from {module} import {name}: not in {package}.__all__"
        assert getattr(importlib.import_module(package), name) is getattr(importlib.import_module(module), name)


def loaded_after(code: str) -> list[str]:
    probe = ("onnxruntime", "tokenizers", "re2", "httpx2", "starlette", "uvicorn", "matplotlib", "asyncio")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import json, sys; {code}; print(json.dumps(sorted(set({probe!r}) & set(sys.modules))))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


def test_importing_serving_or_its_errors_stays_light():
    """`import serving` loads numpy and the routing modules: onnxruntime and tokenizers when a
    bundle loads, re2 when a policy runs, the client and server libraries never. The exports of
    the outcome log, drift and downloads, and serving.errors' names, load their modules on use."""
    assert loaded_after("import serving, serving.errors") == []
    lazy = ", ".join(f"serving.{name}" for name in EXPORTS["serving"])
    assert loaded_after(f"import serving; {lazy}") == []
    assert loaded_after("from serving.errors import BundleError, DownloadError, PolicyFileError, ConfigError") == []
    # the chat client's errors come with the chat client (the `client` extra), as before
    assert loaded_after("from serving.errors import UpstreamTimeout") == ["asyncio", "httpx2"]


def test_an_unknown_name_is_an_attribute_error():
    for module in (serving, serving.errors):
        with pytest.raises(AttributeError, match="no attribute 'Nope'"):
            module.Nope  # noqa: B018
    from serving import errors  # a submodule is still found through the package

    assert errors.DriftInputError is serving.DriftInputError
