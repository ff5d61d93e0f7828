"""The fleet reliability report: many jobs' tables in, one HTML page out.

``render_fleet_report(jobs, attempts, incidents, exposure, rates)`` takes the four fleet tables
(``toranalyze.fleet.schema``) and, when given, the fitted ``rates.json`` document. Whatever the
fits do not provide is computed here from the tables with the simplest honest estimator (a
class's failures over the fleet's GPU-hours with an exact Poisson interval; MTBF per job size
as running hours over unexpected failures with a least-squares line on log-log axes; lemon
nodes by a Poisson tail probability against the fleet's per-node-hour rate) and labelled so.
"""

from __future__ import annotations

import re
from typing import Any, TypedDict, Unpack
from urllib.parse import quote

import numpy as np
import polars as pl
from scipy import stats

from toranalyze.reconstruct.tables import BUCKETS
from toranalyze.report.html import (
    PALETTE,
    PLOTLY_JS,
    Page,
    cards,
    clip_times,
    esc,
    esc_plot,
    fmt_duration,
    scroll_box,
    table,
)

LEMON_MIN_FAILURES = 2
LEMON_MAX_P = 0.01
MAX_JOB_ROWS = 5000
TOR_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
MIN_TOR_BIN = 0.001
MIN_TOR_SPAN = 0.05  # the histogram's axis is at least this wide, around its bins
# The jobs table's overheads: each bucket's share of the job's observed time, under a short name
# that the legend above the table spells out.
OVERHEADS = {
    "slowdown": ("slow", "slowdown: steps slower than the ideal step time"),
    "rework": ("rework", "work rolled back to a checkpoint and done again"),
    "checkpoint": ("ckpt", "saving checkpoints"),
    "detection": ("detect", "last progress to the failure detected"),
    "recovery": ("recov", "failure detected to training resumed"),
    "other": ("other", "start-up, evaluations and gaps the logs do not explain"),
}


def class_rates(incidents: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Failures per root cause per 1000 GPU-hours with exact 95% Poisson intervals."""
    gpu_h = float(exposure["gpu_hours"].sum() or 0.0)
    c = incidents.group_by("root_cause").agg(pl.len().alias("n"), pl.col("planned").first())
    c = c.sort(["n", "root_cause"], descending=[True, False])
    k = c["n"].to_numpy().astype(float)
    lo = np.where(k > 0, stats.chi2.ppf(0.025, 2 * k) / 2, 0.0)
    hi = stats.chi2.ppf(0.975, 2 * k + 2) / 2
    scale = 1000.0 / gpu_h if gpu_h > 0 else float("nan")
    return c.with_columns(pl.Series("rate", k * scale), pl.Series("lo", lo * scale), pl.Series("hi", hi * scale))


def _rates_rows(rates: dict[str, Any] | None) -> pl.DataFrame | None:
    """Per-class rates per 1000 GPU-hours from rates.json (``classes.<class>.rates.gpu_hour``), if any."""
    rows = []
    for cls, fit in ((rates or {}).get("classes") or {}).items():
        g = ((fit or {}).get("rates") or {}).get("gpu_hour") or {}
        if g.get("rate") is None:
            continue
        wb = fit.get("weibull") or {}
        rows.append({"root_cause": str(cls), "n": int(fit.get("failures") or 0), "planned": False,
                     "rate": 1000 * float(g["rate"]), "lo": 1000 * float(g.get("lo") or 0.0),
                     "hi": 1000 * float(g.get("hi") or 0.0), "weibull_shape": wb.get("shape")})
    return pl.DataFrame(rows) if rows else None


def _rates_mtbf(rates: dict[str, Any] | None) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """(observed per size bucket, predicted curve) from rates.json's ``mtbf_vs_job_size``, if any."""
    m = (rates or {}).get("mtbf_vs_job_size") or {}
    obs = [r for r in m.get("observed") or [] if r.get("mtbf_hours") is not None]
    pred = [r for r in m.get("predicted") or [] if r.get("mtbf_hours") is not None]
    if not obs and not pred:
        return None
    o = pl.DataFrame([{"job_gpus": r.get("gpus_bucket"), "mtbf_h": r["mtbf_hours"], "failures": r.get("failures"),
                       "hours": r.get("job_hours")} for r in obs],
                     schema={"job_gpus": pl.Float64, "mtbf_h": pl.Float64, "failures": pl.Int64, "hours": pl.Float64})
    p = pl.DataFrame([{"gpus": r["gpus"], "mtbf_h": r["mtbf_hours"], "lo": r.get("lo"), "hi": r.get("hi")}
                      for r in pred],
                     schema={"gpus": pl.Float64, "mtbf_h": pl.Float64, "lo": pl.Float64, "hi": pl.Float64})
    return o, p


def _rates_lemons(rates: dict[str, Any] | None) -> pl.DataFrame | None:
    """Lemon nodes from rates.json (``lemon_nodes[]``) in the columns the page shows, if given."""
    if not rates or "lemon_nodes" not in rates:
        return None
    rows = [{"node": str(n.get("node")), "failures": int(n.get("failures") or 0),
             "expected": float(n.get("expected") or 0.0), "p": float(n.get("q_value", n.get("p_value")) or 0.0),
             "node_hours": float(n.get("node_hours") or 0.0),
             "classes": sorted({str(i.get("class")) for i in n.get("incidents") or []}),
             "jobs": len({(i.get("run"), i.get("job")) for i in n.get("incidents") or []}),
             "evidence": "; ".join(f"{i.get('run')} {i.get('job')} #{i.get('incident')} {i.get('t_onset')}"
                                   for i in (n.get("incidents") or [])[:3])}
            for n in rates["lemon_nodes"] or []]
    return pl.DataFrame(rows, schema={"node": pl.String, "failures": pl.Int64, "expected": pl.Float64,
                                      "p": pl.Float64, "node_hours": pl.Float64, "classes": pl.List(pl.String),
                                      "jobs": pl.Int64, "evidence": pl.String})


def mtbf_by_size(jobs: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Per job size (GPUs): running job-hours, unexpected failures, MTBF hours (null when none failed)."""
    hours = (exposure.unique(["run", "job", "attempt"]).group_by("run", "job")
             .agg(pl.col("hours").sum().alias("hours"), pl.col("job_gpus").max()))
    j = jobs.select("run", "job", "n_unexpected").join(hours, on=["run", "job"], how="inner")
    return (j.filter(pl.col("job_gpus").is_not_null())
            .group_by("job_gpus").agg(pl.col("hours").sum(), pl.col("n_unexpected").sum().alias("failures"),
                                      pl.len().alias("jobs"))
            .with_columns(pl.when(pl.col("failures") > 0).then(pl.col("hours") / pl.col("failures")).alias("mtbf_h"))
            .sort("job_gpus"))


def loglog_fit(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float] | None:
    """log y = a + b log x, weighted by failures; (a, b) or None with fewer than two sizes. Points
    a logarithm cannot take (a job of runs with no running time has an MTBF of 0 hours) are left out."""
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y) & (w > 0)
    x, y, w = x[keep], y[keep], w[keep]
    if len(np.unique(x)) < 2:
        return None
    b, a = np.polyfit(np.log(x), np.log(y), 1, w=np.sqrt(w))
    return float(a), float(b)


def lemon_nodes(incidents: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Nodes with more unexpected failures than their running hours explain (Poisson tail p)."""
    node_h = exposure.filter(pl.col("node").is_not_null()).group_by("node").agg(
        pl.col("hours").sum().alias("node_hours"))
    hits = (incidents.filter(~pl.col("planned").fill_null(False))
            .select("run", "job", "incident", "root_cause", "evidence", pl.col("nodes").alias("node"))
            .explode("node").drop_nulls("node"))
    if hits.height == 0 or node_h.height == 0:
        return pl.DataFrame()
    per = hits.group_by("node").agg(
        pl.len().alias("failures"), pl.col("root_cause").unique().sort().alias("classes"),
        pl.col("job").n_unique().alias("jobs"),
        pl.format("{} {}", "run", pl.col("evidence").list.first().fill_null("")).alias("evidence"),
    ).join(node_h, on="node", how="left")
    rate = float(per["failures"].sum()) / max(float(node_h["node_hours"].sum()), 1e-9)
    mu = per["node_hours"].fill_null(0.0).to_numpy() * rate
    k = per["failures"].to_numpy()
    p = stats.poisson.sf(k - 1, np.maximum(mu, 1e-12))
    return (per.with_columns(pl.Series("expected", mu), pl.Series("p", p))
            .filter((pl.col("failures") >= LEMON_MIN_FAILURES) & (pl.col("p") <= LEMON_MAX_P))
            .sort("p", "failures", "node", descending=[False, True, False]))


def _job_gpus(jobs: pl.DataFrame) -> pl.DataFrame:
    return jobs.select("run", "job", pl.col("gpus").fill_null(0).alias("_g"))


class PageOptions(TypedDict, total=False):
    """How the fleet page is rendered: its title ("fleet"), whether its tables had their secrets
    taken out (said in the footer; default no) and where the page loads plotly from (next to it)."""

    title: str
    redacted: bool
    plotly_src: str


def render_fleet_report(jobs: pl.DataFrame, attempts: pl.DataFrame, incidents: pl.DataFrame,
                        exposure: pl.DataFrame, rates: dict[str, Any] | None = None,
                        **options: Unpack[PageOptions]) -> str:
    """The fleet page (see the module doc). ``jobs.report`` links each job to its job report."""
    title, redacted = options.get("title", "fleet"), options.get("redacted", False)
    plotly_src = options.get("plotly_src", PLOTLY_JS)
    page = Page(f"{title}: fleet reliability", plotly_src)
    page.add(f"<h1>{esc(page.title)}</h1>")
    jobs, attempts, incidents, exposure = (clip_times(t) for t in (jobs, attempts, incidents, exposure))
    unexpected = incidents.filter(~pl.col("planned").fill_null(False))
    span = float(jobs["span_s"].sum() or 0.0)
    fleet_tor = float(jobs["useful_s"].sum() or 0.0) / span if span else None
    gpu_h = float(exposure["gpu_hours"].sum() or 0.0)
    t0, t1 = jobs["t_start"].min(), jobs["t_end"].max()
    page.add(f'<p class="sub">{jobs.height} jobs · {esc(str(t0)[:10])} → {esc(str(t1)[:10])} · '
             f"{gpu_h:,.0f} GPU-hours running · rates from "
             f"{'rates.json' if _rates_rows(rates) is not None else 'the tables (no fitted rates given)'}</p>")
    quantiles = tor_quantiles(jobs)
    page.add(cards([
        ("jobs", str(jobs.height)),
        ("incidents", str(incidents.height)),
        ("unexpected", str(unexpected.height)),
        ("median TOR", f"{quantiles[0.5]:.4f}" if quantiles else "-"),
        ("fleet TOR", f"{fleet_tor:.4f}" if fleet_tor is not None else "-"),
        ("lost GPU-hours", f"{float(jobs['lost_gpu_hours'].sum() or 0.0):,.0f}"),
    ]))
    unsized = jobs.filter(pl.col("gpus").is_null())
    if unsized.height:
        hours = float(unsized["span_s"].sum() or 0.0) / 3600
        page.add(f'<p class="warn">{unsized.height} of {jobs.height} jobs ({hours:,.0f} h observed) state no size in '
                 "their logs (no allocation, world size or GPU limit): their running time counts 0 GPU-hours, so "
                 "per-GPU-hour rates leave them out. Add the scheduler's accounting or the launcher's output to "
                 "count them; the jobs table shows their GPUs as 'unknown'.</p>")
    page.add('<nav class="toc">' + "".join(f'<a href="#{a}">{t}</a>' for a, t in (
        ("tor", "TOR"), ("rates", "failure rates"), ("mtbf", "MTBF vs size"), ("recovery", "recovery"),
        ("pareto", "lost GPU-hours"), ("lemons", "lemon nodes"), ("trends", "trends"),
        ("planned", "planned vs unexpected"), ("jobs", "jobs"))) + "</nav>")
    _tor_section(page, jobs, quantiles)
    _rates_section(page, incidents, exposure, rates)
    _mtbf_section(page, jobs, exposure, _rates_mtbf(rates))
    _recovery_section(page, incidents)
    _pareto_section(page, incidents, jobs)
    _lemon_section(page, incidents, exposure, _rates_lemons(rates))
    _trend_section(page, jobs, incidents)
    _planned_section(page, incidents, jobs)
    _jobs_section(page, jobs)
    page.add("<footer>toranalyze fleet report · times in UTC · exposure is running time only"
             f"{' · secrets redacted' if redacted else ''}</footer>")
    return page.render()


def _finite_tor(jobs: pl.DataFrame) -> pl.Series:
    tor = jobs["tor"].drop_nulls().cast(pl.Float64)
    return tor.filter(tor.is_finite())


def tor_quantiles(jobs: pl.DataFrame) -> dict[float, float]:
    """The jobs' TOR quantiles (linear interpolation, so p50 is the median): the one computation
    behind the header's median, the quantile table and the histogram's median line."""
    tor = _finite_tor(jobs)
    return {q: float(tor.quantile(q, "linear")) for q in TOR_QUANTILES} if tor.len() else {}  # type: ignore[arg-type]


def _nice_width(span: float, bins: int = 20) -> float:
    """A round bin width (1, 2, 2.5 or 5 times a power of ten) giving about ``bins`` bins."""
    raw = span / bins
    power = 10.0 ** np.floor(np.log10(raw))
    return float(next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw))


def tor_bins(tor: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(edges, counts) of a histogram whose range fits the values: round-width bins from just
    below the lowest TOR to just above the highest, none narrower than ``MIN_TOR_BIN`` (the
    header's four decimals: TORs that close are one value to a reader)."""
    x = tor.to_numpy().astype(float)
    lo, hi = float(x.min()), float(x.max())
    width = max(_nice_width(hi - lo), MIN_TOR_BIN) if hi > lo else MIN_TOR_BIN
    start = np.floor(lo / width) * width
    n = int(np.floor((hi - start) / width)) + 1
    edges = np.round(start + width * np.arange(n + 1), 10)
    return edges, np.histogram(x, edges)[0]


def _around(lo: float, hi: float, span: float) -> list[float]:
    """[lo, hi], widened about its middle to at least ``span``."""
    pad = max(span - (hi - lo), 0.0) / 2
    return [lo - pad, hi + pad]


def _tor_section(page: Page, jobs: pl.DataFrame, quantiles: dict[float, float]) -> None:
    page.add('<h2 id="tor">TOR distribution over jobs</h2>')
    tor = _finite_tor(jobs)
    if not tor.len():
        page.add('<p class="note">No job has a TOR.</p>')
        return
    edges, counts = tor_bins(tor)
    median = quantiles[0.5]
    page.figure({"data": [
        {"type": "bar", "x": ((edges[:-1] + edges[1:]) / 2).tolist(), "y": counts.tolist(),
         "width": float(edges[1] - edges[0]), "customdata": np.column_stack([edges[:-1], edges[1:]]).tolist(),
         "marker": {"color": PALETTE[0]}, "name": "jobs per TOR bin",
         "hovertemplate": "TOR %{customdata[0]:.4g} to %{customdata[1]:.4g}: %{y} jobs<extra></extra>"},
        {"type": "scatter", "mode": "lines", "x": [median, median], "y": [0, int(counts.max())],
         "name": f"median {median:.4f}", "line": {"color": PALETTE[3], "dash": "dash", "width": 2},
         "hovertemplate": f"median TOR {median:.4f}<extra></extra>"},
    ], "layout": {"xaxis": {"title": {"text": "TOR (optimal / observed time)"},
                            "range": _around(float(edges[0]), float(edges[-1]), MIN_TOR_SPAN)},
                  "yaxis": {"title": {"text": "jobs"}}, "bargap": 0.05,
                  "legend": {"orientation": "h", "y": -0.3}}}, height=300)
    heads = ["jobs with a TOR", *(f"p{int(q * 100)}{' (median)' if q == 0.5 else ''}" for q in TOR_QUANTILES)]
    page.add(table(heads, [[str(tor.len()), *(f"{quantiles[q]:.4f}" for q in TOR_QUANTILES)]],
                   [True] * len(heads), cls="t tor-quantiles"))
    rows = [(f"{a:.4g}", f"{b:.4g}", str(c)) for a, b, c in zip(edges[:-1], edges[1:], counts.tolist(), strict=True)]
    page.add("<details><summary>jobs per TOR bin</summary>"
             + table(["from TOR", "to TOR", "jobs"], rows, [True, True, True],
                     cls="t tor-bins") + "</details>")


def _rates_section(page: Page, incidents: pl.DataFrame, exposure: pl.DataFrame, rates: dict[str, Any] | None) -> None:
    page.add('<h2 id="rates">Failure rates per class (per 1000 GPU-hours, 95% interval)</h2>')
    r = _rates_rows(rates)
    if r is None:
        r = class_rates(incidents, exposure)
    if r.height == 0:
        page.add('<p class="note">No incidents.</p>')
        return
    r = r.sort("rate", "root_cause", descending=[False, True])  # drawn bottom-up: the table's order reversed
    names = esc_plot(r["root_cause"].to_list())
    page.figure({"data": [{"type": "scatter", "mode": "markers", "x": r["rate"].to_list(), "y": names,
                           "error_x": {"type": "data", "symmetric": False,
                                       "array": (r["hi"] - r["rate"]).to_list(),
                                       "arrayminus": (r["rate"] - r["lo"]).to_list(), "color": PALETTE[8]},
                           "marker": {"color": PALETTE[0], "size": 9}, "customdata": r["n"].to_list(),
                           "hovertemplate": "%{y}: %{x:.3g} per 1000 GPU-h (%{customdata} failures)<extra></extra>"}],
                 "layout": {"xaxis": {"title": {"text": "failures per 1000 GPU-hours"}, "rangemode": "tozero"},
                            "margin": {"l": 130}}}, height=max(240, 26 * r.height + 80))
    if "weibull_shape" not in r.columns:
        r = r.with_columns(pl.lit(None, pl.Float64).alias("weibull_shape"))
    cols = (r.sort("rate", "root_cause", descending=[True, False])
            .select("root_cause", "n", "rate", "lo", "hi", "weibull_shape"))
    rows = [(esc(c), str(n), f"{x:.3g}", f"{lo:.3g} – {hi:.3g}", "-" if k is None else f"{k:.2f}")
            for c, n, x, lo, hi, k in cols.iter_rows()]
    page.add(table(["class", "failures", "rate", "95% interval", "Weibull shape"], rows,
                   [False, True, True, True, True]))


def fmt_num(v: float | None) -> str:
    """A measured number as the tables show it: four significant digits, thousands separated."""
    if v is None or not np.isfinite(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


# Plain numbers on the log axes ("16,384", not "16.384k"): d3's group separator, trailing zeros cut.
PLAIN_TICKS = ",~g"
MTBF_POINTS = "MTBF (unexpected failures)"
NO_FAILURE = "no failure yet (MTBF > running hours)"


def _mtbf_section(page: Page, jobs: pl.DataFrame, exposure: pl.DataFrame,
                  fitted: tuple[pl.DataFrame, pl.DataFrame] | None) -> None:
    page.add('<h2 id="mtbf">MTBF against job size</h2>')
    m = mtbf_by_size(jobs, exposure)
    if fitted is not None and fitted[0].height:
        m = fitted[0].with_columns(pl.lit(None, pl.Int64).alias("jobs"))
    ok, none = m.filter(pl.col("mtbf_h").is_not_null()), m.filter(pl.col("mtbf_h").is_null())
    data: list[dict[str, Any]] = [{"type": "scatter", "mode": "markers", "name": MTBF_POINTS,
                                   "x": ok["job_gpus"].to_list(), "y": ok["mtbf_h"].to_list(),
                                   "customdata": ok.select("failures", "jobs").rows(),
                                   "marker": {"color": PALETTE[0], "size": 10},
                                   "hovertemplate": "%{x} GPUs: MTBF %{y:.3g} h (%{customdata[0]} failures, "
                                                    "%{customdata[1]} jobs)<extra></extra>"}]
    if none.height:
        data.append({"type": "scatter", "mode": "markers", "name": NO_FAILURE,
                     "x": none["job_gpus"].to_list(), "y": none["hours"].to_list(),
                     "marker": {"color": PALETTE[8], "size": 10, "symbol": "triangle-up-open"}})
    sizes = (jobs["gpus"].max(), m["job_gpus"].max())
    largest = max([float(g) for g in sizes if isinstance(g, int | float)], default=0.0)
    if fitted is not None and fitted[1].height:
        data += _fitted_mtbf(fitted[1].sort("gpus"), largest)
    elif ok.height and (fit := loglog_fit(ok["job_gpus"].to_numpy().astype(float), ok["mtbf_h"].to_numpy(),
                                          ok["failures"].fill_null(1).to_numpy().astype(float))) is not None:
        a, b = fit  # drawn over the observed sizes only
        xs = np.geomspace(float(ok["job_gpus"].min()), float(ok["job_gpus"].max()), 20)  # type: ignore[arg-type]
        data.append({"type": "scatter", "mode": "lines", "name": f"fit: MTBF ∝ GPUs^{b:.2f}", "x": xs.tolist(),
                     "y": np.exp(a + b * np.log(xs)).tolist(), "line": {"color": PALETTE[3]}})
    page.figure({"data": data, "layout": {
        "xaxis": {"type": "log", "title": {"text": "job size (GPUs)"}, "tickvals": [2 ** k for k in range(18)],
                  "tickformat": PLAIN_TICKS},
        "yaxis": {"type": "log", "title": {"text": "MTBF (running hours)"}, "tickformat": PLAIN_TICKS},
        "legend": {"orientation": "h", "y": -0.3}}}, height=360)
    cols = m.sort("job_gpus").select("job_gpus", "jobs", "hours", "failures", "mtbf_h")
    rows = [(fmt_num(g), "-" if j is None else str(j), fmt_num(h), "-" if f is None else str(f),
             fmt_num(t) if t is not None else "-" if h is None else f"> {fmt_num(h)}")
            for g, j, h, f, t in cols.iter_rows()]
    page.add(table(["job size (GPUs)", "jobs", "running hours", "unexpected failures", "MTBF (running hours)"], rows,
                   [True] * 5, cls="t mtbf"))


def _fitted_mtbf(p: pl.DataFrame, largest: float) -> list[dict[str, Any]]:
    """rates.json's predicted MTBF: its 95% band, the line solid over the observed job sizes and
    dashed, labelled as extrapolated, beyond the largest job observed."""
    x, y = p["gpus"].to_numpy().astype(float), p["mtbf_h"].to_numpy().astype(float)
    if x[0] < largest < x[-1] and largest not in x:  # a point at the edge, so the two parts meet
        k = int(np.searchsorted(x, largest))
        y = np.insert(y, k, np.exp(np.interp(np.log(largest), np.log(x), np.log(y))))
        x = np.insert(x, k, largest)
    within, beyond = x <= largest, x >= largest
    out: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "name": "fitted (rates.json) with 95% band",
         "x": p["gpus"].to_list() + p["gpus"].reverse().to_list(),
         "y": p["hi"].fill_null(p["mtbf_h"]).to_list() + p["lo"].fill_null(p["mtbf_h"]).reverse().to_list(),
         "fill": "toself", "fillcolor": "rgba(213,94,0,0.15)", "line": {"width": 0}, "hoverinfo": "skip"}]
    if within.sum() >= 1:
        out.append({"type": "scatter", "mode": "lines", "name": "fitted MTBF (rates.json)", "x": x[within].tolist(),
                    "y": y[within].tolist(), "line": {"color": PALETTE[3]}})
    if beyond.sum() >= 2:
        xs = x[beyond]
        mid = len(xs) // 2
        out.append({"type": "scatter", "mode": "lines+text", "x": xs.tolist(), "y": y[beyond].tolist(),
                    "name": f"extrapolated beyond the largest job observed ({fmt_num(largest)} GPUs)",
                    "text": ["extrapolated" if i == mid else "" for i in range(len(xs))],
                    "textposition": "top center", "textfont": {"color": PALETTE[3]},
                    "line": {"color": PALETTE[3], "dash": "dash"}})
    return out


def _recovery_section(page: Page, incidents: pl.DataFrame) -> None:
    page.add('<h2 id="recovery">Recovery time per root cause (last progress → resumed)</h2>')
    d = incidents.filter(pl.col("downtime_s").is_not_null() & (pl.col("downtime_s") > 0))
    if d.height == 0:
        page.add('<p class="note">No recoveries.</p>')
        return
    order = d.group_by("root_cause").agg(pl.col("downtime_s").median().alias("m"))
    order = order.sort(["m", "root_cause"], descending=[True, False])
    data = []
    for i, cause in enumerate(order["root_cause"].to_list()):
        mins = d.filter(pl.col("root_cause") == cause)["downtime_s"] / 60.0
        data.append({"type": "box", "name": esc_plot([cause])[0], "y": mins.to_list(), "boxpoints": "outliers",
                     "marker": {"color": PALETTE[i % len(PALETTE)]}, "showlegend": False})
    page.figure({"data": data, "layout": {"yaxis": {"type": "log", "title": {"text": "minutes"}}}}, height=340)


def _pareto_section(page: Page, incidents: pl.DataFrame, jobs: pl.DataFrame) -> None:
    page.add('<h2 id="pareto">Lost GPU-hours by root cause</h2>')
    lost = (incidents.join(_job_gpus(jobs), on=["run", "job"], how="left")
            .with_columns(((pl.col("downtime_s").fill_null(0) + pl.col("lost_time_s").fill_null(0))
                           * pl.col("_g").fill_null(0) / 3600).alias("gh"))
            .group_by("root_cause").agg(pl.col("gh").sum()).sort(["gh", "root_cause"], descending=[True, False]))
    if lost.height == 0:
        page.add('<p class="note">No incidents.</p>')
        return
    total = float(lost["gh"].sum() or 0.0)
    cum = (lost["gh"].cum_sum() / total * 100).to_list() if total else [0.0] * lost.height
    names = esc_plot(lost["root_cause"].to_list())
    page.figure({"data": [
        {"type": "bar", "x": names, "y": lost["gh"].to_list(), "name": "GPU-hours lost (down + rework)",
         "marker": {"color": PALETTE[3]}, "hovertemplate": "%{x}: %{y:,.1f} GPU-h<extra></extra>"},
        {"type": "scatter", "mode": "lines+markers", "x": names, "y": cum, "yaxis": "y2", "name": "cumulative %",
         "line": {"color": PALETTE[0]}, "hovertemplate": "%{y:.0f}%<extra></extra>"},
    ], "layout": {"yaxis": {"title": {"text": "GPU-hours"}},
                  "yaxis2": {"overlaying": "y", "side": "right", "range": [0, 105], "title": {"text": "%"},
                             **OWN_TICKS},
                  "margin": {"r": 60},
                  "legend": {"orientation": "h", "y": -0.3}}}, height=320)


def _lemon_section(page: Page, incidents: pl.DataFrame, exposure: pl.DataFrame, fitted: pl.DataFrame | None) -> None:
    page.add('<h2 id="lemons">Lemon nodes</h2>')
    if fitted is not None:
        page.add('<p class="note">From rates.json: node-level failures improbably many for the node\'s running '
                 "hours (p is the Benjamini–Hochberg q value).</p>")
        lem = fitted
    else:
        page.add(f'<p class="note">Nodes with at least {LEMON_MIN_FAILURES} unexpected failures and a Poisson tail '
                 f"probability ≤ {LEMON_MAX_P} given their running hours and the fleet's per-node-hour rate.</p>")
        lem = lemon_nodes(incidents, exposure)
    if lem.height == 0:
        page.add('<p class="note">None found.</p>')
        return
    rows = [(esc(n), str(k), f"{e:.2f}", f"{p:.2g}", f"{h:,.0f}", esc(", ".join(c)), str(j),
             f'<span class="ev">{esc(ev)}</span>')
            for n, k, e, p, h, c, j, ev in lem.head(50).select(
                "node", "failures", "expected", "p", pl.col("node_hours").fill_null(0.0), "classes", "jobs",
                "evidence").iter_rows()]
    page.add(table(["node", "failures", "expected", "p", "node-hours", "classes", "jobs", "evidence"], rows,
                   [False, True, True, True, True, False, True, False]))


# A second y axis gets round ticks of its own (plotly.js otherwise places them where the first
# axis has its ticks: 0.194, 0.388, ...).
OWN_TICKS = {"tickmode": "auto", "showgrid": False}


def _padded(values: pl.Series, share: float = 0.1) -> tuple[float, float]:
    """The values' range widened by ``share`` of it on each side ((0, 1) for no values)."""
    v = values.drop_nulls().cast(pl.Float64)
    v = v.filter(v.is_finite())
    if not v.len():
        return 0.0, 1.0
    lo, hi = float(v.min()), float(v.max())  # type: ignore[arg-type]
    return lo - share * (hi - lo), hi + share * (hi - lo)


def _trend_section(page: Page, jobs: pl.DataFrame, incidents: pl.DataFrame) -> None:
    page.add('<h2 id="trends">Trends over calendar time</h2>')
    t = incidents.select(pl.coalesce("t_last_progress", "t_detected").alias("t"), "planned").drop_nulls("t")
    if t.height == 0:
        page.add('<p class="note">No incidents.</p>')
        return
    days = t.select((pl.col("t").max() - pl.col("t").min()).dt.total_seconds() / 86400).item()
    every = "1h" if days <= 2 else "1d" if days <= 60 else "1w"
    fmt = "%Y-%m-%d %H:00" if every == "1h" else "%Y-%m-%d"
    unit = {"1h": "hour", "1d": "day", "1w": "week"}[every]
    b = (t.with_columns(pl.col("t").dt.truncate(every).alias("bin"))
         .group_by("bin", "planned").len().sort("bin"))
    tj = (jobs.filter(pl.col("t_start").is_not_null()).with_columns(pl.col("t_start").dt.truncate(every).alias("bin"))
          .group_by("bin").agg(pl.col("tor").median()).sort("bin"))
    data = []
    for planned, name, colour in ((False, "unexpected", PALETTE[3]), (True, "planned", PALETTE[8])):
        part = b.filter(pl.col("planned").fill_null(False) == planned)
        data.append({"type": "bar", "name": f"{name} incidents", "x": part["bin"].dt.strftime(fmt).to_list(),
                     "y": part["len"].to_list(), "marker": {"color": colour}})
    data.append({"type": "scatter", "mode": "lines+markers", "name": "median TOR of jobs started", "yaxis": "y2",
                 "x": tj["bin"].dt.strftime(fmt).to_list(), "y": tj["tor"].to_list(),
                 "line": {"color": PALETTE[0]}})
    page.figure({"data": data, "layout": {
        "barmode": "stack", "xaxis": {"type": "date", "title": {"text": f"per {unit}"}},
        "yaxis": {"title": {"text": "incidents"}},
        "yaxis2": {"overlaying": "y", "side": "right", "title": {"text": "median TOR"}, **OWN_TICKS,
                   "range": _around(*_padded(tj["tor"]), MIN_TOR_SPAN)},
        "margin": {"r": 60},
        "legend": {"orientation": "h", "y": -0.3}}}, height=320)


def _planned_section(page: Page, incidents: pl.DataFrame, jobs: pl.DataFrame) -> None:
    page.add('<h2 id="planned">Planned against unexpected</h2>')
    s = (incidents.join(_job_gpus(jobs), on=["run", "job"], how="left")
         .with_columns(pl.when(pl.col("planned").fill_null(False)).then(pl.lit("planned"))
                       .otherwise(pl.lit("unexpected")).alias("kind"),
                       ((pl.col("downtime_s").fill_null(0) + pl.col("lost_time_s").fill_null(0))
                        * pl.col("_g").fill_null(0) / 3600).alias("gh"))
         .group_by("kind").agg(pl.len().alias("n"), pl.col("gh").sum(), pl.col("downtime_s").median().alias("med"))
         .sort("kind"))
    rows = [(esc(k), str(n), f"{g:,.1f}", fmt_duration(m)) for k, n, g, m in s.iter_rows()]
    page.add(table(["kind", "incidents", "GPU-hours lost", "median downtime"], rows, [False, True, True, True]))


def _overheads(r: dict[str, Any]) -> str:
    span = r["span_s"]
    shares = ((OVERHEADS[b][0], (r.get(f"{b}_s") or 0) / span) for b in BUCKETS[1:]) if span else ()
    return " ".join(f"{esc(k)} {v:.0%}" for k, v in shares if v >= 0.01)


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|^//")


def _link(text: str, href: str | None) -> str:
    """A link to a job report: relative paths only (no scheme), percent-encoded, escaped."""
    if not href or _SCHEME.match(href):
        return esc(text)
    return f'<a href="{esc(quote(href, safe="/#"))}">{esc(text)}</a>'


def _jobs_section(page: Page, jobs: pl.DataFrame) -> None:
    page.add('<h2 id="jobs">Jobs (lowest TOR first)</h2>')
    j = jobs.sort("tor", "run", "job", nulls_last=True).head(MAX_JOB_ROWS)
    rows = []
    for r in j.iter_rows(named=True):
        name = r["job"] if not r["run"] or r["run"] == r["job"] else f"{r['run']} · {r['job']}"
        rows.append((_link(name, r.get("report")), "unknown" if r["gpus"] is None else str(r["gpus"]),
                     fmt_duration(r["span_s"]), "-" if r["tor"] is None else f"{r['tor']:.4f}",
                     str(r["n_incidents"] or 0), str(r["n_unexpected"] or 0),
                     f"{(r['lost_gpu_hours'] or 0):,.1f}",
                     _overheads(r)))
    legend = " · ".join(f"<b>{esc(k)}</b> {esc(what)}" for k, what in OVERHEADS.values())
    page.add(f'<p class="note legend">Overheads: each bucket\'s share of the job\'s observed time, where 1% or more: '
             f"{legend}.</p>")
    page.add(scroll_box(table(
        ["job", "GPUs", "observed", "TOR", "incidents", "unexpected", "lost GPU-h", "overheads (share of observed)"],
        rows,
        [False, True, True, True, True, True, True, False], cls="t jobs"), len(rows)))
