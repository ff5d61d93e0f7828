"""Bad input never stops a run: each bad file gets a warning naming it, the rest is ingested."""

from __future__ import annotations

import bz2
import gzip
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import zstandard

from toranalyze.ingest.pipeline import IngestOptions, ingest

GOOD = "slurmstepd: error: *** JOB 42 ON node7 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***\n"


def _good_lines(n: int = 50) -> bytes:
    return ("".join(f"ordinary line {i}\n" for i in range(n)) + GOOD).encode()


@pytest.fixture()
def mess(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "good.log").write_bytes(_good_lines())
    (d / "good.log.gz").write_bytes(gzip.compress(_good_lines()))
    (d / "good.log.zst").write_bytes(zstandard.ZstdCompressor().compress(_good_lines()))
    (d / "good.log.bz2").write_bytes(bz2.compress(_good_lines()))
    (d / "truncated.log.gz").write_bytes(gzip.compress(_good_lines(20000))[:3000])
    (d / "corrupt.log.gz").write_bytes(b"\x1f\x8b\x08\x00garbage-not-deflate" * 10)
    (d / "garbage.bin").write_bytes(bytes(range(256)) * 64)
    (d / "latin1.log").write_bytes("caf\xe9 na\xefve\n".encode("latin-1") + GOOD.encode())
    (d / "huge_line.log").write_bytes(b"x" * (10 * 1024 * 1024) + b"\n" + GOOD.encode())
    (d / "empty.log").write_bytes(b"")
    (d / "crlf.log").write_bytes(GOOD.replace("\n", "\r\n").encode())
    return d


def test_every_bad_file_is_reported_and_the_rest_ingested(mess: Path) -> None:
    result = ingest([str(mess)], IngestOptions())
    by_name = {Path(f.path).name: f for f in result.files}
    for name in ("good.log", "good.log.gz", "good.log.zst", "good.log.bz2", "latin1.log", "huge_line.log", "crlf.log"):
        assert by_name[name].error is None, (name, by_name[name].error)
    assert by_name["good.log"].lines == 51
    assert by_name["good.log.gz"].lines == 51 and by_name["good.log.zst"].lines == 51
    assert by_name["garbage.bin"].error and "binary" in by_name["garbage.bin"].error
    assert by_name["empty.log"].warnings == ["empty file"]
    trunc = by_name["truncated.log.gz"]
    assert trunc.error is None and any("ended early" in w for w in trunc.warnings)
    assert trunc.lines > 0
    corrupt = by_name["corrupt.log.gz"]
    assert corrupt.error or corrupt.warnings
    assert by_name["huge_line.log"].lines == 2
    # the parsers still see the good records in every readable copy
    files_with_events = set(result.events["file"].map_elements(lambda p: Path(p).name, return_dtype=pl.String))
    if "slurm" in set(result.events["parser"].to_list()):
        assert {"good.log", "good.log.gz", "good.log.zst", "good.log.bz2", "latin1.log", "crlf.log"} <= files_with_events


def test_unreadable_file_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok = tmp_path / "ok.log"
    ok.write_text(GOOD)
    locked = tmp_path / "locked.log"
    locked.write_text(GOOD)
    real_open = open

    def fake_open(path, *a, **k):  # root ignores chmod, so simulate the denial
        if str(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)
    result = ingest([str(ok), str(locked), str(tmp_path / "missing.log")], IngestOptions())
    reports = {Path(f.path).name: f for f in result.files}
    assert "permission denied" in (reports["locked.log"].error or "")
    assert reports["ok.log"].error is None
    assert [e.path for e in result.input_errors] == [str(tmp_path / "missing.log")]


def test_exit_code_is_nonzero_only_when_nothing_could_be_read(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.bin"
    bad.write_bytes(bytes(range(256)) * 8)
    good = tmp_path / "good.log"
    good.write_text(GOOD)
    run = [sys.executable, "-m", "toranalyze", "ingest", "-q", "-o", str(tmp_path / "o")]
    only_bad = subprocess.run([*run, str(bad)], capture_output=True, text=True)
    assert only_bad.returncode == 2
    assert "garbage.bin" in only_bad.stderr and "no input could be read" in only_bad.stderr
    assert "next:" in only_bad.stderr
    mixed = subprocess.run([*run, str(bad), str(good)], capture_output=True, text=True)
    assert mixed.returncode == 0, mixed.stderr
    assert "garbage.bin" in mixed.stderr


def test_coverage_of_a_missing_path_fails_instead_of_reporting_every_line_recognised(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    run = subprocess.run([sys.executable, "-m", "toranalyze", "coverage", str(missing)], capture_output=True, text=True)
    assert run.returncode == 2
    assert "no such file" in run.stderr and "no input could be read" in run.stderr
    assert "recognised" not in run.stdout
    good = tmp_path / "good.log"
    good.write_text(GOOD)
    ok = subprocess.run([sys.executable, "-m", "toranalyze", "coverage", str(good)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
