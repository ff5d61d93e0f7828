"""A compressed file that decompresses past its bound (a decompression bomb) is cut there: the
lines before the cut are kept, its report says why it ended, and memory stays a block's."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import zstandard

from toranalyze.ingest import streams
from toranalyze.ingest.pipeline import ingest

XID = "Mar  1 10:00:00 gpu-001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
FILLER = "2024-03-01T10:00:01Z gpu-001 trainer: heartbeat ok\n"


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_a_decompression_bomb_is_cut_at_its_bound(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  suffix: str) -> None:
    monkeypatch.setattr(streams, "INFLATE_FLOOR", 4 * 1024 * 1024)
    text = (XID + FILLER * 400_000).encode()  # 20 MB of one repeated line: a few hundred KB compressed
    packed = gzip.compress(text) if suffix == ".gz" else zstandard.ZstdCompressor().compress(text)
    bomb = tmp_path / f"kern.log{suffix}"
    bomb.write_bytes(packed)
    bound = max(streams.INFLATE_FLOOR, streams.INFLATE_RATIO * len(packed))
    assert bound < len(text)
    (report,) = ingest([str(bomb)]).files
    assert report.error is None
    assert any("decompression bomb" in w for w in report.warnings), report.warnings
    assert 0 < report.lines <= bound // len(FILLER) + 1
    assert report.events >= 1  # the Xid before the cut


def test_a_compressed_document_past_its_bound_is_skipped_with_the_reason(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    monkeypatch.setattr(streams, "INFLATE_FLOOR", 1024)
    doc = tmp_path / "events.json.gz"
    doc.write_bytes(gzip.compress(b'{"kind": "EventList", "items": [' + b" " * 1_000_000 + b"]}"))
    with pytest.raises(streams.InputError, match="decompression bomb"):
        streams.read_text(str(doc))
