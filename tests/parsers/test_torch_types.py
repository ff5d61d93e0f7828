"""The torch parser types only the lines ``may_type`` keeps: that must be every line some case of
``_line_type`` gives a type other than OTHER, or records would lose lines."""

from __future__ import annotations

import importlib
from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from toranalyze.ingest.blocks import Chunks
from toranalyze.ingest.lines import prepare_lines

records = importlib.import_module("toranalyze_parsers.torch.records")

ROOT = Path(__file__).resolve().parents[2]


def _missed(texts: pl.Series) -> list[str]:
    """Lines typed other than OTHER that ``may_type`` drops."""
    df = pl.DataFrame({"_x": texts})
    out = df.select(records._line_type().alias("t"), records.may_type().alias("m"))
    return df.filter((out["t"] != records.OTHER) & ~out["m"])["_x"].to_list()


def _text_files() -> list[Path]:
    roots = [ROOT / "tests" / "data", ROOT / "sample_logs"]
    return [p for r in roots for p in sorted(r.rglob("*")) if p.is_file() and p.suffix not in {".parquet", ".gz"}]


def test_superset_on_every_test_input() -> None:
    typed = 0
    for path in _text_files():
        for chunk in Chunks(str(path), 1 << 20):
            texts = prepare_lines(chunk)["text"]
            assert _missed(texts) == [], path
            typed += int(
                pl.DataFrame({"_x": texts}).select((records._line_type() != records.OTHER).sum()).item()
            )
    assert typed > 1000  # the inputs hold plenty of record lines: the check is not vacuous


# Pieces of the lines the cases look for, and of the lines they must not mistake for records.
_PIECES = [
    "Traceback (most recent call last):", "During handling of the above exception", "File \"a.py\", line 3, in f",
    "  ", "    ", "\t", " ", "RuntimeError", "ValueError: bad", "torch.distributed.DistBackendError", ":", "'",
    "what():  x", "terminate called after throwing an instance of 'c10::Error'", "terminate called recursively",
    "frame #3: ", "Exception raised from run at x.cpp:12 (most recent call first)", "Fatal Python error: Aborted",
    "Current thread 0x00007f (most recent call first):", "Thread 0x1a (most recent call first):", "Segmentation fault",
    "Killed", "Aborted", " (core dumped)", "line 4: 123 Killed", "run.sh: ", "Root Cause (first observed failure):",
    "========", "--------", "x FAILED", "Failures:", "<NO_OTHER_FAILURES>", "[0]:", "nccl", "ncclSystemError:",
    "Last error:", "CUDA kernel errors might be asynchronously reported", "Search for `cudaErrorX' in ",
    "^^^^", "~~~", "time : 1", "host : n1", "rank : 0", "exitcode : 1", "INFO", "WARNING", "gpu-001:123:456 [0] NCCL INFO",
    " iteration      100/    1000 |", "elapsed time per iteration (ms): 3.1", "f(x, y)", "a = b(c,", "return g(",
    "Extension modules:", "Python runtime state:", ". This may indicate", "Device-side assertions were",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=5))
def test_superset_on_generated_lines(pieces: list[str]) -> None:
    line = "".join(pieces)
    assert _missed(pl.Series([line, line.strip(), " " + line])) == []


def test_superset_on_every_pair_of_pieces() -> None:
    """Every piece and every ordered pair, bare, stripped, indented and with trailing blanks."""
    lines = [
        variant
        for a in _PIECES
        for b in ["", *_PIECES]
        for variant in (a + b, (a + b).strip(), " " + a + b, a + b + "  ", "    " + a + b, "\t" + a + b)
    ]
    assert _missed(pl.Series(lines)) == []
