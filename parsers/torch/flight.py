"""PyTorch's NCCL Flight Recorder dumps: the last collectives each rank enqueued and finished.

A dump (``TORCH_NCCL_DUMP_ON_TIMEOUT``, one file per rank, e.g. ``nccl_trace_rank_3``) is a pickle
of plain containers: ``{"version": ..., "entries": [{"collective_seq_id", "profiling_name",
"state", "time_created_ns", ...}, ...], ...}``. A pickle can run code when loaded; the dump is
read by an unpickler that resolves no global name at all, so only dicts, lists, tuples, strings,
bytes, numbers, booleans and None can come out of it, and a file that names anything else is
refused.

Each dump gives one record: the rank's last enqueued collective and its last completed one, in
the words of the watchdog ('last enqueued NCCL work: N'), so that the ranks of a hang can be
compared: the ones whose last collective is behind the others' are the ones that stalled.
"""

from __future__ import annotations

import datetime as dt
import io
import pickle
import re
from pathlib import PurePath
from typing import Any

import polars as pl

from toranalyze.parser_api import NAIVE_US, conform_raw

MAX_BYTES = 256 * 1024 * 1024  # a dump holds a few thousand entries; anything far larger is not one
_RANK_IN_NAME = re.compile(r"(?:rank|trace)[_\-]?([0-9]+)$", re.IGNORECASE)


class _PlainUnpickler(pickle.Unpickler):
    """Loads plain containers and scalars only: every global (a class, a function) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a Flight Recorder dump holds only plain data")


def is_dump(head: bytes) -> bool:
    """A pickle (protocol 2 to 5) whose first bytes name Flight Recorder keys."""
    return len(head) > 2 and head[0] == 0x80 and 2 <= head[1] <= 5 and (
        b"entries" in head or b"collective_seq_id" in head or b"pg_config" in head)


def load(path: str) -> dict[str, Any]:
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES // 2**20} MiB: not a Flight Recorder dump")
    obj = _PlainUnpickler(io.BytesIO(data)).load()
    if not isinstance(obj, dict) or not isinstance(obj.get("entries"), list):
        raise ValueError("no 'entries' list: not a Flight Recorder dump")
    return obj


def _rank(dump: dict[str, Any], path: str) -> int | None:
    for key in ("rank", "global_rank"):
        if isinstance(dump.get(key), int):
            return int(dump[key])
    m = _RANK_IN_NAME.search(PurePath(path).stem)
    return int(m.group(1)) if m else None


def _when(ns: Any) -> dt.datetime | None:
    if not isinstance(ns, int) or ns <= 0:
        return None
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).replace(tzinfo=None)


def dump_rows(path: str) -> pl.LazyFrame:
    """One warning per dump: the rank's last enqueued and last completed collective."""
    dump = load(path)
    entries = [e for e in dump["entries"] if isinstance(e, dict) and isinstance(e.get("collective_seq_id"), int)
               and not e.get("is_p2p")]
    rank = _rank(dump, path)
    if not entries:
        return conform_raw(pl.LazyFrame({"line": [1], "kind": ["info"], "severity": ["info"],
                                         "message": ["Flight Recorder dump with no collective"], "rank": [rank]}))
    last = max(entries, key=lambda e: e["collective_seq_id"])
    done = [e["collective_seq_id"] for e in entries if e.get("state") == "completed"]
    who = f"rank {rank}" if rank is not None else "a rank"
    message = (f"Flight Recorder dump of {who}: last enqueued NCCL work: {last['collective_seq_id']} "
               f"({last.get('profiling_name') or '?'}, {last.get('state') or '?'}), last completed NCCL work: "
               f"{max(done) if done else 'none'}")
    frame = pl.LazyFrame({"line": [1], "kind": ["warning"], "severity": ["warning"], "message": [message],
                          "rank": [rank], "ts": [_when(last.get("time_created_ns"))], "ts_offset_s": [0]},
                         schema_overrides={"ts": NAIVE_US, "rank": pl.Int32, "ts_offset_s": pl.Int32})
    return conform_raw(frame)
