"""`python -m pipelines.proxy_load` with tiny numbers: it starts the stub and the proxy, measures
both, stops them, writes its JSON, and no request fails."""

from __future__ import annotations

import json

import pytest

from pipelines import proxy_load

pytestmark = pytest.mark.real_data  # the proxy loads the session's trained test bundle


def test_the_load_test_runs_and_no_request_fails(bundle, tmp_path, capsys):
    out = tmp_path / "proxy_load.json"
    code = proxy_load.main(
        [
            "--bundle",
            str(bundle),
            "--clients",
            "4",
            "--requests",
            "40",
            "--rounds",
            "2",
            "--max-seconds",
            "60",
            "--out",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert code == 0 and report["failed_requests"] == 0 and report["completed"] and report["proxy_exit_code"] == 0
    for mode in ("json", "stream"):
        result = report["results"][mode]
        assert result["direct"]["n"] == result["proxy"]["n"] == 40
        assert sum(result["proxy"]["served_by"].values()) == 40 and set(result["proxy"]["served_by"]) <= {
            "edge",
            "cloud",
        }
        assert result["proxy"]["p50_ms"] > 0 and "p99" in result["added_by_proxy_ms"]
    assert "failed requests: 0" in capsys.readouterr().out
