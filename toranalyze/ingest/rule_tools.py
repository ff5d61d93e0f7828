"""Polars building blocks for parser rules: literal searches, gates, filling a subset of rows."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

_REGEX_META = frozenset("\\.+*?()|[]{}^$#&-~")


def contains_any(expr: pl.Expr, words: Sequence[str], ignore_case: bool = False) -> pl.Expr:
    """Whether ``expr`` holds any of ``words`` (as ``str.contains_any``, ASCII case folding when
    ``ignore_case``), searched as one regex: the regex engine's literal search ran five to seven
    times faster than ``str.contains_any`` over a block of long log lines."""
    alts = "|".join("".join("\\" + c if c in _REGEX_META else c for c in w) for w in words)
    return expr.str.contains(f"(?i-u:{alts})" if ignore_case else f"(?:{alts})")


def fill_where(base: pl.Series, frame: pl.DataFrame, mask: pl.Series, expr: pl.Expr) -> pl.Series:
    """``base`` with the rows ``mask`` keeps set to ``expr`` evaluated on those rows only.

    ``when(mask).then(expr)`` would evaluate ``expr`` on every row (polars computes each branch
    whole); a parser whose cheap test rules out most rows of a block filters them first instead.
    """
    if not mask.any():
        return base
    return base.scatter(mask.arg_true(), frame.filter(mask).select(expr).to_series())


def literal_gate(words: Sequence[str], ignore_case: bool = False) -> str:
    """One regex matching any of ``words`` literally (for ``gates``)."""
    alts = "|".join("".join("\\" + c if c in _REGEX_META else c for c in w) for w in words)
    return f"(?i:{alts})" if ignore_case else f"(?:{alts})"
