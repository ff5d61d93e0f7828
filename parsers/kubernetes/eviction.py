"""Kubelet eviction messages pasted on their own: a pod status ``message:`` (YAML), or the bare
sentence copied out of ``kubectl describe``/``get -o jsonpath``.

    message: 'The node was low on resource: memory. Container node was using 35505620Ki,
    The node was low on resource: ephemeral-storage. Container x was using 92Ki, ...

Events tables and describe blocks carry the same sentence after their own columns; those
layouts are parsed elsewhere, so only a line that *starts* with the sentence counts here.
The row is an ``Evicted`` error: the rules split it by the resource the node ran out of.
"""

from __future__ import annotations

import polars as pl

from toranalyze.schema import conform_raw

_BARE = r"""^\s*(?:message:\s*['"]?)?(The node (?:was low on resource: [\w-]+|had condition: \[\w+\]).*?)['"]?\s*$"""


def extract_evictions(lines: pl.LazyFrame) -> pl.LazyFrame:
    """RAW rows for eviction sentences that open a line."""
    text = pl.col("text")
    sentence = text.str.extract(_BARE, 1)
    return conform_raw(
        lines.filter(text.str.contains("The node ", literal=True))
        .with_columns(sentence.alias("_s"))
        .filter(pl.col("_s").is_not_null())
        .select(
            pl.col("line"),
            pl.lit("error").alias("kind"),
            pl.lit("error").alias("severity"),
            pl.lit("Evicted").alias("state"),
            pl.concat_str([pl.lit("Evicted: "), pl.col("_s")]).alias("message"),
        )
    )
