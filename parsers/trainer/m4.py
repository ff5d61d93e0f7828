"""HuggingFace m4 (accelerate + DeepSpeed): ``iteration:  2500/500000   0% | elapsed time: 07:41:19 |
per_token_loss: 3.1525 | …`` records, validation markers and ``PID N:`` debug traces.

``elapsed time`` is cumulative since the script started, so ``step_time_s`` = the elapsed
difference to the previous logged iteration ÷ the iterations between them (unknown for the
first record of a file or after a restart, when the elapsed time goes backwards). The records
state no wall clock: ``ts`` is left to the reader (previous dated record).

``** Starting validation **`` / ``** Finished validation **`` -> eval_begin / eval_end (the step
is the latest iteration). ``PID N:  After … at opt_step N`` traces -> ``info`` of severity debug
with the step they name (the last place each process was seen); other ``PID N:`` traces and the
``Validation logs:`` summary are chatter.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.trainer.common import NUM_OR_NAN, field, hms_seconds, message, part, to_int

from toranalyze.parser_api import file_key

_ITER = r"^\s*iteration:\s*([0-9]+)\s*/\s*[0-9]+"
_ELAPSED = r"\|\s*elapsed time:\s*((?:[0-9]+ days?, )?[0-9]+:[0-9]+:[0-9]+)"
_PID = r"^PID [0-9]+:\s"

NOISE: tuple[str, ...] = (_PID, r"^Validation logs: ")


# Steps need 'iteration:', the validation and optimizer marks their literals (the trainer skips
# the module when a block holds none).
NEEDS = ("iteration:", "validation **", "opt_step")


def extract(lines: pl.LazyFrame) -> list[pl.LazyFrame]:
    t = pl.col("text")
    iters = lines.filter(t.str.contains("iteration:", literal=True) & t.str.contains(_ITER)).with_columns(
        to_int(t.str.extract(_ITER, 1)).alias("step"),
        hms_seconds(t.str.extract(_ELAPSED, 1)).alias("_elapsed"),
    )
    d_steps = pl.col("step") - pl.col("step").shift(1).over(file_key())
    d_secs = pl.col("_elapsed") - pl.col("_elapsed").shift(1).over(file_key())
    steps = iters.select(
        "line",
        pl.lit("step").alias("kind"),
        pl.lit("info").alias("severity"),
        "step",
        pl.when((d_steps > 0) & (d_secs >= 0)).then(d_secs / d_steps).alias("step_time_s"),
        field(rf"\|\s*per_token_loss:\s*({NUM_OR_NAN})").alias("loss"),
        message().alias("message"),
    )
    kind = (
        pl.when(t.str.contains(r"^\*\* Starting validation \*\*")).then(pl.lit("eval_begin"))
        .when(t.str.contains(r"^\*\* Finished validation \*\*")).then(pl.lit("eval_end"))
        .when(t.str.contains(_PID + r".*\bopt_step [0-9]+")).then(pl.lit("info"))
    )
    marks = (
        lines.filter(t.str.contains("validation **", literal=True) | t.str.contains("opt_step", literal=True))
        .with_columns(kind.alias("kind"))
        .filter(pl.col("kind").is_not_null())
        .select(
            "line",
            "kind",
            pl.when(pl.col("kind") == "info").then(pl.lit("debug")).otherwise(pl.lit("info")).alias("severity"),
            to_int(t.str.extract(r"\bopt_step ([0-9]+)", 1)).alias("step"),
            message().alias("message"),
        )
    )
    return [part(steps), part(marks)]
