"""An LLM judge on 127.0.0.1 for `make label`'s tests, and the command run in-process."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any, Callable


def completion(content: Any, model: str = "judge-1") -> bytes:
    """A chat.completion body whose message content is `content` (any JSON value)."""
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        }
    ).encode()


class JudgeServer:
    """A chat-completions server whose reply to a grading request is `reply(prompt)`: the
    message content (any JSON value), or `None` for an HTTP 500. Records every request's path,
    Authorization header and body in `requests`."""

    def __init__(self, reply: Callable[[str], Any]):
        judge = self
        self.requests: list[dict] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server interface
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                judge.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                content = reply(body["messages"][-1]["content"])
                if content is None:
                    self.send_response(500)
                    self.end_headers()
                    return
                data = completion(content, body["model"])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def __enter__(self) -> "JudgeServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def make_label(logs: Path, url: str, *extra: str):
    """`make label` (pipelines.label's command) in this process, judge model "judge-1"; its
    printed output is captured in the result."""
    import pipelines.label as label_command
    from tests.conftest import invoke_command

    return invoke_command(label_command.main, ["--logs", logs, "--base-url", url, "--model", "judge-1", *extra])
