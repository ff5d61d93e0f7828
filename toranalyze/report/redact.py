"""Redaction of secrets in log-derived text, with the patterns as data (``assets/secrets.toml``).

Applied to whole string columns with polars (one ``replace_all`` per pattern, behind a cheap
literal-free regex the engine compiles once), so the report, the terminal summary and the JSON
summaries redact the same way. ``--no-redact`` turns it off.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import polars as pl

MASK = "[REDACTED]"


@dataclass(frozen=True)
class Secret:
    id: str
    pattern: str
    replace: str = MASK


@cache
def secret_patterns() -> tuple[Secret, ...]:
    text = resources.files("toranalyze.report").joinpath("assets/secrets.toml").read_text("utf-8")
    return tuple(Secret(s["id"], s["pattern"], s.get("replace", MASK)) for s in tomllib.loads(text)["secret"])


def redact_expr(expr: pl.Expr) -> pl.Expr:
    for s in secret_patterns():
        expr = expr.str.replace_all(s.pattern, s.replace)
    return expr


def redact_frame(df: pl.DataFrame, columns: tuple[str, ...] = ("message",)) -> pl.DataFrame:
    """Redact the given string (or list-of-string) columns that exist in ``df``."""
    exprs = []
    for c in columns:
        if c not in df.columns:
            continue
        dtype = df.schema[c]
        if dtype == pl.String:
            exprs.append(redact_expr(pl.col(c)).alias(c))
        elif dtype == pl.List(pl.String):
            exprs.append(pl.col(c).list.eval(redact_expr(pl.element())).alias(c))
    return df.with_columns(exprs) if exprs else df


def redact_text(text: str) -> str:
    return str(pl.select(redact_expr(pl.lit(text, pl.String))).item())


def redact_json(obj: Any) -> Any:
    """Every string inside a JSON-like document, redacted (summaries are small: plain recursion)."""
    if isinstance(obj, str):
        return redact_text(obj) if obj else obj
    if isinstance(obj, list):
        return [redact_json(x) for x in obj]
    if isinstance(obj, dict):
        return {k: redact_json(v) for k, v in obj.items()}
    return obj
