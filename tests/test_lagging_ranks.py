"""A hang or collective timeout names the rank that stalled: the one whose watchdog reports an
earlier collective than the others waited in (reconstruct/incidents.py ``_lagging_ranks``)."""

from __future__ import annotations

import polars as pl

from toranalyze.reconstruct import incidents as inc

KEY = {"job": [0, 0, 0, 0], "attempt_idx": [0, 0, 0, 0]}


def _incident(root: str) -> pl.DataFrame:
    return pl.DataFrame({"job": [0], "attempt_idx": [0], "root_cause": [root], "ranks": [[]], "nodes": [[]],
                         "reason": ["a hang detector fired"]},
                        schema_overrides={"ranks": pl.List(pl.Int32), "nodes": pl.List(pl.String)})


def _onset(seqs: list[int | None]) -> pl.DataFrame:
    return pl.DataFrame({**KEY, "rank": [0, 1, 2, 3], "node": ["n1", "n1", "n2", "n2"], "collective_seq": seqs},
                        schema_overrides={"collective_seq": pl.Int64, "rank": pl.Int32})


def test_the_rank_behind_the_others_is_named_with_its_node() -> None:
    out = inc._lagging_ranks(_incident("hang"), _onset([80078, 80078, 80077, 80078]))
    assert out["ranks"][0].to_list() == [2]
    assert out["nodes"][0].to_list() == ["n2"]
    assert "rank 2 on n2 stalled" in out["reason"][0] and "#80077" in out["reason"][0]


def test_no_rank_named_when_all_wait_in_the_same_collective() -> None:
    out = inc._lagging_ranks(_incident("collective_timeout"), _onset([216, 216, 216, None]))
    assert out["ranks"][0].to_list() == [] and out["reason"][0] == "a hang detector fired"


def test_other_root_causes_keep_their_culprits() -> None:
    out = inc._lagging_ranks(_incident("software"), _onset([5, 6, 6, 6]))
    assert out["ranks"][0].to_list() == [] and out["reason"][0] == "a hang detector fired"


def test_the_sequence_number_is_read_from_watchdog_texts() -> None:
    ev = pl.DataFrame({
        "message": ["[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078, OpType=ALLREDUCE)",
                    "[PG 0 Rank 5] ... last enqueued NCCL work: 220, last completed NCCL work: 215",
                    "WorkNCCL(SeqNum=7) but a network record"],
        "kind": ["error"] * 3, "job_id": [None] * 3,
        "failure_class": ["collective_timeout", "collective_timeout", "network"],
    })
    assert inc.with_flags(ev)["collective_seq"].to_list() == [80078, 220, None]
