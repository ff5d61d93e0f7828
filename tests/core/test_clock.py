"""The time rule: stated zones win, --tz for naive stamps, inferred years, filled gaps."""

from __future__ import annotations

import datetime as dt

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from toranalyze.ingest.clock import (
    PLACEHOLDER_YEAR,
    normalize_time,
    offset_iso,
    resolve_open_years,
    ts_glog,
    ts_iso,
    ts_month_name,
)
from toranalyze.schema import conform_raw

UTC = dt.UTC


def _raw(rows: list[dict]) -> pl.LazyFrame:
    base = {"kind": "info", "severity": "info", "message": "m"}
    return conform_raw(pl.DataFrame([{**base, **r} for r in rows]))


def _iso(values: list[str]) -> list:
    df = pl.DataFrame({"s": values})
    return df.select(ts_iso(pl.col("s")).alias("t"), offset_iso(pl.col("s")).alias("o")).rows()


def test_iso_variants() -> None:
    got = _iso(["2021-05-23T08:46:02", "2021-05-25 06:38:26,123", "2023-10-05T04:00:22.604-07:00",
                "2024-01-01T00:00:00Z", "2024-01-01T01:02:03.123456+0530"])
    assert got[0] == (dt.datetime(2021, 5, 23, 8, 46, 2), None)
    assert got[1] == (dt.datetime(2021, 5, 25, 6, 38, 26, 123000), None)
    assert got[2] == (dt.datetime(2023, 10, 5, 4, 0, 22, 604000), -7 * 3600)
    assert got[3] == (dt.datetime(2024, 1, 1), 0)
    assert got[4][1] == 5 * 3600 + 30 * 60


def test_glog_and_syslog_have_placeholder_year() -> None:
    df = pl.DataFrame({"md": ["1206"], "hms": ["18:44:12.715298"], "mon": ["Dec"], "day": [" 6"]})
    row = df.select(
        ts_glog(pl.col("md"), pl.col("hms")).alias("glog"),
        ts_month_name(pl.col("mon"), pl.col("day"), pl.lit("18:44:12")).alias("syslog"),
    ).row(0)
    assert row[0] == dt.datetime(PLACEHOLDER_YEAR, 12, 6, 18, 44, 12, 715298)
    assert row[1] == dt.datetime(PLACEHOLDER_YEAR, 12, 6, 18, 44, 12)


def test_stated_offset_wins_and_naive_uses_tz() -> None:
    lf = _raw([
        {"line": 1, "ts": dt.datetime(2024, 3, 1, 12, 0), "ts_offset_s": 3600},
        {"line": 2, "ts": dt.datetime(2024, 3, 1, 12, 0)},
    ])
    out = normalize_time(lf, tz="Europe/Paris").collect()
    assert out["ts"].to_list() == [dt.datetime(2024, 3, 1, 11, 0, tzinfo=UTC), dt.datetime(2024, 3, 1, 11, 0, tzinfo=UTC)]
    out_utc = normalize_time(lf).collect()
    assert out_utc["ts"][1] == dt.datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def test_year_is_inferred_from_dated_neighbours_with_rollover() -> None:
    lf = _raw([
        {"line": 1, "ts": dt.datetime(2022, 1, 2, 0, 0)},
        {"line": 2, "ts": dt.datetime(PLACEHOLDER_YEAR, 12, 31, 23, 59), "ts_year_known": False},
        {"line": 3, "ts": dt.datetime(PLACEHOLDER_YEAR, 1, 2, 0, 5), "ts_year_known": False},
    ])
    out = normalize_time(lf).collect()
    assert out["ts"].to_list()[1:] == [dt.datetime(2021, 12, 31, 23, 59, tzinfo=UTC), dt.datetime(2022, 1, 2, 0, 5, tzinfo=UTC)]
    assert out["ts_inferred"].to_list() == [False, True, True]


def test_year_falls_back_to_option_then_mtime() -> None:
    lf = _raw([{"line": 1, "ts": dt.datetime(PLACEHOLDER_YEAR, 6, 1), "ts_year_known": False}])
    assert normalize_time(lf, year=2019).collect()["ts"][0].year == 2019
    assert normalize_time(lf, mtime_year=2025).collect()["ts"][0].year == 2025
    still_open = normalize_time(lf).collect()
    assert still_open["_year_open"].to_list() == [True]


def test_open_years_follow_the_other_files_of_the_run() -> None:
    syslog = normalize_time(_raw([
        {"line": 1, "ts": dt.datetime(PLACEHOLDER_YEAR, 1, 2, 3, 0), "ts_year_known": False},
        {"line": 2, "ts": dt.datetime(PLACEHOLDER_YEAR, 12, 30, 23, 0), "ts_year_known": False},
    ])).collect()
    slurm = normalize_time(_raw([{"line": 1, "ts": dt.datetime(2023, 12, 31, 12, 0)}])).collect()
    both = resolve_open_years(pl.concat([syslog, slurm]), pl.lit(2026))
    assert both["ts"].dt.year().to_list() == [2024, 2023, 2023]
    alone = resolve_open_years(syslog, pl.lit(2026))
    assert alone["ts"].dt.year().to_list() == [2026, 2026]


def test_lines_without_time_take_the_previous_time_and_are_marked() -> None:
    lf = _raw([
        {"line": 1},
        {"line": 2, "ts": dt.datetime(2024, 1, 1, 10)},
        {"line": 3},
        {"line": 4, "ts": dt.datetime(2024, 1, 1, 11)},
    ])
    out = normalize_time(lf).collect()
    assert [t.hour for t in out["ts"]] == [10, 10, 10, 11]
    assert out["ts_inferred"].to_list() == [True, False, True, False]


def test_all_unknown_stays_null_and_is_flagged() -> None:
    # a pasted fragment with no clock: still classified, left off the timeline and flagged
    out = normalize_time(_raw([{"line": 1}, {"line": 2}])).collect()
    assert out["ts"].null_count() == 2
    assert out["ts_inferred"].to_list() == [True, True]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2035, 1, 1))),
                min_size=1, max_size=30))
def test_normalize_never_invents_order_or_rows(stamps: list) -> None:
    lf = _raw([{"line": i + 1, "ts": t} for i, t in enumerate(stamps)])
    out = normalize_time(lf).collect()
    assert out.height == len(stamps)
    assert out["line"].to_list() == list(range(1, len(stamps) + 1))
    known = [t for t in stamps if t is not None]
    if known:
        assert out["ts"].null_count() == 0
    for t_in, t_out, inferred in zip(stamps, out["ts"].to_list(), out["ts_inferred"].to_list(), strict=True):
        if t_in is not None:
            assert t_out == t_in.replace(tzinfo=UTC) and not inferred
