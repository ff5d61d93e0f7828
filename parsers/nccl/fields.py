"""Event columns of the nccl parser, computed on the (few) record heads.

``code`` holds the most specific number the record states: the IB work-completion
status for ``NET/IB`` completion errors (4, 5, 12 …), the proxy ``retcode``, the
CUDA error number of ``Cuda failure N 'x'`` when printed, and otherwise the
``ncclResult_t`` number (2 system, 3 internal, 5 invalid usage, 6 remote …) named
by a PyTorch NCCL error.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.nccl import patterns as P
from toranalyze_parsers.nccl.records import HEAD_FIELDS, line_fields
from toranalyze_parsers.nccl.tags import TAGS

from toranalyze.parser_api import ts_glog


def _nccl_result(message: pl.Expr) -> pl.Expr:
    """ncclResult_t number from an enum name or a ncclGetErrorString text in the message."""
    out: pl.Expr = message.str.extract(r"NCCL Error ([0-9]+): ", 1)
    for name, text, number in reversed(P.NCCL_RESULTS):
        said = message.str.contains(name, literal=True) | message.str.contains(
            rf"(?:NCCL error in: \S+, |NCCL error: ){text}"
        )
        out = pl.when(said).then(pl.lit(str(number))).otherwise(out)
    return out


def _bus_id(raw: pl.Expr) -> pl.Expr:
    """NCCL busId `1b000` (domain|bus|device|function in hex) -> `0000:1b:00`."""
    hexid = raw.str.to_lowercase().str.zfill(9)
    return pl.concat_str([hexid.str.slice(0, 4), hexid.str.slice(4, 2), hexid.str.slice(6, 2)], separator=":")


def _joined_fields(heads: pl.DataFrame) -> pl.DataFrame:
    """Heads with the ``HEAD_FIELDS`` of their joined text: those of the first line, found
    again only where continuation lines were joined onto it (a message running on)."""
    wrapped = heads.select(pl.col("wrap_n") > 0).to_series()
    if not wrapped.any():
        return heads
    where = wrapped.arg_true()
    again = heads.filter(wrapped).select(line_fields("head"))
    return heads.with_columns(heads[c].scatter(where, again[c]) for c in HEAD_FIELDS)


_COMM_TAGS = ["init", "comm", "abort"]  # comm lines: the rank and world size are in the message


def _with_message(heads: pl.LazyFrame) -> pl.LazyFrame:
    """Heads (materialised once for ``_joined_fields``) with their ``message``: the NCCL message or
    the line's text without layout, then the continuation parts."""
    head = pl.col("head")
    is_nccl = pl.col("_level").is_not_null()
    # glog header and desync-report bullets ("\t - ") are layout, not text
    body = head.str.replace(P.GLOG_HEAD, "").str.strip_chars().str.replace(r"^-\s+", "")
    first = pl.when(is_nccl).then(pl.col("_msg").str.strip_chars()).otherwise(body)
    conts = pl.when(pl.col("conts") == "").then(None).otherwise(pl.col("conts"))
    return (
        _joined_fields(heads.collect())
        .lazy()
        .with_columns(
            pl.when(conts.is_null())
            .then(first)
            .otherwise(pl.concat_str([first, pl.lit(" | "), conts]))
            .alias("message"),
            is_nccl.alias("_is_nccl"),
            pl.col("_dev").cast(pl.Int32, strict=False),
        )
    )


def _rank(msg: pl.Expr, tag: pl.Expr) -> pl.Expr:
    """The rank a comm line or desync report names; for PyTorch lines the writer's rank prefix,
    else the process group's rank; none for other NCCL_DEBUG lines."""
    desync_rank = msg.str.extract_groups(P.DESYNC_RANKS)
    return (
        pl.when(tag.is_in(_COMM_TAGS))
        .then(msg.str.extract(r"\brank ([0-9]+)", 1))
        .when(tag == "desync")
        .then(pl.coalesce(desync_rank.struct.field("1"), desync_rank.struct.field("2")))
        .when(pl.col("_is_nccl"))
        .then(None)
        .otherwise(pl.coalesce(pl.col("p_rank").cast(pl.String), msg.str.extract(P.PG_RANK, 1)))
    )


def _code(msg: pl.Expr, tag: pl.Expr) -> pl.Expr:
    """The most specific number the record states (see the module docstring)."""
    return (
        pl.when(tag == "ib")
        .then(msg.str.extract(P.IB_STATUS, 1))
        .when(tag == "warn_err")
        .then(msg.str.extract(r"retcode ([0-9]+)", 1))
        .when(tag == "cuda")
        .then(msg.str.extract(r"Cuda failure ([0-9]+) '", 1))
        .when(pl.col("_is_nccl"))
        .then(None)
        .otherwise(_nccl_result(msg))
    )


def _duration_s(msg: pl.Expr, tag: pl.Expr) -> pl.Expr:
    """A collective's timeout, or how long a watchdog was stuck, in seconds."""
    timeout_s = msg.str.extract(r"Timeout\(ms\)=([0-9]+)", 1).cast(pl.Float64, strict=False) / 1000.0
    return (
        pl.when(msg.str.contains("collective operation timeout", literal=True))
        .then(timeout_s)
        .when(tag == "wd_stuck")
        .then(msg.str.extract(r"stuck for ([0-9]+) seconds", 1).cast(pl.Float64, strict=False))
    )


def _int_field(when: pl.Expr, msg: pl.Expr, pattern: str) -> pl.Expr:
    """The number ``pattern`` captures in ``msg`` where ``when`` holds, as Int32."""
    return pl.when(when).then(msg.str.extract(pattern, 1)).cast(pl.Int32, strict=False)


def events(heads: pl.LazyFrame) -> pl.LazyFrame:
    """Record heads (``tag_and_group``) -> RAW_SCHEMA columns (unconformed)."""
    tag, msg, is_nccl = pl.col("tag"), pl.col("message"), pl.col("_is_nccl")
    use_glog = pl.col("p_ts").is_null() & pl.col("_mmdd").is_not_null()
    kinds = {t: k for t, (k, _) in TAGS.items()}
    sevs = {t: s for t, (_, s) in TAGS.items()}
    cuda_dev = msg.str.extract(r"cudaDev ([0-9]+)", 1).cast(pl.Int32, strict=False)
    return _with_message(heads).select(
        pl.when(use_glog).then(ts_glog(pl.col("_mmdd").str.zfill(4), pl.col("_hms"))).alias("ts"),
        (~use_glog).alias("ts_year_known"),
        tag.replace_strict(kinds, return_dtype=pl.String).alias("kind"),
        tag.replace_strict(sevs, return_dtype=pl.String).alias("severity"),
        pl.when(is_nccl).then(pl.col("_host")).otherwise(msg.str.extract(P.UCX_HEAD, 1)).alias("node"),
        _rank(msg, tag).cast(pl.Int32, strict=False).alias("rank"),
        pl.when(is_nccl).then(pl.coalesce(cuda_dev, pl.col("_dev"))).alias("gpu"),
        pl.when(tag == "init").then(_bus_id(msg.str.extract(r"busId ([0-9a-fA-F]+)", 1))).alias("device"),
        _int_field(tag.is_in(_COMM_TAGS), msg, r"(?i)\bnranks ([0-9]+)").alias("n_gpus"),
        _int_field(tag == "comm", msg, r"nNodes ([0-9]+)").alias("n_nodes"),
        _duration_s(msg, tag).alias("duration_s"),
        _code(msg, tag).alias("code"),
        msg.alias("message"),
        pl.col("line"),
        pl.when(pl.col("last_line") > pl.col("line")).then(pl.col("last_line")).alias("line_end"),
    )
