"""Ingest as a whole: parallel reading equals sequential reading; file-level fills."""

from __future__ import annotations

from pathlib import Path

from toranalyze.cli.common import ingest_to
from toranalyze.ingest.pipeline import IngestOptions, Workers, ingest, node_from_path
from toranalyze.schema import EVENT_SCHEMA

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
    seq = ingest([str(root)], IngestOptions())
    par = ingest([str(root)], IngestOptions(), Workers(2))
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


def _spiky_trainer_log(path: Path) -> None:
    losses = [2.2] * 120 + [6.0] + [2.2] * 10
    path.write_text("".join(
        f"[2024-03-01 09:{i // 60:02d}:{i % 60:02d}] iteration {i + 1}/ 1000 | elapsed time per iteration (ms): "
        f"1000.0 | lm loss: {loss:.4E} |\n" for i, loss in enumerate(losses)
    ))


def test_streamed_table_equals_the_table_in_memory(tmp_path: Path) -> None:
    """A spool of part files and one streaming pass (``ingest_to``, what ``toranalyze ingest`` does); the table must not change (open years, job
    fills, classes, derived spikes, row order), with one or two workers."""
    root = _tree(tmp_path / "in")
    _spiky_trainer_log(root / "train.log")
    (root / "bad.log.gz").write_bytes(b"not gzip at all")
    memory = ingest([str(root)], IngestOptions())
    assert memory.events.filter(memory.events["rule"] == "derived-loss-spike").height == 1
    for jobs in (1, 2):
        sink = tmp_path / f"out{jobs}" / "events.parquet"
        streamed = ingest_to(sink, [str(root)], IngestOptions(), Workers(jobs))
        assert streamed.events_path == sink and sink.exists()
        assert streamed.n_events == memory.events.height
        assert streamed.events.equals(memory.events)
        assert [f.as_dict() for f in streamed.files] == [f.as_dict() for f in memory.files]
        assert not [p for p in sink.parent.iterdir() if p.name != "events.parquet"], "spool files left behind"


def test_streamed_table_of_nothing_readable_is_empty_with_the_schema(tmp_path: Path) -> None:
    (tmp_path / "empty.log").write_text("")
    sink = tmp_path / "out" / "events.parquet"
    result = ingest_to(sink, [str(tmp_path / "empty.log")], IngestOptions(), Workers())
    assert result.n_events == 0 and result.events.schema == EVENT_SCHEMA


def test_streamed_table_of_many_blocks_equals_the_table_in_memory(tmp_path: Path, monkeypatch) -> None:
    """A text file streamed block by block (its time rules settled over the whole file between
    two passes) gives the rows the in-memory path gives for the same blocks."""
    import toranalyze.ingest.blocks as blocks

    root = _tree(tmp_path / "in")
    _spiky_trainer_log(root / "train.log")
    with (root / "slurm-77.out").open("a") as out:  # lines without a clock between dated ones
        out.write("".join(f"step {i} of the job\n" for i in range(300)))
        out.write("slurmstepd: error: *** JOB 77 ON gpu-3 CANCELLED AT 2024-03-01T11:00:00 DUE TO TIME LIMIT ***\n")
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 4096)  # dozens of blocks per file
    memory = ingest([str(root)], IngestOptions())
    streamed = ingest_to(tmp_path / "out" / "events.parquet", [str(root)], IngestOptions(), Workers())
    assert streamed.events.equals(memory.events)
    assert [f.as_dict() for f in streamed.files] == [f.as_dict() for f in memory.files]
    assert not [p for p in (tmp_path / "out").iterdir() if p.name != "events.parquet"]


def test_a_shell_prompt_names_the_host_of_the_output_below_it_in_its_file(tmp_path: Path) -> None:
    # Command output pasted into a ticket under its prompt: the prompt is the only place the host
    # is named. It holds until the next prompt, never above it, and never in the next file.
    xid = "[Wed Jul 31 23:14:{:02d} 2024] NVRM: Xid (PCI:0000:00:08): 79, pid=1, name=python, GPU has fallen off the bus."
    (tmp_path / "a.log").write_text("\n".join([
        xid.format(1),
        "root@node4:~# dmesg -T | grep NVRM",
        xid.format(2),
        "(venv) me@gpu-07.cluster:~/run$ dmesg -T",
        xid.format(3),
        "zeyer@cn-234 ~ % dmesg -T",  # zsh's default prompt (https://github.com/rwth-i6/returnn/issues/1486)
        xid.format(4),
        "write to me@example.org / 50 % of the time",  # prose: no prompt
        xid.format(5),
    ]) + "\n")
    (tmp_path / "b.log").write_text(xid.format(6) + "\n")
    ev = ingest([str(tmp_path)], IngestOptions()).events.filter(failure_class="gpu_hardware")
    nodes = dict(zip(ev["file"].str.split("/").list.last() + ":" + ev["line"].cast(str), ev["node"], strict=True))
    assert nodes == {"a.log:1": None, "a.log:3": "node4", "a.log:5": "gpu-07.cluster", "a.log:7": "cn-234",
                     "a.log:9": "cn-234", "b.log:1": None}
