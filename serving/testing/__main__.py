"""`python -m serving.testing`: a StubUpstream in the foreground on 127.0.0.1 until SIGTERM or
Ctrl-C; prints its URL once it listens (the load test starts it so)."""

from __future__ import annotations

import argparse
import signal
import threading

from serving.testing import Behaviour, StubUpstream


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m serving.testing", description="A stand-in OpenAI-compatible chat-completions server."
    )
    parser.add_argument("--name", default="stub", help="named in every answer")
    parser.add_argument("--port", type=int, default=0, help="on 127.0.0.1; 0 for any free port")
    parser.add_argument("--delay-s", type=float, default=0.0, help="latency before each response")
    parser.add_argument("--chunk-delay-s", type=float, default=0.0, help="between streamed tokens")
    parser.add_argument("--reply", default="", help="the answer text")
    args = parser.parse_args(argv)
    stub = StubUpstream(args.name, Behaviour(reply=args.reply, delay_s=args.delay_s, chunk_delay_s=args.chunk_delay_s))
    stub.start(args.port)
    print(f"stub {args.name} listening on {stub.url}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    stub.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
