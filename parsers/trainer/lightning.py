"""PyTorch Lightning and NeMo: ``Epoch N:`` progress bars, ``[NeMo I ts module:N]`` records.

* Training bars ``Epoch 3:  45%|…| 450/1000 [10:00<12:13, 0.75it/s, v_num=1,
  reduced_train_loss=2.31, global_step=1449.0, train_step_timing in s=0.512]`` are steps. The
  logged ``global_step`` is the number of optimizer steps completed *before* the one being
  reported, so ``step`` = global_step + 1 (matching the ``step=N`` of checkpoint names). Without
  it, ``step`` = epoch × total + n (batches, which equals steps without gradient accumulation).
  ``step_time_s`` = ``train_step_timing in s`` when logged, else tqdm's s/it; ``loss`` =
  ``reduced_train_loss`` / ``train_loss`` / ``loss`` (null when the bar shows none). Repaints of
  one step count once.
* Validation bars: the repaint at 0 s -> eval_begin, the repaint reaching its total -> eval_end.
* Checkpoints: ``Epoch N, global step M: 'metric' reached … saving model to '…'`` and NeMo's
  ``Scheduled async checkpoint save for …step=M…`` -> ckpt_save_begin; ``Global Checkpoint Save :
  Rank: R : Iteration: M : Start time: T s : Save duration: D s`` -> ckpt_save_begin at T and
  ckpt_save_end at T + D (epoch seconds, UTC); ``Async checkpoint save for step M … finalized`` ->
  ckpt_save_end; ``Restoring states from the checkpoint path at …step=M…`` -> ckpt_load.
* ``Initializing distributed: GLOBAL_RANK`` / ``GPU available:`` -> init; ``Total estimated model
  params size (MB)`` (the model summary printed as fit starts) -> init_done; ``Trainer.fit`
  stopped`` (max_steps / max_epochs reached) -> job_end, state COMPLETED.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.trainer.common import NUM, add_seconds, message, part, to_float, to_int
from toranalyze_parsers.trainer.tqdm import bars, post_field

from toranalyze.parser_api import contains_any, ts_epoch_ms

_GLOBAL_SAVE = (
    r"Global Checkpoint Save : Rank: [0-9]+ : (?:Iteration: ([0-9]+) : )?Start time: (" + NUM + r")s : Save duration: ("
    + NUM + r")s"
)
_REACHED = r"Epoch [0-9]+, global step ([0-9]+): '[^']+' reached .*saving model to"

NOISE: tuple[str, ...] = (
    r"^\[NeMo I [0-9]{4}-",
    r"Epoch [0-9]+, global step [0-9]+: '[^']+' was not in top",
    r"^LOCAL_RANK: [0-9]+ - CUDA_VISIBLE_DEVICES",
    r"^(?:TPU|IPU|HPU) available: ",
)


def _epoch_steps(b: pl.LazyFrame) -> pl.LazyFrame:
    post = pl.col("post").fill_null("")
    gstep = to_float(post.str.extract(post_field("global_step"), 1))
    epoch = to_int(pl.col("desc").str.extract(r"Epoch ([0-9]+)", 1))
    step = pl.coalesce(
        (gstep.round(0) + 1).cast(pl.Int64, strict=False),
        pl.when(pl.col("total").is_not_null()).then(epoch * pl.col("total") + pl.col("n")).otherwise(pl.col("n")),
    )
    timing = to_float(post.str.extract(r"train_step_timing in s=([^,\]]+)", 1))
    loss = pl.coalesce(
        to_float(post.str.extract(post_field("reduced_train_loss"), 1)),
        to_float(post.str.extract(post_field("train_loss"), 1)),
        to_float(post.str.extract(post_field("loss"), 1)),
    )
    return b.filter((pl.col("bar") == "train_epoch") & ((pl.col("n") > 0) | gstep.is_not_null())).select(
        "line",
        pl.lit("step").alias("kind"),
        pl.lit("info").alias("severity"),
        "ts",
        "ts_inferred",
        step.alias("step"),
        pl.coalesce(timing, pl.col("s_per_it")).alias("step_time_s"),
        loss.alias("loss"),
        pl.col("text").str.strip_chars().alias("message"),
    )


def _eval_bars(b: pl.LazyFrame) -> pl.LazyFrame:
    ev = b.filter(pl.col("bar") == "eval")
    kind = (
        pl.when(pl.col("elapsed_s") == 0).then(pl.lit("eval_begin"))
        .when(pl.col("total").is_not_null() & (pl.col("n") == pl.col("total"))).then(pl.lit("eval_end"))
    )
    return (
        ev.with_columns(kind.alias("kind"))
        .filter(pl.col("kind").is_not_null())
        .select("line", "kind", pl.lit("info").alias("severity"), "ts", "ts_inferred",
                pl.col("text").str.strip_chars().alias("message"))
    )


def _records(lines: pl.LazyFrame) -> pl.LazyFrame:
    t = pl.col("text")
    kind = (
        pl.when(t.str.contains(_REACHED) | t.str.contains(r"Scheduled async checkpoint save for"))
        .then(pl.lit("ckpt_save_begin"))
        .when(t.str.contains(r"Async checkpoint save for step [0-9]+ .*finalized")).then(pl.lit("ckpt_save_end"))
        .when(t.str.contains(r"Restoring states from the checkpoint path at|Restored all states from the checkpoint"))
        .then(pl.lit("ckpt_load"))
        .when(t.str.contains(r"Initializing distributed: GLOBAL_RANK|^GPU available: ")).then(pl.lit("init"))
        .when(t.str.contains(r"Total estimated model params size \(MB\)")).then(pl.lit("init_done"))
        .when(t.str.contains(r"`Trainer\.fit` stopped")).then(pl.lit("job_end"))
    )
    step = pl.coalesce(
        t.str.extract(_REACHED, 1),
        t.str.extract(r"Async checkpoint save for step ([0-9]+)", 1),
        t.str.extract(r"[-_/=]step=([0-9]+)", 1),
    )
    pre = lines.filter(
        contains_any(t, ["heckpoint", "saving model to", "GLOBAL_RANK", "GPU available", "params size", "Trainer.fit"])
    )
    simple = (
        pre.filter(~t.str.contains(_GLOBAL_SAVE))
        .with_columns(kind.alias("kind"))
        .filter(pl.col("kind").is_not_null())
        .select(
            "line", "kind", pl.lit("info").alias("severity"),
            pl.col("clock").alias("ts"), pl.col("clock_off").alias("ts_offset_s"),
            to_int(step).alias("step"),
            pl.when(pl.col("kind") == "job_end").then(pl.lit("COMPLETED")).alias("state"),
            pl.when(pl.col("kind") == "job_end").then(pl.lit("0")).alias("code"),
            message().alias("message"),
        )
    )
    g = t.str.extract_groups(_GLOBAL_SAVE)
    start = ts_epoch_ms(g.struct.field("2").cast(pl.Float64, strict=False) * 1000)
    dur = g.struct.field("3").cast(pl.Float64, strict=False)
    saves = pre.filter(t.str.contains(_GLOBAL_SAVE)).select(
        "line", to_int(g.struct.field("1")).alias("step"), start.alias("_start"), dur.alias("duration_s"),
        message().alias("message"),
    )
    common: list[pl.Expr | str] = [
        pl.lit("info").alias("severity"),
        pl.lit(0, pl.Int32).alias("ts_offset_s"),
        "step",
        "message",
        "line",
    ]
    begin = saves.select(pl.lit("ckpt_save_begin").alias("kind"), pl.col("_start").alias("ts"), *common)
    end = saves.select(
        pl.lit("ckpt_save_end").alias("kind"),
        add_seconds(pl.col("_start"), pl.col("duration_s")).alias("ts"),
        "duration_s",
        *common,
    )
    return pl.concat([simple, begin, end], how="diagonal_relaxed")


def extract(lines: pl.LazyFrame) -> list[pl.LazyFrame]:
    b = bars(lines)
    return [part(_epoch_steps(b), bar=True), part(_eval_bars(b), bar=True), part(_records(lines))]
