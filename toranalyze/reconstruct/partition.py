"""The analysis in groups of jobs: the prepared events split into groups of consecutive jobs
(each group reconstructed alone, as a Ray task with that engine) and the groups' tables combined
into the analysis, the seconds computed on the whole tables, and its notes."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from toranalyze.reconstruct import ledger, progress
from toranalyze.reconstruct.api import US, UTC_US, Analysis, AnalysisOptions, divided
from toranalyze.reconstruct.prepare import PreparedEvents
from toranalyze.reconstruct.tables import ATTEMPTS_SCHEMA, INCIDENTS_SCHEMA, SLOW_PERIODS_SCHEMA, TOR_SCHEMA


@dataclass(frozen=True)
class JobGroup:
    """Jobs reconstructed together (one task): their events and rows of the jobs table."""

    events: pl.DataFrame
    jobs: pl.DataFrame
    options: AnalysisOptions
    file_offsets_us: tuple[tuple[str, int], ...] = ()  # PreparedEvents.file_offsets_us


@dataclass
class PartialAnalysis:
    """A job group's tables, jobs as codes and times in µs, in job order: the seconds are left to
    ``combine``; its clipped windows and incidents, for the notes."""

    attempts: pl.DataFrame
    incidents: pl.DataFrame  # without lost_time_s (and downtime_s as divided on this part)
    lost: pl.DataFrame  # rework µs per (job, attempt) with lost steps (``lost_time_us``)
    slow_periods: pl.DataFrame  # without factor, median_step_time_s and slowdown_s
    slow_cost: pl.DataFrame  # slowdown µs per (job, period) (``slowdown_us``)
    tor: pl.DataFrame  # buckets in µs
    resources: pl.DataFrame
    progress: pl.DataFrame
    checkpoints: pl.DataFrame
    clipped_windows: list[int]  # jobs
    clipped_incidents: list[tuple[int, int]]  # (job, incident)


# Job groups per task slot with a partition: enough to even out unequal jobs, few enough that a
# task's fixed cost stays small.
GROUPS_PER_SLOT = 3


def job_groups(prepared: PreparedEvents, options: AnalysisOptions, n: int) -> list[JobGroup]:
    """At most ``n`` groups of consecutive jobs (in code order, so their tables concatenate in
    job order) with about equal numbers of events; a job is never split."""
    jobs, ev = prepared.jobs, prepared.events
    if jobs.height == 0:
        return [JobGroup(ev, jobs, options, prepared.file_offsets_us)]
    sizes = jobs.select("job").join(ev.group_by("job").len(), on="job", how="left").fill_null(0)
    total = max(1, int(sizes["len"].sum()))
    # A job's group is where its first event falls among n equal shares of the events.
    before = sizes["len"].cum_sum() - sizes["len"]
    group = (before * min(n, jobs.height) // total).cast(pl.Int64)
    rows = jobs.with_columns(group.alias("_grp")).partition_by("_grp", maintain_order=True, include_key=False,
                                                               as_dict=True)
    if ev["job"].is_sorted() and not ev["job"].null_count():
        # Events in job order (as the attempts leave them when every record has a time): each
        # group is a slice of the table, not a copy.
        code = ev["job"]
        lo = code.search_sorted(pl.Series([p["job"].min() for p in rows.values()], dtype=code.dtype), "left")
        hi = code.search_sorted(pl.Series([p["job"].max() for p in rows.values()], dtype=code.dtype), "right")
        offsets = prepared.file_offsets_us
        return [JobGroup(ev.slice(a, b - a), part, options, offsets)
                for a, b, part in zip(lo, hi, rows.values(), strict=True)]
    lookup = pl.Series(values=[-1] * prepared.names.len(), dtype=pl.Int64).scatter(sizes["job"], group)
    frames = ev.with_columns(lookup.gather(ev["job"]).alias("_grp")).partition_by(
        "_grp", maintain_order=True, include_key=False, as_dict=True)
    return [JobGroup(frames.get(key, ev.clear()), part, options, prepared.file_offsets_us)
            for key, part in rows.items()]


def combine(prepared: PreparedEvents, parts: list[PartialAnalysis], options: AnalysisOptions) -> Analysis:
    """The analysis from the groups' tables (concatenated in job order) and the notes."""
    names = prepared.names
    user = options.user_ideal_s()
    user_ideal_us = None if user is None else round(user * US)

    def joined(table: str) -> pl.DataFrame:
        return _concat([getattr(p, table) for p in parts])

    attempts = _conform(_to_dt(_named(joined("attempts"), names), ["t_start", "t_end", "t_first_step_start",
                                                                   "t_last_step_end"]), ATTEMPTS_SCHEMA)
    return Analysis(
        attempts=attempts.sort("job", "attempt"),
        incidents=_incidents_table(joined("incidents"), joined("lost"), names),
        slow_periods=_slow_periods_table(joined("slow_periods"), joined("slow_cost"), names, user_ideal_us),
        tor=_tor_table(joined("tor"), names, user_ideal_us),
        notes=_notes(prepared, parts),
        resources=_named(joined("resources"), names),
        progress=_named(joined("progress"), names),
        checkpoints=_named(joined("checkpoints"), names),
    )


def _notes(prepared: PreparedEvents, parts: list[PartialAnalysis]) -> list[str]:
    names = prepared.names
    notes = [f"job {names[j]!r}: scheduler records only, no training records; not analysed" for j in prepared.dropped]
    notes += [f"job {names[j]!r}: window clipped to the span of its records" for p in parts for j in p.clipped_windows]
    notes += [
        f"job {names[j]!r}: incident {i} had a phase outside the job's window; clipped"
        for p in parts for j, i in p.clipped_incidents
    ]
    notes += [
        f"job {names[j]!r}: no record has a timestamp; times are rebuilt from the reported step times and start "
        f"at 1970-01-01T00:00:00Z (durations are real, dates are not)"
        for j in prepared.untimed
    ]
    for j, ident in prepared.jobs.select("job", "identity").iter_rows():
        if ident == "directory":
            notes.append(f"job {names[j]!r}: no scheduler id in its records; grouped by its input directory")
    return notes


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Frames concatenated, each column materialized as the whole table's are. A
    group with no rows of a table may type its columns otherwise (a literal's type, or null) or
    not build it at all (no columns): such frames are left out."""
    full = [f for f in frames if f.height]
    if len(full) == 1:
        return full[0]
    if not full:
        return next((f for f in frames if f.width), frames[0])
    joined = pl.concat(full, how="vertical_relaxed")
    return pl.DataFrame([joined.get_column(c) for c in joined.columns])


PHASES = ["t_last_progress", "t_first_error", "t_detected", "t_restart", "t_resumed", "t_caught_up"]

def _incidents_table(inc: pl.DataFrame, lost: pl.DataFrame, names: pl.Series) -> pl.DataFrame:
    """The incidents table, with lost time and downtime in seconds."""
    if inc.height:
        lost = lost.select("job", "attempt", divided(pl.col("lost_time_us"), US).alias("_lt"))
        inc = inc.join(lost, on=["job", "attempt"], how="left").with_columns(
            pl.when(pl.col("lost_steps") > 0).then(pl.col("_lt").fill_null(0.0)).otherwise(0.0).alias("lost_time_s"),
            # (from its µs, recovered exactly by rounding: tens of years would be needed to lose 0.5 µs)
            divided((pl.col("downtime_s") * US).round(), US).alias("downtime_s"),
        ).drop("_lt")
    return _conform(_to_dt(_named(inc, names), PHASES), INCIDENTS_SCHEMA)


def _slow_periods_table(sp: pl.DataFrame, slow_cost: pl.DataFrame, names: pl.Series,
                        user_ideal_us: int | None) -> pl.DataFrame:
    if not sp.height:
        return pl.DataFrame(schema=SLOW_PERIODS_SCHEMA)
    by_ideal = pl.col("med_us") / pl.col("ideal_us") if user_ideal_us is None else divided(
        pl.col("med_us"), user_ideal_us)
    sp = sp.with_columns(by_ideal.alias("factor"),
                         divided(pl.col("med_us"), US).alias("median_step_time_s"))
    slow_cost = slow_cost.select("job", "period",
                                 divided(pl.col("slowdown_us"), US).alias("slowdown_s"))
    sp = sp.join(slow_cost, on=["job", "period"], how="left")
    return _conform(_to_dt(_named(sp, names), ["start", "end"]), SLOW_PERIODS_SCHEMA)


def _tor_table(tor: pl.DataFrame, names: pl.Series, user_ideal_us: int | None) -> pl.DataFrame:
    """The TOR table: buckets in seconds, TOR = useful / observed time."""
    tor = tor.with_columns(divided(pl.col(f"{b}_us"), US).alias(f"{b}_s")
                           for b in ("t_obs", *ledger.BUCKETS, *ledger.RECOVERY_PARTS, "eval"))
    ideal = divided(pl.col("ideal_us"), US) if user_ideal_us is None else pl.lit(user_ideal_us / US)
    tor = tor.with_columns(
        pl.when(pl.col("t_obs_us") > 0).then(pl.col("useful_us") / pl.col("t_obs_us")).alias("tor"),
        ideal.alias("ideal_step_time_s"),
        progress.is_clean(pl.col("state")).fill_null(False).alias("ended_cleanly"),
        pl.col("n_incidents").fill_null(0),
        pl.col("T0").alias("t_start"),
        pl.col("T1").alias("t_end"),
    )
    return _conform(_to_dt(_named(tor, names), ["t_start", "t_end"]), TOR_SCHEMA).sort("job")


def _named(df: pl.DataFrame, names: pl.Series) -> pl.DataFrame:
    """``job`` codes back to the job names."""
    return df.with_columns(names.gather(df["job"]).alias("job"))

def _to_dt(df: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    return df.with_columns([pl.col(c).cast(pl.Int64).cast(UTC_US) for c in cols if c in df.columns])


def _conform(df: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    exprs = []
    for name, dtype in schema.items():
        if name in df.columns:
            exprs.append(pl.col(name).cast(dtype))
        else:
            exprs.append(pl.lit(None, dtype).alias(name))
    return df.select(exprs)
