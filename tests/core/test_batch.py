"""Small text files read as one batch give what each gives read alone (``read_text_batch``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from toranalyze.ingest import numbering, pipeline, streams
from toranalyze.ingest.batch import read_text_batch
from toranalyze.ingest.reader import FileResult, read_document_batch, read_document_events, read_text_events
from toranalyze.ingest.registry import default_registry

DATA = Path(__file__).parent.parent / "data"
# Kernel-side logs: the parser that reads them batched must keep all its state within a file.
KERNEL_LOGS = sorted(p for p in (DATA / "kernel").rglob("*") if p.is_file() and p.suffix in (".log", ".txt"))
KERNEL_LOGS += sorted(p for p in (DATA / "real_excerpts" / "gpu").rglob("*") if p.is_file() and p.suffix != ".toml")


def _chosen() -> list:
    """The parsers every text log of the tests is chosen (one set: all line parsers)."""
    mode, parsers = default_registry().choose("x.log", "kernel: x", None)
    assert mode != "document"
    return parsers


def _same(got: FileResult, want: FileResult, where: str) -> None:
    assert_frame_equal(got.events, want.events)
    got_counts = (got.lines, got.covered, got.parsers, got.warnings)
    assert got_counts == (want.lines, want.covered, want.parsers, want.warnings), where


def _check(paths: list[str]) -> None:
    parsers = _chosen()
    for path, got in zip(paths, read_text_batch(paths, parsers), strict=True):
        _same(got, read_text_events(path, parsers), path)


def test_every_test_log_reads_the_same_in_one_batch() -> None:
    kinds = ("kernel", "real_excerpts", "real_excerpts_heldout", "torch", "nccl", "trainer", "slurm", "kubernetes")
    skip = (".toml", ".json", ".yaml", ".parquet", ".gz")
    files = sorted(p for d in kinds for p in (DATA / d).rglob("*") if p.is_file() and p.suffix not in skip)
    assert len(files) > 30
    for i in range(0, len(files), 64):
        _check([str(p) for p in files[i : i + 64]])


def _whole_kernel_text() -> list[str]:
    return [line for p in KERNEL_LOGS for line in p.read_text(errors="replace").splitlines()]


@settings(max_examples=10, deadline=None)
@given(st.data())
def test_a_kernel_log_cut_into_files_reads_the_same_batched(data: st.DataObject) -> None:
    """Cut anywhere (inside a record, after a boot banner, a dmesg -H header, an ibstat CA, a
    GPU index table), each part reads batched as it reads alone: nothing crosses a file."""
    _check_cut(_whole_kernel_text(), data)


def _check_cut(lines: list[str], data: st.DataObject) -> None:
    """``lines`` cut at up to six points drawn by hypothesis, each part a file: ``_check``."""
    cuts = sorted(data.draw(st.sets(st.integers(1, len(lines) - 1), min_size=1, max_size=min(6, len(lines) - 1))))
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for k, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(lines)], strict=True)):
            path = Path(tmp) / f"part{k}.log"
            path.write_text("\n".join(lines[a:b]) + "\n")
            paths.append(str(path))
        _check(paths)


# Text logs of every family whose parser reads batches (documents and data files excluded).
_TEXT_SKIP = (".toml", ".json", ".yaml", ".yml", ".parquet", ".md", *streams.COMPRESSED)


def _text_logs(*dirs: Path) -> list[Path]:
    return sorted(p for d in dirs for p in d.rglob("*") if p.is_file() and p.suffix not in _TEXT_SKIP)


FAMILY_LOGS = {family: _text_logs(DATA / family) for family in ("trainer", "torch", "nccl", "slurm")}
# Kubernetes: its text captures (tables, describe output, klog, operator logs) and the excerpts
# (describe fragments pasted without their 'Name:' line, eviction messages).
FAMILY_LOGS["kubernetes"] = _text_logs(
    DATA / "kubernetes", DATA / "real_excerpts" / "kubernetes", DATA / "real_excerpts_heldout" / "kubernetes"
)


@pytest.mark.parametrize("family", sorted(FAMILY_LOGS))
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_a_family_log_cut_into_files_reads_the_same_batched(family: str, data: st.DataObject) -> None:
    """A log of each family cut anywhere (inside a traceback, a wrapped iteration record, an NCCL
    error chain, a Slurm step's records) reads batched as its parts read alone."""
    logs = FAMILY_LOGS[family]
    path = logs[data.draw(st.integers(0, len(logs) - 1))]
    lines = path.read_text(errors="replace").splitlines()
    if len(lines) >= 2:
        _check_cut(lines, data)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILY_LOGS))
def test_one_file_per_line_of_a_family_reads_the_same_batched(family: str, tmp_path: Path) -> None:
    """Every line of a family's logs its own file (the first 400 lines of each log): any window,
    writer stream, wrap, record or fill carried from one file into the next shows."""
    paths = []
    for p in FAMILY_LOGS[family]:
        for k, line in enumerate(p.read_text(errors="replace").splitlines()[:400]):
            path = tmp_path / f"{p.stem}-{k:05d}.log"
            path.write_text(line + "\n")
            paths.append(str(path))
    for i in range(0, len(paths), 64):
        _check(paths[i : i + 64])


def test_one_file_per_kernel_line_reads_the_same_batched(tmp_path: Path) -> None:
    """The sharpest cut: every line its own file. Any fill, boot count, record, header or GPU
    index carried from one file into the next changes the batch's rows."""
    paths = []
    for k, line in enumerate(_whole_kernel_text()):
        path = tmp_path / f"l{k:05d}.log"
        path.write_text(line + "\n")
        paths.append(str(path))
    _check(paths)


def test_a_file_of_several_blocks_is_read_alone() -> None:
    """Parsers' rules work within a block: a file longer than one block keeps its blocks apart
    (as a small compressed file holding much text would), the others are still batched."""
    paths = [str(p) for p in KERNEL_LOGS]
    big = [p for p in paths if Path(p).stat().st_size > 4096]
    assert big and len(big) < len(paths)
    parsers = _chosen()
    for path, got in zip(paths, read_text_batch(paths, parsers, block_bytes=4096), strict=True):
        _same(got, read_text_events(path, parsers, block_bytes=4096), path)


def test_a_batch_that_fails_is_read_file_by_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for p in KERNEL_LOGS[:4]:
        (tmp_path / p.name).write_bytes(p.read_bytes())
    want = pipeline.ingest([str(tmp_path)])

    def broken(paths: list[str], parsers: list) -> list[FileResult]:
        raise RuntimeError("batch failed")

    monkeypatch.setattr(pipeline, "read_text_batch", broken)
    got = pipeline.ingest([str(tmp_path)])
    assert_frame_equal(got.events, want.events)
    assert [f.as_dict() for f in got.files] == [f.as_dict() for f in want.files]
    assert want.n_events > 0 and numbering.FILE_LINES > 1 << 31


def _documents() -> list[tuple[str, object]]:
    """Every file of the tests' data that a parser reads whole, with that parser."""
    registry, out = default_registry(), []
    for p in sorted(DATA.rglob("*")):
        if not p.is_file() or "golden" in p.parts or p.suffix == ".toml":
            continue
        head = streams.read_head(str(p))
        if not head or b"\0" in head:
            continue
        mode, parsers = registry.choose(str(p), head.decode("utf-8", errors="replace"))
        if mode == "document":
            out.append((str(p), parsers[0]))
    return out


class _UnknownKind:
    """A plugin's document parser that emits a kind the schema does not know."""

    name, source = "odd", "plugin"

    def __init__(self, parser: object) -> None:
        self.parser = parser

    def parse(self, path: str) -> object:
        return self.parser.parse(path).lazy().with_columns(kind=pl.lit("no-such-kind"))  # type: ignore[attr-defined]


def test_documents_read_together_give_what_each_gives_alone(tmp_path: Path) -> None:
    docs = _documents()
    assert len(docs) >= 10 and len({p.name for _, p in docs}) >= 2  # sacct dumps, pod specs, events...
    broken = tmp_path / "pod-broken.yaml"
    broken.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x\n  : [\n")
    docs.insert(3, (str(broken), docs[0][1]))
    odd = (docs[-1][0], _UnknownKind(docs[-1][1]))
    for mix in (docs, [*docs[:5], odd, *docs[5:]]):  # the shared steps fail: each document alone
        for (path, parser), got in zip(mix, read_document_batch(mix), strict=True):
            try:
                want: FileResult | BaseException = read_document_events(path, parser)
            except Exception as exc:  # noqa: BLE001 (the same error is expected of the batch)
                want = exc
            if isinstance(want, BaseException):
                assert type(got) is type(want) and str(got) == str(want), path
            else:
                assert isinstance(got, FileResult), f"{path}: {got}"
                _same(got, want, path)
