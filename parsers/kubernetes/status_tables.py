"""``kubectl get pods`` and ``kubectl get nodes`` tables, as line rules.

These are snapshots: a row says what a pod or node looked like when kubectl
ran (``OOMKilled``, ``CrashLoopBackOff``, ``Evicted``, ``NotReady``,
``Ready,SchedulingDisabled``), not when it changed. A pod ``Unknown`` is one whose node stopped
reporting: its state is ``NodeLost``, on the NODE column's node. Rows get ts null, or with an
anchor the capture time (minus the ``(2m ago)`` of the last restart when the
RESTARTS column prints one), marked inferred. Healthy rows are kept as ``info``
so that a snapshot never reads as a state change.

    NAME                      READY   STATUS             RESTARTS      AGE   IP            NODE
    llama-pretrain-worker-3   0/1     CrashLoopBackOff   1 (20m ago)   52m   10.244.4.17   gpu-node-04

    NAME          STATUS                        ROLES    AGE   VERSION
    gpu-node-05   NotReady                      <none>   37d   v1.28.7

    NAME                                       STATUS     AGE
    gke-cluster-1-default-pool-777adf16-erra   NotReady   4d

    NAME         STATUS     AGE       VERSION
    10.6.0.188   NotReady   10d       v1.7.2
"""

from __future__ import annotations

from datetime import datetime

import polars as pl
from toranalyze_parsers.kubernetes.common import AGE, age_seconds, job_from_pod

from toranalyze.parser_api import NAIVE_US, conform_raw

_POD = (
    r"^(?:(?P<ns>[a-z0-9][\w.-]*)\s+)?(?P<name>[a-z0-9][\w.-]*)\s+(?P<ready>[0-9]+/[0-9]+)\s+"
    r"(?P<status>[A-Za-z][\w./:-]*)\s+(?P<restarts>[0-9]+)(?: \((?P<last>(?:[0-9]+[ydhms])+) ago\))?\s+"
    rf"(?P<age>{AGE})(?:\s+(?P<ip>\S+)\s+(?P<node>\S+)(?:\s+\S+\s+\S+)?)?\s*$"
)
# kubectl before 1.6 printed NAME, STATUS and AGE only: a row then ends with its age; 1.6 and 1.7
# added VERSION, 1.8 ROLES before AGE.
_NODE = (
    r"^(?P<name>[a-z0-9][\w.-]*)\s+(?P<status>(?:Ready|NotReady|Unknown)(?:,SchedulingDisabled)?)\s+"
    rf"(?:(?:(?P<roles>\S+)\s+)?(?P<age>{AGE})\s+(?P<version>v[0-9]+\.[0-9]+\S*)(?:\s+.*)?|(?P<age3>{AGE})\s*)$"
)
HEADERS = (
    r"^\s*(?:NAMESPACE\s+)?NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE",
    r"^\s*NAME\s+STATUS\s+ROLES\s+AGE\s+VERSION",
)

_POD_ERRORS = ["OOMKilled", "Error", "Evicted", "ContainerStatusUnknown", "NodeLost", "UnexpectedAdmissionError",
               "ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError",
               "RunContainerError", "DeadlineExceeded", "Init:Error", "Init:OOMKilled"]
_POD_WARNINGS = ["CrashLoopBackOff", "Init:CrashLoopBackOff", "Pending", "Terminating", "Unknown", "NotReady"]


def _when(anchor: datetime | None, ago_s: pl.Expr) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    if anchor is None:
        return pl.lit(None, NAIVE_US), pl.lit(None, pl.Int32), pl.lit(False)
    at = pl.lit(anchor, NAIVE_US) - pl.duration(seconds=ago_s.fill_null(0))
    return at, pl.lit(0, pl.Int32), pl.lit(True)


def _pod_severity(status: pl.Expr) -> pl.Expr:
    """'error', 'warning' or 'info' by the pod's STATUS (used as both kind and severity)."""
    return (
        pl.when(status.is_in(_POD_ERRORS))
        .then(pl.lit("error"))
        .when(status.is_in(_POD_WARNINGS))
        .then(pl.lit("warning"))
        .otherwise(pl.lit("info"))
    )


def _pod_rows(lines: pl.LazyFrame, anchor: datetime | None) -> pl.LazyFrame:
    """RAW rows (unconformed) for the rows of ``kubectl get pods``."""
    text = pl.col("text")
    p = pl.col("_p")
    pods = lines.filter(text.str.contains(r"\s[0-9]+/[0-9]+\s+[A-Z]")).with_columns(
        text.str.extract_groups(_POD).alias("_p")
    )
    status = p.struct.field("status")
    name = p.struct.field("name")
    restarts = p.struct.field("restarts")
    ts, off, inferred = _when(anchor, age_seconds(p.struct.field("last")))
    node = p.struct.field("node")
    last = p.struct.field("last")
    message = pl.concat_str(
        [
            pl.format("{}: pod/{} ({} ready, {} restarts", status, name, p.struct.field("ready"), restarts),
            pl.when(last.is_not_null()).then(pl.format(", last {} ago", last)),
            pl.format(") (age {})", p.struct.field("age")),
        ],
        ignore_nulls=True,
    )
    return pods.filter(status.is_not_null()).select(
        ts.alias("ts"),
        off.alias("ts_offset_s"),
        inferred.alias("ts_inferred"),
        _pod_severity(status).alias("kind"),
        _pod_severity(status).alias("severity"),
        # kubectl prints 'Unknown' for a pod whose node stopped reporting (phase Unknown, or the
        # node controller's NodeLost while the pod is deleted): the row names its node lost.
        pl.when(status == "Unknown")
        .then(pl.lit("NodeLost"))
        .otherwise(status.str.replace(r"^Init:", ""))
        .alias("state"),
        restarts.cast(pl.Int32, strict=False).alias("attempt"),
        job_from_pod(name).alias("job_id"),
        pl.when(node.is_not_null() & (node != "<none>")).then(node).alias("node"),
        message.alias("message"),
        pl.col("line"),
    )


def _node_rows(lines: pl.LazyFrame, anchor: datetime | None) -> pl.LazyFrame:
    """RAW rows (unconformed) for the rows of ``kubectl get nodes``."""
    text = pl.col("text")
    n = pl.col("_n")
    nstatus = n.struct.field("status")
    not_ready = nstatus.str.starts_with("NotReady") | nstatus.str.starts_with("Unknown")
    cordoned = nstatus.str.ends_with(",SchedulingDisabled")
    nts, noff, ninferred = _when(anchor, pl.lit(None, pl.Int64))
    nodes = lines.filter(text.str.contains("Ready", literal=True) | text.str.contains("Unknown", literal=True))
    return (
        nodes.with_columns(text.str.extract_groups(_NODE).alias("_n"))
        .filter(nstatus.is_not_null())
        .select(
            nts.alias("ts"),
            noff.alias("ts_offset_s"),
            ninferred.alias("ts_inferred"),
            pl.when(not_ready | cordoned).then(pl.lit("node_state")).otherwise(pl.lit("info")).alias("kind"),
            pl.when(not_ready)
            .then(pl.lit("error"))
            .when(cordoned)
            .then(pl.lit("warning"))
            .otherwise(pl.lit("info"))
            .alias("severity"),
            pl.when(not_ready)
            .then(pl.lit("NotReady"))
            .when(cordoned)
            .then(pl.lit("SchedulingDisabled"))
            .otherwise(pl.lit("Ready"))
            .alias("state"),
            n.struct.field("name").alias("node"),
            pl.concat_str(
                [
                    pl.format("node {} {} (age {}", n.struct.field("name"), nstatus,
                              pl.coalesce(n.struct.field("age"), n.struct.field("age3"))),
                    pl.format(", {}", n.struct.field("version")),
                    pl.lit(")"),
                ],
                ignore_nulls=True,
            ).alias("message"),
            pl.col("line"),
        )
    )


def extract_status_tables(lines: pl.LazyFrame, anchor: datetime | None = None) -> pl.LazyFrame:
    """RAW rows for pod and node rows of kubectl get tables."""
    return pl.concat([conform_raw(_pod_rows(lines, anchor)), conform_raw(_node_rows(lines, anchor))], how="vertical")
