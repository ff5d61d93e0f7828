"""Kubelet eviction messages pasted on their own: a pod status ``message:`` (YAML), describe's
``Message:`` field without its block, or the bare sentence copied out of ``kubectl
describe``/``get -o jsonpath`` (also quoted as inline code in an issue: ```The node was low on
resource: memory.```), or the tail of the event recorder's line from ``reason: 'Evicted'`` on.

    message: 'The node was low on resource: memory. Container node was using 35505620Ki,
    The node was low on resource: ephemeral-storage. Container x was using 92Ki, ...
    message: 'Pod The node was low on resource: [MemoryPressure].'

The last is kubelet 1.6's: the node condition in brackets after 'low on resource:', the
sentence behind a stray 'Pod ' (kubernetes/kubernetes#48632).

Events tables and describe blocks carry the same sentence after their own columns; those
layouts are parsed elsewhere, so only a line that *starts* with the sentence counts here.
The row is an ``Evicted`` error: the rules split it by the resource the node ran out of.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.kubernetes.common import sentence_row

from toranalyze.parser_api import conform_raw, file_key

_BARE = (
    r"""^\s*`?(?:message:\s*['"]?|(?P<field>Message:\s*)|(?:type: '\w+' )?reason: '\w+' )?"""
    r"""(?:Pod )?(The node (?:was low on resource: (?:\[\w+\]|[\w-]+)|had condition: \[\w+\]).*?)['"`]?\s*$"""
)


def extract_evictions(lines: pl.LazyFrame) -> pl.LazyFrame:
    """RAW rows for eviction sentences that open a line. Describe's ``Message:`` field counts only
    in a file holding no describe block (a ``Name:`` line): a whole block is read by describe."""
    text = pl.col("text")
    sentence = text.str.extract(_BARE, 2)
    field = text.str.extract(_BARE, 1).is_not_null()
    named = text.str.starts_with("Name:")
    sentences = text.str.contains("The node ", literal=True)
    return conform_raw(
        lines.filter(sentences | named)
        .with_columns(named.any().over(file_key()).alias("_blk"))
        .filter(sentences)
        .with_columns(sentence.alias("_s"), field.alias("_f"))
        .filter(pl.col("_s").is_not_null() & ~(pl.col("_f") & pl.col("_blk")))
        .select(sentence_row("error", "Evicted"))
    )


# Kueue's eviction of a workload for a higher-priority one, the message of the Workload's Evicted condition
# (reason Preempted), quoted out of its status: 'Preempted to accommodate a workload (UID: ..., JobUID: ...) due
# to prioritization in the ClusterQueue'. Read where it opens a line (after a YAML 'message:' or describe's
# 'Message:'), like the kubelet's eviction sentence: Kueue's events carry it after their own columns.
_KUEUE = r"""^\s*`?(?:message:\s*['"]?|Message:\s*)?(Preempted to accommodate a workload\b.*?)['"`]?\s*$"""


def extract_workload_preemptions(lines: pl.LazyFrame) -> pl.LazyFrame:
    """RAW rows for Kueue's preemption sentence opening a line: a ``Preempted`` error."""
    text = pl.col("text")
    return conform_raw(
        lines.filter(text.str.contains("Preempted to accommodate a workload", literal=True))
        .with_columns(text.str.extract(_KUEUE, 1).alias("_s"))
        .filter(pl.col("_s").is_not_null())
        .select(sentence_row("error", "Preempted"))
    )
