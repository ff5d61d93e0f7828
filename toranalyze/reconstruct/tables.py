"""The run tables the analysis gives, as schema constants (documented in docs/tables.md): attempts,
incidents, slow periods, the TOR ledger and each attempt's resources. They sit apart from the
stages that fill them, so that the stages and their contracts (contracts.py) both read them."""

from __future__ import annotations

import polars as pl

from toranalyze.schema import frame_schema

UTC_US = pl.Datetime("us", "UTC")
# The ledger's buckets (docs/ledger.md), and the parts recovery is split into.
BUCKETS = ("useful", "slowdown", "rework", "checkpoint", "detection", "recovery", "other")
RECOVERY_PARTS = ("recovery_queue", "recovery_startup", "recovery_ckpt_load")

ATTEMPTS_SCHEMA = frame_schema(
    {
        "job": pl.String,
        "attempt": pl.Int32,
        "job_id": pl.String,
        "t_start": UTC_US,
        "t_end": UTC_US,
        "state": pl.String,
        "exit_code": pl.String,
        "first_step": pl.Int64,
        "last_step": pl.Int64,
        "resumed_from": pl.Int64,
        "ckpt_loaded": pl.Int64,
        "t_first_step_start": UTC_US,
        "t_last_step_end": UTC_US,
        "n_step_records": pl.Int64,
        "steps_lost": pl.Int64,
    }
)

INCIDENTS_SCHEMA = frame_schema(
    {
        "job": pl.String,
        "incident": pl.Int32,
        "attempt": pl.Int32,
        "root_cause": pl.String,
        "planned": pl.Boolean,
        "symptoms": pl.List(pl.String),
        "nodes": pl.List(pl.String),
        "ranks": pl.List(pl.Int32),
        "t_last_progress": pl.Datetime("us", "UTC"),
        "t_first_error": pl.Datetime("us", "UTC"),
        "t_detected": pl.Datetime("us", "UTC"),
        "t_restart": pl.Datetime("us", "UTC"),
        "t_resumed": pl.Datetime("us", "UTC"),
        "t_caught_up": pl.Datetime("us", "UTC"),
        "lost_steps": pl.Int64,
        "lost_time_s": pl.Float64,
        "downtime_s": pl.Float64,
        "confidence": pl.String,
        "reason": pl.String,
        "evidence": pl.List(pl.String),
    }
)

SLOW_PERIODS_SCHEMA = frame_schema(
    {
        "job": pl.String,
        "period": pl.Int32,
        "attempt": pl.Int32,
        "start": pl.Datetime("us", "UTC"),
        "end": pl.Datetime("us", "UTC"),
        "first_step": pl.Int64,
        "last_step": pl.Int64,
        "steps": pl.Int64,
        "factor": pl.Float64,
        "median_step_time_s": pl.Float64,
        "slowdown_s": pl.Float64,
        "node": pl.String,
        "rank": pl.Int32,
        "evidence": pl.List(pl.String),
    }
)

TOR_SCHEMA = frame_schema(
    {
        "job": pl.String,
        "path": pl.String,
        "job_ids": pl.List(pl.String),
        "identity": pl.String,
        "t_start": pl.Datetime("us", "UTC"),
        "t_end": pl.Datetime("us", "UTC"),
        **{f"{b}_us": pl.Int64 for b in ("t_obs", *BUCKETS, *RECOVERY_PARTS)},
        **{f"{b}_s": pl.Float64 for b in ("t_obs", *BUCKETS, *RECOVERY_PARTS)},
        "eval_s": pl.Float64,
        "tor": pl.Float64,
        "ideal_step_time_s": pl.Float64,
        "ideal_step_source": pl.String,
        "n_attempts": pl.Int32,
        "n_incidents": pl.Int32,
        "steps_preserved": pl.Int64,
        "steps_lost": pl.Int64,
        "ended_cleanly": pl.Boolean,
    }
)

RESOURCES_SCHEMA = frame_schema(
    {
        "job": pl.String,
        "attempt": pl.Int32,
        "gpus": pl.Int32,  # null when no record states a count
        "gpus_source": pl.String,  # the family of the record stating it (slurm, kubernetes, nccl, trainer)
        "nodes": pl.Int32,  # distinct nodes named, or a stated node count when larger
        "node_list": pl.List(pl.String),  # sorted
    }
)
