"""A block's events: every chosen parser's rows, with context, one row per (line, kind, step)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import polars as pl

from toranalyze.errors import FAULTS, ParserError
from toranalyze.ingest.affinity import on_thread
from toranalyze.ingest.carry import CarriedLines
from toranalyze.ingest.line_context import with_prefix_context, with_prompt_hosts
from toranalyze.ingest.noise import NoiseLines
from toranalyze.ingest.parser_rows import BadSchema, complete_rows, covered_lines, empty_parsed, run_parser
from toranalyze.ingest.vocabulary import Vocabulary, vocabulary_rows
from toranalyze.schema import conform_to, validate_kinds


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
        except FAULTS as exc:
            raise ParserError(f"parser {parser.name!r} failed: {exc}", path=path) from exc
        if df is None:
            continue
        df = complete_rows(df)
        validate_kinds(df, parser.name)
        frames.append(df)
    if not frames:
        return empty_parsed()
    return pl.concat(frames, how="vertical")


def block_events(
    prepared: pl.DataFrame, extracted: pl.DataFrame, noise: NoiseLines, priority: dict[str, int],
    vocab: Vocabulary | None = None, claimed: pl.Series | None = None,
) -> tuple[pl.DataFrame, pl.Series]:
    """A block's parser rows -> its events (prefix context, one row per line, kind and step, the
    parser listed first kept) and the distinct lines events or noise cover. Lines neither covers
    go through the framer and the failure vocabulary (ingest/vocabulary.py), but for ``claimed``: the
    lines of a record an earlier block began, which a parser goes on reading in this one."""
    covered = covered_lines(extracted)
    if noise.tests:
        # Noise can add only lines no event covers: the alternations search those only.
        rest = prepared.filter(~pl.col("line").is_in(covered.implode()))
        covered = pl.concat([covered, on_thread("noise", lambda: noise(rest))])
    if vocab:
        taken = covered if claimed is None else pl.concat([covered, claimed])
        rest = prepared.filter(~pl.col("line").is_in(taken.implode())).select("line", "text")
        words = on_thread("vocabulary", lambda: vocabulary_rows(rest, vocab))
        if words is not None:
            extracted = pl.concat([extracted, conform_to(words, extracted.schema).collect()], how="vertical")
            covered = pl.concat([covered, words["line"]])
    events = with_prompt_hosts(with_prefix_context(extracted, prepared), prepared)
    events = (
        events.lazy()
        .with_columns(pl.col("parser").replace_strict(priority, default=len(priority)).alias("_prio"))
        .sort("line", "_prio", maintain_order=True)
        .unique(["line", "kind", "step"], keep="first", maintain_order=True)
        .drop("_prio")
        .collect()
    )
    return events, covered.unique()
