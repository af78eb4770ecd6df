"""`python -m serving route ...`: routing decisions as JSON, for one prompt or a JSONL stream."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from serving.router import Router


def _stream(router: Router, source: TextIO, out: TextIO) -> int:
    """Each input line is {"prompt": ..., "precision": ...}; each output line a decision or an error."""
    errors = 0
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"unparsable JSON: {exc.msg} at column {exc.colno}") from None
            if not isinstance(item, dict) or "prompt" not in item:
                raise ValueError('expected a JSON object with a "prompt" field')
            decision = router.route(item["prompt"], precision=item.get("precision"))
            record = {**({"id": item["id"]} if "id" in item else {}), **decision.to_dict()}
        except (ValueError, TypeError) as exc:
            errors += 1
            record = {"line": number, "error": str(exc)}
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        out.flush()
    return 1 if errors else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    route = commands.add_parser("route", help="print routing decisions as JSON")
    route.add_argument("prompt", nargs="?", help="the prompt (or use --jsonl)")
    route.add_argument("--bundle", required=True, help="bundle folder written by `make train`")
    route.add_argument("--precision", choices=["exact", "standard", "tolerant"])
    route.add_argument("--jsonl", metavar="FILE", help='JSON lines {"prompt", "precision"?, "id"?}; - for stdin')
    route.add_argument("--strict", action="store_true", help="fail instead of falling back to the rule table")
    args = parser.parse_args(argv)
    if (args.prompt is None) == (args.jsonl is None):
        parser.error("give either a prompt or --jsonl FILE")
    router = Router.load(args.bundle, strict=args.strict)
    if args.jsonl is not None:
        if args.jsonl == "-":
            return _stream(router, sys.stdin, sys.stdout)
        with open(args.jsonl, encoding="utf-8") as fh:
            return _stream(router, fh, sys.stdout)
    print(json.dumps(router.route(args.prompt, precision=args.precision).to_dict(), ensure_ascii=False))
    return 0
