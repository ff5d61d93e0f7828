"""tqdm progress bars (HF Trainer, PyTorch Lightning, NeMo), one row per repaint.

The reader splits ``\\r`` repaints into segments, so a bar segment looks like
`` 44%|████▍     | 7/16 [06:59<08:58, 59.78s/it]`` or, with a description and a postfix,
``Epoch 0: :  47%|████▋     | 7/15 [06:19<07:13, reduced_train_loss=11.50, global_step=5.000]``
(the rate may be missing), or ``Epoch 1: : 1it [00:04,  4.36s/it, v_num=d3c7, …]`` when the
total is unknown.

Time: tqdm prints the seconds elapsed since the bar (re)started. A bar starts on a repaint with
elapsed 0; the latest clock stated by any line up to that repaint anchors it, and each repaint's
``ts`` = anchor + elapsed (``ts_inferred``). Bars with no visible start get no ``ts``.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.trainer.common import add_seconds, hms_seconds

from toranalyze.parser_api import NAIVE_US, file_key

_RATE = r"(?:,\s*(?:(?P<rate>[0-9]+(?:\.[0-9]+)?)(?P<unit>s/it|it/s)|\?it/s))?(?:,\s*(?P<post>[^\]]*))?\]"
_WITH_TOTAL = (
    r"(?P<desc>[^|]*?)\s*(?P<pct>[0-9]{1,3})%\|[^|]*\|\s*(?P<n>[0-9]+)/(?P<total>[0-9]+)\s*"
    r"\[(?P<elapsed>[0-9:]+)(?:<[^,\]]*)?" + _RATE
)
_NO_TOTAL = r"(?P<desc>[^|\[]*?)\s*(?P<n>[0-9]+)it \[(?P<elapsed>[0-9:]+)" + _RATE

NOISE: tuple[str, ...] = (r"[0-9]%\|[^|]*\|\s*[0-9]+/[0-9]+\s*\[[0-9:]+", r"[0-9]+it \[[0-9:]+[,\]]")

_EVAL_DESC = r"(?i)validat|sanity|test|predict|evaluat"
_UP_TO_BAR = r"^(.*?(?:[0-9]+/[0-9]+|[0-9]+it) \[[^\]]*\])"  # the repaint without what is glued after it
_KINDS = ("train_epoch", "eval", "sanity", "plain", "other")


def bars(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Bar repaints: line, _i, desc, bar (train_epoch | eval | sanity | plain | other), n, total,
    elapsed_s, s_per_it, post, ts, ts_inferred."""
    t = pl.col("text")
    a = t.str.extract_groups(_WITH_TOTAL)
    b = t.str.extract_groups(_NO_TOTAL)
    has_a = a.struct.field("n").is_not_null()

    def pick(name: str) -> pl.Expr:
        return pl.when(has_a).then(a.struct.field(name)).otherwise(b.struct.field(name))

    rate = pick("rate").cast(pl.Float64, strict=False)
    unit = pick("unit")
    s_per_it = pl.when(unit == "s/it").then(rate).when((unit == "it/s") & (rate > 0)).then(1.0 / rate)
    desc = pick("desc").str.strip_chars()
    bar = (
        pl.when(desc.str.contains(r"(?i)sanity")).then(pl.lit("sanity"))
        .when(desc.str.contains(_EVAL_DESC)).then(pl.lit("eval"))
        .when(desc.str.contains(r"Epoch [0-9]+")).then(pl.lit("train_epoch"))
        .when(desc.str.strip_chars(" :") == "").then(pl.lit("plain"))
        .otherwise(pl.lit("other"))
    )
    prefilter = t.str.contains("%|", literal=True) | t.str.contains("it [", literal=True)
    rows = (
        lines.with_columns(pl.col("clock").forward_fill().over(file_key()).alias("_clock_ff"))
        .filter(prefilter)
        .with_columns(
            desc.alias("desc"),
            bar.alias("bar"),
            pick("n").cast(pl.Int64, strict=False).alias("n"),
            a.struct.field("total").cast(pl.Int64, strict=False).alias("total"),
            hms_seconds(pick("elapsed")).alias("elapsed_s"),
            s_per_it.alias("s_per_it"),
            pick("post").alias("post"),
        )
        .filter(pl.col("n").is_not_null() & pl.col("elapsed_s").is_not_null())
    )
    is_start = pl.col("elapsed_s") == 0

    def placed(anchor: pl.Expr) -> pl.Expr:
        return add_seconds(pl.when(is_start).then(anchor).forward_fill().over("bar", file_key()), pl.col("elapsed_s"))

    # A bar starting after repaints of another kind of bar (validation after training steps) is
    # anchored at whichever is later: the last clock of a line or the last such repaint. Bars of the
    # same kind are not chained: several ranks print the same bar one after the other.
    first = placed(pl.col("_clock_ff"))
    bar = pl.col("bar")
    last_other = pl.lit(None, NAIVE_US)
    for kind in _KINDS:
        seen = pl.when(bar != kind).then(pl.col("_first")).shift(1).forward_fill().over(file_key())
        last_other = pl.when(bar == kind).then(seen).otherwise(last_other)
    later = pl.max_horizontal(pl.col("_clock_ff"), last_other)
    return (
        rows.with_columns(first.alias("_first"))
        .with_columns(later.alias("_later"))
        .with_columns(placed(pl.col("_later")).alias("ts"))
        .with_columns(pl.col("ts").is_not_null().alias("ts_inferred"))
        .with_columns(pl.coalesce(t.str.extract(_UP_TO_BAR, 1), t).str.strip_chars().alias("text"))
        .select("line", "_i", "text", "desc", "bar", "n", "total", "elapsed_s", "s_per_it", "post", "ts", "ts_inferred")
    )


def post_field(name: str) -> str:
    """Regex for a ``name=value`` postfix item; group 1 is the value."""
    return rf"(?:^|,\s*){name}=([^,\]]+)"
