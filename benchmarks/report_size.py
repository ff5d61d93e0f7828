"""Report size and time until the last figure is drawn in headless Chromium.

Two cases (the acceptance bar is under 15 MB and under 3 s each):

- ``month``: a simulated 30-day run with over a thousand incidents and 1.3 million step records
  (``benchmarks/report_30d.toml``), analysed by ``toranalyze analyze``; its report.html is opened.
- ``fleet``: a 1,000-job fleet: the two sample runs analysed once, their fleet tables replicated
  500 times with shifted times, varied sizes and a shared node pool, rendered by the fleet report.

Usage: ``python benchmarks/report_size.py [--case month|fleet|both] [--out benchmarks/out]``.
Prints one JSON line per case, after the same measure for a page holding plotly.js and no figure
(the floor on this machine: parsing the 4.8 MB plotly.min.js).
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


def _measure(case: str, page: Path, shot: Path, extra: dict[str, object]) -> dict[str, object]:
    def drawn_ms(p: object) -> tuple[int, int]:
        return tuple(p.evaluate(  # type: ignore[attr-defined,return-value]
            "[Number(document.body.dataset.startMs), Number(document.body.dataset.drawnMs)]"))

    opened, ms = open_report(page, shot, timeout_s=120, check=drawn_ms)
    # second open: warm file cache, as when a user opens the report again
    opened2, ms2 = open_report(page, None, timeout_s=120, check=drawn_ms)
    import os

    return {
        "case": case, "load_average_1m": round(os.getloadavg()[0], 1), **extra,
        "report_mb": round(page.stat().st_size / 1e6, 2),
        "plotly_js_mb": round((page.parent / PLOTLY_JS).stat().st_size / 1e6, 2),
        "figures": opened.figures, "rendered": opened.rendered,
        "console_errors": len(opened.console_errors) + len(opened.page_errors),
        "last_figure_drawn_s": round(ms[1] / 1000, 2), "of_which_drawing_s": round((ms[1] - ms[0]) / 1000, 2),
        "last_figure_drawn_s_second_open": round(ms2[1] / 1000, 2),
        "wall_to_last_figure_s": round(opened.seconds_to_last_figure, 2),
    }


def month(out: Path) -> dict[str, object]:
    logs, res = out / "month_logs", out / "month"
    if not (logs / "truth.json").exists():
        subprocess.run([sys.executable, "-m", "toranalyze", "simulate", "--seed", "5", "--config",
                        str(ROOT / "benchmarks" / "report_30d.toml"), "--out", str(logs)], check=True)
    t0 = time.perf_counter()
    if not (res / "report.html").exists():
        subprocess.run([sys.executable, "-m", "toranalyze", "analyze", str(logs), "-o", str(res), "-q"], check=True)
    import polars as pl

    inc = pl.read_parquet(res / "incidents.parquet").height
    steps = pl.read_parquet(res / "tor.parquet")["steps_preserved"].sum()
    return _measure("month", res / "report.html", out / "month-report.png",
                    {"incidents": inc, "steps_preserved": int(steps), "analyze_s": round(time.perf_counter() - t0, 1)})


def fleet(out: Path) -> dict[str, object]:
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
                    {"jobs": jobs.height, "incidents": incidents.height, "render_s": round(render_s, 2)})


def floor(out: Path) -> dict[str, object]:
    """The same measure for a page with no figure: what loading plotly.js alone costs on this machine."""
    from toranalyze.report.html import Page

    d = out / "empty"
    d.mkdir(parents=True, exist_ok=True)
    page = Page("empty")
    page.add("<p>no figure</p>")
    (d / "report.html").write_text(page.render(), encoding="utf-8")
    write_plotly_js(d)
    return _measure("plotly.js alone (no figure)", d / "report.html", out / "empty.png", {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=("month", "fleet", "both"), default="both")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(floor(args.out)), flush=True)
    for case in ("month", "fleet") if args.case == "both" else (args.case,):
        print(json.dumps(month(args.out) if case == "month" else fleet(args.out)), flush=True)


if __name__ == "__main__":
    main()
