"""Hostile filesystems through the command line: special files, symlink loops, unreadable folders,
unwritable outputs and odd file names each become one warning or error line naming the path;
the good files' events are kept and the exit code is the documented one (non-zero only when
nothing could be read).

The tests run as root, where permission bits do not bite: a denied folder, file or output is
simulated by making ``os.scandir``, ``open`` or ``Path.mkdir`` raise ``PermissionError`` for it.
"""

from __future__ import annotations

import builtins
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from toranalyze.cli import main

GOOD = "slurmstepd: error: *** JOB {job} ON node7 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***\n"
XFF = os.fsdecode(b"\xff")  # a file name byte that is not UTF-8, as Python spells it


def run(*args: str) -> tuple[int, str]:
    """The command's exit code and everything it printed, run as the console entry point runs it."""
    with CliRunner().isolation() as (_, _, output), pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["toranalyze", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        return code, output.getvalue().decode("utf-8", "replace")


def line_naming(text: str, *words: str) -> str:
    """The one printed line holding every word (fails when there is none)."""
    found = [ln for ln in text.splitlines() if all(w in ln for w in words)]
    assert found, f"no line names {words!r} in:\n{text}"
    return found[0]


def good_run(folder: Path, job: int = 42) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "good.log").write_text(GOOD.format(job=job))
    return folder


def events_of(out: Path) -> list[str]:
    return [Path(f).name for f in pl.read_parquet(out / "events.parquet")["file"].to_list()]


def deny(monkeypatch: pytest.MonkeyPatch, where: str, target: Path) -> None:
    """Make ``where`` (``"scandir"`` or ``"open"``) raise PermissionError for ``target``."""
    if where == "scandir":
        real: Callable[..., Any] = os.scandir

        def scandir(path: Any = ".") -> Any:
            if not isinstance(path, int) and os.path.abspath(os.fspath(path)) == str(target):
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)
        return
    real_open = builtins.open

    def fake_open(path: Any, *a: Any, **k: Any) -> Any:
        if isinstance(path, (str, os.PathLike)) and os.path.abspath(os.fspath(path)) == str(target):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open)


@pytest.mark.timeout(30)
def test_fifo_in_a_folder_is_skipped(tmp_path: Path) -> None:
    src = good_run(tmp_path / "in")
    os.mkfifo(src / "pipe.log")
    code, text = run("ingest", str(src), "-o", str(tmp_path / "out"), "-q", "-j", "1")
    assert code == 0, text
    assert "not a regular file" in line_naming(text, "warning", "pipe.log")
    assert events_of(tmp_path / "out") == ["good.log"]


@pytest.mark.timeout(30)
def test_fifo_named_is_refused_without_blocking(tmp_path: Path) -> None:
    src = good_run(tmp_path / "in")
    os.mkfifo(tmp_path / "pipe.log")
    out = tmp_path / "out"
    code, text = run("analyze", str(tmp_path / "pipe.log"), str(src / "good.log"), "-o", str(out), "-q",
                     "--no-report", "-j", "1")
    assert code == 0, text
    assert "FIFO" in line_naming(text, "warning", "pipe.log")
    assert events_of(out) == ["good.log"]
    code, text = run("ingest", str(tmp_path / "pipe.log"), "-o", str(tmp_path / "none"), "-q")
    assert code == 2 and "no input could be read" in text
    line_naming(text, "pipe.log", "not a regular file")


@pytest.mark.timeout(30)
def test_symlink_to_a_device_with_parser_is_refused(tmp_path: Path) -> None:
    src = good_run(tmp_path / "in")
    (src / "zero.log").symlink_to("/dev/zero")
    code, text = run("ingest", str(src / "zero.log"), str(src / "good.log"), "--parser", "slurm",
                     "-o", str(tmp_path / "out"), "-q", "-j", "1")
    assert code == 0, text
    assert "device" in line_naming(text, "warning", "zero.log")
    assert events_of(tmp_path / "out") == ["good.log"]


@pytest.mark.timeout(30)
def test_symlink_loop_in_a_runs_folder(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    good_run(runs / "r1")
    (runs / "a").symlink_to("b")
    (runs / "b").symlink_to("a")
    (runs / "self").mkdir()
    (runs / "self" / "again").symlink_to("..")
    code, text = run("fleet", str(runs), "-o", str(tmp_path / "store"), "-j", "1", "--no-report")
    assert code == 0, text
    line_naming(text, "warning", "runs/a")
    jobs = pl.read_delta(str(tmp_path / "store" / "jobs"))
    assert jobs["job"].to_list() == ["42"]


@pytest.mark.timeout(30)
def test_unreadable_sub_folder_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = good_run(tmp_path / "in")
    (src / "locked").mkdir()
    (src / "locked" / "hidden.log").write_text(GOOD.format(job=7))
    deny(monkeypatch, "scandir", src / "locked")
    code, text = run("ingest", str(src), "-o", str(tmp_path / "out"), "-q", "-j", "1")
    assert code == 0, text
    line_naming(text, "warning", str(src / "locked"), "permission denied")
    assert events_of(tmp_path / "out") == ["good.log"]
    # the only input: the reason, not "matched no files"
    code, text = run("ingest", str(src / "locked"), "-o", str(tmp_path / "none"), "-q", "-j", "1")
    assert code == 2
    line_naming(text, str(src / "locked"), "permission denied")
    assert "matched no files" not in text


@pytest.mark.timeout(30)
def test_fleet_unreadable_file_and_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    good_run(runs / "r1")
    good_run(runs / "r2", job=43)
    good_run(runs / "r3" / "deep", job=44)
    deny(monkeypatch, "open", runs / "r2" / "good.log")
    deny(monkeypatch, "scandir", runs / "r3")
    code, text = run("fleet", str(runs), "-o", str(tmp_path / "store"), "-j", "1", "--no-report")
    assert code == 0, text
    assert "Traceback" not in text
    line_naming(text, "warning", str(runs / "r2" / "good.log"), "permission denied")
    line_naming(text, "warning", str(runs / "r3"), "permission denied")
    jobs = pl.read_delta(str(tmp_path / "store" / "jobs"))
    assert "42" in jobs["job"].to_list()


@pytest.mark.timeout(30)
def test_unwritable_output_fails_before_the_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    good_run(runs / "r1")
    store = tmp_path / "store"
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *a: Any, **k: Any) -> None:
        if self == store:
            raise PermissionError(13, "Permission denied", str(self))
        real_mkdir(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr("toranalyze.fleet.build.list_runs", lambda *a, **k: pytest.fail("the work started"))
    code, text = run("fleet", str(runs), "-o", str(store), "-j", "1")
    assert code == 2, text
    assert "Traceback" not in text
    line_naming(text, "error", str(store), "permission denied")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("command", ["ingest", "analyze", "fleet"])
def test_non_utf8_file_name(tmp_path: Path, command: str) -> None:
    runs = tmp_path / "runs"
    src = good_run(runs / "r1")
    (src / f"bad{XFF}.log").write_text(GOOD.format(job=43))
    good_run(runs / f"r{XFF}", job=44)
    out = tmp_path / "out"
    args = [command, str(src) if command != "fleet" else str(runs), "-o", str(out), "-j", "1"]
    code, text = run(*args, *(["--no-report"] if command != "ingest" else []))
    assert code == 0, text
    assert "Traceback" not in text
    line_naming(text, "warning", "bad\\xff.log")
    if command == "fleet":
        line_naming(text, "warning", "r\\xff")
        assert pl.read_delta(str(out / "jobs"))["job"].to_list() == ["42"]
    else:
        assert events_of(out) == ["good.log"]


@pytest.mark.timeout(30)
def test_markup_in_a_path_is_printed_as_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    good_run(Path("in") / "[")
    Path("in/[/good.log").rename("in/[/].log")
    code, text = run("ingest", "in/[/].log", "in/[/]missing.log", "-o", "out", "-j", "1")
    assert code == 0, text
    line_naming(text, "warning", "in/[/]missing.log")
    line_naming(text, "in/[/].log")
    assert events_of(tmp_path / "out") == ["].log"]


def test_a_file_unreadable_when_re_read_for_the_data_quality_pass_costs_only_its_shapes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """analyze re-reads the text logs for the report's unrecognised line shapes (and `coverage` reads
    them): a file that cannot be read then is skipped there with one warning, never the run."""
    import toranalyze.ingest.coverage as coverage

    run_dir = good_run(tmp_path / "run")
    (run_dir / "other.log").write_text("a line no parser knows\n" + GOOD.format(job=43))
    real = coverage.uncovered_lines

    def flaky(path: str, parsers: Any) -> pl.DataFrame:
        if path.endswith("other.log"):
            raise PermissionError(13, "Permission denied", path)
        return real(path, parsers)

    monkeypatch.setattr(coverage, "uncovered_lines", flaky)
    code, text = run("analyze", str(run_dir), "-o", str(tmp_path / "out"), "-q")
    assert code == 0 and (tmp_path / "out" / "report.html").exists()
    assert sorted(set(events_of(tmp_path / "out"))) == ["good.log", "other.log"]
    code, text = run("coverage", str(run_dir))
    assert code == 0 and "Permission denied" in line_naming(text, "other.log", "warning")
