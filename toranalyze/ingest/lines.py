"""Prepared lines: what every line parser's ``extract`` receives.

A chunk of raw lines becomes a frame with these columns:

=============  ==============  ====================================================
``line``       Int64           1-based line number in the (decompressed) file
``raw``        String          the segment as read (after ``\\r`` splitting)
``text``       String          the segment with launcher/collector prefixes peeled
``p_ts``       Datetime(us)    a leading timestamp peeled off the line (naive)
``p_off``      Int32           its UTC offset in seconds when it states one
``p_node``     String          host/pod named by a prefix (Ray ``ip=``, ``[pod/…]``)
``p_rank``     Int32           rank named by a prefix (``[rank5]:``, ``srun -l`` ``5: ``)
``p_local``    Int32           local rank from ``[default3]:`` (torch.distributed.run --tee)
=============  ==============  ====================================================

Carriage returns split a line into segments that keep the same line number
(tqdm repaints glue records together); empty segments are dropped.
Prefixes stack, so peeling runs a few passes of one anchored regex.
"""

from __future__ import annotations

import polars as pl

from toranalyze.ingest.clock import ISO_PATTERN, offset_iso, ts_iso
from toranalyze.schema import NAIVE_US

LINE_SCHEMA = pl.Schema(
    {
        "line": pl.Int64(),
        "raw": pl.String(),
        "text": pl.String(),
        "p_ts": NAIVE_US,
        "p_off": pl.Int32(),
        "p_node": pl.String(),
        "p_rank": pl.Int32(),
        "p_local": pl.Int32(),
    }
)

# One layer of prefix, anchored at the start. Alternatives (named by group number):
#  ts   : '2025-02-18 12:54:01 ', '2019-06-02T16:13:44.884Z: ' (mpirun --timestamp-output),
#         '| 2023-10-05T04:00:22.604-07:00 |', '[2022-05-01 03:56:11] ',
#         '[2021-05-25 06:38:26,123] ' (a bracketed or piped ISO stamp)
#  tee  : '[default3]:'
#  rank : '[rank5]:' / '[Rank 5]:'
#  srun : '5: ' (srun -l task id)
#  ray  : '(train_rft pid=2657296)' / '(pid=123, ip=10.0.0.1)'
#  pod  : '[pod/trainer-worker-3/pytorch] '
#  mpi  : '[1,12]<stdout>:' (mpirun --tag-output: job, rank)
#  task : '[177/train/578 (pid 28936)] ' (a workflow runner's task and process), and a run id in
#         brackets '[09c561ee-a44c-4795-967c-7183a83b3160] ' (a UUID; nothing else looks like one)
#  cri  : 'stdout F ' / 'stderr P ' (the CRI log format's stream and tag, after its stamp)
#  log  : '- INFO - ', '- trainer - WARNING - ' (Python logging's default layout, after its stamp)
#  glog : 'I0601 00:00:01.123456  1234 train.py:12] ' (absl/glog of Python or C++, not klog's
#         '.go' files, which the Kubernetes parser reads whole; its stamp has no year: not kept)
#  host : 'gpu-001 | ' (a collector's host column)
#  sky  : '(worker1, rank=1, pid=4888, ip=10.60.0.4) ' (a launcher's worker, rank and address)
#  tag  : '[nccl-e9ef-7d4f-1:3]:' (a host and rank tag, as mpirun/pdsh-style launchers print)
# A host right after a peeled stamp ('2024-06-01T00:00:01Z gpu-001 msg') is taken by _after_stamp,
# and a JSON envelope ('{"log": ..., "time": ...}', fluent-bit's record) by _unwrapped.
# A host name here: a letter first, a digit and a '-' or '.' in it ('gpu-001', 'ip-10-0-0-1'), or an IPv4.
_HOST = r"[A-Za-z][A-Za-z0-9]*(?:[-.][A-Za-z0-9]+)*[-.][A-Za-z]*[0-9][\w.\-]*|(?:[0-9]{1,3}\.){3}[0-9]{1,3}"
_PREFIX = (
    r"^(?:"
    rf"\|?\s*\[?({ISO_PATTERN})\]?:?\s*\|?\s+"
    r"|\[default([0-9]+)\]:"
    r"|\[[Rr]ank\s?([0-9]+)\]:"
    r"|\s{0,3}([0-9]{1,6}): "
    r"|\((?:[\w.\-]+ )?pid=[0-9]+(?:, ip=([0-9.]+))?\)\s*"
    r"|\[pod/([\w.\-]+)(?:/[\w.\-]+)?\]\s*"
    r"|\[[0-9]+,([0-9]+)\]<std(?:out|err)>:"
    r"|\[[\w/.\-]+ \(pid [0-9]+\)\] ?"
    r"|\[[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\] ?"
    r"|(?:stdout|stderr) [FP] "
    r"|- (?:[\w.]+ - )?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL) - "
    r"|[IWEF][0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}\s+[0-9]+ [\w.\-]+\.py:[0-9]+\] "
    rf"|({_HOST}) \| "
    r"|\([\w.\-]+, rank=([0-9]+), pid=[0-9]+(?:, ip=([0-9.]+))?\)\s*"
    r"|\[([A-Za-z][\w.\-]*):([0-9]+)\]:"
    r")"
)
_PASSES = 4


def prepare_lines(chunk: pl.DataFrame) -> pl.DataFrame:
    """chunk(line, raw) -> LINE_SCHEMA frame with prefixes peeled.

    Only rows that start with a prefix go through the peeling passes (one cheap test first):
    most lines of a big log (NCCL chatter, bare trainer output) carry none.
    """
    lf = chunk.lazy()
    if chunk.select(pl.col("raw").str.contains("\r", literal=True).any()).item():
        lf = lf.with_columns(pl.col("raw").str.split("\r")).explode("raw")
    base = (
        lf.filter(pl.col("raw").str.strip_chars().str.len_bytes() > 0)
        .with_columns(
            pl.col("raw").alias("text"),
            pl.lit(None, NAIVE_US).alias("p_ts"),
            pl.lit(None, pl.Int32).alias("p_off"),
            pl.lit(None, pl.String).alias("p_node"),
            pl.lit(None, pl.Int32).alias("p_rank"),
            pl.lit(None, pl.Int32).alias("p_local"),
        )
        .select(LINE_SCHEMA.names())
        .collect()
    )
    if base.select(pl.col("text").str.contains(r"^\s*\{", literal=False).any()).item():
        base = _unwrapped(base)
    prefixed = base.select(pl.col("text").str.contains(_PREFIX)).to_series()
    if not prefixed.any():
        return base
    if prefixed.all():
        return _peel(base)
    base = base.with_columns(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_r"))
    peeled = _peel(base.filter(prefixed))
    return pl.concat([base.filter(~prefixed), peeled]).sort("_r").drop("_r")


# A JSON log envelope: docker's json-file ('{"log":"...\\n","stream":"stderr","time":"..."}'), a
# fluent-bit or cloud logging record ('"message"', '"textPayload"', a "kubernetes" host).
_ENVELOPE = r'^\s*\{.*?"(?:log|message|textPayload)"\s*:\s*"((?:[^"\\]|\\.)*)"'
ENVELOPE_TIME = rf'"(?:time|timestamp|@timestamp|ts)"\s*:\s*"({ISO_PATTERN})"'
_ENVELOPE_HOST = r'"(?:host|hostname|node_name|nodename)"\s*:\s*"([\w.\-]+)"'
_ENVELOPE_EPOCH = r'"(?:date|time|ts|timestamp)"\s*:\s*(1[0-9]{9}(?:\.[0-9]+)?)\b'


def json_unescaped(s: pl.Expr) -> pl.Expr:
    """A JSON string's text: its trailing newline dropped, other escapes read (no full JSON decode:
    the envelope is cut out of the line by a pattern)."""
    return (s.str.replace(r"(?:\\[rn])+$", "").str.replace_all(r"\\[nrt]", " ").str.replace_all(r'\\"', '"')
            .str.replace_all(r"\\\\", "\\", literal=True))


def _unwrapped(frame: pl.DataFrame) -> pl.DataFrame:
    """Lines that are JSON log envelopes become the message they carry, with its stamp and host."""
    msg = pl.col("text").str.extract(_ENVELOPE, 1)
    stamp = pl.col("text").str.extract(ENVELOPE_TIME, 1)
    seconds = pl.col("text").str.extract(_ENVELOPE_EPOCH, 1).cast(pl.Float64, strict=False)
    epoch = pl.from_epoch((seconds * 1e6).cast(pl.Int64, strict=False), time_unit="us").cast(NAIVE_US, strict=False)
    text = json_unescaped(msg)
    return frame.with_columns(
        pl.when(msg.is_not_null()).then(text).otherwise(pl.col("text")).alias("text"),
        pl.when(msg.is_not_null()).then(pl.coalesce(ts_iso(stamp), epoch)).otherwise(pl.col("p_ts")).alias("p_ts"),
        pl.when(msg.is_not_null()).then(pl.coalesce(offset_iso(stamp), pl.when(epoch.is_not_null()).then(0)))
        .otherwise(pl.col("p_off")).cast(pl.Int32, strict=False).alias("p_off"),
        pl.when(msg.is_not_null()).then(pl.col("text").str.extract(_ENVELOPE_HOST, 1)).otherwise(pl.col("p_node"))
        .alias("p_node"),
    )


_STAMP_HOST = rf"^({_HOST}) "
# ... unless a parser reads the host itself: a syslog head ('gpu-001 kernel: '), an NCCL head ('gpu-001 [5] NCCL')
_HOST_READ = rf"^(?:{_HOST}) (?:[\w\-./]+(?:\[[0-9]+\])?: |\[[0-9]+\] )"


def _after_stamp(frame: pl.DataFrame) -> pl.DataFrame:
    """A collector's host right after its RFC 3339 stamp ('2024-06-01T00:00:01Z gpu-001 msg') is the
    line's host; a syslog or NCCL head's ('... gpu-001 kernel: msg') is left to the parsers that
    read it, and a name after a logger's stamp ('[2021-08-08 03:56:54] tr1-13B is ...') is text."""
    text = pl.col("text")
    rfc3339 = pl.col("raw").str.contains(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T")
    host = (pl.col("p_ts").is_not_null() & pl.col("p_node").is_null() & rfc3339
            & text.str.contains(_STAMP_HOST) & ~text.str.contains(_HOST_READ))
    if not frame.select(host.any()).item():
        return frame
    name = text.str.extract(_STAMP_HOST, 1)
    return frame.with_columns(
        pl.when(host).then(text.str.slice(name.str.len_chars() + 1)).otherwise(text).alias("text"),
        pl.when(host).then(name).otherwise(pl.col("p_node")).alias("p_node"),
    )


def _peel(frame: pl.DataFrame) -> pl.DataFrame:
    """Strip up to ``_PASSES`` stacked prefixes, filling the ``p_*`` columns from them.

    Every row of ``frame`` starts with a prefix. A pass changes only rows whose text starts with
    one, so each further pass runs on the rows that still do (usually none: one stamp per line).
    """
    frame = frame.with_row_index("_p")
    done: list[pl.DataFrame] = []
    for k in range(_PASSES):
        frame = _after_stamp(_peel_once(frame.lazy()).collect())
        more = frame.select(pl.col("text").str.contains(_PREFIX)).to_series() if k < _PASSES - 1 else None
        if more is None or not more.any():
            break
        done.append(frame.filter(~more))
        frame = frame.filter(more)
    return (pl.concat([*done, frame]).sort("_p") if done else frame).drop("_p")


# The whole prefix as group 1, the alternatives' groups from 2: one regex pass gives both.
_PREFIX_WHOLE = _PREFIX.replace("^(?:", "^((?:", 1) + ")"


def _peel_once(lf: pl.LazyFrame) -> pl.LazyFrame:
    """One layer of prefix off every row that starts with one."""
    g = pl.col("_g").struct.field
    lf = lf.with_columns(pl.col("text").str.extract_groups(_PREFIX_WHOLE).alias("_g")).with_columns(
        pl.coalesce(ts_iso(g("2")), pl.col("p_ts")).alias("p_ts"),
        pl.coalesce(offset_iso(g("2")), pl.col("p_off")).alias("p_off"),
        pl.coalesce(g("3").cast(pl.Int32, strict=False), pl.col("p_local")).alias("p_local"),
        pl.coalesce(
            g("4").cast(pl.Int32, strict=False),
            g("5").cast(pl.Int32, strict=False),
            g("8").cast(pl.Int32, strict=False),
            g("10").cast(pl.Int32, strict=False),
            g("13").cast(pl.Int32, strict=False),
            pl.col("p_rank"),
        ).alias("p_rank"),
        pl.coalesce(g("6"), g("7"), g("9"), g("11"), g("12"), pl.col("p_node")).alias("p_node"),
        pl.when(g("1").is_not_null())
        .then(pl.col("text").str.slice(g("1").str.len_chars()))
        .otherwise(pl.col("text"))
        .alias("text"),
    )
    return lf.drop("_g")


def lines_from_strings(lines: list[str], first_line: int = 1) -> pl.DataFrame:
    """Prepared lines from Python strings (tests, small inputs)."""
    chunk = pl.DataFrame(
        {"line": pl.Series(range(first_line, first_line + len(lines)), dtype=pl.Int64), "raw": lines}
    )
    return prepare_lines(chunk)
