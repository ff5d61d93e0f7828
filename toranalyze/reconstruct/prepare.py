"""The global steps of the analysis: the columns the stages read, jobs and attempts assigned over
all files (a scheduler or kernel record is attributed across files), other users' jobs dropped,
and the time fixes that read along files. What follows reads one job's rows at a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from toranalyze.reconstruct import incidents as inc_mod
from toranalyze.reconstruct.api import US, UTC_US, micros
from toranalyze.reconstruct.attribution import Pods, attribute_nodes, pod_bindings
from toranalyze.reconstruct.intervals import attach, packed_key
from toranalyze.reconstruct.jobs import SCOPE, assign_attempts, assign_jobs, job_name
from toranalyze.reconstruct.skew import SKEW_THRESHOLD_S, clock_offsets, skewed
from toranalyze.reconstruct.stages import check
from toranalyze.schema import KINDS, SEVERITIES, SOURCES

JOB_CODE = pl.UInt32
# Event columns the stages after job assignment read (plus the incident flags).
_STAGE_COLUMNS = (
    "ts_inferred", "t", "row", "job", "base_job_id", "file_code", "source", "kind", "severity", "node", "rank",
    "n_nodes", "n_gpus", "step", "step_time_s", "loss", "duration_s", "code", "state", "failure_class", "rule", "file",
    "line",
    *inc_mod.FLAG_COLUMNS,
)


@dataclass
class PreparedEvents:
    """The events after the global steps: the stages' columns of the analysed jobs, each record
    with its job (a code: the rank of its name) and attempt."""

    events: pl.DataFrame
    jobs: pl.DataFrame  # the analysed jobs, in code order (job, path, job_ids, identity)
    names: pl.Series  # code -> job name, over every job found
    dropped: list[int]  # other users' jobs of a shared scheduler log
    untimed: list[int]  # jobs given a relative clock
    # file -> clock offset (µs) of the files whose clock is skewed (skew.py), for causal order
    file_offsets_us: tuple[tuple[str, int], ...] = ()


def prepare_jobs(events: pl.DataFrame) -> PreparedEvents:
    """The global steps: jobs and attempts assigned over all files, other users' jobs dropped."""
    offsets = file_offsets(events)
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
    ev = place_untimed_errors(ev, keep).drop("file_code")
    ev = assign_attempts(ev, keep)
    check(ev, "PreparedEventRows", "prepare.prepare_jobs")
    check(jobs, "Jobs", "prepare.prepare_jobs")
    return PreparedEvents(ev, jobs, names, dropped, untimed, offsets)


def file_offsets(events: pl.DataFrame) -> tuple[tuple[str, int], ...]:
    """(file, clock offset µs) of the files whose clock skew.py calls skewed."""
    if events.height == 0 or "kind" not in events.columns:
        return ()
    off = skewed(clock_offsets(events, "file"), SKEW_THRESHOLD_S)
    return tuple((f, round(s * 1_000_000)) for f, s in off.select("unit", "offset_s").iter_rows())


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


def _prepared(events: pl.DataFrame) -> tuple[pl.DataFrame, Pods]:
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
            for c in events.columns if c in _STAGE_COLUMNS or c in ("job_id", SCOPE)]
    ev = events.select(*cols, job_name().alias("stated_job"), *inc_mod.flag_exprs(),
                       pl.col("ts").dt.epoch("us").alias("t"), pl.int_range(pl.len(), dtype=pl.Int64).alias("row"))
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


def _file_line_order(ev: pl.DataFrame, keep: pl.Series | None) -> pl.DataFrame:
    """The timed records of the jobs ``keep`` (None: all) in file and line order, files as
    integers ``file_code`` (any order will do: the fill stays within a file), so the sort is numeric."""
    file = "file_code" if "file_code" in ev.columns else "file"  # assign_jobs numbers the files
    order = ev.select("row", "job", file, "line", "t", "ts_inferred", "kind").filter(
        pl.col("t").is_not_null() & (pl.lit(True) if keep is None else pl.col("job").is_in(keep.implode())))
    if file == "file":
        files = order.select(pl.col("file").unique()).with_row_index("file_code")
        order = order.join(files, on="file", how="left", nulls_equal=True)
    packed = packed_key(order, ["file_code", "line", "row"])  # unique (row ids): the same order, on one column
    if packed is None:
        return order.sort("file_code", "line", "row")
    # Records come in file and line order, files numbered as they come: often sorted already.
    order = order.with_columns(packed.alias("_k"))
    return (order if order["_k"].is_sorted() else order.sort("_k")).drop("_k")


def _next_timed(order: pl.DataFrame) -> pl.DataFrame:
    """``order`` with ``next_timed_t``: the time of the next line of its file whose time is its own."""
    return (
        order.with_columns(pl.col("file_code").set_sorted())  # windows over files take slices
        .with_columns(pl.when(~pl.col("ts_inferred").fill_null(False)).then(pl.col("t")).alias("next_timed_t"))
        .with_columns(pl.col("next_timed_t").backward_fill().over("file_code").alias("next_timed_t"))
    )


def _start_times(ev: pl.DataFrame) -> pl.DataFrame:
    """(job, start_t): the distinct stated times at which a job started or restarted, in time order."""
    return (
        ev.filter(pl.col("kind").is_in(("job_start", "init", "restart")) & ~pl.col("ts_inferred").fill_null(False))
        .select("job", pl.col("t").alias("start_t"))
        .drop_nulls()
        .unique()
        .sort("start_t")
    )


def _restarted_before(cand: pl.DataFrame, starts: pl.DataFrame) -> pl.DataFrame:
    """(row, next_timed_t) of the candidates whose job (re)started after their inferred time and no later
    than their next timed line."""
    return (
        cand.sort("t")
        .join_asof(
            starts,
            left_on="t",
            right_on="start_t",
            by="job",
            strategy="forward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .filter(pl.col("start_t").is_not_null() & (pl.col("start_t") <= pl.col("next_timed_t")))
        .select("row", "next_timed_t")
    )


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
    cand = _next_timed(_file_line_order(ev, keep)).filter(
        pl.col("ts_inferred").fill_null(False)
        & pl.col("kind").is_in(("error", "warning"))
        & (pl.col("next_timed_t") > pl.col("t"))
    )
    if cand.height == 0:
        return ev
    starts = _start_times(ev)
    if starts.height == 0:
        return ev
    hit = _restarted_before(cand, starts)
    if hit.height == 0:
        return ev
    hi = attach(ev.select("row"), hit, "row")["next_timed_t"]
    ev = ev.with_columns(pl.coalesce(hi, "t").alias("t"))
    return ev.with_columns(pl.col("t").cast(UTC_US).alias("ts")) if "ts" in ev.columns else ev


def _bare_jobs(ev: pl.DataFrame, keep: pl.Series | None) -> list[Any]:
    """The jobs (among ``keep``; None: all) none of whose records carries a timestamp, in job order."""
    t = pl.col("t")
    bare = ev.group_by("job").agg(t.is_null().all().alias("_bare"))
    if keep is not None:
        bare = bare.filter(pl.col("job").is_in(keep.implode()))
    return sorted(bare.filter(pl.col("_bare"))["job"].to_list())  # in job order: the notes' order


def _logging_interval(steps: pl.DataFrame) -> pl.DataFrame:
    """(job, log_interval): the most common gap ``steps_since_prev`` between step rows when it occurs twice, else the
    smallest gap when there are two gaps, else 1."""
    interval = (
        steps.filter(pl.col("steps_since_prev") > 0)
        .group_by("job", "steps_since_prev")
        .len()
        .sort("job", "len", "steps_since_prev", descending=[False, True, False])
        .group_by("job", maintain_order=True)
        .first()
        .select("job", pl.when(pl.col("len") >= 2).then(pl.col("steps_since_prev")).alias("log_interval"))
    )
    gaps = pl.col("steps_since_prev")
    smallest = steps.filter(gaps > 0).group_by("job").agg(gaps.min().alias("_min"), pl.len().alias("_k"))
    return interval.join(smallest, on="job", how="full", coalesce=True).select(
        "job",
        pl.coalesce("log_interval", pl.when(pl.col("_k") >= 2).then(pl.col("_min")), pl.lit(1)).alias("log_interval"),
    )


def _step_spans(part: pl.DataFrame, is_step: pl.Expr) -> pl.DataFrame:
    """(row, span_us) of the step rows: the µs a row's steps took since the previous step row."""
    steps = part.filter(is_step).with_columns(
        (pl.col("step") - pl.col("step").shift(1).over("job")).alias("steps_since_prev"))
    # The logging interval: the most common gap between rows when it occurs twice; a larger gap
    # is an elision of the excerpt and counts as one interval (the ledger counts the steps).
    interval = _logging_interval(steps)
    steps = (
        steps.join(interval, on="job", how="left")
        .with_columns(pl.col("log_interval").fill_null(1))
        .with_columns(
            micros(
                pl.when((pl.col("steps_since_prev") > 0) & (pl.col("steps_since_prev") <= 2 * pl.col("log_interval")))
                .then(pl.col("steps_since_prev"))
                .otherwise(pl.col("log_interval"))
                * pl.col("step_time_s").fill_null(0.0)
                * US
            ).alias("span_us")
        )
    )
    return steps.select("row", "span_us")


def _excerpt_starts(part: pl.DataFrame, is_step: pl.Expr, rows: pl.Series) -> pl.DataFrame:
    """The excerpt starts where its first step started: a start marker there opens the attempt
    (when the steps state their times at all). Its ``row``s follow the largest of ``rows``."""
    return (
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
            *inc_mod.flag_defaults(),
            pl.lit(0, pl.Int64).alias("line"),
        )
        .with_columns((pl.int_range(pl.len(), dtype=pl.Int64) + rows.cast(pl.Int64).max() + 1).alias("row"))
    )


def relative_times(ev: pl.DataFrame, keep: pl.Series | None = None) -> tuple[pl.DataFrame, list[Any]]:
    """Give a job whose records carry no timestamp at all (a pasted excerpt of a trainer log) a
    relative clock: in file and line order, each step row ends ``n × step_time`` after the previous
    one (``n`` the steps since the previous row, the usual logging interval for the first row),
    and any other record sits at the end of the last step before it, from the epoch on. Returns
    (events, the jobs so rebuilt); jobs with any timestamp, or not among ``keep`` (None: all), are
    left alone."""
    jobs = _bare_jobs(ev, keep)
    if not jobs:
        return ev, []
    part = ev.filter(pl.col("job").is_in(jobs)).sort("job", "file", "line", "row")
    is_step = (pl.col("kind") == "step") & pl.col("step").is_not_null()
    part = part.join(_step_spans(part, is_step), on="row", how="left").with_columns(
        pl.col("span_us").fill_null(0).cum_sum().over("job").alias("t")
    )
    part = part.with_columns(pl.col("t").cast(UTC_US).alias("ts"), pl.lit(True).alias("ts_inferred")).drop("span_us")
    first = _excerpt_starts(part, is_step, ev["row"])
    part = pl.concat([first.select(part.columns), part], how="vertical")
    rest = ev.filter(~pl.col("job").is_in(jobs))
    return pl.concat([rest, part.select(rest.columns)], how="vertical"), jobs
