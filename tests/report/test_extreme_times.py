"""Times at the edges of what Python's datetime holds (years 1 to 9999): a log may state year 0 or a
time past 9999, and a run may span both. Both reports render, showing such times at the nearest edge."""

from __future__ import annotations

import datetime as dt
import io

import polars as pl
import pytest
from rich.console import Console

from toranalyze.reconstruct.analysis import analyze_events
from toranalyze.report.fleet import render_fleet_report
from toranalyze.report.html import clip_times, fmt_duration
from toranalyze.report.job import JobReportInput, render_job_report
from toranalyze.report.text import print_summary

from .conftest import SAMPLES, Run
from .fleet_helper import fleet_tables

YEAR_0 = pl.datetime(0, 6, 1)  # polars holds it, Python's datetime does not
LATE_9999 = pl.datetime(9999, 12, 31, 20)  # the run goes on into year 10000


def _moved(run: Run, case: str) -> pl.DataFrame:
    """The sample run's events moved to year 0, across the end of 9999, or split between the two."""
    ev = run.events
    t0, mid = ev["ts"].min(), ev["ts"].median()
    since = pl.col("ts") - pl.lit(t0)
    if case == "year 0":
        ts = since + YEAR_0
    elif case == "year 9999":
        ts = since + LATE_9999
    else:  # the first half in year 0, the second at the end of 9999
        ts = pl.when(pl.col("ts") < pl.lit(mid)).then(since + YEAR_0).otherwise(since + LATE_9999)
    return ev.with_columns(ts.alias("ts"))


@pytest.mark.parametrize("case", ["year 0", "year 9999", "years 0 to 9999"])
def test_both_reports_render_times_beyond_python_datetime_clipped(sample_run: Run, case: str) -> None:
    events = _moved(sample_run, case)
    an = analyze_events(events)
    page = render_job_report(JobReportInput(an, events, sample_run.summary))
    fleet = render_fleet_report(*fleet_tables(an, events, str(SAMPLES)))
    early, late = "0001-01-01", "9999-12-31"
    for html in (page, fleet):
        assert (early in html) == (case != "year 9999")
        assert (late in html) == (case != "year 0")
    assert "No training progress" not in page


@pytest.mark.parametrize("case", ["year 0", "years 0 to 9999"])
def test_the_terminal_summary_shows_times_beyond_python_datetime_clipped(sample_run: Run, case: str) -> None:
    buf = io.StringIO()
    print_summary(analyze_events(_moved(sample_run, case)), Console(file=buf, width=200, color_system=None))
    assert "0001-01-01 00:00:00" in buf.getvalue()  # the incidents' times, at Python's first year


def test_clip_times_leaves_ordinary_times_and_other_columns_alone() -> None:
    df = pl.DataFrame({"t": [dt.datetime(2024, 5, 1, 12)], "n": [3]}).with_columns(
        pl.col("t").dt.replace_time_zone("UTC").alias("utc"), pl.col("t").dt.cast_time_unit("ns").alias("ns"))
    assert clip_times(df).equals(df)
    edges = pl.select(pl.datetime(0, 1, 1).alias("a"), pl.datetime(12000, 1, 1).alias("b"))
    a, b = clip_times(edges).row(0)
    assert (a, b) == (dt.datetime.min, dt.datetime.max)


@pytest.mark.parametrize("seconds", [float("inf"), float("-inf"), float("nan"), None])
def test_a_duration_that_is_no_number_shows_as_a_dash(seconds: float | None) -> None:
    assert fmt_duration(seconds) == "-"
