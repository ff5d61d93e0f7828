"""A run's pages in the store sit under a name people read (its folder's), not its content hash:
unique (a short hash of the run id only when two runs share a name), linked from jobs.report,
kept across re-analyses, and stores that keep pages by hash stay readable."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from toranalyze.cli import cli
from toranalyze.fleet import store
from toranalyze.fleet.tables import SCHEMAS, SORT_KEYS, TABLES, RunTables

GOOD = "slurmstepd: error: *** JOB {job} ON node7 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***\n"


def _record(run: str, h: str = "h1", pages: bool = True) -> store.RunRecord:
    """One job of ``run``, linked to its report the way the analysis links it (by content hash)."""
    frames = []
    for t in TABLES:
        rows = pl.DataFrame({"job": ["j"]}).with_columns(pl.lit(run).alias("run"))
        if t == "jobs" and pages:
            rows = rows.with_columns(pl.lit(f"{store.PARTS}/{h}/report.html").alias("report"))
        frames.append(rows.select(pl.col(c).cast(d) if c in rows.columns else pl.lit(None, d).alias(c)
                                  for c, d in SCHEMAS[t].items()).sort(SORT_KEYS[t]))
    return store.RunRecord(run, f"/data/{run}", h, RunTables(*frames), {"error": None, "notes": [], "files_failed": 0},
                           {"report.html": f"<p>{run} {h}</p>"} if pages else {})


def _short(run_id: str) -> str:
    return hashlib.blake2b(run_id.encode(), digest_size=4).hexdigest()


def _links(root: Path) -> dict[str, str]:
    jobs = store.Store(root).read("jobs")
    return dict(zip(jobs["run"], jobs["report"], strict=True))


@pytest.mark.parametrize(("run_id", "name"), [
    ("fleet/run-007", "run-007"), ("a/we ird:name", "we_ird_name"), ("x/..", "run"), ("x/.hidden", "hidden"),
    ("r/" + "é" * 3, "run"), ("r/" + "n" * 200, "n" * 80),
])
def test_a_page_name_is_the_folders_name_in_safe_characters(run_id: str, name: str) -> None:
    assert store.page_name(run_id) == name


def test_runs_sharing_a_folder_name_get_a_short_hash_suffix(tmp_path: Path) -> None:
    s = store.Store(tmp_path)
    s.record([_record("east/run1", "h1"), _record("west/run1", "h2"), _record("west/run2", "h3")])
    suffixed = f"run1-{_short('west/run1')}"
    assert sorted(p.name for p in (tmp_path / store.PARTS).iterdir()) == sorted(["run1", suffixed, "run2"])
    assert _links(tmp_path) == {"east/run1": "reports/run1/report.html",
                                "west/run1": f"reports/{suffixed}/report.html",
                                "west/run2": "reports/run2/report.html"}
    for run, link in _links(tmp_path).items():
        assert run in (tmp_path / link).read_text()
    # the names hold across re-analyses, in whatever order the runs come back
    s.record([_record("west/run1", "h4"), _record("east/run1", "h5")])
    assert _links(tmp_path)["west/run1"] == f"reports/{suffixed}/report.html"
    assert (tmp_path / store.PARTS / suffixed / "report.html").read_text() == "<p>west/run1 h4</p>"
    # a run gone takes its folder with it; a run re-analysed without a page loses it
    s.record([_record("west/run2", "h6", pages=False)], drop=["east/run1"])
    assert sorted(p.name for p in (tmp_path / store.PARTS).iterdir()) == [suffixed]


def test_a_store_that_keeps_pages_by_hash_stays_readable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def by_hash(self: store.Store, r: store.RunRecord) -> str:  # how stores kept pages before readable names
        d = self.page_dir(r.hash)
        d.mkdir(parents=True, exist_ok=True)
        for name, text in r.pages.items():
            (d / name).write_text(text)
        return r.hash

    with monkeypatch.context() as mp:
        mp.setattr(store.Store, "_write_pages", by_hash)
        store.Store(tmp_path).record([_record("f/a", "h1"), _record("f/b", "h2")])
    assert _links(tmp_path) == {"f/a": "reports/h1/report.html", "f/b": "reports/h2/report.html"}
    (tmp_path / store.COMMITTING).write_text("0\n")  # as after a crash: the next open sweeps the pages
    s = store.Store(tmp_path)
    assert sorted(p.name for p in (tmp_path / store.PARTS).iterdir()) == ["h1", "h2"]  # still linked: kept
    s.record([_record("f/a", "h3")])  # re-analysed: its page moves to its name, the old folder goes
    assert _links(tmp_path) == {"f/a": "reports/a/report.html", "f/b": "reports/h2/report.html"}
    assert sorted(p.name for p in (tmp_path / store.PARTS).iterdir()) == ["a", "h2"]
    for link in _links(tmp_path).values():
        assert (tmp_path / link).is_file()


def test_fleet_writes_each_runs_report_under_its_name(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for i, name in enumerate(["job-a", "job b"]):
        (runs / name).mkdir(parents=True)
        (runs / name / "slurm.log").write_text(GOOD.format(job=40 + i))
    out = tmp_path / "store"
    res = CliRunner().invoke(cli, ["fleet", str(runs), "-o", str(out), "-j", "1", "-q"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (out / store.PARTS).iterdir()) == ["job-a", "job_b"]
    assert sorted(_links(out).values()) == ["reports/job-a/report.html", "reports/job_b/report.html"]
    page = (out / "report.html").read_text()
    for link in _links(out).values():
        assert (out / link).is_file() and f'href="{link}"' in page
