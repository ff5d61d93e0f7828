"""Reading one input file: decompression, encodings, chunking, and running parsers.

A file is read once, as a stream of byte blocks; each block is cut at its last
newline and turned into a frame of lines, so memory stays bounded by the block
size whatever the file size. Invalid UTF-8 is replaced (U+FFFD), never fatal.
Truncated or corrupt compressed streams keep what was read and add a warning.
"""

from __future__ import annotations

import bz2
import io
import operator
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial, reduce
from typing import IO, Any

import polars as pl

from toranalyze import storage
from toranalyze.errors import InputError, ParserError, SchemaError
from toranalyze.ingest.affinity import on_thread
from toranalyze.ingest.lines import prepare_lines
from toranalyze.plugins import FILE_LINES, file_key
from toranalyze.schema import RAW_SCHEMA, validate_kinds, validate_raw

BLOCK_BYTES = 32 * 1024 * 1024
HEAD_BYTES = 16 * 1024
EAGER_CARRY_BYTES = 4 * 1024 * 1024  # a block this big has its carry worked out at once (CarriedLines)
HELD_BLOCKS = 3  # the most blocks of rows held back for a later block to time (TextEvents)
TAIL_LINES = 256  # the longest record cut by a block boundary that the next block reads again
TAIL_GAP = 2  # lines after a block's last record that may still be part of it (open_tail)
REPAINT_SHARE = 4  # a line of repaints longer than a block is read in pieces of a quarter block
LONG_LINE = 1024 * 1024  # lines (or \r repaints) longer than this are cut for matching (a warning says so)


class _GzipReader(io.RawIOBase):
    """Incremental gzip reader that hands out every byte decoded before a truncation or corruption.

    ``gzip.GzipFile`` raises on a truncated member without returning what it had already decoded.
    Concatenated members (``cat a.gz b.gz``) are followed.
    """

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self._z = zlib.decompressobj(wbits=31)
        self._buf = b""
        self._done = False
        self._pending: Exception | None = None

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = size if size >= 0 else 1 << 62
        while len(self._buf) < want and not self._done:
            data = self._raw.read(1 << 16)
            if not data:
                self._done = True
                if not self._z.eof:
                    self._buf += self._z.flush()
                    if self._buf:
                        out, self._buf = self._buf[:want], self._buf[want:]
                        self._pending = EOFError("compressed stream ended before its end marker")
                        return out
                    raise EOFError("compressed stream ended before its end marker")
                break
            self._buf += self._z.decompress(data)
            while self._z.eof and self._z.unused_data:
                rest = self._z.unused_data
                self._z = zlib.decompressobj(wbits=31)
                self._buf += self._z.decompress(rest)
        if not self._buf and self._pending is not None:
            exc, self._pending = self._pending, None
            raise exc
        out, self._buf = self._buf[:want], self._buf[want:]
        return out

    def close(self) -> None:
        self._raw.close()
        super().close()


COMPRESSED = (".gz", ".bz2", ".zst", ".zstd")  # the suffixes _open_stream decompresses


def _open_stream(path: str) -> IO[bytes]:
    """The file's decompressed bytes as a stream; a URL is read in ranged requests (storage.py)."""
    name = path.lower()
    raw = storage.open_input(path)
    if name.endswith(".gz"):
        return _GzipReader(raw)  # type: ignore[return-value]
    if name.endswith(".bz2"):
        return bz2.BZ2File(raw)
    if name.endswith(".zst") or name.endswith(".zstd"):
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    return raw


_STREAM_ERRORS = (EOFError, OSError, zlib.error, ValueError)


def read_head(path: str, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` decompressed bytes of a file (for sniffing)."""
    try:
        with _open_stream(path) as fh:
            return fh.read(size)
    except FileNotFoundError as exc:
        raise InputError("no such file", path=path, hint="check the path") from exc
    except PermissionError as exc:
        raise InputError("permission denied", path=path, hint="check the file's permissions") from exc
    except _STREAM_ERRORS as exc:
        raise InputError(f"cannot read: {exc}", path=path, hint="check that the file is not corrupt") from exc


def looks_binary(head: bytes) -> bool:
    if not head:
        return False
    if b"\x00" in head[:4096]:
        return True
    sample = head[:4096]
    printable = len(sample) - len(sample.translate(None, _PRINTABLE))
    return printable / len(sample) < 0.85


_PRINTABLE = bytes(b for b in range(256) if b >= 32 or b in (9, 10, 13))  # deleted to count them


def _frame_from_block(block: bytes, first_line: int) -> pl.DataFrame:
    try:
        lines = pl.read_lines(block, name="raw")
    except pl.exceptions.ComputeError:
        lines = pl.read_lines(block.decode("utf-8", errors="replace").encode("utf-8"), name="raw")
    n = lines.height
    return (
        lines.lazy()
        .with_columns(
            pl.int_range(first_line, first_line + n, dtype=pl.Int64).alias("line"),
            pl.col("raw").str.strip_suffix("\n"),
        )
        .select("line", "raw")
        .collect()
    )


def _cut_long_lines(frame: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """``frame`` with every line longer than LONG_LINE cut to its first LONG_LINE characters for
    matching, and a warning naming them (None: none was that long).

    A line of carriage-return repaints (a progress bar that never printed a newline: megabytes
    of ``\r``-separated bar states) is cut per repaint instead, so every repaint is read.
    """
    raw = pl.col("raw")
    long = frame.select(raw.str.len_bytes() > LONG_LINE).to_series()
    if not long.any():  # the usual block: no pass over the strings at all
        return frame, None
    segments = raw.str.split("\r")
    cut = frame.filter(long).with_columns(
        pl.when(raw.str.contains("\r", literal=True))
        .then(segments.list.eval(pl.element().str.slice(0, LONG_LINE)).list.join("\r"))
        .otherwise(raw.str.slice(0, LONG_LINE)),
        segments.list.eval(pl.element().str.len_bytes() > LONG_LINE).list.sum().alias("_n"),
    ).filter(pl.col("_n") > 0)
    if cut.height == 0:  # long lines of short repaints only
        return frame, None
    lines = cut["line"]
    at = f"line {lines[0]}" if cut.height == 1 else f"{cut.height} lines (the first: line {lines[0]})"
    warning = f"{at} longer than {LONG_LINE} bytes: only the first {LONG_LINE} characters were matched"
    return frame.update(cut.drop("_n"), on="line"), warning


def parsing() -> pl.Config:
    """The polars settings parsers run under (a context manager).

    Parsers run many small queries per block: polars' in-memory engine plans and runs them with
    less CPU than its streaming engine (8-25% less measured on a mixed 32 MB block, a run's kernel
    logs and the real excerpts), and the streaming engine was seen to panic, now and then under
    load, in a string function of a kernel parser query.
    """
    return pl.Config(engine_affinity="in-memory")


def _read_block(fh: IO[bytes], size: int, piece: int = 1 << 16) -> tuple[bytes, Exception | None]:
    """Read up to ``size`` bytes in pieces, so a corrupt stream keeps what came before the damage."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        try:
            data = fh.read(min(piece, size - got))
        except _STREAM_ERRORS as exc:
            return b"".join(parts), exc
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts), None


@dataclass
class Chunks:
    """Iterates line frames; after iteration, ``lines``/``warnings`` are filled."""

    path: str
    block_bytes: int = BLOCK_BYTES
    lines: int = 0
    warnings: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[pl.DataFrame]:
        next_line = 1
        carry = b""
        open_line = False  # pieces of line next_line were read, its end not yet
        try:
            fh = _open_stream(self.path)
        except OSError as exc:
            raise InputError(f"cannot open: {exc}", path=self.path) from exc
        with fh:
            while True:
                block, failure = _read_block(fh, self.block_bytes)
                eof = failure is not None or not block
                if failure is not None:
                    kept = next_line - 1 + (carry + block).count(b"\n")
                    self.warnings.append(f"stream ended early ({failure}); kept the {kept} lines read before it")
                data = carry + block
                if not eof:
                    cut = data.rfind(b"\n")
                    repaint = data.rfind(b"\r") if cut < 0 and len(data) >= self.block_bytes else -1
                    if repaint >= 0:
                        # A line of carriage-return repaints longer than a block (a progress bar
                        # written to a file) is read in pieces cut after a repaint, all numbered
                        # as that line: memory stays a piece's (a repaint is an event, so such a
                        # line holds many events a byte), and the carriage returns split it anyway.
                        data, carry = data[: repaint + 1], data[repaint + 1 :]
                        for piece in _repaint_pieces(data, self.block_bytes // REPAINT_SHARE):
                            yield from self._frames(piece, next_line)
                        open_line = True
                        continue
                    if cut < 0:
                        carry = data
                        if len(carry) > 16 * self.block_bytes:
                            self.warnings.append(f"line {next_line} longer than {len(carry)} bytes was cut")
                            data, carry = carry, b""
                        else:
                            continue
                    else:
                        data, carry = data[: cut + 1], data[cut + 1 :]
                for frame in self._frames(data, next_line):
                    next_line += frame.height
                    open_line = False  # the line read in pieces ended in this frame
                    yield frame
                if eof:
                    break
        self.lines = next_line - 1 + open_line  # a file may end inside a line read in pieces

    def _frames(self, data: bytes, first_line: int) -> Iterator[pl.DataFrame]:
        """The frame of ``data``'s lines (none when it holds none), long lines cut."""
        if not data:
            return
        frame, cut_warning = _cut_long_lines(_frame_from_block(data, first_line))
        if cut_warning:
            self.warnings.append(cut_warning)
        if frame.height:
            yield frame


def _repaint_pieces(data: bytes, size: int) -> Iterator[bytes]:
    """``data`` (no newline; ending after a carriage return) in pieces of about ``size`` bytes,
    each ending after a carriage return (a repaint longer than ``size`` is one piece)."""
    start = 0
    while len(data) - start > size:
        cut = data.rfind(b"\r", start, start + size)
        if cut < start:
            cut = data.find(b"\r", start + size)
        yield data[start : cut + 1]
        start = cut + 1
    if start < len(data):
        yield data[start:]


@dataclass
class FileResult:
    events: pl.DataFrame
    lines: int
    covered: int
    parsers: list[str]
    warnings: list[str]


def _noise_tests(parsers: Sequence[Any]) -> list[pl.Expr]:
    """One alternation per parser (one alternation of all of them ran slower on small files: the
    regex engine handles a hundred alternatives less well than a few dozen)."""
    per_parser = ["|".join(f"(?:{p})" for p in getattr(parser, "noise", ())) for parser in parsers]
    return [pl.col("text").str.contains(alternation) for alternation in per_parser if alternation]


def noise_mask(parsers: Sequence[Any]) -> pl.Expr | None:
    """Whether a line matches a noise pattern of any parser."""
    tests = _noise_tests(parsers)
    return reduce(operator.or_, tests) if tests else None


@dataclass
class NoiseLines:
    """The lines of a block that match a noise pattern of any parser, found as a cascade: each
    parser's alternation searches only the lines the ones before it did not match, the parser
    that matched most in the previous block first. In a big training log one parser's noise (NCCL
    INFO chatter) is most of the lines; the others then search a small remainder."""

    tests: list[pl.Expr]
    hits: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, parsers: Sequence[Any]) -> NoiseLines:
        tests = _noise_tests(parsers)
        return cls(tests, [0] * len(tests))

    def __call__(self, lines: pl.DataFrame) -> pl.Series:
        found = []
        for i in sorted(range(len(self.tests)), key=lambda i: -self.hits[i]):
            if lines.height == 0:
                self.hits[i] = 0
                continue
            match = lines.select(self.tests[i]).to_series()
            found.append(lines.filter(match)["line"])
            self.hits[i] = len(found[-1])
            lines = lines.filter(~match)
        return pl.concat(found) if found else pl.Series("line", [], pl.Int64)


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


def _run_parsers(
    prepared: pl.DataFrame, parsers: Sequence[Any], path: str, carried: CarriedLines | None = None
) -> pl.DataFrame:
    """Every parser's rows over ``prepared`` (its gates already tested), each parser declaring
    ``carry`` given the lines of earlier blocks it asked for (the others their last record when it
    reached the block's end) when ``carried`` is given."""
    frames = []
    for parser in parsers:
        run = partial(_run_parser, parser, prepared)
        if carried is not None:
            run = partial(carried.run, parser, prepared)
        try:
            df = on_thread(f"parser-{parser.name}", run)
        except _BadSchema as bad:
            raise bad.error from None
        except Exception as exc:
            raise ParserError(f"parser {parser.name!r} failed: {exc}", path=path) from exc
        if df is None:
            continue
        validate_kinds(df, parser.name)
        frames.append(df)
    if not frames:
        return _empty_parsed()
    return pl.concat(frames, how="vertical")


class _BadSchema(Exception):
    """Carries validate_raw's error out of ``_run_parser`` unwrapped (a parser's own errors are
    wrapped in ParserError)."""

    def __init__(self, error: SchemaError):
        super().__init__(str(error))
        self.error = error


def _run_parser(parser: Any, prepared: pl.DataFrame) -> pl.DataFrame | None:
    """A parser's rows of one block with its name and source (None: it returned nothing), in one
    trip to its thread."""
    out = parser.extract(prepared.lazy())
    if out is None:
        return None
    try:
        validate_raw(out, parser.name)
    except SchemaError as exc:
        raise _BadSchema(exc) from None
    return out.with_columns(pl.lit(parser.name).alias("parser"), pl.lit(parser.source).alias("source")).collect()


@dataclass
class CarriedLines:
    """The lines of a file's earlier blocks that parsers declaring ``carry`` see again.

    A parser reads one block at a time, so state a block's rules take from lines far above (the
    clock and start of a progress bar that began blocks ago) would be lost at each block's start.
    ``parser.carry(lines, rows)`` (the lines it read and its rows of them) names the few of those
    lines the next block needs; they are put ahead of the next block's lines (in line order) and
    the parser's rows on them are dropped, being the earlier block's. The carried frame may hold
    columns the prepared lines do not (hints: state that no line states, such as a running count);
    they are kept, null on the block's own lines, so a parser finds them only on carried lines and
    only in a file's later blocks. The carry of a block is only worked out once a next block comes,
    so a file of one block pays nothing for it.

    A row on a carried line that now has a time is kept in ``revisions``: a rule may time a record
    by lines below it (a start-up banner takes the next clock), and when those lines lie in the
    next block the earlier block could give it none (``TextEvents`` then revises that row).

    A parser declaring no ``carry`` is given its last record again when that record reaches the
    end of a block (``open_tail``): a traceback or an error table cut by the boundary goes on in
    the next block. Its row on the carried lines, when it now reaches into the next block's lines,
    is kept in ``extended`` (``TextEvents`` then puts it in place of the earlier block's row).
    """

    # parser -> the lines it last read and its rows of them (its carry is worked out from both),
    # or, after a big block, the carry itself (holding a big block until the next one comes would
    # cost its memory, a small block's carry would be worked out for nothing in a one-block file)
    seen: dict[str, tuple[pl.DataFrame, pl.DataFrame | None] | pl.DataFrame] = field(default_factory=dict)
    revisions: list[pl.DataFrame] = field(default_factory=list)  # this block's timed rows on carried lines
    ahead: list[pl.Series] = field(default_factory=list)  # the lines carried into this block by ``carry``
    extended: list[pl.DataFrame] = field(default_factory=list)  # records going on in this block

    def run(self, parser: Any, prepared: pl.DataFrame) -> pl.DataFrame | None:
        """The parser's rows of ``prepared``, read after the lines carried from earlier blocks."""
        lines = self._ahead(parser, prepared)
        df = _run_parser(parser, lines)
        self._keep(parser, lines, df)
        if df is None or lines is prepared:
            return df
        first = prepared["line"][0]
        own = pl.col("line") >= first
        if hasattr(parser, "carry"):
            timed = df.filter(~own & pl.col("ts").is_not_null())
            if timed.height:
                self.revisions.append(timed.select("line", "kind", "parser", *_REVISED))
        else:
            going_on = df.filter(~own & (pl.coalesce("line_end", "line") >= first))
            if going_on.height:
                self.extended.append(_with_prefix_context(going_on, lines))
        return df.filter(own)

    def take(self) -> tuple[pl.DataFrame | None, list[pl.DataFrame], pl.Series]:
        """What was gathered since the last call: the revisions (None: none), the extended records
        and the lines carried."""
        revised = None
        if self.revisions:
            revised = pl.concat(self.revisions).unique(["line", "kind", "parser"], keep="last", maintain_order=True)
        ahead = pl.concat(self.ahead) if self.ahead else pl.Series("line", [], pl.Int64)
        extended = self.extended
        self.revisions, self.ahead, self.extended = [], [], []
        return revised, extended, ahead

    def goes_on(self, parser: Any) -> bool:
        """Whether a parser without a ``carry`` of its own has a record going on from the block
        before (its open tail): it then reads this block even where its gates do not hold (the
        end of torchrun's error table names nothing they look for)."""
        if hasattr(parser, "carry"):
            return False
        before = self.seen.get(parser.name)
        if before is None:
            return False
        if not isinstance(before, pl.DataFrame):
            before = self.seen[parser.name] = open_tail(*before)
        return before.height > 0

    def skip(self, parser: Any, prepared: pl.DataFrame) -> None:
        """A block the parser's gates rule out: what it carries may still lie in it (a clock)."""
        self._keep(parser, self._ahead(parser, prepared), None)

    def _keep(self, parser: Any, lines: pl.DataFrame, rows: pl.DataFrame | None) -> None:
        big = lines.estimated_size() > EAGER_CARRY_BYTES
        self.seen[parser.name] = _carry_of(parser)(lines, rows) if big else (lines, rows)

    def _ahead(self, parser: Any, prepared: pl.DataFrame) -> pl.DataFrame:
        before = self.seen.pop(parser.name, None)
        if before is None or not prepared.height:
            return prepared
        ahead = before if isinstance(before, pl.DataFrame) else _carry_of(parser)(*before)
        if not ahead.height:
            return prepared
        if hasattr(parser, "carry"):  # only its rows are revised (a tail is replaced at once)
            self.ahead.append(ahead["line"])
        # A carried piece of the line this block goes on with counts as the line before it: the
        # parser's rows on it are the earlier block's.
        first = prepared["line"][0]
        ahead = ahead.with_columns(pl.min_horizontal("line", first - 1))
        return pl.concat([ahead, prepared], how="diagonal")


def _carry_of(parser: Any) -> Any:
    return parser.carry if hasattr(parser, "carry") else open_tail


def open_tail(lines: pl.DataFrame, rows: pl.DataFrame | None) -> pl.DataFrame:
    """The lines of the last record of ``rows`` when it reaches the end of ``lines`` (a block, with
    the lines carried into it), within TAIL_GAP lines and no longer than TAIL_LINES: the next block
    may go on with it. None otherwise."""
    if rows is None or rows.height == 0 or lines.height == 0:
        return lines.clear()
    last = lines["line"][-1]
    end = pl.coalesce("line_end", "line")
    reach = rows.select(end.max()).item()
    start = rows.filter(end == reach).select(pl.col("line").min()).item()
    if reach < last - TAIL_GAP or last - start >= TAIL_LINES:
        return lines.clear()
    return lines.filter(pl.col("line") >= start)


def extend_records(events: pl.DataFrame, extended: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``events`` (a block's) with each row that ``extended`` (rows of the same line and parser read
    again with the next block) reaches further than put in its place, keeping the earlier row's
    value where the new one has none; and the rows that took a place. The kind may change (the
    exception line that names an error's kind may lie below the boundary); when the parser has
    several rows on the line, the kinds must match."""
    key = ["line", "parser"]
    end = pl.coalesce("line_end", "line")
    indexed = events.with_row_index("_r")
    ext = extended.unique([*key, "kind"], keep="last", maintain_order=True).with_row_index("_e")
    pairs = (
        indexed.select("_r", *key, "kind", end.alias("_end"))
        .join(ext.select("_e", *key, pl.col("kind").alias("_new_kind"), end.alias("_new_end")), on=key)
        .filter((pl.col("kind") == pl.col("_new_kind")) | (pl.len().over(key) == 1))
        .filter(pl.col("_new_end") > pl.col("_end"))
        .unique("_r", keep="first", maintain_order=True)
        .unique("_e", keep="first", maintain_order=True)
        .select("_r", "_e")
    )
    if pairs.height == 0:
        return events, extended.clear()
    new = ext.join(pairs, on="_e").select("_r", *events.columns)
    pair = new.join(indexed, on="_r", suffix="_old")
    merged = pair.select("_r", *(pl.coalesce(c, f"{c}_old").alias(c) for c in events.columns))
    out = pl.concat([indexed.join(pairs, on="_r", how="anti"), merged]).sort("_r").drop("_r")
    return out, merged.drop("_r")


_REVISED = ("ts", "ts_offset_s", "ts_year_known", "ts_inferred")  # what a later block may settle


def revise_times(events: pl.DataFrame, revisions: pl.DataFrame) -> pl.DataFrame:
    """``events`` whose rows without a time take the one ``revisions`` gives the same line, kind and
    parser (rows that have one keep it: only a time the earlier block could not give is filled)."""
    return _fill_times(events, revisions, ["line", "kind", "parser"])


def revise_line_times(times: pl.DataFrame, revisions: pl.DataFrame) -> pl.DataFrame:
    """``revise_times`` for a frame of time columns only (``line`` and ``_REVISED``, in row order):
    its rows without a time take the one a revision gives their line."""
    by_line = revisions.filter(pl.col("ts").is_not_null()).unique("line", keep="first", maintain_order=True)
    return _fill_times(times, by_line, ["line"])


def _fill_times(frame: pl.DataFrame, revisions: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """``frame`` (row order kept) whose rows without a time take their ``key``'s revision's."""
    joined = frame.join(
        revisions.select(*key, *(pl.col(c).alias(f"_rev_{c}") for c in _REVISED)),
        on=key,
        how="left",
        maintain_order="left",
    )
    take = pl.col("ts").is_null() & pl.col("_rev_ts").is_not_null()
    return joined.with_columns(
        pl.when(take).then(pl.col(f"_rev_{c}")).otherwise(pl.col(c)).alias(c) for c in _REVISED
    ).select(frame.columns)


def _empty_parsed() -> pl.DataFrame:
    return pl.DataFrame(schema={**RAW_SCHEMA, "parser": pl.String(), "source": pl.String()})


def _with_prefix_context(events: pl.DataFrame, prepared: pl.DataFrame) -> pl.DataFrame:
    """Fill time/node/rank from the line's peeled prefixes where the parser left them null."""
    cols = ["p_ts", "p_off", "p_node", "p_rank", "p_local"]
    if all(prepared[c].null_count() == prepared.height for c in cols):
        return events  # no line has a prefix (null_count is known without a search)
    # A line's first segment gives its context (prepared lines are in line order); only lines
    # with a prefix give any, and most lines of a big log have none.
    first = pl.col("line") != pl.col("line").shift(1)
    ctx = prepared.select("line", *cols).filter(first.fill_null(True))
    ctx = ctx.filter(pl.any_horizontal(pl.col(cols).is_not_null()))
    joined = events.join(ctx, on="line", how="left")
    use_prefix_ts = pl.col("ts").is_null() & pl.col("p_ts").is_not_null()
    return joined.with_columns(
        pl.when(use_prefix_ts).then(pl.col("p_ts")).otherwise(pl.col("ts")).alias("ts"),
        pl.when(use_prefix_ts).then(pl.col("p_off")).otherwise(pl.col("ts_offset_s")).alias("ts_offset_s"),
        pl.when(use_prefix_ts).then(pl.lit(True)).otherwise(pl.col("ts_year_known")).alias("ts_year_known"),
        pl.coalesce("node", "p_node").alias("node"),
        pl.coalesce("rank", "p_rank", "p_local").alias("rank"),
    ).drop("p_ts", "p_off", "p_node", "p_rank", "p_local")


# A shell prompt pasted above a command's output ('root@node4:~# dmesg -T', '(venv) me@gpu-3:~/run$
# nvidia-smi', zsh's 'me@cn-234 ~ % nvidia-smi', tcsh's and SUSE's 'me@nid002070:/scratch/run> python3 x.py',
# a paste's code fence glued to it: '```me@DLSY:~$ nvidia-smi', and bash's default on Red Hat and its kin,
# '[root@skl-node-1 eris]# dmesg -T'): the output below it, up to the next prompt of its file, came from that host.
_PROMPT = (
    r"^(?:```)?(?:\([\w.\-]+\)\s+)?"
    r"(?:\[[\w.\-]+@([\w.\-]+) [^\]\s]+\][#$] |[\w.\-]+@([\w.\-]+)(?::\S*[#$>]| (?:~|/)\S* [%#$]) )"
)


def _with_prompt_hosts(events: pl.DataFrame, prepared: pl.DataFrame) -> pl.DataFrame:
    """Events that name no node take the host of the nearest shell prompt above them in their file."""
    if events.height == 0 or events["node"].null_count() == 0:
        return events
    at = prepared.filter(pl.col("raw").str.contains("@", literal=True))
    prompts = at.filter(pl.col("raw").str.contains(_PROMPT)).select(
        pl.col("line").alias("_at"),
        pl.coalesce(pl.col("raw").str.extract(_PROMPT, 1), pl.col("raw").str.extract(_PROMPT, 2)).alias("_host"),
    )
    if prompts.height == 0:
        return events
    ordered = events.with_row_index("_r").sort("line")
    joined = ordered.join_asof(prompts.unique("_at", keep="first").sort("_at"), left_on="line", right_on="_at")
    # The files of a batch are FILE_LINES apart: a prompt of an earlier file names nothing here.
    same_file = (pl.col("_at") // FILE_LINES) == file_key()
    host = pl.when(same_file).then(pl.col("_host"))
    return joined.sort("_r").with_columns(pl.coalesce("node", host).alias("node")).drop("_r", "_at", "_host")


def covered_lines(events: pl.DataFrame) -> pl.Series:
    end = pl.coalesce("line_end", "line")
    return events.select(pl.int_ranges("line", end + 1, dtype=pl.Int64).alias("l")).explode("l")["l"]


@dataclass
class TextEvents:
    """A text file's events, block by block: each block's rows in line order, one per (line,
    kind, step), the parser listed first keeping a line it shares with another. After iteration
    ``lines``, ``covered``, ``used`` (parsers that found something) and ``warnings`` are filled.
    The blocks concatenated are the file's table: a line spans two blocks only when it is a line
    of carriage-return repaints longer than a block, both then numbering it alike."""

    path: str
    parsers: Sequence[Any]
    block_bytes: int | None = None  # default: BLOCK_BYTES
    lines: int = 0
    covered: int = 0
    used: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    carried: CarriedLines = field(default_factory=CarriedLines)
    last_covered: int | None = None  # the previous block's last covered line
    # revisions of rows already yielded (held past HELD_BLOCKS): the caller applies them
    # (``revise_times``, or ``revise_line_times`` to the time columns it keeps)
    late: list[pl.DataFrame] = field(default_factory=list)

    def __iter__(self) -> Iterator[pl.DataFrame]:
        chunks = Chunks(self.path, self.block_bytes or BLOCK_BYTES)
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
                    held, grown = _extend_held(held, rows)
                    covered = pl.concat([covered, _own_lines(grown, chunk["line"][0])]).unique()
                    going_on.append(_reaching(grown, chunk["line"][-1] - TAIL_GAP))
                self._count(chunk, covered)
                open_lines = pl.concat(going_on) if going_on else ahead.clear()
                while held and (len(held) >= HELD_BLOCKS or not _awaits(held[0], ahead, open_lines)):
                    yield held.popleft()
            held.append(events)
        yield from held
        self.lines, self.warnings = chunks.lines, chunks.warnings

    def _block(
        self, chunk: pl.DataFrame, noise: NoiseLines, priority: dict[str, int]
    ) -> tuple[pl.DataFrame, pl.Series]:
        prepared = on_thread("lines", lambda: prepare_lines(chunk))
        gates_hold = gated(prepared, self.parsers)
        chosen = [p for p in self.parsers if p in gates_hold or self.carried.goes_on(p)]
        for parser in self.parsers:
            if parser not in chosen:  # what it carried lies above a block it does not read
                on_thread(f"parser-{parser.name}", partial(self.carried.skip, parser, prepared))
        extracted = _run_parsers(prepared, chosen, self.path, self.carried)
        events, covered = _block_events(prepared, extracted, noise, priority)
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


def _extend_held(held: deque[pl.DataFrame], rows: pl.DataFrame) -> tuple[deque[pl.DataFrame], pl.DataFrame]:
    """The held blocks with the records ``rows`` extend put in place, and the rows that took one."""
    out: deque[pl.DataFrame] = deque()
    grown = []
    for block in held:
        block, took = extend_records(block, rows)
        out.append(block)
        grown.append(took)
    return out, pl.concat(grown, how="diagonal") if grown else rows.clear()


def _own_lines(rows: pl.DataFrame, first: int) -> pl.Series:
    """The lines from ``first`` on that ``rows`` cover."""
    lines = covered_lines(rows)
    return lines.filter(lines >= first)


def _reaching(rows: pl.DataFrame, line: int) -> pl.Series:
    """The lines of the rows of ``rows`` that reach ``line`` or beyond."""
    return rows.filter(pl.coalesce("line_end", "line") >= line)["line"]


def _awaits(events: pl.DataFrame, carried: pl.Series, open_lines: pl.Series) -> bool:
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


def _block_events(
    prepared: pl.DataFrame, extracted: pl.DataFrame, noise: NoiseLines, priority: dict[str, int]
) -> tuple[pl.DataFrame, pl.Series]:
    """A block's parser rows -> its events (prefix context, one row per line, kind and step, the
    parser listed first kept) and the distinct lines events or noise cover."""
    events = _with_prompt_hosts(_with_prefix_context(extracted, prepared), prepared)
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


def read_text_batch(paths: Sequence[str], parsers: Sequence[Any], block_bytes: int | None = None) -> list[FileResult]:
    """Small text files read by the same parsers, as one block: what ``read_text_events`` gives
    for each file, with the fixed cost of planning every query paid once for all of them.

    File k's lines are numbered from ``k * FILE_LINES + 1`` (``file_key`` tells them apart).
    Parsers declaring ``batched`` read the block once, restricted to the files whose lines hold
    one of their gates; the others read each such file alone. Lines, noise, gates and prefixes
    are per-line work.
    """
    counts = [Chunks(path, block_bytes or BLOCK_BYTES) for path in paths]
    frames = [_one_block(chunks) for chunks in counts]
    results = [FileResult(_empty_parsed(), c.lines, 0, [], c.warnings) for c in counts]
    # A file of more than one block (a compressed one holding more text than it seemed) is read
    # alone: the parsers' rules work within a block, so its blocks must stay apart.
    for k, frame in enumerate(frames):
        if frame is None:
            results[k] = read_text_events(paths[k], parsers, block_bytes)
    batch = [
        f.with_columns(pl.col("line") + k * FILE_LINES) for k, f in enumerate(frames) if f is not None and f.height
    ]
    if not batch:
        return results
    with parsing():
        prepared = on_thread("lines", lambda: prepare_lines(pl.concat(batch).rechunk()))
        extracted = _extract_batch(prepared, parsers, paths)
        priority = {p.name: i for i, p in enumerate(parsers)}
        events, covered = _block_events(prepared, extracted, NoiseLines.of(parsers), priority)
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
    hits = on_thread("gates", lambda: _gates_by_file(keyed, parsers))
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
            rows = _run_parsers(lines, [parser], ", ".join(paths))
            frames.append(_within_files(rows, parser.name, paths))
            continue
        if files is None:
            parts = keyed.partition_by("_k", as_dict=True, maintain_order=True)
            files = {int(k): f.drop("_k") for (k,), f in parts.items()}
        frames += [_run_parsers(files[k], [parser], paths[k]) for k in keys]
    return pl.concat(frames, how="vertical") if frames else _empty_parsed()


def _gates_by_file(keyed: pl.DataFrame, parsers: Sequence[Any]) -> dict[str, set[int]]:
    """Each gate of ``parsers`` -> the files (``_k``) whose lines hold it: one search per gate
    over the batch, as ``gated`` searches a file alone (raw lines, or peeled for an anchored one)."""
    order = sorted({g for p in parsers for g in getattr(p, "gates", ()) or ()})
    if not order:
        return {}
    found = keyed.select(
        "_k", *(pl.col(_searched_in(g)).str.contains(g).alias(str(i)) for i, g in enumerate(order))
    ).group_by("_k").agg(pl.all().any())
    return {g: set(found.filter(pl.col(str(i)))["_k"].to_list()) for i, g in enumerate(order)}


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


def read_text_events(path: str, parsers: Sequence[Any], block_bytes: int | None = None) -> FileResult:
    """Run line parsers over a text file, chunk by chunk."""
    blocks = TextEvents(path, parsers, block_bytes)
    frames = list(blocks)
    events = pl.concat(frames, how="vertical") if frames else _empty_parsed()
    late = blocks.late_revisions()
    if late is not None:
        events = revise_times(events, late)
    return FileResult(events, blocks.lines, blocks.covered, sorted(blocks.used), blocks.warnings)


def read_document_events(path: str, parser: Any) -> FileResult:
    """Run a parser that claims the whole file."""
    with parsing():
        return _read_document_events(path, parser)


def _read_document_events(path: str, parser: Any) -> FileResult:
    try:
        out = parser.parse(path)
    except (InputError, SchemaError):
        raise
    except Exception as exc:
        raise ParserError(f"parser {parser.name!r} failed: {exc}", path=path) from exc
    if not isinstance(out, pl.LazyFrame | pl.DataFrame):
        raise SchemaError(f"parser {parser.name!r} returned {type(out).__name__}, expected a LazyFrame")
    frame = out.lazy()
    schema = frame.collect_schema()
    extra = {"parser", "source"} & set(schema.names())
    validate_raw(frame.drop(list(extra)), parser.name)
    df = frame.collect()
    validate_kinds(df, parser.name)
    df = df.with_columns(pl.lit(parser.name).alias("parser"), pl.lit(parser.source).alias("source")).select(
        _empty_parsed().columns
    )
    lines = _DOCUMENT_LINES.pop(path, None)
    if lines is None:  # the parser read the file its own way
        lines = _count_lines(path)
    covered = covered_lines(df).unique().len() if df.height else 0
    # A document parser understands the whole file it claimed.
    covered = max(covered, lines) if df.height else covered
    return FileResult(df, lines, covered, [parser.name], [])


def _count_lines(path: str) -> int:
    try:
        with _open_stream(path) as fh:
            n = 0
            last = b""
            for block in iter(lambda: fh.read(1 << 20), b""):
                n += block.count(b"\n")
                last = block
            return n + (1 if last and not last.endswith(b"\n") else 0)
    except _STREAM_ERRORS:
        return 0


# Line counts of files a document parser read through read_text, so the file is not read twice.
_DOCUMENT_LINES: dict[str, int] = {}


def read_text(path: str) -> str:
    """Whole decompressed file as text, for document parsers (JSON/YAML/sacct tables are small)."""
    with _open_stream(path) as fh:
        data = fh.read()
    _DOCUMENT_LINES[path] = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return data.decode("utf-8", errors="replace")
