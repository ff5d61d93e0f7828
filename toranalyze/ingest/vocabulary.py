"""The failure vocabulary on lines no parser claimed: a framer, one prefilter, one row per hit.

Family parsers read the layouts they know and win wherever they recognise one. A known failure
message inside a wrapper none of them frames (a collector's stamp, a syslog or klog head, a CRI
``stdout F`` prefix, a JSON log envelope, a logger's level tag) would otherwise be lost. So the
lines of a block that no parser's row and no noise pattern covers go through

1. the framer (``frame``): wrappers peeled from the front, a few passes, keeping the time they
   state; a JSON envelope gives its message field;
2. the vocabulary: every rule marked ``anywhere = true`` (``docs/rules.md``), whose text is
   specific enough to mean the same failure whatever file it is in. Their patterns compile into
   one alternation, searched once on the framed lines; a line it hits becomes an ``error`` row of
   the source of the first such rule it matches, and classification then treats it like any row of
   that source (the family's rule chain decides the class).

The prefilter is the fast path: a big log's unclaimed lines are mostly chatter it rejects in one
pass, and the per-rule test runs only on its hits. Before the framer runs at all, on a big block
(``prefilter.worth``), one scan of the lines' text (``prefilter.candidate_lines``) keeps the lines
that can hold a match of a rule, of the loss patterns or of a stated size anywhere in them, and
those carrying a JSON envelope (whose message is unescaped): the framer only cuts a message out of
its line.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import polars as pl

from toranalyze.ingest.classify import Rule, load_rules
from toranalyze.ingest.clock import ISO_PATTERN, offset_iso, ts_glog, ts_iso, ts_month_name
from toranalyze.ingest.lines import ENVELOPE_TIME, json_unescaped
from toranalyze.ingest.prefilter import candidate_lines, worth
from toranalyze.schema import MESSAGE_MAX, NAIVE_US

# Wrappers the line preparation (lines.py) leaves, each anchored at the start, with the stamp it
# states (named groups): CRI, a logger's ISO stamp and level, syslog, klog/glog, epoch seconds, a
# 'host | ' collector column and a bare level tag.
_WRAPPERS = (
    rf"(?P<cri>{ISO_PATTERN}) (?:stdout|stderr) [FP] ",
    rf"\[?(?P<iso>{ISO_PATTERN})\]?\s*(?:[-|:]\s*)?(?:\[?[\w.\-]+\]?\s*[-|:]\s*)?"
    r"(?:\[?(?:DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL)\]?\s*[-|:]?\s*)?",
    r"(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>[0-9]{1,2}) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?) (?:[\w.\-]+ )?"
    r"(?:[\w.\-/]+(?:\[[0-9]+\])?: )?",
    r"[IWEF](?P<mmdd>[0-9]{4}) (?P<ghms>[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]+)\s+[0-9]+ [\w.\-]+:[0-9]+\] ",
    r"(?P<epoch>1[0-9]{9})(?:[.,][0-9]+)?\s+",
    r"[\w.\-]+ \| ",
    r"\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\]?(?::|\s+-)\s+",
)
WRAPPER = "^(?:" + "|".join(_WRAPPERS) + ")"
_PASSES = 3
# The message field of a JSON log envelope (docker json-file, fluent-bit, cloud logging).
_ENVELOPE = r'"(?:log|message|msg|textPayload|MESSAGE)"\s*:\s*"((?:[^"\\]|\\.)*)"'


@dataclass(frozen=True)
class Vocabulary:
    """The rules that stand alone, and their patterns as one prefilter."""

    rules: tuple[Rule, ...]
    prefilter: str

    def __bool__(self) -> bool:
        return bool(self.rules)


def vocabulary_of(rules: list[Rule] | tuple[Rule, ...]) -> Vocabulary:
    words = tuple(r for r in rules if r.anywhere and r.match)
    return Vocabulary(words, "|".join(f"(?:{r.match})" for r in words))


@lru_cache(maxsize=8)
def vocabulary_for(user_rules: tuple[str, ...] = ()) -> Vocabulary:
    """The vocabulary of the built-in rules and of the user's rules files (read once per process)."""
    return vocabulary_of(load_rules(user_rules))


def frame(lines: pl.DataFrame) -> pl.DataFrame:
    """(line, text) -> (line, message, ts, ts_offset_s, ts_year_known): wrappers peeled.

    The first stamp found is the line's time (a later one is the wrapped message's own)."""
    env = pl.col("text").str.extract(_ENVELOPE, 1)
    df = lines.select(
        "line",
        pl.when(env.is_not_null()).then(json_unescaped(env)).otherwise(pl.col("text")).alias("message"),
        pl.col("text").str.extract(ENVELOPE_TIME, 1).alias("_iso"),
    ).with_columns(ts_iso(pl.col("_iso")).alias("ts"), offset_iso(pl.col("_iso")).alias("ts_offset_s"),
                   pl.lit(True).alias("ts_year_known")).drop("_iso")
    for _ in range(_PASSES):
        has = pl.col("message").str.contains(WRAPPER)
        if not df.select(has.any()).item():
            break
        g = pl.col("message").str.extract_groups(WRAPPER)
        df = df.with_columns(g.alias("_g")).with_columns(_stamp(pl.col("_g"))).with_columns(
            pl.coalesce("ts", "_ts").alias("ts"),
            pl.when(pl.col("ts").is_null()).then(pl.col("_off")).otherwise(pl.col("ts_offset_s")).alias("ts_offset_s"),
            pl.when(pl.col("ts").is_null() & pl.col("_ts").is_not_null()).then(pl.col("_yk"))
            .otherwise(pl.col("ts_year_known")).alias("ts_year_known"),
            pl.col("message").str.replace(WRAPPER, ""),
        ).drop("_g", "_ts", "_off", "_yk")
    return df.with_columns(pl.col("message").str.strip_chars())


def _stamp(g: pl.Expr) -> list[pl.Expr]:
    """A wrapper's stamp (naive), its stated offset and whether its year is known."""
    f = g.struct.field
    iso = pl.coalesce(f("cri"), f("iso"))
    epoch = pl.from_epoch(f("epoch").cast(pl.Int64, strict=False), time_unit="s").cast(NAIVE_US, strict=False)
    ts = pl.coalesce(ts_iso(iso), epoch, ts_month_name(f("mon"), f("day"), f("hms")), ts_glog(f("mmdd"), f("ghms")))
    off = pl.when(iso.is_not_null()).then(offset_iso(iso)).when(f("epoch").is_not_null()).then(pl.lit(0, pl.Int32))
    year_known = iso.is_not_null() | f("epoch").is_not_null()
    return [ts.alias("_ts"), off.cast(pl.Int32, strict=False).alias("_off"), year_known.alias("_yk")]


# A job's size stated in passing: 'WORLD_SIZE=16' (an environment dump), 'world size: 32',
# "'world_size': 8" (a config printed as a dict). LOCAL_WORLD_SIZE and per-node counts do not match.
SIZE = r"""(?i)(?:^|[\s,{(])['"]?(?:WORLD_SIZE|world[ _]size)['"]?\s*[=:]\s*([0-9]+)\b"""


def vocabulary_rows(lines: pl.DataFrame, vocab: Vocabulary) -> pl.DataFrame | None:
    """Rows (RAW_SCHEMA columns, with ``parser`` and ``source``) for the framed ``lines`` (line,
    text) the vocabulary knows, and ``info`` rows for lines stating the job's size (``SIZE``);
    None when there is none."""
    if not vocab or lines.height == 0:
        return None
    if worth(lines.height):
        lines = lines.filter(candidate_lines(lines["text"], _wanted(vocab)))
    return framed_rows(lines, vocab)


def framed_rows(lines: pl.DataFrame, vocab: Vocabulary) -> pl.DataFrame | None:
    """``vocabulary_rows`` without the prefilter: every line framed and searched."""
    if lines.height == 0:
        return None
    framed = frame(lines)
    # First found keeps its line: a failure the rules know, a run of non-finite losses, a size.
    parts = [p for p in (_failure_rows(framed, vocab), _diverged_rows(framed), _size_rows(framed)) if p is not None]
    if not parts:
        return None
    return pl.concat(parts, how="diagonal").unique("line", keep="first", maintain_order=True)


@lru_cache(maxsize=8)
def _wanted(vocab: Vocabulary) -> tuple[str, ...]:
    """What makes a line worth framing: a rule's pattern, a stated loss or size, a JSON envelope."""
    return (*(r.match or "" for r in vocab.rules), _VALUE, SIZE, _ENVELOPE_KEY)


_ENVELOPE_KEY = r'"(?:log|message|msg|textPayload|MESSAGE)"\s*:\s*"'


def _size_rows(framed: pl.DataFrame) -> pl.DataFrame | None:
    sized = framed.filter(pl.col("message").str.contains(SIZE))
    if sized.height == 0:
        return None
    return sized.select(
        "line", pl.lit("info").alias("kind"), pl.lit("info").alias("severity"),
        pl.col("message").str.strip_chars().str.slice(0, MESSAGE_MAX).alias("message"),
        "ts", "ts_offset_s", "ts_year_known",
        pl.col("message").str.extract(SIZE, 1).cast(pl.Int32, strict=False).alias("n_gpus"),
        pl.lit("vocabulary").alias("parser"), pl.lit("trainer").alias("source"),
    )


# A loss or gradient norm a trainer's own step line states ('Loss nan', "'grad_norm': nan",
# 'act_loss: inf', '[Loss] nan', 'loss: 2.31 (2.40)'), in any layout no parser reads. One
# non-finite value is what a healthy fp16 run prints when it skips a step; RUN of them in a row,
# with no finite value between, is a diverged run (numerics, rule trainer-loss-nonfinite-run).
_VALUE = r"""(?i)(?:\b|_)(?:loss|grad[_ ]norm)\b['"\]]?\s*[:=]?\s*['"]?(?:nan|[-+]?inf(?:inity)?\b|[-+]?\.?[0-9])"""
_NONFINITE = r"""(?i)(?:\b|_)(?:loss|grad[_ ]norm)\b['"\]]?\s*[:=]?\s*['"]?(?:nan|[-+]?inf(?:inity)?)\b"""
RUN = 2


def _diverged_rows(framed: pl.DataFrame) -> pl.DataFrame | None:
    stated = framed.filter(pl.col("message").str.contains(_VALUE))  # (in line order)
    if stated.height < RUN:
        return None
    bad = stated.with_columns(pl.col("message").str.contains(_NONFINITE).alias("_bad"))
    runs = (bad.with_columns(pl.col("_bad").rle_id().alias("_run")).filter(pl.col("_bad"))
            .group_by("_run", maintain_order=True).agg(pl.len().alias("_n"), pl.all().exclude("_n").first())
            .filter(pl.col("_n") >= RUN))
    if runs.height == 0:
        return None
    said = pl.format("non-finite loss or gradient norm logged {} times in a row: {}", "_n",
                     pl.col("message").str.strip_chars().str.slice(0, 400))
    return runs.select("line", pl.lit("error").alias("kind"), pl.lit("error").alias("severity"),
                       said.alias("message"), "ts", "ts_offset_s", "ts_year_known",
                       pl.lit("vocabulary").alias("parser"), pl.lit("trainer").alias("source"))


def _failure_rows(framed: pl.DataFrame, vocab: Vocabulary) -> pl.DataFrame | None:
    hits = framed.filter(pl.col("message").str.contains(vocab.prefilter))
    if hits.height == 0:
        return None
    first, idx, kinds, sources = _lookup(vocab)
    hits = hits.with_columns(first.alias("_i")).filter(pl.col("_i").is_not_null())
    return hits.select(
        "line",
        pl.col("_i").replace_strict(idx, kinds).alias("kind"),
        pl.lit("error").alias("severity"),
        pl.col("message").str.strip_chars().str.slice(0, MESSAGE_MAX).alias("message"),
        "ts", "ts_offset_s", "ts_year_known",
        pl.lit("vocabulary").alias("parser"),
        pl.col("_i").replace_strict(idx, sources).alias("source"),
    )


@lru_cache(maxsize=8)
def _lookup(vocab: Vocabulary) -> tuple[pl.Expr, pl.Series, pl.Series, pl.Series]:
    """The first vocabulary rule a message meets (one when-chain), and each rule's kind and source:
    built once per vocabulary, not per block."""
    first: pl.Expr = pl.lit(None, pl.Int32)
    for i, rule in reversed(list(enumerate(vocab.rules))):
        first = pl.when(pl.col("message").str.contains(rule.match or "")).then(pl.lit(i, pl.Int32)).otherwise(first)
    idx = pl.Series(range(len(vocab.rules)), dtype=pl.Int32)
    kinds = pl.Series([_kind(r) for r in vocab.rules], dtype=pl.String)
    sources = pl.Series([r.source[0] if r.source else "trainer" for r in vocab.rules], dtype=pl.String)
    return first, idx, kinds, sources


def _kind(rule: Rule) -> str:
    return "error" if not rule.kind or "error" in rule.kind else rule.kind[0]
