"""Entry points: train, enjoy, match, replay, report."""

import gc
from typing import Callable


def command(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """`main(argv)` as a command's whole process: the objects left when it returns are put
    out of the garbage collector's reach (`gc.freeze`), so the interpreter's exit skips its
    last walk over all of them (about a second with torch loaded on a 2-core machine). Only
    for a process that ends right after: frozen objects are never collected."""
    status = main(argv)
    gc.freeze()
    return status


def summary(doc: str) -> str:
    """A module docstring's first paragraph on one line: a tool's --help description (its
    first line alone stops mid-sentence where the sentence wraps)."""
    return " ".join(doc.strip().split("\n\n")[0].split())
