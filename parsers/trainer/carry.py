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
  the next block's clock-less iterations are summed; read again, it keeps the file's step source
  in the next block), the latest checkpoint load's (the step a resumed run counts from), and
  HF's ``Total optimization steps`` banners (which bars are the training's);
* the lines of a begin, end or exit record that ends the block (start-up banners the boundary
  cut: the next block's collapse into it), also on through blocks the gates rule out.

Three hints (columns the carried lines hold, null on the next block's own; ``common``) bring what
no line states: ``carried_step`` on the step record and the load, the step the parser gave them
(MLPerf's steps and HF's counted loss dicts count on from it), ``carried_seen`` on a bar
repaint, the bar steps reported so far in its attempt (ranks repainting the bar in a later block
report none of them again), and ``carried_open`` on an open record's lines.

What the next block's lines state themselves overrides these, as it would in the whole file.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.trainer.common import (
    ATTEMPT_STARTS,
    CARRIED_OPEN,
    CARRIED_SEEN,
    CARRIED_STEP,
    SEEN_DTYPE,
    collapsible_kind,
    enrich,
    may_state_clock,
    seen_steps,
)
from toranalyze_parsers.trainer.tqdm import bars

from toranalyze.parser_api import NAIVE_US, contains_any

BANNER = "Total optimization steps"
BAR_LITERALS = ("%|", "it [")  # what every bar repaint holds (tqdm.bars' own prefilter)
PROBE = 4096  # the last lines searched first for a clock
START = r"\[[0:]+[<,\]]"  # a repaint at elapsed 0: a bar's start (tqdm.bars reads the same field)
LAST = 64  # the last repaints of a block read for each kind's latest
OPEN_LINES = 64  # the most lines of an open begin/end record carried
ITERATION = "iteration"  # what a Megatron iteration record holds


def carry(lines: pl.DataFrame, rows: pl.DataFrame | None = None) -> pl.DataFrame:
    """The rows of ``lines`` (a block, after its own carried lines) the next block needs, with the
    hints ``carried_step`` and ``carried_seen``; ``rows``: the parser's rows of them (the latest
    step record and checkpoint load are carried as they are)."""
    if lines.height == 0:
        return lines
    # as enrich() orders them (`_i` indexes this); blocks come in line order, so seldom a copy
    ordered = lines if lines["line"].is_sorted() else lines.sort("line", maintain_order=True)
    text = pl.col("text")
    banners = ordered.with_row_index("_i").filter(text.str.contains(BANNER, literal=True)).select("_i")
    records = _records(ordered, rows)
    anchors = records.select("_i", "_anchor")
    if not ordered.select(contains_any(text, BAR_LITERALS).any()).item():
        keep = pl.concat([banners, _latest_clock(ordered)])
    else:
        keep, bar_anchors = _bar_lines(ordered)
        keep, anchors = pl.concat([keep, banners]), pl.concat([bar_anchors, anchors])
    open_record = _open_record(ordered, rows)
    keep = pl.concat([keep, records.select("_i"), open_record]).unique()
    hints = (CARRIED_STEP, CARRIED_SEEN, CARRIED_OPEN)
    columns = [c for c in lines.columns if c not in hints]
    return (
        ordered.select(columns)
        .with_row_index("_i")
        .join(keep, on="_i", how="semi")
        .join(anchors.drop_nulls("_anchor").unique("_i"), on="_i", how="left")
        .join(records.select("_i", CARRIED_STEP, CARRIED_SEEN), on="_i", how="left")
        .join(open_record.with_columns(pl.lit(True).alias(CARRIED_OPEN)), on="_i", how="left")
        .with_columns(pl.coalesce("_anchor", "p_ts").alias("p_ts"))
        .sort("_i")
        .select(*columns, *hints)
    )


_NO_RECORDS = pl.DataFrame(
    schema={"_i": pl.UInt32, "_anchor": NAIVE_US, CARRIED_STEP: pl.Int64, CARRIED_SEEN: SEEN_DTYPE}
)


def _records(ordered: pl.DataFrame, rows: pl.DataFrame | None) -> pl.DataFrame:
    """The lines (index ``_i``) of the latest step record and the latest checkpoint load, each with
    the step the parser gave it (``carried_step``: running counts go on from it, and a load is the
    step a resumed run counts from); the step record also with the time a Megatron iteration was
    placed at (``_anchor``; clock-less ones are placed by summing iteration times since the latest
    clock: the next block sums from it, as the whole file would) and, a bar repaint, the bar steps
    reported in its attempt (``carried_seen``). For a block the gates ruled out (no ``rows``) the
    carried ones are still the latest."""
    indexed = ordered.with_row_index("_i")
    if rows is None:
        if CARRIED_STEP not in ordered.columns:
            return _NO_RECORDS
        hinted = indexed.filter(pl.col(CARRIED_STEP).is_not_null())
        return hinted.select("_i", pl.lit(None, NAIVE_US).alias("_anchor"), CARRIED_STEP, CARRIED_SEEN)
    step, load = _latest(indexed, rows, "step"), _latest(indexed, rows, "ckpt_load")
    none = [pl.lit(None, NAIVE_US).alias("_anchor"), pl.lit(None, SEEN_DTYPE).alias(CARRIED_SEEN)]
    hints: list[pl.Expr | pl.Series] = list(none)
    if step.height:
        megatron = step["text"].str.contains(ITERATION, literal=True).any()
        bar = step.select(contains_any(pl.col("text"), BAR_LITERALS).any()).item()
        hints = [
            pl.when(pl.lit(megatron)).then(pl.col("_ts")).alias("_anchor"),
            (_seen(indexed, rows) if bar else pl.lit(None, SEEN_DTYPE)).alias(CARRIED_SEEN),
        ]
    both = [step.with_columns(hints), load.with_columns(none)]
    return pl.concat([f.select(_NO_RECORDS.columns) for f in both]).unique("_i", keep="first", maintain_order=True)


def _open_record(ordered: pl.DataFrame, rows: pl.DataFrame | None) -> pl.DataFrame:
    """The lines (``_i``) of the block's last row when it is a begin, end or exit record: the next
    block's first rows may continue it (start-up banners cut by the block boundary), and read
    after it they collapse into it, as in one block, instead of starting a record (an attempt)
    of their own; the row itself, on a carried line, stays the earlier block's. A block without rows
    (one the gates ruled out: NCCL chatter between the banners) carries the open record on."""
    empty = pl.DataFrame(schema={"_i": pl.UInt32})
    if rows is None or rows.height == 0:
        if CARRIED_OPEN not in ordered.columns:
            return empty
        return ordered.with_row_index("_i").filter(pl.col(CARRIED_OPEN).fill_null(False)).select("_i")
    last = rows.filter(pl.col("line") == pl.col("line").max())
    if not last.select(collapsible_kind().all()).item():
        return empty
    lo = last["line"][0]
    hi = max(lo, last.select(pl.col("line_end").max()).item() or lo)
    if hi - lo >= OPEN_LINES:
        return empty
    return ordered.with_row_index("_i").filter(pl.col("line").is_between(lo, hi)).select("_i")


def _latest(indexed: pl.DataFrame, rows: pl.DataFrame, kind: str) -> pl.DataFrame:
    """The line of the latest row of ``kind`` (its last segment), with the row's step and time."""
    of = rows.filter(pl.col("kind") == kind)
    if of.height == 0:
        none = [pl.lit(None, pl.Int64).alias(CARRIED_STEP), pl.lit(None, NAIVE_US).alias("_ts")]
        return indexed.clear().select("_i", "line", "text", *none)
    last = of.filter(pl.col("line") == of["line"].max()).tail(1)
    at = indexed.filter(pl.col("line") == last["line"][0]).tail(1)
    return at.select("_i", "line", "text").with_columns(
        last["step"].cast(pl.Int64, strict=False).alias(CARRIED_STEP),
        last["ts"].cast(NAIVE_US, strict=False).alias("_ts"),
    )


def _seen(indexed: pl.DataFrame, rows: pl.DataFrame) -> pl.Series:
    """The bar steps reported in the latest step record's attempt, as ranges (one value): the steps
    of ``rows`` since their latest attempt start, and those carried from earlier blocks when that
    attempt began there."""
    since = rows.filter(pl.col("kind").is_in(ATTEMPT_STARTS)).select(pl.col("line").max().fill_null(-1)).item()
    steps = rows.filter((pl.col("kind") == "step") & (pl.col("line") > since)).select("step")
    if CARRIED_SEEN in indexed.columns:
        prior = seen_steps(indexed.filter(pl.col(CARRIED_SEEN).is_not_null() & (pl.col("line") > since)))
        steps = pl.concat([steps, prior.select("step")])
    runs = (
        steps.drop_nulls()
        .unique()
        .sort("step")
        .with_columns((pl.col("step").diff() != 1).fill_null(True).cum_sum().alias("_run"))
        .group_by("_run", maintain_order=True)
        .agg(pl.col("step").first().alias("lo"), pl.col("step").last().alias("hi"))
    )
    return runs.select(pl.struct("lo", "hi")).to_series().implode().cast(SEEN_DTYPE, strict=False)


def _latest_clock(ordered: pl.DataFrame) -> pl.DataFrame:
    """The index of the last line stating a clock (none: empty), looking at the last lines first:
    stating clocks is a regex pass, and in a log that has clocks the last one is near the end. In
    each slice only the lines a clock can be found on are read (a peeled stamp, or a text
    ``_stated_clock`` reads, ANSI codes not yet stripped): a block of NCCL chatter has none."""
    # an ANSI code may hide a clock's start until enrich() strips it
    may = pl.col("p_ts").is_not_null() | may_state_clock() | pl.col("text").str.contains("\x1b", literal=True)
    size = PROBE
    while True:
        offset = max(ordered.height - size, 0)
        candidates = ordered.slice(offset).with_row_index("_i", offset=offset).filter(may)
        # enrich() keeps the (line-ordered) rows in their order and numbers them afresh
        clocks = enrich(candidates.drop("_i").lazy()).filter(pl.col("clock").is_not_null())
        if clocks.height or offset == 0:
            return pl.DataFrame({"_i": candidates["_i"].gather(clocks["_i"].tail(1))}, schema={"_i": pl.UInt32})
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
            | (pl.col("_bar").cast(pl.UInt32, strict=False).cum_sum(reverse=True) <= LAST)
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
    index = pl.col("_i").cast(pl.UInt32, strict=False)
    keep = pl.concat([starts.select("_i"), latest.select("_i"), clock]).select(index)
    return keep, starts.select(pl.col("_i").cast(pl.UInt32, strict=False), "_anchor")
