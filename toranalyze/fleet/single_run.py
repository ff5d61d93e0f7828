"""The four fleet tables of one analyzed run, so ``analyze`` can write that run's rates.json.

Where each attempt ran is read off the events: the nodes and ranks of the events of the job's
files inside the attempt's time span. GPUs are the distinct ranks seen (else 8 per node seen);
an attempt with no node named gets one node-less exposure row. ``toranalyze fleet`` builds the
same tables for many runs; this is the small single-run path.
"""

from __future__ import annotations

import polars as pl

from toranalyze.fleet.schema import EXPOSURE_SCHEMA, FLEET_ATTEMPTS_SCHEMA, FLEET_INCIDENTS_SCHEMA, JOBS_SCHEMA

DEFAULT_GPUS_PER_NODE = 8
_H = 3_600_000_000


def _conform(df: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    return df.select([pl.col(c).cast(t) if c in df.columns else pl.lit(None, t).alias(c) for c, t in schema.items()])


def _placement(attempts: pl.DataFrame, tor: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Per (job, attempt): the nodes and the number of distinct ranks its events name."""
    paths = tor.select("job", "path").drop_nulls()
    files = events.select("file").unique().join(paths, how="cross").filter(
        pl.col("file").str.starts_with(pl.col("path")))
    ev = (events.select("file", "ts", "node", "rank").drop_nulls("ts").join(files, on="file")
          .sort("ts"))
    att = attempts.select("job", "attempt", "t_start", "t_end").drop_nulls("t_start").sort("t_start")
    hit = ev.join_asof(att, left_on="ts", right_on="t_start", by="job", strategy="backward",
                       check_sortedness=False).filter(
        pl.col("ts") <= pl.col("t_end"))
    return hit.group_by("job", "attempt").agg(
        pl.col("node").drop_nulls().unique().sort().alias("node_list"),
        pl.col("rank").drop_nulls().n_unique().alias("r"))


def run_frames(attempts: pl.DataFrame, incidents: pl.DataFrame, tor: pl.DataFrame, events: pl.DataFrame,
               run: str = "") -> dict[str, pl.DataFrame]:
    """jobs, attempts, incidents and exposure (the fleet schemas) of one run's analysis."""
    place = _placement(attempts, tor, events)
    n_nodes = pl.col("node_list").list.len()
    att = attempts.join(place, on=["job", "attempt"], how="left").with_columns(
        pl.lit(run).alias("run"), pl.col("node_list").fill_null(pl.lit([], pl.List(pl.String))),
        pl.when(pl.col("r") > 0).then(pl.col("r")).when(n_nodes > 0).then(n_nodes * DEFAULT_GPUS_PER_NODE)
        .otherwise(None).alias("gpus"))
    job_gpus = att.group_by("job").agg(pl.col("gpus").max().alias("job_gpus"), n_nodes.max().alias("job_nodes"))
    att = att.join(job_gpus, on="job", how="left")
    hours = (pl.col("t_end") - pl.col("t_start")).dt.total_microseconds() / _H
    per_node = pl.col("gpus") / pl.max_horizontal(n_nodes, pl.lit(1))
    expo = att.filter(pl.col("t_end").is_not_null()).with_columns(
        pl.when(n_nodes > 0).then(pl.col("node_list")).otherwise(pl.lit([None], pl.List(pl.String))).alias("node"),
        pl.when(n_nodes > 0).then(per_node).otherwise(pl.col("gpus")).alias("g"),
        pl.when(n_nodes > 0).then(1).otherwise(None).alias("n"),
    ).explode("node").select(
        "run", "job", "attempt", "node", "t_start", "t_end", hours.alias("hours"), pl.col("g").alias("gpus"),
        pl.col("n").alias("nodes"), (hours * pl.col("g")).alias("gpu_hours"), (hours * pl.col("n")).alias("node_hours"),
        "job_gpus")
    jobs = tor.join(job_gpus, on="job", how="left").with_columns(
        pl.lit(run).alias("run"), pl.col("job_gpus").alias("gpus"), pl.col("job_nodes").alias("nodes"),
        pl.col("t_obs_s").alias("span_s"))
    return {
        "jobs": _conform(jobs, JOBS_SCHEMA),
        "attempts": _conform(att, FLEET_ATTEMPTS_SCHEMA),
        "incidents": _conform(incidents.with_columns(pl.lit(run).alias("run")), FLEET_INCIDENTS_SCHEMA),
        "exposure": _conform(expo.with_columns(pl.col("gpus").fill_null(0), pl.col("gpu_hours").fill_null(0.0),
                                               pl.col("node_hours").fill_null(0.0)), EXPOSURE_SCHEMA),
    }
