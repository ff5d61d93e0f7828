"""PyTorch NCCL Flight Recorder dumps (parsers/torch/flight.py): read with an unpickler that
resolves no global, one record per rank naming its last collective, and the stalled rank found."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import polars as pl

from toranalyze.ingest.pipeline import IngestOptions, ingest
from toranalyze.reconstruct import incidents as inc

T0 = 1717200000_000_000_000


def _dump(last: int, done: int) -> dict[str, Any]:
    """A dump as PyTorch writes it: plain dicts, lists, tuples, strings and numbers."""
    entries = [{"record_id": s, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": s,
                "p2p_seq_id": 0, "op_id": s, "profiling_name": "nccl:all_reduce", "time_created_ns": T0 + s * 10**9,
                "state": "completed" if s <= done else "started", "retired": s <= done, "timeout_ms": 600000,
                "is_p2p": False, "input_sizes": [[1024]], "frames": [{"name": "all_reduce", "filename": "x.py", "line": 3}]}
               for s in range(1, last + 1)]
    return {"version": "2.4", "pg_config": {"0": {"name": "0", "desc": "default_pg"}}, "pg_status": {},
            "entries": entries}


def _write(folder: Path, name: str, obj: object) -> None:
    (folder / name).write_bytes(pickle.dumps(obj, protocol=4))


def test_each_rank_dump_names_its_last_collective_and_the_stalled_rank_shows(tmp_path: Path) -> None:
    for rank in range(4):
        _write(tmp_path, f"nccl_trace_rank_{rank}", _dump(99 if rank == 2 else 100, 99))
    ev = ingest([str(tmp_path)], IngestOptions()).events.sort("rank")
    assert ev["rank"].to_list() == [0, 1, 2, 3]
    assert set(ev["failure_class"]) == {"collective_timeout"} and set(ev["kind"]) == {"warning"}
    assert "last enqueued NCCL work: 99 " in ev["message"][2]
    seqs = inc.with_flags(ev.select("message", "kind", "job_id", "failure_class"))["collective_seq"].to_list()
    assert seqs == [100, 100, 99, 100]  # rank 2 is behind: the one that stalled


class _Shell:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        import os

        return (os.system, ("touch SHOULD_NOT_EXIST",))


def test_a_pickle_naming_any_global_is_refused_and_runs_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "nccl_trace_rank_0", _dump(5, 5))
    _write(tmp_path, "nccl_trace_rank_1", {"entries": [], "pg_config": {}, "payload": _Shell()})
    result = ingest([str(tmp_path)], IngestOptions())
    assert not (tmp_path / "SHOULD_NOT_EXIST").exists()
    errors = {Path(f.path).name: f.error for f in result.files}
    assert errors["nccl_trace_rank_0"] is None
    assert "refused to load" in (errors["nccl_trace_rank_1"] or "")
    assert result.events.filter(pl.col("rank") == 0).height == 1


def test_other_binary_files_are_still_skipped(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"\x00\x01\x02garbage" * 100)
    result = ingest([str(tmp_path)], IngestOptions())
    assert result.files[0].error and "binary" in result.files[0].error
