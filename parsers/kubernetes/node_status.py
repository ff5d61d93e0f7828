"""The node controller's word on a node that stopped reporting, quoted on its own line: a test
harness or an operator printing a node's Ready condition, or a user pasting the sentence.

    INFO: Condition Ready of node gke-n1 is false instead of true. Reason: NodeStatusUnknown,
    message: Kubelet stopped posting node status.   (one line)

A conditions table, an Events row, klog records and object fields carry the same sentence in their
own columns; those layouts are parsed elsewhere, so a line holding any of their marks is left to
them. The row is a ``NodeStatusUnknown`` node state of the node the line names before the sentence.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.kubernetes.common import sentence_row

from toranalyze.parser_api import conform_raw

_SENTENCE = r"(Kubelet stopped posting node status\.?)"
_NODE = r"""\b[Nn]ode ['"`]?([a-z0-9][\w.-]*[a-z0-9])['"`]?[\s,:].*Kubelet stopped posting"""
# Layouts with their own reader (table columns, Events rows, klog, operators, JSON fields).
_ELSEWHERE = r"""\s{2,}Kubelet stopped|\.go:[0-9]+\]|msg=|"message"\s*:|\s(?:Normal|Warning)\s"""


def extract_node_status(lines: pl.LazyFrame) -> pl.LazyFrame:
    """RAW rows for 'Kubelet stopped posting node status' quoted outside a table or record."""
    text = pl.col("text")
    return conform_raw(
        lines.filter(text.str.contains("Kubelet stopped posting", literal=True))
        .filter(~text.str.contains(_ELSEWHERE))
        .with_columns(text.str.extract(_SENTENCE, 1).alias("_s"), text.str.extract(_NODE, 1).alias("node"))
        .select(*sentence_row("error", "NodeStatusUnknown"), pl.col("node"))
        .with_columns(pl.lit("node_state").alias("kind"))
    )
