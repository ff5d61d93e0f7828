"""A block's events: every chosen parser's rows, with context, one row per (line, kind, step)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import polars as pl

from toranalyze.errors import ParserError
from toranalyze.ingest.affinity import on_thread
from toranalyze.ingest.carry import CarriedLines
from toranalyze.ingest.line_context import with_prefix_context, with_prompt_hosts
from toranalyze.ingest.noise import NoiseLines
from toranalyze.ingest.parser_rows import BadSchema, covered_lines, empty_parsed, run_parser
from toranalyze.schema import validate_kinds


def run_parsers(
    prepared: pl.DataFrame, parsers: Sequence[Any], path: str, carried: CarriedLines | None = None
) -> pl.DataFrame:
    """Every parser's rows over ``prepared`` (its gates already tested), each parser declaring
    ``carry`` given the lines of earlier blocks it asked for (the others their last record when it
    reached the block's end) when ``carried`` is given."""
    frames = []
    for parser in parsers:
        run = partial(run_parser, parser, prepared)
        if carried is not None:
            run = partial(carried.run, parser, prepared)
        try:
            df = on_thread(f"parser-{parser.name}", run)
        except BadSchema as bad:
            raise bad.error from None
        except Exception as exc:
            raise ParserError(f"parser {parser.name!r} failed: {exc}", path=path) from exc
        if df is None:
            continue
        validate_kinds(df, parser.name)
        frames.append(df)
    if not frames:
        return empty_parsed()
    return pl.concat(frames, how="vertical")


def block_events(
    prepared: pl.DataFrame, extracted: pl.DataFrame, noise: NoiseLines, priority: dict[str, int]
) -> tuple[pl.DataFrame, pl.Series]:
    """A block's parser rows -> its events (prefix context, one row per line, kind and step, the
    parser listed first kept) and the distinct lines events or noise cover."""
    events = with_prompt_hosts(with_prefix_context(extracted, prepared), prepared)
    covered = covered_lines(events)
    if noise.tests:
        # Noise can add only lines no event covers: the alternations search those only.
        rest = prepared.filter(~pl.col("line").is_in(covered.implode()))
        covered = pl.concat([covered, on_thread("noise", lambda: noise(rest))])
    events = (
        events.lazy()
        .with_columns(pl.col("parser").replace_strict(priority, default=len(priority)).alias("_prio"))
        .sort("line", "_prio", maintain_order=True)
        .unique(["line", "kind", "step"], keep="first", maintain_order=True)
        .drop("_prio")
        .collect()
    )
    return events, covered.unique()
