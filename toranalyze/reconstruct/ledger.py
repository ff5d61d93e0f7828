"""The TOR ledger per job (docs/ledger.md), in integer microseconds.

Every microsecond of the job's window ``[T0, T1]`` goes to exactly one bucket. Labelled
intervals are laid on the timeline with a precedence (a checkpoint save beats an evaluation,
which beats a step's interval, which beats detection, which beats recovery); whatever no
interval covers is ``other``. A sweep over the elementary segments between all interval
boundaries gives each interval the microseconds it *owns*; step rows then split what they own
into ``useful`` (``min(d, t*)`` per preserved step), ``slowdown`` (the rest of preserved steps)
and ``rework`` (the rolled-back share). So the buckets sum to T_obs by construction, and the
ledger asserts it.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from toranalyze.reconstruct.api import micros
from toranalyze.reconstruct.intervals import agg_by, attach
from toranalyze.reconstruct.progress import make_disjoint, overlaps, sort_by_key, union_intervals
from toranalyze.reconstruct.tables import BUCKETS, RECOVERY_PARTS

US = 1_000_000

# Family name → precedence (lower wins).
FAMILIES = ("checkpoint", "eval", "step", "detection", "recovery")



def _empty_iv(job: pl.DataType) -> pl.DataFrame:
    return pl.DataFrame(
        schema={"job": job, "start": pl.Int64, "end": pl.Int64, "id": pl.Int64, "part": pl.String}
    )


def own(window: pl.DataFrame, families: dict[str, pl.DataFrame]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Microseconds owned by each interval: (rows (family, id, part, owned_us) of every family but
    the steps, plus ``other``; the step rows' (id, owned_us)).

    ``window``: job, T0, T1. Each family frame: job, start, end, id, part.

    Step rows (millions in a long run) stay out of the sweep: one owns its length less what the
    saves and evaluations above it cover, and the sweep that shares the rest sees the steps as
    their merged runs, which cover the same time.
    """
    fams = _clipped(window, families)
    steps = fams["step"]
    owned = _sweep(window, {**fams, "step": _runs(steps)}).filter(pl.col("family") != "step")
    above = pl.concat([fams["checkpoint"].select("job", "start", "end"), fams["eval"].select("job", "start", "end")])
    step_owned = steps.select(
        "id", (pl.col("end") - pl.col("start") - _covered(steps, union_intervals(above))).alias("owned_us"),
    )
    return owned, step_owned


def _runs(iv: pl.DataFrame) -> pl.DataFrame:
    """Disjoint sorted intervals (make_disjoint) merged where one ends as the next starts."""
    # (a row after another job's opens a run as well: no window per job, and only the columns
    # kept are filtered)
    first = ((pl.col("job") != pl.col("job").shift(1)) | (pl.col("start") != pl.col("end").shift(1))).fill_null(True)
    opens = iv.select(first.alias("_f"))["_f"]
    closes = opens.shift(-1).fill_null(True)
    starts = iv.select("job", "start").filter(opens)
    return starts.with_columns(
        iv["end"].filter(closes), pl.lit(None, pl.Int64).alias("id"), pl.lit(None, pl.String).alias("part")
    )


def _covered(iv: pl.DataFrame, cover: pl.DataFrame) -> pl.Series:
    """Per interval of ``iv`` (job, start, end): how many of its microseconds the disjoint
    intervals ``cover`` (job, start, end) hold, as C(end) - C(start) where C(x) is the cover's
    measure before x (the intervals starting at or before x, the last one cut at x)."""
    if cover.height == 0 or iv.height == 0:
        return pl.Series([0] * iv.height, dtype=pl.Int64)
    # Only the intervals that meet the cover hold any of it (saves and evaluations overlap few of
    # millions of step rows): the look-ups run on those alone.
    meets = overlaps(iv, cover)
    where = meets.arg_true()
    if where.len() == iv.height:
        return _measure_before(iv, cover, "end") - _measure_before(iv, cover, "start")
    sub = iv[where]
    held = _measure_before(sub, cover, "end") - _measure_before(sub, cover, "start")
    return pl.zeros(iv.height, pl.Int64, eager=True).scatter(where, held)


def _measure_before(iv: pl.DataFrame, cover: pl.DataFrame, col: str) -> pl.Series:
    """C(``col``) per interval of ``iv`` (``_covered``)."""
    length = pl.col("end") - pl.col("start")
    right = (
        cover.sort("job", "start")
        .select("job", pl.col("start").alias("_cs"), pl.col("end").alias("_ce"),
                (length.cum_sum().over("job") - length).alias("_before"))
        .sort("_cs")
    )
    left = iv.select("job", pl.col(col).alias("_x")).with_row_index("_i")
    # As-of keys need order within each job only: step rows made disjoint are in it already.
    in_order = sort_by_key(left, "job", "_x") is left
    hit = (left if in_order else left.sort("_x")).join_asof(
        right, left_on="_x", right_on="_cs", by="job", strategy="backward", check_sortedness=False)
    part = (pl.min_horizontal("_x", "_ce") - pl.col("_cs")).clip(lower_bound=0)
    return (hit if in_order else hit.sort("_i")).select((pl.col("_before") + part).fill_null(0))[:, 0]


def _clipped(window: pl.DataFrame, families: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Each family's intervals inside its job's window, disjoint (earlier starts win)."""
    fams = {}
    for name in FAMILIES:
        iv = families.get(name)
        if iv is None or iv.height == 0:
            iv = _empty_iv(window.schema["job"])
        iv = (
            attach(iv.select("job", "start", "end", "id", "part"), window, "job", how="inner")
            .with_columns(
                pl.max_horizontal("start", "T0").alias("start"),
                pl.min_horizontal("end", "T1").alias("end"),
            )
            .filter(pl.col("end") > pl.col("start"))
            .drop("T0", "T1")
        )
        fams[name] = make_disjoint(iv) if iv.height else iv
    return fams


def _sweep(window: pl.DataFrame, fams: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Owned microseconds from the elementary segments between all boundaries."""
    bounds = (
        pl.concat(
            [window.select("job", pl.col("T0").alias("b")), window.select("job", pl.col("T1").alias("b"))]
            + [f.select("job", pl.col("start").alias("b")) for f in fams.values()]
            + [f.select("job", pl.col("end").alias("b")) for f in fams.values()]
        )
        .unique()
        .sort("job", "b")
    )
    seg = (
        bounds.with_columns(pl.col("b").shift(-1).over("job").alias("e"))
        .filter(pl.col("e").is_not_null())
        .join(window, on="job")
        .filter((pl.col("b") >= pl.col("T0")) & (pl.col("e") <= pl.col("T1")))
        .with_columns((pl.col("e") - pl.col("b")).alias("len"))
        .drop("T0", "T1")
        .sort("b")
    )
    owner_exprs = []
    for name in FAMILIES:
        f = fams[name]
        right = f.select(
            "job",
            pl.col("start").alias(f"_s_{name}"),
            pl.col("end").alias(f"_e_{name}"),
            pl.col("id").alias(f"_id_{name}"),
            pl.col("part").alias(f"_p_{name}"),
        ).sort(f"_s_{name}")
        seg = seg.join_asof(
            right, left_on="b", right_on=f"_s_{name}", by="job", strategy="backward", check_sortedness=False
        )
        owner_exprs.append((name, (pl.col("b") < pl.col(f"_e_{name}")).fill_null(False)))
    fam_expr = pl.lit("other")
    id_expr = pl.lit(None, pl.Int64)
    part_expr = pl.lit(None, pl.String)
    for name, cov in reversed(owner_exprs):
        fam_expr = pl.when(cov).then(pl.lit(name)).otherwise(fam_expr)
        id_expr = pl.when(cov).then(pl.col(f"_id_{name}")).otherwise(id_expr)
        part_expr = pl.when(cov).then(pl.col(f"_p_{name}")).otherwise(part_expr)
    seg = seg.with_columns(fam_expr.alias("family"), id_expr.alias("id"), part_expr.alias("part"))
    return seg.group_by("job", "family", "id", "part").agg(pl.col("len").sum().alias("owned_us"))


def step_jitter(rows: pl.DataFrame) -> pl.DataFrame:
    """Per job: ``sigma``, the relative standard deviation of single step times (robust).

    Estimated from rows with reported step times: ``log(d / median) * sqrt(n)`` has the spread
    of one step's log time whether a row is one step or the average of ``n``.
    """
    r = rows.filter(pl.col("rep_us").is_not_null() & (pl.col("d_us") > 0) & (pl.col("n") > 0))
    if r.height == 0:
        return pl.DataFrame(schema={"job": rows.schema["job"], "sigma": pl.Float64})
    return (
        r.with_columns(pl.col("d_us").cast(pl.Float64).log().alias("_l"))
        .with_columns(
            ((pl.col("_l") - pl.col("_l").median().over("job")) * pl.col("n").cast(pl.Float64).sqrt()).alias("_x")
        )
        .group_by("job")
        .agg((pl.col("_x").abs().median() * 1.4826).alias("sigma"), pl.len().alias("_k"))
        .filter(pl.col("_k") >= 5)
        .select("job", "sigma")
    )


def expected_useful_per_step(m: pl.Series, n: pl.Series, ideal: pl.Series, sigma: pl.Series) -> pl.Series:
    """E[min(d, t*)] per step for a row of ``n`` steps whose mean step time is ``m``.

    The ledger's useful time is per step (``min(d, t*)``); a row that logs only the average of
    ``n`` steps hides their spread, and ``min`` of the average would count the jitter of steps
    above ``t*`` as useful. With single-step times i.i.d. of relative sd ``sigma``, a step given
    the row's mean is approximately normal around ``m`` with sd ``sigma * m * sqrt(1 - 1/n)``;
    then E[max(d - t*, 0)] = s φ(z) + (m - t*) (1 - Φ(z)), z = (t* - m) / s. One-step rows (or
    ``sigma`` 0) give ``min(m, t*)`` exactly.
    """
    f = pl.DataFrame([m.cast(pl.Float64).alias("m"), ideal.cast(pl.Float64).alias("t")])
    several = (n.cast(pl.Float64).fill_null(1.0) > 1.0) & (sigma.cast(pl.Float64).fill_null(0.0) > 0.0)
    if not several.any():  # (every row one step, or no jitter: no numpy, whose import costs too)
        missing = pl.any_horizontal(c.is_null() | c.is_nan() for c in (pl.col("m"), pl.col("t")))
        return f.select(pl.when(missing).then(float("nan")).otherwise(pl.min_horizontal("m", "t")).alias(""))[:, 0]
    import numpy as np

    mm = m.cast(pl.Float64).to_numpy()
    nn = np.maximum(n.cast(pl.Float64).fill_null(1.0).to_numpy(), 1.0)
    tt = ideal.cast(pl.Float64).to_numpy()
    sg = sigma.cast(pl.Float64).fill_null(0.0).to_numpy()
    s = sg * mm * np.sqrt(1.0 - 1.0 / nn)
    out = np.minimum(mm, tt)
    ok = np.isfinite(s) & (s > 0) & np.isfinite(mm) & np.isfinite(tt)
    if ok.any():
        # (scipy's import costs about a second of CPU: only rows averaging several steps need it)
        from scipy.special import ndtr

        # A spread tiny against |t* - m| makes z (or z*z) infinite: its density is then 0 and ndtr 0 or
        # 1, which is the limit, so the overflow is not worth a warning.
        with np.errstate(over="ignore"):
            z = (tt[ok] - mm[ok]) / s[ok]
            excess = s[ok] * np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi) + (mm[ok] - tt[ok]) * ndtr(-z)
        # Bounded by 0 (a step time is never negative: with a spread as large as the mean, as in
        # a job whose rows disagree wildly, the normal approximation would put mass below 0 and
        # the value with it) and by min(m, t*), which rounding could pass.
        out[ok] = np.clip(mm[ok] - np.maximum(excess, np.maximum(mm[ok] - tt[ok], 0.0)), 0.0, out[ok])
    return pl.Series(out)


@dataclass(frozen=True)
class Blocking:
    """What holds training without being a failure: blocking checkpoint saves and evaluations
    (contracts Checkpoints and Evaluations)."""

    ckpt: pl.DataFrame
    evals: pl.DataFrame


def compute(
    window: pl.DataFrame,
    rows: pl.DataFrame,
    ideal_us: pl.DataFrame,
    blocking: Blocking,
    incidents: pl.DataFrame,
    jitter: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Bucket totals per job (µs) and per step row rework µs.

    ``rows``: job, attempt_idx, step, start, end, n, n_lost, d_us. ``incidents``: job, incident,
    t_last_progress, t_detected, t_restart, t_resumed, t_load_start, t_load_end, job end T1.
    ``jitter``: job, sigma (:func:`step_jitter`) for rows that average several steps.
    Returns (buckets: job + *_us, rows with owned_us / rework_us / useful_us / slowdown_us).
    """
    rows = rows.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("id"))
    ckpt, evals = blocking.ckpt, blocking.evals
    fam: dict[str, pl.DataFrame] = {
        # (a step's part is never read: no text column of millions of rows)
        "step": rows.select("job", "start", "end", "id", pl.lit(None, pl.String).alias("part")),
        "checkpoint": ckpt.select(
            "job", "start", "end", pl.int_range(pl.len(), dtype=pl.Int64).alias("id"), pl.lit("ckpt").alias("part")
        ),
        "eval": evals.select(
            "job", "start", "end", pl.int_range(pl.len(), dtype=pl.Int64).alias("id"), pl.lit("eval").alias("part")
        ),
    }
    if incidents.height:
        fam.update(_incident_families(window, incidents))
    owned, step_owned = own(window, fam)
    # Row ``id`` is the row's position: its owned time is scattered there (null: none owned).
    owned_us = pl.repeat(None, rows.height, dtype=step_owned.schema["owned_us"], eager=True).scatter(
        step_owned["id"], step_owned["owned_us"])
    rows = (
        attach(rows.with_columns(owned_us.alias("owned_us")), ideal_us, "job")
        .with_columns(pl.col("owned_us").fill_null(0))
        .with_columns((pl.col("owned_us") * pl.col("n_lost") // pl.col("n")).alias("rework_us"))
    )
    rows = _split_preserved(_with_useful_per_step(rows, jitter))
    out = _bucket_totals(window, owned, rows)
    _check_sums(out)
    return out, rows


def _incident_families(window: pl.DataFrame, incidents: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The ``detection`` (last progress to detection) and ``recovery`` intervals of each
    incident; recovery in parts: queue, start-up, checkpoint load, start-up again until resumed."""
    inc = incidents.join(window, on="job").with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("id"),
        pl.coalesce("t_resumed", "T1").alias("_res"),
        pl.coalesce("t_restart", "t_resumed", "T1").alias("_rst"),
    )
    detection = inc.select(
        "job",
        pl.col("t_last_progress").alias("start"),
        pl.col("t_detected").alias("end"),
        "id",
        pl.lit("detection").alias("part"),
    )
    ls = pl.min_horizontal(pl.max_horizontal(pl.coalesce("t_load_start", "_rst"), "_rst"), "_res")
    le = pl.min_horizontal(pl.max_horizontal(pl.coalesce("t_load_end", "_rst"), ls), "_res")
    recovery = pl.concat(
        [
            inc.select(
                "job",
                pl.col("t_detected").alias("start"),
                pl.col("_rst").alias("end"),
                "id",
                pl.lit("recovery_queue").alias("part"),
            ),
            inc.select(
                "job",
                pl.col("_rst").alias("start"),
                ls.alias("end"),
                "id",
                pl.lit("recovery_startup").alias("part"),
            ),
            inc.select("job", ls.alias("start"), le.alias("end"), "id", pl.lit("recovery_ckpt_load").alias("part")),
            inc.select(
                "job",
                le.alias("start"),
                pl.col("_res").alias("end"),
                "id",
                pl.lit("recovery_startup").alias("part"),
            ),
        ]
    )
    return {"detection": detection, "recovery": recovery}


def _with_useful_per_step(rows: pl.DataFrame, jitter: pl.DataFrame | None) -> pl.DataFrame:
    """``useful_per_step_us``: the expected useful µs of one of the row's steps (at most ``ideal_us``); rows that
    average several steps account for their jitter (:func:`expected_useful_per_step`)."""
    if jitter is not None and jitter.height and "d_us" in rows.columns:
        rows = attach(rows, jitter, "job")
        u = expected_useful_per_step(
            rows.select(pl.coalesce("d_us", "ideal_us"))[:, 0], rows["n"], rows["ideal_us"], rows["sigma"]
        )
        rows = rows.with_columns(
            pl.when(pl.col("ideal_us").is_null()).then(None).otherwise(pl.Series("useful_per_step_us", u))
            .alias("useful_per_step_us")
        ).drop("sigma")
    else:
        rows = rows.with_columns(pl.col("ideal_us").cast(pl.Float64).alias("useful_per_step_us"))
    per_step = pl.col("useful_per_step_us")
    return rows.with_columns(pl.min_horizontal(per_step, pl.col("ideal_us")).alias("useful_per_step_us"))


def _split_preserved(rows: pl.DataFrame) -> pl.DataFrame:
    """What a row owns beyond its rework: ``useful_us`` (per preserved step ``useful_per_step_us``, within what
    it owns) and the rest ``slowdown_us``."""
    return (
        rows.with_columns(
            pl.min_horizontal(
                pl.col("owned_us") - pl.col("rework_us"),
                micros((pl.col("n") - pl.col("n_lost")) * pl.col("useful_per_step_us")),
            ).alias("useful_us")
        )
        .drop("useful_per_step_us")
        .with_columns((pl.col("owned_us") - pl.col("rework_us") - pl.col("useful_us")).alias("slowdown_us"))
    )


def _bucket_totals(window: pl.DataFrame, owned: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """Per job: the window, ``t_obs_us``, every bucket's and recovery part's µs, and the steps
    preserved and lost. Evaluations count as ``other`` (and are kept apart as ``eval_us``)."""
    per_step = agg_by(
        rows.select("job", "useful_us", "slowdown_us", "rework_us", "n", "n_lost"), "job",
        pl.col("useful_us").sum(),
        pl.col("slowdown_us").sum(),
        pl.col("rework_us").sum(),
        (pl.col("n") - pl.col("n_lost")).sum().alias("steps_preserved"),
        pl.col("n_lost").sum().alias("steps_lost"),
    )
    fam_tot = (
        owned.with_columns(
            pl.when(pl.col("family") == "recovery").then(pl.col("part")).otherwise(pl.col("family")).alias("k")
        )
        .group_by("job")
        .agg(
            *[
                pl.col("owned_us").filter(pl.col("k") == k).sum().alias(f"{k}_us")
                for k in ("checkpoint", "eval", "detection", "other", *RECOVERY_PARTS)
            ]
        )
    )
    return (
        window.join(fam_tot, on="job", how="left")
        .join(per_step, on="job", how="left")
        .with_columns(pl.col(pl.Int64, pl.UInt32, pl.UInt64).fill_null(0))
        .with_columns(
            (pl.col("T1") - pl.col("T0")).alias("t_obs_us"),
            (pl.col("other_us") + pl.col("eval_us")).alias("other_us"),
            pl.sum_horizontal(pl.col(f"{p}_us") for p in RECOVERY_PARTS).alias("recovery_us"),
        )
    )


def _check_sums(out: pl.DataFrame) -> None:
    """The ledger's invariants: the buckets sum to T_obs, and none is negative."""
    total = sum(pl.col(f"{b}_us") for b in BUCKETS)
    bad = out.filter(total != pl.col("t_obs_us"))
    assert bad.height == 0, f"ledger does not sum to T_obs for jobs {bad['job'].to_list()}"
    neg = out.filter(pl.min_horizontal(*[pl.col(f"{b}_us") for b in BUCKETS]) < 0)
    assert neg.height == 0, f"negative ledger bucket for jobs {neg['job'].to_list()}"
