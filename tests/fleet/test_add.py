"""`toranalyze fleet --add` brings the runs given into the store and leaves the others untouched,
without reading the store's other runs; `--refresh` remakes the products from the store alone.
The tables and rates.json then equal those of a plain build over every run."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from tests.fleet.conftest import simulated_fleet
from toranalyze.cli import cli
from toranalyze.fleet import store
from toranalyze.fleet.tables import TABLES


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return simulated_fleet(tmp_path_factory, "add", jobs=4, seed=11)


def _fleet(*args: str, code: int = 0) -> str:
    res = CliRunner().invoke(cli, ["fleet", *args, "-j", "1"])
    assert res.exit_code == code, res.output
    return res.output


def _tables(out: Path) -> dict[str, pl.DataFrame]:
    return store.Store(out).read_tables()


def test_added_runs_join_the_store_and_refresh_gives_the_products_of_all(runs: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    names = sorted(p.name for p in runs.iterdir() if p.is_dir())
    first, later = tmp_path / "first", tmp_path / "later"
    first.mkdir()
    later.mkdir()
    for name in names[:3]:
        shutil.copytree(runs / name, first / name)
    shutil.copytree(runs / names[3], later / names[3])
    added, whole = tmp_path / "added", tmp_path / "whole"
    _fleet(str(first), "-o", str(added), "--no-report")
    rates_before = (added / "rates.json").read_bytes()

    def no_whole_frame(self: store.Store) -> pl.DataFrame:
        raise AssertionError("--add read the whole runs table")

    with monkeypatch.context() as m:
        m.setattr(store.Store, "run_frame", no_whole_frame)
        said = _fleet(str(later), "-o", str(added), "--add", "--no-report")
    assert "the store holds 4 runs" in said and "--refresh" in said
    assert (added / "rates.json").read_bytes() == rates_before  # the products wait for --refresh
    assert store.Store(added).manifest.runs == 4

    refreshed = _fleet("-o", str(added), "--refresh", "--no-report")
    assert "4 runs" in refreshed and "rates:" in refreshed

    # the same runs in one plain build (copied under one root: the same run ids)
    both = tmp_path / "both"
    both.mkdir()
    for name in names[:3]:
        shutil.copytree(runs / name, both / name)
    shutil.copytree(runs / names[3], both / names[3])
    _fleet(str(both), "-o", str(whole), "--no-report")
    a, w = _tables(added), _tables(whole)
    for t in TABLES:
        assert a[t].height == w[t].height, t
        assert_frame_equal(a[t].drop("run"), w[t].drop("run"), check_row_order=False)
    assert (added / "rates.json").read_text().replace("first", "both").replace("later", "both") == \
        (whole / "rates.json").read_text()


def test_adding_a_stored_run_unchanged_analyses_nothing_and_keeps_the_others(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    _fleet(str(runs), "-o", str(out), "--no-report")
    one = sorted(p for p in runs.iterdir() if p.is_dir())[0]
    said = _fleet(str(one), "-o", str(out), "--add", "--no-report")  # named as the build named it
    assert "(0 analysed" in said and "holds 4 runs" in said and "--refresh" not in said
    new = tmp_path / "new"
    shutil.copytree(one, new)
    said = _fleet(str(new), "-o", str(out), "--add", "--no-report")  # from elsewhere: a run of its own
    assert "(1 analysed" in said and "holds 5 runs" in said


def test_refresh_and_paths_do_not_go_together(runs: Path, tmp_path: Path) -> None:
    from tests.core.test_hostile_fs import run  # the console entry point's exit code and output

    for args, said in [((str(runs), "--refresh"), "give no PATH"), ((), "Missing argument"),
                       (("--refresh",), "no fleet store here")]:
        code, text = run("fleet", *args, "-o", str(tmp_path / "none"))
        assert code == 2 and said in text, text


def test_plan_says_when_the_rates_lag_runs_added(runs: Path, tmp_path: Path) -> None:
    from tests.core.test_hostile_fs import run

    names = sorted(p for p in runs.iterdir() if p.is_dir())
    first = tmp_path / "first"
    first.mkdir()
    shutil.copytree(names[0], first / names[0].name)
    out = tmp_path / "store"
    _fleet(str(first), "-o", str(out), "--no-report")
    plan = ("plan", "--rates", str(out / "rates.json"), "--gpus", "64", "--runs", "20")
    code, text = run(*plan)
    assert code == 0 and "--refresh" not in text, text
    _fleet(str(names[1]), "-o", str(out), "--add", "--no-report")
    code, text = run(*plan)
    assert code == 0 and "toranalyze fleet --refresh" in text, text
    _fleet("-o", str(out), "--refresh", "--no-report")
    code, text = run(*plan)
    assert code == 0 and "--refresh" not in text, text
