"""Inputs the mutation fuzzer (tests/fuzz) found a fault with, each kept as a regression test."""

from __future__ import annotations

from pathlib import Path

import pytest

from toranalyze.ingest.pipeline import IngestOptions, ingest
from toranalyze.ingest.registry import default_registry


@pytest.mark.timeout(20)
def test_many_blank_lines_before_no_yaml_key_do_not_hang_the_kubernetes_sniff(tmp_path: Path) -> None:
    head = "\n" * 40 + "  \n" * 40 + "not yaml\n"
    assert default_registry().get("kubernetes").sniff(head) is False
    path = tmp_path / "blank.log"
    path.write_text(head * 3 + "slurmstepd: error: *** JOB 42 ON node7 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***\n")
    result = ingest([str(path)], IngestOptions())
    assert result.files[0].error is None and result.events.height
