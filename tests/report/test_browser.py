"""The reports in a real browser: headless Chromium from the distribution, driven by Playwright.

Each test opens a report from file://, waits until every figure is drawn, and checks: no
console or page errors, every figure has an svg or canvas, the numbers on the page equal the
tables, and no hostile text ever ran (``window.__pwned`` stays unset). Screenshots are saved
as artifacts (``$REPORT_ARTIFACTS`` or the test's temporary folder).
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from toranalyze.reconstruct.skew import clock_offsets, clock_skew, skewed
from toranalyze.report.browser import chromium_path, open_report
from toranalyze.report.fleet import MTBF_POINTS, NO_FAILURE, fmt_num, render_fleet_report
from toranalyze.report.html import write_plotly_js
from toranalyze.report.job import JobReportInput, evidence_lines, rel_path, render_job_report

from .conftest import HOSTILE_JOB, HOSTILE_NODE, Run, redacted_input
from .fleet_helper import fleet_tables, replicate

pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_path() is None, reason="no chromium executable (apt-get install chromium)"),
]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("REPORT_ARTIFACTS")
    path = Path(where) if where else tmp_path_factory.mktemp("report-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write(directory: Path, html: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    write_plotly_js(directory)
    page = directory / "report.html"
    page.write_text(html, encoding="utf-8")
    return page


def _card(page: Any, key: str) -> str:
    return str(page.inner_text(f'.card .v[data-key="{key}"]')).strip()


def _assert_clean(opened: Any) -> None:
    assert opened.console_errors == [] and opened.page_errors == []
    assert opened.figures == opened.figures_total == opened.rendered > 0
    assert opened.injected is None


def test_job_report_draws_and_shows_the_tables_numbers(sample_run: Run, tmp_path: Path, artifacts: Path) -> None:
    an = sample_run.analysis
    path = _write(tmp_path / "job", render_job_report(JobReportInput(an, sample_run.events, sample_run.summary,
                                                                       clock_skew=clock_skew(sample_run.events))))
    tor = an.tor.row(0, named=True)

    def check(page: Any) -> dict[str, Any]:
        return {"tor": _card(page, "TOR"), "incidents": _card(page, "incidents"),
                "rows": page.locator("table.incidents tbody tr").count(),
                "causes": page.locator("table.incidents tbody tr td:nth-child(3)").all_inner_texts(),
                "skewed": page.inner_text('[data-key="skewed-files"]'),
                "skew_rows": page.locator("table.skew tbody tr").count()}

    opened, seen = open_report(path, artifacts / "job-report.png", check=check)
    _assert_clean(opened)
    assert opened.figures >= 5
    assert seen["tor"] == f"{tor['tor']:.4f}"
    assert int(seen["incidents"]) == an.incidents.height == tor["n_incidents"] == seen["rows"] == 8
    expected = an.incidents.sort("incident")["root_cause"].to_list()
    assert [c.split()[0] for c in seen["causes"]] == expected
    assert (artifacts / "job-report.png").stat().st_size > 10_000
    offsets = clock_offsets(sample_run.events)
    assert int(seen["skewed"]) == skewed(offsets).height and seen["skew_rows"] == offsets.height > 0


def test_hostile_text_shows_as_text_and_runs_nothing(hostile_run: Run, tmp_path: Path, artifacts: Path) -> None:
    html = render_job_report(redacted_input(hostile_run), redacted=True)  # as analyze renders it
    path = _write(tmp_path / "hostile", html)

    def check(page: Any) -> dict[str, Any]:
        # hover the first incident's "last progress" marker (its text names the hostile node)
        page.evaluate("""() => { const d = document.getElementById('fig2');
            const k = d.data.findIndex(t => t.name === 'last progress');
            Plotly.Fx.hover(d, [{curveNumber: k, pointNumber: 0}]); }""")
        page.wait_for_timeout(200)
        return {"text": page.inner_text("body"), "hover": page.evaluate("document.querySelector('#fig2 .hoverlayer').textContent"),
                "imgs": page.locator("img").count(), "pwned": page.evaluate("window.__pwned === undefined")}

    opened, seen = open_report(path, artifacts / "hostile-report.png", check=check)
    _assert_clean(opened)
    assert seen["pwned"] is True and seen["imgs"] == 0
    assert HOSTILE_NODE in seen["text"] and HOSTILE_JOB in seen["text"]
    assert HOSTILE_NODE in seen["hover"]  # plotly shows the markup as text too
    assert "hunter2secret" not in seen["text"] and "[REDACTED]" in seen["text"]


FOLD = (1366, 768)  # a common laptop screen: what shows before any scrolling

# Where the incidents table and its first row sit, the first row's evidence text, and whether any
# box around that text clips it (a scroll box, a height limit) or hides its overflow.
_FIRST_INCIDENT = """() => {
  const t = document.querySelector('table.incidents'), row = t.querySelector('tbody tr');
  const ev = row.querySelector('td:last-child .ev');
  const clipped = [];
  for (let n = ev; n && n !== document.body; n = n.parentElement) {
    const s = getComputedStyle(n);
    if (s.overflowY !== 'visible' || s.maxHeight !== 'none' || n.scrollHeight > n.clientHeight + 1) {
      clipped.push(n.tagName + '.' + n.className);
    }
  }
  return {top: t.getBoundingClientRect().top, rowBottom: row.getBoundingClientRect().bottom,
          evBottom: ev.getBoundingClientRect().bottom, text: ev.innerText, clipped: clipped,
          scrolled: window.scrollY, wide: document.documentElement.scrollWidth};
}"""


def test_job_report_shows_its_incidents_with_their_evidence_above_the_fold(sample_run: Run, tmp_path: Path,
                                                                           artifacts: Path) -> None:
    an = sample_run.analysis
    path = _write(tmp_path / "fold", render_job_report(JobReportInput(an, sample_run.events, sample_run.summary,
                                                                        clock_skew=clock_skew(sample_run.events))))
    opened, seen = open_report(path, artifacts / "job-report-fold.png", check=lambda p: p.evaluate(_FIRST_INCIDENT),
                               viewport=FOLD, full_page=False)
    _assert_clean(opened)
    first = evidence_lines(an.incidents, sample_run.events).row(0, named=True)
    assert seen["scrolled"] == 0 and 0 <= seen["top"] < seen["rowBottom"] <= FOLD[1]
    assert seen["evBottom"] <= seen["rowBottom"] and seen["clipped"] == []
    assert seen["wide"] <= FOLD[0]  # every table fits the page's width: nothing off to the side
    assert seen["text"] == f"{rel_path(first['ref'], str(an.tor['path'][0]))} {first['text']}"  # whole


@pytest.fixture(scope="module")
def fleet_tables_sample(both_samples: Run) -> tuple[pl.DataFrame, ...]:
    base = fleet_tables(both_samples.analysis, both_samples.events, str(Path(both_samples.summary["per_file"][0]["path"])
                                                                         .parents[1]))
    return replicate(*base, copies=12)


def test_fleet_report_draws_and_shows_the_tables_numbers(fleet_tables_sample: tuple[pl.DataFrame, ...],
                                                         tmp_path: Path, artifacts: Path) -> None:
    jobs, attempts, incidents, exposure = fleet_tables_sample
    path = _write(tmp_path / "fleet", render_fleet_report(jobs, attempts, incidents, exposure, None, title="sample"))

    def check(page: Any) -> dict[str, Any]:
        return {k: _card(page, k) for k in ("jobs", "incidents", "unexpected", "median TOR")} | {
            "links": page.locator('table.jobs a[href$="report.html"]').count()}

    opened, seen = open_report(path, artifacts / "fleet-report.png", check=check)
    _assert_clean(opened)
    assert opened.figures >= 6
    assert int(seen["jobs"]) == jobs.height == seen["links"] == 24
    assert int(seen["incidents"]) == incidents.height
    assert int(seen["unexpected"]) == incidents.filter(~pl.col("planned")).height
    assert seen["median TOR"] == f"{jobs['tor'].median():.4f}"


# The numbers the fleet page's figures hold, as plotly has them, and the cells of its tables.
_FLEET_NUMBERS = """() => {
  const cells = cls => Array.from(document.querySelectorAll('table.' + cls + ' tbody tr')).map(
    r => Array.from(r.querySelectorAll('td')).map(c => c.textContent.trim()));
  const figOf = name => Array.from(document.querySelectorAll('div.fig')).find(
    d => (d.data || []).some(t => t.name === name));
  const trace = (d, pick) => { const t = d.data.find(pick);
    return t ? {name: t.name, x: Array.from(t.x), y: Array.from(t.y)} : null; };
  const tor = figOf('jobs per TOR bin'), mtbf = figOf('MTBF (unexpected failures)');
  const ticks = axis => Array.from(mtbf.querySelectorAll('.' + axis + 'tick text')).map(t => t.textContent);
  return {bins: trace(tor, t => t.name === 'jobs per TOR bin'), median: trace(tor, t => t.name.startsWith('median')),
          quantiles: cells('tor-quantiles'), binRows: cells('tor-bins'),
          points: trace(mtbf, t => t.name === 'MTBF (unexpected failures)'), none: trace(mtbf, t => t.name === NONE),
          extrapolated: trace(mtbf, t => t.name.startsWith('extrapolated')),
          mtbfRows: cells('mtbf'), xticks: ticks('x'), yticks: ticks('y'),
          y2ticks: Array.from(document.querySelectorAll('div.fig')).map(
            d => Array.from(d.querySelectorAll('.y2tick text')).map(t => t.textContent)).filter(t => t.length),
          medianCard: document.querySelector('.card .v[data-key="median TOR"]').textContent.trim()};
}"""


def _fleet_numbers(page: Any) -> dict[str, Any]:
    return dict(page.evaluate(_FLEET_NUMBERS.replace("NONE", repr(NO_FAILURE))))


def _assert_figures_match_tables(seen: dict[str, Any], n_tor: int) -> None:
    """The TOR histogram's counts and median and the MTBF points equal the tables' cells."""
    assert sum(seen["bins"]["y"]) == int(seen["quantiles"][0][0]) == n_tor
    assert seen["bins"]["y"] == [int(r[2]) for r in seen["binRows"]]
    assert f"{seen['median']['x'][0]:.4f}" == seen["quantiles"][0][3] == seen["medianCard"]
    shown = {r[0]: r[4] for r in seen["mtbfRows"]}
    points = list(zip(seen["points"]["x"], seen["points"]["y"], strict=True))
    none = list(zip(seen["none"]["x"], seen["none"]["y"], strict=True)) if seen["none"] else []
    assert points and len(shown) == len(points) + len(none)
    assert all(shown[fmt_num(x)] == fmt_num(y) for x, y in points)
    assert all(shown[fmt_num(x)] == f"> {fmt_num(y)}" for x, y in none)
    for tick in seen["xticks"] + seen["yticks"]:  # "16,384", never "16.384k"
        assert re.fullmatch(r"[0-9][0-9,]*(\.[0-9]+)?", tick), tick
    for ticks in seen["y2ticks"]:  # a second axis' ticks are its own round steps, not the first axis' places
        steps = {round(b - a, 9) for a, b in itertools.pairwise(float(t) for t in ticks)}
        assert len(steps) == 1 and f"{steps.pop():e}"[0] in "125", ticks


def test_fleet_figures_hold_the_numbers_of_its_tables(fleet_tables_sample: tuple[pl.DataFrame, ...],
                                                      tmp_path: Path, artifacts: Path) -> None:
    jobs, attempts, incidents, exposure = fleet_tables_sample
    path = _write(tmp_path / "fleet-fold", render_fleet_report(jobs, attempts, incidents, exposure, None,
                                                                title="sample"))
    opened, seen = open_report(path, artifacts / "fleet-report-fold.png", check=_fleet_numbers, viewport=FOLD,
                               full_page=False)
    _assert_clean(opened)
    _assert_figures_match_tables(seen, jobs["tor"].drop_nulls().len())
    assert seen["points"]["name"] == MTBF_POINTS and seen["extrapolated"] is None  # no fit given: no extrapolation


@pytest.fixture(scope="module")
def fleet_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated fleet through the real ``toranalyze fleet`` command."""
    from click.testing import CliRunner

    from toranalyze.cli import cli

    root = tmp_path_factory.mktemp("fleet-cmd")
    sim = CliRunner().invoke(cli, ["simulate", "--seed", "1", "--out", str(root / "fleet"), "--preset", "fleet",
                                   "--jobs", "3", "--duration", "3h", "--nodes", "1"])
    assert sim.exit_code == 0, sim.output
    res = CliRunner().invoke(cli, ["fleet", str(root / "fleet"), "-o", str(root / "store"), "-j", "1", "-q"])
    assert res.exit_code == 0, res.output
    return root / "store"


def test_fleet_command_report_and_the_job_reports_it_links(fleet_store: Path, artifacts: Path) -> None:
    jobs = pl.read_delta(str(fleet_store / "jobs"))
    incidents = pl.read_delta(str(fleet_store / "incidents"))

    def check(page: Any) -> dict[str, Any]:
        return {k: _card(page, k) for k in ("jobs", "incidents", "unexpected")} | {
            "links": page.locator("table.jobs a").evaluate_all("els => els.map(e => e.getAttribute('href'))"),
            "numbers": _fleet_numbers(page)}

    opened, seen = open_report(fleet_store / "report.html", artifacts / "fleet-command-report.png", check=check)
    _assert_clean(opened)
    _assert_figures_match_tables(seen["numbers"], jobs["tor"].drop_nulls().len())  # the fit from rates.json
    assert seen["numbers"]["extrapolated"] is not None  # its line runs past the largest job: said so
    assert int(seen["jobs"]) == jobs.height and int(seen["incidents"]) == incidents.height > 0
    assert int(seen["unexpected"]) == incidents.filter(~pl.col("planned")).height
    assert sorted(set(seen["links"])) == sorted(jobs["report"].unique())
    job_page = fleet_store / seen["links"][0]
    opened, _ = open_report(job_page, artifacts / "fleet-job-report.png")
    _assert_clean(opened)  # a linked job report draws too, with the store's one plotly.js


def test_a_missing_plotly_js_is_said_on_the_page_and_the_page_still_finishes(tmp_path: Path) -> None:
    from toranalyze.report.html import Page

    page = Page("no plotly")
    page.figure({"data": [{"type": "bar", "x": ["a"], "y": [1]}]})
    page.add('<div class="scroll lazy"><table class="t"><tbody><tr><td>row</td></tr></tbody></table></div>')
    page.figure({"data": [{"type": "bar", "x": ["b"], "y": [2]}]})
    path = tmp_path / "report.html"  # no plotly.min.js beside it
    path.write_text(page.render(), encoding="utf-8")

    def check(p: Any) -> dict[str, Any]:
        return {"texts": p.locator("div.fig").all_inner_texts(), "table": p.inner_text("table.t"),
                "drawing": p.evaluate("document.documentElement.classList.contains('drawing')")}

    opened, seen = open_report(path, None, check=check)
    assert opened.figures == 0 and opened.figures_total == 2
    assert all("plotly.min.js was not found" in t for t in seen["texts"])
    assert seen["table"] == "row" and seen["drawing"] is False  # the tables are shown all the same


def test_figures_are_drawn_before_the_long_tables_below_them_are_parsed(tmp_path: Path) -> None:
    from toranalyze.report.html import Page, scroll_box, table

    page = Page("figure first")
    page.figure({"data": [{"type": "bar", "x": ["a", "b"], "y": [1, 2]}]})
    rows = [(str(k), f"row {k} " + "text " * 20) for k in range(30_000)]  # about 6 MB of table
    page.add(scroll_box(table(["#", "text"], rows), len(rows)))
    path = _write(tmp_path / "first", page.render())

    def times(p: Any) -> tuple[float, float]:
        return p.evaluate("[Number(document.body.dataset.drawnMs), Number(document.body.dataset.completeMs)]")

    opened, (drawn, complete) = open_report(path, None, check=times)
    _assert_clean(opened)
    assert drawn < complete  # on screen while the parser was still reading the table
