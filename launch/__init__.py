"""Entry points: train, enjoy, match, replay, report."""


def summary(doc: str) -> str:
    """A module docstring's first paragraph on one line: a tool's --help description (its
    first line alone stops mid-sentence where the sentence wraps)."""
    return " ".join(doc.strip().split("\n\n")[0].split())
