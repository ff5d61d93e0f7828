"""Shared pieces of the trainer parser: cleaned text, wall clocks found on lines, number fields.

Every framework module receives the prepared lines *enriched* by ``enrich``:

* ``text`` with ANSI colour codes removed (torchtitan and Lightning colour their output);
* ``_i``: the segment's position in the file (``\\r`` segments share a line number);
* ``clock`` / ``clock_off``: a wall-clock time the line states (a peeled prefix, a Megatron
  ``datetime:`` banner, an HF ``[INFO|file:N] ts >>`` record, a ``[NeMo I ts …]`` record, a
  Python-logging ``ts - name - LEVEL -`` record). Used as anchors to place records that print
  no clock of their own (Megatron iterations, tqdm bars).

Framework modules return ``part`` frames: RAW_SCHEMA columns plus ``_level``, which ranks the
sources of ``step`` rows (0 = the trainer's own records, 1 = DeepSpeed's engine ``step=`` lines,
2 = bare tqdm bars; the parser keeps steps from the best level present), and ``_bar``, set on
progress-bar repaints (which several ranks print one after the other).
"""

from __future__ import annotations

import polars as pl

from toranalyze.parser_api import NAIVE_US, conform_raw, fill_where, ts_iso

ANSI = r"\x1b\[[0-9;?]*[A-Za-z]"

# A float as trainers print it, including nan/inf spellings.
NUM = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
NUM_OR_NAN = rf"(?:{NUM}|[-+]?(?i:nan|inf(?:inity)?))"

_ISO_MS = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?"
# In-text clocks, first match wins. Group 1 is the timestamp.
_CLOCKS = (
    rf"\bdatetime: ({_ISO_MS})",  # Megatron print_datetime banners
    rf"^\[[A-Z]+\|[\w.\-]+:[0-9]+\] ({_ISO_MS}) >>",  # HF transformers logging
    rf"^\[NeMo [IWEDC] ({_ISO_MS}) ",  # NeMo logging
    rf"^(?:\[titan\] )?({_ISO_MS}) - [\w.\-]+ - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - ",  # python logging
)

LEVEL_TRAINER = 0
LEVEL_DEEPSPEED = 1
LEVEL_TQDM = 2

# What starts an attempt (within one, a step is reported once).
ATTEMPT_STARTS = ("init", "init_done", "ckpt_load")
# Begin and end records: consecutive rows of one (same kind, step, state) are one record, timed
# at its first row (a begin) or its last (an end).
RECORD_BEGINS = ("init", "ckpt_save_begin", "eval_begin")
RECORD_ENDS = ("init_done", "ckpt_save_end", "ckpt_load", "eval_end")


def is_exit() -> pl.Expr:
    kind = pl.col("kind")
    return ((kind == "job_end") | ((kind == "info") & (pl.col("state") == "EXIT"))).fill_null(False)


def collapsible_kind() -> pl.Expr:
    """Rows that consecutive rows of the same record collapse into (begins, ends, exits)."""
    return pl.col("kind").is_in(RECORD_BEGINS + RECORD_ENDS) | is_exit()


# Hints: columns only lines carried from an earlier block of the file hold (see ``carry``), null
# on a block's own lines and absent from a file's first block.
CARRIED_STEP = "carried_step"  # the step the earlier block gave the record on the line
CARRIED_SEEN = "carried_seen"  # the bar steps reported so far in that record's attempt, as ranges
CARRIED_OPEN = "carried_open"  # the line is part of an open begin/end/exit record (carry._open_record)
SEEN_DTYPE = pl.List(pl.Struct({"lo": pl.Int64, "hi": pl.Int64}))


# HF example scripts log with datefmt "%m/%d/%Y %H:%M:%S": '05/25/2021 06:35:01 - WARNING - __main__ - …'.
_US_CLOCK = r"^([0-9]{2}/[0-9]{2}/[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}) - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - "


def enrich(lines: pl.LazyFrame) -> pl.DataFrame:
    """Prepared lines + ANSI-free text + the clock each line states (see module doc)."""
    df = lines.collect()
    if df.select(pl.col("text").str.contains("\x1b", literal=True).any()).item():
        df = df.with_columns(pl.col("text").str.replace_all(ANSI, ""))
    return (
        df.with_columns(_stated_clock(df))
        .with_columns(
            pl.coalesce(pl.col("p_ts"), pl.col("_stated")).alias("clock"),
            pl.when(pl.col("p_ts").is_not_null()).then(pl.col("p_off")).otherwise(None).alias("clock_off"),
        )
        .drop("_stated")
        .sort("line", maintain_order=True)
        .with_row_index("_i")
    )


def may_state_clock() -> pl.Expr:
    """Whether ``_stated_clock`` can find a clock in the (ANSI-free) text: every clock pattern needs
    'datetime: ' or a line starting with '[' or a digit (two searches: one regex of both ran far
    slower, having no literal search left)."""
    text = pl.col("text")
    return text.str.contains("datetime: ", literal=True) | text.str.contains(r"^[\[0-9]")


# Every clock pattern holds an ISO date and time, or starts with a US one.
_SOME_CLOCK = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}|^[0-9]{2}/[0-9]{2}/[0-9]{4} [0-9]{2}:"


def _stated_clock(df: pl.DataFrame) -> pl.Series:
    """The clock stated in each line's text (null where none).

    Every clock pattern needs 'datetime: ' or a line starting with '[' or a digit, and a date:
    the patterns run on those lines only (a big log's NCCL chatter and iteration records hold
    none, nor do the logger lines whose stamp was peeled)."""
    text = pl.col("text")
    may = df.select(may_state_clock()).to_series()
    may = fill_where(may, df, may, text.str.contains(_SOME_CLOCK))
    in_text = pl.coalesce([text.str.extract(p, 1) for p in _CLOCKS])
    us_clock = text.str.extract(_US_CLOCK, 1).str.strptime(NAIVE_US, "%m/%d/%Y %H:%M:%S", strict=False)
    none = pl.Series("_stated", [], NAIVE_US).extend_constant(None, df.height)
    return fill_where(none, df, may, pl.coalesce(ts_iso(in_text), us_clock))


def seen_steps(hinted: pl.DataFrame) -> pl.DataFrame:
    """``line`` and ``step``: each bar step the ``carried_seen`` hints of ``hinted`` name."""
    ranges = hinted.select("line", pl.col(CARRIED_SEEN).alias("_r")).explode("_r").unnest("_r")
    steps = ranges.select("line", pl.int_ranges("lo", pl.col("hi") + 1).alias("step")).explode("step")
    return steps.drop_nulls("step")


def field(pattern: str, col: str = "text") -> pl.Expr:
    """Float captured by group 1 of ``pattern`` (nan/inf included); null when absent."""
    return to_float(pl.col(col).str.extract(pattern, 1))


def to_float(s: pl.Expr) -> pl.Expr:
    """Text number -> Float64. Quotes, blanks and thousands commas are dropped; the cast itself reads
    every nan/inf spelling trainers print (nan, NaN, -nan, inf, Infinity, …)."""
    return s.str.strip_chars(" '\"").str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)


def to_int(s: pl.Expr) -> pl.Expr:
    return s.str.replace_all(",", "", literal=True).cast(pl.Int64, strict=False)


def hms_seconds(s: pl.Expr) -> pl.Expr:
    """'07:41:19', '41:19', '1 day, 3:04:05', '2d 3:04:05' -> seconds (Float64)."""
    g = s.str.extract_groups(r"(?:([0-9]+)\s*d(?:ays?)?,?\s*)?(?:([0-9]+):)?([0-9]+):([0-9]+(?:\.[0-9]+)?)$")
    days = g.struct.field("1").cast(pl.Float64, strict=False).fill_null(0)
    hours = g.struct.field("2").cast(pl.Float64, strict=False).fill_null(0)
    mins = g.struct.field("3").cast(pl.Float64, strict=False)
    secs = g.struct.field("4").cast(pl.Float64, strict=False)
    return days * 86400 + hours * 3600 + mins * 60 + secs


def add_seconds(ts: pl.Expr, seconds: pl.Expr) -> pl.Expr:
    return ts + pl.duration(microseconds=(seconds * 1e6).round(0).cast(pl.Int64, strict=False))


def part(frame: pl.LazyFrame, level: int = LEVEL_TRAINER, bar: bool = False) -> pl.LazyFrame:
    """A module's output: RAW_SCHEMA columns plus the step-source level and whether the rows are
    progress-bar repaints (several ranks repaint the same bar one after the other)."""
    return conform_raw(frame).with_columns(pl.lit(level, pl.Int8).alias("_level"), pl.lit(bar).alias("_bar"))


def message() -> pl.Expr:
    return pl.col("text").str.strip_chars()
