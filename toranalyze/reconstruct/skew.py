"""Clock offsets between log files (or nodes), from moments that several of them record.

Every host stamps its lines with its own clock, and those clocks drift apart. Some moments are
written down by more than one clock: a job's start or end in the scheduler's accounting, its
controller log and the job's own output; the same training step logged by several ranks. Those
are the *anchors*: (kind, job, attempt, step) for ``step`` events and (kind, job) for
``job_start``/``job_end``, each seen by at least two units (files or nodes).

The fit is robust and needs no pairing order: each anchor's consensus time is the median over its
units of (stamp − unit offset), each unit's offset the median over its anchors of (stamp −
consensus), alternated a few times. Offsets are then taken relative to a reference: the
scheduler's clock (Slurm or Kubernetes control plane) when it records anchors, else the median
unit, so one skewed node among several shows alone. A unit's ``spread_s`` (the median distance of
its stamps, less its offset, from the mean of the other units' corrected stamps of the same
anchor) says how loosely its anchors mark one moment; an offset within twice that is not called a
skew.

Pure: events in, one row per unit out. Stamps inferred from a neighbouring line are left out.
``clock_skew`` gathers both kinds of unit and the skewed ones, as the job report shows them.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from toranalyze.reconstruct.api import divided
from toranalyze.reconstruct.jobs import scope_expr

US = 1_000_000
ANCHOR_KINDS = ("job_start", "job_end", "step")
SCHEDULER_SOURCES = ("slurm", "kubernetes")
MAX_ANCHOR_SPAN_US = 15 * 60 * US  # one anchor's stamps further apart than this are not one moment
ITERATIONS = 6

SCHEMA = {"unit": pl.String, "source": pl.String, "anchors": pl.UInt32, "offset_s": pl.Float64,
          "spread_s": pl.Float64, "reference": pl.Boolean}


def anchors(events: pl.DataFrame, unit: str = "file") -> pl.DataFrame:
    """(anchor, unit, source, t): the earliest stamp of each anchor per unit, for anchors that
    at least two units record.

    ``unit`` is ``file`` or ``node``. By file, a step is an anchor only within one scheduler job
    (the same step number in another job's file is a recomputation after a rollback, a later
    moment). By node, a step is one moment within one file (ranks of one attempt writing to the
    same output), and scheduler lines are left out (their node is the one they speak of, not the
    clock that stamped them)."""
    ev = events.filter(pl.col("kind").is_in(ANCHOR_KINDS) & pl.col("ts").is_not_null()
                       & ~pl.col("ts_inferred").fill_null(False) & pl.col(unit).is_not_null())
    step = pl.col("kind") == "step"
    if unit == "file":
        ev = ev.filter(pl.col("job_id").is_not_null()).with_columns(pl.lit(None, pl.String).alias("_in"))
    else:
        ev = ev.filter(~pl.col("source").is_in(SCHEDULER_SOURCES) & (pl.col("job_id").is_not_null() | step))
        ev = ev.with_columns(pl.when(step).then(pl.col("file")).alias("_in"))
    ev = ev.with_columns(pl.when(step).then(pl.col("attempt")).alias("_att"),
                         pl.when(step).then(pl.col("step")).alias("_step"), scope_expr(ev))
    keys = ["scope", "kind", "job_id", "_in", "_att", "_step"]
    per_unit = (ev.group_by(*keys, unit).agg(pl.col("ts").min().cast(pl.Int64).alias("t"),
                                             pl.col("source").first())
                .with_columns(pl.struct(keys).hash().alias("anchor")))
    both = per_unit.filter((pl.len().over("anchor") >= 2)
                           & ((pl.col("t").max() - pl.col("t").min()).over("anchor") <= MAX_ANCHOR_SPAN_US))
    return both.select("anchor", "scope", pl.col(unit).alias("unit"), "source", "t")


def clock_offsets(events: pl.DataFrame, unit: str = "file") -> pl.DataFrame:
    """One row per unit with anchors: unit, source, anchors, offset_s (its clock minus the
    reference's), spread_s, reference. Sorted by the size of the offset, largest first. Records of
    different scopes (jobs.scope_expr: the runs of a fleet batch) share no anchor and no reference."""
    a = anchors(events, unit)
    if a.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    key = ["scope", "unit"]
    off = a.select(key).unique().with_columns(pl.lit(0.0).alias("o"))
    for _ in range(ITERATIONS):
        r = a.join(off, on=key).with_columns((pl.col("t") - pl.col("o")).median().over("anchor").alias("c"))
        off = r.group_by(key).agg((pl.col("t") - pl.col("c")).median().alias("o"))
    # spread: each stamp (less its unit's offset) against the mean of the anchor's other stamps
    x = a.join(off, on=key).with_columns((pl.col("t") - pl.col("o")).alias("x"))
    loo = (pl.col("x").sum().over("anchor") - pl.col("x")) / (pl.len().over("anchor") - 1)
    units = (x.with_columns((pl.col("x") - loo).abs().alias("_r"))
             .group_by(key).agg(pl.col("source").mode().first(), pl.len().cast(pl.UInt32).alias("anchors"),
                                pl.col("o").first(), pl.col("_r").median().alias("_spread")))
    units = units.join(_references(units), on="scope", how="left")
    return units.select(
        "unit", "source", "anchors", divided(pl.col("o") - pl.col("base_offset"), US).alias("offset_s"),
        divided(pl.col("_spread"), US).alias("spread_s"),
        (pl.col("unit") == pl.col("ref_unit").fill_null("")).alias("reference"),
    ).cast(SCHEMA).sort(pl.col("offset_s").abs(), "unit", descending=[True, False])  # type: ignore[arg-type]


def _references(units: pl.DataFrame) -> pl.DataFrame:
    """Per scope, the reference unit ``ref_unit`` (the scheduler's unit with the most anchors, if any
    records them) and the offset ``base_offset`` the others are measured from (the reference's, else
    the median unit's)."""
    sched = (units.filter(pl.col("source").is_in(SCHEDULER_SOURCES))
             .sort(["scope", "anchors", "unit"], descending=[False, True, False])
             .group_by("scope", maintain_order=True).first()
             .select("scope", pl.col("unit").alias("ref_unit"), pl.col("o").alias("ref_offset")))
    median = units.group_by("scope").agg(pl.col("o").median().alias("median_offset"))
    return median.join(sched, on="scope", how="left").select(
        "scope", "ref_unit", pl.coalesce("ref_offset", "median_offset").alias("base_offset"))


def skewed(offsets: pl.DataFrame, threshold_s: float = 1.0, min_anchors: int = 3) -> pl.DataFrame:
    """The units whose clock is off by more than ``threshold_s`` on at least ``min_anchors``
    anchors, and by more than twice their spread: an offset no larger than the scatter of its
    anchors says more about how loosely they mark one moment than about the clock."""
    off = pl.col("offset_s").abs()
    return offsets.filter((off > threshold_s) & (off > 2 * pl.col("spread_s")) & (pl.col("anchors") >= min_anchors))


SKEW_THRESHOLD_S = 1.0
UNITS = ("file", "node")


@dataclass(frozen=True)
class UnitSkew:
    """The clock offsets of one kind of unit (``file`` or ``node``) and those called skewed."""

    unit: str
    offsets: pl.DataFrame  # clock_offsets
    skewed: pl.DataFrame  # the rows of ``offsets`` that skewed() keeps


@dataclass(frozen=True)
class ClockSkew:
    """Clock offsets between files and between nodes, for the kinds of unit that share moments."""

    threshold_s: float
    units: tuple[UnitSkew, ...]


def clock_skew(events: pl.DataFrame, threshold_s: float = SKEW_THRESHOLD_S) -> ClockSkew:
    """Offsets by file and by node; a kind of unit whose members share no moment is left out."""
    units = []
    for unit in UNITS if events.height else ():
        off = clock_offsets(events, unit)
        if off.height:
            units.append(UnitSkew(unit, off, skewed(off, threshold_s)))
    return ClockSkew(threshold_s, tuple(units))
