"""torchtitan: ``[rank0]:[titan] ts - root - INFO - step: N  loss: X  …  tps: 5,856  mfu: M%``.

* Step records are logged every ``log_freq`` steps and carry no duration, except forks that add
  ``elapsed_time_per_step: 1.234s``; otherwise ``step_time_s`` stays null and the timestamps
  speak. ``validate step: N  loss: X`` -> eval_end.
* Checkpoints: ``Saving the checkpoint …`` / ``Saving a full checkpoint at step N`` / ``Saving a
  model … checkpoint … step N`` -> ckpt_save_begin; ``Finished saving the checkpoint … in X
  seconds`` and ``Last step checkpoint completed in Xs`` -> ckpt_save_end with ``duration_s``
  (the step is the latest logged one when the record names none). ``Loading the checkpoint at
  step N`` / ``… from …/step-N`` / ``Loading resume checkpoint from …/step-N`` -> ckpt_load and
  ``Finished loading (the|resume) checkpoint in X seconds`` completes it (``duration_s``). Initial
  and additional (pretrained-weight) loads are not resumes: ``info``.
* ``Starting job:`` -> init; ``Training starts at step N`` -> init_done; ``Training completed``
  -> job_end, state COMPLETED.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.trainer.common import NUM, NUM_OR_NAN, field, message, part, to_int

from toranalyze.parser_api import contains_any, file_key

_STEP = rf"(?:^|\s|- )step:\s*([0-9]+)(?:/[0-9]+[^l]*?)?\s+loss:\s*({NUM_OR_NAN})"
_VALIDATE = rf"validate step:\s*([0-9]+)\s+loss:\s*({NUM_OR_NAN})"
_SAVE_BEGIN = r"Saving the checkpoint|Saving a (?:full|model[\w ]*?) checkpoint"
_SAVED = r"Finished saving the checkpoint.*?in\s*(" + NUM + r")\s*seconds"
_SAVED_LAST = r"Last step checkpoint completed in (" + NUM + ")s"
_SAVE_END = _SAVED + "|" + _SAVED_LAST
_LOAD = r"Loading the checkpoint (?:at step [0-9]+|from \S+)|Loading resume checkpoint from"
_LOADED = r"Finished loading (?:the |resume )?checkpoint in (" + NUM + ") seconds"
_OTHER_LOAD = r"(?:Loading|Finished loading) (?:initial|additional) checkpoint"

NOISE: tuple[str, ...] = (
    r"Sleeping [0-9]+ seconds for other ranks to complete",
    r"(?:^|\[titan\] )[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]+ - root - INFO - ",
)


# Every row comes from a line holding one of these (the trainer skips the module without one).
NEEDS = ("step:", "at step", "heckpoint", "Starting job", "Training completed")


def _rows(lines: pl.LazyFrame) -> pl.LazyFrame:
    t = pl.col("text")
    step_g = t.str.extract_groups(_STEP)
    val_g = t.str.extract_groups(_VALIDATE)
    kind = (
        pl.when(val_g.struct.field("1").is_not_null()).then(pl.lit("eval_end"))
        .when(step_g.struct.field("1").is_not_null()).then(pl.lit("step"))
        .when(t.str.contains(_OTHER_LOAD)).then(pl.lit("info"))
        .when(t.str.contains(_SAVE_BEGIN)).then(pl.lit("ckpt_save_begin"))
        .when(t.str.contains(_SAVE_END)).then(pl.lit("ckpt_save_end"))
        .when(t.str.contains(_LOAD) | t.str.contains(_LOADED)).then(pl.lit("ckpt_load"))
        .when(t.str.contains(r"Starting job: ")).then(pl.lit("init"))
        .when(t.str.contains(r"Training starts at step [0-9]+")).then(pl.lit("init_done"))
        .when(t.str.contains(r"(?:^|- )Training completed")).then(pl.lit("job_end"))
    )
    step = pl.coalesce(
        val_g.struct.field("1"), step_g.struct.field("1"),
        t.str.extract(r"(?:at step|at last step, step|Loading the checkpoint at step) ([0-9]+)", 1),
        t.str.extract(r"step-([0-9]+)", 1),
    )
    loss = pl.coalesce(
        field(_VALIDATE.replace(r"([0-9]+)", r"[0-9]+", 1)), field(_STEP.replace(r"([0-9]+)", r"[0-9]+", 1))
    )
    duration = pl.coalesce(field(_SAVED), field(_SAVED_LAST), field(_LOADED))
    pre = lines.filter(contains_any(t, NEEDS))
    return (
        pre.with_columns(kind.alias("kind"))
        .filter(pl.col("kind").is_not_null())
        .select(
            "line",
            "kind",
            pl.lit("info").alias("severity"),
            pl.col("clock").alias("ts"),
            pl.col("clock_off").alias("ts_offset_s"),
            pl.when(pl.col("kind") != "init_done").then(to_int(step)).alias("step"),
            pl.when(pl.col("kind") == "step").then(field(r"elapsed_time_per_step:\s*(" + NUM + ")s")).alias(
                "step_time_s"
            ),
            pl.when(pl.col("kind").is_in(["step", "eval_end"])).then(loss).alias("loss"),
            duration.alias("duration_s"),
            pl.when(pl.col("kind") == "job_end").then(pl.lit("COMPLETED")).alias("state"),
            pl.when(pl.col("kind") == "job_end").then(pl.lit("0")).alias("code"),
            message().alias("message"),
            t.str.contains(_LOADED).alias("_finished_load"),
        )
    )


def extract(lines: pl.LazyFrame) -> list[pl.LazyFrame]:
    rows = _rows(lines)
    # 'Finished loading … in X seconds' names no step: it completes the load announced before it.
    load_step = pl.when(pl.col("kind") == "ckpt_load").then(pl.col("step"))
    rows = rows.with_columns(
        pl.when(pl.col("_finished_load") & pl.col("step").is_null())
        .then(load_step.forward_fill().over(file_key()))
        .otherwise(pl.col("step"))
        .alias("step")
    ).drop("_finished_load")
    return [part(rows)]
