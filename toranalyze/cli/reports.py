"""Writing the HTML reports: the page and, once per directory, plotly.min.js beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from toranalyze.report.html import PLOTLY_JS, write_plotly_js


def write_job_report(out_dir: Path, analysis: Any, events: pl.DataFrame, summary: dict[str, Any], *,
                     redact: bool = True, plotly_dir: Path | None = None, jobs: list[str] | None = None) -> Path:
    """``out_dir/report.html`` for an analysis; plotly.js goes to ``plotly_dir`` (default: beside it)."""
    from toranalyze.report.job import JobReportInput, render_job_report

    out_dir.mkdir(parents=True, exist_ok=True)
    js_dir = plotly_dir or out_dir
    write_plotly_js(js_dir)
    src = Path(_relpath(js_dir, out_dir)) / PLOTLY_JS
    page = render_job_report(JobReportInput(analysis, events, summary), redact=redact, plotly_src=src.as_posix(),
                             jobs=jobs)
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_fleet_report(out_dir: Path, jobs: pl.DataFrame, attempts: pl.DataFrame, incidents: pl.DataFrame,
                       exposure: pl.DataFrame, rates: dict[str, Any] | None = None, *, title: str = "fleet",
                       redact: bool = True) -> Path:
    """``out_dir/report.html`` for the fleet tables (``jobs.report`` paths are relative to ``out_dir``)."""
    from toranalyze.report.fleet import render_fleet_report

    out_dir.mkdir(parents=True, exist_ok=True)
    write_plotly_js(out_dir)
    path = out_dir / "report.html"
    path.write_text(render_fleet_report(jobs, attempts, incidents, exposure, rates, title=title, redact=redact),
                    encoding="utf-8")
    return path


def _relpath(target: Path, start: Path) -> str:
    import os

    return os.path.relpath(target.resolve(), start.resolve())
