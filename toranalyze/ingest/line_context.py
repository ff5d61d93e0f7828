"""Context a parser's rows take from their lines: peeled prefixes and shell prompts above them."""

from __future__ import annotations

import polars as pl

from toranalyze.ingest.numbering import FILE_LINES, file_key


def with_prefix_context(events: pl.DataFrame, prepared: pl.DataFrame) -> pl.DataFrame:
    """Fill time/node/rank from the line's peeled prefixes where the parser left them null."""
    cols = ["p_ts", "p_off", "p_node", "p_rank", "p_local"]
    if all(prepared[c].null_count() == prepared.height for c in cols):
        return events  # no line has a prefix (null_count is known without a search)
    # A line's first segment gives its context (prepared lines are in line order); only lines
    # with a prefix give any, and most lines of a big log have none.
    first = pl.col("line") != pl.col("line").shift(1)
    ctx = prepared.select("line", *cols).filter(first.fill_null(True))
    ctx = ctx.filter(pl.any_horizontal(pl.col(cols).is_not_null()))
    joined = events.join(ctx, on="line", how="left")
    use_prefix_ts = pl.col("ts").is_null() & pl.col("p_ts").is_not_null()
    return joined.with_columns(
        pl.when(use_prefix_ts).then(pl.col("p_ts")).otherwise(pl.col("ts")).alias("ts"),
        pl.when(use_prefix_ts).then(pl.col("p_off")).otherwise(pl.col("ts_offset_s")).alias("ts_offset_s"),
        pl.when(use_prefix_ts).then(pl.lit(True)).otherwise(pl.col("ts_year_known")).alias("ts_year_known"),
        pl.coalesce("node", "p_node").alias("node"),
        pl.coalesce("rank", "p_rank", "p_local").alias("rank"),
    ).drop("p_ts", "p_off", "p_node", "p_rank", "p_local")


# A shell prompt pasted above a command's output ('root@node4:~# dmesg -T', '(venv) me@gpu-3:~/run$
# nvidia-smi', zsh's 'me@cn-234 ~ % nvidia-smi', tcsh's and SUSE's 'me@nid002070:/scratch/run> python3 x.py',
# a paste's code fence glued to it: '```me@DLSY:~$ nvidia-smi', and bash's default on Red Hat and its kin,
# '[root@skl-node-1 eris]# dmesg -T'): the output below it, up to the next prompt of its file, came from that host.
_PROMPT = (
    r"^(?:```)?(?:\([\w.\-]+\)\s+)?"
    r"(?:\[[\w.\-]+@([\w.\-]+) [^\]\s]+\][#$] |[\w.\-]+@([\w.\-]+)(?::\S*[#$>]| (?:~|/)\S* [%#$]) )"
)


def with_prompt_hosts(events: pl.DataFrame, prepared: pl.DataFrame) -> pl.DataFrame:
    """Events that name no node take the host of the nearest shell prompt above them in their file."""
    if events.height == 0 or events["node"].null_count() == 0:
        return events
    at = prepared.filter(pl.col("raw").str.contains("@", literal=True))
    prompts = at.filter(pl.col("raw").str.contains(_PROMPT)).select(
        pl.col("line").alias("_at"),
        pl.coalesce(pl.col("raw").str.extract(_PROMPT, 1), pl.col("raw").str.extract(_PROMPT, 2)).alias("_host"),
    )
    if prompts.height == 0:
        return events
    ordered = events.with_row_index("_r").sort("line")
    joined = ordered.join_asof(prompts.unique("_at", keep="first").sort("_at"), left_on="line", right_on="_at")
    # The files of a batch are FILE_LINES apart: a prompt of an earlier file names nothing here.
    same_file = (pl.col("_at") // FILE_LINES) == file_key()
    host = pl.when(same_file).then(pl.col("_host"))
    return joined.sort("_r").with_columns(pl.coalesce("node", host).alias("node")).drop("_r", "_at", "_host")
