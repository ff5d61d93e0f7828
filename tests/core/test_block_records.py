"""A record cut by a block boundary reads as in one block: the next block goes on with it."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from toranalyze.ingest import blocks as ingest_blocks
from toranalyze.ingest.carry import TAIL_LINES, extend_records, open_tail
from toranalyze.ingest.pipeline import IngestOptions, ingest
from toranalyze.ingest.reader import read_text_events
from toranalyze.ingest.registry import default_registry

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/opt/train/pretrain.py", line 212, in <module>',
    "    main()",
    '  File "/opt/train/pretrain.py", line 198, in main',
    "    loss = model(batch)",
    '  File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl',
    "    return forward_call(*args, **kwargs)",
    '  File "/opt/train/model.py", line 77, in forward',
    "    h = self.mlp(h)",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 3; 79.15 GiB total "
    "capacity; 75.02 GiB already allocated; 1.11 GiB free)",
]


def _log(path: Path, before: int, after: int) -> None:
    """``before`` iteration lines, a rank's traceback, ``after`` iteration lines."""

    def iterations(first: int, n: int) -> list[str]:
        return [
            f"[2024-05-07 11:{(i // 60) % 60:02d}:{i % 60:02d}] iteration {i:8d}/   10000 | "
            "elapsed time per iteration (ms): 1000.0 | lm loss: 2.0E+00 |"
            for i in range(first, first + n)
        ]

    path.write_text("\n".join([*iterations(1, before), *TRACEBACK, *iterations(before + 1, after)]) + "\n")


COLUMNS = ["line", "line_end", "kind", "ts", "message", "parser"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.integers(0, 120), block=st.sampled_from([1024, 2048, 4096]))
def test_a_traceback_cut_by_a_boundary_is_one_record(tmp_path: Path, before: int, block: int) -> None:
    path = tmp_path / "train.log"
    _log(path, before, 30)
    parsers = default_registry().line_parsers()
    whole = read_text_events(str(path), parsers)
    blocks = read_text_events(str(path), parsers, block_bytes=block)
    errors = whole.events.filter(kind="error")
    assert errors.height == 1 and errors["line_end"][0] - errors["line"][0] == len(TRACEBACK) - 1
    assert_frame_equal(blocks.events.select(COLUMNS), whole.events.select(COLUMNS))
    assert blocks.covered == whole.covered


def test_a_cut_traceback_is_classified_as_in_one_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "train.log"
    _log(path, 35, 30)  # the 4 KB boundary falls in the traceback's frames
    boundaries = [f["line"][0] for f in ingest_blocks.Chunks(str(path), 4096)][1:]
    assert any(36 < b < 36 + len(TRACEBACK) for b in boundaries)
    whole = ingest([str(path)], IngestOptions()).events
    monkeypatch.setattr(ingest_blocks, "BLOCK_BYTES", 4096)
    blocks = ingest([str(path)], IngestOptions()).events
    oom = whole.filter(pl.col("failure_class") == "oom_gpu")
    assert oom.height == 1
    cols = ["line", "line_end", "kind", "failure_class", "ts"]
    assert_frame_equal(blocks.filter(pl.col("failure_class").is_not_null()).select(cols), oom.select(cols))


def _lines(n: int) -> pl.DataFrame:
    return pl.DataFrame({"line": list(range(1, n + 1)), "text": [f"l{i}" for i in range(1, n + 1)]})


def _rows(*spans: tuple[int, int | None]) -> pl.DataFrame:
    return pl.DataFrame(
        {"line": [s[0] for s in spans], "line_end": [s[1] for s in spans]}, schema_overrides={"line_end": pl.Int64}
    )


def test_only_a_record_reaching_the_block_end_is_carried() -> None:
    lines = _lines(100)
    assert open_tail(lines, _rows((10, None), (90, 100)))["line"].to_list() == list(range(90, 101))
    # a record may go on after a line or two of nothing it holds (TAIL_GAP); not after three
    assert open_tail(lines, _rows((10, None), (98, None)))["line"].to_list() == [98, 99, 100]
    assert open_tail(lines, _rows((10, None), (97, None))).height == 0
    assert open_tail(lines, _rows((10, None), (90, 95))).height == 0  # ended before the block did
    assert open_tail(lines, None).height == 0
    long = _lines(TAIL_LINES + 10)
    assert open_tail(long, _rows((5, TAIL_LINES + 10))).height == 0  # too long to read again


def _held(*rows: tuple[int, int | None, str, str | None]) -> pl.DataFrame:
    return pl.DataFrame(
        [{"line": r[0], "line_end": r[1], "kind": r[2], "parser": "torch", "message": r[3]} for r in rows],
        schema={"line": pl.Int64, "line_end": pl.Int64, "kind": pl.String, "parser": pl.String, "message": pl.String},
    )


def test_a_longer_record_takes_the_place_of_the_cut_one() -> None:
    held = _held((5, None, "info", "a"), (10, 12, "warning", "Traceback"))
    # read again with the next block, the record reaches line 20 and its exception names an error
    out, took = extend_records(held, _held((10, 20, "error", None)))
    assert out.drop("parser").rows() == [(5, None, "info", "a"), (10, 20, "error", "Traceback")]  # message kept
    assert took.height == 1
    # no further than before: nothing changes
    out, took = extend_records(held, _held((10, 12, "error", "x")))
    assert_frame_equal(out, held)
    assert took.height == 0


def test_with_several_rows_on_the_line_only_the_same_kind_is_replaced() -> None:
    held = _held((10, 12, "warning", "w"), (10, 12, "error", "e"))
    out, _ = extend_records(held, _held((10, 30, "error", "E")))
    assert out.drop("parser").rows() == [(10, 12, "warning", "w"), (10, 30, "error", "E")]


@pytest.mark.parametrize("block", [1024, 768])
def test_a_record_across_three_blocks_is_one_record(tmp_path: Path, block: int) -> None:
    # A traceback of 25 frames (about 2.5 KB) read in 1 KB or 768 B blocks goes on over two or three
    # boundaries: the first block's row must still be held when the later blocks extend it.
    frames = [
        line
        for i in range(25)
        for line in (f'  File "/opt/train/layers/block_{i:02d}.py", line {100 + i}, in forward', f"    h = self.f{i}(h)")
    ]
    long_tb = [TRACEBACK[0], *frames, TRACEBACK[-1]]
    it = [
        f"[2024-05-07 11:00:{i:02d}] iteration {i:8d}/   10000 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.0E+00 |"
        for i in range(1, 6)
    ]
    path = tmp_path / "train.log"
    path.write_text("\n".join([*it, *long_tb, *it]) + "\n")
    boundaries = [f["line"][0] for f in ingest_blocks.Chunks(str(path), block)][1:]
    inside = [b for b in boundaries if 6 < b < 6 + len(long_tb)]
    assert len(inside) >= 2
    parsers = default_registry().line_parsers()
    whole = read_text_events(str(path), parsers)
    blocks = read_text_events(str(path), parsers, block_bytes=block)
    errors = whole.events.filter(kind="error")
    assert errors.height == 1 and errors["line_end"][0] == 5 + len(long_tb)
    assert_frame_equal(blocks.events.select(COLUMNS), whole.events.select(COLUMNS))
    assert blocks.covered == whole.covered


TORCHRUN_TABLE = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "pretrain_gpt.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2024-03-04_13:04:11",
    "  host      : gpu-002",
    "  rank      : 10 (local_rank: 2)",
    "  exitcode  : 1 (pid: 170183)",
    "  error_file: <N/A>",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    "============================================================",
]


def test_a_record_goes_on_into_a_block_its_parser_is_not_gated_on(tmp_path: Path) -> None:
    # The boundary falls before the table's last two lines, which hold none of the torch parser's
    # gates: the parser still reads that block, since its record goes on there.
    head = [f"[2024-03-04 13:00:{i:02d}] waiting for rendezvous of the next attempt" for i in range(20)]
    tail = [f"[2024-03-04 13:08:{i:02d}] waiting for rendezvous of the next attempt" for i in range(20)]
    text = "\n".join([*head, *TORCHRUN_TABLE, *tail]) + "\n"
    path = tmp_path / "launcher.log"
    path.write_text(text)
    cut = text.index("  traceback : ")  # the first block ends just before this line
    assert [f["line"][0] for f in ingest_blocks.Chunks(str(path), cut)][1] == len(head) + len(TORCHRUN_TABLE) - 1
    parsers = default_registry().line_parsers()
    whole = read_text_events(str(path), parsers)
    blocks = read_text_events(str(path), parsers, block_bytes=cut)
    errors = whole.events.filter(kind="error")
    assert errors.height == 1 and errors["line_end"][0] == len(head) + len(TORCHRUN_TABLE)
    assert "To enable traceback" in errors["message"][0]
    assert_frame_equal(blocks.events.select(COLUMNS), whole.events.select(COLUMNS))
    assert blocks.covered == whole.covered
