"""serving.testing as an app uses it: docs/clients.md's example of an app's tests, run as written
against the suite's test bundle (its test functions called here, as pytest would)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.real_data  # routing is the session's trained test bundle


def test_the_docs_example_of_testing_an_app_passes(bundle):
    doc = (ROOT / "docs" / "clients.md").read_text(encoding="utf-8")
    section = doc.split("## Testing your app without a network")[1].split("\n## ")[0]
    (example,) = re.findall(r"```python\n(.*?)```", section, re.S)
    example = example.replace('Router.load("artifacts/router")', f"Router.load({str(bundle)!r})")
    assert "artifacts/router" not in example
    namespace: dict = {}
    exec(compile(example, "docs/clients.md", "exec"), namespace)
    tests = {name: fn for name, fn in namespace.items() if name.startswith("test_")}
    assert len(tests) == 3, sorted(tests)
    for test in tests.values():
        test()
