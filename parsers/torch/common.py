"""Small shared pieces of the torch parser: output streams, signals, glog stamps."""

from __future__ import annotations

import polars as pl

from toranalyze.parser_api import ts_glog

# Exit codes below zero are "killed by signal -code" (Python's subprocess and
# torch.distributed.elastic use this convention); the name goes into messages.
SIGNALS: dict[int, str] = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    15: "SIGTERM",
}

# What a shell or faulthandler prints for a process that died of a signal.
SIGNAL_WORDS: dict[str, int] = {
    "Segmentation fault": 11,
    "Bus error": 7,
    "Aborted": 6,
    "Killed": 9,
    "Floating point exception": 8,
    "Illegal instruction": 4,
}

# glog header of torch>=2.2 launcher lines: 'E0801 13:23:17.366000 140 torch/.../api.py:826] '
GLOG = r"^([IWEF])([0-9]{4}) ([0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?)\s+[0-9]+\s+\S+:[0-9]+\]\s?"


def stream_key() -> pl.Expr:
    """One output stream per writer: ranks, nodes and Ray workers interleave in one file."""
    parts = [pl.col(c).cast(pl.String).fill_null("") for c in ("p_node", "p_rank", "p_local")]
    # Ray's '(RayTrainWorker pid=2657, ip=10.0.0.1)' prefix: the prepared lines keep only the ip.
    ray_pid = pl.col("raw").str.extract(r"^\((?:[\w.\-]+ )?pid=([0-9]+)", 1).fill_null("")
    return pl.concat_str([*parts, ray_pid], separator="|")


def signal_name(code: pl.Expr) -> pl.Expr:
    """'-9' -> 'SIGKILL'; null for exit codes that are not signals."""
    num = code.cast(pl.Int32, strict=False)
    return (
        pl.when(num < 0)
        .then((-num).replace_strict(list(SIGNALS), list(SIGNALS.values()), default=None, return_dtype=pl.String))
        .otherwise(None)
    )


def signal_code(sig: pl.Expr) -> pl.Expr:
    """'SIGTERM' / 'Signals.SIGTERM' / '15' -> '-15' (the exit-code convention for signal deaths)."""
    by_name = {name: f"-{num}" for num, name in SIGNALS.items()}
    name = sig.str.replace(r"^Signals\.", "")
    num = name.cast(pl.Int32, strict=False)
    return pl.when(num.is_not_null()).then(pl.format("-{}", num)).otherwise(
        name.replace_strict(by_name, default=None, return_dtype=pl.String)
    )


def signal_of_words(text: pl.Expr) -> pl.Expr:
    """'Segmentation fault (core dumped)' -> '-11': the signal a shell or faulthandler names."""
    expr = pl.lit(None, pl.String)
    for word, num in SIGNAL_WORDS.items():
        expr = pl.when(text.str.contains(word, literal=True)).then(pl.lit(f"-{num}")).otherwise(expr)
    return expr


def glog_ts(text: pl.Expr) -> pl.Expr:
    """Naive wall clock of a glog-stamped line (placeholder year), null otherwise."""
    g = text.str.extract_groups(GLOG)
    return ts_glog(g.struct.field("2"), g.struct.field("3"))


def basename(path: pl.Expr) -> pl.Expr:
    return path.str.extract(r"([^/\\]+)$", 1)
