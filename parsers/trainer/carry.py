"""The lines of a block the next block of the same file needs (``TrainerParser.carry``).

A progress bar places each repaint at its start's clock plus the elapsed time it prints, and a
step record without a clock of its own takes the latest repaint's or stated clock. In a file of
many blocks a bar that began in an earlier block would have no start in the next one: its
repaints got no time of their own and were then given the previous event's (the run looked
stalled, then caught up). The carried lines:

* each kind of bar's latest start, with the anchor it was placed at as its clock (``p_ts``), so
  the next block places the bar's repaints as the whole file would;
* each kind of bar's latest repaint (the step, clock and rate of records that follow it);
* the latest line stating a clock, the latest step record's line (the step of records that
  name none; a Megatron iteration record with the time it was placed at as its clock, from which
  the next block's clock-less iterations are summed), and HF's ``Total optimization steps``
  banners (which bars are the training's).

What the next block's lines state themselves overrides these, as it would in the whole file.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.trainer.common import enrich
from toranalyze_parsers.trainer.tqdm import bars

from toranalyze.plugins import contains_any
from toranalyze.schema import NAIVE_US

BANNER = "Total optimization steps"
BAR_LITERALS = ("%|", "it [")  # what every bar repaint holds (tqdm.bars' own prefilter)
PROBE = 4096  # the last lines searched first for a clock
START = r"\[[0:]+[<,\]]"  # a repaint at elapsed 0: a bar's start (tqdm.bars reads the same field)
LAST = 64  # the last repaints of a block read for each kind's latest
ITERATION = "iteration"  # what a Megatron iteration record holds


def carry(lines: pl.DataFrame, rows: pl.DataFrame | None = None) -> pl.DataFrame:
    """The rows of ``lines`` (a block, after its own carried lines) the next block needs; ``rows``:
    the parser's rows of them (the latest step record is carried as it is)."""
    if lines.height == 0:
        return lines
    # as enrich() orders them (`_i` indexes this); blocks come in line order, so seldom a copy
    ordered = lines if lines["line"].is_sorted() else lines.sort("line", maintain_order=True)
    text = pl.col("text")
    banners = ordered.with_row_index("_i").filter(text.str.contains(BANNER, literal=True)).select("_i")
    step = _latest_step(ordered, rows)
    if not ordered.select(contains_any(text, BAR_LITERALS).any()).item():
        keep, anchors = pl.concat([banners, _latest_clock(ordered)]), step
    else:
        keep, anchors = _bar_lines(ordered)
        keep, anchors = pl.concat([keep, banners]), pl.concat([anchors, step])
    keep = pl.concat([keep, step.select("_i")]).unique()
    return (
        ordered.with_row_index("_i")
        .join(keep, on="_i", how="semi")
        .join(anchors.drop_nulls("_anchor").unique("_i"), on="_i", how="left")
        .with_columns(pl.coalesce("_anchor", "p_ts").alias("p_ts"))
        .sort("_i")
        .select(lines.columns)
    )


def _latest_step(ordered: pl.DataFrame, rows: pl.DataFrame | None) -> pl.DataFrame:
    """The line of the latest step record (the step of later records naming none), by index
    ``_i``; a Megatron iteration record with the time it was placed at as its ``_anchor`` (a
    clock-less one is placed by summing iteration times since the latest clock: the next block
    sums from it, as the whole file would)."""
    none = pl.DataFrame(schema={"_i": pl.UInt32, "_anchor": NAIVE_US})
    steps = rows.filter(pl.col("kind") == "step") if rows is not None else None
    if steps is None or steps.height == 0:
        return none
    last = steps.filter(pl.col("line") == steps["line"].max()).tail(1)
    at = ordered.with_row_index("_i").filter(pl.col("line") == last["line"][0]).tail(1)
    megatron = at["text"].str.contains(ITERATION, literal=True).any()
    anchor = last["ts"].cast(NAIVE_US) if megatron else pl.Series([None], dtype=NAIVE_US)
    return at.select("_i").with_columns(anchor.alias("_anchor"))


def _latest_clock(ordered: pl.DataFrame) -> pl.DataFrame:
    """The index of the last line stating a clock (none: empty), looking at the last lines first:
    stating clocks is a regex pass, and in a log that has clocks the last one is near the end."""
    size = PROBE
    while True:
        tail = ordered.tail(size)
        clocks = enrich(tail.lazy()).filter(pl.col("clock").is_not_null())
        if clocks.height or size >= ordered.height:
            offset = ordered.height - tail.height
            return clocks.select((pl.col("_i") + offset).cast(pl.UInt32).alias("_i")).tail(1)
        size *= 4


def _placing(ordered: pl.DataFrame) -> pl.DataFrame:
    """The lines that place the latest starts and repaints (with their index ``_i`` in
    ``ordered``): every line that is not a repaint (the clocks), the starts, the repaint before
    each start (the bar it may follow) and the last repaints. A tqdm-heavy block is mostly
    repaints, and reading them all again would cost as much as the block's own parse."""
    text = pl.col("text")
    indexed = ordered.with_row_index("_i")
    repaint = contains_any(text, BAR_LITERALS)
    start = text.str.contains(START)
    return (
        indexed.with_columns(repaint.alias("_bar"))
        .with_columns((pl.col("_bar") & start).alias("_start"))
        .filter(
            ~pl.col("_bar")
            | pl.col("_start")
            | pl.col("_start").shift(-1, fill_value=False)
            | (pl.col("_bar").cast(pl.UInt32).cum_sum(reverse=True) <= LAST)
        )
        .drop("_bar", "_start")
    )


def _bar_lines(ordered: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Each kind of bar's latest start and latest repaint and the latest clock (indexes), and the
    starts' anchors."""
    placing = _placing(ordered)
    # enrich() numbers the rows it reads (`_i`); bars and clocks are then named by their index in
    # the whole block
    enriched = enrich(placing.drop("_i").lazy())
    enriched = enriched.with_columns(placing["_i"].gather(enriched["_i"]).alias("_i"))
    repaints = bars(enriched.lazy()).collect()
    starts = (
        repaints.filter((pl.col("elapsed_s") == 0) & pl.col("ts").is_not_null())
        .group_by("bar")
        .agg(pl.col("_i").last(), pl.col("ts").last().alias("_anchor"))
    )
    latest = repaints.group_by("bar").agg(pl.col("_i").last())
    clock = enriched.filter(pl.col("clock").is_not_null()).select("_i").tail(1)
    keep = pl.concat([starts.select("_i"), latest.select("_i"), clock]).select(pl.col("_i").cast(pl.UInt32))
    return keep, starts.select(pl.col("_i").cast(pl.UInt32), "_anchor")
