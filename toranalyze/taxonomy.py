"""Failure classes: stable strings, their category, and their causal priority.

``priority`` orders root-cause choice inside one incident (lower = more
likely the cause): hardware/driver evidence first, then link/host, then OOM,
then software, then collective timeouts, then job-level terminations.
``planned`` classes are interruptions nobody counts as failures of the system.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FailureClass:
    name: str
    category: str
    priority: int
    planned: bool
    description: str


_CLASSES = [
    FailureClass("gpu_hardware", "gpu", 10, False, "GPU lost / fallen off the bus / GSP errors (Xid 79, 119, 120, 62)"),
    FailureClass("gpu_memory", "gpu", 11, False, "HBM ECC / row remap (Xid 48, 63, 64, 92, 94, 95, 140)"),
    FailureClass("gpu_interconnect", "gpu", 12, False, "NVLink / NVSwitch / fabric manager (Xid 74, SXid)"),
    FailureClass("host_hardware", "host", 20, False, "MCE/EDAC, PCIe AER fatal, PSU, NIC, SSD"),
    FailureClass("network", "network", 21, False, "IB/RoCE link down, NET/IB completion errors, ncclRemoteError"),
    FailureClass("storage", "host", 22, False, "I/O errors, filesystem freeze, checkpoint read/write failure"),
    FailureClass("node_failure", "host", 25, False, "node died or stopped responding (NODE_FAIL, NodeNotReady)"),
    FailureClass("oom_gpu", "software", 30, False, "CUDA out of memory"),
    FailureClass("oom_host", "software", 31, False, "host OOM killer, OOMKilled, OUT_OF_MEMORY"),
    FailureClass("numerics", "software", 35, False, "NaN/Inf loss, divergence followed by rollback"),
    FailureClass("software", "software", 40, False, "exceptions, segfaults, illegal memory access, NCCL misuse"),
    FailureClass("hang", "unknown", 50, False, "progress stopped with no error until a watchdog or a human ended it"),
    FailureClass("collective_timeout", "network", 55, False, "NCCL watchdog timeout (a symptom unless alone)"),
    FailureClass("preemption", "planned", 60, True, "scheduler preemption / eviction"),
    FailureClass("maintenance", "planned", 61, True, "drain, reboot for upgrade, operator restart"),
    FailureClass("walltime", "planned", 62, True, "time limit reached"),
    FailureClass("user_cancel", "planned", 63, True, "scancel / job deleted by a person"),
    FailureClass("scheduling", "planned", 64, True, "waiting to be scheduled"),
    FailureClass("fail_slow", "degradation", 70, False, "throughput degradation (a slow period, not a stop)"),
    FailureClass("unknown", "unknown", 90, False, "interruption with no usable evidence"),
]

TAXONOMY: dict[str, FailureClass] = {c.name: c for c in _CLASSES}
PLANNED: frozenset[str] = frozenset(c.name for c in _CLASSES if c.planned)


def priority(name: str | None) -> int:
    """Causal priority of a class; unknown or null sorts last."""
    if name is None or name not in TAXONOMY:
        return 99
    return TAXONOMY[name].priority
