"""Censored failure-rate fits over the fleet tables (pure frames in, frames and dicts out).

A *failure* is an incident whose class is not planned (``toranalyze.taxonomy.PLANNED``);
planned stops are counted apart and never enter a rate. Exposure is running time only
(``EXPOSURE_SCHEMA``), so the running time after a job's last failure counts: the exponential
rate ``failures / exposure`` is the censored maximum-likelihood estimate, and its exact
Poisson interval comes from the chi-square quantiles (``scipy.stats.chi2``; the lower bound is 0
with no failure).

Units: ``gpu_hour`` (a GPU running for an hour), ``node_hour`` and ``job_hour`` (a job running
for an hour, whatever its size). A job of ``g`` GPUs on ``n`` nodes meets a class at
``rate x g``, ``rate x n`` or ``rate x 1`` per hour of running in these units.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np
import polars as pl
from scipy import special, stats

from toranalyze.fleet.weibull import fit_weibull
from toranalyze.taxonomy import PLANNED, TAXONOMY

UNITS = ("gpu_hour", "node_hour", "job_hour")
CONF = 0.95
ALL_UNEXPECTED = "all_unexpected"
_US_PER_H = 3_600_000_000
# A job whose records carry no timestamp runs on a relative clock from the Unix epoch
# (reconstruct.prepare.relative_times): its hours count, but they fall in no calendar window.
_CALENDAR_FROM = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
# A time past this is a clock or parse error (a log stating year 9999), not a date a job ran on: the
# windows stop here, so an impossible date neither overflows Python's datetime nor adds 400,000 weeks.
_CALENDAR_UNTIL = dt.datetime(2200, 1, 1, tzinfo=dt.UTC)


def poisson_interval(k: np.ndarray | int, exposure: np.ndarray | float, conf: float = CONF) -> tuple[Any, Any, Any]:
    """Rate ``k/exposure`` with its exact (Garwood) interval; arrays welcome. Zero failures give
    a lower bound of 0; zero exposure gives NaN rate and bounds."""
    k = np.asarray(k, dtype=float)
    e = np.asarray(exposure, dtype=float)
    a = (1.0 - conf) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.where(k > 0, stats.chi2.ppf(a, 2 * k) / 2.0, 0.0) / e
        hi = stats.chi2.ppf(1.0 - a, 2 * k + 2) / 2.0 / e
        rate = k / e
    return rate, lo, hi


# --------------------------------------------------------------------------- frames


def attempt_exposure(exposure: pl.DataFrame) -> pl.DataFrame:
    """One row per (run, job, attempt): running hours, GPUs, nodes, and the job's up-time
    (running hours of its earlier attempts) at the attempt's start."""
    return (
        exposure.group_by("run", "job", "attempt")
        .agg(
            pl.col("t_start").min(),
            pl.col("hours").max(),
            # (null when no node row states a count: a sum of nulls would claim 0 GPUs)
            pl.when(pl.col("gpus").is_not_null().any()).then(pl.col("gpus").sum()).alias("gpus"),
            pl.col("nodes").sum(),
            pl.col("job_gpus").max(),
        )
        .sort("run", "job", "attempt")
        .with_columns(pl.col("hours").cum_sum().shift(1, fill_value=0.0).over("run", "job").alias("up_before"))
    )


def job_exposure(exposure: pl.DataFrame) -> pl.DataFrame:
    """One row per job: GPU-, node- and job-hours of running, size and total up-time."""
    att = attempt_exposure(exposure)
    return (
        att.group_by("run", "job")
        .agg(
            (pl.col("hours") * pl.col("gpus")).sum().alias("gpu_hour"),
            (pl.col("hours") * pl.col("nodes")).sum().alias("node_hour"),
            pl.col("hours").sum().alias("job_hour"),
            pl.col("job_gpus").max().fill_null(pl.col("gpus").max()).alias("gpus"),
            pl.col("nodes").max().alias("nodes"),
        )
        .sort("run", "job")
    )


def failures(incidents: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Unexpected incidents with their class (null -> unknown), their job's size and the job's
    up-time (hours) at onset: the onset is the last progress, else the first error, else detection."""
    att = attempt_exposure(exposure).rename({"nodes": "attempt_nodes", "gpus": "attempt_gpus"})
    onset = pl.coalesce("t_last_progress", "t_first_error", "t_detected")
    inc = incidents.filter(~pl.col("planned").fill_null(False)).with_columns(
        pl.col("root_cause").fill_null("unknown").alias("failure_class"), onset.alias("t_onset")
    )
    inc = inc.filter(~pl.col("failure_class").is_in(list(PLANNED)))
    into = ((pl.col("t_onset") - pl.col("t_start")).dt.total_microseconds() / _US_PER_H).clip(0.0, pl.col("hours"))
    return (
        inc.join(att, on=["run", "job", "attempt"], how="left")
        .with_columns((pl.col("up_before").fill_null(0.0) + into.fill_null(0.0)).alias("up_at"))
        .select("run", "job", "attempt", "incident", "failure_class", "nodes", "t_onset", "up_at",
                "job_gpus", "attempt_gpus", "attempt_nodes")
    )


def planned_stops(incidents: pl.DataFrame, job_hours: float) -> dict[str, dict[str, Any]]:
    """Planned stops per class: count and rate per job-hour (reported apart, never failures)."""
    planned = incidents.filter(
        pl.col("planned").fill_null(False) | pl.col("root_cause").is_in(list(PLANNED))
    ).group_by("root_cause").len()
    return {
        str(r["root_cause"]): {"count": int(r["len"]), "per_job_hour": _r(r["len"] / job_hours if job_hours else None)}
        for r in planned.sort("root_cause").iter_rows(named=True)
    }


def _r(v: float | None, nd: int = 9) -> float | None:
    """JSON-friendly rounding (significant digits); None for NaN/inf."""
    if v is None or not math.isfinite(v):
        return None
    return float(f"{v:.{nd}g}")


# --------------------------------------------------------------------------- one class


def exposure_multiplier(unit: str, gpus: float, gpus_per_node: float) -> float:
    """How many units of exposure a job of ``gpus`` GPUs accrues per hour of running."""
    return {"gpu_hour": gpus, "node_hour": gpus / gpus_per_node, "job_hour": 1.0}[unit]


NODE_CATEGORIES = ("gpu", "host", "network")  # hardware fails per node it runs on; the rest per job
DECISIVE_LOGLIK = 2.0  # a unit must beat the category's default by this much to be believed
PER_UNIT = {"gpu": "gpu_hour", "node": "node_hour", "job": "job_hour"}


def scaling(name: str, fit: dict[str, Any]) -> dict[str, str]:
    """How a class scales with job size (per GPU, node or job) and why: the best-fitting exposure
    when its log-likelihood beats the class category's default by ``DECISIVE_LOGLIK`` (or is the
    default), else the category's default (few failures rarely tell the units apart)."""
    default = "node" if name in TAXONOMY and TAXONOMY[name].category in NODE_CATEGORIES else "job"
    per_of = {u: p for p, u in PER_UNIT.items()}
    best = per_of.get(fit.get("best_exposure") or "", default)
    ll = fit.get("loglik") or {}
    top, base = ll.get(PER_UNIT[best]), ll.get(PER_UNIT[default])
    if best == default or top is None or base is None:
        return {"per": best, "source": "fitted", "evidence": f"per {best}: the best fit"
                + (", as its category" if best == default else "")}
    margin = float(top) - float(base)
    if margin >= DECISIVE_LOGLIK:
        return {"per": best, "source": "fitted",
                "evidence": f"per {best}: log-likelihood {margin:.3g} above per {default}, its category's"}
    return {"per": default, "source": "taxonomy",
            "evidence": f"per {default}, as its category; the fit prefers per {best} by only {margin:.2g} "
                        "in log-likelihood"}


def best_exposure(k_per_job: np.ndarray, jobs: pl.DataFrame) -> tuple[str, dict[str, float]]:
    """The unit whose Poisson model (one rate, counts per job proportional to that exposure) has
    the highest log-likelihood; each model has one parameter, so this is also the lowest
    deviance and AIC. GPU- and node-hours tie when every node has as many GPUs."""
    ll: dict[str, float] = {}
    k = k_per_job.astype(float)
    for unit in UNITS:
        e = jobs[unit].to_numpy().astype(float)
        lam = k.sum() / e.sum() if e.sum() > 0 else 0.0
        mu = lam * e
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(k > 0, k * np.log(mu), 0.0) - mu - special.gammaln(k + 1)
        ll[unit] = float(terms.sum())
    prefer = ("node_hour", "gpu_hour", "job_hour")  # ties: GPU- and node-hours are proportional
    best = max(prefer, key=lambda u: (round(ll[u], 9), -prefer.index(u)))
    return best, ll


def _gaps(fail: pl.DataFrame, jobs: pl.DataFrame, unit: str, gpn: float) -> tuple[np.ndarray, np.ndarray]:
    """Times between a job's failures on its up-time clock (from its start), and the censored
    running time after each job's last failure, in hours of ``unit`` exposure (up-time x the
    job's multiplier) so that jobs of every size share one scale."""
    mult = {"gpu_hour": pl.col("gpus"), "node_hour": pl.col("gpus") / gpn, "job_hour": pl.lit(1.0)}[unit]
    j = jobs.select("run", "job", "job_hour", mult.cast(pl.Float64).alias("m"))
    f = fail.select("run", "job", "up_at").join(j, on=["run", "job"], how="inner").sort("run", "job", "up_at")
    gaps = f.with_columns((pl.col("up_at") - pl.col("up_at").shift(1, fill_value=0.0).over("run", "job")).alias("g"))
    observed = (gaps["g"] * gaps["m"]).to_numpy()
    last = f.group_by("run", "job").agg(pl.col("up_at").max())
    cens = j.join(last, on=["run", "job"], how="left").with_columns(
        ((pl.col("job_hour") - pl.col("up_at").fill_null(0.0)) * pl.col("m")).alias("c")
    )
    return observed, cens["c"].to_numpy()


def _rate_block(k: int, exposure: float) -> dict[str, Any]:
    rate, lo, hi = poisson_interval(k, exposure)
    return {"rate": _r(float(rate)), "lo": _r(float(lo)), "hi": _r(float(hi)), "exposure": _r(exposure)}


def fit_class(fail: pl.DataFrame, jobs: pl.DataFrame, gpus_per_node: float) -> dict[str, Any]:
    """Every fit of one class (or of all unexpected failures) over the given jobs."""
    counts = jobs.join(fail.group_by("run", "job").len(), on=["run", "job"], how="left")["len"].fill_null(0)
    k = int(counts.sum())
    tot = {u: float(jobs[u].sum()) for u in UNITS}
    best, ll = best_exposure(counts.to_numpy(), jobs)
    node_days = tot["node_hour"] / 24.0
    per_kday = {key: _r(v * 1000.0) if v is not None else None
                for key, v in _rate_block(k, node_days).items() if key != "exposure"}
    obs, cens = _gaps(fail, jobs, best, gpus_per_node)
    wb = fit_weibull(obs, cens)
    return {
        "failures": k,
        "rates": {u: _rate_block(k, tot[u]) for u in UNITS},
        "per_1000_node_days": per_kday,
        "best_exposure": best,
        "loglik": {u: _r(v) for u, v in ll.items()},
        "weibull": None if wb is None else {**wb.to_dict(), "unit": best},
    }


def mtbf_hours(rate: float, unit: str, gpus: float, gpus_per_node: float) -> float:
    """Mean running hours between failures of a job of ``gpus`` GPUs at ``rate`` per ``unit``."""
    lam = rate * exposure_multiplier(unit, gpus, gpus_per_node)
    return math.inf if lam <= 0 else 1.0 / lam


def mtbf_table(classes: dict[str, dict[str, Any]], sizes: list[int], gpus_per_node: float,
               ) -> list[dict[str, Any]]:
    """Mean running hours between unexpected failures of a job of each size, every class scaled
    per GPU, node or job (its ``scaling``, else its best exposure). The interval is the exact
    Poisson (Garwood) interval of the total count, scaled to the combined rate: exact when the
    classes scale alike, and free of the bias a pseudo-count per class would add."""
    fits = []
    for c in classes.values():
        unit = PER_UNIT.get((c.get("scaling") or {}).get("per", ""), c["best_exposure"])
        fits.append((unit, int(c["failures"]), c["rates"][unit]["exposure"] or 0.0))
    k = sum(n for _, n, e in fits if e > 0)
    a = 1.0 - CONF
    lo_f = stats.chi2.ppf(a / 2, 2 * k) / (2 * k) if k > 0 else 0.0
    hi_f = stats.chi2.ppf(1 - a / 2, 2 * k + 2) / (2 * k) if k > 0 else 0.0
    rows = []
    for g in sizes:
        lam = sum(exposure_multiplier(u, g, gpus_per_node) * n / e for u, n, e in fits if e > 0)
        rows.append({
            "gpus": int(g),
            "mtbf_hours": _r(1.0 / lam if lam > 0 else None),
            "lo": _r(1.0 / (lam * hi_f) if lam > 0 else None),
            "hi": _r(1.0 / (lam * lo_f) if lam > 0 and lo_f > 0 else None),
        })
    return rows


UNKNOWN_SIZE = "unknown"  # the job-size key of jobs whose records state no GPU count


def size_bucket(gpus: pl.Expr) -> pl.Expr:
    """Power-of-two job-size bucket: the smallest 2**k >= gpus (1, 2, 4, 8, ... GPUs); null for a
    job of unknown size."""
    return pl.when(gpus > 0).then((2 ** gpus.cast(pl.Float64).log(2).ceil()).cast(pl.Int64))


def scope_rates(fail: pl.DataFrame, jobs: pl.DataFrame, exposure: pl.DataFrame, window: str = "1w") -> pl.DataFrame:
    """Failure counts and rates (with exact intervals) of all unexpected failures per scope:
    the fleet, each job-size bucket, each node and each calendar window (running time split at
    the window edges). Columns: scope, key, failures, gpu_hour, node_hour, job_hour and
    ``rate_/lo_/hi_`` per unit."""
    f_jobs = fail.group_by("run", "job").len("k")
    j = jobs.join(f_jobs, on=["run", "job"], how="left").with_columns(pl.col("k").fill_null(0))
    fleet = j.select(pl.lit("fleet").alias("scope"), pl.lit("all").alias("key"), pl.col("k").sum().alias("failures"),
                     *[pl.col(u).sum() for u in UNITS])
    size = j.group_by(size_bucket(pl.col("gpus")).cast(pl.String).fill_null(UNKNOWN_SIZE).alias("key")).agg(
        pl.col("k").sum().alias("failures"), *[pl.col(u).sum() for u in UNITS]
    ).select(pl.lit("job_gpus").alias("scope"), "key", "failures", *UNITS)
    node = node_rates(fail, exposure).select(
        pl.lit("node").alias("scope"), pl.col("node").alias("key"), "failures",
        "gpu_hour", "node_hour", pl.lit(None, pl.Float64).alias("job_hour"))
    out = pl.concat([fleet, size.sort("key"), node, window_rates(fail, exposure, window)], how="vertical_relaxed")
    return _with_intervals(out)


def _with_intervals(df: pl.DataFrame) -> pl.DataFrame:
    k = df["failures"].to_numpy()
    cols = []
    for u in UNITS:
        rate, lo, hi = poisson_interval(k, df[u].fill_null(float("nan")).to_numpy())
        cols += [pl.Series(f"rate_{u}", rate), pl.Series(f"lo_{u}", lo), pl.Series(f"hi_{u}", hi)]
    return df.with_columns(cols).with_columns(pl.col("failures").cast(pl.Int64))


def node_rates(fail: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Per node: running node- and GPU-hours and the unexpected failures that implicate it (an
    incident naming several nodes counts once for each)."""
    ex = exposure.filter(pl.col("node").is_not_null()).group_by("node").agg(
        pl.col("node_hours").sum().alias("node_hour"), pl.col("gpu_hours").sum().alias("gpu_hour"))
    f = fail.select("nodes").explode("nodes").drop_nulls().group_by(pl.col("nodes").alias("node")).len("failures")
    return ex.join(f, on="node", how="left").with_columns(pl.col("failures").fill_null(0)).sort("node")


def window_rates(fail: pl.DataFrame, exposure: pl.DataFrame, window: str = "1w") -> pl.DataFrame:
    """Per calendar window (``window`` a polars duration, e.g. 1d, 1w): failures by onset and the
    running time of every attempt clipped to the window."""
    att = exposure.group_by("run", "job", "attempt").agg(
        pl.col("t_start").min(), pl.col("t_end").max(), pl.col("gpus").sum(), pl.col("nodes").sum())
    start, until = _calendar_from(att["t_start"].dtype), _calendar_from(att["t_start"].dtype, _CALENDAR_UNTIL)
    att = (att.filter((pl.col("t_start") >= start) & (pl.col("t_start") < until))
           .with_columns(pl.col("t_end").cast(att["t_start"].dtype).clip(upper_bound=until)))
    if att.is_empty():
        return pl.DataFrame(schema={"scope": pl.String, "key": pl.String, "failures": pl.Int64,
                                    **{u: pl.Float64 for u in UNITS}})
    # each attempt against the windows it spans only (a cross join with every window of a
    # year-long fleet held attempts x windows rows); running time summed in whole µs (128-bit),
    # so a window's hours do not depend on the order a parallel sum takes
    over = (att.with_columns(pl.datetime_ranges(pl.col("t_start").dt.truncate(window), "t_end", window).alias("w0"))
            .explode("w0").with_columns(pl.col("w0").dt.offset_by(window).alias("w1"))
            .with_columns((pl.min_horizontal("t_end", "w1") - pl.max_horizontal("t_start", "w0"))
                          .dt.total_microseconds().cast(pl.Int128).alias("us"))
            .filter(pl.col("us") > 0))

    def hours(weight: pl.Expr) -> pl.Expr:
        return (pl.col("us") * weight.cast(pl.Int128)).sum().cast(pl.Float64) / _US_PER_H

    ex = over.group_by("w0").agg(hours(pl.col("gpus")).alias("gpu_hour"), hours(pl.col("nodes")).alias("node_hour"),
                                 hours(pl.lit(1)).alias("job_hour"))
    onset = fail["t_onset"].dtype
    f = (fail.drop_nulls("t_onset")
         .filter(pl.col("t_onset").is_between(_calendar_from(onset), _calendar_from(onset, _CALENDAR_UNTIL), "left"))
         .group_by(pl.col("t_onset").dt.truncate(window).alias("w0")).len("failures"))
    return ex.join(f, on="w0", how="left").sort("w0").select(
        pl.lit("window").alias("scope"), pl.col("w0").dt.strftime("%Y-%m-%d").alias("key"),
        pl.col("failures").fill_null(0).cast(pl.Int64), *UNITS)


def _calendar_from(dtype: pl.DataType, at: dt.datetime = _CALENDAR_FROM) -> pl.Expr:
    """``at`` (default ``_CALENDAR_FROM``) as a literal of ``dtype`` (naive or zoned, any unit)."""
    zone = getattr(dtype, "time_zone", None)
    return pl.lit(at if zone else at.replace(tzinfo=None)).cast(dtype)


# --------------------------------------------------------------------------- durations


def duration_summary(seconds: np.ndarray) -> dict[str, Any] | None:
    """Quantiles, mean and a lognormal fit (``scipy.stats.lognorm``, location 0) of positive durations."""
    x = np.asarray(seconds, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    if len(x) == 0:
        return None
    q = np.quantile(x, [0.1, 0.5, 0.9, 0.99])
    out: dict[str, Any] = {
        "n": int(len(x)), "mean_s": _r(float(x.mean())),
        **{f"p{p}_s": _r(float(v)) for p, v in zip((10, 50, 90, 99), q, strict=True)},
        "lognormal": None,
    }
    if len(x) >= 2 and np.ptp(x) > 0:
        sigma, _, scale = stats.lognorm.fit(x, floc=0)
        out["lognormal"] = {"mu": _r(math.log(scale)), "sigma": _r(float(sigma)), "median_s": _r(float(scale))}
    return out


def downtime_parts(incidents: pl.DataFrame, attempts: pl.DataFrame) -> pl.DataFrame:
    """Per unexpected incident: detection (onset -> detected), recovery (detected -> resumed) and
    its parts queue (detected -> next attempt's start) and start-up (start -> first step, which
    includes the checkpoint reload), in seconds."""
    nxt = attempts.select("run", "job", (pl.col("attempt") - 1).alias("attempt"),
                          pl.col("t_start").alias("next_start"), pl.col("t_first_step_start").alias("next_first"))
    inc = incidents.filter(~pl.col("planned").fill_null(False)).join(nxt, on=["run", "job", "attempt"], how="left")
    onset = pl.coalesce("t_last_progress", "t_first_error", "t_detected")

    def secs(a: str | pl.Expr, b: str | pl.Expr) -> pl.Expr:
        a_, b_ = (pl.col(a) if isinstance(a, str) else a), (pl.col(b) if isinstance(b, str) else b)
        return (b_ - a_).dt.total_microseconds() / 1e6

    return inc.select(
        secs(onset, "t_detected").alias("detection"),
        secs("t_detected", "t_resumed").alias("recovery"),
        secs("t_detected", "next_start").alias("queue"),
        secs("next_start", "next_first").alias("startup"),
        secs(onset, "t_resumed").alias("downtime"),
    )


def distributions(incidents: pl.DataFrame, attempts: pl.DataFrame) -> dict[str, Any]:
    parts = downtime_parts(incidents, attempts)
    return {c: duration_summary(parts[c].drop_nulls().to_numpy()) for c in parts.columns}


def all_scopes(fail: pl.DataFrame, jobs: pl.DataFrame, exposure: pl.DataFrame, window: str = "1w") -> pl.DataFrame:
    """``scope_rates`` for all unexpected failures and for each class, with a ``failure_class``
    column (``all_unexpected`` for the total)."""
    parts = [scope_rates(fail, jobs, exposure, window).with_columns(pl.lit(ALL_UNEXPECTED).alias("failure_class"))]
    for cls in sorted(fail["failure_class"].unique().to_list()):
        one = fail.filter(pl.col("failure_class") == cls)
        parts.append(scope_rates(one, jobs, exposure, window).with_columns(pl.lit(cls).alias("failure_class")))
    return pl.concat(parts, how="vertical_relaxed")


def scope_records(scopes: pl.DataFrame, keep: tuple[str, ...] = ("job_gpus", "window")) -> list[dict[str, Any]]:
    """JSON rows of the scope table (node rows are left to the lemon test: they are many)."""
    rows = []
    for r in scopes.filter(pl.col("scope").is_in(list(keep))).iter_rows(named=True):
        rows.append({
            "scope": r["scope"], "key": r["key"], "class": r["failure_class"], "failures": int(r["failures"]),
            "rates": {u: {"rate": _r(r[f"rate_{u}"]), "lo": _r(r[f"lo_{u}"]), "hi": _r(r[f"hi_{u}"]),
                          "exposure": _r(r[u])} for u in UNITS},
        })
    return rows
