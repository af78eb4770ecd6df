"""Where the outcome logs are, when the user names none."""
from __future__ import annotations

import os
from pathlib import Path

FALLBACKS = (Path("data/raw/routellm"), Path("../shared/data/routellm"))


def default_data_paths() -> list[Path]:
    """ROUTER_DATA_DIR, else data/raw/routellm, else ../shared/data/routellm."""
    env = os.environ.get("ROUTER_DATA_DIR")
    if env:
        if not Path(env).exists():
            raise FileNotFoundError(f"ROUTER_DATA_DIR={env} does not exist. Point it at a folder of logs "
                                    "(canonical JSONL/CSV/Parquet or RouteLLM layout), or unset it.")
        return [Path(env)]
    for path in FALLBACKS:
        if path.exists():
            return [path]
    raise FileNotFoundError(
        "no outcome logs found. Either set ROUTER_DATA_DIR=/path/to/logs, pass --data PATH, "
        "run `make data` (downloads the public RouteLLM logs into data/raw/routellm), "
        "or place the RouteLLM folder at ../shared/data/routellm.")
