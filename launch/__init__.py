"""Entry points: train, enjoy, match, replay, report, sweep."""

from __future__ import annotations

import argparse
import gc
import sys
from typing import Callable, NoReturn


def command(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """`main(argv)` as a command's whole process: the objects left when it returns are put
    out of the garbage collector's reach (`gc.freeze`), so the interpreter's exit skips its
    last walk over all of them (about a second with torch loaded on a 2-core machine). Only
    for a process that ends right after: frozen objects are never collected."""
    status = main(argv)
    gc.freeze()
    return status


def one_line(e: BaseException) -> str:
    """An error's message on one line: its non-empty lines joined by '; '."""
    return "; ".join(line.strip() for line in str(e).splitlines() if line.strip())


def summary(doc: str) -> str:
    """A module docstring's first paragraph on one line: a tool's --help description (its
    first line alone stops mid-sentence where the sentence wraps)."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def integer(text: str) -> int:
    """An integer flag's value: '200', or '1e3' as rl-pbt-train takes a count."""
    try:
        return int(text)
    except ValueError:
        value = float(text)  # a ValueError here: argparse names the flag and the value
    if not value.is_integer():
        raise ValueError(text)
    return int(value)


class ToolParser(argparse.ArgumentParser):
    """The argument parser of enjoy, match and report: a mistake is one line, `PROG: error:
    ...`, exit status 2, as rl-pbt-train's are; a flag it does not know is named first (before
    any missing one), with the closest names it does know."""

    def __init__(self, prog: str, description: str, **kwargs):
        super().__init__(prog=prog, description=description, allow_abbrev=False, **kwargs)

    def parse_args(self, args=None, namespace=None):
        tokens = sys.argv[1:] if args is None else list(args)
        for token in tokens:
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if name.startswith("--") and name not in self._option_string_actions:
                self.error(f"unknown flag {name}{self._near(name)}")
        return super().parse_args(tokens, namespace)

    def _near(self, name: str) -> str:
        from rl_pbt.config.parse import did_you_mean

        known = [o[2:] for o in self._option_string_actions if o.startswith("--")]
        hint = did_you_mean(name[2:], known)
        return hint or f" ({self.prog} --help lists them all)"

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")
