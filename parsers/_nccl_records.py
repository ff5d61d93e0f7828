"""Tagging lines and gluing multi-line records of the nccl parser.

Three kinds of continuation are folded into a record, all with shifts and
window expressions over the (prefiltered) line column, never a Python loop:

* hard wraps: an IB completion WARN cut after ``len`` or a watchdog line cut
  inside ``NumelIn=18561`` / ``4592`` is joined with up to three following lines
  that do not start a record of their own;
* error chains: PyTorch prints ``NCCL error in: …`` then ``ncclSystemError: …``,
  ``Last error:`` and the NCCL WARN text on separate lines;
* flight-recorder stacks: ``Stack trace of the failed collective:`` then
  ``#N func from file:line`` frames.

Chains and stacks follow the previous line of the same writer (``[rankN]:`` /
``[defaultN]:`` / node prefixes) when the line has one, so interleaved ranks keep
their own records; each line points at its parent and pointer jumping finds the head.
"""

from __future__ import annotations

import polars as pl

from toranalyze_parsers import _nccl_patterns as P

MAX_WRAP = 3  # continuation lines joined onto one hard-wrapped record

# tag -> (kind, severity). A tag names what a head line is; rows without a tag start no record.
TAGS: dict[str, tuple[str, str]] = {
    "init": ("info", "info"),  # comm … - Init COMPLETE
    "comm": ("info", "info"),  # comm … nRanks N nNodes M localRanks L
    "abort": ("warning", "warning"),  # comm … - Abort COMPLETE
    "ib": ("error", "error"),  # NET/IB completion error
    "ib_other": ("error", "error"),  # other NET/IB / verbs failures
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

_TIMEOUT_TAGS = ["wd_timeout", "wd_terminated", "comm_aborted"]
STREAM_GAP = 16  # lines other writers may interleave between two lines of one record


def _stream() -> pl.Expr:
    """One key per writer named by a prefix (node, rank, local rank); null when the line names none."""
    cols = ["p_node", "p_rank", "p_local"]
    key = pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in cols], separator="|")
    return pl.when(pl.any_horizontal([pl.col(c).is_not_null() for c in cols])).then(key)


def prefilter(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Keep candidate lines plus the few lines after them (continuations) and flight-recorder frames."""
    text = pl.col("text")
    cand = text.str.contains_any(P.ANCHORS, ascii_case_insensitive=True)
    near = cand
    for k in range(1, MAX_WRAP + 1):
        near = near | cand.shift(k, fill_value=False)
    frame = text.str.strip_chars_start().str.starts_with("#")
    return lines.filter(near | frame)


def _tag() -> pl.Expr:
    t = pl.col("text")
    msg = pl.col("_msg")
    lvl = pl.col("_level")
    info = lvl == "INFO"
    warn = lvl.is_in(["WARN", "ERROR"])
    # PyTorch text; `what():` lines belong to the torch parser (they repeat the line logged just before).
    pt = lvl.is_null() & ~t.str.contains(r"^\s*what\(\):")
    glog_e = pl.col("_glvl") == "E"
    pg_src = pl.col("_gsrc").str.contains(r"ProcessGroupNCCL|NCCLUtils|TraceUtils|FlightRecorder")
    rules: list[tuple[pl.Expr, str]] = [
        (info & msg.str.contains("Init COMPLETE", literal=True), "init"),
        (info & msg.str.contains(r"^comm 0x[0-9a-fA-F]+ rank \d+ nRanks \d+ nNodes \d+"), "comm"),
        (info & msg.str.contains("Abort COMPLETE", literal=True), "abort"),
        (warn & msg.str.contains("Got completion from peer", literal=True), "ib"),
        (warn & msg.str.contains(r"NET/IB|ibv_\w+|Got CQE with error|async fatal event"), "ib_other"),
        (warn & msg.str.contains("Cuda failure", literal=True), "cuda"),
        (warn & msg.str.contains(P.SOCKET_SOFT), "sock_soft"),
        (warn & msg.str.contains(P.SOCKET_FATAL), "sock_fatal"),
        (warn & msg.str.contains(r"retcode \d+|Proxy Call to rank \d+ failed|Duplicate GPU detected|/dev/shm"), "warn_err"),
        (warn, "warn"),
        (pt & t.str.contains("watchdog thread terminated with exception", literal=True), "wd_terminated"),
        (pt & t.str.contains("NCCL communicator was aborted", literal=True), "comm_aborted"),
        (pt & t.str.contains("raised the following async exception", literal=True), "async_exc"),
        (pt & t.str.contains("collective operation timeout", literal=True), "wd_timeout"),
        (pt & t.str.contains(r"detected by watchdog|Timeout at NCCL work"), "wd_detected"),
        (pt & t.str.contains("Heartbeat monitor timed out", literal=True), "wd_heartbeat"),
        (pt & t.str.contains("watchdog got stuck for", literal=True), "wd_stuck"),
        (pt & t.str.contains("taking the entire process down", literal=True), "process_down"),
        (pt & t.str.contains("Some NCCL operations have failed or timed out", literal=True), "ops_failed"),
        (pt & t.str.contains(P.NCCL_ERROR_IN), "nccl_error"),
        (pt & t.str.contains("is setting up NCCL communicator", literal=True), "nccl_setup"),
        (pt & t.str.contains(f"{P.DESYNC_LAG}|{P.DESYNC_MISSING}"), "desync"),
        (pt & t.str.contains("Stack trace of the failed collective:", literal=True), "fr_stack"),
        (
            pt
            & t.str.contains(
                r"dumping nccl trace to|Received a dump signal|flight recorder dump signal|Finished writing NCCLPG"
            ),
            "fr_dump",
        ),
        (pt & glog_e & pg_src & ~t.str.contains(P.PG_CHATTER), "pg_error"),
    ]
    expr: pl.Expr = pl.lit(None, pl.String)
    for cond, name in reversed(rules):
        expr = pl.when(cond).then(pl.lit(name)).otherwise(expr)
    return expr


def _glue(left: pl.Expr, right: pl.Expr) -> pl.Expr:
    """Join a hard-wrapped line: no space inside a split number, one space otherwise."""
    split_number = left.str.contains(r"\d$") & right.str.contains(r"^\d")
    has_space = left.str.contains(r"\s$") | right.str.contains(r"^\s")
    sep = pl.when(split_number | has_space).then(pl.lit("")).otherwise(pl.lit(" "))
    return pl.concat_str([left, sep, right])


def _complete(text: pl.Expr) -> pl.Expr:
    ib = text.str.contains(P.IB_DONE)
    timeout = text.str.contains("before timing out", literal=True) | text.str.contains(r"\)\s*$")
    return pl.when(pl.col("tag") == "ib").then(ib).otherwise(timeout)


def tag_and_group(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Prefiltered lines -> one row per record head with its joined text and continuation parts."""
    text = pl.col("text")
    nccl = text.str.extract_groups(P.NCCL_LINE)
    glog = text.str.extract_groups(P.GLOG_HEAD)
    lf = lines.with_columns(
        nccl.struct.field("level").alias("_level"),
        nccl.struct.field("msg").alias("_msg"),
        glog.struct.field("lvl").alias("_glvl"),
        glog.struct.field("src").alias("_gsrc"),
    ).with_columns(_tag().alias("tag"))

    line = pl.col("line")
    # `_ps`: row index of the previous line of the same writer (one window, then cheap gathers)
    lf = lf.with_row_index("_i").with_columns(
        pl.when(_stream().is_not_null()).then(pl.col("_i").shift(1).over(_stream())).alias("_ps")
    )

    def prev_s(expr: pl.Expr) -> pl.Expr:
        return expr.gather(pl.col("_ps"))

    s_ok = (line - prev_s(line)).is_between(1, STREAM_GAP)
    p_ok = (line - line.shift(1)) == 1
    starts = text.str.contains(P.RECORD_START) | pl.col("tag").is_not_null()
    bare = text.str.contains(P.BARE_LAST_ERROR)
    after_bare_last = ~starts & ((s_ok & prev_s(bare)) | (p_ok & bare.shift(1)))
    lf = lf.with_columns(
        (pl.col("_level").is_null() & (text.str.contains(P.DETAIL_LINE) | after_bare_last)).fill_null(False).alias("det"),
        text.str.contains(P.FR_FRAME).alias("frame"),
        starts.alias("starts"),
        s_ok.fill_null(False).alias("s_ok"),
        p_ok.fill_null(False).alias("p_ok"),
    )

    # Hard wraps: join up to MAX_WRAP following lines while the record is visibly unfinished.
    wrappable = (pl.col("tag") == "ib") | (
        pl.col("tag").is_in(_TIMEOUT_TAGS) & text.str.contains("collective operation timeout", literal=True)
    )
    lf = lf.with_columns(pl.col("text").alias("joined"), pl.lit(0, pl.Int32).alias("wrap_n"))
    need = wrappable
    for k in range(1, MAX_WRAP + 1):
        nxt_ok = (line.shift(-k) == line + k) & ~pl.col("starts").shift(-k)
        lf = lf.with_columns((need & ~_complete(pl.col("joined")) & nxt_ok).fill_null(False).alias("_j"))
        lf = lf.with_columns(
            pl.when(pl.col("_j")).then(_glue(pl.col("joined"), text.shift(-k))).otherwise(pl.col("joined")).alias("joined"),
            pl.when(pl.col("_j")).then(pl.lit(k, pl.Int32)).otherwise(pl.col("wrap_n")).alias("wrap_n"),
        )
        need = pl.col("_j")
    consumed = pl.lit(False)
    for k in range(1, MAX_WRAP + 1):
        consumed = consumed | (pl.col("wrap_n").shift(k, fill_value=0) >= k)
    lf = lf.with_columns(consumed.alias("consumed"))

    # Error chains and flight-recorder frames continue the record of the previous line of the same
    # writer (ranks interleave), else of the line physically above; a detail line with nothing to
    # continue heads its own record.
    lf = lf.with_columns(
        (pl.col("tag").is_not_null() | pl.col("det") | pl.col("consumed")).alias("_ch_det"),
        ((pl.col("tag") == "fr_stack").fill_null(False) | pl.col("frame")).alias("_ch_fr"),
    )
    via_s = pl.col("s_ok") & (
        (pl.col("det") & prev_s(pl.col("_ch_det"))) | (pl.col("frame") & prev_s(pl.col("_ch_fr")))
    ).fill_null(False)
    via_p = pl.col("p_ok") & (
        (pl.col("det") & pl.col("_ch_det").shift(1)) | (pl.col("frame") & pl.col("_ch_fr").shift(1))
    ).fill_null(False)
    lf = lf.with_columns(
        (~pl.col("consumed") & via_s).alias("via_s"),
        (~pl.col("consumed") & ~via_s & via_p).alias("via_p"),
    )
    orphan = pl.col("det") & ~pl.col("consumed") & ~pl.col("via_s") & ~pl.col("via_p")
    idx = pl.col("_i")
    parent = (
        pl.when(pl.col("consumed") | pl.col("via_p"))
        .then(idx - 1)
        .when(pl.col("via_s"))
        .then(prev_s(idx))
        .otherwise(idx)
    )
    lf = lf.with_columns(
        pl.when(orphan).then(pl.lit("detail")).otherwise(pl.col("tag")).alias("tag"),
        parent.cast(pl.UInt32).alias("_root"),
    )
    # Pointer jumping: every line ends up pointing at its record's head (chains of up to 2**6 lines).
    for _ in range(6):
        lf = lf.with_columns(pl.col("_root").gather(pl.col("_root")))
    is_part = pl.col("via_s") | pl.col("via_p")
    part = pl.when(is_part).then(text.str.strip_chars()).otherwise(None)
    return (
        lf.with_columns(part.alias("part"))
        .group_by("_root", maintain_order=True)
        .agg(
            pl.col("tag").first(),
            pl.col("line").first(),
            pl.col("line").max().alias("last_line"),
            pl.col("joined").first().alias("head"),
            pl.col("part").str.join(" | ").alias("conts"),
            pl.col("p_ts").first(),
            pl.col("p_rank").first(),
        )
        .filter(pl.col("tag").is_not_null())
    )
