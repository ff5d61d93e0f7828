"""DeepSpeed engine records: ``[ts] [LEVEL] [file.py:N:func] …`` (the reader peels the ``[ts]``).

* ``step=N, skipped=N, lr=…``, the timer's ``global_step=N`` and the pipeline engine's
  ``steps: N loss: X iter time (s): T samples/sec: S`` are DeepSpeed's *own* step counter, which
  differs from the trainer's iteration under pipeline or gradient accumulation: they are ``step``
  rows of level 1, kept only when the file has no trainer iteration records (the parser turns
  them into ``info`` otherwise). Only the pipeline lines carry a loss and a step time.
* Checkpoint records name the tag directory; ``global_stepN`` gives the step. They repeat once
  per rank and next to Megatron's own lines: the parser collapses consecutive duplicates.
* fp16 loss-scale overflows are ``warning`` rows (normal early in training, not failures);
  ``cannot decrease scale anymore`` is an ``error`` (training cannot continue).
* Every other ``[INFO]`` engine record (config dumps, memory reports, activation-checkpointing
  settings) is chatter.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.trainer.common import LEVEL_DEEPSPEED, NUM, NUM_OR_NAN, field, message, part, to_int

from toranalyze.parser_api import contains_any

_STEP = r"\bstep=([0-9]+), skipped=([0-9]+), lr="
_TIMER_STEP = r"/global_step=([0-9]+), RunningAvgSamplesPerSec="
_PIPE_STEP = rf"\bsteps: ([0-9]+) loss: ({NUM_OR_NAN}) .*?iter time \(s\): ({NUM}) samples/sec:"
_TAG_STEP = r"global_step([0-9]+)"
_SAVE_BEGIN = r"Saving model checkpoint: |\[Torch\] Checkpoint \S+ is begin to save"
_SAVE_END = r"zero checkpoint saved |\[Torch\] Checkpoint \S+ is ready now|\[Torch\] Saved "
_LOAD = r"\bloading checkpoint: |\[Torch\] (?:Begin )?Load(?:ing)? checkpoint from |\[Torch\] End Load checkpoint from "
_OVERFLOW = (
    r"OVERFLOW! Rank [0-9]+ Skipping step|fp16 dynamic loss scale overflow|Gradient overflow\.\s+Skipping step"
    r"|Grad overflow on iteration"
)
_SCALE_FLOOR = r"cannot decrease scale anymore"

NOISE: tuple[str, ...] = (
    r"^\[(?:INFO|DEBUG)\]\s*\[[\w./\-]+\.py:[0-9]+:\w+\]",
    r"\[Rank [0-9]+\] time \(ms\) \|",
    r"^rank=[0-9]+ time \(ms\) \|",
    _SAVE_BEGIN,
    _SAVE_END,
    _LOAD,
)


# Every row comes from a line holding one of these (the trainer skips the module without one).
NEEDS = ("step=", "iter time (s)", "heckpoint", "[Torch]", "verflow", "OVERFLOW", "decrease scale")


def extract(lines: pl.LazyFrame) -> list[pl.LazyFrame]:
    t = pl.col("text")
    prefilter = contains_any(t, NEEDS)
    kind = (
        pl.when(t.str.contains(_STEP) | t.str.contains(_TIMER_STEP) | t.str.contains(_PIPE_STEP)).then(pl.lit("step"))
        .when(t.str.contains(_SAVE_BEGIN)).then(pl.lit("ckpt_save_begin"))
        .when(t.str.contains(_SAVE_END)).then(pl.lit("ckpt_save_end"))
        .when(t.str.contains(_LOAD)).then(pl.lit("ckpt_load"))
        .when(t.str.contains(_SCALE_FLOOR)).then(pl.lit("error"))
        .when(t.str.contains(_OVERFLOW)).then(pl.lit("warning"))
    )
    rows = lines.filter(prefilter).with_columns(kind.alias("kind")).filter(pl.col("kind").is_not_null())
    pipe = t.str.extract_groups(_PIPE_STEP)
    step = pl.coalesce(
        t.str.extract(_STEP, 1), t.str.extract(_TIMER_STEP, 1), pipe.struct.field("1"), t.str.extract(_TAG_STEP, 1),
        t.str.extract(r"Grad overflow on iteration\s+([0-9]+)", 1),
    )
    sev = pl.when(pl.col("kind") == "error").then(pl.lit("error")).when(pl.col("kind") == "warning").then(
        pl.lit("warning")
    ).otherwise(pl.lit("info"))
    out = rows.select(
        "line",
        "kind",
        sev.alias("severity"),
        to_int(step).alias("step"),
        pipe.struct.field("3").cast(pl.Float64, strict=False).alias("step_time_s"),
        field(_PIPE_STEP.replace("([0-9]+)", "[0-9]+", 1)).alias("loss"),
        to_int(t.str.extract(r"OVERFLOW! Rank ([0-9]+)", 1)).cast(pl.Int32, strict=False).alias("rank"),
        message().alias("message"),
    )
    steps = out.filter(pl.col("kind") == "step")
    others = out.filter(pl.col("kind") != "step")
    return [part(steps, LEVEL_DEEPSPEED), part(others)]
