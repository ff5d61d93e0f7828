"""Reading one input file's events: a text log block by block, or a document whole.

A text log is read as blocks of lines (``blocks``); each block's lines are prepared
(``lines``), the parsers whose gates occur in it run over them (``gates``, ``block_events``),
and what a record cut by a boundary needs is carried to the next block (``carry``, ``held``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import polars as pl

from toranalyze.errors import FAULTS, InputError, ParserError, SchemaError
from toranalyze.ingest import blocks
from toranalyze.ingest.affinity import on_thread
from toranalyze.ingest.block_events import block_events, run_parsers
from toranalyze.ingest.blocks import Chunks
from toranalyze.ingest.carry import TAIL_GAP, CarriedLines, revise_times
from toranalyze.ingest.gates import gated
from toranalyze.ingest.held import HELD_BLOCKS, awaits, extend_held, own_lines, reaching
from toranalyze.ingest.lines import prepare_lines
from toranalyze.ingest.noise import NoiseLines
from toranalyze.ingest.parser_rows import complete_rows, covered_lines, empty_parsed, parsing
from toranalyze.ingest.streams import document_lines
from toranalyze.ingest.vocabulary import Vocabulary
from toranalyze.schema import sane_measures, validate_kinds, validate_raw


@dataclass
class FileResult:
    """One file's events (``RAW_SCHEMA`` with ``parser`` and ``source``), its line count, the
    lines events or noise cover, the parsers that found something, and warnings."""

    events: pl.DataFrame
    lines: int
    covered: int
    parsers: list[str]
    warnings: list[str]


@dataclass
class TextEvents:
    """A text file's events, block by block: each block's rows in line order, one per (line,
    kind, step), the parser listed first keeping a line it shares with another. After iteration
    ``lines``, ``covered``, ``used`` (parsers that found something) and ``warnings`` are filled.
    The blocks concatenated are the file's table: a line spans two blocks only when it is a line
    of carriage-return repaints longer than a block, both then numbering it alike."""

    path: str
    parsers: Sequence[Any]
    block_bytes: int | None = None  # default: blocks.BLOCK_BYTES
    vocab: Vocabulary | None = None  # searched on the lines no parser claims (vocabulary.py)
    lines: int = 0
    covered: int = 0
    used: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    carried: CarriedLines = field(default_factory=CarriedLines)
    last_covered: int | None = None  # the previous block's last covered line
    # revisions of rows already yielded (held past HELD_BLOCKS): the caller applies them
    # (``revise_times``, or ``revise_line_times`` to the time columns it keeps)
    late: list[pl.DataFrame] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # lines a parser failed on alone (block_events)

    def __iter__(self) -> Iterator[pl.DataFrame]:
        chunks = Chunks(self.path, self.block_bytes or blocks.BLOCK_BYTES)
        noise = NoiseLines.of(self.parsers)
        priority = {p.name: i for i, p in enumerate(self.parsers)}
        # A block's rows are yielded once the next block is read, and held longer (up to
        # HELD_BLOCKS) while rows without a time lie on lines carried on: the next block's reading
        # of those lines may time them (a start-up record whose next clock lies below a boundary).
        # Records cut by the boundary that the next block goes on with are put in place too, and a
        # block is held while a record of its goes on to the end of the block read after it.
        held: deque[pl.DataFrame] = deque()
        for chunk in chunks:
            with parsing():
                events, covered = self._block(chunk, noise, priority)
                revisions, extended, ahead = self.carried.take()
                if revisions is not None:
                    held = deque(revise_times(h, revisions) for h in held)
                    self._keep_late(revisions, held)
                going_on = []  # records extended to this block's end: the next block may extend them again
                for rows in extended:
                    held, grown = extend_held(held, rows)
                    covered = pl.concat([covered, own_lines(grown, chunk["line"][0])]).unique()
                    going_on.append(reaching(grown, chunk["line"][-1] - TAIL_GAP))
                self._count(chunk, covered)
                open_lines = pl.concat(going_on) if going_on else ahead.clear()
                while held and (len(held) >= HELD_BLOCKS or not awaits(held[0], ahead, open_lines)):
                    yield held.popleft()
            held.append(events)
        yield from held
        self.lines, self.warnings = chunks.lines, [*chunks.warnings, *self.dropped]

    def _block(
        self, chunk: pl.DataFrame, noise: NoiseLines, priority: dict[str, int]
    ) -> tuple[pl.DataFrame, pl.Series]:
        prepared = on_thread("lines", lambda: prepare_lines(chunk))
        gates_hold = gated(prepared, self.parsers)
        chosen = [p for p in self.parsers if p in gates_hold or self.carried.goes_on(p)]
        for parser in self.parsers:
            if parser not in chosen:  # what it carried lies above a block it does not read
                on_thread(f"parser-{parser.name}", partial(self.carried.skip, parser, prepared))
        extracted = run_parsers(prepared, chosen, self.path, self.carried, self.dropped)
        going_on = [covered_lines(rows) for rows in self.carried.extended]
        claimed = pl.concat(going_on) if going_on else None
        events, covered = block_events(prepared, extracted, noise, priority, self.vocab, claimed)
        self.used.update(events["parser"].unique().to_list())
        return events, covered

    def _keep_late(self, revisions: pl.DataFrame, held: deque[pl.DataFrame]) -> None:
        """Keep the revisions of lines above the rows still held: their rows were yielded."""
        first = held[0]["line"].min() if held and held[0].height else None
        late = revisions if first is None else revisions.filter(pl.col("line") < first)
        if late.height:
            self.late.append(late)

    def late_revisions(self) -> pl.DataFrame | None:
        """After iteration: the revisions of rows yielded before they came (None: none)."""
        return pl.concat(self.late).unique(["line", "kind", "parser"], keep="last") if self.late else None

    def _count(self, chunk: pl.DataFrame, covered: pl.Series) -> None:
        # a line this block goes on with is counted once (covered lines are this block's only)
        again = covered.len() > 0 and covered.min() == chunk["line"][0] == self.last_covered
        self.covered += covered.len() - again
        if covered.len():
            self.last_covered = int(covered.max())  # type: ignore[arg-type]


def read_text_events(path: str, parsers: Sequence[Any], block_bytes: int | None = None,
                     vocab: Vocabulary | None = None) -> FileResult:
    """Run line parsers over a text file, chunk by chunk (and ``vocab`` over the lines none claims)."""
    blocks = TextEvents(path, parsers, block_bytes, vocab)
    frames = list(blocks)
    events = pl.concat(frames, how="vertical") if frames else empty_parsed()
    late = blocks.late_revisions()
    if late is not None:
        events = revise_times(events, late)
    return FileResult(events, blocks.lines, blocks.covered, sorted(blocks.used), blocks.warnings)


def read_document_events(path: str, parser: Any) -> FileResult:
    """Run a parser that claims the whole file."""
    with parsing():
        return _finished([_parsed(path, parser).collect()], [(path, parser)])[0]


def read_document_batch(docs: Sequence[tuple[str, Any]]) -> list[FileResult | BaseException]:
    """``read_document_events`` of each (path, parser): each document parsed alone, then what
    every document's rows go through (bounds, required fields, kinds, covered lines) done once
    for all of them: a run's pod specs, events and ``sacct`` dumps are small, and those steps
    cost more in queries than in rows. A document whose parser fails gives its error; when the
    shared steps fail, each document goes through them alone, so only the one at fault fails."""
    with parsing():
        out: list[FileResult | BaseException] = []
        parsed: list[tuple[int, pl.LazyFrame]] = []
        for i, (path, parser) in enumerate(docs):
            try:
                parsed.append((i, _parsed(path, parser)))
                out.append(ParserError("not read", path=path))  # (replaced below)
            except FAULTS as exc:
                out.append(exc)
        try:
            together: list[FileResult] | None = _finished(pl.collect_all([f for _, f in parsed]),
                                                         [docs[i] for i, _ in parsed])
        except FAULTS:
            together = None
        for k, (i, frame) in enumerate(parsed):
            try:
                out[i] = together[k] if together is not None else _finished([frame.collect()], [docs[i]])[0]
            except FAULTS as exc:
                out[i] = exc
        return out


def _parsed(path: str, parser: Any) -> pl.LazyFrame:
    """The parser's rows of the document, measures bounded, checked against the raw schema."""
    try:
        out = parser.parse(path)
    except (InputError, SchemaError):
        raise
    except RecursionError:
        raise InputError(f"parser {parser.name!r}: the document nests too deeply to read", path=path,
                         hint="check that the file is not corrupt") from None
    except FAULTS as exc:
        raise ParserError(f"parser {parser.name!r} failed: {exc}", path=path) from exc
    if not isinstance(out, pl.LazyFrame | pl.DataFrame):
        raise SchemaError(f"parser {parser.name!r} returned {type(out).__name__}, expected a LazyFrame")
    frame = sane_measures(out.lazy())
    extra = {"parser", "source"} & set(frame.collect_schema().names())
    frame = frame.drop(list(extra))
    validate_raw(frame, parser.name)
    return frame


def _document_result(df: pl.DataFrame, path: str, parser: Any, covered: int) -> FileResult:
    lines = document_lines(path)
    # A document parser understands the whole file it claimed.
    covered = max(covered, lines) if df.height else covered
    return FileResult(df, lines, covered, [parser.name], [])


def _finished(frames: Sequence[pl.DataFrame], docs: Sequence[tuple[str, Any]]) -> list[FileResult]:
    """Each document's result from its parsed rows (``frames``, one per document of ``docs``),
    in one query for all of them: required fields, kinds, the parser's columns, covered lines."""
    doc = pl.col("_doc")
    rows = complete_rows(pl.concat([f.with_columns(pl.lit(k, pl.UInt32).alias("_doc")) for k, f in enumerate(frames)]))
    validate_kinds(rows, ", ".join(sorted({p.name for _, p in docs})))
    names = pl.Series([p.name for _, p in docs], dtype=pl.String)
    sources = pl.Series([p.source for _, p in docs], dtype=pl.String)
    rows = rows.with_columns(names.gather(rows["_doc"]).alias("parser"), sources.gather(rows["_doc"]).alias("source"))
    covered = dict(rows.select(doc, pl.int_ranges("line", pl.coalesce("line_end", "line") + 1, dtype=pl.Int64)
                               .alias("l")).explode("l").group_by(doc).agg(pl.col("l").n_unique())
                   .iter_rows())
    parts = rows.partition_by("_doc", as_dict=True, include_key=False)
    columns = empty_parsed().columns
    out = []
    for k, (path, parser) in enumerate(docs):
        df = parts[(k,)].select(columns) if (k,) in parts else empty_parsed()
        out.append(_document_result(df, path, parser, covered.get(k, 0)))
    return out
