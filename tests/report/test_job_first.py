"""The job page answers first: its incidents, each with its first evidence line in full, come right
under the header, before any figure, and no scroll box hides any of them."""

from __future__ import annotations

import dataclasses
import html
import re

import polars as pl

from toranalyze.reconstruct.skew import clock_skew
from toranalyze.report.job import FIRST_INCIDENTS, JobReportInput, evidence_lines, render_job_report

from .conftest import Run


def _rows(page: str, cls: str) -> list[str]:
    body = re.search(rf'<table class="t {cls}">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert body, cls
    return re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)


def test_the_incidents_come_before_the_figures_with_their_first_evidence_line_whole(sample_run: Run) -> None:
    an = sample_run.analysis
    page = render_job_report(JobReportInput(an, sample_run.events, sample_run.summary))
    top = page.index('<table class="t incidents">')
    assert top < page.index('class="fig"')
    assert not re.search(r'class="scroll[^"]*"><table class="t incidents', page)  # no inner scroll box
    lines = evidence_lines(an.incidents, sample_run.events)
    rows = _rows(page, "incidents")
    assert len(rows) == an.incidents.height == 8
    for row, inc in zip(rows, an.incidents.sort("incident").iter_rows(named=True), strict=True):
        first = lines.filter(pl.col("incident") == inc["incident"]).row(0, named=True)
        assert first["text"] and html.escape(first["text"]) in row  # the whole line, not a cut
        assert html.escape(inc["root_cause"]) in row and re.search(r"\d+m\d\ds", row)  # cause, downtime


def test_many_incidents_list_the_first_under_the_header_and_all_below_the_figures(sample_run: Run) -> None:
    an = sample_run.analysis
    n = an.incidents.height
    copies = [an.incidents.with_columns(pl.col("incident") + k * n) for k in range(3)]
    many = pl.concat(copies)
    page = render_job_report(JobReportInput(dataclasses.replace(an, incidents=many), sample_run.events,
                                            sample_run.summary))
    assert len(_rows(page, "incidents")) == FIRST_INCIDENTS
    assert len(_rows(page, "incident-details")) == 3 * n
    assert f"{3 * n - FIRST_INCIDENTS} more incidents" in page
    details = page.index('<table class="t incident-details">')
    assert page.rindex('class="fig"', 0, details) > page.index('<table class="t incidents">')
    assert not re.search(r'class="scroll[^"]*"><table class="t incident-details', page)


def test_every_column_of_the_job_page_is_labelled(sample_run: Run) -> None:
    page = render_job_report(JobReportInput(sample_run.analysis, sample_run.events, sample_run.summary,
                                            clock_skew=clock_skew(sample_run.events)))
    assert 'class="t skew"' in page and re.findall(r"<th[^>]*></th>", page) == []
