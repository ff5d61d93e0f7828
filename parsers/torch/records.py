"""Multi-line crash records: Python tracebacks, C++ aborts, faulthandler dumps, ChildFailedError.

Every prepared line gets a lexical type. A line *links* to the previous line of
its output stream (rank/node prefixes keep interleaved writers apart) when the
pair can occur inside one record: a frame after a traceback header, an exception
line after a frame, a ``what():`` after ``terminate called``. Runs of linked
lines are candidate records (cumulative sum of the breaks), and a run is kept
when it holds an anchor: a traceback header, an exception line, a C++ abort, a
fatal error or an elastic root-cause block. All of it is window expressions.

Links are deliberately tolerant of what two writers sharing one stream do
(a header inside a traceback, a bare exception name after an exception line) so
that garbled output still yields one record with the right exception.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl
from polars.expr.whenthen import ChainedThen, Then
from toranalyze_parsers.torch.common import SIGNAL_WORDS, basename, signal_name, signal_of_words, stream_key

from toranalyze.parser_api import NAIVE_US, conform_raw, contains_any, file_key, fill_where

# Lexical line types:
#   TB 'Traceback (most recent call last):'   CHAIN 'During handling of ...' / 'The above exception ...'
#   FRAME '  File "x.py", line 3, in f'         INDENT code line or ^^^^ carets under a frame
#   EXC 'ValueError: msg' (exception-like name) EXCB bare 'RuntimeError'    EXCL any 'name: msg' line
#   CONT lines torch appends to a message (CUDA hints, 'Last error:', ChildFailedError block)
#   ROOT 'Root Cause (first observed failure):' HEAD unindented code line right before an exception
#   TERM 'terminate called after throwing ...'  TERMTAIL the rest of a split TERM line
#   WHAT '  what():  ...'                        RAISED 'Exception raised from ...'  CPPFRAME 'frame #3: ...'
#   FATAL 'Fatal Python error: ...'              THREAD faulthandler 'Current thread 0x... (most recent call first):'
#   SIGLINE 'Segmentation fault (core dumped)', bash '... line 4: 123 Killed ...'
OTHER, TB, CHAIN, FRAME, INDENT, EXC, EXCL, CONT, RAISED, CPPFRAME = range(10)
WHAT, TERM, TERMTAIL, FATAL, THREAD, SIGLINE, HEAD, ROOT, EXCB = range(10, 19)

_CFE_FIELD = r"^\s+(?:time|host|rank|exitcode|error_file|traceback)\s*:"
_CONT = "|".join(
    [
        _CFE_FIELD,
        r"^\s*={8,}\s*$",
        r"^\s*-{8,}\s*$",
        r"^\s*\S+ FAILED\s*$",  # '<script> FAILED' title of a ChildFailedError
        r"^Failures:\s*$",
        r"^\s*<NO_OTHER_FAILURES>",
        r"^\[[0-9]+\]:\s*$",
        # Lines torch appends to CUDA / NCCL exception messages.
        r"^CUDA kernel errors might be asynchronously reported",
        r"^For debugging consider passing CUDA_LAUNCH_BLOCKING",
        r"^Compile with .TORCH_USE_CUDA_DSA",
        r"^Search for .cuda\w+. in ",
        r"^Device-side assert(?:ions? were|ion tracking)",
        r"^nccl[A-Z]\w*:",
        r"^Last error:",
        r"^\. This may indicate a possible application crash",
        r"^(?:Including non-PyTorch memory|Of the allocated memory)\b",  # wrapped OOM message
        # faulthandler trailers
        r"^Python runtime state:",
        r"^Extension modules:",
        r"^\s*<no Python frame>",
    ]
)
_SIG_WORDS = "|".join(SIGNAL_WORDS)
_SIGLINE = (
    rf"^\s*(?:{_SIG_WORDS})(?: \(core dumped\))?\s*$"
    # bash: 'script: line 4: 123 Killed   python x.py'. Written '(?:^|: )' rather than '^(?:.*: )?' (the
    # same lines): a leading '.*' keeps the regex engine from searching for 'line ' first (7x slower).
    rf"|(?:^|: )line [0-9]+:\s+[0-9]+\s+(?:{_SIG_WORDS})\b"
)
# Python exception names by their suffix; plain 'Exception' too (DeepSpeed raises it), but not a bare 'Error:'.
_EXC_NAME = r"(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)|Exception)"
_EXC_STRICT = rf"^\s?{_EXC_NAME}(?::.*)?$"
_EXC_BARE = rf"^\s?{_EXC_NAME}\s*$"
_EXC_LOOSE = r"^\s?[A-Za-z_][\w.]*(?::(?:\s.*)?)?$"
_LOG_LEVEL = r"^\s?(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL|NOTE|TIP|HINT)\b"
_INDENT = r"^(?: {4,}|\t)\S|^\s+[\^~]+\s*$"
# The code line of a frame whose header the publisher cut: 'work = default_pg.barrier(opts=opts)'.
_CALL = r"^\s*(?:[\w.\[\]]+\s*=\s*)?(?:return |raise |await )?[\w.\[\]]+\(.*[,()]\s*$"
CUT_OFF = "Python traceback without its exception line (output cut off)"
# Orphan exception lines the nccl parser records on its own.
NCCL_OWNED = r"NCCL error|nccl[A-Z]\w*Error|ProcessGroupNCCL|Watchdog caught collective"

# Anything that is not OTHER. CONT-like lines may follow any of them.
_STRUCT = [TB, CHAIN, FRAME, INDENT, EXC, EXCL, CONT, RAISED, CPPFRAME, WHAT, TERM, TERMTAIL, FATAL, THREAD]
_STRUCT += [SIGLINE, HEAD, ROOT, EXCB]
_LINKS_AFTER: dict[int, list[int]] = {
    TB: [CHAIN, FRAME, INDENT, TB],  # header after a frame: two writers interleaved
    CHAIN: _STRUCT,
    FRAME: [TB, FRAME, INDENT, THREAD, CONT, ROOT, FATAL],
    INDENT: [FRAME, INDENT, EXC, EXCL, CONT, ROOT],  # code lines, carets, multi-line messages
    EXC: [FRAME, INDENT, HEAD],
    EXCB: [FRAME, INDENT, HEAD, EXC, EXCL],  # a bare exception name right after another: interleaved writers
    EXCL: [FRAME, INDENT, HEAD],
    CONT: _STRUCT,
    ROOT: _STRUCT,
    RAISED: _STRUCT,
    CPPFRAME: [RAISED, CPPFRAME],
    WHAT: [TERM, TERMTAIL],
    TERM: [TERM],  # two processes' 'terminate called' lines in a row
    TERMTAIL: [TERM],
    THREAD: [FATAL, FRAME, THREAD, CONT],
    SIGLINE: [FRAME, CPPFRAME, THREAD, CONT],
}
_ANCHORS = [TB, CHAIN, EXC, EXCB, TERM, WHAT, FATAL, ROOT]
# A record starts at the first of these (leading indented debris is not part of it).
_STARTS = [TB, CHAIN, FRAME, EXC, EXCB, TERM, WHAT, FATAL, THREAD, RAISED, HEAD, ROOT, SIGLINE]


# A superset of the lines some case of ``_line_type`` can give a type other than OTHER: the
# literals its unanchored cases need, or a start one of its anchored cases needs. Most lines of a
# big log (NCCL chatter, iteration records) fail it, and only the rest go through the 18 cases.
# (Short or common literals such as a lone quote make the literal search several times slower:
# shapes anchored at the start go in the pattern.)
# tests/parsers/test_torch_types.py checks the superset on every test input and generated lines.
_MAY_TYPE_LITERALS = [
    "Traceback (most recent call last):", "During handling of the above exception",
    "The above exception was the direct cause", "terminate called", 'File "', ": line ", " FAILED",
    "<NO_OTHER_FAILURES>", "<no Python frame>",
]
_MAY_TYPE_START = (
    r"^(?:\s+(?:time|host|rank|exitcode|error_file|traceback)|\s*[=\-]|\s*what\(|\s*(?:" + _SIG_WORDS + r")"
    r"|\s?[A-Za-z_][\w.]*(?::|\s*$)| {4}|\t|\s+[\^~]|\[[0-9]+\]:"
    r"|\. This|Root Cause|CUDA kernel|For debugging|Compile with"
    r"|Search for|Device-side|nccl|Last error|Including|Of the|Python runtime|Extension modules|Failures"
    r"|Exception raised|frame #|Fatal Python|Current thread|Thread 0x|line |[\w:<>]+')"
)


def may_type() -> pl.Expr:
    """False only for lines ``_line_type`` makes OTHER (see ``_MAY_TYPE_LITERALS``)."""
    return contains_any(pl.col("_x"), _MAY_TYPE_LITERALS) | pl.col("_x").str.contains(_MAY_TYPE_START)


def _typed(lines: pl.DataFrame) -> pl.Series:
    """``_line_type`` of every row, evaluated only on the rows ``may_type`` keeps."""
    others = pl.Series("_t", [], pl.Int8).extend_constant(OTHER, lines.height)
    return fill_where(others, lines, lines.select(may_type()).to_series(), _line_type())


def _has(pattern: str) -> pl.Expr:
    return pl.col("_x").str.contains(pattern)


def _lit(fragment: str) -> pl.Expr:
    return pl.col("_x").str.contains(fragment, literal=True)


def _unprefixed() -> pl.Expr:
    """text without the one space a '[rank3]: ' tag puts before the record, so '^Exc' and indents hold.

    ('[default3]:' of torchrun --tee adds none.)"""
    prefix = pl.col("raw").str.slice(0, pl.col("raw").str.len_chars() - pl.col("text").str.len_chars())
    spaced = prefix.str.contains(r"\[[Rr]ank\s?[0-9]+\]:$") & pl.col("text").str.starts_with(" ")
    return pl.when(spaced).then(pl.col("text").str.slice(1)).otherwise(pl.col("text"))


def _keyed(lines: pl.DataFrame) -> pl.DataFrame:
    """Lines + ``_i`` (row order), ``_s`` (stream) and ``_x`` (text, rank tag space dropped).

    Most blocks name no writer and hold no '[rank N]:' tag: then every stream key is the same
    and ``_x`` is ``text``, and the per-line expressions are skipped."""
    names_writer, tagged, files = lines.select(
        pl.any_horizontal(pl.col("p_node", "p_rank", "p_local").is_not_null().any())
        | pl.col("raw").str.starts_with("(").any(),
        pl.col("raw").str.contains(r"\[[Rr]ank").any(),
        file_key().max().fill_null(0),
    ).row(0)
    # A line without a prefix is in the stream '|||' (every part empty), and its text is ``_x``:
    # the per-line expressions run on the other lines only.
    stream = pl.Series("_s", [], pl.String).extend_constant("|||", lines.height)
    if names_writer:
        prefixed = pl.any_horizontal(pl.col("p_node", "p_rank", "p_local").is_not_null())
        named = prefixed | pl.col("raw").str.starts_with("(")
        stream = fill_where(stream, lines, lines.select(named).to_series(), stream_key())
    if tagged:  # only a line with a peeled prefix can lose a space after it
        peeled = lines.select(pl.col("raw").str.len_bytes() != pl.col("text").str.len_bytes()).to_series()
        text = fill_where(lines["text"], lines, peeled, _unprefixed()).alias("_x")
    else:
        text = lines["text"].alias("_x")
    # Several files read as one batch: each file's writers are streams of their own.
    key = pl.concat_str([file_key().cast(pl.String), pl.col("_s")], separator="#") if files else pl.col("_s")
    return lines.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("_i"), stream, text).with_columns(
        key.alias("_s")
    )


def _line_type() -> pl.Expr:
    """The lexical type of ``_x`` on its own (the 'after a bare Last error:' rule is applied later)."""
    chain = _lit("During handling of the above exception") | _lit("The above exception was the direct cause")
    term = _lit("terminate called after throwing an instance of") | _has(r"^terminate called (?:without|recursively)")
    # Order matters: the most specific shapes first, the loose exception shape last.
    cases: list[tuple[pl.Expr, int]] = [
        (_has(r"^Root Cause \(first observed failure\):"), ROOT),
        (_has(_CONT), CONT),
        (_lit("Traceback (most recent call last):"), TB),
        (chain, CHAIN),
        (_has(r"^Exception raised from \S"), RAISED),
        (_has(r"^frame #[0-9]+: "), CPPFRAME),
        (_has(r"^\s*what\(\):"), WHAT),
        (term, TERM),
        (_has(r"^[\w:<>]+'\s*$"), TERMTAIL),
        (_has(r"^Fatal Python error: "), FATAL),
        (_has(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):"), THREAD),
        (_has(r"File \"[^\"]+\", line [0-9]+"), FRAME),
        (_has(_SIGLINE), SIGLINE),
        (_has(_LOG_LEVEL), OTHER),
        (_has(_EXC_BARE), EXCB),
        (_has(_EXC_STRICT), EXC),
        (_has(_INDENT), INDENT),
        (_has(_EXC_LOOSE), EXCL),
    ]
    cond, value = cases[0]
    expr: Then | ChainedThen = pl.when(cond).then(pl.lit(value, pl.Int8))
    for cond, value in cases[1:]:
        expr = expr.when(cond).then(pl.lit(value, pl.Int8))
    return expr.otherwise(pl.lit(OTHER, pl.Int8))


def _link(prev: pl.Expr) -> pl.Expr:
    items = list(_LINKS_AFTER.items())
    t = pl.col("_t")
    expr: Then | ChainedThen = pl.when(t == items[0][0]).then(prev.is_in(items[0][1]))
    for kind, after in items[1:]:
        expr = expr.when(t == kind).then(prev.is_in(after))
    return expr.otherwise(False).fill_null(False)


_BARE_LAST_ERROR = r"^Last error:\s*$"


def _in_stream(keyed: pl.DataFrame) -> Callable[[pl.Expr], pl.Expr]:
    """``expr.over("_s")``, or ``expr`` itself when every line of ``keyed`` is in one stream (most
    blocks name no writer): a window over one group is the whole column, at about three times
    the cost of the plain expression."""
    one = keyed.select((pl.col("_s").min() == pl.col("_s").max()) & (pl.col("_s").null_count() == 0)).item()
    return (lambda e: e) if one is not False else (lambda e: e.over("_s"))


def typed_lines(lines: pl.LazyFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Prepared lines -> (every line typed, the lines of kept records).

    Every line gets ``_i`` (row order), ``_s`` (stream), ``_x`` (text), ``_t`` (type) and ``_rec``
    (the row belongs to a kept record; one-line rules skip those rows). Most lines of a big log
    are OTHER and can never join a record, so linking, runs and record summaries work on the
    others only (``_prev_text``, ``_link``, ``_run`` exist there). Dropping a line must not join
    its neighbours: a row whose previous line in its stream was dropped links to nothing, exactly
    as it would not link to that OTHER line.
    """
    base = _keyed(lines.collect())
    within = _in_stream(base)
    lf = base.with_columns(_typed(base)).lazy()
    # A line after a bare 'Last error:' continues it whatever it looks like; a code line right
    # before an exception is its HEAD: both may be OTHER on their own, so they are kept too.
    bare = pl.col("_x").str.contains(_BARE_LAST_ERROR)
    lf = lf.with_columns(within(bare.shift(1)).fill_null(False).alias("_after_le"))
    keep = (pl.col("_t") != OTHER) | pl.col("_after_le") | _has(_CALL)
    full = lf.with_columns(keep.alias("_keep")).with_columns(
        within((~pl.col("_keep")).shift(1)).fill_null(False).alias("_gap_before"),
        within((~pl.col("_keep")).shift(-1)).fill_null(False).alias("_gap_after"),
    ).collect()
    sub = full.lazy().filter(pl.col("_keep"))
    prev_text = pl.when(~pl.col("_gap_before")).then(pl.col("_x").shift(1).over("_s"))
    sub = sub.with_columns(prev_text.alias("_prev_text")).with_columns(
        pl.when((pl.col("_t") != ROOT) & pl.col("_after_le")).then(pl.lit(CONT, pl.Int8)).otherwise("_t").alias("_t")
    )
    next_exc = ~pl.col("_gap_after") & pl.col("_t").shift(-1).over("_s").is_in([EXC, EXCB])
    head = (pl.col("_t") == OTHER) & next_exc & _has(_CALL)
    sub = sub.with_columns(pl.when(head.fill_null(False)).then(pl.lit(HEAD, pl.Int8)).otherwise("_t").alias("_t"))
    prev_t = pl.when(~pl.col("_gap_before")).then(pl.col("_t").shift(1).over("_s"))
    sub = sub.with_columns(_link(prev_t).alias("_link"))
    sub = sub.with_columns((~pl.col("_link")).cum_sum().over("_s").alias("_run"))
    grp = ["_s", "_run"]
    t = pl.col("_t")
    # A frame followed by an exception of any name is a traceback tail whose header was cut.
    tail = ((t == EXCL) & pl.col("_link")).any().over(grp) & t.is_in([FRAME, HEAD]).any().over(grp)
    anchored = t.is_in(_ANCHORS).any().over(grp) | tail
    first = pl.col("_i").filter(pl.col("_t").is_in(_STARTS)).min().over(grp)
    recs = sub.filter((anchored & (pl.col("_i") >= first)).fill_null(False)).collect()
    drop = ["_after_le", "_keep", "_gap_before", "_gap_after"]
    full = full.drop(drop).with_columns(pl.col("_i").is_in(recs["_i"].implode()).alias("_rec"))
    return full, recs.drop(drop)


def _fields_of(groups: pl.Expr, *numbers: int) -> list[pl.Expr]:
    return [groups.struct.field(str(n)) for n in numbers]


def _fields(typed: pl.LazyFrame) -> pl.LazyFrame:
    """Per-row pieces the record summary is built from."""
    t, text = pl.col("_t"), pl.col("_x")
    is_exc = t.is_in([EXC, EXCB]) | ((t == EXCL) & pl.col("_link"))
    has_msg = text.str.contains(r"^\s?[\w.]+:\s*\S") | text.str.contains("ChildFailedError", literal=True)
    frame = text.str.extract_groups(r"File \"([^\"]+)\", line ([0-9]+),? in (\S+)")
    cfe = text.str.extract_groups(
        r"^\s+(?:time\s*:\s*(\S+)|host\s*:\s*(\S+)|rank\s*:\s*([0-9]+)(?: \(local_rank: ([0-9]+)\))?"
        r"|exitcode\s*:\s*(-?[0-9]+)(?: \(pid: ([0-9]+)\))?|traceback\s*:\s*(.+))"
    )
    raised = text.str.extract_groups(r"^Exception raised from (\S+) at (\S+) \(most recent call first\)")
    term_type = text.str.extract(r"instance of '([\w:<>]+)'", 1)
    info = (t == CONT) & (
        text.str.contains(r"^nccl[A-Z]\w*:|^Search for .cuda\w+.")
        | pl.col("_prev_text").str.contains(r"^Last error:\s*$").fill_null(False)
    )
    return typed.with_columns(
        is_exc.alias("_exc"),
        has_msg.alias("_msg"),
        pl.when(t == FRAME).then(pl.format("{}:{} in {}", basename(frame.struct.field("1")), *_fields_of(frame, 2, 3)))
        .alias("_frame"),
        pl.when(t == CONT).then(cfe).alias("_cfe"),
        pl.when(t == RAISED).then(pl.format("{} at {}", raised.struct.field("1"), basename(raised.struct.field("2"))))
        .alias("_raised"),
        pl.when(t == TERM).then(term_type).alias("_tt"),
        pl.when(t == TERM).then(term_type).forward_fill().over("_s").alias("_fftt"),
        info.alias("_info"),
        text.str.contains(r"^\s*\S+ FAILED\s*$").alias("_title"),
        # faulthandler lists the most recent call first, under 'Current thread'
        pl.when(t == THREAD).then(text.str.starts_with("Current thread")).forward_fill().over(["_s", "_run"])
        .fill_null(False)
        .alias("_current"),
    )


def _summaries(rows: pl.LazyFrame) -> pl.LazyFrame:
    grp = ["_s", "_run"]
    t, i = pl.col("_t"), pl.col("_i")
    # The record's exception: the last exception line that has a message (a bare name may be
    # another writer's debris), else the last exception line.
    with_msg = i.filter(pl.col("_exc") & pl.col("_msg")).max().over(grp)
    rows = rows.with_columns(pl.coalesce(with_msg, i.filter(pl.col("_exc")).max().over(grp)).alias("_main"))
    main_i = pl.col("_main")

    def cfe(n: str) -> pl.Expr:
        return pl.col("_cfe").struct.field(n).drop_nulls().last()

    return rows.group_by(grp, maintain_order=True).agg(
        pl.col("line").first(),
        pl.col("line").last().alias("line_end"),
        pl.col("_x").filter(i == main_i).first().str.strip_chars().alias("_main_text"),
        pl.col("_x").filter(pl.col("_exc") & pl.col("_msg") & (i != main_i)).str.strip_chars().alias("_others"),
        pl.col("_frame").filter((t == FRAME) & (main_i.is_null() | (i < main_i))).drop_nulls().last(),
        pl.col("_frame").filter((t == FRAME) & pl.col("_current")).drop_nulls().first().alias("_fault_frame"),
        pl.col("_x").filter(t == WHAT).first()
        .str.replace(r"^\s*what\(\):\s*", "").str.strip_chars().alias("_what"),
        pl.col("_tt").drop_nulls().last(),
        t.is_in([TERM, WHAT]).any().alias("_cpp"),
        pl.col("_x").filter(t == TERM).first().str.strip_chars().alias("_term_text"),
        pl.col("_fftt").first(),
        pl.col("_raised").drop_nulls().first(),
        pl.col("_x").filter(t == FATAL).first().str.strip_chars().alias("_fatal"),
        pl.col("_x").filter(t == SIGLINE).first().str.strip_chars().alias("_sig"),
        pl.col("_x").filter(pl.col("_info")).str.strip_chars().unique(maintain_order=True).str.join(" | ")
        .alias("_info"),
        pl.col("_x").filter(pl.col("_title")).first().str.strip_chars().alias("_title"),
        t.is_in([TB, FRAME, HEAD]).any().alias("_tb"),
        (t == ROOT).any().alias("_root"),
        cfe("1").alias("_cf_time"),
        cfe("2").alias("_cf_host"),
        cfe("3").alias("_cf_rank"),
        cfe("4").alias("_cf_local"),
        cfe("5").alias("_cf_exit"),
        cfe("6").alias("_cf_pid"),
        cfe("7").alias("_cf_tb"),
    )


def _opt(prefix: str, value: pl.Expr, suffix: str = "") -> pl.Expr:
    """' [at x]'-style optional message part: null (dropped) when value is null or empty."""
    return pl.when(value.is_not_null() & (value != "")).then(pl.concat_str([pl.lit(prefix), value, pl.lit(suffix)]))


def _child_failed_message(main: pl.Expr) -> pl.Expr:
    """'ChildFailedError: train.py FAILED; root cause: rank 3 (local_rank 3) on node-1 exitcode -6 (SIGABRT) ...'"""
    return pl.concat_str(
        [
            pl.coalesce(main.str.extract(r"(\w*ChildFailedError:?)", 1), pl.lit("ChildFailedError:")),
            _opt(" ", pl.col("_title")),
            pl.lit("; root cause"),
            _opt(": rank ", pl.col("_cf_rank")),
            _opt(" (local_rank ", pl.col("_cf_local"), ")"),
            _opt(" on ", pl.col("_cf_host")),
            _opt(" exitcode ", pl.col("_cf_exit")),
            _opt(" (", signal_name(pl.col("_cf_exit")), ")"),
            _opt(" pid ", pl.col("_cf_pid")),
            _opt("; ", pl.col("_cf_tb").str.strip_chars()),
        ],
        ignore_nulls=True,
    )


def _cpp_type() -> pl.Expr:
    # A what() block whose 'terminate called' line went to an earlier record (two processes
    # printed theirs back to back) takes the type of that line.
    return pl.when(pl.col("_term_text").is_not_null()).then(pl.col("_tt")).otherwise(pl.col("_fftt"))


def _cpp_message(info: pl.Expr) -> pl.Expr:
    """'c10::CUDAError: CUDA error: unknown error [raised from query at CUDAEvent.h:95]'"""
    parts = [
        pl.coalesce(_cpp_type(), pl.lit("C++ exception")),
        pl.lit(": "),
        pl.col("_what"),
        info,
        _opt(" [raised from ", pl.col("_raised"), "]"),
    ]
    return pl.when(pl.col("_what").is_not_null()).then(pl.concat_str(parts, ignore_nulls=True)).otherwise("_term_text")


def _compose(recs: pl.LazyFrame) -> pl.LazyFrame:
    main, fatal = pl.col("_main_text"), pl.col("_fatal")
    cfe = main.str.contains("ChildFailedError", literal=True).fill_null(False) | pl.col("_root")
    cpp = pl.col("_cpp")
    at = _opt(" [at ", pl.col("_frame"), "]")
    info = _opt(" | ", pl.col("_info"))
    others = _opt("; earlier: ", pl.col("_others").list.join(" <- "))
    fault_at = _opt(" [at ", pl.col("_fault_frame"), "]")
    message = (
        pl.when(cfe)
        .then(_child_failed_message(main))
        .when(cpp)
        .then(_cpp_message(info))
        .when(fatal.is_not_null())
        .then(pl.concat_str([fatal, _opt("; ", pl.col("_sig")), fault_at], ignore_nulls=True))
        .when(main.is_not_null())
        .then(pl.concat_str([main, info, at, others], ignore_nulls=True))
        .otherwise(pl.concat_str([pl.lit(CUT_OFF), at], ignore_nulls=True))
    )
    exc_name = main.str.extract(r"^([\w.]+)", 1).str.extract(r"([A-Za-z_]\w*)$", 1)
    code = (
        pl.when(cfe)
        .then(pl.col("_cf_exit"))
        .when(cpp)
        .then(_cpp_type())
        .when(fatal.is_not_null())
        .then(signal_of_words(fatal))
        .otherwise(exc_name)
    )
    gpu = message.str.extract(r"(?:\(GPU |\bGPU )([0-9]+)(?:;| has a total capac)", 1)
    # Megatron's gradient checks name where they ran: '... in backwards pass. Device: 3, node: host'.
    named = message.str.extract_groups(r"\bDevice: (?P<dev>[0-9]+), node: (?P<host>[\w.\-]+)")
    # Orphan NCCL exception lines (no frames around them) are the nccl parser's records.
    nccl_orphan = ~pl.col("_tb") & ~cfe & ~cpp & fatal.is_null() & main.str.contains(NCCL_OWNED).fill_null(False)
    return recs.filter(~nccl_orphan).select(
        pl.col("line"),
        pl.when(pl.col("line_end") > pl.col("line")).then(pl.col("line_end")).alias("line_end"),
        pl.lit("error").alias("kind"),
        pl.lit("error").alias("severity"),
        # ChildFailedError's 'time :' is the host's local clock, without a zone
        pl.col("_cf_time").str.strptime(NAIVE_US, "%Y-%m-%d_%H:%M:%S", strict=False).alias("ts"),
        pl.coalesce(pl.col("_cf_host"), named.struct.field("host")).alias("node"),
        pl.col("_cf_rank").cast(pl.Int32, strict=False).alias("rank"),
        pl.coalesce(gpu, named.struct.field("dev")).cast(pl.Int32, strict=False).alias("gpu"),
        code.alias("code"),
        message.alias("message"),
    )


def records(recs: pl.LazyFrame) -> pl.LazyFrame:
    """One error event per kept record (see the module docstring); ``recs``: their lines."""
    rows = _fields(recs)
    return conform_raw(_compose(_summaries(rows)))
