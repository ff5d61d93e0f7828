"""MLPerf training logs: ``:::MLLOG {"time_ms": …, "key": …, "value": …, "metadata": {…}}``.

``time_ms`` is epoch milliseconds (UTC). Every rank prints its own copy of many records, so rows
are de-duplicated by (key, time_ms, first field of the value) and ordered by time. Records kept:

* the earliest ``init_start`` of a run -> init; ``init_stop`` -> init_done;
* ``init_checkpoint_step`` -> ckpt_load at that step (the benchmark resumes from a checkpoint);
* each ``tracked_stats`` with ``train_step_timing`` is one optimizer step: ``step`` = the
  checkpoint step + the running count of such records (``metadata.step`` counts tokens or
  samples, not steps; a later block of a file counts on from the step of the record carried
  from the block before), ``step_time_s`` = train_step_timing, ``loss`` = reduced_train_loss;
* ``eval_start`` / ``eval_stop`` -> eval_begin / eval_end (``duration_s`` = stop − start);
* ``run_start``, ``block_start`` / ``block_stop`` (a training block between evaluations) -> info;
  ``run_stop`` with status ``success`` -> job_end, state COMPLETED, code 0; with another status
  -> info, state EXIT, severity warning; ``duration_s`` = stop − start.

Everything else (configuration keys, ``cache_clear``, epoch markers, validation timings) is
understood chatter.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.trainer.common import CARRIED_STEP, NUM, field, part, to_float

from toranalyze.parser_api import file_key, ts_epoch_ms

NOISE: tuple[str, ...] = (r"^:::MLLOG \{",)

_KEYS = ["init_start", "init_stop", "init_checkpoint_step", "tracked_stats", "eval_start", "eval_stop", "run_start",
         "run_stop", "block_start", "block_stop"]


# Every row comes from a line holding this (the trainer skips the module without one).
NEEDS = (":::MLLOG",)


def _records(lines: pl.LazyFrame) -> pl.LazyFrame:
    """The kept MLLOG records with ``_json``, ``_key``, ``_ms``, ``_stat`` and ``_file``, one copy of
    each (ranks repeat them), in time order per file."""
    t = pl.col("text")
    js = pl.col("_json")
    return (
        lines.filter(t.str.contains(":::MLLOG", literal=True))
        .with_columns(t.str.extract(r":::MLLOG (\{.*)$", 1).alias("_json"))
        .with_columns(
            js.str.extract(r'"key":\s*"([^"]+)"', 1).alias("_key"),
            js.str.extract(r'"time_ms":\s*(' + NUM + ")", 1).cast(pl.Float64, strict=False).alias("_ms"),
            js.str.extract(r'"value":\s*\{\s*"([^"]+)"', 1).alias("_stat"),
        )
        .filter(pl.col("_key").is_in(_KEYS) & pl.col("_ms").is_not_null())
        .filter((pl.col("_key") != "tracked_stats") | (pl.col("_stat") == "train_step_timing"))
        .with_columns(file_key().alias("_file"))  # (every count and fill is per file of a batch)
        .unique(["_file", "_key", "_ms", "_stat"], keep="first", maintain_order=True)
        .sort("_file", "_ms", "line")
    )


def _kind(key: pl.Expr, status: pl.Expr) -> pl.Expr:
    """The kind of a record; null for records not kept (a later ``init_start`` of a run)."""
    file = pl.col("_file")
    # Runs are separated by init_stop; the first init_start of each run is the attempt's start.
    run = (key == "init_stop").cast(pl.Int32, strict=False).cum_sum().shift(1, fill_value=0).over(file)
    first_init = (key == "init_start") & (
        (key == "init_start").cast(pl.Int32, strict=False).cum_sum().over(file, run) == 1
    )
    success = key.eq("run_stop") & status.eq("success").fill_null(False)
    return (
        pl.when(first_init).then(pl.lit("init"))
        .when(key == "init_stop").then(pl.lit("init_done"))
        .when(key == "init_checkpoint_step").then(pl.lit("ckpt_load"))
        .when(key == "tracked_stats").then(pl.lit("step"))
        .when(key == "eval_start").then(pl.lit("eval_begin"))
        .when(key == "eval_stop").then(pl.lit("eval_end"))
        .when(success).then(pl.lit("job_end"))
        .when(key.is_in(["run_start", "run_stop", "block_start", "block_stop"])).then(pl.lit("info"))
    )


def _step(key: pl.Expr, carried: bool) -> pl.Expr:
    """The checkpoint step, plus the optimizer steps counted so far in the file; in a later block
    of a file (``carried``), counted on from the step the earlier block gave the carried record."""
    file = pl.col("_file")
    base = field(r'"key":\s*"init_checkpoint_step",\s*"value":\s*([0-9]+)', "_json").cast(pl.Int64, strict=False)
    base_all = base.max().over(file).fill_null(0)
    is_step = key == "tracked_stats"
    steps = base_all + is_step.cast(pl.Int64, strict=False).cum_sum().over(file)
    if carried:
        steps = steps + pl.when(is_step).then(pl.col(CARRIED_STEP) - steps).max().over(file).fill_null(0)
    return (
        pl.when(key == "init_checkpoint_step").then(base)
        .when(is_step | key.is_in(["eval_start", "eval_stop", "block_start", "block_stop"])).then(steps)
    )


def _classified(rows: pl.LazyFrame, carried: bool) -> pl.LazyFrame:
    """Records with ``kind`` and ``step``, and the start times (``_eval_ms``, ``_run_ms``) and run
    ``_status`` their durations and states need; windows run before the unkept records go
    (``carried``: a later block of a file, see ``_step``)."""
    file = pl.col("_file")
    key = pl.col("_key")
    started = pl.when(key == "eval_start").then(pl.col("_ms")).forward_fill().over(file)
    run_started = pl.when(key == "run_start").then(pl.col("_ms")).forward_fill().over(file)
    status = pl.col("_json").str.extract(r'"status":\s*"([^"]+)"', 1)
    return rows.with_columns(_kind(key, status).alias("kind"), _step(key, carried).alias("step"),
                             started.alias("_eval_ms"), run_started.alias("_run_ms"),
                             status.alias("_status")).filter(pl.col("kind").is_not_null())


def _columns(out: pl.LazyFrame) -> pl.LazyFrame:
    """The event columns of the classified records."""
    js = pl.col("_json")
    key = pl.col("_key")
    is_step = key == "tracked_stats"
    loss = to_float(js.str.extract(r'"reduced_train_loss":\s*"?([-+]?(?:NaN|Infinity|[0-9][0-9.eE+-]*))', 1))
    duration = (
        pl.when(key == "eval_stop").then(((pl.col("_ms") - pl.col("_eval_ms")) / 1000.0).round(6))
        .when(key == "run_stop").then(((pl.col("_ms") - pl.col("_run_ms")) / 1000.0).round(6))
    )
    severity = pl.when((key == "run_stop") & (pl.col("_status").fill_null("") != "success")).then(
        pl.lit("warning")
    ).otherwise(pl.lit("info"))
    return out.select(
        "line",
        "kind",
        severity.alias("severity"),
        ts_epoch_ms(pl.col("_ms")).alias("ts"),
        pl.lit(0, pl.Int32).alias("ts_offset_s"),
        "step",
        pl.when(is_step).then(field(r'"train_step_timing":\s*(' + NUM + ")", "_json")).alias("step_time_s"),
        pl.when(is_step).then(loss).alias("loss"),
        duration.alias("duration_s"),
        pl.when(pl.col("kind") == "job_end").then(pl.lit("COMPLETED"))
        .when(key == "run_stop").then(pl.lit("EXIT"))
        .alias("state"),
        pl.when(pl.col("kind") == "job_end").then(pl.lit("0")).alias("code"),
        pl.when(key == "run_stop")
        .then(pl.format("run_stop status={}", pl.col("_status").fill_null("?")))
        .otherwise(pl.col("_key") + pl.lit(" ") + js)
        .alias("message"),
    )


def extract(lines: pl.LazyFrame) -> list[pl.LazyFrame]:
    carried = CARRIED_STEP in lines.collect_schema().names()  # a later block of a file
    return [part(_columns(_classified(_records(lines), carried)))]
