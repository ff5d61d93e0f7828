"""Ingest as a whole: parallel reading equals sequential reading; file-level fills."""

from __future__ import annotations

from pathlib import Path

from toranalyze.ingest.pipeline import IngestOptions, ingest, node_from_path

LINES = {
    "slurm-77.out": "slurmstepd: error: *** JOB 77 ON gpu-3 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***\n",
    "nodes/gpu-3/kern.log": "Mar  1 09:59:00 gpu-3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n",
    "other.log": "nothing here\n",
}


def _tree(root: Path) -> Path:
    for rel, text in LINES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_parallel_equals_sequential(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    seq = ingest([str(root)], IngestOptions(), jobs=1)
    par = ingest([str(root)], IngestOptions(), jobs=2)
    assert seq.events.equals(par.events)
    assert [f.as_dict() for f in seq.files] == [f.as_dict() for f in par.files]


def test_node_from_path_and_yearless_kernel_lines_join_the_run(tmp_path: Path) -> None:
    result = ingest([str(_tree(tmp_path))], IngestOptions())
    xid = result.events.filter(result.events["code"] == "79").row(0, named=True)
    assert xid["node"] == "gpu-3"
    assert xid["ts"].year == 2024  # the Slurm banner of the same run dates it, not the file's mtime
    assert xid["failure_class"] == "gpu_hardware"
    assert node_from_path("run/nodes/gpu-7/kern.log") == "gpu-7"
    assert node_from_path("run/kern.log") is None
