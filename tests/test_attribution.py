"""Attribution: the node from a file's path or a pod's binding, and peers' symptoms never chosen over a death."""

from __future__ import annotations

import polars as pl
import pytest

from toranalyze.reconstruct.analysis import analyze_events, events_frame
from toranalyze.reconstruct.attribution import attribute_nodes, path_candidates

REMOTE = "NCCL error: remote process exited or there was a network error, NCCL version 2.18.1 | ncclRemoteError"
RESET = "socketProgressOpt: Call to recv from 10.0.0.9<57340> failed : Connection reset by peer"


def _attempt(t0: float, s0: int, s1: int, job: str, state: str, end_gap: float = 30.0, node: str = "gpu-01"):
    rec = [dict(ts=t0, kind="job_start", job_id=job, node=f"{node},gpu-07", file="run/sacct.txt")]
    t = t0 + 5
    for s in range(s0, s1 + 1):
        t += 10.0
        rec.append(dict(ts=t, kind="step", step=s, step_time_s=10.0, node=node, file="run/rank0.log"))
    rec.append(dict(ts=t + end_gap, kind="job_end", job_id=job, state=state, file="run/sacct.txt"))
    return rec, t


def _peer_errors(t: float, message: str, rule: str, n: int = 8) -> list[dict]:
    return [
        dict(ts=t, kind="error", rank=r, node="gpu-01", source="nccl", failure_class="network", rule=rule,
             message=message, file="run/rank0.log")
        for r in range(n)
    ]


@pytest.mark.parametrize(
    "path",
    ["run/dmesg/gpu-07.log", "run/gpu-07/kern.log", "run/logs/gpu-07-dmesg.txt", "run/kern.log.gpu-07"],
)
def test_host_from_path_names_the_incident_node(path: str) -> None:
    a, t_last = _attempt(0, 1, 20, "1", "FAILED")
    oom = dict(ts=t_last + 8, kind="error", source="kernel", failure_class="oom_host", rule="kernel-oom-kill",
               message="Out of memory: Killed process 4242 (python)", file=path)
    inc = analyze_events(events_frame(a + [oom])).incidents.row(0, named=True)
    assert (inc["root_cause"], inc["nodes"]) == ("oom_host", ["gpu-07"])


def test_a_path_names_a_node_only_when_other_sources_name_it() -> None:
    ev = events_frame(
        [dict(ts=1, kind="error", node="gpu-07", file="run/a.log"), dict(ts=2, kind="error", file="run/logs/rank3.txt")]
    )
    assert attribute_nodes(ev)["node"].to_list() == ["gpu-07", None]
    assert "gpu-07" in path_candidates("x/logs/gpu-07-dmesg.txt")
    assert "gpu-07" in path_candidates("x/kern.log.gpu-07")


def test_pod_log_takes_its_pods_node() -> None:
    a, t_last = _attempt(0, 1, 20, "1", "FAILED")
    bind = dict(ts=1, kind="info", source="kubernetes", file="run/k8s/events.txt",
                message="Scheduled: Successfully assigned default/llama-worker-3 to gpu-node-09")
    oom = dict(ts=t_last + 8, kind="error", source="torch", failure_class="oom_gpu", rule="torch-cuda-oom",
               message="torch.OutOfMemoryError: CUDA out of memory.", file="run/pods/llama-worker-3.log")
    ev = events_frame(a + [bind, oom])
    assert attribute_nodes(ev).filter(pl.col("failure_class") == "oom_gpu")["node"].to_list() == ["gpu-node-09"]
    inc = analyze_events(ev).incidents.row(0, named=True)
    assert (inc["root_cause"], inc["nodes"]) == ("oom_gpu", ["gpu-node-09"])


@pytest.mark.parametrize(
    ("death", "cls"),
    [
        (dict(state="OOMKilled", kind="job_end", source="kubernetes", rule="kubernetes-oomkilled",
              message="container pytorch of pod/w-7 terminated: OOMKilled (exit code 137)"), "oom_host"),
        (dict(kind="error", source="kernel", code="79", rule="kernel-xid-gpu-hardware",
              message="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."), "gpu_hardware"),
        (dict(kind="node_state", state="DOWN", source="slurm", rule="slurm-node-out-of-service",
              message="error: Nodes gpu-07 not responding, setting DOWN"), "node_failure"),
    ],
)
@pytest.mark.parametrize(("message", "rule"), [(REMOTE, "nccl-remote-error"), (RESET, "nccl-socket")])
def test_node_local_death_beats_peer_symptoms(death: dict, cls: str, message: str, rule: str) -> None:
    a, t_last = _attempt(0, 1, 20, "1", "FAILED")
    # The peers report first (their watchdog fires), the dead node's record comes a little later.
    peers = _peer_errors(t_last + 5, message, rule)
    dead = dict(ts=t_last + 9, node="gpu-07", failure_class=cls, file="run/gpu-07/node.log", severity="error", **death)
    inc = analyze_events(events_frame(a + peers + [dead])).incidents.row(0, named=True)
    assert (inc["root_cause"], inc["nodes"]) == (cls, ["gpu-07"])
    assert "network" in inc["symptoms"]


def test_a_kill_signal_on_one_node_beats_peer_symptoms() -> None:
    a, t_last = _attempt(0, 1, 20, "1", "FAILED")
    peers = _peer_errors(t_last + 5, REMOTE, "nccl-remote-error")
    kill = dict(ts=t_last + 9, kind="job_end", source="torch", code="-9", rule="torch-exit-sigkill", node="gpu-07",
                failure_class="unknown", file="run/gpu-07/torchrun.log",
                message="failed (exitcode: -9) local_rank: 3 (pid: 812917) of binary: python")
    inc = analyze_events(events_frame(a + peers + [kill])).incidents.row(0, named=True)
    assert (inc["root_cause"], inc["nodes"]) == ("unknown", ["gpu-07"])
    assert "symptoms" in inc["reason"]


def test_network_with_its_own_evidence_or_nothing_better_stays_network() -> None:
    a, t_last = _attempt(0, 1, 20, "1", "FAILED")
    only_peers = _peer_errors(t_last + 5, REMOTE, "nccl-remote-error")
    assert analyze_events(events_frame(a + only_peers)).incidents["root_cause"].to_list() == ["network"]
    ib = dict(ts=t_last + 4, kind="error", source="nccl", failure_class="network", rule="nccl-ib-completion",
              node="gpu-07", file="run/rank9.log",
              message="NET/IB : Got completion from peer 10.0.0.7<1234> with status=12 opcode=0 len=0 vendor err 129")
    inc = analyze_events(events_frame(a + only_peers + [ib])).incidents.row(0, named=True)
    assert inc["root_cause"] == "network" and "gpu-07" in inc["nodes"]
