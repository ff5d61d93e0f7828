"""Lines too long to match whole: a progress bar that never printed a newline, a minified blob."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from toranalyze.ingest import blocks, reader
from toranalyze.ingest.pipeline import IngestOptions, ingest
from toranalyze.ingest.registry import default_registry

START = dt.datetime(2024, 5, 7, 11, 3, 12, tzinfo=dt.UTC)


def _bar_log(path: Path, steps: int, newline: str = "\n", color: bool = False) -> None:
    """A clock line, then one line of ``steps`` tqdm repaints separated by carriage returns only
    (tqdm writing to a file: the newline comes when the bar closes), 2 s a step."""
    repaints = []
    for i in range(steps + 1):
        m, s = divmod(2 * i, 60)
        h, m = divmod(m, 60)
        elapsed = f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"
        bar = f"{i * 100 // steps:3d}%|          | {i}/{steps} [{elapsed}<00:00,  2.00s/it]"
        repaints.append(f"\x1b[32m{bar}\x1b[0m" if color else bar)
    text = f"[{START:%Y-%m-%d %H:%M:%S}] Starting training{newline}" + "\r".join(repaints) + newline
    path.write_bytes(text.encode())


def test_every_repaint_of_a_bar_line_longer_than_the_match_limit_is_read(tmp_path: Path) -> None:
    steps = 30_000
    _bar_log(tmp_path / "train.log", steps)
    assert (tmp_path / "train.log").stat().st_size > 1.5 * blocks.LONG_LINE
    result = ingest([str(tmp_path / "train.log")], IngestOptions())
    ev = result.events.filter(kind="step").sort("step")
    assert ev["step"].to_list() == list(range(1, steps + 1))
    late = ev.select((pl.col("ts") - START).dt.total_seconds() - 2 * pl.col("step")).to_series()
    assert late.abs().max() == 0  # each repaint placed by its own elapsed time
    assert result.files[0].warnings == []  # no repaint was cut


def test_a_line_longer_than_the_match_limit_is_cut_with_a_warning_naming_it(tmp_path: Path) -> None:
    blob = "x" * (blocks.LONG_LINE + 10)
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
    (tmp_path / "kern.log").write_text(f"{xid}\n{blob}\r{blob}\n{xid}\n")
    result = ingest([str(tmp_path / "kern.log")], IngestOptions())
    assert result.events.filter(failure_class="gpu_hardware")["line"].to_list() == [1, 3]
    (warning,) = result.files[0].warnings
    assert warning.startswith(f"line 2 longer than {blocks.LONG_LINE} bytes")


def test_a_line_of_repaints_longer_than_a_block_is_read_in_pieces_numbered_as_that_line(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    _bar_log(path, 3000)
    with path.open("a") as out:
        out.write("[2024-05-07 12:43:14] Training completed.\n")
    frames = list(blocks.Chunks(str(path), block_bytes=4096))
    assert len(frames) > 40 and max(f.height for f in frames) <= 2
    numbers = pl.concat(frames)["line"]
    assert numbers.unique().sort().to_list() == [1, 2, 3] and numbers.is_sorted()
    # every piece ends after a repaint: joined back at carriage returns, they are the file's lines
    pieces = pl.concat(frames).group_by("line", maintain_order=True).agg(pl.col("raw").str.strip_suffix("\r"))
    joined = ["\r".join(p) for p in pieces["raw"].to_list()]
    assert joined == path.read_bytes().decode().split("\n")[:-1]


@pytest.mark.parametrize(("newline", "color"), [("\n", False), ("\r\n", False), ("\n", True)])
def test_a_bar_read_in_pieces_gives_the_rows_of_one_block(tmp_path: Path, newline: str, color: bool) -> None:
    path = tmp_path / "train.log"
    _bar_log(path, 1500, newline, color)
    parsers = [p for p in default_registry().parsers() if p.name == "trainer"]
    whole = reader.read_text_events(str(path), parsers)
    pieces = reader.read_text_events(str(path), parsers, block_bytes=16384)
    steps = whole.events.filter(kind="step")
    assert steps["step"].to_list() == list(range(1, 1501))
    late = steps.select((pl.col("ts") - START.replace(tzinfo=None)).dt.total_seconds() - 2 * pl.col("step"))
    assert late.to_series().abs().max() == 0
    assert_frame_equal(pieces.events, whole.events)
    assert (pieces.lines, pieces.covered) == (whole.lines, whole.covered) == (2, 1)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet="ab\r\n", max_size=400), block=st.integers(min_value=4, max_value=48))
@example(text="aaa\raaa\r\na", block=4)  # a CRLF cut by a block boundary in a file of lone CRs: one break
def test_blocks_and_pieces_keep_every_repaint_of_every_line_under_its_number(
    tmp_path: Path, text: str, block: int
) -> None:
    path = tmp_path / "any.log"
    path.write_bytes(text.encode())
    chunks = blocks.Chunks(str(path), block_bytes=block)
    frames = list(chunks)
    got: dict[int, list[str]] = {}
    for frame in frames:
        for line, raw in frame.iter_rows():
            got.setdefault(line, []).extend(s for s in raw.split("\r") if s)
    head = text.encode()[:block]
    if b"\r" in head and b"\n" not in head:  # lines ending in a lone CR (blocks.py): each CR is a break
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    want = {k + 1: [s for s in line.split("\r") if s] for k, line in enumerate(text.split("\n"))}
    if text.endswith("\n") or not text:
        want.pop(len(want))  # nothing after the last newline
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}
    assert chunks.lines == len(want) or not text
    numbers = [line for frame in frames for line in frame["line"]]
    assert numbers == sorted(numbers)


def test_a_small_file_of_repaints_without_a_newline_is_read_as_lines(tmp_path: Path) -> None:
    # with no newline to tell them from lines ending in a lone CR, its repaints are numbered as lines
    path = tmp_path / "bar.log"
    path.write_bytes(b"  0%|  | 0/2 [00:00<?, ?it/s]\r 50%|# | 1/2 [00:01<00:01, 1.00s/it]")
    assert pl.concat(blocks.Chunks(str(path)))["line"].to_list() == [1, 2]
