"""The analysis's public types: its options, its result and the attempts table's schema
(documented in docs/tables.md). Shared by the global steps, the job groups and their combination."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from toranalyze.reconstruct.tables import RESOURCES_SCHEMA

US = 1_000_000
UTC_US = pl.Datetime("us", "UTC")
MAX_US = 2**62  # about 146,000 years: the bound of any time span a product of counts can reach


def micros(x: pl.Expr) -> pl.Expr:
    """A float count of µs as Int64, rounded; NaN is null and a value past ±MAX_US saturates.
    Steps and step times read from mangled lines (a counter of 19 digits, a time of 1e300 ms) make
    products no clock could, which must not stop the analysis of the rest."""
    return x.fill_nan(None).clip(-MAX_US, MAX_US).round().cast(pl.Int64)


def divided(x: pl.Expr, by: float) -> pl.Expr:
    """``x / by``, exactly on every row. Polars divides a column of more than one row by a scalar
    through the scalar's reciprocal (off by an ulp on about a quarter of the values) and a one-row
    column exactly; divided by a column, every row is exact. A value must not depend on how many
    rows it was computed with: a job alone, in a group of a partition or in a fleet's batch."""
    return x / (pl.int_range(pl.len()) * 0 + by)



@dataclass(frozen=True)
class AnalysisOptions:
    """Knobs of the reconstruction. ``ideal_step_time_s`` (or tokens/s with tokens per step)
    overrides the estimated ideal step time for every job."""

    ideal_step_time_s: float | None = None
    tokens_per_second: float | None = None
    tokens_per_step: float | None = None
    slow_threshold: float = 0.03
    slow_min_steps: int = 5
    warmup_steps: int = 2
    incident_pre_s: float = 60.0
    incident_post_s: float = 120.0
    hang_stall_factor: float = 10.0
    hang_min_stall_s: float = 120.0

    def user_ideal_s(self) -> float | None:
        if self.ideal_step_time_s is not None:
            return float(self.ideal_step_time_s)
        if self.tokens_per_second and self.tokens_per_step:
            return float(self.tokens_per_step) / float(self.tokens_per_second)
        return None


@dataclass
class Analysis:
    attempts: pl.DataFrame
    incidents: pl.DataFrame
    slow_periods: pl.DataFrame
    tor: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    # Nodes and GPUs per attempt (reconstruct/resources.py): what the fleet's exposure is built on.
    resources: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RESOURCES_SCHEMA))
    # For the report: placed step rows (job, attempt, step, start, end, n, n_lost, d_us; times in
    # UTC µs) and blocking checkpoint saves (job, start, end). Not written as tables.
    progress: pl.DataFrame | None = None
    checkpoints: pl.DataFrame | None = None
