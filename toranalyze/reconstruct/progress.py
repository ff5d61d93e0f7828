"""The progress curve of a job: de-duplicated steps, their durations, checkpoints, evaluations,
attempts, rollbacks and which steps were lost.

All times are Int64 microseconds since the epoch (column ``t`` added by ``jobs.with_time``).

Step rows
    One row per (job, attempt, step) whatever the number of ranks that logged it: the end is
    the earliest report (sharpened by :func:`refine_ends` when the clock is coarse), the reported
    step time the median over ranks. A row may stand for
    several steps when the trainer logs every N iterations: it covers ``(prev_step, step]``,
    ``n = step - prev_step`` steps of ``d`` µs each, where ``d`` is the reported per-step time
    (``step_time_s``), else the time since the previous row divided by ``n``. The first row of
    an attempt covers the steps after the step the attempt resumed from (``ckpt_load`` step, else
    its first step minus the job's usual logging interval); when it has no reported time its
    duration is filled with the ideal step time by the ledger. A row's interval is
    ``[end - n*d, end]`` clipped to the previous row's end and to the attempt's start.

Rollbacks
    A step computed by attempt *a* is **lost** when a later attempt resumed from a lower step
    (its work was rolled back, whether or not it was recomputed); otherwise it is preserved.

Checkpoints and evaluations
    Save begin/end lines (per checkpoint step, merged over ranks) give the blocking save
    interval; a single line with ``duration_s`` is extended by it; a single line without one is
    inferred from the step timeline: a lone end spans from the end of the last step before it, a
    lone begin lasts until the next step's compute starts (its end minus its reported or the
    typical step time). Evaluations pair ``eval_begin`` with the next ``eval_end``.
"""

from __future__ import annotations

import polars as pl

from toranalyze.reconstruct.api import micros
from toranalyze.reconstruct.intervals import (
    AsofOn,
    OrderedKeys,
    asof_in_order,
    attach,
    flag_sorted,
    group_keys,
    in_key_order,
    packed_key,
    run_id,
)
from toranalyze.reconstruct.jobs import LIFECYCLE_KINDS

US = 1_000_000
BIG = 2**62
# Kinds whose records the attempt table reads beyond times: starts, ends and checkpoint loads.
_ATTEMPT_KINDS = ("job_start", "init", "restart", "ckpt_load", "job_end", "init_done")
_ATTEMPT_KEY = ["job", "attempt_idx"]

CLEAN_STATES = ("COMPLETED", "Completed", "Succeeded", "SUCCEEDED", "PyTorchJobSucceeded", "JobSucceeded")


def is_clean(state: pl.Expr) -> pl.Expr:
    """A scheduler / pod / operator end state that means success (Slurm COMPLETED, a pod's
    Completed / Succeeded, a training operator's ``<Kind>Succeeded``)."""
    return state.is_in(CLEAN_STATES) | state.str.ends_with("Succeeded")


def sort_by_key(df: pl.DataFrame, *keys: str, strict: bool = True) -> pl.DataFrame:
    """``df.sort(*keys)``, skipped when the rows are already strictly in that order (a linear
    check; with unique keys the sort could only return them as they are). Millions of step rows
    are kept in (job, attempt, step) order from stage to stage. ``strict=False`` also skips it
    for rows in order with equal keys (for callers that aggregate equal keys)."""
    return df if in_key_order(df, *keys, strict=strict) else df.sort(*keys)


def union_intervals(iv: pl.DataFrame, by: str = "job") -> pl.DataFrame:
    """Merge overlapping [start, end) intervals per ``by``; keeps the first row's other columns."""
    if iv.height == 0:
        return iv
    iv = iv.filter(pl.col("end") > pl.col("start")).sort(by, "start", "end")
    iv = iv.with_columns(
        (pl.col("start") > pl.col("end").cum_max().shift(1).over(by)).fill_null(True).cast(pl.Int64).alias("_g")
    ).with_columns(pl.col("_g").cum_sum().over(by))
    other = [c for c in iv.columns if c not in (by, "start", "end", "_g")]
    return (
        iv.group_by(by, "_g", maintain_order=True)
        .agg(pl.col("start").min(), pl.col("end").max(), *[pl.col(c).first() for c in other])
        .drop("_g")
    )


def make_disjoint(iv: pl.DataFrame, by: str = "job") -> pl.DataFrame:
    """Clip each interval's start to the end of the intervals before it (sorted by start)."""
    if iv.height == 0:
        return iv
    iv = sort_by_key(iv, by, "start", "end")
    return (
        iv.with_columns(
            pl.max_horizontal("start", pl.col("end").cum_max().shift(1).over(by).fill_null(-BIG)).alias("start")
        )
        .filter(pl.col("end") > pl.col("start"))
    )


def overlaps(rows: pl.DataFrame, iv: pl.DataFrame, by: str = "job") -> pl.Series:
    """For each row (start, end) — does it overlap any of the disjoint sorted intervals ``iv``?"""
    if rows.height == 0:
        return pl.Series("overlap", [], pl.Boolean)
    if iv.height == 0:
        return pl.Series("overlap", [False] * rows.height, pl.Boolean)
    left = rows.select(by, "start", "end").with_columns(pl.int_range(pl.len()).alias("_i"))
    # Rows in (by, start) order (step rows mostly are) are looked up as they are: each row's
    # answer is its own, whatever the order of equal starts.
    in_order = in_key_order(left, by, "start", strict=False)
    left = left if in_order else left.sort("start")
    right = iv.select(by, pl.col("start").alias("_is"), pl.col("end").alias("_ie")).sort("_ie")
    # The first interval ending after the row starts (strictly: one ending as the row starts does
    # not overlap it, and the next one might).
    hit = left.join_asof(right, left_on="start", right_on="_ie", by=by, strategy="forward", check_sortedness=False,
                         allow_exact_matches=False)
    hit = hit.with_columns(
        ((pl.col("_is") < pl.col("end")) & (pl.col("_ie") > pl.col("start"))).fill_null(False).alias("overlap")
    )
    return (hit if in_order else hit.sort("_i"))["overlap"]


def step_rows(ev: pl.DataFrame) -> pl.DataFrame:
    """De-duplicated step records: job, attempt_idx, step, t_end, t_log, rep_us (reported µs), n_ranks.

    ``t_log`` is the logged time (earliest report over ranks); ``t_end`` is the same time sharpened
    by :func:`refine_ends` when the log's clock is coarse.
    """
    key = ["job", "attempt_idx", "step"]
    s = (
        ev.lazy()  # only the columns read are filtered
        .filter((pl.col("kind") == "step") & pl.col("step").is_not_null() & pl.col("t").is_not_null())
        .select(*key, "t", "step_time_s")
        .collect()
    )
    # One integer per (job, attempt, step) when the three fit in 62 bits: one numeric column to
    # sort and to compare instead of three.
    packed = packed_key(s, key)
    if packed is not None:
        s = s.with_columns(packed.alias("_k"))
        s = s if s["_k"].is_sorted() else s.sort("_k")
        same = [pl.col("_k")]
    else:
        s = sort_by_key(s, *key, strict=False)
        same = [pl.col(k) for k in key]
    # Most steps are reported once (one logging rank): those rows are their own aggregate.
    alone = pl.all_horizontal((k != k.shift(1)).fill_null(True) for k in same) & pl.all_horizontal(
        (k != k.shift(-1)).fill_null(True) for k in same)
    s = s.with_columns(alone.alias("_alone"))

    def rep(x: pl.Expr) -> pl.Expr:  # the median over ranks, in whole µs
        return micros(x * US).alias("rep_us")

    many = s.filter(~pl.col("_alone"))
    if packed is None:
        many = many.with_columns(pl.lit(0, pl.Int64).alias("_k"))  # (unused: grouped by the columns)
        s = s.with_columns(pl.lit(0, pl.Int64).alias("_k"))
    out = [*key, "t_log", "rep_us", "n_ranks", "_k"]
    rows = pl.concat([
        s.filter(pl.col("_alone")).select(*key, pl.col("t").alias("t_log"), rep(pl.col("step_time_s")),
                                          pl.lit(1, pl.UInt32).alias("n_ranks"), "_k"),
        many.group_by("_k" if packed is not None else key).agg(
            *[pl.col(c).first() for c in ([*key] if packed is not None else ["_k"])],
            pl.col("t").min().alias("t_log"), rep(pl.col("step_time_s").median()), pl.len().alias("n_ranks"),
        ).select(out),
    ])
    if packed is not None:  # unique keys: the packed order is the columns' order
        rows = rows if rows["_k"].is_sorted() else rows.sort("_k")
    return flag_sorted(refine_ends(sort_by_key(rows.drop("_k"), *key)))


def resolution_us(t: pl.Expr) -> pl.Expr:
    """Clock resolution of a set of logged times: 1 s, 1 ms or 0 (finer) when every value is a multiple."""
    return (
        pl.when((t % US == 0).all())
        .then(pl.lit(US, pl.Int64))
        .when((t % 1000 == 0).all())
        .then(pl.lit(1000, pl.Int64))
        .otherwise(pl.lit(0, pl.Int64))
    )


def refine_ends(rows: pl.DataFrame) -> pl.DataFrame:
    """Add ``t_end``: the logged step end sharpened by the reported step times.

    Trainers often stamp their lines to the second while they report each step's time to the
    millisecond. A logged time τ of a clock with resolution ``r`` says the true end T lies in
    ``[τ, τ + r)``. Consecutive rows of an attempt whose logged gap agrees with their reported
    time (``n × step_time`` within the resolution) form a *chain* in which the true ends are
    ``T_i = A + C_i`` (``C_i`` the cumulative reported time since the chain's first row). ``A`` is
    the smallest value every row of the chain allows (``max(τ_i − C_i)``), so an end never moves
    before its logged time, and a row is appended to a chain only while some ``A`` satisfies every
    row (a checkpoint save or an evaluation between two rows breaks the chain). With many rows the
    bound is tight, so the steps of a chain are contiguous and exactly as long as reported, instead
    of absorbing the rounding of their timestamps. With a fine clock (or no reported times)
    ``t_end`` is the logged time.
    """
    if rows.height == 0:
        return rows.with_columns(pl.col("t_log").alias("t_end"))
    grp = ("job", "attempt_idx")
    # Rows in (job, attempt, step) order: each attempt is a run of rows (``_g``).
    r = sort_by_key(rows, *grp, "step").with_columns(run_id(*grp).alias("_g"))
    r = r.with_columns(
        resolution_us(pl.col("t_log")).over("_g").alias("_res"),
        (pl.col("step") - pl.col("step").shift(1).over("_g")).alias("_n"),
    )
    if not (r["_res"] > 0).any():
        return r.drop("_res", "_n", "_g").with_columns(pl.col("t_log").alias("t_end"))
    # A row continues the chain of the row before it only within an attempt, on a coarse clock,
    # with a reported time; the rest start a chain. Within a run of such rows (a segment) the
    # offsets are prefix sums: X = τ − C and Y = τ + r − C bound A for each row, a chain
    # starting at s accepts row i when max(X[s..i]) <= min(max(min Y[s..i-1], max X[s..i-1]), Y[i])
    # + (tol[i] − tol[s]), and its rows end at max(X[s..]) + C.
    elig = (
        (pl.col("_g") == pl.col("_g").shift(1)) & (pl.col("_res") > 0) & (pl.col("rep_us") > 0) & (pl.col("_n") > 0)
    ).fill_null(False)
    r = r.with_columns(elig.alias("_el")).with_columns((~pl.col("_el")).cum_sum().set_sorted().alias("_seg"))
    r = r.with_columns(
        pl.when(pl.col("_el")).then(pl.col("_n") * pl.col("rep_us")).otherwise(0).cum_sum().over("_seg").alias("_c"),
        pl.when(pl.col("_el")).then(pl.col("_n") * 60 + 100).otherwise(0).cum_sum().over("_seg").alias("_tol"),
    ).with_columns(
        (pl.col("t_log") - pl.col("_c")).alias("_x"),
        (pl.col("t_log") + pl.col("_res") - pl.col("_c")).alias("_y"),
    )
    starts = _chain_starts(r.select("_el", "_seg", "_x", "_y", "_tol"))
    return (
        r.with_columns(starts.cum_sum().set_sorted().alias("_ch"))
        .with_columns((pl.col("_x").max().over("_ch") + pl.col("_c")).alias("t_end"))
        .drop("_res", "_n", "_g", "_el", "_seg", "_c", "_tol", "_x", "_y", "_ch")
    )


_BULK_ROUNDS = 2


def _chain_starts(r: pl.DataFrame) -> pl.Series:
    """Which rows start a chain (refine_ends): the fixed point of "a row starts a chain when it
    cannot continue its predecessor's", found by guessing and correcting. Whether a row continues
    depends only on the chains before it, so the fixed point is unique and the sequential scan's:
    after ``_BULK_ROUNDS`` rounds correcting every contradiction, each round corrects the first
    one per segment only, which settles at least one more row of it."""
    seg = pl.col("_seg")
    # Guess: each row tested against its predecessor alone. (A segment's first row is its only
    # one not eligible, so an eligible row's predecessor is in its segment: no window.)
    guess = ~pl.col("_el") | (
        pl.max_horizontal(pl.col("_x").shift(1), "_x") > pl.min_horizontal(pl.col("_y").shift(1), "_y")
        + pl.col("_tol") - pl.col("_tol").shift(1)
    )
    r = r.with_columns(guess.alias("_s"))
    lo, mn = pl.col("_x").cum_max().over("_ch"), pl.col("_y").cum_min().over("_ch")
    rounds = 0
    while True:
        c = r.with_columns(pl.col("_s").cum_sum().set_sorted().alias("_ch")).with_columns(
            lo.alias("_lo"), mn.alias("_hi"), pl.col("_tol").first().over("_ch").alias("_t0")
        ).with_columns(pl.max_horizontal("_hi", "_lo").alias("_hi"))  # (the running max taken once)
        accept = pl.max_horizontal(pl.col("_lo").shift(1), "_x") <= pl.min_horizontal(
            pl.col("_hi").shift(1), "_y"
        ) + pl.col("_tol") - pl.col("_t0").shift(1)
        want = (~pl.col("_el") | ~accept.fill_null(False)).alias("_want")
        c = c.with_columns(want).with_columns((pl.col("_want") != pl.col("_s")).alias("_bad"))
        if not c["_bad"].any():
            return r["_s"]
        rounds += 1
        fix = pl.col("_bad") if rounds <= _BULK_ROUNDS else pl.col("_bad") & (pl.col("_bad").cum_sum().over(seg) == 1)
        r = r.with_columns(pl.when(c.select(fix).to_series()).then(c["_want"]).otherwise(pl.col("_s")).alias("_s"))


def attempt_table(ev: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """One row per (job, attempt_idx) with start/end, state, step range and resume point (µs)."""
    by, ids = group_keys(steps, "job", "attempt_idx")  # (step rows in (job, attempt) order: slices)
    att = _record_facts(ev).join(_step_facts(steps, by, ids), on=["job", "attempt_idx"], how="left")
    att = att.join(_log_intervals(steps, in_runs=bool(ids)), on="job", how="left").with_columns(
        pl.col("log_interval").fill_null(1)
    )
    att = att.with_columns(
        pl.when(pl.col("ckpt_loaded").is_not_null() & (pl.col("ckpt_loaded") < pl.col("first_step").fill_null(BIG)))
        .then(pl.col("ckpt_loaded"))
        .otherwise((pl.col("first_step") - pl.col("log_interval")).clip(lower_bound=0))
        .alias("resumed_from"),
        pl.col("t_end").max().over("job").alias("_tmax"),
    )
    # An attempt ends no later than the next one starts.
    # (``min_horizontal`` skips nulls: the last attempt keeps its own end, never a sentinel.)
    att = att.sort("job", "attempt_idx").with_columns(
        pl.min_horizontal("t_end", pl.col("t_start").shift(-1).over("job")).alias("t_end")
    )
    att = att.with_columns(pl.max_horizontal("t_end", "t_start").alias("t_end")).drop("_tmax")
    return att.sort("job", "attempt_idx")


def _record_facts(ev: pl.DataFrame) -> pl.DataFrame:
    """Per attempt, from its timed records: start, end, scheduler times and id, state, exit
    code and checkpoint load."""
    timed = ev.lazy().filter(pl.col("t").is_not_null())  # only the columns read are filtered
    return (
        _every_record_facts(ev, timed)
        .join(_lifecycle_facts(timed), on=["job", "attempt_idx"], how="left", maintain_order="left")
        .with_columns(
            pl.coalesce("t_node_start", "t_first_marker", "t_first_lifecycle", "t_first_record").alias("t_start"),
            pl.coalesce("bad_end_state", "last_end_state").alias("state"),
            pl.when(pl.col("bad_end_state").is_not_null())
            .then(pl.col("bad_end_code"))
            .otherwise(pl.col("last_end_code"))
            .alias("exit_code"),
        )
        # An attempt with no lifecycle record (only kernel lines, say) ends at its last record.
        .with_columns(pl.coalesce("t_job_end", "t_last_record", "t_any_record", "t_start").alias("t_end"))
        .select("job", "attempt_idx", "t_start", "t_sched_start", "t_init", "t_job_end", "t_last_record",
                "t_restart_evt", "job_id", "ckpt_loaded", "t_ckpt_load", "ckpt_load_us", "t_init_done", "state",
                "exit_code", "t_end")
        .collect()
    )


def _every_record_facts(ev: pl.DataFrame, timed: pl.LazyFrame) -> pl.LazyFrame:
    """What every record counts for: the attempt's first and last records and its scheduler id."""
    life = pl.col("kind").is_in(LIFECYCLE_KINDS)
    non_kernel_err = pl.col("kind").is_in(("error", "warning")) & pl.col("source").ne_missing("kernel")
    # Timed events come in (job, attempt) order from assign_attempts: each attempt a run of rows,
    # grouped as slices.
    if in_key_order(ev.select("job", "attempt_idx", "t").filter(pl.col("t").is_not_null()), "job", "attempt_idx",
                    strict=False):
        by: list[str | pl.Expr] = [run_id("job", "attempt_idx").alias("_g")]
        ids = [pl.col("job").first(), pl.col("attempt_idx").first()]
    else:
        by, ids = ["job", "attempt_idx"], []
    return timed.group_by(*by).agg(
        *ids,
        pl.col("t").filter(life).min().alias("t_first_lifecycle"),
        pl.col("t").min().alias("t_first_record"),
        # A heartbeat (a cluster watchdog's "still running") keeps the attempt alive too.
        pl.col("t").filter(life | non_kernel_err | (pl.col("kind") == "heartbeat")).max().alias("t_last_record"),
        pl.col("base_job_id").drop_nulls().first().alias("job_id"),
        pl.col("t").max().alias("t_any_record"),
    ).drop("_g", strict=False)


def _lifecycle_facts(timed: pl.LazyFrame) -> pl.LazyFrame:
    """What the few records of starts, ends and loads say, aggregated apart from every record's
    facts (a filter per aggregation over millions of records costs more than the aggregations)."""
    marker = pl.col("kind").is_in(("job_start", "init", "restart", "ckpt_load"))
    is_end = pl.col("kind") == "job_end"
    bad_end = is_end & ~is_clean(pl.col("state").fill_null(""))
    return timed.filter(pl.col("kind").is_in(_ATTEMPT_KINDS)).group_by("job", "attempt_idx").agg(
        # A start on a node (a pod's container, a Slurm step on its batch host) is when the
        # processes began; a job-level "started" can precede it by scheduling and image pulls.
        pl.col("t").filter((pl.col("kind") == "job_start") & pl.col("node").is_not_null()).min().alias("t_node_start"),
        pl.col("t").filter(marker).min().alias("t_first_marker"),
        pl.col("t").filter(pl.col("kind") == "job_start").min().alias("t_sched_start"),
        pl.col("t").filter(pl.col("kind").is_in(("init", "restart"))).min().alias("t_init"),
        pl.col("t").filter(is_end).max().alias("t_job_end"),
        pl.col("t").filter(pl.col("kind") == "restart").min().alias("t_restart_evt"),
        pl.col("state").filter(bad_end).first().alias("bad_end_state"),
        pl.col("code").filter(bad_end).first().alias("bad_end_code"),
        pl.col("state").filter(is_end).last().alias("last_end_state"),
        pl.col("code").filter(is_end).last().alias("last_end_code"),
        pl.col("step").filter(pl.col("kind") == "ckpt_load").min().alias("ckpt_loaded"),
        pl.col("t").filter(pl.col("kind") == "ckpt_load").min().alias("t_ckpt_load"),
        micros(pl.col("duration_s").filter(pl.col("kind") == "ckpt_load").max() * US)
        .alias("ckpt_load_us"),
        pl.col("t").filter(pl.col("kind") == "init_done").min().alias("t_init_done"),
    )


def _step_facts(steps: pl.DataFrame, by: list[str | pl.Expr], ids: list[pl.Expr]) -> pl.DataFrame:
    """Per attempt (``group_keys``' by and ids): its step range, number of step rows and first
    and last step ends."""
    return steps.group_by(*by).agg(
        *ids,
        pl.col("step").min().alias("first_step"),
        pl.col("step").max().alias("last_step"),
        pl.len().alias("n_step_rows"),
        pl.col("t_end").min().alias("t_first_step_end"),
        pl.col("t_end").max().alias("t_last_step_end"),
    ).drop("_g", strict=False)


def _log_intervals(steps: pl.DataFrame, in_runs: bool) -> pl.DataFrame:
    """The usual logging interval of each job (1 when every step is logged); ``in_runs``: the
    step rows are in (job, attempt) order."""
    within = run_id("job", "attempt_idx") if in_runs else ["job", "attempt_idx"]
    return (
        steps.with_columns((pl.col("step") - pl.col("step").shift(1).over(within)).alias("_d"))
        .filter(pl.col("_d") > 0)
        .group_by("job")
        .agg(pl.col("_d").mode().min().alias("log_interval"))
    )


def step_intervals(steps: pl.DataFrame, att: pl.DataFrame) -> pl.DataFrame:
    """Add n (steps per row), d_us (per-step µs, null when unknown), prev_step, start, end."""
    a = att.select("job", "attempt_idx", "resumed_from", "t_start")
    s = sort_by_key(attach(steps, a, ["job", "attempt_idx"]), "job", "attempt_idx", "step")
    s = s.with_columns(run_id("job", "attempt_idx").alias("_g")).with_columns(
        pl.col("step").shift(1).over("_g").alias("_ps"),
        pl.col("t_end").shift(1).over("_g").alias("_pt"),
    ).drop("_g").with_columns(
        pl.coalesce("_ps", pl.min_horizontal("resumed_from", pl.col("step") - 1)).alias("prev_step"),
    )
    s = s.with_columns((pl.col("step") - pl.col("prev_step")).clip(lower_bound=1).alias("n"))
    # A gap that is not positive (ranks' clocks disagree, a step logged out of order) says
    # nothing about the duration.
    gap = pl.col("t_end") - pl.col("_pt")
    s = s.with_columns(
        pl.coalesce(
            pl.when(pl.col("rep_us") > 0).then(pl.col("rep_us")),
            pl.when(gap > 0).then(micros(gap / pl.col("n"))),
        ).alias("d_us")
    )
    return flag_sorted(s.rename({"_pt": "prev_end"}).drop("_ps", "t_start", "resumed_from"))


def place_steps(s: pl.DataFrame, att: pl.DataFrame, ideal_us: pl.DataFrame) -> pl.DataFrame:
    """Fill unknown durations with the job's ideal step time and compute [start, end] per row."""
    s = attach(attach(s, ideal_us, "job"), att.select("job", "attempt_idx", pl.col("t_start").alias("_as")),
               ["job", "attempt_idx"])
    s = s.with_columns(pl.coalesce("d_us", "ideal_us").alias("d_us"))
    s = s.with_columns(
        pl.max_horizontal(
            pl.col("t_end") - pl.col("n") * pl.col("d_us"),
            pl.col("prev_end").fill_null(-BIG),
            pl.col("_as"),
        )
        .clip(upper_bound=pl.col("t_end"))
        .alias("start"),
        pl.col("t_end").alias("end"),
    )
    return s.drop("_as", "ideal_us")


def mark_lost(s: pl.DataFrame, att: pl.DataFrame) -> pl.DataFrame:
    """Add n_lost: how many of the row's steps a later attempt rolled back."""
    later = (
        att.sort("job", "attempt_idx")
        .with_columns(pl.col("resumed_from").fill_null(BIG).alias("_r"))
        .with_columns(pl.col("_r").reverse().cum_min().reverse().over("job").shift(-1).over("job").alias("later_min"))
        .select("job", "attempt_idx", pl.col("later_min").fill_null(BIG))
    )
    s = attach(s, later, ["job", "attempt_idx"]).with_columns(pl.col("later_min").fill_null(BIG))
    return s.with_columns(
        (pl.col("step") - pl.max_horizontal("prev_step", "later_min")).clip(0).clip(upper_bound=pl.col("n")).alias(
            "n_lost"
        )
    ).drop("later_min")


def _pair(ev: pl.DataFrame, begin: str, end: str, steps: pl.DataFrame) -> pl.DataFrame:
    """Begin/end records → per (job, attempt, key step) begin time, end time and stated duration."""
    rows = ev.filter(pl.col("kind").is_in((begin, end)) & pl.col("t").is_not_null()).select(
        "job",
        "attempt_idx",
        "kind",
        "t",
        "step",
        "duration_s",
        (pl.col("file") + pl.lit(":") + pl.col("line").cast(pl.String)).alias("ev"),
    )
    if rows.height == 0:
        return pl.DataFrame(
            schema={
                "job": ev.schema["job"],
                "attempt_idx": pl.Int32,
                "key": pl.Int64,
                "b": pl.Int64,
                "e": pl.Int64,
                "dur": pl.Int64,
                "evidence": pl.String,
            }
        )
    # Key: the record's step, else the last step completed before it.
    last = steps.select("job", "attempt_idx", pl.col("t_log").alias("t"), pl.col("step").alias("_ls"))
    rows = _asof(rows.sort("t"), last, AsofOn("t", "t")).with_columns(
        pl.coalesce("step", "_ls", pl.lit(-1, pl.Int64)).alias("key"))
    return (
        rows.group_by("job", "attempt_idx", "key")
        .agg(
            pl.col("t").filter(pl.col("kind") == begin).min().alias("b"),
            pl.col("t").filter(pl.col("kind") == end).max().alias("e"),
            micros(pl.col("duration_s").max() * US).alias("dur"),
            pl.col("ev").first().alias("evidence"),
        )
        .sort("job", "b")
    )


def _value_res(t: pl.Expr) -> pl.Expr:
    """Resolution of one logged time: 1 s or 1 ms when it is a whole multiple, else 0."""
    return pl.when(t % US == 0).then(pl.lit(US)).when(t % 1000 == 0).then(pl.lit(1000)).otherwise(pl.lit(0))


def _asof(left: pl.DataFrame, right: pl.DataFrame, on: AsofOn, keys: OrderedKeys | None = None) -> pl.DataFrame:
    """``left.join_asof(right, ...)`` by (job, attempt_idx) with step rows on the right. The join
    needs right sorted on ``right_on`` within each group only, so rows already in (job, attempt,
    on) order, distinct keys (the step rows as the stages keep them), are taken as they are and
    looked up by binary search (``keys``: right's, when the caller has them); others are sorted on
    ``on``."""
    by = ["job", "attempt_idx"]
    keys = OrderedKeys(right, by, on.right_on) if keys is None else keys
    if keys.ok:
        return asof_in_order(left, right, on, by, keys)
    ordered = in_key_order(right, *by, on.right_on)
    return left.join_asof(right if ordered else right.sort(on.right_on), left_on=on.left_on, right_on=on.right_on,
                          by=by, strategy=on.strategy, allow_exact_matches=on.allow_exact_matches,  # type: ignore[arg-type]
                          check_sortedness=False)


def _with_neighbours(p: pl.DataFrame, s: pl.DataFrame) -> pl.DataFrame:
    """Join to intervals keyed by (job, attempt_idx, key step): ``prev_row_end``, the end of the last
    step row at or before the key step, and ``next_row_start``, the compute start (end − n·d) of the
    first row after it."""
    grp = ["job", "attempt_idx"]
    rows = s.filter(pl.col("d_us").is_not_null()).select(
        *grp, "step", "end", (pl.col("end") - pl.col("n") * pl.col("d_us")).alias("_cs")
    )
    keys = OrderedKeys(rows, grp, "step")  # (the same keys for both look-ups)
    prev = rows.select(*grp, pl.col("step").alias("_ps"), pl.col("end").alias("prev_row_end"))
    nxt = rows.select(*grp, pl.col("step").alias("_ns"), pl.col("_cs").alias("next_row_start"))
    p = _asof(p.sort("key"), prev, AsofOn("key", "_ps"), keys)
    p = _asof(p.sort("key"), nxt, AsofOn("key", "_ns", "forward", allow_exact_matches=False), keys)
    return p.drop("_ps", "_ns")


def _snap(start: str, end: str, b: str, e: str) -> list[pl.Expr]:
    """Coarse begin/end stamps snap to the adjacent step boundaries they round: a save logged at
    second τ that follows a step ending within [τ, τ + 1 s) begins at that step's end, and one whose
    end stamp precedes the next step's compute start by less than the resolution ends there."""
    tol = 1000
    rb, re_ = _value_res(pl.col(b)), _value_res(pl.col(e))
    return [
        pl.when(
            pl.col(b).is_not_null()
            & (rb > 0)
            & (pl.col("prev_row_end") >= pl.col(b))
            & (pl.col("prev_row_end") <= pl.col(b) + rb + tol)
        )
        .then(pl.col("prev_row_end"))
        .otherwise(pl.col(start))
        .alias(start),
        pl.when(
            pl.col(e).is_not_null()
            & (re_ > 0)
            & (pl.col("next_row_start") >= pl.col(e))
            & (pl.col("next_row_start") <= pl.col(e) + re_ + tol)
        )
        .then(pl.col("next_row_start"))
        .otherwise(pl.col(end))
        .alias(end),
    ]


def checkpoint_intervals(ev: pl.DataFrame, s: pl.DataFrame, typical_us: pl.DataFrame) -> pl.DataFrame:
    """Blocking save intervals per job: job, start, end, step, inferred, evidence (disjoint).

    ``s``: placed step rows (start, end, n, d_us). A begin/end pair spans begin → end; a lone line
    with a stated duration is extended by it; a lone end without one spans from the end of the
    step before it, a lone begin lasts until the next step's compute starts. Coarse stamps snap to
    the step boundaries they round (:func:`_snap`).
    """
    p = _pair(ev, "ckpt_save_begin", "ckpt_save_end", s)
    if p.height == 0:
        return pl.DataFrame(
            schema={
                "job": ev.schema["job"],
                "start": pl.Int64,
                "end": pl.Int64,
                "step": pl.Int64,
                "inferred": pl.Boolean,
                "evidence": pl.String,
            }
        )
    p = _with_neighbours(p, s)
    p = p.with_columns(
        pl.when(pl.col("b").is_not_null())
        .then(pl.col("b"))
        .when(pl.col("dur").is_not_null())
        .then(pl.col("e") - pl.col("dur"))
        .otherwise(pl.col("prev_row_end"))
        .alias("start"),
        pl.when(pl.col("e").is_not_null())
        .then(pl.col("e"))
        .when(pl.col("dur").is_not_null())
        .then(pl.col("b") + pl.col("dur"))
        .otherwise(pl.col("next_row_start"))
        .alias("end"),
        (pl.col("b").is_null() | pl.col("e").is_null()).alias("inferred"),
    ).with_columns(_snap("start", "end", "b", "e"))
    out = p.filter(pl.col("start").is_not_null() & pl.col("end").is_not_null()).select(
        "job", "start", "end", pl.col("key").alias("step"), "inferred", "evidence"
    )
    return union_intervals(out)


def eval_intervals(ev: pl.DataFrame, s: pl.DataFrame | None = None, ckpt: pl.DataFrame | None = None) -> pl.DataFrame:
    """Evaluation intervals per job (disjoint): job, start, end.

    A begin pairs with the first end of the same attempt after it and before the next begin;
    an evaluation cut short by a failure (no end) is no interval. A lone end with a stated
    duration is extended by it; a lone end without one (Megatron prints only the validation
    result) spans from the end of the last step or save before it, when the placed step rows
    ``s`` (and the save intervals ``ckpt``) are given; when its time was inferred (the block has
    no timestamp) it lasts until the next step's compute starts.
    """
    grp = _ATTEMPT_KEY
    b, e = _eval_begins(ev), _eval_ends(ev)
    parts = []
    paired = pl.DataFrame(schema={"job": ev.schema["job"], "attempt_idx": e.schema["attempt_idx"], "end": pl.Int64})
    if b.height and e.height:
        pb = _paired_evals(b, e)
        parts.append(pb.select("job", "start", "end"))
        paired = pb.select(*grp, "end").unique()
    lone = e.join(paired, on=[*grp, "end"], how="anti")
    with_dur = lone.filter(pl.col("duration_s").is_not_null()).select(
        "job", (pl.col("end") - micros(pl.col("duration_s") * US)).alias("start"), "end"
    )
    if with_dur.height:
        parts.append(with_dur)
    bare = lone.filter(pl.col("duration_s").is_null())
    if bare.height and s is not None and s.height:
        parts.append(_bare_evals(bare, s, ckpt))
    if not parts:
        return pl.DataFrame(schema={"job": ev.schema["job"], "start": pl.Int64, "end": pl.Int64})
    return union_intervals(pl.concat([x.select("job", "start", "end") for x in parts]))


def _eval_begins(ev: pl.DataFrame) -> pl.DataFrame:
    """Evaluation begins (``start``) with the attempt's next begin (``next_begin``)."""
    grp = _ATTEMPT_KEY
    return (
        ev.filter((pl.col("kind") == "eval_begin") & pl.col("t").is_not_null())
        .select(*grp, pl.col("t").alias("start"))
        .unique()
        .sort(*grp, "start")
        .with_columns(pl.col("start").shift(-1).over(grp).alias("next_begin"))
    )


def _eval_ends(ev: pl.DataFrame) -> pl.DataFrame:
    """Evaluation ends (``end``), one per time, with their stated duration, step and whether
    their time was inferred."""
    grp = _ATTEMPT_KEY
    return (
        ev.filter((pl.col("kind") == "eval_end") & pl.col("t").is_not_null())
        .select(*grp, pl.col("t").alias("end"), pl.col("duration_s"), "step", pl.col("ts_inferred").fill_null(False))
        .unique(subset=[*grp, "end"], keep="first")
    )


def _paired_evals(b: pl.DataFrame, e: pl.DataFrame) -> pl.DataFrame:
    """Each begin with the first end of its attempt after it and before the next begin."""
    grp = _ATTEMPT_KEY
    return (
        b.sort("start")
        .join_asof(
            e.select(*grp, "end").sort("end"),
            left_on="start",
            right_on="end",
            by=grp,
            strategy="forward",
            check_sortedness=False,
        )
        .filter(pl.col("end").is_not_null() & (pl.col("end") <= pl.col("next_begin").fill_null(2**62)))
    )


def _bare_evals(bare: pl.DataFrame, s: pl.DataFrame, ckpt: pl.DataFrame | None) -> pl.DataFrame:
    """Intervals of lone ends without a duration: from the end of the last step (or save) before
    them; one whose time was inferred until the next step's compute starts."""
    rows = s.select(*_ATTEMPT_KEY, pl.col("t_log").alias("_k"), "step", "end")
    bare = (
        _asof(bare.sort("end"), rows, AsofOn("end", "_k"))
        .with_columns(pl.coalesce("step_right", "step", pl.lit(-1, pl.Int64)).alias("key"))
        .drop("_k", "step_right")
        .rename({"end_right": "step_end_t"})
    )
    bare = _with_neighbours(bare.drop("step"), s).with_columns(pl.col("step_end_t").alias("prev_row_end"))
    if ckpt is not None and ckpt.height:
        ck = ckpt.select("job", pl.col("end").alias("_ck_end"), pl.col("end").alias("_kk")).sort("_kk")
        bare = bare.sort("end").join_asof(
            ck, left_on="end", right_on="_kk", by="job", strategy="backward", check_sortedness=False
        )
        bare = bare.with_columns(
            pl.max_horizontal(
                "prev_row_end", pl.when(pl.col("_ck_end") <= pl.col("end")).then(pl.col("_ck_end"))
            ).alias("prev_row_end")
        )
    # A validation block without a time of its own (placed at the previous line's time) lasts
    # until the next step's compute starts.
    bare = bare.with_columns(
        pl.col("prev_row_end").alias("start"),
        pl.lit(None, pl.Int64).alias("_b"),
        pl.col("end").alias("_e"),
        pl.when(pl.col("ts_inferred") & pl.col("next_row_start").is_not_null())
        .then(pl.max_horizontal("end", "next_row_start"))
        .otherwise(pl.col("end"))
        .alias("end"),
    ).with_columns(_snap("start", "end", "_b", "_e"))
    return bare.filter(pl.col("start").is_not_null()).select("job", "start", "end")
