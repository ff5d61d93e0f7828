"""Shared pieces of the Kubernetes parser: the event-reason vocabulary and the
mapping from a Kubernetes Event (from any rendering: table, describe, klog,
JSON/YAML) to raw event rows.

Every rendering of an Event is first brought to the columns of ``EV_SCHEMA``
(``reason``, ``ev_type``, the involved object, source host, note, relative age
or absolute time) and then turned into RAW_SCHEMA rows by ``events_to_raw``, so
one table decides ``kind``/``severity``/``node``/``job_id`` for all of them.

``state`` is the event reason exactly as Kubernetes printed it and ``message``
starts with ``"<Reason>: "``, so classification rules can anchor on either.
"""

from __future__ import annotations

import re
from datetime import datetime

import polars as pl

from toranalyze.parser_api import NAIVE_US, conform_raw, conform_to, file_key, offset_iso, ts_month_name

# ``kubectl`` renders ages with HumanDuration: 6s, 3m1s, 5m, 2h30m, 12h, 2d4h, 30d, 2y10d.
AGE = r"(?:[0-9]+[ydhms])+|<unknown>|<invalid>"
# Describe/events-command interval: '6s', '6s (x5 over 3m1s)'.
INTERVAL = rf"(?:{AGE})(?: \(x[0-9]+ over (?:{AGE})\))?"
# RFC 1123 with numeric zone, as ``kubectl describe`` prints times.
RFC1123 = r"(?:[A-Z][a-z]{2}, )?[0-9]{1,2} [A-Z][a-z]{2} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} (?:[+-][0-9]{4}|UTC|GMT)"

# The random suffix alphabet of generated names (no vowels, no 0/1/3).
_GEN_SUFFIX = r"[bcdfghjklmnpqrstvwxz2456789]{5}"
# Replica pods of training operators (PyTorchJob, MPIJob, TFJob, ...): <job>-<role>-<index>.
_REPLICA = r"-(?:master|worker|launcher|chief|ps|evaluator|driver|executor|head)-[0-9]+$"

EV_SCHEMA = pl.Schema(
    {
        "line": pl.Int64(),
        "line_end": pl.Int64(),
        "ts": NAIVE_US,
        "ts_offset_s": pl.Int32(),
        "ts_year_known": pl.Boolean(),
        "ts_inferred": pl.Boolean(),
        "ev_type": pl.String(),  # Normal | Warning
        "reason": pl.String(),
        "obj_kind": pl.String(),  # as printed: pod, Pod, PyTorchJob, node ...
        "obj_name": pl.String(),
        "src_host": pl.String(),  # source.host / the node a kubelet reported from
        "note": pl.String(),  # the event message
        "count": pl.Int64(),
        "age": pl.String(),  # relative age as printed ('6s (x5 over 3m1s)'); tables only
        "job_hint": pl.String(),  # job name known from labels / owner
        "node_hint": pl.String(),  # node known from context (describe node, syslog host)
    }
)

# reason -> (kind, severity). Reasons not listed fall back on the event type
# (Warning -> warning, Normal -> info); training-operator job reasons are handled
# by _JOB_PHASE below.
REASONS: dict[str, tuple[str, str]] = {
    # scheduler
    "Scheduled": ("info", "info"),
    "FailedScheduling": ("warning", "warning"),
    "Preempted": ("error", "error"),
    "Preempting": ("error", "error"),  # kubelet: 'Preempted in order to admit critical pod'
    "NotTriggerScaleUp": ("warning", "warning"),
    # kubelet, pod level
    "Pulling": ("info", "info"),
    "Pulled": ("info", "info"),
    "Created": ("info", "info"),
    "Started": ("job_start", "info"),
    "Killing": ("info", "info"),
    "BackOff": ("warning", "warning"),
    "CrashLoopBackOff": ("warning", "warning"),
    "Failed": ("error", "error"),
    "FailedCreatePodSandBox": ("error", "error"),
    "FailedKillPod": ("warning", "warning"),
    "FailedPreStopHook": ("warning", "warning"),
    "FailedPostStartHook": ("warning", "warning"),
    "ExceededGracePeriod": ("warning", "warning"),
    "Unhealthy": ("warning", "warning"),
    "ProbeWarning": ("warning", "warning"),
    "Evicted": ("error", "error"),
    "OOMKilled": ("error", "error"),
    "FailedMount": ("error", "error"),
    "FailedAttachVolume": ("error", "error"),
    "FailedMapVolume": ("error", "error"),
    "UnexpectedAdmissionError": ("error", "error"),
    # node lifecycle (kubelet, node-lifecycle controller, node-problem-detector)
    "NodeNotReady": ("node_state", "error"),
    "NodeReady": ("node_state", "info"),
    "NodeNotSchedulable": ("node_state", "warning"),
    "NodeSchedulable": ("node_state", "info"),
    "Rebooted": ("node_state", "warning"),
    "Shutdown": ("node_state", "warning"),
    "RemovingNode": ("node_state", "warning"),
    "DeletingNode": ("node_state", "warning"),
    "RegisteredNode": ("info", "info"),
    "Starting": ("info", "info"),
    "NodeHasSufficientMemory": ("node_state", "info"),
    "NodeHasNoDiskPressure": ("node_state", "info"),
    "NodeHasSufficientPID": ("node_state", "info"),
    "NodeHasInsufficientMemory": ("node_state", "warning"),
    "NodeHasDiskPressure": ("node_state", "warning"),
    "NodeHasInsufficientPID": ("node_state", "warning"),
    "NodeAllocatableEnforced": ("info", "info"),
    "EvictionThresholdMet": ("warning", "warning"),
    "SystemOOM": ("error", "error"),
    "OOMKilling": ("error", "error"),  # node-problem-detector: kernel oom-killer on the node
    "KernelOops": ("error", "error"),
    "TaskHung": ("warning", "warning"),
    "TaintManagerEviction": ("warning", "warning"),
    "NodeControllerEviction": ("warning", "warning"),
    # batch/v1 Job controller
    "SuccessfulCreate": ("info", "info"),
    "SuccessfulDelete": ("info", "info"),
    "Completed": ("job_end", "info"),
    "BackoffLimitExceeded": ("job_end", "error"),
    "DeadlineExceeded": ("job_end", "error"),
    # training operator
    "SuccessfulCreatePod": ("info", "info"),
    "SuccessfulDeletePod": ("info", "info"),
    "SuccessfulCreateService": ("info", "info"),
    "SuccessfulDeleteService": ("info", "info"),
    "FailedCreatePod": ("error", "error"),
    "ExitedWithCode": ("error", "error"),
}

# Container waiting reasons: start-up (quiet) and failures to start (errors); others are warnings.
QUIET_WAIT = ("ContainerCreating", "PodInitializing")
BAD_WAIT = (
    "ErrImagePull",
    "ImagePullBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
)

# Job status condition types (training operators, batch/v1) -> (kind, severity), when status is True.
JOB_CONDITIONS: dict[str, tuple[str, str]] = {
    "Created": ("job_submit", "info"),
    "Running": ("job_start", "info"),
    "Restarting": ("restart", "warning"),
    "Failed": ("job_end", "error"),
    "Succeeded": ("job_end", "info"),
    "Complete": ("job_end", "info"),
    "Suspended": ("job_end", "info"),
}

# '<Kind>Job<Phase>' reasons of training operators (PyTorchJobRestarting, JobFailed, MPIJobSucceeded ...).
JOB_REASON = r"^[A-Za-z]*Job(Created|Running|Restarting|Failed|Succeeded|Suspended|Resumed|FailedValidation|Evicted)$"
_JOB_PHASE: dict[str, tuple[str, str]] = {
    "Created": ("job_submit", "info"),
    "Running": ("job_start", "info"),
    "Restarting": ("restart", "warning"),
    "Failed": ("job_end", "error"),
    "Succeeded": ("job_end", "info"),
    "Suspended": ("job_end", "info"),
    "Resumed": ("job_start", "info"),
    "FailedValidation": ("error", "error"),
    "Evicted": ("error", "error"),
}


def reason_kind(reason: str | None, ev_type: str | None) -> tuple[str, str]:
    """(kind, severity) of an event reason; the Python twin of the polars mapping."""
    if reason in REASONS:
        return REASONS[reason]
    m = re.match(JOB_REASON, reason or "")
    if m:
        return _JOB_PHASE[m.group(1)]
    return ("warning", "warning") if ev_type == "Warning" else ("info", "info")


def _map(expr: pl.Expr, table: dict[str, tuple[str, str]], i: int) -> pl.Expr:
    return expr.replace_strict({k: v[i] for k, v in table.items()}, default=None, return_dtype=pl.String)


def age_seconds(age: pl.Expr) -> pl.Expr:
    """Seconds of a HumanDuration age ('3m1s', '2d4h'); null for '<unknown>'."""
    g = age.str.extract_groups(r"^(?:([0-9]+)y)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
    parts = [(1, 365 * 86400), (2, 86400), (3, 3600), (4, 60), (5, 1)]
    total = pl.sum_horizontal(
        [g.struct.field(str(i)).cast(pl.Int64, strict=False).fill_null(0) * mul for i, mul in parts]
    )
    known = pl.any_horizontal([g.struct.field(str(i)).is_not_null() for i, _ in parts])
    return pl.when(known).then(total).otherwise(None)


def rfc1123_parts(stamp: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """'Mon, 01 Jan 2024 12:00:00 +0000' -> (naive wall clock, offset seconds)."""
    g = stamp.str.extract_groups(
        r"([0-9]{1,2}) ([A-Z][a-z]{2}) ([0-9]{4}) ([0-9]{2}:[0-9]{2}:[0-9]{2}) ([+-][0-9]{4}|UTC|GMT)"
    )
    ts = ts_month_name(g.struct.field("2"), g.struct.field("1"), g.struct.field("4"), g.struct.field("3"))
    zone = g.struct.field("5")
    off = pl.when(zone.is_in(["UTC", "GMT"])).then(pl.lit(0, pl.Int32)).otherwise(offset_iso(zone))
    return ts, off


def job_from_pod(name: pl.Expr) -> pl.Expr:
    """Job name from a pod name: '<job>-worker-3' (operators), '<job>-<5 random>' (batch Jobs)."""
    replica = name.str.replace(_REPLICA, "")
    generated = name.str.replace(rf"-(?:[0-9]+-)?{_GEN_SUFFIX}$", "")
    return pl.when(name.str.contains(_REPLICA)).then(replica).otherwise(generated)


def job_from_pod_py(name: str) -> str:
    if re.search(_REPLICA, name):
        return re.sub(_REPLICA, "", name)
    return re.sub(rf"-(?:[0-9]+-)?{_GEN_SUFFIX}$", "", name)


def sentence_row(kind: str, state: str) -> list[pl.Expr]:
    """The columns of a row for a sentence (``_s``) a component wrote and a user quoted alone:
    ``kind`` (also its severity), ``state``, and the message '<state>: <sentence>'."""
    return [
        pl.col("line"),
        pl.lit(kind).alias("kind"),
        pl.lit(kind).alias("severity"),
        pl.lit(state).alias("state"),
        pl.concat_str([pl.lit(f"{state}: "), pl.col("_s")]).alias("message"),
    ]


def empty_ev() -> pl.LazyFrame:
    return pl.LazyFrame(schema=EV_SCHEMA)


def conform_ev(frame: pl.LazyFrame) -> pl.LazyFrame:
    """Fill missing EV columns with nulls (defaults: year known, not inferred)."""
    return conform_to(frame, EV_SCHEMA)


def _pod_saw_not_ready(obj_kind: pl.Expr, name: pl.Expr) -> pl.Expr:
    """True on rows of a pod that has a 'NodeNotReady' event anywhere in the same file (the
    frame may hold the lines of several files of a batch; a document is one file)."""
    flagged = ((pl.col("reason") == "NodeNotReady") & (obj_kind == "pod")).any().over(name, file_key())
    return (obj_kind == "pod") & flagged.fill_null(False)


def _kind_and_severity(reason: pl.Expr, obj_kind: pl.Expr, code: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(kind, severity) by ``REASONS``, then the operator's job phase, then the event type."""
    phase = reason.str.extract(JOB_REASON, 1)
    fallback_kind = pl.when(pl.col("ev_type") == "Warning").then(pl.lit("warning")).otherwise(pl.lit("info"))
    kind = pl.coalesce(_map(reason, REASONS, 0), _map(phase, _JOB_PHASE, 0), fallback_kind)
    severity = pl.coalesce(_map(reason, REASONS, 1), _map(phase, _JOB_PHASE, 1), fallback_kind)
    # A zero exit reported by the operator is a normal completion.
    severity = pl.when(code == "0").then(pl.lit("info")).otherwise(severity)
    # A node condition echoed on a pod ('Node is not ready') is the pod's error, not a node state row.
    kind = pl.when((kind == "node_state") & (obj_kind == "pod")).then(pl.lit("error")).otherwise(kind)
    return kind, severity


def _node(reason: pl.Expr, obj_kind: pl.Expr, name: pl.Expr, note: pl.Expr) -> pl.Expr:
    """The reporting host, the node the event is about, the node from context, or one the note names."""
    return pl.coalesce(
        pl.when(pl.col("src_host").str.len_chars() > 0).then(pl.col("src_host")),
        pl.when(obj_kind == "node").then(name),
        pl.col("node_hint"),
        note.str.extract(r"^Successfully assigned \S+ to (\S+)$", 1),
        note.str.extract(r"^Node (\S+) (?:status is now|event): ", 1),
        pl.when(reason.is_in(["Preempted", "Preempting"])).then(note.str.extract(r" on node (\S+?)\.?$", 1)),
    )


def _job(obj_kind: pl.Expr, name: pl.Expr, note: pl.Expr) -> pl.Expr:
    """The job known from context, the job object itself, or the job of the pod (involved or exited)."""
    exited_pod = note.str.extract(r"^Pod: [^.\s]+\.(\S+) exited with code", 1)
    return pl.coalesce(
        pl.col("job_hint"),
        pl.when(obj_kind.str.ends_with("job")).then(name),
        pl.when(obj_kind == "pod").then(job_from_pod(name)),
        job_from_pod(exited_pod),
    )


def _message(reason: pl.Expr, obj_kind: pl.Expr, name: pl.Expr, note: pl.Expr) -> pl.Expr:
    """'<Reason>: <note> [kind/name] (xN) (age A)', each part only when known."""
    obj = pl.when(name.is_not_null()).then(
        pl.concat_str([pl.when(obj_kind.is_not_null()).then(obj_kind + "/"), name], ignore_nulls=True)
    )
    extra = pl.concat_str(
        [
            pl.when(obj.is_not_null()).then(pl.concat_str([pl.lit(" ["), obj, pl.lit("]")])),
            pl.when(pl.col("count") > 1).then(pl.format(" (x{})", pl.col("count"))),
            pl.when(pl.col("age").is_not_null()).then(pl.format(" (age {})", pl.col("age"))),
            # The taint manager evicts pods of not-ready/unreachable nodes: say so when the
            # capture shows this pod's node going NotReady, so rules can tell it from a preemption.
            pl.when((reason == "TaintManagerEviction") & _pod_saw_not_ready(obj_kind, name)).then(
                pl.lit(" (its node was NotReady)")
            ),
        ],
        ignore_nulls=True,
    )
    return pl.concat_str([reason, pl.lit(": "), note.fill_null(""), extra], ignore_nulls=True)


def _times(anchor: datetime | None) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """(ts, ts_offset_s, ts_inferred): a row with an age and no time is placed ``age`` before
    the ``anchor`` when there is one (the newest age of '6s (x5 over 3m1s)')."""
    if anchor is None:
        return pl.col("ts"), pl.col("ts_offset_s"), pl.col("ts_inferred")
    last_age = age_seconds(pl.col("age").str.extract(r"^(\S+)", 1))
    from_age = pl.lit(anchor, NAIVE_US) - pl.duration(seconds=last_age)
    use_age = pl.col("ts").is_null() & last_age.is_not_null()
    ts = pl.when(use_age).then(from_age).otherwise(pl.col("ts"))
    offset = pl.when(use_age).then(pl.lit(0, pl.Int32)).otherwise(pl.col("ts_offset_s"))
    return ts, offset, pl.col("ts_inferred") | use_age


def events_to_raw(ev: pl.LazyFrame, anchor: datetime | None = None) -> pl.LazyFrame:
    """EV_SCHEMA rows -> RAW_SCHEMA rows.

    Tables print ages relative to when kubectl ran; without an ``anchor`` (the
    capture time, naive UTC) such rows get ts null and keep the age in the message.
    """
    reason = pl.col("reason")
    obj_kind = pl.col("obj_kind").str.to_lowercase()
    name = pl.col("obj_name")
    note = pl.col("note").str.strip_chars()
    code = pl.when(reason == "ExitedWithCode").then(note.str.extract(r"exited with code (-?[0-9]+)", 1)).otherwise(None)
    kind, severity = _kind_and_severity(reason, obj_kind, code)
    ts, offset, inferred = _times(anchor)
    return conform_raw(
        conform_ev(ev).select(
            ts.alias("ts"),
            offset.alias("ts_offset_s"),
            pl.col("ts_year_known"),
            inferred.alias("ts_inferred"),
            _job(obj_kind, name, note).alias("job_id"),
            kind.alias("kind"),
            severity.alias("severity"),
            _node(reason, obj_kind, name, note).alias("node"),
            code.alias("code"),
            reason.alias("state"),
            _message(reason, obj_kind, name, note).alias("message"),
            pl.col("line"),
            pl.col("line_end"),
        )
    )
