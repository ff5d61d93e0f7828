"""Figures built from the analysis' frames show the quantities their axes name."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import polars as pl

from toranalyze.report.figures import MAX_MARKS, MAX_POINTS, PHASES, progress_curve, step_time, timeline


def test_step_time_is_seconds_per_step_whatever_the_log_interval() -> None:
    t0 = datetime(2024, 6, 1, tzinfo=UTC)
    # One row per logged iteration, every 5 steps; d_us is the per-step time of the row.
    ends = [t0 + timedelta(seconds=20 * k) for k in range(1, 11)]
    prog = pl.DataFrame({"attempt": [0] * 10, "end": ends, "n": [5] * 10, "d_us": [4_000_000] * 10})
    fig = step_time(prog, pl.DataFrame(), ideal_s=4.0)
    ys = [y for y in fig["data"][0]["y"] if y is not None]
    assert ys and all(abs(y - 4.0) < 1e-9 for y in ys)


def _dense_run(n: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``n`` attempts over 30 days, each ended by an incident, with 60 step rows per attempt of
    which the last 10 are rolled back."""
    t0 = datetime(2024, 5, 1, tzinfo=UTC)
    span = timedelta(days=30) / n
    starts = [t0 + k * span for k in range(n)]
    attempts = pl.DataFrame({"attempt": list(range(n)), "job_id": [str(k) for k in range(n)], "t_start": starts,
                             "t_end": [s + span * 0.9 for s in starts], "state": ["FAILED"] * n})
    phase = {c: [s + span * (0.9 + 0.01 * i) for s in starts] for i, (c, *_) in enumerate(PHASES)}
    incidents = pl.DataFrame({"incident": list(range(n)), "root_cause": ["software"] * n,
                              "nodes": [["n1"]] * n, "downtime_s": [60.0] * n, "planned": [False] * n, **phase})
    per = 60
    prog = pl.DataFrame({
        "attempt": [k for k in range(n) for _ in range(per)],
        "step": [k * 50 + i for k in range(n) for i in range(per)],
        "end": [s + span * 0.9 * (i + 1) / per for s in starts for i in range(per)],
        "n_lost": [int(i >= 50) for _ in range(n) for i in range(per)],
        "d_us": [2_000_000] * (n * per),
    })
    return attempts, incidents, prog


def test_a_dense_timeline_is_thinned_to_what_a_screen_shows_and_stays_svg() -> None:
    attempts, incidents, _ = _dense_run(1500)
    fig = timeline(attempts, incidents, None, pl.DataFrame())
    assert {t["type"] for t in fig["data"]} == {"scatter"}
    marks = [t for t in fig["data"] if t["mode"] == "markers"]
    assert [t["name"] for t in marks] == [label for _, label, *_ in PHASES]
    for t in marks:
        assert len(t["x"]) <= MAX_MARKS
        # every incident is counted: each mark stands for itself and the "+N more" it names
        more = [int(m.group(1)) if (m := re.search(r"\+(\d+) more", h)) else 0 for h in t["hovertext"]]
        assert len(t["x"]) + sum(more) == 1500


def test_dense_progress_keeps_every_rollback_within_the_point_budget() -> None:
    _, _, prog = _dense_run(400)
    fig = progress_curve(prog)
    kept, lost = fig["data"]
    assert kept["name"] == "kept" and len(kept["x"]) <= MAX_POINTS + 1
    assert lost["x"].count(None) == 400 - 1  # one rolled-back tail per attempt, each its own line
    assert {t["type"] for t in fig["data"]} == {"scatter"}
    assert len(step_time(prog, pl.DataFrame(), 2.0)["data"][0]["x"]) <= MAX_POINTS + 400
