"""Gluing multi-line records of the nccl parser.

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
from toranalyze_parsers.nccl import patterns as P
from toranalyze_parsers.nccl.tags import tags

from toranalyze.parser_api import contains_any, fill_where

MAX_WRAP = 3  # continuation lines joined onto one hard-wrapped record

_TIMEOUT_TAGS = ["wd_timeout", "wd_terminated", "comm_aborted"]
STREAM_GAP = 16  # lines other writers may interleave between two lines of one record


def _stream() -> pl.Expr:
    """One key per writer named by a prefix (node, rank, local rank); null when the line names none."""
    cols = ["p_node", "p_rank", "p_local"]
    key = pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in cols], separator="|")
    return pl.when(pl.any_horizontal([pl.col(c).is_not_null() for c in cols])).then(key)


def prefilter(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Keep candidate lines, the lines that may continue them, and flight-recorder frames."""
    text = pl.col("text")
    frame = lines.collect()
    # NCCL INFO/TRACE chatter is most of a big log; only its comm and COMPLETE lines are records,
    # and a line with a full NCCL head starts a record of its own, so it never continues one.
    chatter = text.str.contains(P.CHATTER) & ~contains_any(text, P.INFO_RECORDS)
    talk = frame.select(~chatter).to_series()
    # The case-blind anchor search (the slowest test) runs on the other lines only.
    none = pl.Series("_cand", [], pl.Boolean).extend_constant(False, frame.height)
    cand = fill_where(none, frame, talk, contains_any(text, P.ANCHORS, ignore_case=True))
    near = pl.col("_cand")
    for k in range(1, MAX_WRAP + 1):
        near = near | pl.col("_cand").shift(k, fill_value=False)
    # the text after a bare `Last error:` may come a few lines later when ranks interleave
    bare = text.str.contains(P.BARE_LAST_ERROR).cast(pl.Int8, strict=False)
    after_bare = bare.rolling_max(STREAM_GAP, min_samples=1).shift(1, fill_value=0) > 0
    hash_frame = text.str.contains(r"^\s*#")  # as strip_chars_start().starts_with('#'): \s is Unicode White_Space
    return frame.lazy().with_columns(cand).filter(near | after_bare | hash_frame).drop("_cand")


def _glue(left: pl.Expr, right: pl.Expr) -> pl.Expr:
    """Join a hard-wrapped line: no space inside a split number, one space otherwise."""
    split_number = left.str.contains(r"[0-9]$") & right.str.contains(r"^[0-9]")
    has_space = left.str.contains(r"\s$") | right.str.contains(r"^\s")
    sep = pl.when(split_number | has_space).then(pl.lit("")).otherwise(pl.lit(" "))
    return pl.concat_str([left, sep, right])


def _complete(text: pl.Expr) -> pl.Expr:
    ib = text.str.contains(P.IB_DONE)
    timeout = text.str.contains("before timing out", literal=True) | text.str.contains(r"\)\s*$")
    return pl.when(pl.col("tag") == "ib").then(ib).otherwise(timeout)


# The head fields of a line (``line_fields``) a record keeps from its first line.
HEAD_FIELDS = ("_level", "_msg", "_host", "_dev", "_mmdd", "_hms")


def line_fields(col: str) -> list[pl.Expr]:
    """The NCCL_DEBUG head (level, message, host, device) and glog head (level, source file,
    month-day, clock) of each value of ``col``."""
    nccl = pl.col(col).str.extract_groups(P.NCCL_LINE).struct.field
    glog = pl.col(col).str.extract_groups(P.GLOG_HEAD).struct.field
    return [
        nccl("level").alias("_level"),
        nccl("msg").alias("_msg"),
        # a host redacted to a placeholder ('<cluster_name>') names no node
        pl.when(nccl("host").str.starts_with("<")).then(None).otherwise(nccl("host")).alias("_host"),
        nccl("dev").alias("_dev"),
        glog("lvl").alias("_glvl"),
        glog("src").alias("_gsrc"),
        glog("mmdd").alias("_mmdd"),
        glog("hms").alias("_hms"),
    ]


def _prev_s(expr: pl.Expr) -> pl.Expr:
    """``expr`` at the previous line of the same writer (``_ps``)."""
    return expr.gather(pl.col("_ps"))


def _tagged(lines: pl.LazyFrame) -> pl.LazyFrame:
    """The head fields and tag of each line; materialised once because ``tags`` reads the frame."""
    heads = lines.with_columns(line_fields("text")).collect()
    return heads.with_columns(tags(heads)).lazy()


def _writer_links(lf: pl.LazyFrame) -> pl.LazyFrame:
    """`_ps`: row index of the previous line of the same writer (one window, then cheap gathers)."""
    lf = lf.with_row_index("_i").with_columns(_stream().alias("_stream"))
    return lf.with_columns(
        pl.when(pl.col("_stream").is_not_null()).then(pl.col("_i").shift(1).over("_stream")).alias("_ps")
    )


def _line_kinds(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Whether each line starts a record, is a detail line or a stack frame, and whether the
    previous line of its writer (``s_ok``) or the line just above (``p_ok``) may be continued."""
    text, line = pl.col("text"), pl.col("line")
    s_ok = (line - _prev_s(line)).is_between(1, STREAM_GAP)
    # the line above continues only a record of the same writer (or one of them names no writer)
    stream = pl.col("_stream")
    same_writer = stream.is_null() | stream.shift(1).is_null() | (stream == stream.shift(1))
    p_ok = ((line - line.shift(1)) == 1) & same_writer
    starts = text.str.contains(P.RECORD_START) | pl.col("tag").is_not_null()
    bare = text.str.contains(P.BARE_LAST_ERROR)
    after_bare_last = ~starts & ((s_ok & _prev_s(bare)) | (p_ok & bare.shift(1)))
    return lf.with_columns(
        (pl.col("_level").is_null() & (text.str.contains(P.DETAIL_LINE) | after_bare_last))
        .fill_null(False)
        .alias("det"),
        text.str.contains(P.FR_FRAME).alias("frame"),
        starts.alias("starts"),
        s_ok.fill_null(False).alias("s_ok"),
        p_ok.fill_null(False).alias("p_ok"),
    )


def _hard_wraps(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Join up to MAX_WRAP following lines while the record is visibly unfinished: ``joined``,
    ``wrap_n`` (lines joined) and ``consumed`` (the line was joined onto one above)."""
    text, line = pl.col("text"), pl.col("line")
    wrappable = (pl.col("tag") == "ib") | (
        pl.col("tag").is_in(_TIMEOUT_TAGS) & text.str.contains("collective operation timeout", literal=True)
    )
    lf = lf.with_columns(pl.col("text").alias("joined"), pl.lit(0, pl.Int32).alias("wrap_n"))
    need = wrappable
    for k in range(1, MAX_WRAP + 1):
        nxt_ok = (line.shift(-k) == line + k) & ~pl.col("starts").shift(-k)
        lf = lf.with_columns((need & ~_complete(pl.col("joined")) & nxt_ok).fill_null(False).alias("_j"))
        lf = lf.with_columns(
            pl.when(pl.col("_j"))
            .then(_glue(pl.col("joined"), text.shift(-k)))
            .otherwise(pl.col("joined"))
            .alias("joined"),
            pl.when(pl.col("_j")).then(pl.lit(k, pl.Int32)).otherwise(pl.col("wrap_n")).alias("wrap_n"),
        )
        need = pl.col("_j")
    consumed = pl.lit(False)
    for k in range(1, MAX_WRAP + 1):
        consumed = consumed | (pl.col("wrap_n").shift(k, fill_value=0) >= k)
    return lf.with_columns(consumed.alias("consumed"))


def _chain_links(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Error chains and flight-recorder frames continue the record of the previous line of the same
    writer (``via_s``: ranks interleave), else of the line physically above (``via_p``)."""
    det, frame = pl.col("det"), pl.col("frame")
    lf = lf.with_columns(
        (pl.col("tag").is_not_null() | det | pl.col("consumed")).alias("_ch_det"),
        ((pl.col("tag") == "fr_stack").fill_null(False) | frame).alias("_ch_fr"),
    )
    via_s = pl.col("s_ok") & ((det & _prev_s(pl.col("_ch_det"))) | (frame & _prev_s(pl.col("_ch_fr")))).fill_null(False)
    via_p = pl.col("p_ok") & ((det & pl.col("_ch_det").shift(1)) | (frame & pl.col("_ch_fr").shift(1))).fill_null(False)
    return lf.with_columns(
        (~pl.col("consumed") & via_s).alias("via_s"),
        (~pl.col("consumed") & ~via_s & via_p).alias("via_p"),
    )


def _record_roots(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``_root``: the row index of each line's record head; a detail line with nothing to continue
    heads its own record (tagged ``detail`` when it has no tag)."""
    orphan = pl.col("det") & ~pl.col("consumed") & ~pl.col("via_s") & ~pl.col("via_p")
    idx = pl.col("_i")
    parent = (
        pl.when(pl.col("consumed") | pl.col("via_p"))
        .then(idx - 1)
        .when(pl.col("via_s"))
        .then(_prev_s(idx))
        .otherwise(idx)
    )
    lf = lf.with_columns(
        pl.when(orphan).then(pl.coalesce(pl.col("tag"), pl.lit("detail"))).otherwise(pl.col("tag")).alias("tag"),
        parent.cast(pl.UInt32, strict=False).alias("_root"),
    )
    # Pointer jumping: every line ends up pointing at its record's head (chains of up to 2**6 lines).
    for _ in range(6):
        lf = lf.with_columns(pl.col("_root").gather(pl.col("_root")))
    return lf


def _records(lf: pl.LazyFrame) -> pl.LazyFrame:
    """One row per tagged record head, in line order, with its continuation ``part``s joined."""
    is_part = pl.col("via_s") | pl.col("via_p")
    part = pl.when(is_part).then(pl.col("text").str.strip_chars()).otherwise(None)
    rows = lf.with_columns(part.alias("part")).collect()
    # Most records are one line: only the lines of records that joined others are grouped.
    linked = rows.select(pl.col("consumed") | is_part).to_series()
    joined = rows.select(pl.col("_root").is_in(rows.filter(linked)["_root"].implode())).to_series()
    heads = pl.concat([_one_line(rows.filter(~joined)), _grouped(rows.filter(joined))])
    return heads.lazy().sort("_root").filter(pl.col("tag").is_not_null()).drop("_root")


def tag_and_group(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Prefiltered lines -> one row per record head with its joined text and continuation parts,
    and the ``HEAD_FIELDS`` and ``wrap_n`` (continuation lines joined onto it) of its first line."""
    lf = _line_kinds(_writer_links(_tagged(lines)))
    return _records(_record_roots(_chain_links(_hard_wraps(lf))))


def _kept() -> list[pl.Expr]:
    return [pl.col("p_ts"), pl.col("p_rank"), *[pl.col(c) for c in (*HEAD_FIELDS, "wrap_n")]]


def _one_line(rows: pl.DataFrame) -> pl.DataFrame:
    """Records of one line each, as ``_grouped`` gives them."""
    return rows.select(
        "_root",
        "tag",
        "line",
        pl.col("line").alias("last_line"),
        pl.col("joined").alias("head"),
        pl.lit("", pl.String).alias("conts"),
        *_kept(),
    )


def _grouped(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per record: its head line's columns, its last line and its continuation parts."""
    return rows.group_by("_root", maintain_order=True).agg(
        pl.col("tag").first(),
        pl.col("line").first(),
        pl.col("line").max().alias("last_line"),
        pl.col("joined").first().alias("head"),
        pl.col("part").str.join(" | ").alias("conts"),
        *[e.first() for e in _kept()],
    )
