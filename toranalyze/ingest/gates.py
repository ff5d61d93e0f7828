"""Which parsers read a block: those whose ``gates`` occur in it (or that declare none)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from toranalyze.ingest.affinity import on_thread


def _gate(parser: Any) -> pl.Expr | None:
    """Line by line: the line (raw or peeled) holds one of the parser's gates (None: no gates)."""
    gates = tuple(getattr(parser, "gates", ()) or ())
    if not gates:
        return None
    pattern = "|".join(f"(?:{g})" for g in gates)
    return pl.col("raw").str.contains(pattern) | pl.col("text").str.contains(pattern)


_GATE_PROBE = 4096  # lines searched first: a gate that occurs in a block usually occurs early


def _holds(lines: pl.Series, pattern: str) -> bool:
    """Whether some line holds ``pattern``: the first lines first, then slices four times larger
    each (a search reads its whole slice even when the first line matches)."""
    start, size = 0, max(_GATE_PROBE, 1)
    while start < lines.len():
        if lines.slice(start, size).str.contains(pattern).any():
            return True
        start, size = start + size, size * 4
    return False


def _gate_test(patterns: Sequence[str], raw: pl.Series, text: pl.Series) -> bool:
    """Whether any line holds a match of any pattern (``_gate`` of some line holds).

    An unanchored pattern that matches a peeled ``text`` also matches its ``raw`` line (``text``
    is a suffix of ``raw``), so ``raw`` suffices; anchored ones search the peeled lines. One
    search per pattern: an alternation of a literal list with a regex would lose the literal
    search that makes a scan without any match cheap. (Searching the block joined into one
    string cost about 30 ms per search on a 32 MB block whatever it found: polars handles the
    32 MB value as a whole.)
    """
    return any(_holds(text if _searched_in(pattern) == "text" else raw, pattern) for pattern in patterns)


def gated(prepared: pl.DataFrame, parsers: Sequence[Any]) -> list[Any]:
    """The parsers whose gates occur in this block (``_gate`` of some line holds)."""
    if prepared.height <= _GATE_PROBE:
        return on_thread("gates", lambda: _gated_small(prepared, parsers))
    raw, text = prepared["raw"], prepared["text"]
    return on_thread(
        "gates", lambda: [p for p in parsers if not getattr(p, "gates", ()) or _gate_test(tuple(p.gates), raw, text)]
    )


def _gated_small(prepared: pl.DataFrame, parsers: Sequence[Any]) -> list[Any]:
    """``gated`` for a block of at most ``_GATE_PROBE`` lines: every gate searched in one query
    (the same tests as ``_gate_test``; a query per pattern cost more than the searches)."""
    order = sorted({g for p in parsers for g in getattr(p, "gates", ()) or ()})
    found = prepared.select(
        pl.col(_searched_in(g)).str.contains(g).any().alias(str(i)) for i, g in enumerate(order)
    ).row(0)
    holds = {g for g, hit in zip(order, found, strict=True) if hit}
    return [p for p in parsers if not getattr(p, "gates", ()) or any(g in holds for g in p.gates)]


def _searched_in(pattern: str) -> str:
    """The column a gate is searched in: the peeled ``text`` for an anchored pattern, else ``raw``
    (an unanchored match in ``text`` is one in ``raw`` too: ``text`` is a suffix of it)."""
    return "text" if "^" in pattern else "raw"


def gates_by_file(keyed: pl.DataFrame, parsers: Sequence[Any]) -> dict[str, set[int]]:
    """Each gate of ``parsers`` -> the files (``_k``) whose lines hold it: one search per gate
    over the batch, as ``gated`` searches a file alone (raw lines, or peeled for an anchored one)."""
    order = sorted({g for p in parsers for g in getattr(p, "gates", ()) or ()})
    if not order:
        return {}
    found = keyed.select(
        "_k", *(pl.col(_searched_in(g)).str.contains(g).alias(str(i)) for i, g in enumerate(order))
    ).group_by("_k").agg(pl.all().any())
    return {g: set(found.filter(pl.col(str(i)))["_k"].to_list()) for i, g in enumerate(order)}
