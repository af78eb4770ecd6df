"""`make results`: the README's headline table, from the manifest of the bundle `make train` wrote.

`--write README.md` puts the table between the README's results markers; `--check README.md`
exits 1 when the README's table differs from what the bundle measured. The figures come from
a deterministic training (LightGBM deterministic, fixed threads, deterministic distillation),
so a fresh clone's `make train` reproduces them exactly.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

START, END = "<!-- results: written by `make results` -->", "<!-- /results -->"


def block(table: str) -> str:
    return f"{START}\n{table}\n{END}"


def readme_table(text: str) -> str | None:
    """The table between the markers, or None when the README has no markers."""
    match = re.search(re.escape(START) + r"\n(.*?)\n" + re.escape(END), text, flags=re.DOTALL)
    return match.group(1) if match else None


def main(
    bundle: Annotated[str, typer.Option(help="bundle folder written by `make train`")] = "artifacts/router",
    write: Annotated[Optional[Path], typer.Option(help="put the table into this file's results block")] = None,
    check: Annotated[Optional[Path], typer.Option(help="exit 1 if this file's results block differs")] = None,
) -> None:
    """Print (and optionally write or check) the headline table of a bundle's test split."""
    from evaluation import headline
    from serving.bundle._bundle import read_manifest

    table = headline.markdown(read_manifest(bundle).metrics)
    print(table)
    for path in (write, check):
        if path is not None and readme_table(path.read_text(encoding="utf-8")) is None:
            raise typer.BadParameter(f"{path} has no results block ({START} ... {END})")
    if write is not None:
        text = write.read_text(encoding="utf-8")
        write.write_text(text.replace(block(readme_table(text)), block(table)), encoding="utf-8")
    if check is not None and readme_table(check.read_text(encoding="utf-8")) != table:
        print(f"{check}: the results block differs from what {bundle} measured; run `make results`", file=sys.stderr)
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
