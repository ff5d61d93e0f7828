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
    prepared: pl.DataFrame, parsers: Sequence[Any], path: str, carried: CarriedLines | None = None,
    dropped: list[str] | None = None,
) -> pl.DataFrame:
    """Every parser's rows over ``prepared`` (its gates already tested), each parser declaring
    ``carry`` given the lines of earlier blocks it asked for (the others their last record when it
    reached the block's end) when ``carried`` is given. With ``dropped``, a parser that fails on
    the block is run again on its halves, down to single lines: only the lines it fails on alone
    are lost (each named in ``dropped``), not the file."""
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
            if dropped is None or prepared.height < 2:
                raise ParserError(f"parser {parser.name!r} failed: {exc}", path=path) from exc
            said = len(dropped)
            dropped.append(f"lines {prepared['line'][0]}-{prepared['line'][-1]}: parser {parser.name!r} failed on "
                           f"them together ({_brief(exc)}); read again in parts")
            df, read_some = _halves(parser, prepared, dropped, [HALVING_RUNS])
            if not read_some:  # it fails on every line: the parser is at fault, not a line
                del dropped[said:]
                raise ParserError(f"parser {parser.name!r} failed: {exc}", path=path) from exc
            if carried is not None:  # the block counts as one the parser did not read
                carried.skip(parser, prepared)
        if df is None:
            continue
        df = complete_rows(df)
        validate_kinds(df, parser.name)
        frames.append(df)
    if not frames:
        return empty_parsed()
    return pl.concat(frames, how="vertical")


HALVING_RUNS = 64  # parser runs a failing block may take: enough to find a line in 2**32 (~2 log2 n)


def _halves(parser: Any, lines: pl.DataFrame, dropped: list[str],
            budget: list[int]) -> tuple[pl.DataFrame | None, bool]:
    """The parser's rows of each half of ``lines`` that it reads, a half it fails on halved again
    while ``budget`` (parser runs left) lasts; a single line it fails on, or a part left when the
    budget is spent, is dropped and named. Also: whether it read any part at all."""
    mid = lines.height // 2
    frames = []
    read_some = False
    for part in (lines.slice(0, mid), lines.slice(mid)):
        budget[0] -= 1
        try:
            df = on_thread(f"parser-{parser.name}", partial(run_parser, parser, part))
            read_some = True
        except BadSchema as bad:
            raise bad.error from None
        except FAULTS as exc:
            if part.height > 1 and budget[0] > 0:
                df, some = _halves(parser, part, dropped, budget)
                read_some |= some
            elif part.height > 1:
                dropped.append(f"lines {part['line'][0]}-{part['line'][-1]}: parser {parser.name!r} failed on "
                               f"them ({_brief(exc)}); skipped, the rest of the file kept")
                df = None
            else:
                dropped.append(f"line {part['line'][0]}: parser {parser.name!r} failed on it alone ({_brief(exc)}); "
                               "the line is skipped, the rest of the file kept")
                df = None
        if df is not None:
            frames.append(df)
    return (pl.concat(frames, how="diagonal_relaxed") if frames else None), read_some


def _brief(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0][:200] if first else ''}"


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
