"""Timestamp expressions shared by all parsers, and the one rule that makes them UTC.

Parsers cut the timestamp text out of a line and hand it to one of the
``ts_*`` builders below; each returns a naive wall-clock ``Datetime(us)`` as
written. Zones and years are settled later, once, by ``normalize_time``:

1. A stated zone (``Z``, ``+02:00``) wins: ``ts - offset``.
2. Otherwise the wall clock is read in ``--tz`` (default UTC).
3. Formats without a year (glog, syslog) get the year of the nearest dated
   record of the same file, else ``--year``, else the file's modification year;
   a date more than a day after that anchor belongs to the year before.
4. Records with no time at all take the previous dated record's time in the same
   file (the next one for a file's leading lines) and are marked ``ts_inferred``; in a file
   with no clock at all they keep ``ts`` null, still marked ``ts_inferred``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from functools import lru_cache

import polars as pl

from toranalyze.schema import NAIVE_US, UTC_US

# Leap year, so Feb 29 survives until the real year is known.
PLACEHOLDER_YEAR = 2000
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)  # stamps before or from LATEST on are impossible: null
LATEST = dt.datetime(2200, 1, 1, tzinfo=dt.UTC)

_MONTHS = {
    m: i + 1 for i, m in enumerate(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"])
}

ISO_PATTERN = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?"


def ts_iso(s: pl.Expr) -> pl.Expr:
    """'2021-05-23T08:46:02', '2021-05-23 08:46:02,123', '...02.604-07:00', '...Z' -> naive wall clock."""
    body = (
        s.str.strip_chars()
        .str.replace(r"(?:Z|[+-][0-9]{2}:?[0-9]{2})$", "")
        .str.replace("T", " ", literal=True)
        .str.replace(",", ".", literal=True)
    )
    return body.str.strptime(NAIVE_US, "%Y-%m-%d %H:%M:%S%.f", strict=False)


def offset_iso(s: pl.Expr) -> pl.Expr:
    """UTC offset in seconds stated by an ISO stamp; null when it states none."""
    z = s.str.strip_chars().str.extract_groups(r"(?:(Z)|([+-])([0-9]{2}):?([0-9]{2}))$")
    sign = pl.when(z.struct.field("2") == "-").then(-1).otherwise(1)
    secs = sign * (
        z.struct.field("3").cast(pl.Int32, strict=False) * 3600 + z.struct.field("4").cast(pl.Int32, strict=False) * 60
    )
    return pl.when(z.struct.field("1") == "Z").then(pl.lit(0, pl.Int32)).otherwise(secs).cast(pl.Int32, strict=False)


def ts_glog(mmdd: pl.Expr, hms: pl.Expr) -> pl.Expr:
    """glog 'E1206 18:44:12.715298': month-day '1206' and the time; year unknown."""
    text = pl.lit(f"{PLACEHOLDER_YEAR}") + mmdd + pl.lit(" ") + hms
    return text.str.strptime(NAIVE_US, "%Y%m%d %H:%M:%S%.f", strict=False)


def ts_month_name(month: pl.Expr, day: pl.Expr, hms: pl.Expr, year: pl.Expr | None = None) -> pl.Expr:
    """syslog 'Dec  6 18:44:12' (no year) or ctime 'Mon Dec  6 18:44:12 2021' (with year)."""
    mon = month.str.slice(0, 3).str.to_titlecase().replace_strict(_MONTHS, default=None, return_dtype=pl.Int32)
    yr = pl.lit(PLACEHOLDER_YEAR) if year is None else year.cast(pl.Int32, strict=False)
    text = pl.format("{}-{}-{} {}", yr, mon, day.str.strip_chars(), hms)
    return text.str.strptime(NAIVE_US, "%Y-%m-%d %H:%M:%S%.f", strict=False)


def ts_epoch_ms(ms: pl.Expr) -> pl.Expr:
    """Epoch milliseconds (MLPerf time_ms). Already UTC: pair with offset 0."""
    us = ms.cast(pl.Float64, strict=False).mul(1000).cast(pl.Int64, strict=False)
    return pl.from_epoch(us, time_unit="us").cast(NAIVE_US, strict=False)


def normalize_time(
    raw: pl.LazyFrame, *, tz: str = "UTC", year: int | None = None, mtime_year: int | None = None
) -> pl.LazyFrame:
    """Turn RAW_SCHEMA time columns (one file's rows) into UTC ``ts`` and ``ts_inferred``.

    Expects the frame of a single input file, ordered by ``line``.
    """
    lf = raw.sort("line", maintain_order=True)
    for step in _time_steps(tz, year, mtime_year):
        lf = lf.with_columns(step)
    return lf


def normalize_times(raw: pl.LazyFrame, by: str, *, tz: str = "UTC", year: int | None = None) -> pl.LazyFrame:
    """``normalize_time`` of several files' rows at once, each file's rows (column ``by``) on
    their own: the same rows as one call per file, in ``by`` then line order, in one query."""
    lf = raw.sort(by, "line", maintain_order=True)
    for step in _time_steps(tz, year, None, by):
        lf = lf.with_columns(step)
    return lf


def _filled(x: pl.Expr, by: str | None) -> pl.Expr:
    """``x`` filled forward then backward (within each ``by`` group)."""
    filled = x.forward_fill().backward_fill()
    return filled if by is None else filled.over(by)


@lru_cache(maxsize=16)
def _time_steps(tz: str, year: int | None, mtime_year: int | None, by: str | None = None) -> tuple[list[pl.Expr], ...]:
    """normalize_time's ``with_columns`` steps, built once per setting (every file uses them);
    with ``by``, the fills stay within each group of ``by`` (a file)."""
    known = pl.col("ts").is_not_null() & pl.col("ts_year_known")
    anchor_year = _filled(pl.when(known).then(pl.col("ts").dt.year()).otherwise(None), by)
    fallback_year = year if year is not None else mtime_year
    chosen = anchor_year if fallback_year is None else anchor_year.fill_null(fallback_year)
    if year is not None:
        chosen = pl.lit(year)
    needs_year = pl.col("ts").is_not_null() & ~pl.col("ts_year_known")
    with_year = pl.col("ts").dt.replace(year=chosen.cast(pl.Int32, strict=False))
    # A yearless date far after the anchor's last dated record belongs to the previous year (Dec -> Jan).
    anchor_ts = _filled(pl.when(known).then(pl.col("ts")).otherwise(None), by)
    rolled = (
        pl.when(anchor_ts.is_not_null() & (with_year > anchor_ts + pl.duration(days=1)))
        .then(with_year.dt.offset_by("-1y"))
        .otherwise(with_year)
    )
    years = [
        pl.when(needs_year & chosen.is_not_null()).then(rolled).otherwise(pl.col("ts")).alias("ts"),
        (pl.col("ts_inferred") | needs_year).alias("ts_inferred"),
        # Still on the placeholder year: resolve_open_years settles it against the other files.
        pl.when(pl.col("ts").is_not_null()).then(needs_year & chosen.is_null()).alias("_year_open"),
    ]
    stated = pl.col("ts") - pl.duration(seconds=pl.col("ts_offset_s"))
    utc_stated = stated.dt.replace_time_zone("UTC")
    utc_local = (
        pl.col("ts").dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null").dt.convert_time_zone("UTC")
    )
    utc = pl.when(pl.col("ts_offset_s").is_not_null()).then(utc_stated).otherwise(utc_local).cast(UTC_US, strict=False)
    # A stamp outside the years logs are written in (year 0, 9999, +275760) is no clock: null, then
    # placed from its neighbours like a record without one.
    zones = [pl.when(utc.is_between(EARLIEST, LATEST, closed="left")).then(utc).alias("ts")]
    filled = _filled(pl.col("ts"), by)
    fills = [
        # A record with no clock of its own is flagged, placed from its neighbours or (a pasted
        # fragment with no clock at all) left null: it is still classified, just not on a timeline.
        (pl.col("ts_inferred") | pl.col("ts").is_null()).alias("ts_inferred"),
        filled.alias("ts"),
        _filled(pl.col("_year_open"), by).fill_null(False),
    ]
    return years, zones, fills


def open_year_reference(events: pl.LazyFrame) -> dt.datetime | None:
    """The median time (upper middle) of the dated records of the whole input, if any."""
    dated = events.filter(~pl.col("_year_open") & pl.col("ts").is_not_null())
    ref: dt.datetime | None = dated.select(pl.col("ts").quantile(0.5, "higher")).collect().item()
    return ref


def open_years(reference: dt.datetime | None, fallback_year: pl.Expr) -> pl.Expr:
    """``ts`` with rows still on the placeholder year (``_year_open``) given the year that puts them
    nearest ``reference`` (a syslog beside a Slurm log of the same run); with no reference,
    ``fallback_year`` (the file's modification year)."""
    if reference is not None:
        candidates = [pl.col("ts").dt.offset_by(f"{reference.year + k - PLACEHOLDER_YEAR}y") for k in (-1, 0, 1)]
        dists = [(c - pl.lit(reference)).abs() for c in candidates]
        best = (
            pl.when((dists[0] <= dists[1]) & (dists[0] <= dists[2]))
            .then(candidates[0])
            .when(dists[1] <= dists[2])
            .then(candidates[1])
            .otherwise(candidates[2])
        )
    else:
        best = pl.col("ts").dt.offset_by(pl.format("{}y", fallback_year - PLACEHOLDER_YEAR))
    return pl.when(pl.col("_year_open")).then(best).otherwise(pl.col("ts")).alias("ts")


def resolve_open_years(events: pl.DataFrame, fallback_year: pl.Expr,
                       scopes: Mapping[str, int] | None = None) -> pl.DataFrame:
    """Settle placeholder years against the whole input (see ``open_years``); drops ``_year_open``.
    ``scopes`` (file -> scope: the runs of a fleet batch): each scope's records against its own
    reference, as if read alone."""
    if scopes is None:
        reference = open_year_reference(events.lazy())
        return events.with_columns(open_years(reference, fallback_year)).drop("_year_open")
    if not events["_year_open"].any():
        return events.drop("_year_open")
    scope = pl.col("file").replace_strict(scopes, default=None, return_dtype=pl.Int64).alias("_scope")
    ev = events.with_columns(scope)
    refs = ev.lazy().filter(~pl.col("_year_open") & pl.col("ts").is_not_null()).group_by("_scope").agg(
        pl.col("ts").quantile(0.5, "higher").alias("_ref")).collect()
    ev = ev.join(refs, on="_scope", how="left", maintain_order="left")
    ref = pl.col("_ref")
    candidates = [pl.col("ts").dt.offset_by(pl.format("{}y", ref.dt.year() + k - PLACEHOLDER_YEAR)) for k in (-1, 0, 1)]
    dists = [(c - ref).abs() for c in candidates]
    best = (
        pl.when(ref.is_null()).then(pl.col("ts").dt.offset_by(pl.format("{}y", fallback_year - PLACEHOLDER_YEAR)))
        .when((dists[0] <= dists[1]) & (dists[0] <= dists[2])).then(candidates[0])
        .when(dists[1] <= dists[2]).then(candidates[1])
        .otherwise(candidates[2])
    )
    return ev.with_columns(pl.when(pl.col("_year_open")).then(best).otherwise(pl.col("ts")).alias("ts")).drop(
        "_year_open", "_scope", "_ref")
