"""Fleets that look like real ones: the ``[wild]`` table of a configuration.

Without a ``[wild]`` table every job is emitted as before (one clean console format, a
traceback on one rank only, pod specs that state the GPU count, one pod per node). With one,
each job draws, from a stream of its own (so its history does not depend on it):

- ``wrapper``: what the log shipper put around each console or pod line (nothing, a
  collector's ISO time and host, ``<host> | ``, the CRI log format, docker's json-file, a
  fluent-bit record, or a legacy logger around the trainer's own lines);
- ``kernel``: the kernel log as syslog (``kern.log``), ``journalctl -k -o short-iso`` or
  ``dmesg -T``;
- ``size_source``: where the job's size is stated (Kubernetes only: pod specs, or only one kind
  of log line, or nowhere);
- ``pods_per_node``: Kubernetes pods sharing a node (GPUs split between them);
- ``peer_errors``: a rank's death is followed by its peers' NCCL, socket and watchdog errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from toranalyze.simulate import fmt

Line = tuple[int, str]

WRAPPERS_ANY = ("none", "iso_host", "host_pipe", "pylogging", "glog")
WRAPPERS_K8S = ("cri", "docker_json", "fluent_bit")
WRAPPERS = WRAPPERS_ANY + WRAPPERS_K8S
KERNELS = ("syslog", "journal", "dmesg")
KERNEL_FILE = {"syslog": "kern.log", "journal": "journal-kernel.txt", "dmesg": "dmesg.txt"}
SIZE_SOURCES = ("spec", "megatron", "nccl", "torchrun", "env", "none")
_WEEKDAY = ("Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed")  # 1970-01-01 was a Thursday


@dataclass(frozen=True)
class WildJob:
    """What one job draws; the defaults are the simulator's plain output."""

    wrapper: str = "none"
    kernel: str = "syslog"
    size_source: str = "spec"
    pods_per_node: int = 1
    peer_errors: bool = False
    active: bool = False  # drawn from a [wild] table (recorded in the truth)

    @property
    def nccl_info(self) -> bool:
        """NCCL_DEBUG=INFO (start-up chatter with ``nranks``) or only warnings."""
        return self.size_source in ("spec", "nccl")

    @property
    def megatron_size(self) -> bool:
        return self.size_source in ("spec", "megatron")

    def size_stated(self, flavor: str) -> bool:
        """Whether any record states the job's GPU count (sacct always does under Slurm)."""
        return flavor == "slurm" or self.size_source != "none"

    def truth(self, flavor: str) -> dict[str, Any]:
        return {"wrapper": self.wrapper, "kernel_log": self.kernel, "size_source": self.size_source,
                "pods_per_node": self.pods_per_node, "peer_errors": self.peer_errors}


PLAIN = WildJob()


@dataclass(frozen=True)
class WildSpec:
    """The ``[wild]`` table: the choices each job draws from (uniformly, repeats weigh more)."""

    wrappers: tuple[str, ...] = ("none",)
    kernels: tuple[str, ...] = ("syslog",)
    size_sources: tuple[str, ...] = ("spec",)
    pods_per_node: tuple[int, ...] = (1,)
    peer_errors: bool = False

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> WildSpec | None:
        w = data.get("wild")
        if not w:
            return None
        spec = cls(tuple(w.get("wrappers", cls.wrappers)), tuple(w.get("kernels", cls.kernels)),
                   tuple(w.get("size_sources", cls.size_sources)),
                   tuple(int(x) for x in w.get("pods_per_node", cls.pods_per_node)),
                   bool(w.get("peer_errors", cls.peer_errors)))
        for name, got, known in (("wrappers", spec.wrappers, WRAPPERS), ("kernels", spec.kernels, KERNELS),
                                 ("size_sources", spec.size_sources, SIZE_SOURCES)):
            bad = [x for x in got if x not in known]
            if bad or not got:
                raise ValueError(f"[wild] {name}: unknown or empty {bad}; known: {', '.join(known)}")
        if not spec.pods_per_node or any(p < 1 for p in spec.pods_per_node):
            raise ValueError("[wild] pods_per_node must be >= 1")
        return spec

    def draw(self, seed: int, job_index: int, flavor: str, gpus_per_node: int) -> WildJob:
        """One job's draw, from its own stream: the same for a job whatever the others draw."""
        rng = np.random.default_rng([seed & 0xFFFFFFFF, job_index, 0x57494C44])  # "WILD"
        k8s = flavor == "kubernetes"
        wrappers = [w for w in self.wrappers if k8s or w in WRAPPERS_ANY] or ["none"]
        wrapper = wrappers[int(rng.integers(0, len(wrappers)))]
        kernel = self.kernels[int(rng.integers(0, len(self.kernels)))]
        size = self.size_sources[int(rng.integers(0, len(self.size_sources)))]
        ppns = [p for p in self.pods_per_node if gpus_per_node % p == 0] or [1]
        ppn = ppns[int(rng.integers(0, len(ppns)))]
        if not k8s:  # sacct states the allocation; pods do not exist
            ppn = 1
        return WildJob(wrapper, kernel, size, ppn if k8s else 1, self.peer_errors, active=True)


# ---------------------------------------------------------------------- wrappers

def _iso_frac(us: int, digits: int) -> str:
    sec, frac = divmod(int(us), 1_000_000)
    base = fmt.iso(us)
    if digits == 9:
        return f"{base}.{frac:06d}{(us * 7919) % 1000:03d}Z"
    return f"{base}.{frac:06d}Z"


def _pylog_time(us: int) -> str:
    y = fmt.bracket(us)
    return f"{y},{(int(us) % 1_000_000) // 1000:03d}"


def _glog_time(us: int) -> str:
    return fmt.glog(us)


class Wrapper:
    """Wraps lines as the job's shipper wrote them; the stamps are the node's clock (true time
    plus its skew) plus a small shipping delay, never going back within one file."""

    ns, container = "ml-train", "pytorch"  # where the pods run, as the shipper's records name it

    def __init__(self, kind: str, host: str, skew_us: int, pod: str | None = None, pid: int = 1):
        self.kind, self.host, self.skew, self.pod, self.pid = kind, host, skew_us, pod, pid
        self.last = 0

    def stamp(self, t: int) -> int:
        s = t + self.skew + 150 + (t * 2654435761) % 900
        self.last = max(self.last + 1, s)
        return self.last

    def line(self, t: int, text: str, stream: str) -> str:
        k = self.kind
        if k == "none":
            return text
        if k in ("pylogging", "glog"):
            if stream != "stdout":  # only the trainer's own messages go through its logger
                return text
            s = self.stamp(t)
            if k == "pylogging":
                return f"{_pylog_time(s)} - INFO - {text}"
            return f"I{_glog_time(s)} {self.pid} training.py:{412 if text.startswith('[') else 188}] {text}"
        s = self.stamp(t)
        if k == "iso_host":
            return f"{_iso_frac(s, 6)} {self.host} {text}"
        if k == "host_pipe":
            return f"{self.host} | {text}"
        if k == "cri":
            return f"{_iso_frac(s, 9)} {stream} F {text}"
        if k == "docker_json":
            return json.dumps({"log": text + "\n", "stream": stream, "time": _iso_frac(s, 9)},
                              ensure_ascii=False, separators=(",", ":"))
        if k == "fluent_bit":
            rec = {"@timestamp": _iso_frac(s, 6), "stream": stream, "message": text,
                   "kubernetes": {"pod_name": self.pod or self.host, "namespace_name": self.ns,
                                  "container_name": self.container, "host": self.host}}
            return json.dumps(rec, ensure_ascii=False, separators=(",", ":"))
        raise ValueError(f"unknown wrapper {k!r}")


Tagged = tuple[int, str, str]  # (true time, text, stream: stdout | stderr)


def tag(lines: Iterable[Line], stream: str) -> Iterator[Tagged]:
    for t, s in lines:
        yield t, s, stream


def wrapped(w: Wrapper, streams: list[Iterable[Tagged]]) -> Iterator[str]:
    """Merge tagged streams in time order (stable) and wrap every line."""
    import heapq

    for t, s, st in heapq.merge(*streams, key=lambda x: x[0]):
        yield w.line(t, s, st)


# ---------------------------------------------------------------------- kernel log formats

def kernel_line(kind: str, host: str, t_local: int, uptime: float, text: str) -> str:
    """One kernel message as the chosen tool prints it (``t_local``: the node's clock)."""
    if kind == "journal":
        return f"{fmt.iso(t_local)}+00:00 {host} kernel: {text}"
    if kind == "dmesg":
        y, mo, d = fmt._day(int(t_local) // 1_000_000 // fmt.DAY)
        day = int(t_local) // 1_000_000 // fmt.DAY
        hms = fmt.bracket(t_local)[11:]
        return f"[{_WEEKDAY[day % 7]} {fmt._MON[mo - 1]} {d:2d} {hms} {y}] {text}"
    return f"{fmt.syslog(t_local)} {host} kernel: [{uptime:12.6f}] {text}"


# ---------------------------------------------------------------------- size statements

def torchrun_rendezvous(master: str, node_i: int, nodes: int, gpus: int) -> list[str]:
    """torchelastic's rendezvous result on one node; the agent's log prefix goes before the lines
    that start with ``[`` (the others continue the message)."""
    world = nodes * gpus
    local = ", ".join(str(i) for i in range(gpus))
    glob = ", ".join(str(node_i * gpus + i) for i in range(gpus))
    sizes = ", ".join([str(world)] * gpus)
    return [
        "[default] Rendezvous complete for workers. Result:",
        "  restart_count=0",
        f"  master_addr={master}",
        "  master_port=29500",
        f"  group_rank={node_i}",
        f"  group_world_size={nodes}",
        f"  local_ranks=[{local}]",
        f"  role_ranks=[{glob}]",
        f"  global_ranks=[{glob}]",
        f"  role_world_sizes=[{sizes}]",
        f"  global_world_sizes=[{sizes}]",
        "",
        "[default] Starting worker group",
    ]


def env_dump(master: str, world: int, gpus: int) -> list[str]:
    """What rank 0's entrypoint prints of its environment before training."""
    return [
        f"LOCAL_WORLD_SIZE={gpus}",
        f"MASTER_ADDR={master}",
        "MASTER_PORT=29500",
        "NCCL_DEBUG=WARN",
        "RANK=0",
        f"WORLD_SIZE={world}",
    ]


def pod_view(tl: Any, ppn: int) -> Any:
    """The timeline as the pods see it: every node split into ``ppn`` pods of G/ppn GPUs (the
    same global ranks on the same hosts). Only for emission: the truth keeps the real layout."""
    cfg = tl.config
    vcfg = replace(cfg, nodes=cfg.nodes * ppn, gpus_per_node=cfg.gpus_per_node // ppn)
    atts = [replace(a, nodes=[h for h in a.nodes for _ in range(ppn)]) for a in tl.attempts]
    return replace(tl, config=vcfg, attempts=atts)


__all__ = ["WildJob", "WildSpec", "Wrapper", "PLAIN", "kernel_line", "tag", "wrapped", "pod_view",
           "KERNEL_FILE", "torchrun_rendezvous", "env_dump"]
