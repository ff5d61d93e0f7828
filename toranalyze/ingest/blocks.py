"""A text file as a stream of line frames, one per byte block.

A file is read once, as a stream of byte blocks; each block is cut at its last newline and
turned into a frame of ``line`` and ``raw``, so memory stays bounded by the block size whatever
the file size. Invalid UTF-8 is replaced (U+FFFD), never fatal. Truncated or corrupt compressed
streams keep what was read and add a warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

import polars as pl

from toranalyze.errors import InputError
from toranalyze.ingest.streams import STREAM_ERRORS, open_stream

BLOCK_BYTES = 32 * 1024 * 1024

# A file whose first block holds carriage returns and no newline ends its lines in a lone CR (old
# Mac, some collectors): each CR is a line break there. Elsewhere a CR separates the repaints of
# one line (a progress bar), which keep that line's number. A bar that never printed a newline reads
# as one line per repaint: no other line is near to tell the two apart.


REPAINT_SHARE = 4  # a line of repaints longer than a block is read in pieces of a quarter block
LONG_LINE = 1024 * 1024  # lines (or \r repaints) longer than this are cut for matching (a warning says so)


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


def _read_block(fh: IO[bytes], size: int, piece: int = 1 << 16) -> tuple[bytes, Exception | None]:
    """Read up to ``size`` bytes in pieces, so a corrupt stream keeps what came before the damage."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        try:
            data = fh.read(min(piece, size - got))
        except STREAM_ERRORS as exc:
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
        cr_lines: bool | None = None  # lines end in a lone CR (CR_LINES); settled by the first block
        ended_cr = False  # the last block read ended in a CR (a CRLF may be cut between two blocks)
        try:
            fh = open_stream(self.path)
        except OSError as exc:
            raise InputError(f"cannot open: {exc}", path=self.path) from exc
        with fh:
            while True:
                block, failure = _read_block(fh, self.block_bytes)
                if cr_lines is None and block:
                    cr_lines = b"\n" not in block and b"\r" in block
                eof = failure is not None or not block
                if cr_lines:
                    if ended_cr and block.startswith(b"\n"):  # the LF of a CRLF cut by the block boundary
                        block = block[1:]
                    ended_cr = block.endswith(b"\r")
                    block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
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
