"""Hostile policy files and endpoint specs (serving.features._documents, serving.policy._rules,
serving.endpoints._record, serving.proxy._config): every bad file is refused with the file's own error
type (PolicyFileError, EndpointSpecError, ConfigError) and one line of bounded length, quickly:
YAML aliases, deep nesting, numbers too large for a float, keys that are not text or given twice,
long values quoted in a message. An upstream key read from the proxy's own token variable is
refused. And `python -m serving serve` started on such a file prints one line and exits non-zero,
with no traceback (the real command, in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving.endpoints._record import Endpoint, EndpointSpecError, load_endpoints
from serving.features._documents import MAX_DEPTH, quoted
from serving.policy import PolicyFileError, PolicySet
from serving.proxy._config import ConfigError, ProxyConfig, load_endpoints_file
from tests.conftest import ROOT

MAX_MESSAGE = 600  # what a one-line error may take: the file's name, the place, a quoted value
RULE = {"name": "local-only", "when": {"metadata": {"privacy": "local"}}, "then": "forbid", "endpoint": "cloud"}
TOKEN = "proxy-token-0123456789abcdef"


def one_bounded_line(message: str) -> str:
    assert "\n" not in message and len(message) < MAX_MESSAGE, (len(message), message[:300])
    return message


def alias_bomb(levels: int) -> str:
    """YAML whose aliases expand 10x a level: `levels` lines spell out 10**levels values."""
    lines = ["&l0 [x,x,x,x,x,x,x,x,x,x]"]
    lines += [f"&l{i} [{','.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "[" + ",".join(lines) + "]"


def policy_yaml(value: str) -> str:
    """A YAML policy whose one rule's metadata condition holds `value` (YAML text)."""
    return f"rules:\n- name: r\n  when:\n    metadata:\n      k: {value}\n  then: forbid\n  endpoint: cloud\n...\n"


def spec_yaml(name: str = "phone", context_tokens: str = "4096", extra: str = "") -> str:
    return (
        f"endpoints:\n- name: {name}\n  where: device\n  price: {{per_call: 0}}\n  latency_ms: 100\n"
        f"  context_tokens: {context_tokens}\n{extra}"
    )


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- 1. YAML aliases, and every quoted value shortened ------------------------------------------


def test_yaml_aliases_are_refused_before_they_expand(tmp_path):
    """Six lines of aliases spell out a million values; quoted whole in the error (`{value!r}`),
    the message was millions of characters (320 bytes of them: 351 million, 0.7 GB, 4.5 s)."""
    bomb = alias_bomb(6)
    policy = write(tmp_path, "policy.yaml", policy_yaml(bomb))
    assert len(policy.read_bytes()) < 400
    started = time.perf_counter()
    with pytest.raises(PolicyFileError) as caught:
        PolicySet.load(policy)
    assert "found the alias *l0: aliases are not accepted" in one_bounded_line(str(caught.value))
    spec = write(tmp_path, "endpoints.yaml", spec_yaml(name=bomb))
    with pytest.raises(EndpointSpecError) as spec_error:
        load_endpoints(spec)
    assert "aliases are not accepted" in one_bounded_line(str(spec_error.value))
    with pytest.raises(ConfigError) as config_error:
        load_endpoints_file(str(spec), environ={})
    assert "aliases are not accepted" in one_bounded_line(str(config_error.value))
    assert time.perf_counter() - started < 1.0


def test_yaml_merge_keys_are_refused(tmp_path):
    path = write(tmp_path, "policy.yaml", policy_yaml("{<<: {a: b}}"))
    with pytest.raises(PolicyFileError, match=r"line 5, column \d+: merge keys \(<<\) are not accepted"):
        PolicySet.load(path)


HUGE = "x" * 200_000


@pytest.mark.parametrize(
    "rule",
    [
        {**RULE, "when": {"metadata": {"privacy": [[HUGE]] * 4}}},
        {**RULE, "when": {"metadata": {HUGE: 3}}},
        {**RULE, "when": {HUGE: 1}},
        {**RULE, HUGE: 1},
        {**RULE, "name": HUGE},
        {**RULE, "then": HUGE},
        {**RULE, "endpoint": HUGE},
        {**RULE, "when": {"precision": [HUGE]}},
        {**RULE, "when": {"detected": [HUGE]}},
        {**RULE, "when": {"needs": HUGE}},
        {**RULE, "when": {"min_tokens": HUGE}},
        {**RULE, "when": {"matches": [HUGE[:4000], 1]}},
        {**RULE, "when": {"matches": "(" + HUGE[:4000]}},
        {**RULE, "when": {"budget": {"key": "u", "limit": HUGE, "period": "day"}}},
        {**RULE, "when": {"budget": {"key": "u", "limit": 1, "period": HUGE}}},
        {**RULE, "when": {"budget": {"key": [HUGE], "limit": 1, "period": "day"}}},
    ],
)
def test_a_value_quoted_in_a_policy_error_is_shortened(tmp_path, rule):
    path = write(tmp_path, "policy.json", json.dumps({"rules": [rule]}))
    with pytest.raises(PolicyFileError) as caught:
        PolicySet.load(path)
    assert str(caught.value).startswith(f"{path}: rules[0]")
    one_bounded_line(str(caught.value))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", HUGE),
        ("where", HUGE),
        ("latency_ms", HUGE),
        ("price", {"per_call": [HUGE]}),
        ("price", {HUGE: 1}),
        ("capabilities", {"languages": [HUGE]}),
        ("capabilities", {"json": HUGE}),
        (HUGE, 1),
    ],
)
def test_a_value_quoted_in_an_endpoint_spec_error_is_shortened(tmp_path, field, value):
    item = {"name": "phone", "where": "device", "price": {"per_call": 0}, "latency_ms": 1, "context_tokens": 9}
    path = write(tmp_path, "spec.json", json.dumps({"endpoints": [{**item, field: value}]}))
    with pytest.raises(EndpointSpecError) as caught:
        load_endpoints(path)
    assert str(caught.value).startswith(f"{path}: endpoints[0]")
    one_bounded_line(str(caught.value))


def test_quoted_keeps_a_values_start_and_end_in_one_line():
    assert quoted("lease") == "'lease'" and quoted(12) == "12" and quoted(None) == "None"
    long = quoted("a" * 1000 + "\n" + "z" * 1000)
    assert long.startswith("'aaa") and long.endswith("zzz'") and "..." in long and len(long) <= 80
    assert len(quoted([[["x" * 500] * 500] * 500])) <= 80 and len(quoted(10**400)) <= 80


# --- 3. deep nesting, numbers too large, integers too long: the file's own error -----------------

DEEP = 5000  # levels: past Python's recursion limit


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("flow.yaml", policy_yaml("[" * DEEP + "]" * DEEP)),
        ("block.yaml", policy_yaml("\n" + "".join(" " * (8 + 2 * i) + "-\n" for i in range(40)) + " " * 90 + "x")),
        ("mapping.yaml", policy_yaml("{a: " * DEEP + "1" + "}" * DEEP)),
        (
            "deep.json",
            json.dumps({"rules": [{**RULE, "when": {"metadata": {"k": "["}}}]}).replace('"["', "[" * DEEP + "]" * DEEP),
        ),
        (
            "just-too-deep.json",
            json.dumps({"rules": [{**RULE, "description": [[[[[[[[[["x"]]]]]]]]]] * 1}]})
            .replace("[[[[[[[[[[", "[" * (MAX_DEPTH + 1))
            .replace("]]]]]]]]]]", "]" * (MAX_DEPTH + 1)),
        ),
    ],
)
def test_deep_nesting_is_refused_with_the_files_error(tmp_path, name, text):
    """PyYAML composes recursively: 5,000 levels raised RecursionError out of PolicySet.load."""
    path = write(tmp_path, name, text)
    with pytest.raises(PolicyFileError) as caught:
        PolicySet.load(path)
    assert f"nested deeper than {MAX_DEPTH} levels" in one_bounded_line(str(caught.value))
    spec = write(tmp_path, "spec" + path.suffix, text.replace("rules:", "endpoints:").replace('"rules"', '"endpoints"'))
    with pytest.raises(EndpointSpecError) as spec_error:
        load_endpoints(spec)
    assert f"nested deeper than {MAX_DEPTH} levels" in one_bounded_line(str(spec_error.value))


def test_numbers_too_large_for_a_float_are_refused_with_the_files_error(tmp_path):
    """A 400-digit budget limit or context_tokens raised OverflowError (math.isfinite); a
    5,000-digit YAML integer ValueError (Python's int-from-text limit)."""
    digits = "9" * 400
    budget = {**RULE, "when": {"budget": {"key": "user", "limit": int(digits), "period": "day"}}}
    path = write(tmp_path, "policy.json", json.dumps({"rules": [budget]}))
    with pytest.raises(PolicyFileError, match=r"key 'when.budget.limit': required: a finite number >= 0, got 9999"):
        PolicySet.load(path)
    one_bounded_line(str(pytest.raises(PolicyFileError, PolicySet.load, path).value))
    spec = write(tmp_path, "spec.yaml", spec_yaml(context_tokens=digits))
    with pytest.raises(EndpointSpecError, match=r"context_tokens must be a finite number, got int 9999"):
        load_endpoints(spec)
    long_int = write(tmp_path, "long.yaml", policy_yaml("9" * 5000))
    with pytest.raises(PolicyFileError, match=r"line 5, column 10: the number '9999.*' has too many digits"):
        PolicySet.load(long_int)
    call = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "timeout_s": int(digits)}
    item = {"name": "edge", "where": "device", "price": {"per_call": 0}, "latency_ms": 1, "context_tokens": 9}
    config = write(tmp_path, "upstreams.json", json.dumps({"endpoints": [{**item, **call}]}))
    with pytest.raises(ConfigError, match=r"\('edge'\): timeout_s=9999.*: must be a positive number of seconds"):
        load_endpoints_file(str(config), environ={})
    one_bounded_line(str(pytest.raises(ConfigError, load_endpoints_file, str(config), environ={}).value))


# --- 4. keys that are not text or given twice; the proxy's token as an upstream key -------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            policy_yaml("x").replace("      k: x", "      on: x"),
            "line 5, column 7: the key 'on' loads as bool, not text",
        ),
        (policy_yaml("x").replace("      k: x", "      1: x"), "the key '1' loads as int, not text"),
        (policy_yaml("x").replace("      k: x", "      null: x"), "the key 'null' loads as NoneType, not text"),
        (policy_yaml("x").replace("      k: x", "      [a, b]: x"), "a list as a key: keys are text"),
        (
            policy_yaml("x").replace("  then: forbid\n", "  then: forbid\n  then: force\n"),
            "line 7, column 3: the key 'then' appears twice",
        ),
        (
            "rules: []\nrules:\n- name: r\n  then: forbid\n  endpoint: cloud\n...\n",
            "the key 'rules' appears twice in one mapping",
        ),
    ],
)
def test_yaml_keys_must_be_text_and_unique(tmp_path, text, says):
    """`on:` loaded as True, so a metadata condition on it never matched; a second `rules:` or
    `then:` silently replaced the first."""
    path = write(tmp_path, "policy.yaml", text)
    with pytest.raises(PolicyFileError) as caught:
        PolicySet.load(path)
    assert says in one_bounded_line(str(caught.value)) and "is not valid YAML" in str(caught.value)
    quoted_key = write(tmp_path, "quoted.yaml", policy_yaml("x").replace("      k: x", "      'on': x"))
    assert PolicySet.load(quoted_key).rules[0].metadata == (("on", frozenset({"x"})),)


def test_json_keys_given_twice_are_refused(tmp_path):
    twice = '{"rules": [{"name": "r", "then": "forbid", "then": "force", "endpoint": "cloud"}]}'
    with pytest.raises(PolicyFileError, match=r"is not valid JSON: key 'then' appears twice in one object"):
        PolicySet.load(write(tmp_path, "policy.json", twice))
    spec = '{"endpoints": [], "endpoints": [{"name": "a"}]}'
    with pytest.raises(EndpointSpecError, match=r"is not valid JSON: key 'endpoints' appears twice"):
        load_endpoints(write(tmp_path, "spec.json", spec))
    doubled = spec_yaml(extra="  context_tokens: 8192\n")
    with pytest.raises(EndpointSpecError, match=r"the key 'context_tokens' appears twice in one mapping"):
        load_endpoints(write(tmp_path, "spec.yaml", doubled))


def upstreams_file(tmp_path: Path, key_env: str) -> str:
    item = {"name": "edge", "where": "device", "price": {"per_call": 0}, "latency_ms": 1, "context_tokens": 9}
    call = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "key_env": key_env}
    return str(write(tmp_path, "upstreams.json", json.dumps({"endpoints": [{**item, **call}]})))


def test_the_proxys_token_is_never_an_upstream_key(tmp_path):
    environ = {"ROUTER_PROXY_TOKEN": TOKEN, "MY_TOKEN": TOKEN, "SAME_VALUE": TOKEN, "EDGE_KEY": "sk-edge"}
    with pytest.raises(ConfigError, match=r"key_env is ROUTER_PROXY_TOKEN, the proxy's client token"):
        load_endpoints_file(upstreams_file(tmp_path, "ROUTER_PROXY_TOKEN"), environ=environ)
    with pytest.raises(ConfigError, match=r"key_env is MY_TOKEN, the proxy's client token"):
        load_endpoints_file(upstreams_file(tmp_path, "MY_TOKEN"), environ=environ, token_env="MY_TOKEN")
    with pytest.raises(ConfigError, match=r"key_env must be the name of an environment variable"):
        load_endpoints_file(upstreams_file(tmp_path, "X" * 100_000), environ=environ)
    # Another variable holding the same secret: refused once the token is known.
    same = load_endpoints_file(upstreams_file(tmp_path, "SAME_VALUE"), environ=environ)
    with pytest.raises(ConfigError, match=r"the API key of edge is the proxy's client token"):
        ProxyConfig(bundle="b", endpoints=same, token=TOKEN)
    with pytest.raises(ConfigError, match=r"the API key of cloud is the proxy's client token"):
        ProxyConfig(
            bundle="b",
            edge=Endpoint("http://h/v1", "e"),
            cloud=Endpoint("http://h/v1", "c", api_key=TOKEN),
            token=TOKEN,
        )
    own = load_endpoints_file(upstreams_file(tmp_path, "EDGE_KEY"), environ=environ)
    assert ProxyConfig(bundle="b", endpoints=own, token=TOKEN).upstreams["edge"].api_key == "sk-edge"


def serve(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m serving serve` on port 0 with the rule table (no bundle) and `options`."""
    return subprocess.run(
        [sys.executable, "-m", "serving", "serve", "--bundle", str(tmp_path / "none"), "--port", "0", *options],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


TWO_UPSTREAMS = ["--edge-url", "http://127.0.0.1:9/v1", "--edge-model", "e"]
TWO_UPSTREAMS += ["--cloud-url", "http://127.0.0.1:9/v1", "--cloud-model", "c"]


def test_the_proxy_key_options_refuse_the_token_variable(tmp_path):
    done = serve(tmp_path, *TWO_UPSTREAMS, "--cloud-key-env", "ROUTER_PROXY_TOKEN", env={"ROUTER_PROXY_TOKEN": TOKEN})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--cloud-key-env ROUTER_PROXY_TOKEN: that is the proxy's client token" in done.stderr
    assert TOKEN not in done.stderr + done.stdout


BAD_POLICIES = {
    "aliases.yaml": policy_yaml(alias_bomb(6)),
    "deep.yaml": policy_yaml("[" * DEEP + "]" * DEEP),
    "budget.json": json.dumps(
        {"rules": [{**RULE, "when": {"budget": {"key": "u", "limit": 10**400, "period": "day"}}}]}
    ),
    "regex.json": json.dumps({"rules": [{**RULE, "when": {"matches": "a{4294967295}"}}]}),
    "long-int.yaml": policy_yaml("9" * 5000),
    "half.yaml": policy_yaml("x").removesuffix("...\n"),
}


@pytest.mark.parametrize("name", BAD_POLICIES)
def test_the_proxy_started_on_a_bad_policy_file_says_why_in_one_line_and_exits_1(tmp_path, name):
    """It caught PolicyFileError only: the RecursionError, OverflowError and re's OverflowError of
    these files ended it with a traceback of up to 207 KB."""
    path = write(tmp_path, name, BAD_POLICIES[name])
    done = serve(tmp_path, *TWO_UPSTREAMS, "--policy", str(path))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(done.stderr) < 2000, done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert f"cannot start: {path}" in line or f"cannot start: policy file {path}" in line
    assert len(done.stderr.splitlines()) <= 3  # the line, and at most uvicorn's setup noise


BAD_SPECS = {
    "aliases.yaml": (spec_yaml(name=alias_bomb(6)), "aliases are not accepted"),
    "deep.yaml": (spec_yaml(extra="  description: " + "[" * DEEP + "]" * DEEP + "\n"), "nested deeper than"),
    "context.yaml": (
        spec_yaml(context_tokens="9" * 400, extra="  upstream: {url: 'http://127.0.0.1:9/v1', model: m}\n"),
        "context_tokens must be a finite number",
    ),
    "on.yaml": (spec_yaml(extra="  capabilities: {on: true}\n"), "the key 'on' loads as bool"),
}


@pytest.mark.parametrize("name", BAD_SPECS)
def test_the_proxy_started_on_a_bad_endpoints_file_says_why_in_one_line_and_exits_2(tmp_path, name):
    text, says = BAD_SPECS[name]
    path = write(tmp_path, name, text)
    done = serve(tmp_path, "--endpoints", str(path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(done.stderr) < 4000, done.stderr[-2000:]
    last = done.stderr.splitlines()[-1]
    assert last.startswith("python -m serving serve: error: --endpoints: ") and says in last
    assert len(last) < MAX_MESSAGE + 60
