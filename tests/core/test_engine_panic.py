"""A panic of the dataframe engine's native code (polars' PanicException, a BaseException) in one
parser or one run is contained like any error: that input is reported, the others are read."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from toranalyze.ingest import pipeline
from toranalyze.ingest.registry import default_registry

DATA = Path(__file__).resolve().parent.parent / "data"


def test_a_parser_panic_loses_only_its_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    src = sorted((DATA / "kernel").glob("*.log"))[:2]
    for p in src:
        (tmp_path / p.name).write_bytes(p.read_bytes())
    (tmp_path / "train.log").write_text("NCCL WARN this line reaches the nccl parser\n", encoding="utf-8")
    nccl = default_registry().get("nccl")

    def panics(lines: pl.LazyFrame) -> pl.LazyFrame:
        raise pl.exceptions.PanicException("assertion failed: i < self.len()")

    monkeypatch.setattr(nccl, "extract", panics)
    result = pipeline.ingest([str(tmp_path)])
    failed = [f for f in result.files if f.error]
    assert [Path(f.path).name for f in failed] == ["train.log"]
    assert "PanicException" in (failed[0].error or "") or "assertion failed" in (failed[0].error or "")
    assert result.events.filter(pl.col("file").str.ends_with(src[0].name)).height > 0
