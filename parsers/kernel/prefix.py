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

from toranalyze.parser_api import ISO_PATTERN, NAIVE_US, file_starts, offset_iso, ts_iso, ts_month_name

MON = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
DOW = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_HMS = r"[0-9]{2}:[0-9]{2}:[0-9]{2}"
_LEVELS = r"(?:emerg|alert|crit|err|warn|warning|notice|info|debug)"

_FACILITY = (
    r"^(?P<all>(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])"
    rf"\s*:\s*{_LEVELS}\s*:\s)"
)

_CLOCK = (
    r"^(?P<all>(?:"
    rf"\[?(?P<iso>{ISO_PATTERN})\]?:?\s+"
    rf"|{DOW} (?P<sf_ts>[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}} {_HMS}(?:\.[0-9]+)?) (?P<sf_tz>[A-Z]{{2,5}}|[+-][0-9]{{4}})\s+"
    r"|(?P<epoch>[0-9]{9,10}\.[0-9]{6})\s+"
    rf"|\[?{DOW} (?P<ct_mon>{MON}) +(?P<ct_day>[0-9]{{1,2}}) (?P<ct_hms>{_HMS}) (?P<ct_year>[0-9]{{4}})\]?\s+"
    rf"|\[(?P<fm_mon>{MON}) (?P<fm_day>[0-9]{{1,2}}) (?P<fm_year>[0-9]{{4}}) (?P<fm_hms>{_HMS})\] "
    r"\[(?P<fm_lvl>[A-Z]+)\] \[tid [0-9]+\] "
    rf"|(?P<sy_mon>{MON}) +(?P<sy_day>[0-9]{{1,2}}) (?P<sy_hms>{_HMS}(?:\.[0-9]+)?)\s+"
    rf"|(?P<ta_host>[\w.\-]+): kern:\s*{_LEVELS}: \[(?P<ta_ts>{ISO_PATTERN})\]: "
    rf"|\[(?P<hh_mon>{MON}) +(?P<hh_day>[0-9]{{1,2}}) (?P<hh_hm>[0-9]{{2}}:[0-9]{{2}}(?::[0-9]{{2}})?)\]\s*"
    r"|\[\s*\+(?P<delta>[0-9]+\.[0-9]+)\]\s*"
    r"))"
)

# ``host kernel:`` (``kern.info kernel:`` for logread); journald also writes the fabric manager's
# own tag. Other daemons' syslog lines keep their tag in ``body``.
KERNEL_TAGS = ("kernel", "nv-fabricmanager", "nvidia-fabricmanager")
_TAG = (
    rf"^(?P<all>(?:(?:kern|user|daemon|syslog)\.{_LEVELS} |(?P<host>[\w.\-]+) )?"
    rf"(?P<tag>{'|'.join(KERNEL_TAGS)})(?:\[[0-9]+\])?: )"
)

# '[ 1234.567890]', with 'dmesg -d' adding the delta: '[ 1234.567890 <    0.000316>]'.
_MONO = r"^(?P<all>(?:<[0-9]>)?\[\s*(?P<mono>[0-9]+\.[0-9]+)(?:\s*<\s*[0-9]+\.[0-9]+>)?\]\s*)"


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


_SCRATCH = ("_fac", "_clk", "_tag", "_tag2", "_mono", "_hdr_ts", "_delta", "_delta_ts", "_j_ts", "_j_host", "_j_kern")
# The clock layouts of ``_CLOCK``, each by a group that is set whenever the layout matched.
CLOCKS = ("iso", "sf_ts", "epoch", "ct_mon", "fm_lvl", "sy_mon", "ta_ts", "hh_mon", "delta")
# What a block can hold: the clock layouts and the other layers ("journal": journalctl JSON).
ALL_LAYERS = frozenset((*CLOCKS, "_fac", "_mono", "_tag", "_tag2", "journal"))


def peel_prefixes(lines: pl.LazyFrame, journal_json: bool = False) -> pl.LazyFrame:
    """Add ``body``, ``mono``, ``k_ts``, ``k_off``, ``k_year``, ``k_inferred``, ``k_node``,
    ``k_ctx``, ``k_fm``, ``k_fm_lvl`` and ``msg`` to prepared lines.

    ``journal_json`` asks to look for ``journalctl -o json`` records (JSON parsing is skipped
    for chunks without any line starting with ``{``).
    """
    lf = lines
    for exprs in _peel_steps(journal_json) + _finish_steps(ALL_LAYERS):
        lf = lf.with_columns(exprs)
    return lf.drop(_SCRATCH)


def peeled(lines: pl.DataFrame) -> pl.DataFrame:
    """``peel_prefixes`` of a materialized block, whose clock conversions are planned only for the
    layouts its lines hold. A layout no line holds gives only nulls, so leaving its conversion out
    changes nothing; on a small file those conversions cost more than the rest of the peeling."""
    journal = bool(lines["text"].str.starts_with("{").any())
    lf = lines.lazy()
    for exprs in _peel_steps(journal):
        lf = lf.with_columns(exprs)
    layers = lf.collect()
    lf = layers.lazy()
    for exprs in _finish_steps(_held(layers, journal)):
        lf = lf.with_columns(exprs)
    # One chunk per column: detectors reading a frame whose columns are split differently hit a
    # panic in polars' streaming engine (2.1: string views indexed past their chunk).
    return lf.drop(_SCRATCH).collect().rechunk()


def _held(layers: pl.DataFrame, journal: bool) -> frozenset[str]:
    """The layers some line of ``layers`` (peeled, not finished) holds."""
    def some(s: pl.Series) -> bool:
        return s.null_count() < s.len()

    clk = layers["_clk"].struct
    held = {c for c in CLOCKS if some(clk.field(c))}
    held |= {c for c in ("_fac", "_mono", "_tag", "_tag2") if some(layers[c].struct.field("all"))}
    return frozenset(held | ({"journal"} if journal else set()))


@cache
def _peel_steps(journal_json: bool) -> tuple[list[pl.Expr], ...]:
    """The ``with_columns`` steps that cut the layers off ``body``, built once (building them in
    Python cost about as much as running them on a small file)."""
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
    return tuple(steps)


def _any_of(terms: list[pl.Expr], empty: bool) -> pl.Expr:
    """The disjunction of (never null) ``terms``; ``empty`` when there are none."""
    return pl.any_horizontal(terms) if terms else pl.lit(empty)


def _first_of(args: list[pl.Expr], dtype: pl.DataType) -> pl.Expr:
    return pl.coalesce(args) if args else pl.lit(None, dtype)


@cache
def _finish_steps(held: frozenset[str]) -> tuple[list[pl.Expr], ...]:
    """The steps that read the layers cut off: times, offsets, node, kernel context, message.
    Terms of a layer not in ``held`` are left out (they would be null or false on every line)."""
    clk = pl.col("_clk").struct
    tag = pl.coalesce(pl.col("_tag").struct.field("tag"), pl.col("_tag2").struct.field("tag"))
    host = pl.coalesce(
        pl.col("_tag").struct.field("host"),
        pl.col("_tag2").struct.field("host"),
        clk.field("ta_host"),
        pl.col("_j_host"),
    )
    headers = "hh_mon" in held
    deltas = headers and "delta" in held  # a delta line has a time only after a header
    header_ts = ts_month_name(clk.field("hh_mon"), clk.field("hh_day"), _hm_to_hms(clk.field("hh_hm")))
    context = [
        *([pl.col("_fac").struct.field("all").is_not_null()] if "_fac" in held else []),
        *[clk.field(c).is_not_null() for c in ("ct_mon", "ta_ts", "hh_mon", "delta") if c in held],
        *([pl.col("_mono").struct.field("all").is_not_null()] if "_mono" in held else []),
        *([(tag == "kernel").fill_null(False)] if held & {"_tag", "_tag2"} else []),
        *([pl.col("_j_kern")] if "journal" in held else []),
    ]
    steps = [
        [
            pl.col("_mono").struct.field("mono").alias("mono"),
            (header_ts if headers else pl.lit(None, NAIVE_US)).alias("_hdr_ts"),
            (clk.field("delta").cast(pl.Float64, strict=False) if "delta" in held else pl.lit(None, pl.Float64)).alias(
                "_delta"
            ),
            _any_of(context, False).alias("k_ctx"),
            (clk.field("fm_lvl").is_not_null() if "fm_lvl" in held else pl.lit(False)).alias("k_fm"),
            clk.field("fm_lvl").alias("k_fm_lvl"),
            host.alias("k_node"),
        ]
    ]
    steps.append([_delta_clock() if deltas else pl.lit(None, NAIVE_US).alias("_delta_ts")])
    steps.append(_times(held, clk, headers, deltas))
    return tuple(steps)


def _times(held: frozenset[str], clk: pl.expr.struct.ExprStructNameSpace, headers: bool, deltas: bool) -> list[pl.Expr]:
    """k_ts, k_off, k_year, k_inferred and msg from the layouts ``held``."""
    iso = pl.coalesce(clk.field("iso"), clk.field("ta_ts"))
    has_iso = bool(held & {"iso", "ta_ts"})
    # journalctl -o short-full: 'Tue 2024-06-18 02:41:07 UTC'; a zone name other than UTC/GMT
    # says nothing we can convert, so it leaves the offset to --tz.
    sf_tz = clk.field("sf_tz")
    sf_off = (
        pl.when(sf_tz.is_in(["UTC", "GMT"]))
        .then(pl.lit(0, pl.Int32))
        .otherwise(offset_iso(sf_tz.str.replace(r"^([+-][0-9]{2})([0-9]{2})$", "$1:$2")))
    )
    epoch = clk.field("epoch").cast(pl.Float64, strict=False)
    epoch_us = (epoch * 1e6).round(0).cast(pl.Int64, strict=False)
    epoch_ts = pl.from_epoch(epoch_us, time_unit="us").cast(NAIVE_US, strict=False)
    stamps = [
        (has_iso, ts_iso(iso)),
        ("sf_ts" in held, ts_iso(clk.field("sf_ts"))),
        ("epoch" in held, epoch_ts),
        ("ct_mon" in held,
         ts_month_name(clk.field("ct_mon"), clk.field("ct_day"), clk.field("ct_hms"), clk.field("ct_year"))),
        ("fm_lvl" in held,
         ts_month_name(clk.field("fm_mon"), clk.field("fm_day"), clk.field("fm_hms"), clk.field("fm_year"))),
        ("sy_mon" in held, ts_month_name(clk.field("sy_mon"), clk.field("sy_day"), clk.field("sy_hms"))),
        (headers, pl.col("_hdr_ts")),
        (deltas, pl.col("_delta_ts")),
        ("journal" in held, pl.col("_j_ts")),
    ]
    utc = [epoch.is_not_null()] if "epoch" in held else []
    utc += [pl.col("_j_ts").is_not_null()] if "journal" in held else []
    offsets = [
        (has_iso, offset_iso(iso)),
        ("sf_ts" in held, sf_off),
        (bool(utc), pl.when(_any_of(utc, False)).then(pl.lit(0, pl.Int32))),
    ]
    yearless = [
        *([clk.field("sy_mon").is_not_null()] if "sy_mon" in held else []),
        *([pl.col("_hdr_ts").is_not_null()] if headers else []),
        *([pl.col("_delta_ts").is_not_null()] if deltas else []),
    ]
    return [
        _first_of([e for on, e in stamps if on], NAIVE_US).alias("k_ts"),
        _first_of([e for on, e in offsets if on], pl.Int32()).alias("k_off"),
        (~_any_of(yearless, False)).alias("k_year"),
        pl.col("_delta_ts").is_not_null().alias("k_inferred"),
        pl.when(pl.col("mono").is_not_null())
        .then(pl.format("[{}] {}", pl.col("mono"), pl.col("body")))
        .otherwise(pl.col("body"))
        .alias("msg"),
    ]


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
        pl.from_epoch(usec, time_unit="us").cast(NAIVE_US, strict=False).alias("_j_ts"),
        pl.when(is_journal).then(field("$._HOSTNAME")).alias("_j_host"),
        (is_journal & kernel).fill_null(False).alias("_j_kern"),
    ]


def _delta_clock() -> pl.Expr:
    """``dmesg -H``: a ``[Mon D HH:MM]`` header each new minute, then ``[  +s.us]`` deltas.

    A delta line's time is the header plus the deltas since; the header drops the seconds, so
    these times are marked inferred.
    """
    # A segment starts at each header and at each file of a batch (no header carries over).
    seg = (pl.col("_hdr_ts").is_not_null() | file_starts()).cum_sum()
    base = pl.col("_hdr_ts").first().over(seg)
    since = pl.col("_delta").fill_null(0.0).cum_sum().over(seg)
    ts = base + pl.duration(microseconds=(since * 1e6).round(0).cast(pl.Int64, strict=False))
    delta_ts = pl.when(pl.col("_delta").is_not_null()).then(ts).otherwise(None).cast(NAIVE_US, strict=False)
    return delta_ts.alias("_delta_ts")
