"""One run's analysis -> its rows of the four fleet tables (pure: frames in, frames out).

Job keys and evidence paths are made relative to the run's directory, so a run's rows do not
depend on where the run was found or how its path was spelled.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from toranalyze.fleet.schema import EXPOSURE_SCHEMA, FLEET_ATTEMPTS_SCHEMA, FLEET_INCIDENTS_SCHEMA, JOBS_SCHEMA
from toranalyze.reconstruct.analysis import Analysis
from toranalyze.reconstruct.tables import BUCKETS
from toranalyze.taxonomy import PLANNED

TABLES = ("jobs", "attempts", "incidents", "exposure")
SCHEMAS = {
    "jobs": JOBS_SCHEMA,
    "attempts": FLEET_ATTEMPTS_SCHEMA,
    "incidents": FLEET_INCIDENTS_SCHEMA,
    "exposure": EXPOSURE_SCHEMA,
}
# Row order inside a run (the store concatenates runs in id order): deterministic outputs.
SORT_KEYS = {
    "jobs": ["job"],
    "attempts": ["job", "attempt"],
    "incidents": ["job", "incident"],
    "exposure": ["job", "attempt", "node"],
}
HOUR_US = 3_600_000_000


@dataclass
class RunTables:
    jobs: pl.DataFrame
    attempts: pl.DataFrame
    incidents: pl.DataFrame
    exposure: pl.DataFrame

    def get(self, name: str) -> pl.DataFrame:
        frame: pl.DataFrame = getattr(self, name)
        return frame


def empty_tables() -> RunTables:
    return RunTables(*(pl.DataFrame(schema=SCHEMAS[t]) for t in TABLES))


def _strip(col: str, prefix: str) -> pl.Expr:
    """'<run dir>::name' -> 'name'; '<run dir>/sub::name' -> 'sub::name'; anything else unchanged."""
    c = pl.col(col)
    return (
        pl.when(c.str.starts_with(prefix + "::"))
        .then(c.str.slice(len(prefix) + 2))
        .when(c.str.starts_with(prefix + "/"))
        .then(c.str.slice(len(prefix) + 1))
        .otherwise(c)
    )


def _relative(df: pl.DataFrame, run_dir: str) -> pl.DataFrame:
    df = df.with_columns(_strip("job", run_dir).alias("job"))
    if "evidence" in df.columns:
        prefix = run_dir.rstrip("/") + "/"
        df = df.with_columns(
            pl.col("evidence").list.eval(
                pl.when(pl.element().str.starts_with(prefix))
                .then(pl.element().str.slice(len(prefix)))
                .otherwise(pl.element())
            )
        )
    return df


def _conform(df: pl.DataFrame, name: str, run: str) -> pl.DataFrame:
    schema = SCHEMAS[name]
    df = df.with_columns(pl.lit(run).alias("run"))
    cols = [pl.col(c).cast(t) if c in df.columns else pl.lit(None, t).alias(c) for c, t in schema.items()]
    return df.select(cols).sort(SORT_KEYS[name], nulls_last=True)


# Root causes whose attempt stopped making progress long before anything was logged.
STALLS = ("hang", "collective_timeout")

def exposure_rows(attempts: pl.DataFrame, incidents: pl.DataFrame, job_gpus: pl.DataFrame) -> pl.DataFrame:
    """Running time per attempt and node (the hosts the logs do not name as one node-less row).
    An attempt runs from its start to its end, or, when it
    was interrupted, to the incident's first error (else, and for a hang, its last progress): detection and
    down time are not exposure, and neither is queueing (an attempt starts on its nodes).

    ``attempts``: job, attempt, t_start, t_end, gpus, nodes, node_list. ``job_gpus``: job, job_gpus.
    """
    # A hang stopped running at its last progress: what follows (its detector's timeout, the kill) is
    # detection, not exposure.
    stalled = pl.col("root_cause").is_in(STALLS)
    end = pl.when(stalled).then(pl.col("t_last_progress")).otherwise(pl.coalesce("t_first_error", "t_last_progress"))
    stop = incidents.group_by("job", "attempt").agg(end.min().alias("_stop"))
    a = attempts.join(stop, on=["job", "attempt"], how="left").with_columns(
        pl.min_horizontal("t_end", "_stop").alias("_end")
    )
    a = a.with_columns(
        pl.max_horizontal("_end", "t_start").alias("t_end"),
        pl.col("nodes").fill_null(pl.col("node_list").list.len()).alias("nodes"),
    ).with_columns(((pl.col("t_end") - pl.col("t_start")).dt.total_microseconds() / HOUR_US).alias("hours"))
    a = a.join(job_gpus, on="job", how="left")
    # Each named node runs its share of the attempt's GPUs (nodes: the hosts named, or the
    # scheduler's count when larger); the hosts no record names (an allocation of four of which the
    # logs name one) are one node-less row, so a named node's exposure is not the whole attempt's.
    named = pl.col("node_list").list.len()
    share = pl.max_horizontal(named, pl.col("nodes").fill_null(0))
    per_node = (
        a.filter(named > 0)
        .with_columns(
            # (at least one a node: a stated count smaller than the nodes named, often a per-node or
            # per-task count, would round to none)
            (pl.col("gpus") / share).round().clip(lower_bound=1).cast(pl.Int32).alias("gpus"),
            pl.lit(1, pl.Int32).alias("nodes"),
        )
        .explode("node_list")
        .rename({"node_list": "node"})
    )
    unnamed = (
        a.filter((named > 0) & (pl.col("nodes") > named))
        .with_columns(
            (pl.col("gpus") - (pl.col("gpus") / share).round().clip(lower_bound=1) * named).clip(lower_bound=0)
            .cast(pl.Int32).alias("gpus"),
            (pl.col("nodes") - named).cast(pl.Int32).alias("nodes"),
            pl.lit(None, pl.String).alias("node"),
        )
    )
    whole = (
        a.filter(named == 0)
        .drop("node_list")
        .with_columns(pl.lit(None, pl.String).alias("node"), pl.when(pl.col("nodes") > 0).then(pl.col("nodes")))
    )
    cols = ["job", "attempt", "node", "t_start", "t_end", "hours", "gpus", "nodes", "job_gpus"]
    rows = pl.concat([per_node.select(cols), unnamed.select(cols), whole.select(cols)], how="vertical_relaxed")
    return rows.with_columns(
        (pl.col("hours") * pl.col("gpus")).alias("gpu_hours"),
        (pl.col("hours") * pl.col("nodes")).alias("node_hours"),
    )


def job_rows(tor: pl.DataFrame, attempts: pl.DataFrame, incidents: pl.DataFrame) -> pl.DataFrame:
    """One row per job: size (largest attempt), span, TOR, ledger, counts and lost GPU-hours."""
    size = attempts.group_by("job").agg(pl.col("gpus").max(), pl.col("nodes").max())
    planned = pl.col("root_cause").is_in(sorted(PLANNED))
    counts = incidents.group_by("job").agg(
        pl.len().alias("n_incidents"),
        (~planned).sum().alias("n_unexpected"),
        planned.sum().alias("n_planned"),
    )
    lost = (pl.col("detection_s") + pl.col("recovery_s") + pl.col("rework_s")) * pl.col("gpus") / 3600.0
    return (
        tor.drop("n_incidents")
        .join(size, on="job", how="left")
        .join(counts, on="job", how="left")
        .with_columns(
            pl.col("t_obs_s").alias("span_s"),
            *[pl.col(c).fill_null(0) for c in ("n_incidents", "n_unexpected", "n_planned")],
        )
        .with_columns(lost.alias("lost_gpu_hours"))
        .select("job", "gpus", "nodes", "t_start", "t_end", "span_s", "tor", *[f"{b}_s" for b in BUCKETS],
                "n_attempts", "n_incidents", "n_unexpected", "n_planned", "lost_gpu_hours")
    )


def run_tables(run: str, run_dir: str, analysis: Analysis) -> RunTables:
    """The four fleet tables of one run (``run``: its id; ``run_dir``: the directory its files
    were read from, stripped from job keys and evidence)."""
    tor = _relative(analysis.tor, run_dir)
    incidents = _relative(analysis.incidents, run_dir)
    res = _relative(analysis.resources, run_dir)
    attempts = _relative(analysis.attempts, run_dir).join(res, on=["job", "attempt"], how="left")
    attempts = attempts.with_columns(pl.col("node_list").fill_null(pl.lit([], pl.List(pl.String))))
    jobs = job_rows(tor, attempts, incidents)
    job_gpus = jobs.select("job", pl.col("gpus").alias("job_gpus"))
    exposure = exposure_rows(attempts, incidents, job_gpus)
    return RunTables(
        jobs=_conform(jobs, "jobs", run),
        attempts=_conform(attempts, "attempts", run),
        incidents=_conform(incidents, "incidents", run),
        exposure=_conform(exposure, "exposure", run),
    )
