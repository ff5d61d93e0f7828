"""Plotly figures as plain dicts, built from analysis frames with polars (no Python loops over rows).

Times go to plotly as milliseconds since the epoch on date axes (compact, parsed fast). What a
page costs to draw grows with the points it holds, so dense runs are reduced to about what a
screen can show: line series to at most ``MAX_POINTS`` points per trace (each time bin's first
and last row, and for step times its slowest, so rollbacks and spikes stay visible), marker
series on the timeline to one mark per ``MAX_MARKS`` time bin (the hover counts the rest).
Traces stay SVG: WebGL only above ``GL_ABOVE`` points, since in a browser without a GPU
(headless, remote desktops) compositing a WebGL canvas costs more than drawing a few thousand
SVG points. Every text that may come from a log goes through ``esc_plot``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from toranalyze.report.html import BUCKET_COLOURS, PALETTE, esc_plot

MAX_POINTS = 2000
MAX_MARKS = 400
MIN_SEGMENTS = 600  # a timeline segment is drawn at least 1/600 of the run long
GL_ABOVE = 20_000
PHASES = (
    ("t_last_progress", "last progress", "#000000", "circle-open"),
    ("t_first_error", "first error", "#D55E00", "x"),
    ("t_detected", "detected", "#E69F00", "diamond"),
    ("t_restart", "restart", "#0072B2", "triangle-right"),
    ("t_resumed", "resumed", "#009E73", "triangle-up"),
    ("t_caught_up", "caught up", "#56B4E9", "star"),
)


def ms(col: str | pl.Expr) -> pl.Expr:
    """A UTC datetime (or µs integer) column as epoch milliseconds."""
    e = pl.col(col) if isinstance(col, str) else col
    return (e.cast(pl.Int64) // 1000).cast(pl.Float64)


def decimate(df: pl.DataFrame, t: str, by: tuple[str, ...] = (), max_points: int = MAX_POINTS,
             peak: str | None = None) -> pl.DataFrame:
    """At most about ``max_points`` rows: the first and last row of each time bin (per ``by``
    group), and with ``peak`` also the bin's row where that column is largest."""
    if df.height <= max_points:
        return df
    bins = max(max_points // (3 if peak else 2), 1)
    keys = [*by, "_bin"]
    idx = pl.int_range(pl.len()).over(keys)
    keep = (idx == 0) | (idx == pl.len().over(keys) - 1)
    if peak:
        keep = keep | (idx == pl.col(peak).arg_max().over(keys))
    return df.sort(t).with_columns(_time_bin(df, t, bins)).filter(keep).drop("_bin")


def _time_bin(df: pl.DataFrame, t: str, bins: int) -> pl.Expr:
    x = pl.col(t).cast(pl.Float64)
    lo, hi = df.select(x.min().alias("lo"), x.max().alias("hi")).row(0)
    span = max(float(hi - lo), 1.0)
    return ((x - lo) / span * (bins - 1)).floor().cast(pl.Int64).alias("_bin")


def thin_marks(df: pl.DataFrame, t: str, max_marks: int = MAX_MARKS) -> pl.DataFrame:
    """At most ``max_marks`` rows: the first of each time bin, with ``_more`` = the bin's other rows."""
    if df.height <= max_marks:
        return df.with_columns(pl.lit(0, pl.UInt32).alias("_more"))
    return (df.sort(t).with_columns(_time_bin(df, t, max_marks))
            .with_columns((pl.len().over("_bin") - 1).cast(pl.UInt32).alias("_more"))
            .filter(pl.int_range(pl.len()).over("_bin") == 0).drop("_bin"))


def _breaks(df: pl.DataFrame, key: str, x: str, y: str) -> tuple[list[Any], list[Any]]:
    """x/y lists of a time-sorted series with a null wherever ``key`` changes, so one trace draws
    each attempt as its own line."""
    d = df.sort(x).select(key, pl.col(x).cast(pl.Float64), pl.col(y).cast(pl.Float64)).with_row_index("_i")
    cut = d.filter(pl.col(key) != pl.col(key).shift(1)).select(
        (pl.col("_i").cast(pl.Float64) - 0.5).alias("_o"), pl.lit(None, pl.Float64).alias(x),
        pl.lit(None, pl.Float64).alias(y))
    both = pl.concat([d.select(pl.col("_i").cast(pl.Float64).alias("_o"), x, y), cut]).sort("_o")
    return both[x].to_list(), both[y].to_list()


def _scatter(n: int) -> str:
    return "scattergl" if n > GL_ABOVE else "scatter"


def date_layout(**extra: Any) -> dict[str, Any]:
    return {"xaxis": {"type": "date", "title": {"text": "time (UTC)"}}, "hovermode": "closest", **extra}


def ledger_bar(row: dict[str, Any], buckets: tuple[str, ...]) -> dict[str, Any]:
    """Where the observed time went: one stacked horizontal bar, hours per bucket."""
    t_obs = row.get("t_obs_s") or 0.0
    data = []
    for b in buckets:
        secs = float(row.get(f"{b}_s") or 0.0)
        share = secs / t_obs if t_obs else 0.0
        data.append({
            "type": "bar", "orientation": "h", "name": b, "y": ["observed"], "x": [secs / 3600.0],
            "marker": {"color": BUCKET_COLOURS.get(b)}, "text": [f"{share:.1%}" if share >= 0.03 else ""],
            "textposition": "inside", "hovertemplate": f"{b}: %{{x:.2f}} h ({share:.1%})<extra></extra>",
        })
    return {"data": data, "layout": {"barmode": "stack", "xaxis": {"title": {"text": "hours"}},
                                     "yaxis": {"visible": False}, "margin": {"l": 20, "r": 20, "t": 10, "b": 40},
                                     "legend": {"orientation": "h", "y": -0.6, "traceorder": "normal"}}}


@dataclass(frozen=True)
class Lane:
    """Where and how a set of intervals is drawn: its height, legend name, colour and width."""

    row: float
    name: str
    colour: str | pl.Expr
    width: int = 12


def segments(df: pl.DataFrame, a: str, b: str, hover: pl.Expr, lane: Lane, min_ms: float = 0.0) -> dict[str, Any]:
    """Intervals ``a``→``b`` as thick line segments at height ``lane.row``: one trace (a single SVG
    path) however many there are, where thousands of bars would each be an element. Each is drawn
    at least ``min_ms`` long (an SVG line of zero length shows nothing): a four-minute stop on a
    month's axis is a fraction of a pixel; the hover tells its real length."""
    seg = df.filter(pl.col(a).is_not_null() & pl.col(b).is_not_null()).select(
        ms(a).alias("x0"), pl.max_horizontal(ms(b), ms(a) + min_ms).alias("x1"), hover.alias("h")).with_row_index("_i")
    pts = pl.concat([
        seg.select("_i", pl.lit(0).alias("_o"), pl.col("x0").alias("x"), "h"),
        seg.select("_i", pl.lit(1).alias("_o"), pl.col("x1").alias("x"), "h"),
        seg.select("_i", pl.lit(2).alias("_o"), pl.lit(None, pl.Float64).alias("x"),
                   pl.lit(None, pl.String).alias("h")),
    ]).sort("_i", "_o")
    ys = [lane.row if x is not None else None for x in pts["x"].to_list()]
    return {"type": _scatter(len(ys)), "mode": "lines", "name": lane.name, "x": pts["x"].to_list(), "y": ys,
            "line": {"color": lane.colour, "width": lane.width},
            "hovertext": esc_plot(pts["h"].fill_null("").to_list()), "hoverinfo": "text", "connectgaps": False}


# The timeline's rows, bottom to top, at heights 0..4; each phase has its own lane in its row (in
# time order, top down), so on a dense run every phase still reads as its own band.
ROWS = ("slow periods", "checkpoints", "phases", "incidents", "attempts")


def _row(name: str) -> float:
    return float(ROWS.index(name))


def _lane(k: int) -> float:
    return _row("phases") + 0.3 - 0.12 * k


def timeline(attempts: pl.DataFrame, incidents: pl.DataFrame, ckpt: pl.DataFrame | None,
             slow: pl.DataFrame) -> dict[str, Any]:
    """Attempts, each incident's downtime (planned stops grey) and phases, checkpoints, slow periods."""
    data: list[dict[str, Any]] = []
    # about two pixels of a figure's width: the least a stop or a slow period is drawn
    lo, hi = attempts.select(ms("t_start").min(), ms("t_end").max()).row(0) if attempts.height else (0, 0)
    least = ((hi or 0.0) - (lo or 0.0)) / MIN_SEGMENTS
    if attempts.height:
        data.append(segments(attempts, "t_start", "t_end", pl.format(
            "attempt {} ({}) · {}", "attempt", pl.col("job_id").fill_null("-"),
            pl.col("state").fill_null("no end state")), Lane(_row("attempts"), "attempts", "#0072B2")))
    if incidents.height:
        i = incidents.with_columns(pl.coalesce("t_resumed", "t_restart", "t_detected").alias("_to"))
        hover = pl.format("#{} {} on {} · down {} s", pl.col("incident") + 1, "root_cause",
                          pl.col("nodes").list.join(",").fill_null("-"), pl.col("downtime_s").round(0))
        for planned, name, colour in ((False, "downtime", "#D55E00"), (True, "downtime (planned stop)", "#999999")):
            part = i.filter(pl.col("planned").fill_null(False) == planned)
            if part.height:
                data.append(segments(part, "t_last_progress", "_to", hover, Lane(_row("incidents"), name, colour),
                                     min_ms=least))
        for k, (col, label, colour, symbol) in enumerate(PHASES):
            data.append(_phase_marks(incidents, col, label, colour, symbol, _lane(k)))
    if ckpt is not None and ckpt.height:
        c = thin_marks(ckpt.select("end"), "end")
        data.append({"type": _scatter(c.height), "mode": "markers", "name": "checkpoint saved",
                     "y": [_row("checkpoints")] * c.height, "x": c.select(ms("end"))["end"].to_list(),
                     "hovertext": c.select(pl.when(pl.col("_more") > 0)
                                           .then(pl.format("checkpoint saved (+{} more here)", "_more"))
                                           .otherwise(pl.lit("checkpoint saved")).alias("h"))["h"].to_list(),
                     "marker": {"color": "#56B4E9", "symbol": "line-ns-open", "size": 10}, "hoverinfo": "x+text"})
    if slow.height:
        data.append(segments(slow, "start", "end", pl.format("×{} slower, suspect {}", pl.col("factor").round(2),
                                                             pl.col("node").fill_null("-")),
                             Lane(_row("slow periods"), "slow periods", "#E69F00"), min_ms=least))
    return {"data": data, "layout": date_layout(
        margin={"l": 100, "r": 20, "t": 20, "b": 40},
        yaxis={"tickvals": [_row(r) for r in ROWS], "ticktext": list(ROWS), "range": [-0.5, 4.5],
               "zeroline": False, "fixedrange": True},
        legend={"orientation": "h", "y": -0.3})}


def _phase_marks(incidents: pl.DataFrame, col: str, label: str, colour: str, symbol: str,
                 lane: float) -> dict[str, Any]:
    """One phase of every incident as markers at height ``lane`` (thinned on dense runs)."""
    p = thin_marks(incidents.filter(pl.col(col).is_not_null()), col)
    more = pl.when(pl.col("_more") > 0).then(pl.format(" (+{} more incidents here)", "_more")).otherwise(pl.lit(""))
    hover = p.select(pl.format("#{} {} on {}: " + label + "{}", pl.col("incident") + 1, "root_cause",
                               pl.col("nodes").list.join(",").fill_null("-"), more).alias("h"))["h"]
    return {"type": _scatter(p.height), "mode": "markers", "name": label, "y": [lane] * p.height,
            "x": p.select(ms(col))[col].to_list(), "marker": {"color": colour, "symbol": symbol, "size": 8},
            "hovertext": esc_plot(hover.to_list()), "hoverinfo": "text+x"}


def progress_curve(prog: pl.DataFrame) -> dict[str, Any]:
    """Steps over wall time; rows later rolled back in vermillion (the rework). The kept rows are
    one line across attempts (flat while the job was down, so a rollback shows as the vermillion
    tail above it); the rolled-back rows are drawn per attempt."""
    p = prog.filter(pl.col("end").is_not_null()).select(
        "attempt", "step", ms("end").alias("x"), (pl.col("n_lost") > 0).alias("lost"))
    data = []
    kept = decimate(p.filter(~pl.col("lost")), "x")
    if kept.height:
        data.append(_progress_trace(*_breaks(kept.with_columns(pl.lit(0).alias("_one")), "_one", "x", "step"),
                                    "kept", "#0072B2"))
    lost = decimate(p.filter(pl.col("lost")), "x", ("attempt",))
    if lost.height:
        data.append(_progress_trace(*_breaks(lost, "attempt", "x", "step"), "rolled back (rework)", "#D55E00"))
    return {"data": data, "layout": date_layout(yaxis={"title": {"text": "step"}},
                                                legend={"orientation": "h", "y": -0.3})}


def _progress_trace(xs: list[Any], ys: list[Any], name: str, colour: str) -> dict[str, Any]:
    return {"type": _scatter(len(xs)), "mode": "lines", "name": name, "x": xs, "y": ys,
            "line": {"color": colour, "width": 2}, "connectgaps": False,
            "hovertemplate": "step %{y}<extra>" + name + "</extra>"}


def step_time(prog: pl.DataFrame, slow: pl.DataFrame, ideal_s: float | None) -> dict[str, Any]:
    """Seconds per step over time, the ideal step time and the slow periods with their suspect node."""
    p = prog.filter(pl.col("d_us").is_not_null() & pl.col("end").is_not_null()).select(
        "attempt", ms("end").alias("x"), (pl.col("d_us") / 1e6).alias("y"))  # d_us is already per step
    p = decimate(p, "x", peak="y")
    xs, ys = _breaks(p, "attempt", "x", "y")
    data: list[dict[str, Any]] = [{"type": _scatter(len(xs)), "mode": "lines", "name": "step time", "x": xs, "y": ys,
                                   "line": {"color": "#0072B2", "width": 1},
                                   "hovertemplate": "%{y:.3f} s/step<extra></extra>"}]
    if ideal_s and p.height:
        x0, x1 = p["x"].min(), p["x"].max()
        data.append({"type": "scatter", "mode": "lines", "name": f"ideal {ideal_s:.3f} s", "x": [x0, x1],
                     "y": [ideal_s, ideal_s], "line": {"color": "#009E73", "dash": "dash"}, "hoverinfo": "name"})
    if slow.height:
        tr = segments(slow, "start", "end", pl.format("×{} slower · suspect {}", pl.col("factor").round(2),
                                                     pl.col("node").fill_null("-")),
                      Lane(0.0, "slow period (suspect node)", "#E69F00", width=6))
        # on this figure a segment sits at the period's median step time, not on a category row
        ys = slow.filter(pl.col("start").is_not_null() & pl.col("end").is_not_null())["median_step_time_s"].to_list()
        tr["y"] = [v for y in ys for v in (y, y, None)]
        data.append(tr)
    return {"data": data, "layout": date_layout(yaxis={"title": {"text": "seconds per step"}, "rangemode": "tozero"},
                                                legend={"orientation": "h", "y": -0.3})}


def cost_by_cause(incidents: pl.DataFrame) -> dict[str, Any]:
    """Downtime and lost work (hours) per root cause, largest first."""
    c = (incidents.group_by("root_cause").agg((pl.col("downtime_s").fill_null(0).sum() / 3600).alias("down"),
                                              (pl.col("lost_time_s").fill_null(0).sum() / 3600).alias("lost"),
                                              pl.len().alias("n"))
         .with_columns((pl.col("down") + pl.col("lost")).alias("tot"))
         .sort(["tot", "root_cause"], descending=[True, False]))
    names = esc_plot(c["root_cause"].to_list())
    return {"data": [
        {"type": "bar", "name": "downtime", "x": names, "y": c["down"].to_list(), "marker": {"color": PALETTE[1]},
         "hovertemplate": "%{x}: %{y:.2f} h down<extra></extra>"},
        {"type": "bar", "name": "lost work (rework)", "x": names, "y": c["lost"].to_list(),
         "marker": {"color": PALETTE[3]}, "hovertemplate": "%{x}: %{y:.2f} h lost<extra></extra>"},
    ], "layout": {"barmode": "stack", "yaxis": {"title": {"text": "hours"}}, "legend": {"orientation": "h", "y": -0.3}}}
