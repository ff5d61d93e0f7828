"""Shared pieces of the kernel parser: PCI addresses, event rows, multi-line records."""

from __future__ import annotations

import re

import polars as pl

from toranalyze.parser_api import contains_any, file_starts

# A PCI address as drivers print it: 0000:3b:00, 0000:3b:00.0, PCI:0000:3b:00, 00000000:3B:00.0.
PCI = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_PCI_PARTS = r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})"


def norm_pci(expr: pl.Expr) -> pl.Expr:
    """'PCI:00000000:3B:00.0' -> '0000:3b:00' (4-digit domain, lower case, no function)."""
    parts = expr.str.extract_groups(_PCI_PARTS)
    return pl.format(
        "{}:{}:{}",
        parts.struct.field("1").str.slice(-4),
        parts.struct.field("2"),
        parts.struct.field("3"),
    ).str.to_lowercase()


def has(*fragments: str) -> pl.Expr:
    """Literal prefilter on ``body``: any of the fragments occurs."""
    return contains_any(pl.col("body"), fragments)


def event(
    kind: str | pl.Expr,
    severity: str | pl.Expr,
    *,
    message: pl.Expr | None = None,
    **cols: pl.Expr | str | int | None,
) -> list[pl.Expr]:
    """The select list of one event row built from a prepared-lines row."""
    out = [
        pl.col("line"),
        (pl.lit(kind) if isinstance(kind, str) else kind).alias("kind"),
        (pl.lit(severity) if isinstance(severity, str) else severity).alias("severity"),
        (message if message is not None else pl.col("msg")).alias("message"),
    ]
    for name, value in cols.items():
        expr = value if isinstance(value, pl.Expr) else pl.lit(value)
        out.append(expr.alias(name))
    return out


def runs(start: pl.Expr, cont: pl.Expr) -> pl.Expr:
    """Record id per line for records made of a start line and the continuation lines after it.

    A record ends at the first line that is neither a continuation nor a new start; lines
    outside any record get null. A record never runs on into the next file of a batch.
    """
    seg = (start | ~cont | file_starts()).cum_sum()
    return pl.when(start.first().over(seg)).then(seg)


def first_of_burst(mask: pl.Expr, gap: int) -> pl.Expr:
    """True on matching lines that start a burst: no matching line within ``gap`` lines before.

    Drivers repeat some assertions hundreds of times per failure; one event per burst is enough.
    """
    prev = pl.when(mask).then(pl.col("line")).shift(1).forward_fill()
    return mask & (prev.is_null() | (pl.col("line") - prev > gap))


def boot_id() -> pl.Expr:
    """Boot counter: a ``Linux version`` banner (or the next file of a batch) starts a new boot."""
    return (pl.col("body").str.starts_with("Linux version ") | file_starts()).cum_sum()


# Where a kernel message can start inside a raw line: at the start, or after a clock
# ('] '), a tag ('kernel: ') or Talos' ']: '. Noise patterns run on the raw text.
_START = r"(?:^|[\]:] )"


def noise_at_start(pattern: str) -> str:
    """Turn a pattern anchored on the message body (``^…``) into one for raw lines."""
    return re.sub(r"(^|\|)\^", lambda m: m.group(1) + _START, pattern)
