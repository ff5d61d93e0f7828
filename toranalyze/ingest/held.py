"""Blocks of rows held back until a later block of the same file may no longer settle them."""

from __future__ import annotations

from collections import deque

import polars as pl

from toranalyze.ingest.carry import extend_records
from toranalyze.ingest.parser_rows import covered_lines

HELD_BLOCKS = 3  # the most blocks of rows held back for a later block to time (TextEvents)


def extend_held(held: deque[pl.DataFrame], rows: pl.DataFrame) -> tuple[deque[pl.DataFrame], pl.DataFrame]:
    """The held blocks with the records ``rows`` extend put in place, and the rows that took one."""
    out: deque[pl.DataFrame] = deque()
    grown = []
    for block in held:
        block, took = extend_records(block, rows)
        out.append(block)
        grown.append(took)
    return out, pl.concat(grown, how="diagonal") if grown else rows.clear()


def own_lines(rows: pl.DataFrame, first: int) -> pl.Series:
    """The lines from ``first`` on that ``rows`` cover."""
    lines = covered_lines(rows)
    return lines.filter(lines >= first)


def reaching(rows: pl.DataFrame, line: int) -> pl.Series:
    """The lines of the rows of ``rows`` that reach ``line`` or beyond."""
    return rows.filter(pl.coalesce("line_end", "line") >= line)["line"]


def awaits(events: pl.DataFrame, carried: pl.Series, open_lines: pl.Series) -> bool:
    """Whether the next block may still settle a row of ``events``: a row without a time on a
    carried line, or a record that went on to the end of the block just read."""
    if _untimed_on(events, carried):
        return True
    return bool(open_lines.len()) and bool(events.select(pl.col("line").is_in(open_lines.implode()).any()).item())


def _untimed_on(events: pl.DataFrame, lines: pl.Series) -> bool:
    """Whether a row of ``events`` without a time lies on one of ``lines``."""
    if not lines.len():
        return False
    return bool(events.select((pl.col("ts").is_null() & pl.col("line").is_in(lines.implode())).any()).item())
