"""HF transformers Trainer: ``[LEVEL|file.py:N] ts >> …`` records, logged dicts, tqdm bars.

* Loss dicts ``{'loss': …, 'learning_rate': …, 'epoch': …}`` are the training steps. HF does not
  print the step in them, so ``step`` = the dict's ``'step'`` key if present, else the position
  of the training bar when the dict was written (HF logs right after advancing the bar), else
  the running count of distinct dicts in the file (exact only with ``logging_steps=1``; a
  later block of a file counts on from a carried dict's step).
  ``ts`` and ``step_time_s`` come from that bar repaint (anchor + elapsed, and its s/it).
  Identical dicts printed by several nodes count once.
* Without loss dicts, the training bar itself gives the steps (level 2): one row per step
  reached, ``step_time_s`` = tqdm's s/it (its smoothed rate), ``loss`` null (bars carry none).
  When the ``Total optimization steps = N`` banner is present only bars of total N count
  (evaluation bars have other totals).
* ``***** Running training *****`` -> init_done; ``PyTorch: setting up devices`` and the example
  scripts' ``Process rank: …`` line -> init; ``Saving model checkpoint to …/checkpoint-N`` ->
  ckpt_save_begin, ``Model weights saved in …/checkpoint-N/…`` -> ckpt_save_end; ``Loading model
  from …/checkpoint-N`` and ``Continuing training from global step N`` -> ckpt_load. Saves
  outside ``checkpoint-N`` (the final ``save_model`` export) are chatter.
* ``{'eval_loss': …, 'eval_runtime': …}`` -> eval_end; ``***** Running Evaluation *****`` ->
  eval_begin; ``{'train_runtime': …}`` and ``Training completed.`` -> job_end, state COMPLETED.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.trainer.common import CARRIED_STEP, LEVEL_TQDM, NUM, NUM_OR_NAN, field, message, part, to_int
from toranalyze_parsers.trainer.tqdm import bars

from toranalyze.parser_api import contains_any, file_key

_DICT = r"(\{'(?:loss|eval_loss|train_runtime)'[^}]*\})"
_Q = r"'?"  # newer versions quote formatted numbers: {'loss': '2.345', …}
_TOTAL = r"Total optimization steps = ([0-9,]+)"

NOISE: tuple[str, ...] = (
    r"^\[(?:INFO|DEBUG)\|[\w.\-]+:[0-9]+\] ",
    r"\{'(?:loss|eval_loss|train_runtime)'",
    r"Training completed\. Do not forget to share your model",
    r"Saving model checkpoint to ",
)


def _completed() -> list[pl.Expr]:
    """state/code of a trainer's own clean exit (kind job_end)."""
    done = pl.col("kind") == "job_end"
    return [pl.when(done).then(pl.lit("COMPLETED")).alias("state"), pl.when(done).then(pl.lit("0")).alias("code")]


def _records(lines: pl.LazyFrame) -> pl.LazyFrame:
    t = pl.col("text")
    kind = (
        pl.when(t.str.contains("***** Running training *****", literal=True)).then(pl.lit("init_done"))
        .when(t.str.contains("***** Running Evaluation *****", literal=True)).then(pl.lit("eval_begin"))
        .when(t.str.contains(r"PyTorch: setting up devices|Process rank: [0-9]+, device: ")).then(pl.lit("init"))
        .when(t.str.contains(r"Saving model checkpoint to \S*checkpoint-[0-9]+")).then(pl.lit("ckpt_save_begin"))
        .when(t.str.contains(r"Model weights saved in \S*checkpoint-[0-9]+")).then(pl.lit("ckpt_save_end"))
        .when(t.str.contains(r"Loading model from \S*checkpoint-[0-9]+|Continuing training from global step [0-9]+"))
        .then(pl.lit("ckpt_load"))
        .when(t.str.contains("Training completed. Do not forget", literal=True)).then(pl.lit("job_end"))
    )
    step = pl.coalesce(
        t.str.extract(r"checkpoint-([0-9]+)", 1), t.str.extract(r"Continuing training from global step ([0-9]+)", 1)
    )
    pre = lines.filter(
        contains_any(t, [
            "***** Running", "checkpoint", "Continuing training from global step", "setting up devices",
            "Process rank:", "Training completed",
        ])
    )
    return (
        pre.with_columns(kind.alias("kind"))
        .filter(pl.col("kind").is_not_null())
        .select(
            "line",
            "kind",
            pl.lit("info").alias("severity"),
            pl.col("clock").alias("ts"),
            pl.col("clock_off").alias("ts_offset_s"),
            to_int(step).alias("step"),
            *_completed(),
            message().alias("message"),
        )
    )


def _training_bars(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Plain (undescribed) bars whose total is the banner's optimization steps when it is known."""
    # (per file: a batch's files each state their own totals)
    totals = (
        lines.filter(pl.col("text").str.contains("Total optimization steps", literal=True))
        .select(file_key().alias("_file"), to_int(pl.col("text").str.extract(_TOTAL, 1)).alias("_t"))
        .unique()
    )
    plain = bars(lines).filter(pl.col("bar") == "plain").with_columns(file_key().alias("_file"))
    known = totals.group_by("_file").agg(pl.col("_t").alias("_ts"))
    return (
        plain.join(known, on="_file", how="left")
        .filter(pl.col("_ts").is_null() | pl.col("_ts").list.contains(pl.col("total")))
        .drop("_ts", "_file")
    )


def _dicts(lines: pl.LazyFrame, train_bars: pl.LazyFrame) -> pl.LazyFrame:
    t = pl.col("text")
    d = pl.col("_dict")
    rows = (
        lines.filter(t.str.contains("{'", literal=True))
        .with_columns(t.str.extract(_DICT, 1).alias("_dict"))
        .filter(d.is_not_null())
        .with_columns(file_key().alias("_file"))
        .unique(["_file", "_dict"], keep="first", maintain_order=True)
        .drop("_file")
        .with_columns(
            pl.when(d.str.starts_with("{'loss'")).then(pl.lit("step"))
            .when(d.str.starts_with("{'eval_loss'")).then(pl.lit("eval_end"))
            .otherwise(pl.lit("job_end"))
            .alias("kind")
        )
    )
    bar_ctx = train_bars.select(
        "_i", "line", pl.col("n").alias("_bar_n"), pl.col("ts").alias("_bar_ts"), pl.col("s_per_it").alias("_bar_rate")
    )
    both = (
        pl.concat([rows, bar_ctx], how="diagonal_relaxed")
        .sort("_i")
        .with_columns(pl.col("_bar_n", "_bar_ts", "_bar_rate").forward_fill().over(file_key()))
        .filter(pl.col("kind").is_not_null())
        .with_columns(
            (pl.col("kind") == "step").cast(pl.Int64, strict=False).cum_sum().over(file_key()).alias("_count")
        )
    )
    named = pl.coalesce(to_int(d.str.extract(r"'step': ([0-9]+)", 1)), pl.col("_bar_n"))
    if CARRIED_STEP in lines.collect_schema().names():
        # a later block of the file: the count goes on from a carried dict's step, if it was counted
        counted = pl.when(named.is_null() & (pl.col("kind") == "step")).then(pl.col(CARRIED_STEP) - pl.col("_count"))
        both = both.with_columns(pl.col("_count") + counted.max().over(file_key()).fill_null(0))
    step = pl.coalesce(named, pl.col("_count"))
    loss = pl.coalesce(
        field(rf"'loss': {_Q}({NUM_OR_NAN}){_Q}", "_dict"), field(rf"'eval_loss': {_Q}({NUM_OR_NAN}){_Q}", "_dict")
    )
    return both.select(
        "line",
        "kind",
        pl.lit("info").alias("severity"),
        pl.col("_bar_ts").alias("ts"),
        pl.col("_bar_ts").is_not_null().alias("ts_inferred"),
        pl.when(pl.col("kind") != "job_end").then(step).alias("step"),
        pl.when(pl.col("kind") == "step").then(pl.col("_bar_rate")).alias("step_time_s"),
        pl.when(pl.col("kind") != "job_end").then(pl.coalesce(loss, pl.lit(float("nan")))).alias("loss"),
        pl.coalesce(
            field(rf"'train_runtime': {_Q}({NUM}){_Q}", "_dict"), field(rf"'eval_runtime': {_Q}({NUM}){_Q}", "_dict")
        ).alias("duration_s"),
        *_completed(),
        d.alias("message"),
    )


def _bar_steps(train_bars: pl.LazyFrame) -> pl.LazyFrame:
    return train_bars.filter(pl.col("n") > 0).select(
        "line",
        pl.lit("step").alias("kind"),
        pl.lit("info").alias("severity"),
        "ts",
        "ts_inferred",
        pl.col("n").alias("step"),
        pl.col("s_per_it").alias("step_time_s"),
        pl.col("text").str.strip_chars().alias("message"),
    )


def extract(lines: pl.LazyFrame) -> list[pl.LazyFrame]:
    train_bars = _training_bars(lines)
    return [part(_records(lines)), part(_dicts(lines, train_bars)), part(_bar_steps(train_bars), LEVEL_TQDM, bar=True)]
