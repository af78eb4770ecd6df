"""`make loadtest`: what the routing proxy adds to a request's latency, on loopback.

Starts a stub chat-completions server (serving.testing) and the proxy
(`python -m serving serve`, with the stub as both edge and cloud) as processes on 127.0.0.1,
then sends the same requests with N concurrent clients to the stub directly and through the
proxy, in alternating rounds so that both see the same machine, and reports p50 / p90 / p99
latency of each, what the proxy adds, throughput, the CPU time the stub and the proxy spend
per request (from /proc: steady where latencies move with the machine's load), and every
failed request (a status other than 200, a transport error, or an answer that is not the
stub's). Non-streamed and streamed
(time to the complete stream). Bounded: a fixed number of requests and --max-seconds of wall
time, after which it stops; both processes are stopped at the end. Writes bench/proxy_load.json.
Exit code 0 when every request succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

PROMPTS = [
    "What is 2+2?",
    "Translate 'good morning' into French.",
    "A train leaves at 3pm going 60 mph; when does it cover 150 miles?",
    "Summarise the plot of Hamlet in two sentences.",
    "Write a haiku about rain.",
    "Which of the following best explains the difference between gross margin and operating margin?",
    "Name three prime numbers larger than 100.",
    "Explain recursion to a ten-year-old. " * 200,
]  # the last: cloud


def _start(command: list[str], pattern: str, log: Path, timeout_s: float = 60.0) -> tuple[subprocess.Popen, str]:
    """A process whose log (stdout and stderr) says where it listens; (process, the URL it printed)."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = re.search(pattern, log.read_text(errors="replace"))
        if match:
            return process, match.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    _stop(process)
    raise RuntimeError(f"{' '.join(command[:4])} did not start:\n{log.read_text(errors='replace')[-2000:]}")


def _stop(process: subprocess.Popen) -> int | None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) a process has used so far, from /proc; None where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _body(i: int, model: str, stream: bool) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
        "max_tokens": 32,
        **({"stream": True} if stream else {}),
    }


def _check(response, raw: bytes, stream: bool) -> str | None:
    """Why a response is a failure, or None when it is the stub's complete answer."""
    if response.status_code != 200:
        return f"HTTP {response.status_code}: {raw[:200]!r}"
    if stream:
        return None if raw.endswith(b"data: [DONE]\n\n") and b'"content": "answer"' in raw else "incomplete stream"
    try:
        return None if json.loads(raw)["choices"][0]["message"]["content"] == "answer from stub" else "wrong answer"
    except (ValueError, KeyError, IndexError, TypeError):
        return "not a chat completion"


async def _phase(client, url: str, model: str, n: int, clients: int, stream: bool, deadline: float) -> dict:
    """n requests from `clients` concurrent workers: latencies (s), failures, who served."""
    import httpx2

    latencies, failures, served, counter = [], [], Counter(), iter(range(n))

    async def worker():
        for i in counter:
            if time.monotonic() > deadline:
                failures.append("stopped: --max-seconds reached")
                return
            start = time.perf_counter()
            try:
                async with client.stream("POST", url, json=_body(i, model, stream)) as response:
                    raw = await response.aread()
            except httpx2.HTTPError as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            elapsed = time.perf_counter() - start
            problem = _check(response, raw, stream)
            if problem:
                failures.append(problem)
            else:
                latencies.append(elapsed)
                served[response.headers.get("x-router-served-by", "direct")] += 1

    await asyncio.gather(*(worker() for _ in range(clients)))
    return {"latencies": latencies, "failures": failures, "served": served}


def _summary(latencies: list[float], wall_s: float) -> dict:
    import numpy as np

    if not latencies:
        return {"n": 0}
    ms = np.asarray(latencies) * 1000
    return {
        "n": len(latencies),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p90_ms": round(float(np.percentile(ms, 90)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "mean_ms": round(float(ms.mean()), 3),
        "max_ms": round(float(ms.max()), 3),
        "requests_per_s": round(len(latencies) / wall_s, 1) if wall_s else None,
    }


async def _measure(stub_url: str, proxy_url: str, args, stream: bool, deadline: float, pids: dict) -> dict:
    """Direct and proxied requests in alternating rounds, after a warm-up of each."""
    import httpx2

    limits = httpx2.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    targets = {
        "direct": (f"{stub_url}/chat/completions", "edge-model"),
        "proxy": (f"{proxy_url}/chat/completions", "router"),
    }
    results = {
        name: {"latencies": [], "failures": [], "served": Counter(), "wall_s": 0.0, "cpu": Counter()}
        for name in targets
    }
    async with httpx2.AsyncClient(limits=limits, timeout=60) as client:
        for _name, (url, model) in targets.items():  # warm-up: connections, caches, the router's first calls
            await _phase(client, url, model, 2 * args.clients, args.clients, stream, deadline)
        per_round = max(1, args.requests // args.rounds)
        for _ in range(args.rounds):
            for name, (url, model) in targets.items():
                start, cpu = time.perf_counter(), {who: _cpu_seconds(pid) for who, pid in pids.items()}
                got = await _phase(client, url, model, per_round, args.clients, stream, deadline)
                results[name]["wall_s"] += time.perf_counter() - start
                for who, pid in pids.items():
                    used = _cpu_seconds(pid)
                    if used is not None and cpu[who] is not None:
                        results[name]["cpu"][who] += used - cpu[who]
                for key in ("latencies", "failures"):
                    results[name][key] += got[key]
                results[name]["served"].update(got["served"])
    out = {}
    for name, got in results.items():
        n = max(1, len(got["latencies"]))
        out[name] = {
            **_summary(got["latencies"], got["wall_s"]),
            "failed": len(got["failures"]),
            "failure_examples": sorted(set(got["failures"]))[:5],
            "served_by": dict(got["served"]),
            "cpu_ms_per_request": {who: round(1000 * seconds / n, 3) for who, seconds in got["cpu"].items()},
        }
    direct, proxy = out["direct"], out["proxy"]
    if direct.get("n") and proxy.get("n"):
        out["added_by_proxy_ms"] = {q: round(proxy[f"{q}_ms"] - direct[f"{q}_ms"], 3) for q in ("p50", "p90", "p99")}
    return out


def run(args) -> dict:
    deadline = time.monotonic() + args.max_seconds
    logs = Path(tempfile.mkdtemp(prefix="proxy-load-"))
    stub, stub_url = _start(
        [
            sys.executable,
            "-m",
            "serving.testing",
            "--name",
            "stub",
            "--port",
            "0",
            "--delay-s",
            str(args.stub_delay_ms / 1000),
        ],
        r"listening on (http://127\.0\.0\.1:\d+/v1)",
        logs / "stub.log",
    )
    try:
        proxy, proxy_url = _start(
            [
                sys.executable,
                "-m",
                "serving",
                "serve",
                "--bundle",
                args.bundle,
                "--port",
                "0",
                "--edge-url",
                stub_url,
                "--edge-model",
                "edge-model",
                "--cloud-url",
                stub_url,
                "--cloud-model",
                "cloud-model",
                "--max-concurrency",
                str(max(64, 2 * args.clients)),
                "--no-access-log",
            ],
            r"serving on (http://127\.0\.0\.1:\d+/v1)",
            logs / "proxy.log",
        )
        try:
            modes = ["json", "stream"] if args.mode == "both" else [args.mode]
            pids = {"stub": stub.pid, "proxy": proxy.pid}
            results = {
                mode: asyncio.run(_measure(stub_url, proxy_url, args, mode == "stream", deadline, pids))
                for mode in modes
            }
        finally:
            proxy_exit = _stop(proxy)
        bundle_line = re.search(r"bundle ([^;]+);", (logs / "proxy.log").read_text(errors="replace"))
    finally:
        _stop(stub)
    failed = sum(r[t]["failed"] for r in results.values() for t in ("direct", "proxy"))
    return {
        "command": "python -m pipelines.proxy_load " + " ".join(sys.argv[1:]) if __name__ == "__main__" else None,
        "clients": args.clients,
        "requests_per_target": args.requests,
        "rounds": args.rounds,
        "stub_delay_ms": args.stub_delay_ms,
        "bundle": args.bundle,
        "bundle_state": bundle_line.group(1) if bundle_line else None,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "processor": platform.machine()},
        "results": results,
        "failed_requests": failed,
        "proxy_exit_code": proxy_exit,
        "completed": time.monotonic() <= deadline,
        "logs": str(logs),
    }


def print_report(report: dict) -> None:
    print(
        f"{report['clients']} concurrent clients, {report['requests_per_target']} requests per target and mode, "
        f"stub latency {report['stub_delay_ms']} ms; bundle {report['bundle_state']}"
    )
    print(
        f"{'mode':8} {'target':7} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'req/s':>8} {'failed':>7}  "
        f"{'CPU ms/request':>22}  served by"
    )
    for mode, result in report["results"].items():
        for target in ("direct", "proxy"):
            r = result[target]
            cpu = " ".join(f"{who} {ms}" for who, ms in r["cpu_ms_per_request"].items())
            print(
                f"{mode:8} {target:7} {r.get('p50_ms', '-'):>8} {r.get('p90_ms', '-'):>8} {r.get('p99_ms', '-'):>8} "
                f"{r.get('requests_per_s', '-'):>8} {r['failed']:>7}  {cpu:>22}  {r['served_by']}"
            )
        if "added_by_proxy_ms" in result:
            print(f"{mode:8} added   " + "  ".join(f"{q} +{v} ms" for q, v in result["added_by_proxy_ms"].items()))
    print(f"failed requests: {report['failed_requests']}; proxy exit code {report['proxy_exit_code']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.proxy_load", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bundle",
        default="artifacts/router",
        help="bundle the proxy loads (default %(default)s; a missing one runs the rule table)",
    )
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default %(default)s)")
    parser.add_argument(
        "--requests", type=int, default=2000, help="requests per target (direct, proxy) and mode (default %(default)s)"
    )
    parser.add_argument(
        "--rounds", type=int, default=4, help="alternations of direct and proxied (default %(default)s)"
    )
    parser.add_argument("--mode", choices=("json", "stream", "both"), default="both")
    parser.add_argument("--stub-delay-ms", type=float, default=0.0, help="the stub's latency per request")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="stop after this much wall time")
    parser.add_argument("--out", default="bench/proxy_load.json")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.requests < 1 or args.rounds < 1:
        parser.error("--clients, --requests and --rounds must be at least 1")
    report = run(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print_report(report)
    print(f"written to {args.out}")
    return 0 if report["failed_requests"] == 0 and report["completed"] and report["proxy_exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
