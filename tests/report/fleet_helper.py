"""Fleet tables (``toranalyze.fleet.schema``) built from one per-run analysis over a simulated fleet.

A stand-in for the fleet command in the report's tests and benchmark: each job directory is a
run; exposure rows are each attempt's running time on each node its records name.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from toranalyze.fleet.schema import EXPOSURE_SCHEMA, FLEET_ATTEMPTS_SCHEMA, FLEET_INCIDENTS_SCHEMA, JOBS_SCHEMA
from toranalyze.ingest.pipeline import ingest
from toranalyze.reconstruct.analysis import Analysis, analyze_events
from toranalyze.reconstruct.tables import BUCKETS


def conform(df: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    return df.select([(pl.col(c) if c in df.columns else pl.lit(None)).cast(t).alias(c) for c, t in schema.items()])


def _with_run(df: pl.DataFrame, runs: dict[str, str]) -> pl.DataFrame:
    """``run`` from the analysis' job key, and ``job`` as the job's name inside its run."""
    return df.with_columns(pl.col("job").replace_strict(runs, default=None).alias("run"),
                           pl.col("job").str.split("::").list.last().alias("job"))


def fleet_tables(an: Analysis, events: pl.DataFrame, root: str,
                 ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    runs = {k: os.path.relpath(p, root) for k, p in an.tor.select("job", "path").iter_rows()}
    size_rows = []
    for key, path, ids in an.tor.select("job", "path", "job_ids").iter_rows():
        ev = events.filter(pl.col("file").str.starts_with(path + "/")
                           & (pl.col("job_id").is_null() | pl.col("job_id").is_in(ids or [])))
        nodes = sorted(ev["node"].drop_nulls().unique().to_list())
        size_rows.append({"job": key, "gpus": ev["n_gpus"].max(), "nodes": len(nodes), "node_list": nodes})
    sizes = _with_run(pl.DataFrame(size_rows, schema={"job": pl.String, "gpus": pl.Int32, "nodes": pl.Int32,
                                                      "node_list": pl.List(pl.String)}), runs)
    att = _with_run(an.attempts, runs).join(sizes, on=["run", "job"], how="left")
    incidents = _with_run(an.incidents, runs)
    hours = ((pl.col("t_end") - pl.col("t_start")).dt.total_microseconds() / 3.6e9).clip(0, None)
    exposure = (att.with_columns(hours.alias("hours"), pl.col("gpus").alias("job_gpus")).explode("node_list")
                .rename({"node_list": "node"})
                .with_columns((pl.col("gpus") // pl.col("nodes").clip(1, None)).alias("_g"))
                .with_columns(pl.col("_g").alias("gpus"), pl.lit(1).alias("nodes"),
                              (pl.col("hours") * pl.col("_g")).alias("gpu_hours"), pl.col("hours").alias("node_hours")))
    counts = incidents.group_by("run", "job").agg(pl.len().alias("n_incidents"),
                                                  (~pl.col("planned")).sum().alias("n_unexpected"),
                                                  pl.col("planned").sum().alias("n_planned"))
    jobs = (_with_run(an.tor, runs).join(sizes, on=["run", "job"], how="left")
            .join(counts, on=["run", "job"], how="left")
            .with_columns(pl.col("t_obs_s").alias("span_s"),
                          pl.col(["n_incidents", "n_unexpected", "n_planned"]).fill_null(0),
                          ((pl.col("detection_s") + pl.col("recovery_s") + pl.col("rework_s"))
                           * pl.col("gpus") / 3600).alias("lost_gpu_hours"),
                          (pl.col("run") + "/report.html").alias("report")))
    assert all(f"{b}_s" in jobs.columns for b in BUCKETS)
    return (conform(jobs, JOBS_SCHEMA), conform(att, FLEET_ATTEMPTS_SCHEMA),
            conform(incidents, FLEET_INCIDENTS_SCHEMA), conform(exposure, EXPOSURE_SCHEMA))


def simulated_fleet(root: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Analyse every job directory under ``root`` (one pass) and return the four fleet tables."""
    result = ingest([str(root)])
    an = analyze_events(result.events)
    return fleet_tables(an, result.events, str(root))


SIZES = (1, 2, 4, 8, 16, 32)


def replicate(jobs: pl.DataFrame, attempts: pl.DataFrame, incidents: pl.DataFrame, exposure: pl.DataFrame,
              copies: int, hours_apart: float = 6.0, node_pool: int = 40,
              ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """A bigger fleet from a few analysed runs: copy ``c`` is shifted by ``c × hours_apart``, runs on
    ``SIZES[c % 6]`` times the GPUs, gets its own run name and draws its nodes from a pool (so
    some nodes recur across jobs, as in a real fleet)."""
    def one(c: int) -> tuple[pl.DataFrame, ...]:
        shift = pl.duration(microseconds=int(c * hours_apart * 3.6e9))
        f = SIZES[c % len(SIZES)]
        run = pl.col("run") + f"-{c:04d}"
        times = ("t_start", "t_end", "t_first_step_start", "t_last_step_end", "t_last_progress", "t_first_error",
                 "t_detected", "t_restart", "t_resumed", "t_caught_up")

        def move(df: pl.DataFrame) -> pl.DataFrame:
            return df.with_columns(run.alias("run"), *[(pl.col(t) + shift).alias(t) for t in times if t in df.columns])

        node = pl.col("node") + f"-p{c % node_pool}"
        j = move(jobs).with_columns((pl.col("gpus") * f).alias("gpus"), pl.col("report"),
                                    (pl.col("lost_gpu_hours") * f).alias("lost_gpu_hours"))
        a = move(attempts).with_columns((pl.col("gpus") * f).alias("gpus"),
                                        pl.col("node_list").list.eval(pl.element() + f"-p{c % node_pool}"))
        i = move(incidents).with_columns(pl.col("nodes").list.eval(pl.element() + f"-p{c % node_pool}"))
        e = move(exposure).with_columns(node.alias("node"), (pl.col("job_gpus") * f).alias("job_gpus"),
                                        (pl.col("gpu_hours") * f).alias("gpu_hours"), (pl.col("gpus") * f).alias("gpus"))
        return j, a, i, e

    parts = [one(c) for c in range(copies)]
    return tuple(pl.concat([p[k] for p in parts]) for k in range(4))  # type: ignore[return-value]
