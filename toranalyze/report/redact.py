"""Redaction of secrets in log-derived text, with the patterns as data (``assets/secrets.toml``).

Applied to whole string columns with polars (one ``replace_all`` per pattern), so every output
redacts the same way. Whether to redact is decided once, where a run's outputs are made
(``fleet.pipeline``: ``redact_outputs``): every string column of every table written, the JSON
documents, the report's inputs and the terminal's lines. ``--no-redact`` turns it off.
"""

from __future__ import annotations

import dataclasses
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


@cache
def _any_secret() -> str:
    """One regex matching wherever any pattern could (case-insensitive: a superset), so rows
    without a secret are found in one scan and left as they are."""
    return "(?i)" + "|".join(f"(?:{s.pattern.replace('(?i)', '')})" for s in secret_patterns())


def redact_strings(df: pl.DataFrame) -> pl.DataFrame:
    """Every String and List(String) column of ``df`` redacted (the other columns as they are).
    One scan finds the columns where a secret could be; only those are rewritten."""
    texts = [c for c, t in df.schema.items() if t == pl.String]
    lists = [c for c, t in df.schema.items() if t == pl.List(pl.String)]
    if not df.height or not texts + lists:
        return df
    found = df.select(
        *(pl.col(c).str.contains(_any_secret()).any() for c in texts),
        *(pl.col(c).explode().str.contains(_any_secret()).any() for c in lists),
    ).row(0)
    hit = {c for c, yes in zip(texts + lists, found, strict=True) if yes}
    exprs = [redact_expr(pl.col(c)).alias(c) for c in texts if c in hit]
    exprs += [pl.col(c).list.eval(redact_expr(pl.element())).alias(c) for c in lists if c in hit]
    return df.with_columns(exprs) if exprs else df


def redact_lazy(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``redact_strings`` as a query, for a table streamed to its file (rows a secret could be in
    are found by one regex first; the others go through as they are)."""
    texts = [c for c, t in lf.collect_schema().items() if t == pl.String]
    return lf.with_columns(
        pl.when(pl.col(c).str.contains(_any_secret())).then(redact_expr(pl.col(c))).otherwise(pl.col(c)).alias(c)
        for c in texts
    )


def redact_frames(obj: Any) -> Any:
    """A dataclass (an analysis, a run's tables) with every frame redacted by ``redact_strings``
    and every list of strings (notes) by ``redact_json``."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, pl.DataFrame):
            changes[f.name] = redact_strings(value)
        elif isinstance(value, list):
            changes[f.name] = redact_json(value)
    return dataclasses.replace(obj, **changes)


def redact_text(text: str) -> str:
    return str(pl.select(redact_expr(pl.lit(text, pl.String))).item())


def redact_json(obj: Any) -> Any:
    """Every string inside a JSON-like document, redacted: all of them in one column (a summary
    holds one path per file), and the document rebuilt only when one held a secret."""
    found: list[str] = []
    _strings(obj, found)
    texts = pl.Series(found, dtype=pl.String)
    if not found or not texts.str.contains(_any_secret()).any():
        return obj
    redacted = pl.select(redact_expr(pl.lit(texts))).to_series()
    return _rebuilt(obj, {a: b for a, b in zip(found, redacted, strict=True) if a != b})


def _strings(obj: Any, found: list[str]) -> None:
    if isinstance(obj, str):
        found.append(obj)
    elif isinstance(obj, list):
        for x in obj:
            _strings(x, found)
    elif isinstance(obj, dict):
        for v in obj.values():
            _strings(v, found)


def _rebuilt(obj: Any, changed: dict[str, str]) -> Any:
    if isinstance(obj, str):
        return changed.get(obj, obj)
    if isinstance(obj, list):
        return [_rebuilt(x, changed) for x in obj]
    if isinstance(obj, dict):
        return {k: _rebuilt(v, changed) for k, v in obj.items()}
    return obj
