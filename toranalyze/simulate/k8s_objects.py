"""Kubernetes API objects of a simulated PyTorchJob: Events, Pods, the PyTorchJob.

Builders only (no planning, no I/O): ``emit_kubernetes`` decides what happened and
calls these to produce the objects as the API server would return them.

Events follow the API's de-duplication: a kubelet or controller recording the same
event again for the same object (same reason, message, source) bumps ``count`` and
``lastTimestamp`` of one Event object; the scheduler's events (events.k8s.io, read
back as core/v1) carry ``eventTime`` and a ``series`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toranalyze.simulate import fmt
from toranalyze.simulate.context import RunContext

NS = "ml-train"
CONTAINER = "pytorch"
IMAGE = "nvcr.io/nvidia/pytorch:24.01-py3"
IMAGE_DIGEST = "sha256:9f2b1c6d0e4a7b3f58c21d9e6a0b4c7d2e5f8a1b3c6d9e0f2a4b7c1d5e8f0a3b"
OPERATOR = "pytorchjob-controller"
SCHEDULER = "default-scheduler"
SCHEDULER_INSTANCE = "default-scheduler-cp-01"
PORT = 23456
US = 1_000_000
CONTAINER_REF = f"spec.containers{{{CONTAINER}}}"


def ts(us: int) -> str:
    """metav1.Time: RFC 3339, seconds (truncated), UTC."""
    return fmt.iso_z(us)


def micro(us: int) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds."""
    return f"{fmt.iso(us)}.{us % US:06d}Z"


class Ids:
    """Deterministic uids, container ids and resource versions."""

    def __init__(self, ctx: RunContext, t0: int):
        self.ctx = ctx
        self.t0 = t0
        self._n = 0

    def uid(self, *key: str | int) -> str:
        b = self.ctx.rng("k8s-uid", *key).integers(0, 256, 16).tolist()
        b[6] = (b[6] & 0x0F) | 0x40
        b[8] = (b[8] & 0x3F) | 0x80
        h = "".join(f"{x:02x}" for x in b)
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def hex64(self, *key: str | int) -> str:
        return "".join(f"{x:02x}" for x in self.ctx.rng("k8s-id", *key).integers(0, 256, 32).tolist())

    def rv(self, t: int) -> str:
        """Resource versions grow with time (etcd revisions), a little per write."""
        self._n += 1
        return str(4_100_000 + max(0, t - self.t0) // 250_000 + self._n)


# ------------------------------------------------------------------------------------ events
@dataclass(frozen=True)
class Note:
    """What an event says: its reason, its message (the API's ``note``) and its type."""

    reason: str
    message: str
    type: str = "Normal"


@dataclass(frozen=True)
class Source:
    """Who recorded a core/v1 event: the component, and the node when a kubelet did."""

    component: str = "kubelet"
    host: str | None = None


@dataclass(frozen=True)
class Seen:
    """How often one event was recorded: ``count`` times, between ``first`` and ``last`` (the
    end not given is the event's own time)."""

    count: int = 1
    first: int | None = None
    last: int | None = None


KUBELET = Source()
ONCE = Seen()


@dataclass
class EventLog:
    ids: Ids
    items: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    _seq: int = 0

    def _meta(self, ns: str, obj_name: str, t: int) -> dict[str, Any]:
        self._seq += 1
        nano = t * 1000 + (self._seq * 7919) % 1000
        return {"creationTimestamp": ts(t), "name": f"{obj_name}.{nano:x}", "namespace": ns,
                "uid": self.ids.uid("event", self._seq)}

    def core(self, t: int, obj: dict[str, Any], note: Note, source: Source = KUBELET,
             seen: Seen = ONCE) -> None:
        """A core/v1 event recorded by a kubelet or a controller (legacy recorder); ``t`` is the
        last time it was seen, ``seen.first`` the first."""
        reason, message, etype = note.reason, note.message, note.type
        component, host, count = source.component, source.host, seen.count
        ns = obj.get("namespace") or "default"
        key = (ns, obj.get("kind"), obj.get("name"), obj.get("uid"), obj.get("fieldPath"), reason, message,
               component, host, etype)
        first = t if seen.first is None else seen.first
        ev = self.items.get(key)
        if ev is not None:
            ev["count"] += count
            ev["_last"] = max(ev["_last"], t)
            ev["_first"] = min(ev["_first"], first)
            return
        src: dict[str, Any] = {"component": component}
        if host:
            src["host"] = host
        self.items[key] = {
            "apiVersion": "v1",
            "count": count,
            "eventTime": None,
            "involvedObject": dict(obj),
            "kind": "Event",
            "message": message,
            "metadata": self._meta(ns, str(obj.get("name")), first),
            "reason": reason,
            "reportingComponent": "kubelet" if component == "kubelet" else "",
            "reportingInstance": host if component == "kubelet" and host else "",
            "source": src,
            "type": etype,
            "_first": first,
            "_last": t,
        }

    def new(self, t: int, obj: dict[str, Any], note: Note, action: str, seen: Seen = ONCE,
            related: dict[str, Any] | None = None) -> None:
        """An events.k8s.io/v1 event (the scheduler's), as ``kubectl get events`` reads it back;
        ``t`` is the first time it was seen, ``seen.last`` the last."""
        reason, etype, count, last = note.reason, note.type, seen.count, seen.last
        ns = obj.get("namespace") or "default"
        ev: dict[str, Any] = {
            "action": action,
            "apiVersion": "v1",
            "eventTime": micro(t),
            "firstTimestamp": None,
            "involvedObject": dict(obj),
            "kind": "Event",
            "lastTimestamp": None,
            "message": note.message,
            "metadata": self._meta(ns, str(obj.get("name")), t),
            "reason": reason,
            "reportingComponent": SCHEDULER,
            "reportingInstance": SCHEDULER_INSTANCE,
            "source": {},
            "type": etype,
            "_first": t,
            "_last": last if last is not None else t,
        }
        if count > 1:
            ev["series"] = {"count": count, "lastObservedTime": micro(ev["_last"])}
        if related is not None:
            ev["related"] = related
        self.items[("new", self._seq)] = ev

    def sorted_items(self) -> list[dict[str, Any]]:
        """The events in the API's list order (namespace, then name), finished; empties the log."""
        by_time = sorted(self.items.values(), key=lambda e: (e["_last"], e["metadata"]["name"]))
        for ev in by_time:
            ev["metadata"]["resourceVersion"] = self.ids.rv(ev["_last"])
        out = sorted(self.items.values(), key=lambda e: (e["metadata"]["namespace"], e["metadata"]["name"]))
        self.items = {}
        for ev in out:
            first, last = ev.pop("_first"), ev.pop("_last")
            if ev["eventTime"] is None:
                ev["firstTimestamp"] = ts(first)
                ev["lastTimestamp"] = ts(last)
        return out

    def document(self) -> dict[str, Any]:
        """The ``kubectl get events -A -o json`` List."""
        return {"apiVersion": "v1", "items": self.sorted_items(), "kind": "List", "metadata": {"resourceVersion": ""}}


def pod_ref(name: str, uid: str, rv: str, container: bool = False) -> dict[str, Any]:
    ref = {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": NS, "resourceVersion": rv, "uid": uid}
    if container:
        ref["fieldPath"] = CONTAINER_REF
    return ref


def node_ref(node: str) -> dict[str, Any]:
    # kubelet and node-lifecycle events name the node by its name as uid
    return {"kind": "Node", "name": node, "uid": node}


def job_ref(name: str, uid: str, rv: str) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name, "namespace": NS,
            "resourceVersion": rv, "uid": uid}


# ------------------------------------------------------------------------------------- pods
def labels(job: str, rtype: str, index: int) -> dict[str, str]:
    out = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": OPERATOR,
        "training.kubeflow.org/replica-index": str(index),
        "training.kubeflow.org/replica-type": rtype,
    }
    if rtype == "master":
        out["training.kubeflow.org/job-role"] = "master"
    return out


def container_spec(job: str, n_nodes: int, gpus: int, rank: int | None) -> dict[str, Any]:
    """The training container (rank None: the template inside the PyTorchJob)."""
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "NCCL_DEBUG", "value": "INFO"}]
    if rank is not None:
        env += [
            {"name": "MASTER_PORT", "value": str(PORT)},
            {"name": "MASTER_ADDR", "value": f"{job}-master-0"},
            {"name": "WORLD_SIZE", "value": str(n_nodes)},
            {"name": "RANK", "value": str(rank)},
        ]
    c: dict[str, Any] = {
        "command": ["torchrun", f"--nnodes={n_nodes}", f"--nproc-per-node={gpus}", "--rdzv-backend=static",
                    "pretrain_gpt.py", "--use-mcore-models", "--log-interval=1"],
        "env": env,
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "name": CONTAINER,
        "ports": [{"containerPort": PORT, "name": "pytorchjob-port", "protocol": "TCP"}],
        "resources": {
            "limits": {"cpu": "96", "memory": "1800Gi", "nvidia.com/gpu": str(gpus)},
            "requests": {"cpu": "96", "memory": "1800Gi", "nvidia.com/gpu": str(gpus)},
        },
        "volumeMounts": [{"mountPath": "/dev/shm", "name": "dshm"}, {"mountPath": "/lustre", "name": "lustre"}],
    }
    if rank is not None:
        c["terminationMessagePath"] = "/dev/termination-log"
        c["terminationMessagePolicy"] = "File"
    return c


VOLUMES = [
    {"emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}, "name": "dshm"},
    {"hostPath": {"path": "/lustre", "type": "Directory"}, "name": "lustre"},
]
TOLERATIONS = [
    {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
    {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
    {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
]


def condition(
    ctype: str, status: bool, t: int, reason: str | None = None, message: str | None = None
) -> dict[str, Any]:
    c: dict[str, Any] = {
        "lastProbeTime": None,
        "lastTransitionTime": ts(t),
        "status": "True" if status else "False",
        "type": ctype,
    }
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def terminated(cid: str, code: int, reason: str, started: int, finished: int) -> dict[str, Any]:
    return {
        "containerID": f"containerd://{cid}",
        "exitCode": code,
        "finishedAt": ts(finished),
        "reason": reason,
        "startedAt": ts(started),
    }
