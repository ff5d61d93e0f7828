"""The fleet page's figures fit their data and agree with its tables; every column is labelled, and
the fitted MTBF line says where it extrapolates."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from toranalyze.reconstruct.tables import BUCKETS
from toranalyze.report.fleet import OVERHEADS, PLAIN_TICKS, fmt_num, render_fleet_report, tor_bins

from .conftest import Run
from .fleet_helper import fleet_tables, replicate

Tables = tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]


@pytest.fixture(scope="module")
def tables(both_samples: Run) -> Tables:
    root = str(Path(both_samples.summary["per_file"][0]["path"]).parents[1])
    return replicate(*fleet_tables(both_samples.analysis, both_samples.events, root), copies=12)


def figures(page: str) -> list[dict[str, Any]]:
    return [json.loads(b) for b in re.findall(r'<script type="application/json" id="fig\d+-data">(.*?)</script>',
                                              page, re.S)]


def figure_with(page: str, axis_title: str) -> dict[str, Any]:
    (fig,) = [f for f in figures(page) if f["layout"].get("xaxis", {}).get("title", {}).get("text") == axis_title]
    return fig


def cells(page: str, cls: str) -> list[list[str]]:
    body = re.search(rf'<table class="t {cls}">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert body, cls
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)]


def card(page: str, key: str) -> str:
    found = re.search(rf'data-key="{re.escape(key)}">(.*?)</div>', page)
    assert found, key
    return found.group(1)


def test_the_tor_histogram_fits_its_data_and_counts_every_job(tables: Tables) -> None:
    jobs = tables[0]
    page = render_fleet_report(*tables)
    fig = figure_with(page, "TOR (optimal / observed time)")
    lo, hi = float(jobs["tor"].min()), float(jobs["tor"].max())  # type: ignore[arg-type]
    x0, x1 = fig["layout"]["xaxis"]["range"]
    assert x0 <= lo and x1 >= hi and x1 - x0 <= max(1.25 * (hi - lo), 0.05)  # not a fixed 0 to 1
    bars = fig["data"][0]
    assert sum(bars["y"]) == jobs["tor"].drop_nulls().len() == int(cells(page, "tor-quantiles")[0][0])
    assert [int(r[2]) for r in cells(page, "tor-bins")] == bars["y"]


@pytest.mark.parametrize("values", [[0.93, 0.95, 0.97, 0.99], [0.5], [0.2, 0.2, 0.2], [0.0, 1.0], [0.61, 0.6125]])
def test_tor_bins_hold_every_value_within_a_range_that_fits(values: list[float]) -> None:
    edges, counts = tor_bins(pl.Series(values))
    assert counts.sum() == len(values) and edges[0] <= min(values) and edges[-1] >= max(values)
    assert edges[-1] - edges[0] <= 1.25 * (max(values) - min(values)) + 0.002
    assert np.allclose(np.diff(edges), edges[1] - edges[0])


def test_the_median_tile_the_quantile_tables_p50_and_the_histograms_median_agree(tables: Tables) -> None:
    jobs = tables[0]
    page = render_fleet_report(*tables)
    p50 = cells(page, "tor-quantiles")[0][3]
    median_line = figure_with(page, "TOR (optimal / observed time)")["data"][1]
    assert card(page, "median TOR") == p50 == f"{median_line['x'][0]:.4f}" == f"{jobs['tor'].median():.4f}"


def test_the_overheads_column_uses_distinct_names_that_a_legend_spells_out(tables: Tables) -> None:
    page = render_fleet_report(*tables)
    names = [short for short, _ in OVERHEADS.values()]
    assert list(OVERHEADS) == list(BUCKETS[1:]) and len(set(names)) == len(names)
    legend = re.search(r'<p class="note legend">(.*?)</p>', page, re.S)
    assert legend and all(f"<b>{n}</b>" in legend.group(1) for n in names)
    used = {w for row in cells(page, "jobs") for w in re.findall(r"([a-z]+) \d+%", row[-1])}
    assert used and used <= set(names)


def test_every_column_of_the_fleet_page_is_labelled(tables: Tables) -> None:
    page = render_fleet_report(*tables)
    assert re.findall(r"<th[^>]*></th>", page) == []


def _rates(largest: int) -> dict[str, Any]:
    sizes = [1, 8, 64, largest, 1024, 16384, 65536]
    return {"mtbf_vs_job_size": {
        "observed": [{"gpus_bucket": g, "mtbf_hours": 900.0 / g, "failures": 3, "job_hours": 2700.0 / g}
                     for g in (8, 64, largest)],
        "predicted": [{"gpus": g, "mtbf_hours": 1000.0 / g, "lo": 500.0 / g, "hi": 2000.0 / g} for g in sizes]}}


def test_mtbf_ticks_read_as_plain_numbers_and_the_fit_marks_its_extrapolation(tables: Tables) -> None:
    jobs = tables[0]
    largest = int(jobs["gpus"].max())  # type: ignore[arg-type]
    page = render_fleet_report(*tables, rates=_rates(largest))
    fig = figure_with(page, "job size (GPUs)")
    assert fig["layout"]["xaxis"]["tickformat"] == fig["layout"]["yaxis"]["tickformat"] == PLAIN_TICKS
    lines = {t["name"]: t for t in fig["data"] if t.get("mode", "").startswith("lines") and "fill" not in t}
    solid = lines["fitted MTBF (rates.json)"]
    (extra,) = [t for n, t in lines.items() if "extrapolated" in n]
    assert max(solid["x"]) == largest == min(extra["x"]) and max(extra["x"]) == 65536
    assert extra["line"]["dash"] == "dash" and "dash" not in solid["line"] and "extrapolated" in extra["text"]
    points = next(t for t in fig["data"] if t["name"].startswith("MTBF"))
    rows = cells(page, "mtbf")
    assert [(r[0], r[4]) for r in rows] == [(fmt_num(x), fmt_num(y)) for x, y in zip(points["x"], points["y"],
                                                                                    strict=True)]


def test_the_fit_from_the_tables_is_drawn_over_the_observed_sizes_only(tables: Tables) -> None:
    page = render_fleet_report(*tables)
    fig = figure_with(page, "job size (GPUs)")
    points = next(t for t in fig["data"] if t["name"].startswith("MTBF"))
    fit = [t for t in fig["data"] if t["name"].startswith("fit:")]
    assert all(min(points["x"]) <= x <= max(points["x"]) * (1 + 1e-9) for t in fit for x in t["x"])
    shown = {r[0]: r[4] for r in cells(page, "mtbf")}
    assert {fmt_num(x): fmt_num(y) for x, y in zip(points["x"], points["y"], strict=True)}.items() <= shown.items()
