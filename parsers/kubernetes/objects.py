"""Kubernetes API objects (Event, Pod, Node, training-operator and batch Jobs) -> rows.

Events become EV_SCHEMA rows (the shared mapping in ``_k8s_common`` decides
their kind); pods, nodes and jobs become RAW_SCHEMA rows directly:

* Pod: each container's ``state`` and ``lastState`` (terminated -> ``job_start``
  at startedAt + ``job_end`` at finishedAt with reason/exit code; running ->
  ``job_start``; waiting -> CrashLoopBackOff & co), ``restartCount`` -> attempt,
  ``status.reason`` (Evicted ...), conditions PodScheduled=False and
  DisruptionTarget, ``nominatedNodeName``.
* Node: conditions (Ready, pressures, node-problem-detector conditions) at
  their lastTransitionTime, ``spec.unschedulable``.
* Jobs (PyTorchJob, TFJob, MPIJob, ..., batch/v1 Job): creation, startTime and
  status conditions (Running, Restarting, Failed, Succeeded, Complete).

All API times are RFC 3339 in UTC; rows keep them as written with their offset.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from toranalyze_parsers.kubernetes.common import BAD_WAIT, JOB_CONDITIONS, QUIET_WAIT, job_from_pod_py
from toranalyze_parsers.kubernetes.docs import LINES

_RFC3339 = re.compile(
    r"^([0-9]{4}-[0-9]{2}-[0-9]{2})[T ]([0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.([0-9]+))?(Z|[+-][0-9]{2}:[0-9]{2})?$"
)
_JOB_LABELS = (
    "training.kubeflow.org/job-name",
    "pytorch-job-name",
    "batch.kubernetes.io/job-name",
    "job-name",
    "jobset.sigs.k8s.io/jobset-name",
    "volcano.sh/job-name",
)

Row = dict[str, Any]


def parse_time(value: Any) -> tuple[datetime | None, int | None]:
    """RFC 3339 -> (naive wall clock as written, offset seconds)."""
    if not isinstance(value, str):
        return None, None
    m = _RFC3339.match(value.strip())
    if not m:
        return None, None
    frac = (m.group(3) or "0")[:6].ljust(6, "0")
    try:
        ts = datetime.fromisoformat(f"{m.group(1)} {m.group(2)}.{frac}")
    except ValueError:  # a day or hour no calendar has (Feb 30, 25:00): no time, the object is kept
        return None, None
    zone = m.group(4)
    if zone is None:
        return ts, None
    if zone == "Z":
        return ts, 0
    sign = -1 if zone[0] == "-" else 1
    return ts, sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _lines(obj: dict[str, Any], fallback: dict[str, Any] | None = None) -> tuple[int, int | None]:
    span = obj.get(LINES) or (fallback or {}).get(LINES) or (1, None)
    first, last = span
    return first, (last if last and last != first else None)


def _timed(row: Row, value: Any) -> Row:
    row["ts"], row["ts_offset_s"] = parse_time(value)
    return row


def job_of(meta: dict[str, Any], pod_name: str | None = None) -> str | None:
    labels = _d(meta.get("labels"))
    for key in _JOB_LABELS:
        if labels.get(key):
            return str(labels[key])
    for owner in meta.get("ownerReferences") or []:
        if isinstance(owner, dict) and str(owner.get("kind", "")).endswith("Job") and owner.get("name"):
            return str(owner["name"])
    return job_from_pod_py(pod_name) if pod_name else None


# --------------------------------------------------------------------- events
def event_row(ev: dict[str, Any]) -> Row:
    """core/v1 or events.k8s.io/v1 Event -> EV_SCHEMA row."""
    meta = _d(ev.get("metadata"))
    series = _d(ev.get("series"))
    obj = _d(ev.get("involvedObject") or ev.get("regarding"))
    source = _d(ev.get("source") or ev.get("deprecatedSource"))
    when = (
        ev.get("lastTimestamp")
        or series.get("lastObservedTime")
        or ev.get("deprecatedLastTimestamp")
        or ev.get("eventTime")
        or ev.get("firstTimestamp")
        or ev.get("deprecatedFirstTimestamp")
        or meta.get("creationTimestamp")
    )
    controller = ev.get("reportingController") or ev.get("reportingComponent") or source.get("component")
    host = source.get("host") or (ev.get("reportingInstance") if controller == "kubelet" else None)
    first, last = _lines(ev)
    return _timed(
        {
            "line": first,
            "line_end": last,
            "ev_type": ev.get("type"),
            "reason": ev.get("reason") or "Unknown",
            "obj_kind": obj.get("kind"),
            "obj_name": obj.get("name"),
            "src_host": host,
            "note": ev.get("message") if ev.get("message") is not None else ev.get("note"),
            "count": series.get("count") or ev.get("count") or ev.get("deprecatedCount"),
        },
        when,
    )


# ----------------------------------------------------------------------- pods


def _terminated_rows(term: dict[str, Any], cs: dict[str, Any], who: str, common: Row) -> list[Row]:
    """A terminated run: its end (reason, exit code) and, when the API kept it, its start."""
    reason = term.get("reason") or "Terminated"
    code = term.get("exitCode")
    detail = f" (exit code {code})" if code is not None else ""
    if term.get("signal"):
        detail += f" (signal {term['signal']})"
    if term.get("message"):
        detail += f": {str(term['message']).strip()}"
    first, last = _lines(term, cs)
    ok = reason == "Completed" and code == 0
    # The reason wins over the exit code: OOMKilled can come with exit code 0.
    rows = [
        _timed(
            {
                **common,
                "kind": "job_end",
                "severity": "info" if ok else "error",
                "state": reason,
                "code": None if code is None else str(code),
                "message": f"{who} terminated: {reason}{detail}",
                "line": first,
                "line_end": last,
            },
            term.get("finishedAt"),
        )
    ]
    started = _timed({}, term.get("startedAt"))
    if started["ts"] is not None and started["ts"].year > 1970:
        rows.append({**common, **started, "kind": "job_start", "severity": "info", "state": "Running",
                     "message": f"{who} started", "line": first})
    return rows


def _running_row(running: dict[str, Any], cs: dict[str, Any], who: str, common: Row) -> Row:
    """A running container: its start."""
    first, _ = _lines(running, cs)
    return _timed(
        {**common, "kind": "job_start", "severity": "info", "state": "Running",
         "message": f"{who} started", "line": first},
        running.get("startedAt"),
    )


def _waiting_row(waiting: dict[str, Any], cs: dict[str, Any], who: str, common: Row) -> Row:
    """A container waiting: quiet while starting, an error when it cannot start, else a warning."""
    reason = waiting["reason"]
    first, last = _lines(waiting, cs)
    text = f": {waiting['message']}" if waiting.get("message") else ""
    return {
        **common,
        "kind": "info" if reason in QUIET_WAIT else "warning",
        "severity": "info" if reason in QUIET_WAIT else ("error" if reason in BAD_WAIT else "warning"),
        "state": reason,
        "message": f"{who} waiting: {reason}{text}",
        "line": first,
        "line_end": last,
    }


def _container_rows(cs: dict[str, Any], pod: str, base: Row) -> list[Row]:
    """Rows of one container status: its previous run (``lastState``), then its current one."""
    rows: list[Row] = []
    name = cs.get("name", "?")
    restarts = cs.get("restartCount")
    who = f"container {name} of pod/{pod}"
    for which, st in (("lastState", _d(cs.get("lastState"))), ("state", _d(cs.get("state")))):
        # lastState is the previous run: attempt N-1 of a container restarted N times.
        previous = restarts - 1 if isinstance(restarts, int) and restarts > 0 else None
        attempt = restarts if which == "state" else previous
        common = {**base, "attempt": attempt}
        term = _d(st.get("terminated"))
        if term:
            rows.extend(_terminated_rows(term, cs, who, common))
        running = _d(st.get("running"))
        if running:
            rows.append(_running_row(running, cs, who, common))
        waiting = _d(st.get("waiting"))
        if waiting.get("reason"):
            rows.append(_waiting_row(waiting, cs, who, common))
    return rows


def pod_rows(pod: dict[str, Any]) -> list[Row]:
    meta, spec, status = _d(pod.get("metadata")), _d(pod.get("spec")), _d(pod.get("status"))
    name = str(meta.get("name") or "?")
    base: Row = {"job_id": job_of(meta, name), "node": spec.get("nodeName")}
    rows: list[Row] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            if isinstance(cs, dict):
                rows.extend(_container_rows(cs, name, base))
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    disruption = next(
        (c for c in conditions if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None
    )
    if status.get("reason"):
        first, last = _lines(status, pod)
        when = (disruption or {}).get("lastTransitionTime")
        rows.append(
            _timed(
                {**base, "kind": "error", "severity": "error", "state": status["reason"],
                 "message": f"{status['reason']}: {str(status.get('message') or '').strip()} [pod/{name}]",
                 "line": first, "line_end": last},
                when,
            )
        )
    for c in conditions:
        ctype, cstatus = c.get("type"), c.get("status")
        first, last = _lines(c, status)
        text = f"{ctype}={cstatus} {c.get('reason') or ''}: {str(c.get('message') or '').strip()} [pod/{name}]"
        if ctype == "PodScheduled" and cstatus == "False":
            rows.append(_timed({**base, "kind": "warning", "severity": "warning",
                                "state": c.get("reason") or "Unschedulable", "message": text,
                                "line": first, "line_end": last}, c.get("lastTransitionTime")))
        elif ctype == "DisruptionTarget" and cstatus == "True":
            rows.append(_timed({**base, "kind": "error", "severity": "error",
                                "state": c.get("reason") or "DisruptionTarget", "message": text,
                                "line": first, "line_end": last}, c.get("lastTransitionTime")))
    if status.get("nominatedNodeName"):
        first, _ = _lines(status, pod)
        rows.append({**base, "node": status["nominatedNodeName"], "kind": "info", "severity": "info",
                     "message": f"pod/{name} nominated to node {status['nominatedNodeName']} (waiting for preemption)",
                     "line": first})
    return rows


def pod_index(objects: list[dict[str, Any]]) -> dict[str, tuple[str | None, str | None]]:
    """Pod name -> (job, node) for the pods of a document."""
    index: dict[str, tuple[str | None, str | None]] = {}
    for obj in objects:
        meta = _d(obj.get("metadata"))
        if obj.get("kind") == "Pod" and meta.get("name"):
            name = str(meta["name"])
            index[name] = (job_of(meta, name), _d(obj.get("spec")).get("nodeName"))
    return index


# ---------------------------------------------------------------------- nodes
def node_condition_row(node: str, c: dict[str, Any], fallback: dict[str, Any]) -> Row | None:
    ctype, cstatus = c.get("type"), c.get("status")
    ready = ctype == "Ready"
    if not ready and cstatus != "True":
        return None
    if ready:
        state = "Ready" if cstatus == "True" else "NotReady"
        severity = "info" if cstatus == "True" else "error"
    else:
        state = str(ctype)
        severity = "error" if ctype == "NetworkUnavailable" else "warning"
    first, last = _lines(c, fallback)
    return _timed(
        {"node": node, "kind": "node_state", "severity": severity, "state": state,
         "message": f"{ctype}={cstatus} {c.get('reason') or ''}: {str(c.get('message') or '').strip()}",
         "line": first, "line_end": last},
        c.get("lastTransitionTime"),
    )


def node_rows(obj: dict[str, Any]) -> list[Row]:
    meta, spec, status = _d(obj.get("metadata")), _d(obj.get("spec")), _d(obj.get("status"))
    name = str(meta.get("name") or "?")
    rows = [
        r
        for c in status.get("conditions") or []
        if isinstance(c, dict) and (r := node_condition_row(name, c, status)) is not None
    ]
    if spec.get("unschedulable") is True:
        taints = [_d(t) for t in spec.get("taints") or []]
        taint = next((t for t in taints if t.get("key") == "node.kubernetes.io/unschedulable"), {})
        first, _ = _lines(spec, obj)
        rows.append(_timed({"node": name, "kind": "node_state", "severity": "warning", "state": "SchedulingDisabled",
                            "message": f"node {name} cordoned (spec.unschedulable: true)", "line": first},
                           _d(taint).get("timeAdded")))
    return rows


# ----------------------------------------------------------------------- jobs
def _gpus(spec: dict[str, Any]) -> int | None:
    """GPUs a training job asks for: sum of replicas x nvidia.com/gpu limits over *ReplicaSpecs."""
    total, seen = 0, False
    for key, replica_specs in spec.items():
        if not (isinstance(key, str) and key.endswith("ReplicaSpecs") and isinstance(replica_specs, dict)):
            continue
        for rs in replica_specs.values():
            if not isinstance(rs, dict):
                continue
            pod_spec = _d(_d(rs.get("template")).get("spec"))
            per_pod = 0
            for c in pod_spec.get("containers") or []:
                limits = _d(_d(_d(c).get("resources")).get("limits"))
                try:
                    per_pod += int(str(limits.get("nvidia.com/gpu", 0)))
                except ValueError:
                    continue
            replicas = rs.get("replicas", 1)
            if isinstance(replicas, int):
                total += replicas * per_pod
                seen = True
    return total if seen and total > 0 else None


def job_rows(obj: dict[str, Any]) -> list[Row]:
    meta, spec, status = _d(obj.get("metadata")), _d(obj.get("spec")), _d(obj.get("status"))
    kind = str(obj.get("kind"))
    name = str(meta.get("name") or "?")
    base: Row = {"job_id": name}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    created = next((c for c in conditions if c.get("type") == "Created"), None)
    first, _ = _lines(created or meta, obj)
    rows: list[Row] = [
        _timed(
            {**base, "kind": "job_submit", "severity": "info", "state": (created or {}).get("reason") or "Created",
             "message": f"{kind} {name} created", "n_gpus": _gpus(spec), "line": first},
            (created or {}).get("lastTransitionTime") or meta.get("creationTimestamp"),
        )
    ]
    if status.get("startTime"):
        first, _ = _lines(status, obj)
        rows.append(_timed({**base, "kind": "job_start", "severity": "info", "state": "Running",
                            "message": f"{kind} {name} started", "line": first}, status["startTime"]))
    for c in conditions:
        ctype = c.get("type")
        # Created is the job_submit row above.
        if ctype not in JOB_CONDITIONS or ctype == "Created" or c.get("status") != "True":
            continue
        if ctype == "Running" and c.get("lastTransitionTime") == status.get("startTime"):
            continue
        kind_, severity = JOB_CONDITIONS[ctype]
        reason = c.get("reason") or ctype
        first, last = _lines(c, status)
        rows.append(
            _timed(
                {**base, "kind": kind_, "severity": severity, "state": reason,
                 "message": f"{reason}: {str(c.get('message') or '').strip()} [{kind.lower()}/{name}]",
                 "line": first, "line_end": last},
                c.get("lastTransitionTime"),
            )
        )
    return rows
