"""The same analysis renders the same job page: rows with equal counts keep one order (by name), and
the order of the events does not choose which message an evidence line shows."""

from __future__ import annotations

import re

import polars as pl

from toranalyze.report.job import JobReportInput, render_job_report

from .conftest import Run

TIED = [f"tied-{k:02d}" for k in range(12)]


def _with_ties(run: Run) -> tuple[pl.DataFrame, dict[str, object]]:
    """Events with a dozen sources of 5 events each, and a summary with a dozen parsers of equal
    line counts; every evidence line also recorded a second time with another message."""
    base = run.events.head(5)
    tied = pl.concat([base.with_columns(pl.lit(s).alias("source")) for s in TIED])
    refs = run.analysis.incidents.select(pl.col("evidence").explode()).drop_nulls().with_columns(
        pl.col("evidence").str.extract(r"^(.*):(\d+)$", 1).alias("file"),
        pl.col("evidence").str.extract(r"^(.*):(\d+)$", 2).cast(pl.Int64).alias("line"))
    again = run.events.join(refs.select("file", "line").unique(), on=["file", "line"], how="semi").with_columns(
        (pl.col("message") + " (again)").alias("message"), pl.lit("other-kind").alias("kind"))
    summary = dict(run.summary)
    summary["per_file"] = [*summary["per_file"], *({"path": f"/x/{p}.log", "parser": p, "lines": 7, "events": 1,
                                                     "covered": 3, "error": None} for p in TIED)]
    return pl.concat([run.events, tied, again]), summary


def _page(run: Run, events: pl.DataFrame, summary: dict[str, object], seed: int) -> str:
    shuffled = events.sample(fraction=1.0, shuffle=True, seed=seed)
    html = render_job_report(JobReportInput(run.analysis, shuffled, summary))
    return re.sub(r"nonce-?[\w-]*|nonce=\"[\w-]*\"", "nonce", html)


def test_the_same_analysis_renders_the_same_page_whatever_the_events_order(sample_run: Run) -> None:
    events, summary = _with_ties(sample_run)
    pages = {_page(sample_run, events, summary, seed) for seed in range(6)}
    assert len(pages) == 1
    (page,) = pages
    shown = [s for s in TIED if s in page]
    positions = [page.index(f">{s}<") for s in shown]
    assert shown == TIED and positions == sorted(positions)  # tied rows by name
