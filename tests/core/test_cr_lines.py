"""Lines ending in a lone carriage return (old Mac files, some collectors) are lines: the same
events, numbered alike, as the file with newlines, on every run."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from toranalyze.ingest import blocks
from toranalyze.ingest.pipeline import IngestOptions, ingest

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = ["kernel/fabricmanager_nvswitch_fatal.log", "kernel/journal_short_iso_edac_mce_ghes_aer.log",
        "kernel/talos_nvswitch_sxid_nvlink.log", "trainer/real/bloom176b_lm_loss_spike_31214.log"]


def _events(path: Path) -> pl.DataFrame:
    result = ingest([str(path)], IngestOptions(year=2024))
    assert [f.error for f in result.files] == [None]
    return result.events.drop("file")


@pytest.mark.parametrize("name", LOGS)
def test_cr_only_lines_give_the_events_of_newline_lines_on_every_run(tmp_path: Path, name: str) -> None:
    text = (DATA / name).read_bytes().replace(b"\r\n", b"\n")
    lf, cr, crlf = tmp_path / "lf.log", tmp_path / "cr.log", tmp_path / "crlf.log"
    lf.write_bytes(text)
    cr.write_bytes(text.replace(b"\n", b"\r"))
    crlf.write_bytes(text.replace(b"\n", b"\r\n"))
    expected = _events(lf)
    assert expected.height > 1
    for _ in range(4):
        assert _events(cr).equals(expected)
    assert _events(crlf).equals(expected)


def test_a_cr_only_file_is_read_line_by_line_across_blocks(tmp_path: Path) -> None:
    path = tmp_path / "mac.log"
    path.write_bytes(b"".join(b"line %d\r" % i for i in range(1, 200)))
    frames = list(blocks.Chunks(str(path), block_bytes=64))
    lines = pl.concat(frames)
    assert lines["line"].to_list() == list(range(1, 200))
    assert lines["raw"].to_list() == [f"line {i}" for i in range(1, 200)]
