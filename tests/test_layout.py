"""The layout holds: no import cycles, every package imports only the ones below it, and
importing the SDK or a command loads no heavy library, nor the SDK's test doubles (serving.testing)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

from tests.conftest import ROOT

PACKAGES = ("serving", "data", "evaluation", "training", "pipelines")
# What each package may import from the project (itself always): each only from below.
ALLOWED = {
    "serving": set(),
    "data": {"serving"},
    "evaluation": {"serving", "data"},
    "training": {"serving", "data", "evaluation"},
    "pipelines": {"serving", "data", "evaluation", "training"},
}
HEAVY = (
    "torch",
    "sentence_transformers",
    "lightgbm",
    "sklearn",
    "mlflow",
    "dask",
    "distributed",
    "pandas",
    "datasets",
    "matplotlib",
    "onnx",
    "onnxmltools",
)
# The client and server extras: only the routed chat client (serving.chat) and the proxy load them.
NETWORK = ("httpx2", "httpcore2", "anyio", "starlette", "uvicorn", "prometheus_client", "openai", "h11", "asyncio")


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports() -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere (top level or inside functions)."""
    modules = {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found |= {t for t in targets if t in modules}
        graph[name] = found - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert cycles(project_imports()) == []


def test_each_package_imports_only_the_packages_below_it():
    wrong = [
        (module, target)
        for module, targets in project_imports().items()
        for target in targets
        if target.split(".")[0] != module.split(".")[0] and target.split(".")[0] not in ALLOWED[module.split(".")[0]]
    ]
    assert wrong == []


def test_commands_do_not_import_each_other():
    graph = project_imports()
    assert [
        (m, t) for m, ts in graph.items() for t in ts if m.startswith("pipelines.") and t.startswith("pipelines.")
    ] == []


def loaded_heavy(*modules: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    code = (
        f"import importlib, json, sys; [importlib.import_module(m) for m in {list(modules)!r}]; "
        f"print(json.dumps(sorted(h for h in {list(heavy)!r} if h in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout)


def test_importing_the_sdk_or_a_command_loads_no_heavy_library():
    assert loaded_heavy("serving", "serving.routing._router", "serving.scoring._scorer", "serving._cli") == []
    commands = [
        "pipelines.train",
        "pipelines.evaluate",
        "pipelines.results",
        "pipelines.bench",
        "pipelines.scale",
        "pipelines.simulate",
        "pipelines.fetch_data",
        "pipelines.proxy_load",
    ]
    assert loaded_heavy(*commands) == []


def test_importing_the_sdk_or_its_cli_loads_no_client_or_server_library():
    """httpx2, the ASGI stack and even asyncio load only when the chat client or the proxy is used."""
    assert (
        loaded_heavy(
            "serving",
            "serving.routing._router",
            "serving.monitoring._traffic",
            "serving.monitoring._outcome_log",
            "serving._cli",
            "serving.bundle._watcher",
            "serving.proxy",
            "serving.proxy._config",
            heavy=NETWORK,
        )
        == []
    )


def test_the_sdk_never_loads_its_test_doubles():
    """serving.testing is for tests and examples: the router, the chat client, the proxy and the CLI
    run without it."""
    product = ("serving", "serving.chat", "serving.proxy._app", "serving.proxy._serve", "serving._cli")
    assert loaded_heavy(*product, heavy=("serving.testing",)) == []


def test_the_test_doubles_without_the_server_extra_say_which_extra_to_install():
    code = "import sys; sys.modules['uvicorn'] = None; import serving.testing"  # as if uvicorn were not installed
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().endswith(
        "ImportError: serving.testing serves with uvicorn: pip install 'edge-cloud-router[server]'"
    ), done.stderr[-2000:]


def test_the_whole_log_trainings_tests_are_the_ones_that_use_them():
    """tests/conftest.py deals the tests of the cross-fitted training as one unit, first: the
    list names every test that asks for trained_readme, and the files it deals next exist. (Each
    session training runs once whatever the dealing: tests/test_session_fixtures.py.)"""
    from tests.conftest import README_TRAINING_TESTS, SLOWEST_FILES

    asking = re.compile(r"^def (test_\w+)\(([^)]*)\)", re.MULTILINE)
    using = {
        f"tests/{path.name}::{name}"
        for path in (ROOT / "tests").glob("test_*.py")
        for name, parameters in asking.findall(path.read_text(encoding="utf-8"))
        if re.search(r"\btrained_readme\b", parameters)
    }
    assert using == set(README_TRAINING_TESTS)
    assert all((ROOT / "tests" / name).is_file() for name in SLOWEST_FILES)
    conftest = (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
    for fixture in ("trained_small", "trained_small_again", "trained_full", "trained_readme", "encoder_cache"):
        body = conftest.split(f"def {fixture}(", 1)[1].split("\n@pytest.fixture", 1)[0]
        assert "once_per_session(" in body, f"{fixture} is not built once per session"


# What the one routing core replaced (issue 46): two designs side by side, told apart by forks like
# these. A two-endpoint bundle is decided, run and logged as the N-endpoint case with two endpoints.
FORK_MARKERS = re.compile(
    r"\bchooser is (not )?None\b|\.zoned\b|\bendpoint_names or\b|\bendpoints is None\b.*\bbundle\b"
    r"|\b(execute_endpoints|routed_endpoints|endpoint_routing|EndpointChooser|rule_out_sides|_sides_ruled_out)\b"
    r"|\bmanifest\.endpoints\b"
)
# Where the bundle's kind is read on purpose: the manifest that declares it, and the one place the
# chooser's rule is picked from it.
FORK_HOMES = {"serving/bundle/_manifest.py", "serving/routing/_stages.py"}


def test_serving_has_no_fork_on_whether_the_bundle_has_two_or_n_endpoints():
    found = []
    for path in sorted((ROOT / "serving").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in FORK_HOMES:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FORK_MARKERS.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []
    # The markers match what they are meant to (the test can fail).
    assert FORK_MARKERS.search("if routing.chooser is not None:") and FORK_MARKERS.search(
        "from serving.routed_endpoints import x"
    )
