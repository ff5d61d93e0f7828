"""Kernel-log prefixes: peel the clock, host and tag layers off each line.

A kernel record can arrive behind several stacked layers, in this order:

1. ``dmesg -x`` facility/level: ``kern  :err   : ``;
2. one clock: RFC3339/ISO (``dmesg --time-format=iso``, rsyslog, ``journalctl -o short-iso``),
   ctime (``dmesg -T`` ``[Mon Dec  6 18:44:12 2021]``, OpenWrt ``logread``), syslog
   ``Dec  6 18:44:12`` (no year), Talos ``HOST: kern: LEVEL: [ISO]:``, the ``dmesg -H`` minute
   header ``[Dec 6 18:44]`` or delta ``[  +0.000316]``, or the fabric manager's
   ``[Jul 23 2024 07:53:55] [ERROR] [tid 841]``;
3. a syslog host and tag: ``host kernel:`` (``kern.info kernel:`` for logread);
4. the kmsg priority ``<3>`` and the monotonic clock ``[ 1234.567890]``.

``journalctl -o json`` lines are read through their fields instead: ``MESSAGE`` is the body,
``__REALTIME_TIMESTAMP`` (UTC microseconds) the clock and ``_HOSTNAME`` the node.

A leading ISO stamp may already have been peeled by ``toranalyze.ingest.lines`` (``p_ts``). What is left
is ``body``. ``mono`` keeps the monotonic seconds (the message keeps them: a bare dmesg has no
other clock). ``k_ctx`` says the line carries a kernel-log prefix, which the few generic
patterns (a netdev ``Link down``) require so that other logs cannot trigger them.
"""

from __future__ import annotations

from functools import cache

import polars as pl

from toranalyze.ingest.clock import ISO_PATTERN, offset_iso, ts_iso, ts_month_name
from toranalyze.schema import NAIVE_US

MON = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
DOW = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_HMS = r"\d{2}:\d{2}:\d{2}"
_LEVELS = r"(?:emerg|alert|crit|err|warn|warning|notice|info|debug)"

_FACILITY = (
    r"^(?P<all>(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])"
    rf"\s*:\s*{_LEVELS}\s*:\s)"
)

_CLOCK = (
    r"^(?P<all>(?:"
    rf"\[?(?P<iso>{ISO_PATTERN})\]?:?\s+"
    rf"|{DOW} (?P<sf_ts>\d{{4}}-\d{{2}}-\d{{2}} {_HMS}(?:\.\d+)?) (?P<sf_tz>[A-Z]{{2,5}}|[+-]\d{{4}})\s+"
    r"|(?P<epoch>\d{9,10}\.\d{6})\s+"
    rf"|\[?{DOW} (?P<ct_mon>{MON}) +(?P<ct_day>\d{{1,2}}) (?P<ct_hms>{_HMS}) (?P<ct_year>\d{{4}})\]?\s+"
    rf"|\[(?P<fm_mon>{MON}) (?P<fm_day>\d{{1,2}}) (?P<fm_year>\d{{4}}) (?P<fm_hms>{_HMS})\] "
    r"\[(?P<fm_lvl>[A-Z]+)\] \[tid \d+\] "
    rf"|(?P<sy_mon>{MON}) +(?P<sy_day>\d{{1,2}}) (?P<sy_hms>{_HMS}(?:\.\d+)?)\s+"
    rf"|(?P<ta_host>[\w.\-]+): kern:\s*{_LEVELS}: \[(?P<ta_ts>{ISO_PATTERN})\]: "
    rf"|\[(?P<hh_mon>{MON}) +(?P<hh_day>\d{{1,2}}) (?P<hh_hm>\d{{2}}:\d{{2}}(?::\d{{2}})?)\]\s*"
    r"|\[\s*\+(?P<delta>\d+\.\d+)\]\s*"
    r"))"
)

# ``host kernel:`` (``kern.info kernel:`` for logread); journald also writes the fabric manager's
# own tag. Other daemons' syslog lines keep their tag in ``body``.
KERNEL_TAGS = ("kernel", "nv-fabricmanager", "nvidia-fabricmanager")
_TAG = (
    rf"^(?P<all>(?:(?:kern|user|daemon|syslog)\.{_LEVELS} |(?P<host>[\w.\-]+) )?"
    rf"(?P<tag>{'|'.join(KERNEL_TAGS)})(?:\[\d+\])?: )"
)

# '[ 1234.567890]', with 'dmesg -d' adding the delta: '[ 1234.567890 <    0.000316>]'.
_MONO = r"^(?P<all>(?:<\d>)?\[\s*(?P<mono>\d+\.\d+)(?:\s*<\s*\d+\.\d+>)?\]\s*)"


def _peel(pattern: str, name: str, when: pl.Expr | None = None) -> list[list[pl.Expr]]:
    """Match ``pattern`` at the start of ``body``; store its groups in ``name``, cut the match."""
    groups = pl.col("body").str.extract_groups(pattern)
    if when is not None:
        groups = pl.when(when).then(groups)
    whole = pl.col(name).struct.field("all")
    return [
        [groups.alias(name)],
        [pl.when(whole.is_not_null()).then(pl.col("body").str.slice(whole.str.len_chars())).otherwise(pl.col("body"))],
    ]


def _hm_to_hms(hm: pl.Expr) -> pl.Expr:
    return pl.when(hm.str.len_chars() == 5).then(hm + ":00").otherwise(hm)


def peel_prefixes(lines: pl.LazyFrame, journal_json: bool = False) -> pl.LazyFrame:
    """Add ``body``, ``mono``, ``k_ts``, ``k_off``, ``k_year``, ``k_inferred``, ``k_node``,
    ``k_ctx``, ``k_fm``, ``k_fm_lvl`` and ``msg`` to prepared lines.

    ``journal_json`` asks to look for ``journalctl -o json`` records (JSON parsing is skipped
    for chunks without any line starting with ``{``).
    """
    lf = lines
    for exprs in _steps(journal_json):
        lf = lf.with_columns(exprs)
    return lf.drop(
        "_fac", "_clk", "_tag", "_tag2", "_mono", "_hdr_ts", "_delta", "_delta_ts", "_j_ts", "_j_host", "_j_kern"
    )


@cache
def _steps(journal_json: bool) -> tuple[list[pl.Expr], ...]:
    """The ``with_columns`` steps of ``peel_prefixes``, built once (building them in Python cost
    about as much as running them on a small file)."""
    steps = [[pl.col("text").alias("body")]]
    if journal_json:
        steps.append(_journal_json())
    else:
        steps.append([
            pl.lit(None, NAIVE_US).alias("_j_ts"),
            pl.lit(None, pl.String).alias("_j_host"),
            pl.lit(False).alias("_j_kern"),
        ])
    steps += _peel(_FACILITY, "_fac")
    steps += _peel(_CLOCK, "_clk")
    steps += _peel(_TAG, "_tag")
    steps += _peel(_MONO, "_mono")
    # ``journalctl -o short-monotonic`` puts the monotonic clock before the host.
    steps += _peel(_TAG, "_tag2", when=pl.col("_tag").struct.field("all").is_null())
    clk = pl.col("_clk").struct
    tag = pl.coalesce(pl.col("_tag").struct.field("tag"), pl.col("_tag2").struct.field("tag"))
    host = pl.coalesce(
        pl.col("_tag").struct.field("host"),
        pl.col("_tag2").struct.field("host"),
        clk.field("ta_host"),
        pl.col("_j_host"),
    )
    header_ts = ts_month_name(clk.field("hh_mon"), clk.field("hh_day"), _hm_to_hms(clk.field("hh_hm")))
    steps.append([
        pl.col("_mono").struct.field("mono").alias("mono"),
        header_ts.alias("_hdr_ts"),
        clk.field("delta").cast(pl.Float64).alias("_delta"),
        (
            pl.col("_fac").struct.field("all").is_not_null()
            | clk.field("ct_mon").is_not_null()
            | clk.field("ta_ts").is_not_null()
            | clk.field("hh_mon").is_not_null()
            | clk.field("delta").is_not_null()
            | pl.col("_mono").struct.field("all").is_not_null()
            | (tag == "kernel").fill_null(False)
            | pl.col("_j_kern")
        ).alias("k_ctx"),
        clk.field("fm_lvl").is_not_null().alias("k_fm"),
        clk.field("fm_lvl").alias("k_fm_lvl"),
        host.alias("k_node"),
    ])
    steps.append([_delta_clock()])
    iso = pl.coalesce(clk.field("iso"), clk.field("ta_ts"))
    # journalctl -o short-full: 'Tue 2024-06-18 02:41:07 UTC'; a zone name other than UTC/GMT
    # says nothing we can convert, so it leaves the offset to --tz.
    sf_tz = clk.field("sf_tz")
    sf_off = (
        pl.when(sf_tz.is_in(["UTC", "GMT"]))
        .then(pl.lit(0, pl.Int32))
        .otherwise(offset_iso(sf_tz.str.replace(r"^([+-]\d{2})(\d{2})$", "$1:$2")))
    )
    epoch = clk.field("epoch").cast(pl.Float64)
    epoch_ts = pl.from_epoch((epoch * 1e6).round(0).cast(pl.Int64), time_unit="us").cast(NAIVE_US)
    steps.append([
        pl.coalesce(
            ts_iso(iso),
            ts_iso(clk.field("sf_ts")),
            epoch_ts,
            ts_month_name(clk.field("ct_mon"), clk.field("ct_day"), clk.field("ct_hms"), clk.field("ct_year")),
            ts_month_name(clk.field("fm_mon"), clk.field("fm_day"), clk.field("fm_hms"), clk.field("fm_year")),
            ts_month_name(clk.field("sy_mon"), clk.field("sy_day"), clk.field("sy_hms")),
            pl.col("_hdr_ts"),
            pl.col("_delta_ts"),
            pl.col("_j_ts"),
        ).alias("k_ts"),
        pl.coalesce(
            offset_iso(iso),
            sf_off,
            pl.when(epoch.is_not_null() | pl.col("_j_ts").is_not_null()).then(pl.lit(0, pl.Int32)),
        ).alias("k_off"),
        ~(
            clk.field("sy_mon").is_not_null() | pl.col("_hdr_ts").is_not_null() | pl.col("_delta_ts").is_not_null()
        ).alias("k_year"),
        pl.col("_delta_ts").is_not_null().alias("k_inferred"),
        pl.when(pl.col("mono").is_not_null())
        .then(pl.format("[{}] {}", pl.col("mono"), pl.col("body")))
        .otherwise(pl.col("body"))
        .alias("msg"),
    ])
    return tuple(steps)


def _journal_json() -> list[pl.Expr]:
    """``{"__REALTIME_TIMESTAMP":"1718678467123456","_HOSTNAME":"n3","MESSAGE":"NVRM: …",…}``."""
    text = pl.col("text")
    field = text.str.json_path_match
    is_journal = text.str.starts_with("{") & text.str.contains('"__REALTIME_TIMESTAMP"', literal=True)
    message = pl.when(is_journal).then(field("$.MESSAGE"))
    usec = pl.when(is_journal).then(field("$.__REALTIME_TIMESTAMP")).cast(pl.Int64, strict=False)
    kernel = (field("$._TRANSPORT") == "kernel") | (field("$.SYSLOG_IDENTIFIER") == "kernel")
    return [
        pl.coalesce(message, pl.col("body")).alias("body"),
        pl.from_epoch(usec, time_unit="us").cast(NAIVE_US).alias("_j_ts"),
        pl.when(is_journal).then(field("$._HOSTNAME")).alias("_j_host"),
        (is_journal & kernel).fill_null(False).alias("_j_kern"),
    ]


def _delta_clock() -> pl.Expr:
    """``dmesg -H``: a ``[Mon D HH:MM]`` header each new minute, then ``[  +s.us]`` deltas.

    A delta line's time is the header plus the deltas since; the header drops the seconds, so
    these times are marked inferred.
    """
    seg = pl.col("_hdr_ts").is_not_null().cum_sum()
    base = pl.col("_hdr_ts").forward_fill()
    since = pl.col("_delta").fill_null(0.0).cum_sum().over(seg)
    ts = base + pl.duration(microseconds=(since * 1e6).round(0).cast(pl.Int64))
    delta_ts = pl.when(pl.col("_delta").is_not_null()).then(ts).otherwise(None).cast(NAIVE_US)
    return delta_ts.alias("_delta_ts")
