"""``fleet`` given folders that hold no run, through the command line: a folder that cannot be read
says "permission denied" (not "holds no log file"), and a folder of files that give no job says so
(not merely "1 runs, 0 jobs").

The tests run as root, where permission bits do not bite: a denied folder is simulated by making
``os.scandir`` raise ``PermissionError`` for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.test_hostile_fs import deny, run  # a denied folder; the console entry point's code and output

GOOD = "slurmstepd: error: *** JOB 42 ON node7 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***\n"


def lines_naming(text: str, *words: str) -> list[str]:
    return [ln for ln in text.splitlines() if all(w in ln for w in words)]


def deny_listing(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    deny(monkeypatch, "scandir", target)


@pytest.mark.timeout(60)
def test_a_folder_without_a_job_is_said_to_hold_none(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "notes").mkdir(parents=True)
    (runs / "notes" / "readme.txt").write_text("hello\n")
    (runs / "r1").mkdir()
    (runs / "r1" / "good.log").write_text(GOOD)
    code, text = run("fleet", str(runs), "-o", str(tmp_path / "store"), "-j", "1", "--no-report", "-q")
    assert code == 0, text
    (line,) = lines_naming(text, "warning", str(runs / "notes"), "no training job")
    assert "toranalyze coverage" in line
    assert not lines_naming(text, "r1", "no training job")


@pytest.mark.timeout(60)
def test_an_unreadable_folder_given_alone_is_permission_denied(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    locked = tmp_path / "locked"
    (locked / "r1").mkdir(parents=True)
    (locked / "r1" / "good.log").write_text(GOOD)
    deny_listing(monkeypatch, locked)
    code, text = run("fleet", str(locked), "-o", str(tmp_path / "store"), "-j", "1")
    assert code == 2, text
    assert lines_naming(text, "error", str(locked), "permission denied"), text
    assert "holds no log file" not in text and "Traceback" not in text


@pytest.mark.timeout(60)
def test_a_folder_whose_runs_are_all_unreadable_names_the_first(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    (runs / "r1").mkdir(parents=True)
    (runs / "r1" / "good.log").write_text(GOOD)
    deny_listing(monkeypatch, runs / "r1")
    code, text = run("fleet", str(runs), "-o", str(tmp_path / "store"), "-j", "1")
    assert code == 2, text
    (line,) = lines_naming(text, "error", str(runs), "permission denied")
    assert str(runs / "r1") in line and "holds no readable log file" in line
