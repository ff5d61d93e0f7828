"""Figures built from the analysis' frames show the quantities their axes name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from toranalyze.report.figures import step_time


def test_step_time_is_seconds_per_step_whatever_the_log_interval() -> None:
    t0 = datetime(2024, 6, 1, tzinfo=UTC)
    # One row per logged iteration, every 5 steps; d_us is the per-step time of the row.
    ends = [t0 + timedelta(seconds=20 * k) for k in range(1, 11)]
    prog = pl.DataFrame({"attempt": [0] * 10, "end": ends, "n": [5] * 10, "d_us": [4_000_000] * 10})
    fig = step_time(prog, pl.DataFrame(), ideal_s=4.0)
    ys = [y for y in fig["data"][0]["y"] if y is not None]
    assert ys and all(abs(y - 4.0) < 1e-9 for y in ys)
