"""The pure analysis entry point: events → attempts, incidents, slow periods and the TOR ledger.

``analyze_events(events, options)`` takes the classified event table (``EVENT_SCHEMA``) and
returns an :class:`Analysis` holding four frames whose schemas are the constants
``ATTEMPTS_SCHEMA``, ``INCIDENTS_SCHEMA``, ``SLOW_PERIODS_SCHEMA`` and ``TOR_SCHEMA``
(documented in docs/tables.md). No I/O, no printing.

It runs in three steps: ``prepare_jobs`` (global: jobs and attempts assigned over all files),
``reconstruct_jobs`` on groups of jobs (each job's stages read that job's rows only; with the Ray
engine the groups are Ray tasks) and ``combine`` (the groups' tables in job order, the seconds
computed on the whole tables, the notes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

import polars as pl

from toranalyze.ingest.engine import map_ordered
from toranalyze.reconstruct import incidents as inc_mod
from toranalyze.reconstruct import ledger, progress, slowness
from toranalyze.reconstruct.attribution import attribute_nodes, pod_bindings
from toranalyze.reconstruct.incidents import INCIDENTS_SCHEMA
from toranalyze.reconstruct.intervals import attach, group_keys, in_key_order, in_windows, packed_key, run_id
from toranalyze.reconstruct.jobs import assign_attempts, assign_jobs, job_name
from toranalyze.reconstruct.ledger import TOR_SCHEMA
from toranalyze.reconstruct.resources import RESOURCES_SCHEMA, attempt_resources
from toranalyze.reconstruct.slowness import SLOW_PERIODS_SCHEMA
from toranalyze.schema import KINDS, SEVERITIES, SOURCES, frame_schema

US = 1_000_000
UTC_US = pl.Datetime("us", "UTC")
JOB_CODE = pl.UInt32
# Event columns the stages after job assignment read (plus the incident flags).
_STAGE_COLUMNS = (
    "ts_inferred", "t", "_row", "job", "_base", "_fc", "source", "kind", "severity", "node", "rank", "n_nodes",
    "n_gpus", "step", "step_time_s", "loss", "duration_s", "code", "state", "failure_class", "rule", "file", "line",
    *inc_mod.FLAG_COLUMNS,
)

ATTEMPTS_SCHEMA = frame_schema(
    {
        "job": pl.String,
        "attempt": pl.Int32,
        "job_id": pl.String,
        "t_start": UTC_US,
        "t_end": UTC_US,
        "state": pl.String,
        "exit_code": pl.String,
        "first_step": pl.Int64,
        "last_step": pl.Int64,
        "resumed_from": pl.Int64,
        "ckpt_loaded": pl.Int64,
        "t_first_step_start": UTC_US,
        "t_last_step_end": UTC_US,
        "n_step_records": pl.Int64,
        "steps_lost": pl.Int64,
    }
)

__all__ = [
    "ATTEMPTS_SCHEMA",
    "INCIDENTS_SCHEMA",
    "SLOW_PERIODS_SCHEMA",
    "TOR_SCHEMA",
    "Analysis",
    "AnalysisOptions",
    "analyze_events",
]


@dataclass(frozen=True)
class AnalysisOptions:
    """Knobs of the reconstruction. ``ideal_step_time_s`` (or tokens/s with tokens per step)
    overrides the estimated ideal step time for every job."""

    ideal_step_time_s: float | None = None
    tokens_per_second: float | None = None
    tokens_per_step: float | None = None
    slow_threshold: float = 0.03
    slow_min_steps: int = 5
    warmup_steps: int = 2
    incident_pre_s: float = 60.0
    incident_post_s: float = 120.0
    hang_stall_factor: float = 10.0
    hang_min_stall_s: float = 120.0

    def user_ideal_s(self) -> float | None:
        if self.ideal_step_time_s is not None:
            return float(self.ideal_step_time_s)
        if self.tokens_per_second and self.tokens_per_step:
            return float(self.tokens_per_step) / float(self.tokens_per_second)
        return None


@dataclass
class Analysis:
    attempts: pl.DataFrame
    incidents: pl.DataFrame
    slow_periods: pl.DataFrame
    tor: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    # Nodes and GPUs per attempt (reconstruct/resources.py): what the fleet's exposure is built on.
    resources: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RESOURCES_SCHEMA))
    # For the report: placed step rows (job, attempt, step, start, end, n, n_lost, d_us; times in
    # UTC µs) and blocking checkpoint saves (job, start, end). Not written as tables.
    progress: pl.DataFrame | None = None
    checkpoints: pl.DataFrame | None = None


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


def analyze_events(events: pl.DataFrame, options: AnalysisOptions | None = None, engine: str = "local",
                   jobs: int = 1, address: str | None = None) -> Analysis:
    """The analysis of ``events``. Job assignment is global (scheduler and kernel records are
    attributed across files); each job's reconstruction after it reads only that job's rows, so
    with ``engine="ray"`` groups of jobs are reconstructed as Ray tasks (``jobs`` slots, on the
    cluster at ``address`` or a local one). The tables are the same whichever the engine.

    The local engine reconstructs in this process whatever ``jobs``: worker processes were
    measured slower (the copy of the events to them costs more than the stages they share)."""
    opts = options or AnalysisOptions()
    prepared = prepare_jobs(events)
    if engine == "local":  # no partition, no copy
        parts = [reconstruct_jobs(JobGroup(prepared.events, prepared.jobs, opts))]
    else:
        groups = job_groups(prepared, opts, GROUPS_PER_SLOT * max(1, jobs))
        parts = list(map_ordered(reconstruct_jobs, groups, engine, jobs, address))
    return combine(prepared, parts, opts)


@dataclass
class PreparedEvents:
    """The events after the global steps: the stages' columns of the analysed jobs, each record
    with its job (a code: the rank of its name) and attempt."""

    events: pl.DataFrame
    jobs: pl.DataFrame  # the analysed jobs, in code order (job, path, job_ids, identity)
    names: pl.Series  # code -> job name, over every job found
    dropped: list[int]  # other users' jobs of a shared scheduler log
    untimed: list[int]  # jobs given a relative clock


@dataclass(frozen=True)
class JobGroup:
    """Jobs reconstructed together (one task): their events and rows of the jobs table."""

    events: pl.DataFrame
    jobs: pl.DataFrame
    options: AnalysisOptions


@dataclass
class PartialAnalysis:
    """A job group's tables, jobs as codes and times in µs, in job order: the seconds are left to
    ``combine`` (see ``_divided``); its clipped windows and incidents, for the notes."""

    attempts: pl.DataFrame
    incidents: pl.DataFrame  # without lost_time_s (and downtime_s as divided on this part)
    lost: pl.DataFrame  # rework µs per (job, attempt) with lost steps (``_lt_us``)
    slow_periods: pl.DataFrame  # without factor, median_step_time_s and slowdown_s
    slow_cost: pl.DataFrame  # slowdown µs per (job, period) (``_sd_us``)
    tor: pl.DataFrame  # buckets in µs
    resources: pl.DataFrame
    progress: pl.DataFrame
    checkpoints: pl.DataFrame
    clipped_windows: list[int]  # jobs
    clipped_incidents: list[tuple[int, int]]  # (job, incident)


# Job groups per task slot with a partition: enough to even out unequal jobs, few enough that a
# task's fixed cost stays small.
GROUPS_PER_SLOT = 3


def prepare_jobs(events: pl.DataFrame) -> PreparedEvents:
    """The global steps: jobs and attempts assigned over all files, other users' jobs dropped."""
    ev, pods = _prepared(events)
    ev = attribute_nodes(ev, pods)  # host from the file's path, pod -> node
    # From here on a job is its rank among the sorted names (an integer sorts, joins and groups
    # several times faster than a string, in the same order), and the table holds only the
    # columns the stages read: the message text, half its bytes, is reduced to two flags.
    ev, jobs = assign_jobs(ev, coded=True)
    names = jobs["job"]
    jobs = jobs.with_columns(pl.int_range(pl.len(), dtype=JOB_CODE).alias("job"))
    jobs, dropped = _other_users(ev, jobs)
    # The other users' jobs leave with the attempts' reordering of the events (one copy of the
    # table instead of two); the steps before it pass them over. A file may hold several jobs'
    # records (a scheduler log), and these steps read along files: they stay global.
    keep = jobs["job"] if dropped else None
    ev = _slim(ev)
    ev, untimed = relative_times(ev, keep)
    ev = place_untimed_errors(ev, keep).drop("_fc")
    ev = assign_attempts(ev, keep)
    return PreparedEvents(ev, jobs, names, dropped, untimed)


def _other_users(ev: pl.DataFrame, jobs: pl.DataFrame) -> tuple[pl.DataFrame, list[int]]:
    """(the jobs analysed, the dropped): jobs with no training record, in a directory where
    another job trained, are other users' jobs of a shared scheduler log, listed in notes."""
    trained = ev.select("job", "kind").filter(pl.col("kind").is_in(("step", "init", "ckpt_load")))
    trained = trained.select("job").unique()
    jobs = jobs.with_columns(pl.col("job").is_in(trained["job"].implode()).alias("_trained"))
    jobs = jobs.with_columns(pl.col("_trained").any().over("path").alias("_dir_trained"))
    dropped = jobs.filter(~pl.col("_trained") & pl.col("_dir_trained"))
    jobs = jobs.filter(pl.col("_trained") | ~pl.col("_dir_trained")).drop("_trained", "_dir_trained")
    return jobs, dropped["job"].to_list()


def job_groups(prepared: PreparedEvents, options: AnalysisOptions, n: int) -> list[JobGroup]:
    """At most ``n`` groups of consecutive jobs (in code order, so their tables concatenate in
    job order) with about equal numbers of events; a job is never split."""
    jobs, ev = prepared.jobs, prepared.events
    if jobs.height == 0:
        return [JobGroup(ev, jobs, options)]
    sizes = jobs.select("job").join(ev.group_by("job").len(), on="job", how="left").fill_null(0)
    total = max(1, int(sizes["len"].sum()))
    # A job's group is where its first event falls among n equal shares of the events.
    before = sizes["len"].cum_sum() - sizes["len"]
    group = (before * min(n, jobs.height) // total).cast(pl.Int64)
    lookup = pl.Series(values=[-1] * prepared.names.len(), dtype=pl.Int64).scatter(sizes["job"], group)
    frames = ev.with_columns(lookup.gather(ev["job"]).alias("_grp")).partition_by(
        "_grp", maintain_order=True, include_key=False, as_dict=True)
    rows = jobs.with_columns(group.alias("_grp")).partition_by("_grp", maintain_order=True, include_key=False,
                                                               as_dict=True)
    return [JobGroup(frames.get(key, ev.clear()), part, options) for key, part in rows.items()]


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
    """Frames concatenated, each column materialized as the whole table's are (``_divided``). A
    group with no rows of a table may type its columns otherwise (a literal's type, or null) or
    not build it at all (no columns): such frames are left out."""
    full = [f for f in frames if f.height]
    if len(full) == 1:
        return full[0]
    if not full:
        return next((f for f in frames if f.width), frames[0])
    joined = pl.concat(full, how="vertical_relaxed")
    return pl.DataFrame([joined.get_column(c) for c in joined.columns])


def _divided(x: pl.Expr, by: float, rows: int) -> pl.Expr:
    """``x / by`` as polars divides a computed column of ``rows`` rows by a scalar: exactly on one
    row, through the scalar's reciprocal on more. (A one-row column, or rows of equal values
    concatenated, may be held as a scalar, divided once and exactly.) A group's part may have one
    row where the whole table has several: such divisions are made here, on the whole tables."""
    return x / by if rows == 1 else x * (1.0 / by)


def reconstruct_jobs(group: JobGroup) -> PartialAnalysis:
    """Attempts, step placement, slow periods, incidents and the ledger of a group of jobs. Every
    stage relates rows of one job only (grouped or joined by job), so any grouping of the jobs
    gives the same rows."""
    ev, opts = group.events, group.options
    resources = attempt_resources(ev)
    p = _step_progress(ev, opts)
    periods, healthy, jitter = _slow_periods(p.rows0, opts)
    ideal = _ideal_steps(healthy, jitter, p.prelim, group.jobs, opts)
    ideal_us = ideal.select("job", "ideal_us")
    rows, att = _placed_steps(p.rows, p.att, ideal_us)
    window, clipped_windows = _job_windows(att, ev)
    inc = _incidents(att, ev, p.steps, ideal_us, window, opts)
    buckets, rows = ledger.compute(window, rows, ideal_us, p.ckpt, p.evals, inc, jitter)
    inc, clipped_incidents = _clipped_incidents(inc, window)
    sp, slow_cost = _slow_periods_found(periods, ev, ideal_us, rows)
    return PartialAnalysis(
        attempts=_attempts(att, rows),
        incidents=inc,
        lost=_lost_time(rows) if inc.height else pl.DataFrame(),
        slow_periods=sp,
        slow_cost=slow_cost,
        tor=_tor_rows(buckets, group.jobs, ideal, att, inc),
        resources=resources,
        progress=rows.select("job", pl.col("attempt_idx").cast(pl.Int32).alias("attempt"), "step", "start", "end",
                             "n", "n_lost", "d_us"),
        checkpoints=p.ckpt.select("job", "start", "end"),
        clipped_windows=clipped_windows,
        clipped_incidents=clipped_incidents,
    )


@dataclass
class _Progress:
    """Step rows and attempts before the ideal step time is known."""

    steps: pl.DataFrame  # the step records
    att: pl.DataFrame  # the attempts
    rows: pl.DataFrame  # step intervals
    prelim: pl.DataFrame  # per job: the median of all step durations (ideal_us)
    rows0: pl.DataFrame  # rows placed with it, flagged ``healthy``
    ckpt: pl.DataFrame  # blocking checkpoint saves
    evals: pl.DataFrame  # evaluations


def _step_progress(ev: pl.DataFrame, opts: AnalysisOptions) -> _Progress:
    steps = progress.step_rows(ev)
    att = progress.attempt_table(ev, steps)
    rows = progress.step_intervals(steps, att)
    prelim = rows.filter(pl.col("d_us").is_not_null()).group_by("job").agg(
        pl.col("d_us").median().round().cast(pl.Int64).alias("ideal_us")
    )
    rows0 = progress.place_steps(rows, att, prelim)
    ckpt = progress.checkpoint_intervals(ev, rows0, prelim)
    evals = progress.eval_intervals(ev, rows0, ckpt)
    blocked = pl.concat([ckpt.select("job", "start", "end"), evals.select("job", "start", "end")])
    blocked = progress.union_intervals(blocked) if blocked.height else blocked
    rows0 = _healthy(rows0, att, blocked, opts.warmup_steps)
    return _Progress(steps, att, rows, prelim, rows0, ckpt, evals)


def _healthy(rows0: pl.DataFrame, att: pl.DataFrame, blocked: pl.DataFrame, warmup_steps: int) -> pl.DataFrame:
    """Flag ``healthy`` the rows that measure a step: a duration, not blocked by a save or an
    evaluation, past warm-up (the row's first step among the first ``warmup_steps`` after the
    resume point) and not the attempt's first row."""
    rows0 = attach(rows0, att.select("job", "attempt_idx", pl.col("resumed_from").alias("_rf")), ["job", "attempt_idx"])
    first_rows = pl.col("prev_step") - pl.col("_rf").fill_null(pl.col("prev_step")) < warmup_steps
    att_key = ("job", "attempt_idx")
    by_att = run_id(*att_key) if in_key_order(rows0, *att_key, strict=False) else list(att_key)
    rank_in_att = pl.col("step").rank("ordinal").over(by_att)
    return rows0.with_columns(
        progress.overlaps(rows0, blocked).alias("_blocked"),
    ).with_columns(
        (
            pl.col("d_us").is_not_null()
            & pl.col("rep_us").is_not_null().or_(pl.col("prev_end").is_not_null())
            & ~pl.col("_blocked")
            & ~first_rows
            & (rank_in_att > 1)
        ).alias("healthy")
    ).drop("_rf")


def _slow_periods(rows0: pl.DataFrame, opts: AnalysisOptions) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(slow periods, the healthy rows outside them, each job's step jitter): periods found
    against the healthy steps' median, then again against the median without them."""
    base = rows0.filter(pl.col("healthy")).group_by("job").agg(pl.col("d_us").median().alias("base_us"))
    periods = slowness.detect(rows0, base, opts.slow_threshold, opts.slow_min_steps)
    rows0 = rows0.with_columns(slowness.in_periods(rows0, periods).alias("_slow"))
    base = (
        rows0.filter(pl.col("healthy") & ~pl.col("_slow")).group_by("job").agg(pl.col("d_us").median().alias("base_us"))
    )
    periods = slowness.detect(rows0, base, opts.slow_threshold, opts.slow_min_steps)
    rows0 = rows0.with_columns(slowness.in_periods(rows0, periods).alias("_slow"))
    healthy = rows0.filter(pl.col("healthy") & ~pl.col("_slow"))
    # Per-step jitter of the job (relative sd): rows that average n steps vary sqrt(n) times less.
    return periods, healthy, ledger.step_jitter(healthy)


def _ideal_steps(healthy: pl.DataFrame, jitter: pl.DataFrame, prelim: pl.DataFrame, jobs: pl.DataFrame,
                 opts: AnalysisOptions) -> pl.DataFrame:
    """Each job's ideal step time (``ideal_us``) and where it comes from (``ideal_step_source``)."""
    # The median of averages over n steps is the steps' mean, exp(sigma^2 (1 - 1/n) / 2) above
    # their median: undo that so t* is the median step time whatever the logging interval.
    ideal = (
        attach(healthy, jitter, "job")
        .with_columns(
            (
                pl.col("d_us")
                * (-(pl.col("sigma").fill_null(0.0) ** 2) * (1.0 - 1.0 / pl.col("n")) / 2.0).exp()
            ).alias("_d")
        )
        .group_by("job")
        .agg(pl.col("_d").median().round().cast(pl.Int64).alias("ideal_us"), pl.len().alias("_n"))
    )
    user = opts.user_ideal_s()
    ideal = jobs.select("job").join(ideal, on="job", how="left").join(
        prelim.rename({"ideal_us": "_p"}), on="job", how="left")
    if user is not None:
        return ideal.with_columns(
            pl.lit(round(user * US), pl.Int64).alias("ideal_us"), pl.lit("user").alias("ideal_step_source")
        )
    return ideal.with_columns(
        pl.when(pl.col("ideal_us").is_not_null())
        .then(pl.format("median of {} healthy steps", pl.col("_n")))
        .when(pl.col("_p").is_not_null())
        .then(pl.lit("median of all steps (no healthy steps)"))
        .otherwise(pl.lit("none (no steps)"))
        .alias("ideal_step_source"),
        pl.coalesce("ideal_us", "_p").alias("ideal_us"),
    )


def _placed_steps(rows: pl.DataFrame, att: pl.DataFrame, ideal_us: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(step rows placed with the ideal filling unknown durations, lost steps marked; the
    attempts with the start of their first step)."""
    rows = progress.place_steps(rows, att, ideal_us)
    rows = progress.mark_lost(rows, att)
    by, ids = group_keys(rows, "job", "attempt_idx")  # (rows in (job, attempt) order: slices)
    first_start = rows.group_by(*by).agg(*ids, pl.col("start").min().alias("t_first_step_start")).drop(
        "_g", strict=False)
    att = att.join(first_start, on=["job", "attempt_idx"], how="left")
    # An attempt that never logged a step started training (if at all) when its set-up finished.
    att = att.with_columns(
        pl.coalesce(
            "t_first_step_start",
            pl.when(pl.col("t_init_done") <= pl.col("t_end")).then(pl.max_horizontal("t_init_done", "t_start")),
        ).alias("t_first_step_start")
    )
    return rows, att


def _job_windows(att: pl.DataFrame, ev: pl.DataFrame) -> tuple[pl.DataFrame, list[int]]:
    """Each job's observed window (T0, T1: first attempt's start, last attempt's end), and the
    jobs whose window was clipped."""
    window = att.group_by("job").agg(pl.col("t_start").min().alias("T0"), pl.col("t_end").max().alias("T1"))
    window = window.with_columns(pl.max_horizontal("T1", "T0").alias("T1"))
    # Guard: no time of the analysis may lie outside the job's own records (a sentinel leaking
    # into an end once put an incident in the year 148108).
    span = ev.select("job", "t").filter(pl.col("t").is_not_null()).group_by("job").agg(
        pl.col("t").min().alias("_e0"), pl.col("t").max().alias("_e1")
    )
    window = window.join(span, on="job", how="left")
    bad = window.filter((pl.col("T0") < pl.col("_e0")) | (pl.col("T1") > pl.col("_e1"))).sort("job")
    window = window.with_columns(
        pl.col("T0").clip(pl.col("_e0"), pl.col("_e1")).alias("T0"),
        pl.col("T1").clip(pl.col("_e0"), pl.col("_e1")).alias("T1"),
    ).drop("_e0", "_e1")
    return window, bad["job"].to_list()


def _incidents(att: pl.DataFrame, ev: pl.DataFrame, steps: pl.DataFrame, ideal_us: pl.DataFrame,
               window: pl.DataFrame, opts: AnalysisOptions) -> pl.DataFrame:
    """The incidents, with the next attempt's checkpoint load (the recovery split needs it)."""
    ideal_map = {k: v for k, v in ideal_us.iter_rows() if v is not None}
    end_map = dict(window.select("job", "T1").iter_rows())
    inc = inc_mod.build_incidents(
        att,
        ev,
        steps,
        ideal_map,
        end_map,
        pre_s=opts.incident_pre_s,
        post_s=opts.incident_post_s,
        hang_stall_factor=opts.hang_stall_factor,
        hang_min_stall_s=opts.hang_min_stall_s,
    )
    load = att.select(
        "job",
        (pl.col("attempt_idx") - 1).cast(pl.Int32).alias("attempt"),
        (pl.col("t_ckpt_load") - pl.col("ckpt_load_us")).alias("t_load_start"),
        pl.when(pl.col("ckpt_load_us").is_not_null()).then(pl.col("t_ckpt_load")).alias("t_load_end"),
    )
    return inc.join(load, on=["job", "attempt"], how="left")


_PHASES = ["t_last_progress", "t_first_error", "t_detected", "t_restart", "t_resumed", "t_caught_up"]


def _clipped_incidents(inc: pl.DataFrame, window: pl.DataFrame) -> tuple[pl.DataFrame, list[tuple[int, int]]]:
    """The incidents with their phases clipped to the job's window, and the (job, incident) clipped."""
    if not inc.height:
        return inc, []
    inc = inc.join(window, on="job", how="left")
    out_of = inc.filter(pl.any_horizontal([(pl.col(c) < pl.col("T0")) | (pl.col(c) > pl.col("T1")) for c in _PHASES]))
    inc = inc.with_columns([pl.col(c).clip(pl.col("T0"), pl.col("T1")) for c in _PHASES]).drop("T0", "T1")
    return inc, list(out_of.select("job", "incident").iter_rows())


def _lost_time(rows: pl.DataFrame) -> pl.DataFrame:
    """Rework µs of the rows each attempt's rollback discarded (an incident's lost time)."""
    return (
        rows.filter(pl.col("n_lost") > 0)
        .group_by("job", pl.col("attempt_idx").cast(pl.Int32).alias("attempt"))
        .agg(pl.col("rework_us").sum().alias("_lt_us"))
    )


def _incidents_table(inc: pl.DataFrame, lost: pl.DataFrame, names: pl.Series) -> pl.DataFrame:
    """The incidents table, with lost time and downtime in seconds."""
    if inc.height:
        lost = lost.select("job", "attempt", _divided(pl.col("_lt_us"), US, lost.height).alias("_lt"))
        inc = inc.join(lost, on=["job", "attempt"], how="left").with_columns(
            pl.when(pl.col("lost_steps") > 0).then(pl.col("_lt").fill_null(0.0)).otherwise(0.0).alias("lost_time_s"),
            # build_incidents divides a group's part (``_divided``): again on the whole table, from
            # its µs (recovered exactly by rounding: tens of years would be needed to lose 0.5 µs).
            _divided((pl.col("downtime_s") * US).round(), US, inc.height).alias("downtime_s"),
        ).drop("_lt")
    return _conform(_to_dt(_named(inc, names), _PHASES), INCIDENTS_SCHEMA)


def _attempts(att: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    by, ids = group_keys(rows, "job", "attempt_idx")
    lost_per_att = rows.group_by(*by).agg(*ids, pl.col("n_lost").sum().alias("steps_lost")).drop("_g", strict=False)
    return (
        att.join(lost_per_att, on=["job", "attempt_idx"], how="left")
        .with_columns(pl.col("steps_lost").fill_null(0), pl.col("attempt_idx").alias("attempt"))
        .rename({"n_step_rows": "n_step_records"})
    )


def _slow_periods_found(periods: pl.DataFrame, ev: pl.DataFrame, ideal_us: pl.DataFrame,
                        rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(slow periods with the final ideal and their suspects, numbered per job; slowdown µs per
    period)."""
    sp = slowness.suspects(periods, ev) if periods.height else periods
    if not sp.height:
        return sp, pl.DataFrame()
    sp = (
        sp.join(ideal_us, on="job", how="left")
        .with_columns(pl.col("attempt_idx").alias("attempt"))
        .sort("job", "start")
        .with_columns(pl.int_range(pl.len()).over("job").alias("period"))
    )
    # Each step row in the (disjoint) period of its attempt: no period x row pairs.
    slow_cost = (
        in_windows(
            sp.select("job", "attempt_idx", "period", (pl.col("first_prev_step") + 1).alias("_lo"),
                      pl.col("last_step").alias("_hi")),
            rows.select("job", "attempt_idx", "step", "slowdown_us"), key="period", by=("job", "attempt_idx"),
            on="step",
        )
        .group_by("job", "period")
        .agg(pl.col("slowdown_us").sum().alias("_sd_us"))
    )
    return sp, slow_cost


def _slow_periods_table(sp: pl.DataFrame, slow_cost: pl.DataFrame, names: pl.Series,
                        user_ideal_us: int | None) -> pl.DataFrame:
    if not sp.height:
        return pl.DataFrame(schema=SLOW_PERIODS_SCHEMA)
    # The user's ideal is a literal (a scalar), anyone else's a column: divided elementwise.
    by_ideal = pl.col("med_us") / pl.col("ideal_us") if user_ideal_us is None else _divided(
        pl.col("med_us"), user_ideal_us, sp.height)
    sp = sp.with_columns(by_ideal.alias("factor"),
                         _divided(pl.col("med_us"), US, sp.height).alias("median_step_time_s"))
    slow_cost = slow_cost.select("job", "period", _divided(pl.col("_sd_us"), US, slow_cost.height).alias("slowdown_s"))
    sp = sp.join(slow_cost, on=["job", "period"], how="left")
    return _conform(_to_dt(_named(sp, names), ["start", "end"]), SLOW_PERIODS_SCHEMA)


def _tor_rows(buckets: pl.DataFrame, jobs: pl.DataFrame, ideal: pl.DataFrame, att: pl.DataFrame,
              inc: pl.DataFrame) -> pl.DataFrame:
    """One row per job: the ledger's buckets (µs), what the job was and how it ended."""
    last = att.sort("job", "attempt_idx").group_by("job").agg(pl.col("state").last(), pl.len().alias("n_attempts"))
    tor = buckets.join(jobs, on="job", how="left").join(ideal, on="job", how="left").join(last, on="job", how="left")
    if not inc.height:
        return tor.with_columns(pl.lit(0, pl.UInt32).alias("n_incidents"))
    return tor.join(inc.group_by("job").agg(pl.len().alias("n_incidents")), on="job", how="left")


def _tor_table(tor: pl.DataFrame, names: pl.Series, user_ideal_us: int | None) -> pl.DataFrame:
    """The TOR table: buckets in seconds, TOR = useful / observed time."""
    n = tor.height
    tor = tor.with_columns(_divided(pl.col(f"{b}_us"), US, n).alias(f"{b}_s")
                           for b in ("t_obs", *ledger.BUCKETS, *ledger.RECOVERY_PARTS, "eval"))
    # The user's ideal is one literal (a scalar), divided once and exactly whatever the height.
    ideal = _divided(pl.col("ideal_us"), US, n) if user_ideal_us is None else pl.lit(user_ideal_us / US)
    tor = tor.with_columns(
        pl.when(pl.col("t_obs_us") > 0).then(pl.col("useful_us") / pl.col("t_obs_us")).alias("tor"),
        ideal.alias("ideal_step_time_s"),
        progress.is_clean(pl.col("state")).fill_null(False).alias("ended_cleanly"),
        pl.col("n_incidents").fill_null(0),
        pl.col("T0").alias("t_start"),
        pl.col("T1").alias("t_end"),
    )
    return _conform(_to_dt(_named(tor, names), ["t_start", "t_end"]), TOR_SCHEMA).sort("job")


def _prepared(events: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, str]]:
    """The columns the stages read, with the message text reduced to what they read of it (the
    job name it states, the incident flags and the pod -> node bindings), in one chunk per column.

    A table read from parquet comes in chunks (row groups); a column added to it comes in one, and
    each filter or gather of a frame whose columns are chunked differently first copies every
    column it touches into one chunk. Copying the slim columns once here is the cheaper way.
    """
    pods = pod_bindings(events)
    # The vocabulary columns are cast before the copy into one chunk (a byte a record to copy
    # instead of a string view), and ``ts`` is read no further than ``t`` (with_time's columns).
    cols = [pl.col(c).cast(pl.Enum(_CODED[c]), strict=False) if c in _CODED else c
            for c in events.columns if c in _STAGE_COLUMNS or c == "job_id"]
    ev = events.select(*cols, job_name().alias("_name"), *inc_mod.flag_exprs(), pl.col("ts").dt.epoch("us").alias("t"),
                       pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"))
    # A word outside the vocabulary (a plugin's own) became null: the enum takes it too.
    ev = ev.with_columns(coded_words(events[c], words) for c, words in _CODED.items()
                         if c in ev.columns and ev[c].null_count() > events[c].null_count())
    return ev.rechunk(), pods


# String columns of a fixed vocabulary (plugins may add words) that the stages compare.
_CODED = {"kind": KINDS, "source": SOURCES, "severity": SEVERITIES}


def coded_words(col: pl.Series, words: tuple[str, ...]) -> pl.Series:
    """``col`` as an enum of ``words`` (then any other word met, sorted): one byte a record,
    compared and reordered as an integer while ``== "step"`` and ``is_in(...)`` read as before.
    (Nulls stay null; a ``fill_null`` with a word outside the enum would not fill.)"""
    coded = col.cast(pl.Enum(words), strict=False)
    if coded.null_count() > col.null_count():
        extra = sorted(set(col.drop_nulls().unique().to_list()) - set(words))
        coded = col.cast(pl.Enum([*words, *extra]))
    return coded


def _slim(ev: pl.DataFrame) -> pl.DataFrame:
    """The events with only the stages' columns (and the incident flags)."""
    ev = inc_mod.with_flags(ev)
    return ev.select([c for c in ev.columns if c in _STAGE_COLUMNS]).with_columns(pl.col("job").cast(JOB_CODE))


def _named(df: pl.DataFrame, names: pl.Series) -> pl.DataFrame:
    """``job`` codes back to the job names."""
    return df.with_columns(names.gather(df["job"]).alias("job"))


def place_untimed_errors(ev: pl.DataFrame, keep: pl.Series | None = None) -> pl.DataFrame:
    """Move an error or warning whose time was inferred past a restart it cannot precede.

    A record without a timestamp of its own (a traceback line) is placed at the previous timed
    line of its file, but it lies anywhere up to the next timed line. When the job (re)started
    in between — one pod log spanning several container restarts, whose workers print no timed
    line of their own — the error belongs to the later attempt and is printed as its processes
    die: it takes the next timed line's time. Only the events of the jobs ``keep`` (None: all)
    count.
    """
    if "ts_inferred" not in ev.columns or not ev["ts_inferred"].fill_null(False).any():
        return ev
    # Files as integers (any order will do: the fill stays within a file), so the sort is numeric;
    # assign_jobs numbers them (``_fc``).
    file = "_fc" if "_fc" in ev.columns else "file"
    order = ev.select("_row", "job", file, "line", "t", "ts_inferred", "kind").filter(
        pl.col("t").is_not_null() & (pl.lit(True) if keep is None else pl.col("job").is_in(keep.implode())))
    if file == "file":
        files = order.select(pl.col("file").unique()).with_row_index("_fc")
        order = order.join(files, on="file", how="left", nulls_equal=True)
    packed = packed_key(order, ["_fc", "line", "_row"])  # unique (row ids): the same order, on one column
    if packed is None:
        order = order.sort("_fc", "line", "_row")
    else:  # records come in file and line order, files numbered as they come: often sorted already
        order = order.with_columns(packed.alias("_k"))
        order = order if order["_k"].is_sorted() else order.sort("_k")
    order = (
        order.with_columns(pl.col("_fc").set_sorted())  # windows over files take slices
        .with_columns(pl.when(~pl.col("ts_inferred").fill_null(False)).then(pl.col("t")).alias("_hi"))
        .with_columns(pl.col("_hi").backward_fill().over("_fc").alias("_hi"))
    )
    cand = order.filter(
        pl.col("ts_inferred").fill_null(False)
        & pl.col("kind").is_in(("error", "warning"))
        & (pl.col("_hi") > pl.col("t"))
    )
    if cand.height == 0:
        return ev
    starts = (
        ev.filter(pl.col("kind").is_in(("job_start", "init", "restart")) & ~pl.col("ts_inferred").fill_null(False))
        .select("job", pl.col("t").alias("_s"))
        .drop_nulls()
        .unique()
        .sort("_s")
    )
    if starts.height == 0:
        return ev
    hit = (
        cand.sort("t")
        .join_asof(
            starts,
            left_on="t",
            right_on="_s",
            by="job",
            strategy="forward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .filter(pl.col("_s").is_not_null() & (pl.col("_s") <= pl.col("_hi")))
        .select("_row", "_hi")
    )
    if hit.height == 0:
        return ev
    hi = attach(ev.select("_row"), hit, "_row")["_hi"]
    ev = ev.with_columns(pl.coalesce(hi, "t").alias("t"))
    return ev.with_columns(pl.col("t").cast(UTC_US).alias("ts")) if "ts" in ev.columns else ev


def relative_times(ev: pl.DataFrame, keep: pl.Series | None = None) -> tuple[pl.DataFrame, list[Any]]:
    """Give a job whose records carry no timestamp at all (a pasted excerpt of a trainer log) a
    relative clock: in file and line order, each step row ends ``n × step_time`` after the previous
    one (``n`` the steps since the previous row, the usual logging interval for the first row),
    and any other record sits at the end of the last step before it, from the epoch on. Returns
    (events, the jobs so rebuilt); jobs with any timestamp, or not among ``keep`` (None: all), are
    left alone."""
    t = pl.col("t")
    bare = ev.group_by("job").agg(t.is_null().all().alias("_bare"), (pl.col("kind") == "step").any().alias("_steps"))
    if keep is not None:
        bare = bare.filter(pl.col("job").is_in(keep.implode()))
    jobs = sorted(bare.filter(pl.col("_bare"))["job"].to_list())  # in job order: the notes' order
    if not jobs:
        return ev, []
    part = ev.filter(pl.col("job").is_in(jobs)).sort("job", "file", "line", "_row")
    is_step = (pl.col("kind") == "step") & pl.col("step").is_not_null()
    steps = part.filter(is_step).with_columns((pl.col("step") - pl.col("step").shift(1).over("job")).alias("_n"))
    # The logging interval: the most common gap between rows when it occurs twice; a larger gap
    # is an elision of the excerpt and counts as one interval (the ledger counts the steps).
    interval = (
        steps.filter(pl.col("_n") > 0)
        .group_by("job", "_n")
        .len()
        .sort("job", "len", "_n", descending=[False, True, False])
        .group_by("job", maintain_order=True)
        .first()
        .select("job", pl.when(pl.col("len") >= 2).then(pl.col("_n")).alias("_li"))
    )
    smallest = (
        steps.filter(pl.col("_n") > 0).group_by("job").agg(pl.col("_n").min().alias("_min"), pl.len().alias("_k"))
    )
    interval = interval.join(smallest, on="job", how="full", coalesce=True).select(
        "job", pl.coalesce("_li", pl.when(pl.col("_k") >= 2).then(pl.col("_min")), pl.lit(1)).alias("_li")
    )
    steps = (
        steps.join(interval, on="job", how="left")
        .with_columns(pl.col("_li").fill_null(1))
        .with_columns(
            (
                pl.when((pl.col("_n") > 0) & (pl.col("_n") <= 2 * pl.col("_li")))
                .then(pl.col("_n"))
                .otherwise(pl.col("_li"))
                * pl.col("step_time_s").fill_null(0.0)
                * US
            )
            .round()
            .cast(pl.Int64)
            .alias("_dt")
        )
    )
    part = part.join(steps.select("_row", "_dt"), on="_row", how="left").with_columns(
        pl.col("_dt").fill_null(0).cum_sum().over("job").alias("t")
    )
    part = part.with_columns(pl.col("t").cast(UTC_US).alias("ts"), pl.lit(True).alias("ts_inferred")).drop("_dt")
    # The excerpt starts where its first step started: a start marker there opens the attempt
    # (when the steps state their times at all).
    first = (
        part.filter(is_step & pl.col("step_time_s").is_not_null())
        .group_by("job", maintain_order=True)
        .agg(pl.all().first())
        .with_columns(
            pl.lit("init").cast(part.schema["kind"]).alias("kind"),
            pl.lit(0, pl.Int64).alias("t"),
            pl.lit(0, pl.Int64).cast(UTC_US).alias("ts"),
            pl.lit(None, pl.Int64).alias("step"),
            pl.lit(None, pl.Float64).alias("step_time_s"),
            pl.lit(None, pl.String).alias("failure_class"),
            pl.lit("(start of the excerpt)").alias("message"),
            *[pl.lit(False).alias(c) for c in inc_mod.FLAG_COLUMNS],
            pl.lit(0, pl.Int64).alias("line"),
        )
        .with_columns((pl.int_range(pl.len(), dtype=pl.Int64) + ev["_row"].cast(pl.Int64).max() + 1).alias("_row"))
    )
    part = pl.concat([first.select(part.columns), part], how="vertical")
    rest = ev.filter(~pl.col("job").is_in(jobs))
    return pl.concat([rest, part.select(rest.columns)], how="vertical"), jobs


def events_frame(records: list[dict], base: str | None = None) -> pl.DataFrame:
    """Build an EVENT_SCHEMA frame from a few dicts (tests, examples, plugins' fixtures).

    ``ts`` may be a datetime or seconds (int/float) after ``base`` (ISO text, default
    2024-01-01T00:00:00Z). Missing columns are null; ``ts_inferred`` defaults to False;
    ``line`` defaults to the record's position (1-based).
    """
    from datetime import datetime, timedelta

    from toranalyze.schema import EVENT_SCHEMA

    t0 = datetime.fromisoformat(base or "2024-01-01T00:00:00+00:00")
    if t0.tzinfo is None:
        t0 = t0.replace(tzinfo=UTC)
    out = []
    for i, r in enumerate(records, 1):
        row: dict[str, Any] = dict.fromkeys(EVENT_SCHEMA)
        row.update({"ts_inferred": False, "line": i, "severity": "info", "message": ""})
        row.update(r)
        ts = row["ts"]
        if isinstance(ts, int | float):
            row["ts"] = t0 + timedelta(seconds=ts)
        out.append(row)
    return pl.DataFrame(out, schema=EVENT_SCHEMA)
