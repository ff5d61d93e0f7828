"""The pure analysis entry point: events → attempts, incidents, slow periods and the TOR ledger.

``analyze_events(events, options)`` takes the classified event table (``EVENT_SCHEMA``) and
returns an :class:`Analysis` holding four frames whose schemas are the constants
``ATTEMPTS_SCHEMA``, ``INCIDENTS_SCHEMA``, ``SLOW_PERIODS_SCHEMA`` and ``TOR_SCHEMA``
(documented in docs/tables.md). No I/O, no printing.

It runs in three steps: ``prepare_jobs`` (global: jobs and attempts assigned over all files;
reconstruct/prepare.py), ``reconstruct_jobs`` on groups of jobs (here: each job's stages read that
job's rows only; with the Ray engine the groups are Ray tasks) and ``combine`` (the groups' tables
in job order, the seconds computed on the whole tables, the notes; reconstruct/partition.py).
The options and the result types are in reconstruct/api.py; every name stays importable from here.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import polars as pl

from toranalyze.ingest.engine import map_ordered
from toranalyze.reconstruct import incidents as inc_mod
from toranalyze.reconstruct import ledger, progress, slowness
from toranalyze.reconstruct import stages as c
from toranalyze.reconstruct.api import US, Analysis, AnalysisOptions
from toranalyze.reconstruct.intervals import agg_by, attach, group_keys, in_key_order, in_windows, run_id
from toranalyze.reconstruct.partition import (
    GROUPS_PER_SLOT,
    PHASES,
    JobGroup,
    PartialAnalysis,
    combine,
    job_groups,
)
from toranalyze.reconstruct.prepare import (
    JOB_CODE,
    PreparedEvents,
    coded_words,
    place_untimed_errors,
    prepare_jobs,
    relative_times,
)
from toranalyze.reconstruct.resources import attempt_resources
from toranalyze.reconstruct.tables import (
    ATTEMPTS_SCHEMA,
    INCIDENTS_SCHEMA,
    RESOURCES_SCHEMA,
    SLOW_PERIODS_SCHEMA,
    TOR_SCHEMA,
)

# The public names, and those of the modules the analysis was split into (its steps, for tests
# and benchmarks that run them one by one).
__all__ = [
    "ATTEMPTS_SCHEMA",
    "INCIDENTS_SCHEMA",
    "SLOW_PERIODS_SCHEMA",
    "TOR_SCHEMA",
    "Analysis",
    "AnalysisOptions",
    "analyze_events",
    "events_frame",
    "GROUPS_PER_SLOT",
    "JOB_CODE",
    "RESOURCES_SCHEMA",
    "JobGroup",
    "PartialAnalysis",
    "PreparedEvents",
    "coded_words",
    "combine",
    "job_groups",
    "place_untimed_errors",
    "prepare_jobs",
    "reconstruct_jobs",
    "relative_times",
]


def analyze_events(events: pl.DataFrame, options: AnalysisOptions | None = None, engine: str = "local",
                   jobs: int = 1, address: str | None = None) -> Analysis:
    """The analysis of ``events``. Job assignment is global (scheduler and kernel records are
    attributed across files); each job's reconstruction after it reads only that job's rows, so
    with ``engine="ray"`` groups of jobs are reconstructed as Ray tasks (``jobs`` slots, on the
    cluster at ``address`` or a local one). The tables are the same whichever the engine.

    The local engine reconstructs in this process: with ``jobs`` > 1, groups of jobs on as many
    threads (most stages run on one core each, and polars releases the interpreter while it
    works); worker processes were measured slower (the copy of the events to them costs more
    than the stages they share)."""
    opts = options or AnalysisOptions()
    prepared = prepare_jobs(events)
    if engine == "local" and (jobs <= 1 or prepared.jobs.height < 2):  # no partition, no copy
        parts = [reconstruct_jobs(JobGroup(prepared.events, prepared.jobs, opts, prepared.file_offsets_us))]
    elif engine == "local":
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            parts = list(pool.map(reconstruct_jobs, job_groups(prepared, opts, jobs)))
    else:
        groups = job_groups(prepared, opts, GROUPS_PER_SLOT * max(1, jobs))
        parts = list(map_ordered(reconstruct_jobs, groups, engine, jobs, address))
    return _checked(combine(prepared, parts, opts))


def _checked(a: Analysis) -> Analysis:
    """The run tables, checked against their contracts (when checking is on)."""
    for table, contract in (("attempts", "AttemptsTable"), ("incidents", "IncidentsTable"),
                            ("slow_periods", "SlowPeriodsTable"), ("tor", "TorTable"),
                            ("resources", "ResourcesTable")):
        c.check(getattr(a, table), contract, f"analysis.{table}")
    return a


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
    limits = inc_mod.IncidentLimits(pre_s=opts.incident_pre_s, post_s=opts.incident_post_s,
                                    hang_stall_factor=opts.hang_stall_factor, hang_min_stall_s=opts.hang_min_stall_s,
                                    file_offsets_us=group.file_offsets_us)
    inc = _incidents(att, ev, p.steps, ideal_us, window, limits)
    buckets, rows = ledger.compute(window, rows, ideal_us, ledger.Blocking(p.ckpt, p.evals), inc, jitter)
    c.check(buckets, "LedgerBuckets", "ledger.compute")
    c.check(rows, "LedgerStepRows", "ledger.compute")
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
    steps = c.check(progress.step_rows(ev), "StepRecords", "progress.step_rows")
    att = c.check(progress.attempt_table(ev, steps), "AttemptFacts", "progress.attempt_table")
    rows = c.check(progress.step_intervals(steps, att), "StepIntervals", "progress.step_intervals")
    prelim = agg_by(rows.select("job", "d_us").filter(pl.col("d_us").is_not_null()), "job",
                    pl.col("d_us").median().round().cast(pl.Int64).alias("ideal_us"))
    rows0 = progress.place_steps(rows, att, prelim)
    ckpt = c.check(progress.checkpoint_intervals(ev, rows0, prelim), "Checkpoints", "progress.checkpoint_intervals")
    evals = c.check(progress.eval_intervals(ev, rows0, ckpt), "Evaluations", "progress.eval_intervals")
    blocked = pl.concat([ckpt.select("job", "start", "end"), evals.select("job", "start", "end")])
    blocked = progress.union_intervals(blocked) if blocked.height else blocked
    rows0 = _healthy(rows0, att, blocked, opts.warmup_steps)
    return _Progress(steps, att, rows, prelim, rows0, ckpt, evals)


@c.stage("HealthySteps")
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
    ).drop("_rf", "_blocked")


@c.stage("SlowPeriodRows", "HealthyStepTimes", "StepJitter")
def _slow_periods(rows0: pl.DataFrame, opts: AnalysisOptions) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(slow periods, the healthy rows outside them, each job's step jitter): periods found
    against the healthy steps' median, then again against the median without them."""
    # The healthy rows and their windows are read once for both searches; the medians read only
    # the columns they need (a filter of the whole step table copies every column).
    windows = slowness.healthy_windows(rows0, min_steps=opts.slow_min_steps)
    d_us = rows0.select("job", "d_us", "healthy")
    base = _median_by_job(d_us.filter(pl.col("healthy")), "base_us")
    periods = slowness.detect_in(windows, base, opts.slow_threshold, rows0.schema["job"])
    d_us = d_us.with_columns(slowness.in_periods(rows0, periods).alias("_slow"))
    base = _median_by_job(d_us.filter(pl.col("healthy") & ~pl.col("_slow")), "base_us")
    periods = slowness.detect_in(windows, base, opts.slow_threshold, rows0.schema["job"])
    slow = slowness.in_periods(rows0, periods)
    # (the columns the ideal step time and the jitter read)
    healthy = rows0.lazy().select("job", "d_us", "n", "rep_us", "healthy").with_columns(slow.alias("_slow")).filter(
        pl.col("healthy") & ~pl.col("_slow")).drop("healthy", "_slow").collect()
    # Per-step jitter of the job (relative sd): rows that average n steps vary sqrt(n) times less.
    return periods, healthy, ledger.step_jitter(healthy)


def _median_by_job(rows: pl.DataFrame, name: str) -> pl.DataFrame:
    return agg_by(rows.select("job", "d_us"), "job", pl.col("d_us").median().alias(name))


@c.stage("IdealSteps")
def _ideal_steps(healthy: pl.DataFrame, jitter: pl.DataFrame, prelim: pl.DataFrame, jobs: pl.DataFrame,
                 opts: AnalysisOptions) -> pl.DataFrame:
    """Each job's ideal step time (``ideal_us``) and where it comes from (``ideal_step_source``)."""
    # The median of averages over n steps is the steps' mean, exp(sigma^2 (1 - 1/n) / 2) above
    # their median: undo that so t* is the median step time whatever the logging interval.
    ideal = agg_by(
        attach(healthy, jitter, "job").select(
            "job",
            (
                pl.col("d_us")
                * (-(pl.col("sigma").fill_null(0.0) ** 2) * (1.0 - 1.0 / pl.col("n")) / 2.0).exp()
            ).alias("_d"),
        ),
        "job",
        pl.col("_d").median().round().cast(pl.Int64).alias("ideal_us"), pl.len().alias("_n"),
    )
    user = opts.user_ideal_s()
    ideal = jobs.select("job").join(ideal, on="job", how="left").join(
        prelim.rename({"ideal_us": "_p"}), on="job", how="left")
    if user is not None:
        return ideal.with_columns(
            pl.lit(round(user * US), pl.Int64).alias("ideal_us"), pl.lit("user").alias("ideal_step_source")
        ).drop("_n", "_p")
    return ideal.with_columns(
        pl.when(pl.col("ideal_us").is_not_null())
        .then(pl.format("median of {} healthy steps", pl.col("_n")))
        .when(pl.col("_p").is_not_null())
        .then(pl.lit("median of all steps (no healthy steps)"))
        .otherwise(pl.lit("none (no steps)"))
        .alias("ideal_step_source"),
        pl.coalesce("ideal_us", "_p").alias("ideal_us"),
    ).drop("_n", "_p")


@c.stage("PlacedStepRows", "PlacedAttempts")
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


@c.stage("JobWindows", None)
def _job_windows(att: pl.DataFrame, ev: pl.DataFrame) -> tuple[pl.DataFrame, list[int]]:
    """Each job's observed window (T0, T1: first attempt's start, last attempt's end), and the
    jobs whose window was clipped."""
    window = att.group_by("job").agg(pl.col("t_start").min().alias("T0"), pl.col("t_end").max().alias("T1"))
    window = window.with_columns(pl.max_horizontal("T1", "T0").alias("T1"))
    # Guard: no time of the analysis may lie outside the job's own records (a sentinel leaking
    # into an end once put an incident in the year 148108).
    span = agg_by(ev.select("job", "t").filter(pl.col("t").is_not_null()), "job",
                  pl.col("t").min().alias("_e0"), pl.col("t").max().alias("_e1"))
    window = window.join(span, on="job", how="left")
    bad = window.filter((pl.col("T0") < pl.col("_e0")) | (pl.col("T1") > pl.col("_e1"))).sort("job")
    window = window.with_columns(
        pl.col("T0").clip(pl.col("_e0"), pl.col("_e1")).alias("T0"),
        pl.col("T1").clip(pl.col("_e0"), pl.col("_e1")).alias("T1"),
    ).drop("_e0", "_e1")
    return window, bad["job"].to_list()


@c.stage("IncidentRows")
def _incidents(att: pl.DataFrame, ev: pl.DataFrame, steps: pl.DataFrame, ideal_us: pl.DataFrame,
               window: pl.DataFrame, limits: inc_mod.IncidentLimits) -> pl.DataFrame:
    """The incidents, with the next attempt's checkpoint load (the recovery split needs it)."""
    ideal_map = {k: v for k, v in ideal_us.iter_rows() if v is not None}
    end_map = dict(window.select("job", "T1").iter_rows())
    inc = inc_mod.build_incidents(att, ev, steps, ideal_map, end_map, limits)
    load = att.select(
        "job",
        (pl.col("attempt_idx") - 1).cast(pl.Int32).alias("attempt"),
        (pl.col("t_ckpt_load") - pl.col("ckpt_load_us")).alias("t_load_start"),
        pl.when(pl.col("ckpt_load_us").is_not_null()).then(pl.col("t_ckpt_load")).alias("t_load_end"),
    )
    return inc.join(load, on=["job", "attempt"], how="left")

@c.stage("IncidentRows", None)
def _clipped_incidents(inc: pl.DataFrame, window: pl.DataFrame) -> tuple[pl.DataFrame, list[tuple[int, int]]]:
    """The incidents with their phases clipped to the job's window, and the (job, incident) clipped."""
    if not inc.height:
        return inc, []
    inc = inc.join(window, on="job", how="left")
    out_of = inc.filter(pl.any_horizontal([(pl.col(c) < pl.col("T0")) | (pl.col(c) > pl.col("T1")) for c in PHASES]))
    inc = inc.with_columns([pl.col(c).clip(pl.col("T0"), pl.col("T1")) for c in PHASES]).drop("T0", "T1")
    return inc, list(out_of.select("job", "incident").iter_rows())


@c.stage("LostTime")
def _lost_time(rows: pl.DataFrame) -> pl.DataFrame:
    """Rework µs of the rows each attempt's rollback discarded (an incident's lost time)."""
    return (
        rows.filter(pl.col("n_lost") > 0)
        .group_by("job", pl.col("attempt_idx").cast(pl.Int32).alias("attempt"))
        .agg(pl.col("rework_us").sum().alias("lost_time_us"))
    )
@c.stage("AttemptRows")
def _attempts(att: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    by, ids = group_keys(rows, "job", "attempt_idx")
    lost_per_att = rows.group_by(*by).agg(*ids, pl.col("n_lost").sum().alias("steps_lost")).drop("_g", strict=False)
    return (
        att.join(lost_per_att, on=["job", "attempt_idx"], how="left")
        .with_columns(pl.col("steps_lost").fill_null(0), pl.col("attempt_idx").alias("attempt"))
        .rename({"n_step_rows": "n_step_records"})
    )


@c.stage("SlowPeriodSuspects", "SlowCost")
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
        .agg(pl.col("slowdown_us").sum().alias("slowdown_us"))
    )
    return sp, slow_cost

@c.stage("TorRows")
def _tor_rows(buckets: pl.DataFrame, jobs: pl.DataFrame, ideal: pl.DataFrame, att: pl.DataFrame,
              inc: pl.DataFrame) -> pl.DataFrame:
    """One row per job: the ledger's buckets (µs), what the job was and how it ended."""
    last = att.sort("job", "attempt_idx").group_by("job").agg(pl.col("state").last(), pl.len().alias("n_attempts"))
    tor = buckets.join(jobs, on="job", how="left").join(ideal, on="job", how="left").join(last, on="job", how="left")
    if not inc.height:
        return tor.with_columns(pl.lit(0, pl.UInt32).alias("n_incidents"))
    return tor.join(inc.group_by("job").agg(pl.len().alias("n_incidents")), on="job", how="left")


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
