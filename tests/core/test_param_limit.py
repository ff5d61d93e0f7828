"""No function outside the command line takes more than six parameters.

A long parameter list hides the concept its arguments share; group them into a small frozen
dataclass that names it, or pass the object they come from. The count includes positional,
keyword-only, ``*args`` and ``**kwargs`` parameters, not ``self`` or ``cls``. Click commands in
``toranalyze/cli`` take one parameter per option and are exempt.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("toranalyze", "parsers")
EXEMPT = ("toranalyze/cli/",)
LIMIT = 6


def _count(args: ast.arguments) -> int:
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return sum(n not in ("self", "cls") for n in names)


def _over_limit() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(EXEMPT):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                    n = _count(node.args)
                    if n > LIMIT:
                        found[(rel, getattr(node, "name", "<lambda>"))] = n
    return found


def test_no_function_takes_more_than_six_parameters() -> None:
    over = {k: n for k, n in _over_limit().items()}
    assert not over, "more than 6 parameters: " + ", ".join(f"{p}::{f} ({n})" for (p, f), n in sorted(over.items()))

