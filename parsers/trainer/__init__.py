"""Trainer parser: training progress from every common trainer's own output.

Frameworks live in private modules (``megatron``, ``deepspeed``, ``hf``,
``lightning``, ``titan``, ``mlperf``, ``m4``); each documents
its formats and field rules. Cluster watchdog lines interleaved with trainer output (BigScience's
``PULSE:`` / ``ALERT:``) are the slurm parser's. This module merges the framework rows and applies
the rules that span frameworks:

* **One step source.** Steps come from the trainer's own records when a file has any; DeepSpeed's
  engine ``step=`` lines then become ``info`` rows and bare tqdm bars are dropped (see
  ``common``). Within one attempt (rows between two start/resume records) a step is
  reported once: ranks and tqdm repaints repeat it.
* **Consecutive duplicates collapse.** Start-up banners (several per start, or one per rank),
  checkpoint records printed by both Megatron and DeepSpeed or once per rank, repeated
  evaluation and exit records become one row: the first line, the earliest clock for things
  that begin (init, save begin, eval begin, exit) and the latest for things that end (init_done,
  save end, load, eval end), the first non-null value of every other column.
* **Exit markers.** A trainer ending training by its own decision (Megatron's time-budget, exit
  interval and end-of-training banners, HF ``train_runtime``, MLPerf ``run_stop`` success,
  Lightning ``Trainer.fit stopped``, torchtitan ``Training completed``) is a ``job_end`` row with
  state COMPLETED and code 0 — the process ended cleanly whatever the scheduler reports. Other
  exits (on SIGTERM, a kill switch, an MLPerf run that did not succeed) are ``info`` rows with
  state ``EXIT``. Checkpoint, evaluation and exit rows that name no step take the latest step
  logged before them.
* **Start-up clocks.** ``init`` / ``init_done`` rows without a clock take the next clock stated
  by a line before the first iteration that follows (``ts_inferred``).

A ``step`` row is one *logged* record: with a log interval of N iterations it stands for N of
them, its ``step_time_s`` being the per-iteration time the trainer reports (consumers weigh a
row by the step difference to the previous one). ``loss`` is NaN only when the trainer printed
NaN/Inf or dropped the loss for NaN; it is null when the record carries no loss.

Files are read in blocks (see ``toranalyze.parser_api``); the rules above work within one block.
The few lines a block's rules need from earlier blocks (a bar's start and clock, its latest
repaint, the latest clock, step record and checkpoint load) are carried into the next one, with
hints no line states (the step the record was given, the bar steps its attempt reported; see
``carry``): running counts, the step source and the steps reported go on across blocks. What a
rule would take from a later block (a step source first seen there) is not known to earlier ones.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from toranalyze_parsers.trainer import deepspeed, hf, lightning, m4, megatron, mlperf, titan, tqdm
from toranalyze_parsers.trainer.carry import carry as carry_lines
from toranalyze_parsers.trainer.common import (
    ATTEMPT_STARTS,
    CARRIED_SEEN,
    LEVEL_TQDM,
    RECORD_ENDS,
    collapsible_kind,
    enrich,
    is_exit,
    seen_steps,
)

from toranalyze.parser_api import Parser, conform_raw, contains_any, file_key, file_starts, literal_gate

_MODULES = (
    megatron,
    deepspeed,
    hf,
    lightning,
    titan,
    mlperf,
    m4,
)

_STEP_FILLED = ("ckpt_save_begin", "ckpt_save_end", "eval_begin", "eval_end")
_PROGRESS = ("step", "ckpt_save_begin", "ckpt_save_end", "ckpt_load", "eval_begin", "eval_end")
_TS = ("ts", "ts_offset_s", "ts_year_known", "ts_inferred")


def _own_clocks(ev: pl.LazyFrame, lines: pl.LazyFrame) -> pl.LazyFrame:
    """Rows left without time take the clock their own line states (needed before collapsing)."""
    ctx = (
        lines.filter(pl.col("clock").is_not_null())
        .unique("line", keep="first", maintain_order=True)
        .select("line", pl.col("clock").alias("_clock"), pl.col("clock_off").alias("_clock_off"))
    )
    use = pl.col("ts").is_null() & pl.col("_clock").is_not_null()
    return (
        ev.join(ctx, on="line", how="left", maintain_order="left")
        .with_columns(
            pl.when(use).then(pl.col("_clock")).otherwise(pl.col("ts")).alias("ts"),
            pl.when(use).then(pl.col("_clock_off")).otherwise(pl.col("ts_offset_s")).alias("ts_offset_s"),
        )
        .drop("_clock", "_clock_off")
    )


def _one_step_source(ev: pl.LazyFrame) -> pl.LazyFrame:
    """Keep steps of the best level present; DeepSpeed's become info, bare bars are dropped."""
    is_step = pl.col("kind") == "step"
    best = pl.col("_level").filter(is_step).min().over(file_key())
    worse = (is_step & (pl.col("_level") > best)).fill_null(False)
    return ev.filter(~(worse & (pl.col("_level") == LEVEL_TQDM))).with_columns(
        pl.when(worse).then(pl.lit("info")).otherwise(pl.col("kind")).alias("kind")
    )


def _fill_steps(ev: pl.LazyFrame) -> pl.LazyFrame:
    """Checkpoint, evaluation and exit rows naming no step take the latest progress step."""
    kind = pl.col("kind")
    known = pl.when(kind.is_in(_PROGRESS)).then(pl.col("step")).forward_fill().over(file_key())
    wants = kind.is_in(_STEP_FILLED) | is_exit()
    filled = pl.when(wants & pl.col("step").is_null()).then(known).otherwise(pl.col("step"))
    return ev.with_columns(filled.alias("step"))


def _collapse(ev: pl.LazyFrame) -> pl.LazyFrame:
    """Consecutive rows of one begin/end/exit record (same kind, step, state) become one row."""
    kind = pl.col("kind")
    collapsible = collapsible_kind()
    key = pl.struct(kind, pl.col("step").fill_null(-1), pl.col("state").fill_null(""))
    new_run = (
        ~collapsible | ~collapsible.shift(1, fill_value=False) | (key != key.shift(1)).fill_null(True) | file_starts()
    )
    # A stated zone makes a clock comparable with the others; without one, clocks of different
    # writers (a local log clock, an epoch) may not be, so stated ones are preferred.
    stamped = pl.struct(*_TS).filter(pl.col("ts").is_not_null())
    zoned = pl.struct(*_TS).filter(pl.col("ts").is_not_null() & pl.col("ts_offset_s").is_not_null())
    skip = (*_TS, "line", "line_end", "message", "kind", "_run", "_collapsible")
    others = [c for c in ev.collect_schema().names() if c not in skip]
    ev = ev.with_columns(new_run.cum_sum().alias("_run"), collapsible.alias("_collapsible"))
    # Only collapsible rows are grouped (steps are most rows and never collapse).
    kept = ev.filter(~pl.col("_collapsible")).drop("_run", "_collapsible")
    grouped = (
        ev.filter(pl.col("_collapsible"))
        .drop("_collapsible")
        .group_by("_run", maintain_order=True)
        .agg(
            pl.col("line").first(),
            pl.col("line_end").first(),
            pl.col("message").first(),
            pl.col("kind").first(),
            pl.coalesce(zoned.first(), stamped.first()).alias("_first_ts"),
            pl.coalesce(zoned.last(), stamped.last()).alias("_last_ts"),
            *[pl.col(c).drop_nulls().first() for c in others],
        )
    )
    chosen = pl.when(pl.col("kind").is_in(RECORD_ENDS)).then(pl.col("_last_ts")).otherwise(pl.col("_first_ts"))
    merged = (
        grouped.with_columns(chosen.alias("_ts"))
        .with_columns(
            pl.col("_ts").struct.field("ts").alias("ts"),
            pl.col("_ts").struct.field("ts_offset_s").alias("ts_offset_s"),
            pl.col("_ts").struct.field("ts_year_known").fill_null(True).alias("ts_year_known"),
            pl.col("_ts").struct.field("ts_inferred").fill_null(False).alias("ts_inferred"),
        )
        .drop("_run", "_first_ts", "_last_ts", "_ts")
    )
    return pl.concat([kept, merged], how="diagonal").sort("line", maintain_order=True)


def _dedupe_steps(ev: pl.LazyFrame, seen: pl.DataFrame | None = None) -> pl.LazyFrame:
    """A step repeated within one attempt (ranks, repaints, duplicated output) is kept once.

    An attempt starts at a start or resume record, or where the trainer's own records go back to
    an earlier step (a restart whose banners the log does not show). Progress bars going back do
    not count: ranks repaint the same bar one after the other. ``seen``: the bar steps earlier
    blocks reported in the attempt of the carried step record on ``line`` (``seen_steps``)."""
    records = (pl.col("kind") == "step") & ~pl.col("_bar")
    previous = pl.when(records).then(pl.col("step")).shift(1).forward_fill().over(file_key())
    back = (records & (pl.col("step") < previous)).fill_null(False)
    restart = (pl.col("kind").is_in(ATTEMPT_STARTS) | back).cast(pl.Int32, strict=False).cum_sum()
    first = pl.struct(file_key().alias("_file"), restart.alias("_attempt"), "kind", "step").is_first_distinct()
    keep = (pl.col("kind") != "step") | first
    if seen is not None and seen.height:
        at = seen["line"][0]
        same = restart == restart.filter(pl.col("line") == at).max()
        again = pl.col("_bar") & (pl.col("line") > at) & same & pl.col("step").is_in(seen["step"].implode())
        keep = keep & ~again.fill_null(False)
    return ev.filter(keep)


def _startup_clocks(ev: pl.LazyFrame, lines: pl.LazyFrame) -> pl.LazyFrame:
    """init/init_done rows without time take the next clock stated before the next step."""
    step_lines = ev.filter(pl.col("kind") == "step").select("line").unique().with_columns(pl.lit(True).alias("_st"))
    ctx = (
        lines.select("line", "_i", "clock", "clock_off")
        .join(step_lines, on="line", how="left")
        .sort("_i")
        .with_columns(pl.col("_st").fill_null(False).cum_sum().alias("_block"))
        .with_columns(
            pl.when(pl.col("clock").is_not_null())
            .then(pl.struct("clock", "clock_off"))
            .backward_fill()
            .over("_block", file_key())
            .alias("_next")
        )
        .unique("line", keep="first", maintain_order=True)
        .select(
            "line",
            pl.col("_next").struct.field("clock").alias("_next_clock"),
            pl.col("_next").struct.field("clock_off").alias("_next_off"),
        )
    )
    wants = pl.col("kind").is_in(["init", "init_done"]) & pl.col("ts").is_null() & pl.col("_next_clock").is_not_null()
    return (
        ev.join(ctx, on="line", how="left", maintain_order="left")
        .with_columns(
            pl.when(wants).then(pl.col("_next_clock")).otherwise(pl.col("ts")).alias("ts"),
            pl.when(wants).then(pl.col("_next_off")).otherwise(pl.col("ts_offset_s")).alias("ts_offset_s"),
            (pl.col("ts_inferred") | wants).alias("ts_inferred"),
        )
        .drop("_next_clock", "_next_off")
    )


# What every framework module's rules filter on first. HF's banners as '***** Running': a bare
# '*****' is also torchrun's OMP_NUM_THREADS banner, which ran this parser on every launcher log.
# 'step' only as the modules write it ('step: N', 'step=N', 'at step N', 'global step N', 'steps',
# m4's 'opt_step'): a bare 'step' ran the parser on every kernel OOM report of a Slurm step
# ('cpuset=step_0').
STEP_LITERALS = ("step:", "step=", "step ", "steps", "opt_step")
LITERALS = [
    "iteration", "heckpoint", *STEP_LITERALS, "datetime:", "training ...", "> initiali", "world size", "model ...",
    "kill switch", "exiting program", "iter time (s)", "[Torch]", "verflow", "OVERFLOW", "decrease scale",
    "***** Running", "setting up devices", "Process rank:", "Training completed", "{'", "%|", "it [",
    "saving model to", "GLOBAL_RANK", "GPU available", "params size", "Trainer.fit", "Starting job",
    ":::MLLOG", "validation **", "grad_norm", "gradnorm",
]
NEAR = 3  # lines around a literal line kept as context (wrapped records, a timer after a save)


def _near_literals(enriched: pl.DataFrame) -> pl.DataFrame:
    """The lines the modules can use: lines holding a literal, lines a few lines from one, and
    lines that state a clock (anchors for clock-less records). In a big mixed log that is a small
    share of the lines, and every module then filters a small frame."""
    line = pl.col("line")
    hit = pl.when(contains_any(pl.col("text"), LITERALS)).then(line)
    # The literal search as a column first: used twice inside one filter, it was searched twice.
    near = ((line - pl.col("_hit").forward_fill()) <= NEAR) | ((pl.col("_hit").backward_fill() - line) <= NEAR)
    return (
        enriched.with_columns(hit.alias("_hit"))
        .filter(near.fill_null(False) | pl.col("clock").is_not_null())
        .drop("_hit")
    )


def _seen(enriched: pl.LazyFrame) -> pl.DataFrame | None:
    """The bar steps earlier blocks reported (hint ``carried_seen`` of a carried line), if any."""
    if CARRIED_SEEN not in enriched.collect_schema().names():
        return None
    return seen_steps(enriched.filter(pl.col(CARRIED_SEEN).is_not_null()).collect())


def _active(enriched: pl.LazyFrame) -> list[Any]:
    """The framework modules that can find something here: a module declaring ``NEEDS`` (literals
    every row of its comes from) runs only when a line holds one; planning it costs more than
    a small file's whole read."""
    gated = [m for m in _MODULES if hasattr(m, "NEEDS")]
    held = enriched.select(contains_any(pl.col("text"), m.NEEDS).any().alias(m.__name__) for m in gated)
    skip = {m for m, found in zip(gated, held.collect().row(0), strict=True) if not found}
    return [m for m in _MODULES if m not in skip]


class TrainerParser(Parser):
    name = "trainer"
    source = "trainer"
    noise: tuple[str, ...] = tuple(p for m in _MODULES for p in m.NOISE) + tqdm.NOISE
    # The literals every framework module filters on first (tqdm bars: '%|', 'it ['); an ANSI
    # escape runs the parser too, since enrich() strips escapes that may split a literal.
    gates = (literal_gate(LITERALS), "\x1b")
    batched = True  # every fill, count, run and look-up of the modules stays within its file

    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame:
        # Frames read by several later steps are materialized once: the query optimizer does not
        # always share such sub-plans, and re-running every module per use costs more than memory.
        enriched = _near_literals(enrich(lines)).lazy()
        parts = [p for m in _active(enriched) for p in m.extract(enriched)]
        ev = pl.concat(parts, how="vertical").sort("line", maintain_order=True)
        ev = _dedupe_steps(_fill_steps(_one_step_source(_own_clocks(ev, enriched))), _seen(enriched))
        ev = ev.collect().lazy()
        ev = _collapse(ev).collect().lazy()
        return conform_raw(_startup_clocks(ev, enriched))

    def carry(self, lines: pl.DataFrame, rows: pl.DataFrame | None) -> pl.DataFrame:
        """The lines of a block the next block of its file reads ahead of its own (see ``carry``)."""
        return carry_lines(lines, rows)


parser = TrainerParser()

__all__ = ["TrainerParser", "parser"]  # the entry point names `parser`
