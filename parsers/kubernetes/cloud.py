"""A node's virtual machine taken back by its cloud: the record the provider keeps of it.

    NAME            TYPE                         TARGET                              ... TIMESTAMP
    systemevent-... compute.instances.preempted  us-central1-a/instances/gke-pool-9e51 ... 2025-05-07T08:20:20-07:00

(``gcloud compute operations list``; audit-log entries name the same ``compute.instances.preempted``
method and the instance path.) A spot or preemptible node of a Kubernetes cluster goes this way:
the row is a ``Preempted`` node state on the instance, which is the node's name.

AWS says it in two more ways: the interruption notice of a spot instance (the EventBridge event 'EC2 Spot
Instance Interruption Warning', an agent's 'Spot interruption payload received: {"action":"terminate",...}'),
and AWS Batch's status reason of a job whose host went away ('Status Reason: Host EC2 (instance i-0abc...)
terminated.'). Both are ``Preempted`` states too, of the EC2 instance when the line names one.
"""

from __future__ import annotations

import polars as pl

from toranalyze.parser_api import ISO_PATTERN, conform_raw, offset_iso, ts_iso

_PREEMPTED = r"compute\.instances\.preempted\b.*?\binstances/(?P<node>[\w.\-]+)"
_AWS = (
    r"(?i)\bspot (?:instance )?interruption (?:warning|notice|payload received)\b"
    r"|\bHost EC2 (?:\(instance [\w\-]+\) )?terminated\b"
)
_EC2_ID = r"\b(i-[0-9a-f]{8,17})\b"


def extract_cloud_preemptions(lines: pl.LazyFrame) -> pl.LazyFrame:
    """RAW rows for a cloud's record of an instance preempted."""
    text = pl.col("text")
    at = text.str.extract(rf"({ISO_PATTERN})", 1)
    gcp = (
        lines.filter(text.str.contains("compute.instances.preempted", literal=True))
        .with_columns(text.str.extract(_PREEMPTED, 1).alias("_node"))
        .filter(pl.col("_node").is_not_null())
        .with_columns(pl.format("instance {} preempted by its cloud provider", pl.col("_node")).alias("_msg"))
    )
    aws = (
        lines.filter(text.str.contains(_AWS))
        .with_columns(text.str.extract(_EC2_ID, 1).alias("_node"))
        .with_columns(text.str.strip_chars().alias("_msg"))
    )
    return conform_raw(
        pl.concat([gcp, aws], how="vertical").select(
            pl.col("line"),
            ts_iso(at).alias("ts"),
            offset_iso(at).alias("ts_offset_s"),
            pl.lit("node_state").alias("kind"),
            pl.lit("error").alias("severity"),
            pl.lit("Preempted").alias("state"),
            pl.col("_node").alias("node"),
            pl.col("_msg").alias("message"),
        )
    )
