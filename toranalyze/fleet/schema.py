"""The fleet tables: what ``toranalyze fleet`` stores and what the fits read.

Every table carries ``run`` (the run's id in the fleet store: its path relative to the parent of
the input root it was found under, e.g. ``fleet/fleet-003``; see docs/fleet.md) next to ``job``
(the job's name inside the run), so two runs never mix.
Times are UTC microseconds. Exposure is *running* time only: an attempt from its start to its end
(queueing before it and down time between attempts are not exposure).
"""

from __future__ import annotations

import polars as pl

from toranalyze.reconstruct.tables import ATTEMPTS_SCHEMA, BUCKETS, INCIDENTS_SCHEMA
from toranalyze.schema import frame_schema

UTC_US = pl.Datetime("us", "UTC")

# One row per job of every run.
JOBS_SCHEMA = frame_schema(
    {
        "run": pl.String,
        "job": pl.String,
        "gpus": pl.Int32,  # GPUs the job ran on (largest attempt); null when no source says
        "nodes": pl.Int32,  # nodes the job ran on (largest attempt)
        "t_start": UTC_US,
        "t_end": UTC_US,
        "span_s": pl.Float64,  # observed wall time (the ledger's t_obs)
        "tor": pl.Float64,
        **{f"{b}_s": pl.Float64 for b in BUCKETS},
        "n_attempts": pl.Int32,
        "n_incidents": pl.Int32,
        "n_unexpected": pl.Int32,  # incidents that are failures (not planned)
        "n_planned": pl.Int32,  # preemption, maintenance, wall-time limit, user cancel
        "lost_gpu_hours": pl.Float64,  # (detection + recovery + rework) x gpus
        "report": pl.String,  # the job report's path relative to the fleet directory, if written
    }
)

# One row per attempt of every job: the analysis' attempts plus where and on how much it ran.
FLEET_ATTEMPTS_SCHEMA = frame_schema(
    {"run": pl.String, **ATTEMPTS_SCHEMA, "gpus": pl.Int32, "gpus_source": pl.String,
     "node_list": pl.List(pl.String)}
)

# One row per incident of every job (the analysis' incidents with their run).
FLEET_INCIDENTS_SCHEMA = frame_schema({"run": pl.String, **INCIDENTS_SCHEMA})

# Running time per (run, job, attempt, node). A node-less attempt (no source names its nodes)
# has one row with node null and its whole size in gpus/nodes.
EXPOSURE_SCHEMA = frame_schema(
    {
        "run": pl.String,
        "job": pl.String,
        "attempt": pl.Int32,
        "node": pl.String,
        "t_start": UTC_US,
        "t_end": UTC_US,
        "hours": pl.Float64,  # running hours of the attempt
        "gpus": pl.Int32,  # GPUs this row stands for (the node's, or the attempt's when node is null)
        "nodes": pl.Int32,  # nodes this row stands for (1, or the attempt's count when node is null)
        "gpu_hours": pl.Float64,  # hours x gpus
        "node_hours": pl.Float64,  # hours x nodes
        "job_gpus": pl.Int32,  # the job's size (for job-size buckets)
    }
)
