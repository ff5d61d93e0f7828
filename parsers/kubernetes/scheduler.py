"""The scheduler's reason a pod stays pending, quoted on its own line: a test harness or an
operator printing it, or a user pasting only the sentence.

    pod cannot be scheduled: 0/5 nodes are available: 5 Insufficient nvidia.com/gpu.

An Events row, a klog or operator record, a describe ``Message:`` and an object's ``message:``
field carry the same sentence after their own columns; those layouts are parsed elsewhere, so a
line holding any of their marks is left to them, unless the sentence itself is quoted as inline code
(a backtick right before it, which none of those layouts prints):

    The job gets stuck pending with a 'FailedScheduling' event and the message ` 0/2 nodes are available: ...`

The row is a ``FailedScheduling`` warning.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.kubernetes.common import sentence_row

from toranalyze.parser_api import conform_raw

_SENTENCE = r"""(?:^|[\s:"'`(])([0-9]+/[0-9]+ nodes are available: .*?)['"`)]?\s*$"""
# Layouts with their own reader (Events rows, klog, operators, describe and YAML/JSON fields).
_ELSEWHERE = r"FailedScheduling|Unschedulable|\.go:[0-9]+\]|msg=|\"message\"|[Mm]essage:|\s(?:Normal|Warning)\s"
_INLINE_CODE = r"`\s*[0-9]+/[0-9]+ nodes are available: "


def extract_unschedulable(lines: pl.LazyFrame) -> pl.LazyFrame:
    """RAW rows for the scheduler's 'N/M nodes are available: ...' sentence quoted alone."""
    text = pl.col("text")
    return conform_raw(
        lines.filter(text.str.contains(" nodes are available: ", literal=True))
        .filter(~text.str.contains(_ELSEWHERE) | text.str.contains(_INLINE_CODE))
        .with_columns(text.str.extract(_SENTENCE, 1).alias("_s"))
        .filter(pl.col("_s").is_not_null())
        .select(sentence_row("warning", "FailedScheduling"))
    )
