"""`python -m serving route ...`: routing decisions as JSON, for one prompt or a JSONL stream.
`python -m serving serve ...`: the OpenAI-compatible routing proxy (serving.proxy; its server
stack is imported only when it runs)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, BinaryIO

from serving._contract import PRECISIONS
from serving.proxy._config import SERVE_HELP, ProxyConfig, add_arguments
from serving.routing._router import Router

if TYPE_CHECKING:
    from serving._json_types import JSONObject

STREAM_HELP = """\
--jsonl: each input line is a JSON object {"prompt": str, "precision"?: str, "id"?: any}, read
as UTF-8 line by line, so a bad byte spoils only its own line. Each non-blank line gets one
output line, in input order: the decision (with the "id" echoed), or {"line": N, "error": "..."}
when the line cannot be answered (invalid UTF-8, not JSON, nested too deeply, not an object, no
prompt, prompt not a string, bad precision, an id holding NaN or Infinity, which JSON output
cannot carry). Blank lines are skipped; lines are counted from 1, blank ones included.

Output is UTF-8, one valid JSON value per line. A record holding a lone surrogate (only
an input escape such as "\\ud800" can produce one) is written with ASCII \\u escapes,
so the line stays valid UTF-8 and the id reads back exactly as it was sent.

Exit code: 0 when every line got a decision; 1 when any line got an error record (the other
lines are still answered) or, with --strict, when the bundle cannot load; 2 for bad arguments."""


def _encode(record: JSONObject) -> bytes:
    """One output line: UTF-8 JSON; with ASCII escapes instead if the record holds a lone surrogate."""
    text = json.dumps(record, ensure_ascii=False, allow_nan=False)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(record, allow_nan=False).encode("ascii") + b"\n"


def _answer(router: Router, raw: bytes) -> bytes:
    """The encoded decision for one input line; raises ValueError/TypeError saying what is wrong with it."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid UTF-8 at byte {exc.start + 1}: {exc.reason}") from None
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"unparsable JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(item, dict) or "prompt" not in item:
        raise ValueError('expected a JSON object with a "prompt" field')
    decision = router.route(item["prompt"], precision=item.get("precision"))
    try:
        return _encode({**({"id": item["id"]} if "id" in item else {}), **decision.to_dict()})
    except (ValueError, RecursionError) as exc:  # an id holding NaN or Infinity, or nested near the limit
        raise ValueError(f"cannot write the answer as valid JSON: {exc}") from None


def _stream(router: Router, source: BinaryIO, out: BinaryIO) -> int:
    """Answer every line of `source` on `out` (see STREAM_HELP); 1 if any line got an error record, else 0."""
    errors = 0
    for number, raw in enumerate(source, start=1):
        if not raw.strip():
            continue
        try:
            encoded = _answer(router, raw)
        except Exception as exc:  # whatever is wrong with one line stays on that line
            errors += 1
            encoded = _encode({"line": number, "error": str(exc)[:500] or repr(exc)})
        out.write(encoded)
        out.flush()
    return 1 if errors else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    route = commands.add_parser(
        "route",
        help="print routing decisions as JSON",
        epilog=STREAM_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    route.add_argument("prompt", nargs="?", help="the prompt (or use --jsonl)")
    route.add_argument("--bundle", required=True, help="bundle folder written by `make train`")
    route.add_argument("--precision", choices=PRECISIONS)
    route.add_argument("--jsonl", metavar="FILE", help='JSON lines {"prompt", "precision"?, "id"?}; - for stdin')
    route.add_argument("--strict", action="store_true", help="fail instead of falling back to the rule table")
    serve = commands.add_parser(
        "serve",
        help="an OpenAI-compatible routing proxy (the server extra)",
        description="An OpenAI-compatible routing proxy.",
        epilog=SERVE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(serve)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(serve, args)
    return _route(route, args)


def _route(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if (args.prompt is None) == (args.jsonl is None):
        parser.error("give either a prompt or --jsonl FILE")
    router = Router.load(args.bundle, strict=args.strict)
    out = sys.stdout.buffer
    if args.jsonl is not None:
        if args.jsonl == "-":
            return _stream(router, sys.stdin.buffer, out)
        with open(args.jsonl, "rb") as fh:
            return _stream(router, fh, out)
    out.write(_encode(router.route(args.prompt, precision=args.precision).to_dict()))
    return 0


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Check the options (exit code 2 with the reason when they are wrong), then run the proxy."""
    try:
        config = ProxyConfig.from_args(args)
    except ValueError as exc:  # ConfigError, and any other wrong value an option holds
        parser.error(str(exc))
    try:
        from serving.proxy._serve import serve
    except ImportError as exc:
        parser.error(f"the proxy needs the server extra (pip install 'edge-cloud-router[server]'): {exc}")
    return serve(config)
