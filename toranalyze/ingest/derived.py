"""Events derived from several records at once, added to the table after parsing.

Loss spikes: a logged loss far above the recent losses of the same log is the visible start of
a divergence (BLOOM's and OPT's logs show them before a NaN or a rollback). A spike is a
``warning`` of class ``numerics`` at the step that shows it; whether it ended anything is for
the incident stage to say — many spikes recover on their own.
"""

from __future__ import annotations

import polars as pl

from toranalyze.schema import EVENT_SCHEMA

SPIKE_WINDOW = 20  # previous logged losses the baseline is taken over
SPIKE_RATIO = 1.3  # loss / baseline median
SPIKE_MIN_JUMP = 1.0  # and at least this much above it (nats), so a tiny loss doubling is no spike
EARLY_STEPS = 100  # the first steps of a training are erratic by nature
RULE_ID = "derived-loss-spike"


def _spike_keys(events: pl.LazyFrame) -> pl.DataFrame:
    """(file, line, step, _base) of the first spiking step of each excursion; reads four columns."""
    # Files as categorical codes: a big table's step rows would otherwise repeat each path.
    steps = (
        events.filter((pl.col("kind") == "step") & pl.col("loss").is_finite())
        .select(pl.col("file").cast(pl.Categorical), "line", "step", "loss")
        .collect()
        .sort("file", "line", maintain_order=True)
        .unique(["file", "step"], keep="first", maintain_order=True)  # several ranks log one step
    )
    baseline = pl.col("loss").shift(1).rolling_median(SPIKE_WINDOW, min_samples=1).over("file")
    is_spike = (
        (pl.col("step") >= EARLY_STEPS)
        & (pl.col("loss") >= pl.col("_base") * SPIKE_RATIO)
        & (pl.col("loss") - pl.col("_base") >= SPIKE_MIN_JUMP)
    ).fill_null(False)
    flagged = steps.with_columns(baseline.alias("_base")).with_columns(is_spike.alias("_spike"))
    # One warning per excursion: the first spiking step after one that was not.
    first = pl.col("_spike") & ~pl.col("_spike").shift(1).over("file").fill_null(False)
    return flagged.filter(first).select(pl.col("file").cast(pl.String), "line", "step", "_base")


def loss_spike_events(events: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """New warning rows, in EVENT_SCHEMA, for steps whose loss jumps above the recent median.

    Only the steps' file, line, step and loss are read whole; the full rows are fetched for the
    few spikes, so a table streamed from disk is never loaded."""
    lf = events.lazy()
    keys = _spike_keys(lf)
    if keys.height == 0:
        return pl.DataFrame(schema=EVENT_SCHEMA)
    rows = lf.filter((pl.col("kind") == "step") & pl.col("loss").is_finite()).join(
        keys.lazy(), on=["file", "line", "step"], how="semi"
    )
    spikes = (
        rows.unique(["file", "line", "step"], keep="first", maintain_order=True)
        .join(keys.lazy(), on=["file", "line", "step"], how="left")
        .collect()
        .sort("file", "line", maintain_order=True)
    )
    return spikes.with_columns(
        pl.lit("warning").alias("kind"),
        pl.lit("warning").alias("severity"),
        pl.lit("numerics").alias("failure_class"),
        pl.lit(RULE_ID).alias("rule"),
        pl.lit("derived").alias("parser"),
        pl.format(
            "loss spike: loss {} at step {} is {}x the median {} of the previous logged steps",
            pl.col("loss").round(4), pl.col("step"), (pl.col("loss") / pl.col("_base")).round(2),
            pl.col("_base").round(4),
        ).alias("message"),
        pl.lit(None, pl.Float64).alias("step_time_s"),
    ).select(list(EVENT_SCHEMA))
