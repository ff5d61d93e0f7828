"""How the lines of a block are numbered when it holds several small files (a batch)."""

from __future__ import annotations

import polars as pl

# Lines of several files read as one block (a parser declaring ``batched``) are told apart by
# their numbers: file k of the block has its lines numbered from k * FILE_LINES + 1.
FILE_LINES = 1 << 32


def file_key() -> pl.Expr:
    """Which file of a batched block a line comes from (0 in a block of one file). A batched
    parser keeps every fill, running count and record within one file."""
    return pl.col("line") // FILE_LINES


def file_starts() -> pl.Expr:
    """True on each file's first row of a batched block (and on the block's first row)."""
    key = file_key()
    return (key != key.shift(1)).fill_null(True)
