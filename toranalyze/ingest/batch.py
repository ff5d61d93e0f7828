"""Small text files read by the same parsers as one block (a batch), and split back per file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from toranalyze.errors import ParserError
from toranalyze.ingest import blocks
from toranalyze.ingest.affinity import on_thread
from toranalyze.ingest.block_events import block_events, run_parsers
from toranalyze.ingest.blocks import Chunks
from toranalyze.ingest.gates import gates_by_file
from toranalyze.ingest.lines import prepare_lines
from toranalyze.ingest.noise import NoiseLines
from toranalyze.ingest.numbering import FILE_LINES, file_key
from toranalyze.ingest.parser_rows import empty_parsed, parsing
from toranalyze.ingest.reader import FileResult, read_text_events
from toranalyze.ingest.vocabulary import Vocabulary


def read_text_batch(paths: Sequence[str], parsers: Sequence[Any], block_bytes: int | None = None,
                    vocab: Vocabulary | None = None) -> list[FileResult]:
    """Small text files read by the same parsers, as one block: what ``read_text_events`` gives
    for each file, with the fixed cost of planning every query paid once for all of them.

    File k's lines are numbered from ``k * FILE_LINES + 1`` (``file_key`` tells them apart).
    Parsers declaring ``batched`` read the block once, restricted to the files whose lines hold
    one of their gates; the others read each such file alone. Lines, noise, gates and prefixes
    are per-line work.
    """
    counts = [Chunks(path, block_bytes or blocks.BLOCK_BYTES) for path in paths]
    frames = [_one_block(chunks) for chunks in counts]
    results = [FileResult(empty_parsed(), c.lines, 0, [], c.warnings) for c in counts]
    # A file of more than one block (a compressed one holding more text than it seemed) is read
    # alone: the parsers' rules work within a block, so its blocks must stay apart.
    for k, frame in enumerate(frames):
        if frame is None:
            results[k] = read_text_events(paths[k], parsers, block_bytes, vocab)
    batch = [
        f.with_columns(pl.col("line") + k * FILE_LINES) for k, f in enumerate(frames) if f is not None and f.height
    ]
    if not batch:
        return results
    with parsing():
        prepared = on_thread("lines", lambda: prepare_lines(pl.concat(batch).rechunk()))
        extracted = _extract_batch(prepared, parsers, paths)
        priority = {p.name: i for i, p in enumerate(parsers)}
        events, covered = block_events(prepared, extracted, NoiseLines.of(parsers), priority, vocab)
    return _split_batch(events, covered, results)


def _one_block(chunks: Chunks) -> pl.DataFrame | None:
    """A file's only block (an empty frame: no lines); None when it has more than one."""
    it = iter(chunks)
    first = next(it, None)
    if first is not None and next(it, None) is not None:
        it.close()  # type: ignore[attr-defined]  # a generator: closes the file
        return None
    return first if first is not None else pl.DataFrame(schema={"line": pl.Int64, "raw": pl.String})


def _extract_batch(prepared: pl.DataFrame, parsers: Sequence[Any], paths: Sequence[str]) -> pl.DataFrame:
    """Every gated parser's rows of a batch: each parser reads the files whose lines hold one of its gates,
    as it would alone; a batched parser reads them at once, the others file by file."""
    frames = []
    keyed = prepared.with_columns(file_key().alias("_k"))
    hits = on_thread("gates", lambda: gates_by_file(keyed, parsers))
    every = keyed["_k"].unique(maintain_order=True).to_list()
    files: dict[int, pl.DataFrame] | None = None  # each file's lines, cut once when first needed
    for parser in parsers:
        gates = tuple(getattr(parser, "gates", ()) or ())
        opened = set().union(*(hits[g] for g in gates)) if gates else set(every)
        keys = [k for k in every if k in opened]
        if not keys:
            continue
        if getattr(parser, "batched", False):
            lines = prepared if len(keys) == len(every) else prepared.filter(file_key().is_in(keys))
            rows = run_parsers(lines, [parser], ", ".join(paths))
            frames.append(_within_files(rows, parser.name, paths))
            continue
        if files is None:
            parts = keyed.partition_by("_k", as_dict=True, maintain_order=True)
            files = {int(k): f.drop("_k") for (k,), f in parts.items()}
        frames += [run_parsers(files[k], [parser], paths[k]) for k in keys]
    return pl.concat(frames, how="vertical") if frames else empty_parsed()


def _within_files(rows: pl.DataFrame, parser: str, paths: Sequence[str]) -> pl.DataFrame:
    """``rows`` of a batched parser, checked: a record spanning two files of the batch is a bug of
    the parser (and its line range would span 2**32 lines): the batch fails, its files are read
    one by one."""
    spans = rows.filter((pl.col("line_end") // FILE_LINES) != file_key())
    if spans.height:
        k = int(spans["line"][0]) // FILE_LINES
        raise ParserError(f"parser {parser!r} joined lines of two files of a batch into one record; "
                          "its files are read one by one", path=paths[k])
    return rows


def _split_batch(events: pl.DataFrame, covered: pl.Series, results: list[FileResult]) -> list[FileResult]:
    """A batch's events and covered lines back to each file, numbered from 1 again."""
    key = file_key()
    covered_by = covered.to_frame("line").group_by(key.alias("_k")).len()
    for k, n in covered_by.iter_rows():
        results[k].covered = n
    keyed = events.with_columns(key.alias("_k"))
    base = pl.col("_k") * FILE_LINES
    keyed = keyed.with_columns(pl.col("line") - base, pl.col("line_end") - base)
    for (k,), part in keyed.partition_by("_k", as_dict=True, maintain_order=True).items():
        part = part.drop("_k")
        results[int(k)].events = part
        results[int(k)].parsers = sorted(part["parser"].unique().to_list())
    return results
