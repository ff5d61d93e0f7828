"""What a line is, for the nccl parser: one tag per record head.

A tag decides the record's ``kind`` and ``severity`` (``TAGS``); rows without a tag start
no record. NCCL_DEBUG lines are tagged by level and message, PyTorch lines by their
stable fragments, one when-chain per family; ``what():`` lines repeat the line logged just
before and belong to the torch parser, so they are never tagged here.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.nccl import patterns as P

from toranalyze.parser_api import fill_where

# tag -> (kind, severity). A tag names what a head line is; rows without a tag start no record.
TAGS: dict[str, tuple[str, str]] = {
    "init": ("info", "info"),  # comm … - Init COMPLETE
    "comm": ("info", "info"),  # comm … nRanks N nNodes M localRanks L
    "abort": ("warning", "warning"),  # comm … - Abort COMPLETE
    "ib": ("error", "error"),  # NET/IB completion error
    "ib_other": ("error", "error"),  # other NET/IB, NET/OFI and verbs failures (also from UCX)
    "cuda": ("error", "error"),  # Cuda failure 'X'
    "sock_soft": ("warning", "warning"),  # peer closed / retrying: the cause is elsewhere
    "sock_fatal": ("error", "error"),  # refused, timed out, unreachable
    "warn_err": ("error", "error"),  # proxy retcode, duplicate GPU, /dev/shm
    "warn": ("warning", "warning"),  # any other NCCL WARN
    "wd_terminated": ("error", "critical"),  # watchdog thread terminated with exception
    "comm_aborted": ("error", "error"),  # NCCL communicator was aborted on rank N
    "async_exc": ("error", "error"),  # Collective WorkNCCL(…) raised the following async exception
    "wd_timeout": ("error", "error"),  # Watchdog caught collective operation timeout
    "wd_detected": ("error", "error"),  # failure / exception / timeout detected by watchdog at work N
    "wd_heartbeat": ("error", "critical"),  # Heartbeat monitor timed out!
    "wd_stuck": ("error", "critical"),  # watchdog got stuck for N seconds
    "process_down": ("error", "critical"),  # taking the entire process down
    "ops_failed": ("warning", "warning"),  # Some NCCL operations have failed or timed out
    "nccl_error": ("error", "error"),  # NCCL error in: …, unhandled system error, NCCL version X
    "nccl_setup": ("error", "error"),  # [2] is setting up NCCL communicator … got error
    "desync": ("error", "error"),  # desync report verdict naming the lagging ranks
    "fr_stack": ("info", "info"),  # Stack trace of the failed collective:
    "fr_dump": ("info", "info"),  # flight-recorder dump signal / file
    "pg_error": ("warning", "warning"),  # other error-level ProcessGroupNCCL line
    "detail": ("error", "error"),  # ncclXxxError: … line with no head above it
}


def _families() -> list[tuple[pl.Expr, list[tuple[pl.Expr, str]]]]:
    """(which rows, their rules in order): NCCL INFO lines, NCCL WARN/ERROR lines and PyTorch text.
    The families exclude each other, so a row's first matching rule is one of its own family's."""
    t = pl.col("text")
    msg = pl.col("_msg")
    lvl = pl.col("_level")
    # PyTorch text; `what():` lines belong to the torch parser (they repeat the line logged just before).
    pt = lvl.is_null() & ~t.str.contains(r"^\s*what\(\):")
    glog_e = pl.col("_glvl") == "E"
    pg_src = pl.col("_gsrc").str.contains(r"ProcessGroupNCCL|NCCLUtils|TraceUtils|FlightRecorder")
    info = [
        # 2.4+ `… - Init COMPLETE`; 2.3 `comm 0x… rank R nranks N - COMPLETE`
        (msg.str.contains(r"Init COMPLETE|^comm 0x[0-9a-fA-F]+ rank [0-9]+ nranks [0-9]+\b.* - COMPLETE\s*$"), "init"),
        (msg.str.contains(r"^comm 0x[0-9a-fA-F]+ rank [0-9]+ nRanks [0-9]+ nNodes [0-9]+"), "comm"),
        (msg.str.contains("Abort COMPLETE", literal=True), "abort"),
    ]
    warn = [
        (msg.str.contains("Got completion from peer", literal=True), "ib"),
        (msg.str.contains(r"NET/IB|NET/OFI|ibv_\w+|Got CQE with error|async fatal event"), "ib_other"),
        (msg.str.contains("Cuda failure", literal=True), "cuda"),
        (msg.str.contains(P.SOCKET_SOFT), "sock_soft"),
        (msg.str.contains(P.SOCKET_FATAL), "sock_fatal"),
        (msg.str.contains(P.WARN_ERROR), "warn_err"),
        (pl.lit(True), "warn"),
    ]
    torch = [
        (t.str.contains("watchdog thread terminated with exception", literal=True), "wd_terminated"),
        (t.str.contains("NCCL communicator was aborted", literal=True), "comm_aborted"),
        (t.str.contains("raised the following async exception", literal=True), "async_exc"),
        (t.str.contains("collective operation timeout", literal=True), "wd_timeout"),
        (t.str.contains(r"detected by watchdog|Timeout at NCCL work"), "wd_detected"),
        (t.str.contains("Heartbeat monitor timed out", literal=True), "wd_heartbeat"),
        (t.str.contains("watchdog got stuck for", literal=True), "wd_stuck"),
        (t.str.contains("taking the entire process down", literal=True), "process_down"),
        (t.str.contains("Some NCCL operations have failed or timed out", literal=True), "ops_failed"),
        (t.str.contains(P.NCCL_ERROR_IN), "nccl_error"),
        (t.str.contains("is setting up NCCL communicator", literal=True), "nccl_setup"),
        (t.str.contains(f"{P.DESYNC_LAG}|{P.DESYNC_MISSING}"), "desync"),
        (t.str.contains("Stack trace of the failed collective:", literal=True), "fr_stack"),
        (
            t.str.contains(
                r"dumping nccl trace to|Received a dump signal|flight recorder dump signal|Finished writing NCCLPG"
            ),
            "fr_dump",
        ),
        (glog_e & pg_src & ~t.str.contains(P.PG_CHATTER), "pg_error"),
        (t.str.contains(P.RDMA_RETRY), "ib_other"),
    ]
    return [(lvl == "INFO", info), (lvl.is_in(["WARN", "ERROR"]), warn), (pt, torch)]


def _first(rules: list[tuple[pl.Expr, str]]) -> pl.Expr:
    expr: pl.Expr = pl.lit(None, pl.String)
    for cond, name in reversed(rules):
        expr = pl.when(cond).then(pl.lit(name)).otherwise(expr)
    return expr


def tags(lines: pl.DataFrame) -> pl.Series:
    """Tag of every line (null for lines that start no record); needs _level/_msg/_glvl/_gsrc.
    Each family's rules are tried on its own rows only (a when-chain computes every branch on
    every row it is given)."""
    out = pl.Series("tag", [], pl.String).extend_constant(None, lines.height)
    for rows, rules in _families():
        out = fill_where(out, lines, lines.select(rows.fill_null(False)).to_series(), _first(rules))
    return out
