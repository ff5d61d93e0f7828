"""Ctrl-C during `toranalyze fleet`: it stops within a second, keeps the runs analysed before it,
says how to go on, and the next build does not analyse them again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.fleet.conftest import simulated_fleet
from toranalyze.cli import cli
from toranalyze.fleet import build as build_mod
from toranalyze.fleet.build import Interrupted, build
from toranalyze.fleet.pipeline import OutputOptions, RunOptions, analyze_task

NO_REPORT = RunOptions(output=OutputOptions(report=False))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return simulated_fleet(tmp_path_factory, "interrupt", jobs=6, seed=8)


def _stopped_after(n: int) -> Any:
    """An analysis that delivers ``n`` runs and then meets Ctrl-C."""

    def analyze(tasks: Sequence[Any], workers: Any, sizes: Any) -> Iterator[Any]:
        for task in tasks[:n]:
            yield analyze_task(task)
        raise KeyboardInterrupt

    return analyze


def test_an_interrupted_build_keeps_what_finished(fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "store"
    with monkeypatch.context() as m:
        m.setattr(build_mod, "_analyze", _stopped_after(2))
        with pytest.raises(Interrupted) as e:
            build([str(fleet)], out, NO_REPORT)
    assert (e.value.stored, e.value.left) == (2, 4)
    again = build([str(fleet)], out, NO_REPORT)
    assert len(again.analyzed) == 4 and again.reused == 2


def test_the_command_says_how_to_go_on(fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_mod, "_analyze", _stopped_after(1))
    res = CliRunner().invoke(cli, ["fleet", str(fleet), "-o", str(tmp_path / "store"), "--no-report"])
    assert res.exit_code == 130, res.output
    text = " ".join(res.output.split())
    assert "interrupted: 1 runs analysed and stored, 5 not; run the same command again" in text


@pytest.mark.slow  # a real Ctrl-C to the process group, worker processes and all
@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
def test_ctrl_c_stops_the_workers_within_a_second(fleet: Path, tmp_path: Path) -> None:
    root = tmp_path / "many"
    for i in range(150):  # 900 runs (hard links): batches that take both workers many seconds
        shutil.copytree(fleet, root / f"copy-{i:03d}", copy_function=os.link)
    proc = subprocess.Popen([sys.executable, "-m", "toranalyze", "fleet", str(root), "-o", str(tmp_path / "s"),
                             "--no-report", "-j", "2"], start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(15)  # hashing done, both workers in their batches
    assert proc.poll() is None, proc.communicate()[0]
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 1.5, out
    assert proc.returncode == 130 and "run the same command again" in out, out
