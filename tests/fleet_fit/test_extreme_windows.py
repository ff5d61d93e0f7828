"""Calendar windows of impossible dates: a log stating year 0 or 9999 (or past it) gives a job that
spans millennia. The rates' windows stop at the end of the calendar instead of overflowing."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest

from toranalyze.fleet import fit


def _one_attempt(start: pl.Expr, end: pl.Expr) -> pl.DataFrame:
    return pl.DataFrame({"run": ["r"], "job": ["1"], "attempt": [0], "gpus": [8], "nodes": [1]}).with_columns(
        start.alias("t_start"), end.alias("t_end"))


FAIL = pl.DataFrame({"t_onset": [datetime(2024, 3, 4, 2, tzinfo=UTC)]})


@pytest.mark.parametrize(("start", "end"), [
    (pl.datetime(1, 1, 1, time_zone="UTC"), pl.datetime(9999, 12, 31, time_zone="UTC")),
    (pl.datetime(2024, 3, 4, time_zone="UTC"), pl.datetime(9999, 12, 31, 23, time_zone="UTC")),
    (pl.datetime(2024, 3, 4, time_zone="UTC"), pl.datetime(12000, 1, 1, time_zone="UTC")),
    (pl.datetime(0, 1, 1, time_zone="UTC"), pl.datetime(2024, 3, 5, time_zone="UTC")),
], ids=["year 1 to 9999", "2024 to 9999", "2024 past 9999", "year 0 to 2024"])
def test_a_job_spanning_impossible_dates_gives_bounded_windows(start: pl.Expr, end: pl.Expr) -> None:
    w = fit.window_rates(FAIL, _one_attempt(start, end))
    assert w.height <= 52.2 * 200  # weeks from 2000 to the end of the calendar, at most
    assert w["key"].is_sorted() and (w["key"] < "2200").all()
    if w.height:  # a job from 2024 on: its first week holds the failure
        assert w.row(0) == ("window", "2024-03-04", 1, 8 * 168.0, 168.0, 168.0)


def test_a_failure_at_an_impossible_date_falls_in_no_window() -> None:
    fail = pl.DataFrame({"t_onset": [datetime(9999, 12, 31, tzinfo=UTC)]})
    w = fit.window_rates(fail, _one_attempt(pl.datetime(2024, 3, 4, time_zone="UTC"),
                                            pl.datetime(2024, 3, 5, time_zone="UTC")))
    assert w.select("key", "failures", "node_hour").rows() == [("2024-03-04", 0, 24.0)]


def test_windows_of_ordinary_dates_are_unchanged() -> None:
    exposure = _one_attempt(pl.datetime(2024, 3, 4, time_zone="UTC"), pl.datetime(2024, 3, 20, time_zone="UTC"))
    w = fit.window_rates(FAIL, exposure)
    assert w.select("key", "failures", "node_hour").rows() == [
        ("2024-03-04", 1, 168.0), ("2024-03-11", 0, 168.0), ("2024-03-18", 0, 48.0)]
