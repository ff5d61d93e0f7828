"""The small-block shortcuts give what the general paths give."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from toranalyze.ingest import reader
from toranalyze.ingest.lines import prepare_lines
from toranalyze.plugins import default_registry

kernel = importlib.import_module("toranalyze_parsers.kernel")
peel_prefixes = importlib.import_module("toranalyze_parsers.kernel.prefix").peel_prefixes

DATA = Path(__file__).parent.parent / "data"
LOGS = sorted(
    p for d in ("kernel", "real_excerpts") for p in (DATA / d).rglob("*") if p.is_file() and p.suffix != ".toml"
)


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_small_gates_and_detector_tests_match_the_general_ones(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsers = default_registry().line_parsers()
    prepared = prepare_lines(next(iter(reader.Chunks(str(path)))))
    small = [p.name for p in reader.gated(prepared, parsers)]
    monkeypatch.setattr(reader, "_GATE_PROBE", 0)  # every block takes the general path
    assert small == [p.name for p in reader.gated(prepared, parsers)]

    peeled = peel_prefixes(prepared.lazy()).collect()
    python_tests = kernel._wanted(peeled)
    monkeypatch.setattr(kernel, "_PYTHON_GATES", -1)
    assert python_tests == kernel._wanted(peeled)
