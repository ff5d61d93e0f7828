"""One set of options for a run: ``analyze`` and ``fleet`` build the same ``RunOptions`` from the
same flags, and only options that change results change a fleet part's name."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from toranalyze import __version__
from toranalyze.cli import cli
from toranalyze.fleet.pipeline import OutputOptions, RunOptions, options_salt
from toranalyze.ingest.pipeline import IngestOptions, Workers
from toranalyze.reconstruct.analysis import AnalysisOptions

FLAGS = ["--tz", "Europe/Paris", "--year", "2024", "--ideal-step-time", "2.5", "--no-report", "--no-redact",
         "-j", "3"]
WANT = RunOptions(IngestOptions(tz="Europe/Paris", year=2024), AnalysisOptions(ideal_step_time_s=2.5),
                  OutputOptions(report=False, redact=False))


class Seen(Exception):
    pass


def test_analyze_and_fleet_build_the_same_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, tuple[Any, ...]] = {}

    def fake_run(run: Any, options: RunOptions, workers: Workers, on_file: Any = None) -> Any:
        seen["analyze"] = (options, workers)
        raise Seen

    def fake_build(paths: Any, out: Path, options: RunOptions, workers: Workers, **kw: Any) -> Any:
        seen["fleet"] = (options, workers)
        raise Seen

    monkeypatch.setattr("toranalyze.fleet.pipeline.analyze_run", fake_run)  # imported when analyze runs
    monkeypatch.setattr("toranalyze.fleet.build.build", fake_build)  # imported when fleet runs
    for cmd in ("analyze", "fleet"):
        res = CliRunner().invoke(cli, [cmd, str(tmp_path), "-o", str(tmp_path / cmd), *FLAGS])
        assert isinstance(res.exception, Seen), res.output
    assert seen["analyze"] == seen["fleet"] == (WANT, Workers(3))


def test_default_options_keep_the_parts_names() -> None:
    """The salt of the default options is the one stores were built with: their parts are reused."""
    before = hashlib.blake2b(f"{__version__}\0UTC\0None\0None\0True\0True\0".encode(), digest_size=16).hexdigest()
    assert options_salt(RunOptions()) == before
    assert options_salt(RunOptions(analysis=AnalysisOptions(ideal_step_time_s=2.5))) != before
