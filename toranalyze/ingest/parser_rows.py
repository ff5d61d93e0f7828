"""One parser's rows of one block: running its ``extract``, checking them, the lines they cover."""

from __future__ import annotations

from functools import cache
from typing import Any

import polars as pl

from toranalyze.errors import SchemaError
from toranalyze.schema import RAW_REQUIRED, RAW_SCHEMA, sane_measures, validate_raw


def parsing() -> pl.Config:
    """The polars settings parsers run under (a context manager).

    Parsers run many small queries per block: polars' in-memory engine plans and runs them with
    less CPU than its streaming engine (8-25% less measured on a mixed 32 MB block, a run's kernel
    logs and the real excerpts), and the streaming engine was seen to panic, now and then under
    load, in a string function of a kernel parser query.
    """
    return pl.Config(engine_affinity="in-memory")


class BadSchema(Exception):
    """Carries validate_raw's error out of ``run_parser`` unwrapped (a parser's own errors are
    wrapped in ParserError)."""

    def __init__(self, error: SchemaError):
        super().__init__(str(error))
        self.error = error


def run_parser(parser: Any, prepared: pl.DataFrame) -> pl.DataFrame | None:
    """A parser's rows of one block with its name and source (None: it returned nothing), in one
    trip to its thread."""
    out = parser.extract(prepared.lazy())
    if out is None:
        return None
    try:
        validate_raw(out, parser.name)
    except SchemaError as exc:
        raise BadSchema(exc) from None
    return sane_measures(out).with_columns(
        pl.lit(parser.name).alias("parser"), pl.lit(parser.source).alias("source")).collect()


@cache
def empty_parsed() -> pl.DataFrame:
    """No parsed rows (one frame, built once: a fleet's batch asks for it thousands of times, and
    frames are never changed in place)."""
    return pl.DataFrame(schema={**RAW_SCHEMA, "parser": pl.String(), "source": pl.String()})


def covered_lines(events: pl.DataFrame) -> pl.Series:
    end = pl.coalesce("line_end", "line")
    return events.select(pl.int_ranges("line", end + 1, dtype=pl.Int64).alias("l")).explode("l")["l"]


def complete_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` without those a bad token left without a required field (a message or kind a
    mangled line did not give): that row is lost, not the file."""
    missing = pl.any_horizontal(pl.col(c).is_null() for c in RAW_REQUIRED)
    return rows.filter(~missing) if rows.select(missing.any()).item() else rows
