"""One run's analysis -> its rows of the four fleet tables (pure: frames in, frames out).

Job keys and evidence paths are made relative to the run's directory, so a run's rows do not
depend on where the run was found or how its path was spelled.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from toranalyze.fleet.schema import EXPOSURE_SCHEMA, FLEET_ATTEMPTS_SCHEMA, FLEET_INCIDENTS_SCHEMA, JOBS_SCHEMA
from toranalyze.reconstruct.analysis import Analysis
from toranalyze.reconstruct.api import divided
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


def _strip(col: str) -> pl.Expr:
    """'<run dir>::name' -> 'name'; '<run dir>/sub::name' -> 'sub::name'; anything else unchanged
    (``_dir``: the row's run directory)."""
    c, d = pl.col(col), pl.col("_dir")
    return (
        pl.when(c.str.starts_with(d + "::"))
        .then(c.str.slice(d.str.len_chars() + 2))
        .when(c.str.starts_with(d + "/"))
        .then(c.str.slice(d.str.len_chars() + 1))
        .otherwise(c)
    )


def _relative(df: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """``df`` with ``run`` and its job keys and evidence paths relative to the run's directory.
    ``runs``: job (the analysis' key), run (id), _dir (the directory its files were read from)."""
    df = df.join(runs, on="job", how="left", maintain_order="left").with_columns(_strip("job").alias("job"))
    if "evidence" in df.columns and df.height:
        # (one path a row of a flat frame: an element of a list cannot see its row's directory)
        flat = df.select(pl.int_range(pl.len()).alias("_i"), "_dir", "evidence").explode(
            "evidence", empty_as_null=True)
        e, prefix = pl.col("evidence"), pl.col("_dir").str.strip_chars_end("/") + "/"
        flat = flat.with_columns(
            pl.when(e.str.starts_with(prefix)).then(e.str.slice(prefix.str.len_chars())).otherwise(e).alias("evidence"))
        lists = flat.group_by("_i", maintain_order=True).agg(pl.col("evidence").drop_nulls())
        rel = lists["evidence"].cast(df.schema["evidence"])
        df = df.with_columns(pl.when(pl.col("evidence").is_not_null()).then(rel).alias("evidence"))
    return df.drop("_dir")


def _conform(df: pl.DataFrame, name: str) -> pl.DataFrame:
    schema = SCHEMAS[name]
    cols = [pl.col(c).cast(t) if c in df.columns else pl.lit(None, t).alias(c) for c, t in schema.items()]
    return df.select(cols).sort(["run", *SORT_KEYS[name]], nulls_last=True)


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
    ).with_columns(((pl.col("t_end") - pl.col("t_start")).dt.total_microseconds()).pipe(
        divided, HOUR_US).alias("hours"))
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
    lost = divided((pl.col("detection_s") + pl.col("recovery_s") + pl.col("rework_s")) * pl.col("gpus"), 3600.0)
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
    keys = pl.concat([analysis.tor["job"], analysis.attempts["job"], analysis.incidents["job"]]).unique()
    return batch_tables(analysis, pl.DataFrame({"job": keys, "run": run, "_dir": run_dir},
                                               schema={"job": pl.String, "run": pl.String, "_dir": pl.String}))


def batch_tables(analysis: Analysis, runs: pl.DataFrame) -> RunTables:
    """The four fleet tables of the runs analysed together in ``analysis``. ``runs``: one row per
    job key of the analysis with its run's id (``run``) and directory (``_dir``), stripped from job
    keys and evidence. Rows are computed on the analysis' keys (unique across runs) and made
    relative last, so two runs' jobs of one name never meet."""
    attempts = analysis.attempts.join(analysis.resources, on=["job", "attempt"], how="left")
    attempts = attempts.with_columns(pl.col("node_list").fill_null(pl.lit([], pl.List(pl.String))))
    jobs = job_rows(analysis.tor, attempts, analysis.incidents)
    job_gpus = jobs.select("job", pl.col("gpus").alias("job_gpus"))
    exposure = exposure_rows(attempts, analysis.incidents, job_gpus)
    return RunTables(
        jobs=_conform(_relative(jobs, runs), "jobs"),
        attempts=_conform(_relative(attempts, runs), "attempts"),
        incidents=_conform(_relative(analysis.incidents, runs), "incidents"),
        exposure=_conform(_relative(exposure, runs), "exposure"),
    )
