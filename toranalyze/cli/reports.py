"""Writing the HTML reports: the page and, once per directory, plotly.min.js beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from toranalyze.fleet.store import write_text
from toranalyze.report.html import write_plotly_js


def write_page(out_dir: Path, html: str, name: str = "report.html") -> Path:
    """A report page written into ``out_dir``, with plotly.min.js beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_plotly_js(out_dir)
    path = out_dir / name
    write_text(html, path)
    return path


def write_job_report(out_dir: Path, analysis: Any, events: pl.DataFrame, summary: dict[str, Any]) -> Path:
    """``out_dir/report.html`` for an analysis as it is (``analyze`` renders its report, redacted
    when asked, in ``fleet.pipeline``)."""
    from toranalyze.reconstruct.skew import clock_skew
    from toranalyze.report.job import JobReportInput, render_job_report

    page = JobReportInput(analysis, events, summary, clock_skew=clock_skew(events))
    return write_page(out_dir, render_job_report(page))


def write_fleet_report(out_dir: Path, tables: dict[str, pl.DataFrame], rates: dict[str, Any] | None = None, *,
                       title: str = "fleet", redacted: bool = False) -> Path:
    """``out_dir/report.html`` for the fleet tables (``jobs.report`` paths are relative to ``out_dir``)."""
    from toranalyze.report.fleet import render_fleet_report

    html = render_fleet_report(tables["jobs"], tables["attempts"], tables["incidents"], tables["exposure"], rates,
                               title=title, redacted=redacted)
    return write_page(out_dir, html)


def uncovered(paths: tuple[str, ...] | list[str]) -> tuple[pl.DataFrame | None, list[str]]:
    """Every unrecognised line of the text logs under ``paths`` (with ``where`` = file:line), or
    None, and one line per input that could not be read (skipped: the rest is still checked)."""
    from toranalyze.errors import ToranalyzeError
    from toranalyze.fleet.pipeline import NothingRead
    from toranalyze.ingest.coverage import uncovered_lines
    from toranalyze.ingest.discover import discover
    from toranalyze.ingest.registry import default_registry
    from toranalyze.ingest.streams import looks_binary, read_head

    registry = default_registry()
    files, found = discover(paths)
    problems = [f"{p.where()}: {p.message}" for p in found]
    if not files:  # nothing was checked: saying every line was recognised would be false
        raise NothingRead(problems, {})
    frames = []
    for f in files:
        try:
            head = read_head(f.path)
            if not head or looks_binary(head):
                continue
            mode, parsers = registry.choose(f.path, head.decode("utf-8", "replace"))
            if mode != "text":
                continue  # documents are read whole by the parser that claims them
            missed = uncovered_lines(f.path, parsers)
        except (OSError, ToranalyzeError) as exc:  # unreadable now: skipped, said once by the caller
            problems.append(f"{f.path}: {getattr(exc, 'message', None) or exc}")
            continue
        if missed.height:
            frames.append(missed.with_columns(pl.lit(f.path).alias("file")))
    if not frames:
        return None, problems
    return pl.concat(frames).with_columns(pl.format("{}:{}", "file", "line").alias("where")), problems


SHAPES_MAX_LINES = 2_000_000  # re-reading bigger inputs for the data-quality table is not worth the wait


def unrecognised_shapes(paths: tuple[str, ...], lines: int, top: int = 15) -> pl.DataFrame | None:
    """The most common unrecognised line shapes, when the inputs are small enough to re-read."""
    if lines > SHAPES_MAX_LINES:
        return None
    from toranalyze.fleet.pipeline import NothingRead
    from toranalyze.ingest.coverage import line_shapes
    from toranalyze.reconstruct.job_names import input_root

    try:  # (its problems were reported by the ingest that came first)
        missed, _ = uncovered(paths)
    except NothingRead:  # gone since they were read: no shapes to show
        return None
    if missed is None:
        return None
    root = input_root(paths).rstrip("/")
    if root:  # shown to people: relative to the inputs' common folder, like every other path
        missed = missed.with_columns(pl.col("where").str.strip_prefix(root + "/"))
    return line_shapes(missed, top)

