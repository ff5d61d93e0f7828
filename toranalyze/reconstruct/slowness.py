"""Fail-slow periods: sustained step-time degradation against the job's own healthy baseline.

Only *healthy-looking* step rows take part: not warm-up (the first ``warmup_steps`` rows of an
attempt), not rows whose interval holds a checkpoint save or an evaluation, and with a known
per-step duration. A centered rolling median (``smooth`` rows) of log(duration / baseline) must
reach ``log(1 + thr)`` where ``thr = max(threshold, 5 standard errors of that median given the
job's own jitter)``: single spikes never move a median, and mild long stragglers (1.05x) are
found on quiet jobs. Slow rows closer than ``smooth`` rows merge; a period needs ``min_steps``
rows. Its factor is the median duration inside it divided by the ideal step time. The suspect
node/rank: a rank whose own step times stand out in the period when per-rank timings exist, else
the node with the most warning/error records (throttling, ECC, link flaps; ``fail_slow`` first)
inside the period.
"""

from __future__ import annotations

import polars as pl

from toranalyze.reconstruct.intervals import agg_by, attach, flag_sorted, in_windows, run_id
from toranalyze.reconstruct.progress import sort_by_key


def detect(
    rows: pl.DataFrame,
    baseline_us: pl.DataFrame,
    threshold: float,
    min_steps: int,
    smooth: int = 15,
) -> pl.DataFrame:
    """Slow runs over healthy rows: job, attempt_idx, run id, first/last row bounds.

    ``rows`` must have job, attempt_idx, step, start, end, d_us, n, healthy; ``baseline_us``
    job → base_us. Returns one row per period: job, attempt_idx, start, end, first_step,
    last_step, steps (total steps), med_us (median per-step µs).
    """
    return detect_in(healthy_windows(rows, smooth, min_steps), baseline_us, threshold, rows.schema["job"])


def healthy_windows(rows: pl.DataFrame, smooth: int = 15, min_steps: int = 5) -> pl.DataFrame:
    """The healthy rows :func:`detect_in` reads, in (job, attempt_idx, step) order, with what does
    not depend on the baseline (read once when periods are found against several baselines):
    ``steps_per_row`` (steps a row stands for), ``window_rows`` (window rows), ``min_rows`` and each row's window
    reach within its attempt (``reach_before`` rows before, ``reach_after`` after)."""
    cols = ["job", "attempt_idx", "step", "start", "end", "d_us", "n", "prev_step"]
    h = sort_by_key(rows.lazy().filter(pl.col("healthy")).select(cols).collect(), "job", "attempt_idx", "step")
    # Windows are counted in steps: a job logging every n steps smooths over smooth / n rows
    # (at least 3) and needs min_steps / n rows (at least 2); computed per job, then attached.
    per_job = agg_by(h, "job", pl.col("n").median().alias("steps_per_row"))
    per_job = per_job.with_columns(pl.col("steps_per_row").fill_null(1).clip(lower_bound=1))
    per_job = per_job.with_columns(
        (smooth / pl.col("steps_per_row")).round().cast(pl.Int64).clip(lower_bound=3).alias("window_rows"),
        (min_steps / pl.col("steps_per_row")).ceil().cast(pl.Int64).clip(lower_bound=2).alias("min_rows"),
    )
    h = attach(flag_sorted(h), per_job, "job")
    # A centered window of window_rows rows, cut at the attempt's ends, as offsets from the row (a job left
    # out for want of a baseline moves the positions, not the offsets).
    i, half = pl.int_range(pl.len(), dtype=pl.Int64), (pl.col("window_rows") - 1) // 2
    return h.with_columns(run_id("job", "attempt_idx").alias("_g")).with_columns(
        pl.min_horizontal(half, i.over("_g")).alias("reach_before"),
        pl.min_horizontal(half, (pl.len().cast(pl.Int64) - 1 - i).over("_g")).alias("reach_after"),
    ).drop("_g")


def detect_in(h: pl.DataFrame, baseline_us: pl.DataFrame, threshold: float, job_type: pl.DataType) -> pl.DataFrame:
    """:func:`detect` over ``healthy_windows(rows)``."""
    h = _with_threshold(h, baseline_us, threshold)
    if h.height == 0:
        return pl.DataFrame(
            schema={
                "job": job_type,
                "attempt_idx": pl.Int32,
                "start": pl.Int64,
                "end": pl.Int64,
                "first_step": pl.Int64,
                "last_step": pl.Int64,
                "steps": pl.Int64,
                "med_us": pl.Float64,
                "first_prev_step": pl.Int64,
            }
        )
    grp = ("job", "attempt_idx")
    h = h.with_columns(_smooth_above(h).alias("slow"))
    h = h.with_columns(pl.int_range(pl.len()).over(run_id(*grp)).alias("row_in_attempt"))
    return _slow_runs(h)


def _with_threshold(h: pl.DataFrame, baseline_us: pl.DataFrame, threshold: float) -> pl.DataFrame:
    """The rows of jobs with a baseline, with ``log_ratio`` (log of duration / baseline), ``log_sigma`` and
    the threshold ``threshold`` their smoothed ``log_ratio`` must reach."""
    h = attach(h, baseline_us, "job", how="inner").pipe(sort_by_key, "job", "attempt_idx", "step")
    h = flag_sorted(h.with_columns((pl.col("d_us") / pl.col("base_us")).log().alias("log_ratio")))
    # Noise of the job's step times (robust sigma of log ratios); the rolling median over
    # ``smooth`` steps must clear the threshold by 5 of its own standard errors.
    h = h.with_columns(pl.col("log_ratio").median().over("job").alias("log_sigma"))  # (one window at a time: slices)
    return h.with_columns(
        ((pl.col("log_ratio") - pl.col("log_sigma")).abs().median().over("job") * 1.4826).alias("log_sigma"),
    ).with_columns(
        pl.max_horizontal(
            pl.lit(threshold), 5.0 * 1.25 * pl.col("log_sigma") / pl.col("window_rows").cast(pl.Float64).sqrt()
        ).alias("threshold")
    )


def _slow_runs(h: pl.DataFrame) -> pl.DataFrame:
    """The periods: slow rows (``slow``) of an attempt merged across gaps under a window of rows,
    kept when they span ``min_rows`` rows; ``row_in_attempt`` is a row's position in its attempt."""
    grp = ("job", "attempt_idx")
    return (
        h.filter(pl.col("slow"))
        .with_columns(
            # Slow rows separated by fewer than a window of rows belong to one period.
            ((pl.col("row_in_attempt") - pl.col("row_in_attempt").shift(1).over(grp)) > pl.col("window_rows"))
            .fill_null(True)
            .cast(pl.Int64)
            .cum_sum()
            .over(grp)
            .alias("_run")
        )
        .group_by("job", "attempt_idx", "_run")
        .agg(
            pl.col("start").min(),
            pl.col("end").max(),
            pl.col("step").min().alias("first_step"),
            pl.col("step").max().alias("last_step"),
            pl.col("n").sum().alias("steps"),
            pl.len().alias("_rows"),
            pl.col("d_us").median().alias("med_us"),
            pl.col("d_us").alias("_ds"),
            pl.col("steps_per_row").first(),
            pl.col("prev_step").min().alias("first_prev_step"),
            pl.col("min_rows").first(),
        )
        # A row averaging n steps at either end of a period is only partly slow: with at least
        # three rows, the factor is the median of the inner ones.
        .with_columns(
            pl.when((pl.col("steps_per_row") > 1) & (pl.col("_ds").list.len() >= 3))
            .then(pl.col("_ds").list.slice(1, pl.col("_ds").list.len() - 2).list.median())
            .otherwise(pl.col("med_us"))
            .alias("med_us")
        )
        .drop("_ds", "steps_per_row")
        .filter(pl.col("_rows") >= pl.col("min_rows"))
        .drop("_run", "_rows", "min_rows")
        .sort("job", "start")
    )


def _median_above(h: pl.DataFrame) -> pl.Series:
    """Per row: is the centered rolling median of ``log_ratio`` over ``window_rows`` rows of its attempt (fewer at
    the attempt's ends) at least ``log(1 + threshold)``? ``h`` in (job, attempt_idx, step) order."""
    grp = ("job", "attempt_idx")
    parts = []
    for w, part in h.with_row_index("_pos").group_by("window_rows"):
        parts.append(part.select("_pos", pl.col("log_ratio").rolling_median(int(w[0]), center=True, min_samples=1)
                                 .over(grp).alias("_sm"), "threshold"))
    sm = pl.concat(parts).sort("_pos")
    return sm.select(pl.col("_sm") >= (1.0 + pl.col("threshold")).log())[:, 0]


def _smooth_above(h: pl.DataFrame) -> pl.Series:
    """:func:`_median_above` without sorting windows: the median of an odd number of values is
    at least ``c`` exactly when more than half of them are, a count that prefix sums give for
    every window at once. Windows of even length whose count is exactly half (the median is then
    the mean of two values either side of ``c``) are settled by the rolling median itself, on
    their attempts alone; so is any input the count cannot stand for (odd windows only, finite
    values)."""
    finite = h.select(pl.col("log_ratio").is_finite().all() & pl.col("log_ratio").is_not_null().all()).item()
    if h.height == 0 or not finite or not h.select((pl.col("window_rows") % 2 == 1).all()).item():
        return _median_above(h)
    pos = pl.int_range(pl.len(), dtype=pl.Int64)
    c = h.select(
        (pl.col("log_ratio") >= (1.0 + pl.col("threshold")).log()).cast(pl.Int64).alias("_up"),
        (pos - pl.col("reach_before")).alias("_lo"), (pos + pl.col("reach_after")).alias("_hi"), "job", "attempt_idx",
    ).with_columns(pl.col("_up").cum_sum().alias("_cum"))
    cum, lo = pl.col("_cum"), pl.col("_lo")
    c = c.with_columns(
        (cum.gather(pl.col("_hi")) - cum.gather(lo) + pl.col("_up").gather(lo)).alias("_k_up"),
        (pl.col("_hi") - pl.col("_lo") + 1).alias("_k"),
    )
    out = c.select(2 * pl.col("_k_up") > pl.col("_k"))[:, 0]
    tied = c.select(2 * pl.col("_k_up") == pl.col("_k"))[:, 0]
    if not tied.any():
        return out
    # Attempts holding a tie: their medians computed as such.
    grp = ("job", "attempt_idx")
    redo = c.filter(tied).select(grp).unique()
    sub = h.with_row_index("_pos").join(redo, on=grp, how="semi", maintain_order="left")
    exact = _median_above(sub.drop("_pos"))
    return out.scatter(sub["_pos"], exact)


def in_periods(rows: pl.DataFrame, periods: pl.DataFrame) -> pl.Series:
    """Per row: does its step fall inside a slow period of its attempt?"""
    if periods.height == 0 or rows.height == 0:
        return pl.Series("in_slow", [False] * rows.height, pl.Boolean)
    left = rows.select("job", "attempt_idx", "step").with_columns(pl.int_range(pl.len()).alias("_i"))
    # An as-of join needs its keys in order within each group only: rows in step order (as the
    # stages keep them) are joined as they are, in place.
    in_order = sort_by_key(left, "job", "attempt_idx", "step") is left
    right = periods.select("job", "attempt_idx", pl.col("first_step").alias("_f"), pl.col("last_step").alias("_l"))
    hit = (
        (left if in_order else left.sort("step")).join_asof(
            right.sort("_f"),
            left_on="step",
            right_on="_f",
            by=["job", "attempt_idx"],
            strategy="backward",
            check_sortedness=False,
        )
        .with_columns((pl.col("step") <= pl.col("_l")).fill_null(False).alias("in_slow"))
    )
    return (hit if in_order else hit.sort("_i"))["in_slow"]


def suspects(periods: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame:
    """Add node, rank, evidence to periods from per-rank step times or node records in the period."""
    if periods.height == 0:
        return periods.with_columns(
            pl.lit(None, pl.String).alias("node"),
            pl.lit(None, pl.Int32).alias("rank"),
            pl.lit([], pl.List(pl.String)).alias("evidence"),
        )
    p = periods.with_columns(pl.int_range(pl.len()).alias("period_row"))
    node_pick = _node_pick(p, ev)
    rank_pick = _rank_pick(p, ev)
    out = p.join(node_pick, on="period_row", how="left")
    if rank_pick is not None and rank_pick.height:
        out = (
            out.join(rank_pick, on="period_row", how="left")
            .with_columns(
                pl.coalesce("rank_from_steps", "rank_from_node").alias("rank"),
                pl.coalesce("node", "node_of_rank").alias("node"),
            )
            .drop("rank_from_steps", "node_of_rank", "rank_from_node")
        )
    else:
        out = out.rename({"rank_from_node": "rank"})
    return out.with_columns(pl.col("evidence").fill_null([])).drop("period_row")


def _node_pick(p: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame:
    """Per period ``period_row``: the node with the most warning/error records in it (``fail_slow``
    first; from a minute before its start), a rank seen on them, and up to 5 as evidence."""
    # Records that implicate a node or rank inside [start, end].
    recs = ev.lazy().filter(  # (only the columns read are filtered)
        pl.col("kind").is_in(("warning", "error"))
        & pl.col("t").is_not_null()
        & (pl.col("node").is_not_null() | pl.col("rank").is_not_null())
    ).select(
        "job",
        "t",
        "node",
        "rank",
        "failure_class",
        "file",
        "line",
    ).collect()
    hits = (
        p.select("job", "period_row", "start", "end")
        .join(recs, on="job", how="inner")
        .filter((pl.col("t") >= pl.col("start") - 60_000_000) & (pl.col("t") <= pl.col("end")))
        # (the evidence text of the records kept only)
        .with_columns((pl.col("file") + pl.lit(":") + pl.col("line").cast(pl.String)).alias("ev"))
        .drop("file", "line")
    )
    return (
        hits.filter(pl.col("node").is_not_null())
        .with_columns((pl.col("failure_class") == "fail_slow").fill_null(False).alias("_fs"))
        .group_by("period_row", "node")
        .agg(
            pl.len().alias("_c"),
            pl.col("_fs").sum().alias("_f"),
            pl.col("ev").head(5).alias("evidence"),
            pl.col("rank").drop_nulls().first().alias("_rank"),
        )
        .sort("period_row", "_f", "_c", "node", descending=[False, True, True, False])
        .group_by("period_row", maintain_order=True)
        .first()
        .select("period_row", "node", pl.col("_rank").cast(pl.Int32).alias("rank_from_node"), "evidence")
    )


def _rank_pick(p: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame | None:
    """Per-rank timings: per period ``period_row``, the rank whose median step time in the period is the
    highest, if it stands out from the median rank by 5 %; None without per-rank timings."""
    st = ev.select("job", "attempt_idx", "kind", "step", "rank", "node", "step_time_s").filter(
        (pl.col("kind") == "step") & pl.col("rank").is_not_null() & pl.col("step_time_s").is_not_null())
    if not (st.height and st["rank"].n_unique() > 1):
        return None
    return (
        in_windows(
            p.select("job", "attempt_idx", "period_row", pl.col("first_step").alias("_lo"),
                     pl.col("last_step").alias("_hi")),
            st.select("job", "attempt_idx", "step", "rank", "node", "step_time_s"), key="period_row",
            by=("job", "attempt_idx"), on="step",
        )
        .group_by("period_row", "rank")
        .agg(pl.col("step_time_s").median().alias("_m"), pl.col("node").drop_nulls().first().alias("node_of_rank"))
        .with_columns(pl.col("_m").median().over("period_row").alias("_mm"))
        .filter(pl.col("_m") > pl.col("_mm") * 1.05)
        .sort("period_row", "_m", descending=[False, True])
        .group_by("period_row", maintain_order=True)
        .first()
        .select("period_row", pl.col("rank").cast(pl.Int32).alias("rank_from_steps"), "node_of_rank")
    )
