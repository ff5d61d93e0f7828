"""A panic of the dataframe engine's native code (polars' PanicException, a BaseException) in one
parser or one run is contained like any error: that input is reported, the others are read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def _panics_when_run(extract: Any) -> Any:
    """``extract`` whose query panics only when polars runs it (as a native panic does), not when
    it is built and its schema checked."""

    def boom(frame: pl.DataFrame) -> pl.DataFrame:
        raise pl.exceptions.PanicException("index out of bounds: the len is 3 but the index is 3")

    def panicking(lines: pl.LazyFrame) -> pl.LazyFrame:
        query = extract(lines)
        return query.map_batches(boom, schema=query.collect_schema())

    return panicking


@pytest.mark.parametrize("spool", [False, True], ids=["in memory", "spooled"])
@pytest.mark.parametrize("alone", [False, True], ids=["small files read as a batch", "a file read alone"])
def test_a_panic_while_a_line_parser_query_runs_loses_only_its_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spool: bool, alone: bool
) -> None:
    src = DATA / "kernel" / "dmesg_T_xid79_gpu_fell_off_bus.log"
    run = tmp_path / "run"
    run.mkdir()
    (run / src.name).write_bytes(src.read_bytes())
    (run / "train.log").write_text("NCCL WARN this line reaches the nccl parser\n" * (1 if not alone else 3))
    nccl = default_registry().get("nccl")
    monkeypatch.setattr(nccl, "extract", _panics_when_run(nccl.extract))
    if alone:
        monkeypatch.setattr(pipeline.file_groups, "ALONE_GROUP_FILES", 1)
    spooled = tmp_path / "spool" if spool else None
    if spooled:
        spooled.mkdir()
    result = pipeline.ingest([str(run)], spool=spooled)
    errors = {Path(f.path).name: f.error for f in result.files}
    assert errors[src.name] is None
    assert "PanicException" in (errors["train.log"] or "") or "index out of bounds" in (errors["train.log"] or "")
    assert result.events.filter(pl.col("file").str.ends_with(src.name)).height > 0


def test_a_panic_in_a_document_parser_loses_only_its_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    kube = DATA / "kubernetes" / "events_list.json"
    kernel = DATA / "kernel" / "dmesg_T_xid79_gpu_fell_off_bus.log"
    for p in (kube, kernel):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    kubernetes = default_registry().get("kubernetes")
    monkeypatch.setattr(kubernetes, "parse", _panics_when_run(kubernetes.parse))
    result = pipeline.ingest([str(tmp_path)])
    errors = {Path(f.path).name: f.error for f in result.files}
    assert errors[kernel.name] is None and errors[kube.name]
    assert result.events.filter(pl.col("file").str.ends_with(kernel.name)).height > 0
