"""Shared test helpers: run a parser on real lines, compare with golden files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from toranalyze.ingest.lines import lines_from_strings
from toranalyze.ingest.parser_rows import parsing
from toranalyze.ingest.reader import read_text_events

DATA = Path(__file__).parent / "data"

# Columns compared by golden files (file paths and raw messages are left out on purpose:
# they make goldens brittle without testing anything the analysis relies on).
GOLDEN_COLUMNS = [
    "line", "line_end", "kind", "severity", "ts", "ts_offset_s", "ts_year_known", "ts_inferred",
    "job_id", "attempt", "node", "rank", "gpu", "device", "step", "step_time_s", "loss",
    "duration_s", "code", "state",
]


def extract_lines(parser: Any, lines: list[str]) -> pl.DataFrame:
    """Run one parser's extract over prepared lines (no file needed)."""
    with parsing():  # as the reader runs parsers
        out = parser.extract(lines_from_strings(lines).lazy())
        return out.collect() if out is not None else pl.DataFrame()


def parse_file(parser: Any, path: Path | str) -> pl.DataFrame:
    """Run a line parser over a file through the real reader (prefix context included)."""
    return read_text_events(str(path), [parser]).events


def _jsonable(frame: pl.DataFrame) -> list[dict[str, Any]]:
    cols = [c for c in GOLDEN_COLUMNS if c in frame.columns]
    rows = frame.select(cols).to_dicts()
    for row in rows:
        for k, v in list(row.items()):
            if v is None:
                del row[k]
            elif hasattr(v, "isoformat"):
                row[k] = v.isoformat()
            elif isinstance(v, float) and v != v:
                row[k] = "NaN"
    return rows


def assert_golden(frame: pl.DataFrame, golden: Path) -> None:
    """Compare a frame's GOLDEN_COLUMNS with a JSON golden file.

    Set TORANALYZE_UPDATE_GOLDEN=1 to (re)write the file, then review the diff by eye.
    """
    got = _jsonable(frame)
    if os.environ.get("TORANALYZE_UPDATE_GOLDEN") == "1" or not golden.exists():
        if os.environ.get("CI"):
            pytest.fail(f"golden file {golden} is missing")
        golden.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(golden.read_text())
    assert got == want, f"output differs from {golden.name} (TORANALYZE_UPDATE_GOLDEN=1 rewrites it)"

# The analysis's stage frames are checked against their contracts (toranalyze/reconstruct/contracts.py)
# in every test that runs it.
os.environ.setdefault("TORANALYZE_CHECK_CONTRACTS", "1")
