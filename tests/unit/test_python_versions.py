"""setup.py says Python 3.9 or later: the installed packages must parse and import there.
`X | None` in a signature is evaluated at import on 3.9 (a TypeError) unless the module
postpones its annotations; syntax from 3.10 on (match statements, ...) does not parse."""

from __future__ import annotations

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ["rl_pbt", "envs", "launch", "configs"]


def oldest_python() -> tuple[int, int]:
    with open(os.path.join(ROOT, "setup.py")) as f:
        found = re.search(r'python_requires=">=(\d+)\.(\d+)"', f.read())
    assert found, "setup.py names no python_requires"
    return int(found.group(1)), int(found.group(2))


def sources() -> list[str]:
    paths = []
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            paths += [os.path.join(folder, f) for f in files if f.endswith(".py")]
    return sorted(paths)


def postpones_annotations(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )


def union_annotations(tree: ast.Module) -> list[int]:
    """Lines of annotations written `A | B`, evaluated when the def or class runs."""
    annotations = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]
            annotations += [a.annotation for a in every if a is not None and a.annotation]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
    return [
        a.lineno
        for a in annotations
        if a is not None
        and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) for n in ast.walk(a))
    ]


def test_the_packages_parse_and_import_on_the_oldest_python_setup_allows():
    version = oldest_python()
    paths = sources()
    assert len(paths) > 50  # the walk found the packages
    problems = []
    for path in paths:
        with open(path) as f:
            text = f.read()
        name = os.path.relpath(path, ROOT)
        try:
            tree = ast.parse(text, filename=path, feature_version=version)
        except SyntaxError as e:
            problems.append(f"{name}:{e.lineno}: not Python {version[0]}.{version[1]}: {e.msg}")
            continue
        if not postpones_annotations(tree):
            problems += [f"{name}:{line}: X | Y annotation" for line in union_annotations(tree)]
    assert problems == []


def test_the_check_finds_an_unpostponed_union_and_new_syntax():
    plain = ast.parse("def f(x: list[int] | None) -> int | None:\n    y: int | str = 1\n")
    assert union_annotations(plain) == [1, 1, 2] and not postpones_annotations(plain)
    postponed = ast.parse("from __future__ import annotations\ndef f(x: int | None): ...\n")
    assert postpones_annotations(postponed)
    match_statement = "match x:\n    case 1:\n        pass\n"
    try:
        ast.parse(match_statement, feature_version=(3, 9))
        parsed = True
    except SyntaxError:
        parsed = False
    assert not parsed
