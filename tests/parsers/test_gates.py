"""Parser gates are necessary conditions: lines without any gate never make a record.

A block in which none of a parser's ``gates`` occurs skips that parser (see ``toranalyze.parser_api``),
so a rule that fires on a line no gate matches would lose records silently. Every parser with
gates is run on the lines of each sample and test log that its gates do *not* match: it must
find nothing there.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from toranalyze.ingest.blocks import Chunks
from toranalyze.ingest.gates import _gate, gated, gates_by_file
from toranalyze.ingest.lines import prepare_lines
from toranalyze.ingest.numbering import FILE_LINES, file_key
from toranalyze.ingest.registry import default_registry

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".log", ".out", ".txt", ".syslog", ".err"}


def _logs() -> list[Path]:
    found = [p for d in ("tests/data", "sample_logs") for p in (ROOT / d).rglob("*") if p.suffix in TEXT_SUFFIXES]
    return sorted(found)


def _gated_parsers() -> list[object]:
    return [p for p in default_registry().line_parsers() if getattr(p, "gates", ())]


def _corpus() -> pl.DataFrame:
    frames = []
    offset = 0
    for path in _logs():
        for chunk in Chunks(str(path)):
            frames.append(chunk.with_columns(pl.col("line") + offset))
            offset += 1_000_000
    return prepare_lines(pl.concat(frames))


def test_the_built_in_line_parsers_declare_gates():
    names = {p.name for p in _gated_parsers()}
    assert {"kernel", "nccl", "slurm", "kubernetes", "trainer", "torch"} <= names


@pytest.mark.parametrize("name", ["kernel", "nccl", "slurm", "kubernetes", "trainer", "torch"])
def test_lines_outside_the_gates_make_no_record(name):
    parser = default_registry().get(name)
    lines = _corpus()
    gate = _gate(parser)
    assert gate is not None
    outside = lines.filter(~gate)
    assert outside.height > 1000, "the corpus should hold many lines this parser's gates exclude"
    assert lines.height > outside.height, "the corpus should hold lines this parser reads"
    found = parser.extract(outside.lazy())
    assert found is None or found.collect().height == 0


def test_a_block_without_gates_skips_the_parser():
    lines = prepare_lines(pl.DataFrame({"line": [1, 2], "raw": ["hello", "[2024-01-01 00:00:00] iteration 5"]}))
    names = [p.name for p in gated(lines, default_registry().line_parsers())]
    assert "kernel" not in names and "nccl" not in names
    assert "trainer" in names  # no gates: always runs


@pytest.mark.parametrize("name", ["kernel", "nccl", "slurm", "kubernetes", "trainer", "torch"])
def test_the_block_test_decides_as_the_line_test(name):
    """gated() searches unanchored gates in the raw lines only; it must run a parser on exactly
    the blocks where some line holds a gate in its raw or peeled text."""
    parser = default_registry().get(name)
    gate = _gate(parser)
    for path in _logs():
        for chunk in Chunks(str(path)):
            lines = prepare_lines(chunk)
            expected = lines.select(gate.any()).item()
            assert (parser in gated(lines, [parser])) == expected, f"{path.name}: {name} gated {not expected}"


def test_a_batch_gates_each_file_as_alone():
    """A batch's gate search (one per gate over all its files) opens a parser to exactly the files
    ``gated`` opens it to when each is read alone."""
    parsers = _gated_parsers()
    blocks = [prepare_lines(chunk) for path in _logs() for chunk in Chunks(str(path))]
    batch = pl.concat(b.with_columns(pl.col("line") + k * FILE_LINES) for k, b in enumerate(blocks) if b.height)
    hits = gates_by_file(batch.with_columns(file_key().alias("_k")), parsers)
    read = [(k, block) for k, block in enumerate(blocks) if block.height]
    for k, block in read:
        alone = {p.name for p in gated(block, parsers)}
        assert {p.name for p in parsers if any(k in hits[g] for g in p.gates)} == alone
    assert len(read) > 50


_OOM = ("[ 9612.112] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=step_0,mems_allowed=0-1,"
        "oom_memcg=/slurm/uid_1000/job_731451/step_0,task_memcg=/slurm/uid_1000/job_731451/step_0/task_0")


@pytest.mark.parametrize("line, runs", [
    (_OOM, False),  # a Slurm step's cgroup name is not a training step
    ("[titan] 2024-05-01 10:00:00,123 - root - INFO - step:  10  loss:  7.9  memory: 30GiB", True),
    ("[titan] 2024-05-01 10:00:00,123 - root - INFO - Training starts at step 1.", True),
    ("Continuing training from global step 500", True),
    ("  Total optimization steps = 1,000", True),
    ("[Rank 0] step=100, skipped=0, lr=[1e-4], mom=[(0.9, 0.95)]", True),
    ("opt_step: 12 | loss: 2.1", True),
])
def test_trainer_gate_reads_step_only_as_trainers_write_it(line, runs):
    lines = prepare_lines(pl.DataFrame({"line": [1], "raw": [line]}))
    assert (default_registry().get("trainer") in gated(lines, default_registry().line_parsers())) is runs
