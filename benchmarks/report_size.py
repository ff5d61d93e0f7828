"""Report size and time until the last figure is drawn in headless Chromium.

Two cases (the acceptance bar is under 15 MB and under 3 s each):

- ``month``: a simulated 30-day run with over a thousand incidents and 1.3 million step records
  (``benchmarks/report_30d.toml``), analysed by ``toranalyze analyze``; its report.html is opened.
- ``fleet``: a 1,000-job fleet: the two sample runs analysed once, their fleet tables replicated
  500 times with shifted times, varied sizes and a shared node pool, rendered by the fleet report.

Usage: ``python benchmarks/report_size.py [--case month|fleet|both] [--out benchmarks/out] [--opens 3]
[--reuse]``. Each page is opened ``--opens`` times in a fresh browser; the JSON line per case gives
every opening's time from navigation until the last figure is on screen (``last_figure_drawn_s``,
the page's data-drawn-ms) and their median, and until the whole page, tables included, is parsed
(``page_parsed_s``), after the same measure for a page holding plotly.js and no figure (the floor
on this machine: parsing the 4.8 MB plotly.min.js).
``--reuse`` (month): when ``OUT/month/events.parquet`` is there from an earlier run, skip the
14-minute ingest, re-analyse those events (about 20 s) and render the report with the current code.
Needs the test extra (playwright) and a chromium executable.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from toranalyze.report.browser import open_report  # noqa: E402
from toranalyze.report.html import PLOTLY_JS, write_plotly_js  # noqa: E402


def _measure(case: str, page: Path, shot: Path, extra: dict[str, object], opens: int = 3) -> dict[str, object]:
    def drawn_ms(p: object) -> tuple[int, int, list[int], int]:
        return tuple(p.evaluate(  # type: ignore[attr-defined]
            "[Number(document.body.dataset.startMs), Number(document.body.dataset.drawnMs), window.__figureMs,"
            " Number(document.body.dataset.completeMs)]"))

    import os
    import statistics

    runs = []  # each opening in a fresh browser; the first also takes the screenshot
    for k in range(opens):
        runs.append(open_report(page, shot if k == 0 else None, timeout_s=120, check=drawn_ms))
    opened = runs[0][0]
    last = [round(ms[1] / 1000, 2) for _, ms in runs]
    return {
        "case": case, "load_average_1m": round(os.getloadavg()[0], 1), **extra,
        "report_mb": round(page.stat().st_size / 1e6, 2),
        "plotly_js_mb": round((page.parent / PLOTLY_JS).stat().st_size / 1e6, 2),
        "figures": opened.figures, "rendered": opened.rendered,
        "console_errors": len(opened.console_errors) + len(opened.page_errors),
        "last_figure_drawn_s": last, "median_s": statistics.median(last),
        "of_which_drawing_s": [round((ms[1] - ms[0]) / 1000, 2) for _, ms in runs],
        "per_figure_ms": runs[-1][1][2],
        "page_parsed_s": [round(ms[3] / 1000, 2) for _, ms in runs],
        "wall_to_last_figure_s": [round(o.seconds_to_last_figure, 2) for o, _ in runs],
    }


def month(out: Path, opens: int = 3, reuse: bool = False) -> dict[str, object]:
    logs, res = out / "month_logs", out / "month"
    t0 = time.perf_counter()
    if reuse and (res / "events.parquet").exists():
        _rerender(logs, res)
    else:
        if not (logs / "truth.json").exists():
            subprocess.run([sys.executable, "-m", "toranalyze", "simulate", "--seed", "5", "--config",
                            str(ROOT / "benchmarks" / "report_30d.toml"), "--out", str(logs)], check=True)
        if not (res / "report.html").exists():
            subprocess.run([sys.executable, "-m", "toranalyze", "analyze", str(logs), "-o", str(res), "-q"],
                           check=True)
    import polars as pl

    inc = pl.read_parquet(res / "incidents.parquet").height
    steps = pl.read_parquet(res / "tor.parquet")["steps_preserved"].sum()
    return _measure("month", res / "report.html", out / "month-report.png",
                    {"incidents": inc, "steps_preserved": int(steps), "reused": reuse,
                     "analyze_s": round(time.perf_counter() - t0, 1)}, opens)


def _rerender(logs: Path, res: Path) -> None:
    """What ``analyze`` does after ingest, from the events it wrote (the line-shape table, which
    needs the logs re-read, is left out as ``analyze`` does for inputs this large)."""
    import polars as pl

    from toranalyze.cli.reports import write_job_report
    from toranalyze.reconstruct.analysis import analyze_events
    from toranalyze.reconstruct.job_names import job_keys, rename_jobs, short_job_names

    an = analyze_events(pl.read_parquet(res / "events.parquet"))
    an = rename_jobs(an, short_job_names(job_keys(an), (str(logs),)))
    summary = json.loads((res / "summary.json").read_text())
    write_job_report(res, an, pl.read_parquet(res / "events.parquet"), summary)


def tiled_month(out: Path, opens: int = 3, tiles: int = 130) -> dict[str, object]:
    """A quicker stand-in for ``month`` (no 500 MB ingest): the sample run's analysis repeated
    ``tiles`` times back to back (130 tiles: 36 days, 1,040 incidents), rendered as one job."""
    import polars as pl

    from toranalyze.ingest.pipeline import ingest
    from toranalyze.reconstruct.analysis import Analysis, analyze_events
    from toranalyze.report.job import JobReportInput, render_job_report

    result = ingest([str(ROOT / "sample_logs" / "gpt-small")])
    an = analyze_events(result.events)
    row = an.tor.row(0, named=True)
    span_us = int(row["t_obs_s"] * 1e6) + 60_000_000
    times = ("t_start", "t_end", "t_first_step_start", "t_last_step_end", "t_last_progress", "t_first_error",
             "t_detected", "t_restart", "t_resumed", "t_caught_up", "start", "end")

    def tile(df: pl.DataFrame, k: int, attempts: int, steps: int) -> pl.DataFrame:
        d = df.with_columns([(pl.col(c) + (pl.duration(microseconds=k * span_us) if df.schema[c] != pl.Int64
                                           else pl.lit(k * span_us))).alias(c) for c in times if c in df.columns])
        d = d.with_columns([(pl.col(c) + k * attempts).cast(df.schema[c]).alias(c) for c in ("attempt",)
                            if c in d.columns])
        d = d.with_columns([(pl.col(c) + k * steps).alias(c) for c in ("step", "first_step", "last_step")
                            if c in d.columns])
        return d.with_columns(pl.col("incident") + k * 8) if "incident" in d.columns else d

    n_att, n_steps = an.attempts.height, int(an.attempts["last_step"].max())  # type: ignore[arg-type]
    parts = {k: pl.concat([tile(getattr(an, k), i, n_att, n_steps) for i in range(tiles)])
             for k in ("attempts", "incidents", "slow_periods", "progress", "checkpoints")}
    tor = an.tor.with_columns(
        *[(pl.col(c) * tiles) for c in an.tor.columns if c.endswith("_s") or c.endswith("_us")],
        pl.col("n_incidents") * tiles, pl.col("n_attempts") * tiles,
        pl.col("t_end") + pl.duration(microseconds=(tiles - 1) * span_us))
    big = Analysis(tor=tor, notes=[], **parts)
    t0 = time.perf_counter()
    html = render_job_report(JobReportInput(big, result.events, result.summary()), title="tiled month")
    render_s = time.perf_counter() - t0
    d = out / "tiled_month"
    d.mkdir(parents=True, exist_ok=True)
    (d / "report.html").write_text(html, encoding="utf-8")
    write_plotly_js(d)
    days = (tor["t_end"][0] - tor["t_start"][0]).total_seconds() / 86400
    return _measure("tiled month", d / "report.html", out / "tiled-month-report.png",
                    {"days": round(days, 1), "incidents": parts["incidents"].height,
                     "step_rows": parts["progress"].height, "render_s": round(render_s, 2)}, opens)


def fleet(out: Path, opens: int = 3) -> dict[str, object]:
    from tests.report.fleet_helper import fleet_tables, replicate
    from toranalyze.ingest.pipeline import ingest
    from toranalyze.reconstruct.analysis import analyze_events
    from toranalyze.report.fleet import render_fleet_report

    result = ingest([str(ROOT / "sample_logs")])
    an = analyze_events(result.events)
    base = fleet_tables(an, result.events, str(ROOT / "sample_logs"))
    jobs, attempts, incidents, exposure = replicate(*base, copies=500)
    t0 = time.perf_counter()
    html = render_fleet_report(jobs, attempts, incidents, exposure, None, title="1000 jobs")
    render_s = time.perf_counter() - t0
    d = out / "fleet1000"
    d.mkdir(parents=True, exist_ok=True)
    (d / "report.html").write_text(html, encoding="utf-8")
    write_plotly_js(d)
    return _measure("fleet", d / "report.html", out / "fleet1000-report.png",
                    {"jobs": jobs.height, "incidents": incidents.height, "render_s": round(render_s, 2)}, opens)


def floor(out: Path, opens: int = 3) -> dict[str, object]:
    """The same measure for a page with no figure: what loading plotly.js alone costs on this machine."""
    from toranalyze.report.html import Page

    d = out / "empty"
    d.mkdir(parents=True, exist_ok=True)
    page = Page("empty")
    page.add("<p>no figure</p>")
    (d / "report.html").write_text(page.render(), encoding="utf-8")
    write_plotly_js(d)
    return _measure("plotly.js alone (no figure)", d / "report.html", out / "empty.png", {}, opens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=("month", "tiled-month", "fleet", "both"), default="both")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out")
    ap.add_argument("--opens", type=int, default=3, help="openings per page (fresh browser each)")
    ap.add_argument("--reuse", action="store_true", help="month: re-analyse the saved events.parquet")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(floor(args.out, args.opens)), flush=True)
    for case in ("month", "fleet") if args.case == "both" else (args.case,):
        if case == "month":
            res = month(args.out, args.opens, args.reuse)
        else:
            res = tiled_month(args.out, args.opens) if case == "tiled-month" else fleet(args.out, args.opens)
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
