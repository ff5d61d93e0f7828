"""What each failure class leaves in each source, for one attempt.

``attempt_evidence`` returns time-stamped lines for the attempt's console file,
the nodes' kernel logs and the scheduler log. Times are true UTC microseconds;
the printed clocks are the sources' own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from toranalyze.simulate import emit_kernel as K
from toranalyze.simulate import emit_slurm as S
from toranalyze.simulate import emit_torch as TT
from toranalyze.simulate import fmt
from toranalyze.simulate.context import RunContext
from toranalyze.simulate.emit_nccl import ib_error
from toranalyze.simulate.emit_nccl import prefix as nccl_prefix
from toranalyze.simulate.timeline import US, Attempt, Incident

Line = tuple[int, str]
NLine = tuple[int, str, int]  # (time, text, node index of the process that printed it)
LAUNCHER = -1  # printed by srun/slurmstepd on the batch host, not by a training node
STEP_ABORTED = "srun: Job step aborted: Waiting up to 32 seconds for job step to finish."

WATCHDOG_CLASSES = frozenset({"gpu_hardware", "gpu_interconnect", "collective_timeout"})
CRASH_EXIT = {"gpu_memory": 1, "storage": 1, "oom_gpu": 1, "software": 1, "unknown": 1, "network": 1}


@dataclass
class Evidence:
    out: list[NLine] = field(default_factory=list)  # console lines, tagged with the printing node
    kern: dict[str, list[Line]] = field(default_factory=dict)
    ctld: list[Line] = field(default_factory=list)
    k8s_reason: str | None = None  # pod termination reason for the Kubernetes flavour
    k8s_exit: int = 0

    def add_kern(self, host: str, lines: list[Line]) -> None:
        self.kern.setdefault(host, []).extend(lines)

    def sort(self) -> None:
        self.out.sort(key=lambda x: x[0])
        self.ctld.sort(key=lambda x: x[0])
        for v in self.kern.values():
            v.sort(key=lambda x: x[0])


def _at(t: int, lines: list[str], node: int) -> list[NLine]:
    return [(t, s, node) for s in lines]


def _seq(inc: Incident) -> int:
    return 36 * inc.last_step + 17


def _torchrun_all(ctx: RunContext, a: Attempt, t: int, root: tuple[int, int, int], fail_node: int | None,
                  code_other: int | None) -> list[NLine]:
    """Every node's torchrun report at ``t``: ``root`` (global rank, exit code, time) is the first
    failure, which the failed node's workers share; the other nodes' workers exit ``code_other``
    (or those nodes report nothing when it is None)."""
    out: list[NLine] = []
    G = ctx.G
    root_rank, code_fail, _ = root
    for ni in range(len(a.nodes)):
        if fail_node is not None and ni == fail_node:
            failed = [(root_rank % G, code_fail)] if code_fail != code_other else [(lr, code_fail) for lr in range(G)]
        elif code_other is None:
            continue
        else:
            failed = [(lr, code_other) for lr in range(G)]
        dt = 0 if ni == fail_node else 200_000 + ni * 1000
        out += _at(t + dt, TT.torchrun_failure(ctx, a, ni, t + dt, failed, root), ni)
    return out


def _srun_exit(a: Attempt, t: int, nodes: list[int], code: int) -> list[NLine]:
    out = [(t + 500_000, f"srun: error: {a.nodes[i]}: task {i}: Exited with exit code {code}", LAUNCHER) for i in nodes]
    out.append((t + 600_000, STEP_ABORTED, LAUNCHER))
    return out


def _sigterm(ctx: RunContext, a: Attempt, t: int) -> list[NLine]:
    out: list[NLine] = []
    for ni, host in enumerate(a.nodes):
        g = fmt.glog(t + ctx.skew(host))
        out.append((t, f"W{g} {ctx.launcher_pid(a, ni)} torch/distributed/elastic/agent/server/api.py:741] "
                       f"Received Signals.SIGTERM death signal, shutting down workers", ni))
    return out


class _Failure:
    """One attempt's failure as its evidence sees it, and the evidence written so far."""

    def __init__(self, ctx: RunContext, a: Attempt, inc: Incident, requeue: bool,
                 oom_cgroup: tuple[str, str, str] | None, rng: np.random.Generator):
        self.ctx, self.a, self.inc, self.requeue, self.oom_cgroup, self.rng = ctx, a, inc, requeue, oom_cgroup, rng
        self.ev = Evidence()
        self.cls = inc.root_cause
        self.j = a.job_id
        self.head = a.nodes[0]
        self.te, self.td = inc.t_fail, inc.t_detected
        self.node_i = a.nodes.index(inc.node) if inc.node is not None else None
        if ctx.wild.pods_per_node > 1 and inc.node is not None and inc.rank is not None:
            self.node_i = inc.rank // ctx.G  # the failed rank's pod, on the failed node
        self.rank = inc.rank if inc.rank is not None else 0
        self.gpu = inc.gpu if inc.gpu is not None else 0
        self.host = inc.node
        self.pid = ctx.pid(a, self.rank)
        self.W = int(ctx.cfg.watchdog_timeout_s * US)
        self.watchdog_t = self.te + self.W
        self.killed = inc.killed_by_walltime
        self.end_reason: str | None = None  # slurmstepd reason
        self.wexit: int | None = 1

    def node(self) -> tuple[str, int]:
        """(host, node index) of the failure."""
        assert self.host is not None and self.node_i is not None  # every class outside NO_NODE has its node
        return self.host, self.node_i

    def watchdogs(self, skip_node: int | None) -> None:
        """Every rank's NCCL watchdog fires, if that happens before the detection."""
        if self.watchdog_t > self.td:
            return
        ctx, G = self.ctx, self.ctx.G
        seq = _seq(self.inc)
        for r in range(ctx.world):
            if skip_node is not None and r // G == skip_node:
                continue
            ran = self.W // 1000 + int(self.rng.integers(5, 900))
            lines = TT.watchdog_timeout(ctx, r, seq, 25165824, ran)
            self.ev.out.extend(_at(self.watchdog_t + (r % 97) * 3000, lines, r // G))

    def peers(self, t_death: int) -> bool:
        """A rank died at ``t_death`` (``[wild] peer_errors``): its peers on the other nodes learn
        it in the seconds after, in causal order. The ranks that exchange data with the dead node
        see the IB completion error or the socket reset first; every surviving rank's process
        group then fails with ``ncclRemoteError``; those no error reached wait for the watchdog
        timeout, when it comes before the job is torn down. True when the peers were written
        (their torchrun then reports their workers failed too)."""
        ctx, a, G = self.ctx, self.a, self.ctx.G
        if not ctx.wild.peer_errors or self.node_i is None or len(a.nodes) < 2 or self.killed:
            return False
        rng = ctx.rng("peers", a.index)
        dead = self.node_i
        dead_host = a.nodes[dead]
        dead_ip = ctx.ip(dead_host)
        room = self.td - t_death - 300_000  # the errors come before the job is torn down
        if room <= 0:
            return False
        span = min(room, 12 * US)
        n = len(a.nodes)
        near = {(dead + 1) % n, (dead - 1) % n}  # ring neighbours talk to the dead node
        far_watchdog = t_death + self.W < self.td - 300_000
        seq = _seq(self.inc)
        for ni in range(n):
            if ni == dead or a.nodes[ni] == dead_host:
                continue
            told = ni in near or not far_watchdog or rng.random() < 0.4
            if not told:  # blocked in a collective: the watchdog ends it
                for lr in range(G):
                    r = ni * G + lr
                    ran = self.W // 1000 + int(rng.integers(5, 900))
                    lines = TT.watchdog_timeout(ctx, r, seq, 25165824, ran)
                    self.ev.out.extend(_at(t_death + self.W + (r % 97) * 3000, lines, ni))
                continue
            t1 = t_death + int(span * float(rng.uniform(0.05, 0.45)))
            first = ni * G + int(rng.integers(0, G))
            port = 40000 + int(rng.integers(0, 20000))
            if rng.random() < 0.6:
                warn = (f"NET/IB : Got completion from peer {dead_ip}<{port}> with status=12 opcode=0 len=0 "
                        f"vendor err 129 (Recv) localGid ::ffff:{ctx.ip(a.nodes[ni])} remoteGids::ffff:{dead_ip}")
                lines = [f"{nccl_prefix(ctx, a, first, 135)} transport/net_ib.cc:1696 NCCL WARN {warn}",
                         f"{nccl_prefix(ctx, a, first, 135)} NCCL INFO transport/net.cc:1134 -> 6"]
            else:
                warn = f"socketProgressOpt: Call to recv from {dead_ip}<{port}> failed : Connection reset by peer"
                lines = [f"{nccl_prefix(ctx, a, first, 131)} misc/socket.cc:50 NCCL WARN {warn}",
                         f"{nccl_prefix(ctx, a, first, 131)} NCCL INFO misc/socket.cc:752 -> 6"]
            self.ev.out.extend(_at(t1, lines, ni))
            t2 = t1 + int(rng.integers(200_000, 2_000_000))
            for lr in range(G):
                r = ni * G + lr
                self.ev.out.extend(_at(t2 + lr * 7_000, TT.nccl_remote_error(r, warn), ni))
        return True

    def crash(self, code: int, root_t: int, code_other: int | None) -> None:
        """torchrun reports the failed ranks at detection, srun the failed tasks (every node's
        when the other nodes' ranks failed too); nothing of it when the walltime kill came first."""
        if self.killed:
            return
        if code_other is None:
            nodes = [self.node()[1]]
        else:
            nodes = list(range(len(self.a.nodes)))
        self.ev.out += _torchrun_all(self.ctx, self.a, self.td, (self.rank, code, root_t), self.node_i, code_other)
        self.ev.out += _srun_exit(self.a, self.td, nodes, 1)

    def drain(self, reason: str) -> None:
        """slurmctld drains the failed node."""
        host, td = self.host, self.td
        self.ev.ctld += [
            S.ctld(td + 2 * US, f"update_node: node {host} reason set to: {reason}"),
            S.ctld(td + 2 * US, f"update_node: node {host} state set to DRAINED"),
        ]

    def outcome(self, k8s_reason: str, k8s_exit: int) -> None:
        self.ev.k8s_reason, self.ev.k8s_exit = k8s_reason, k8s_exit


def _gpu_hardware(f: _Failure) -> None:
    host, node_i = f.node()
    G, rank, te = f.ctx.G, f.rank, f.te
    f.ev.add_kern(host, K.gpu_fell_off(f.ctx, host, te, f.gpu, f.pid))
    f.ev.out.extend(_at(te + 800_000, TT.cuda_error(rank, "unknown error"), node_i))
    for lr in range(G):
        r = node_i * G + lr
        if r != rank:
            abort = TT.terminate_abort(r, "CUDA error: unknown error")
            f.ev.out.extend(_at(te + 1_200_000 + lr * 10_000, abort, node_i))
    if not f.peers(te + 1_200_000):
        f.watchdogs(node_i)
    f.crash(1, te + 800_000, -6)
    f.drain("Xid 79 GPU fell off the bus")
    f.outcome("Error", 1)


def _gpu_memory(f: _Failure) -> None:
    host, node_i = f.node()
    f.ev.add_kern(host, K.xid(f.ctx, host, f.te, f.gpu, f.pid, K.Xid(94, "Contained: SM (0x1). RST: No, D-RST: No")))
    f.ev.out.extend(_at(f.te + 500_000, TT.cuda_error(f.rank, "uncorrectable ECC error encountered"), node_i))
    f.crash(1, f.te + 500_000, -6 if f.peers(f.te + 600_000) else None)
    f.drain("Xid 94 uncorrectable ECC")
    f.outcome("Error", 1)


def _gpu_interconnect(f: _Failure) -> None:
    host, _ = f.node()
    link = int(f.rng.integers(0, 18))
    msg = f"NVLink: fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"
    f.ev.add_kern(host, K.xid(f.ctx, host, f.te, f.gpu, f.pid, K.Xid(74, msg)))
    f.watchdogs(None)
    f.crash(-6, f.watchdog_t, -6)
    f.drain("Xid 74 NVLink error")
    f.outcome("Error", 1)


def _network(f: _Failure) -> None:
    host, node_i = f.node()
    ctx, G, te, td = f.ctx, f.ctx.G, f.te, f.td
    up = te + int(f.rng.integers(60, 180)) * US
    f.ev.add_kern(host, K.mlx5_link(ctx, host, te, up, f.gpu))
    warn = ""
    for lr in range(G):
        r = node_i * G + lr
        peer = (r + G) % ctx.world if ctx.world > G else (r + 1) % ctx.world
        lines = ib_error(ctx, f.a, r, peer)
        warn = warn or lines[0].split("NCCL WARN ", 1)[1]
        f.ev.out.extend(_at(te + 300_000 + lr * 40_000, lines, node_i))
    for lr in range(G):
        r = node_i * G + lr
        f.ev.out.extend(_at(td - 2 * US + lr * 1000, TT.nccl_remote_error(r, warn), node_i))
    f.crash(-6, td - 2 * US, None)
    f.drain("IB link flapping")
    f.outcome("Error", 1)


def _collective_timeout(f: _Failure) -> None:
    f.watchdogs(None)
    f.crash(-6, f.watchdog_t, -6)
    f.outcome("Error", 1)


def _node_lost(f: _Failure) -> None:
    """host_hardware and node_failure: the node stops answering and slurmctld kills the job."""
    host, _ = f.node()
    ev, te, td, j = f.ev, f.te, f.td, f.j
    if f.cls == "host_hardware":
        ev.add_kern(host, K.mce(f.ctx, host, te))
    t_nr = te + (td - te) // 2
    ev.ctld.append(S.ctld(t_nr, f"error: Nodes {host} not responding"))
    ev.ctld.append(S.ctld(td - US, f"error: Nodes {host} not responding, setting DOWN"))
    ev.ctld.append(S.ctld(td, f"Killing JobId={j} on failed node {host}"))
    if f.requeue:
        ev.ctld.append(S.ctld(td + 1000, f"requeue job JobId={j} due to failure of node {host}"))
    ev.out.append((td, f"srun: error: Node failure on {host}", LAUNCHER))
    ev.out.append((td + 100_000, STEP_ABORTED, LAUNCHER))
    f.end_reason = "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS"
    f.wexit = None
    f.outcome("NodeLost", 137)


def _storage(f: _Failure) -> None:
    host, node_i = f.node()
    K_ = f.ctx.cfg.ckpt_interval_steps
    f.ev.add_kern(host, K.io_error(f.ctx, host, f.te))
    step = max(K_, (f.inc.last_step // K_) * K_)
    f.ev.out.extend(_at(f.te + 2 * US, TT.storage_error(f.rank, f.ctx.ckpt_dir, step), node_i))
    f.crash(1, f.te + 2 * US, None)
    f.outcome("Error", 1)


def _oom_gpu(f: _Failure) -> None:
    _, node_i = f.node()
    f.ev.out.extend(_at(f.te + 300_000, TT.cuda_oom(f.rank, f.gpu), node_i))
    f.crash(1, f.te + 300_000, -6 if f.peers(f.te + 400_000) else None)
    f.outcome("Error", 1)


def _oom_host(f: _Failure) -> None:
    host, node_i = f.node()
    ev, td, j = f.ev, f.td, f.j
    cgroup = f.oom_cgroup if f.oom_cgroup is not None else K.slurm_step_cgroup(f.ctx.uid, j)
    ev.add_kern(host, K.oom_kill(f.ctx, host, f.te, f.pid, f.ctx.uid, cgroup))
    if not f.killed:
        ev.out += _torchrun_all(f.ctx, f.a, td, (f.rank, -9, f.te), node_i, -6 if f.peers(f.te + 50_000) else None)
        ev.out.append(
            (
                td + 400_000,
                f"slurmstepd: error: Detected 1 oom_kill event in StepId={j}.0. "
                f"Some of the step tasks have been OOM Killed.",
                LAUNCHER,
            )
        )
        ev.out.append((td + 500_000, f"srun: error: {host}: task {node_i}: Out Of Memory", LAUNCHER))
        ev.out.append((td + 600_000, STEP_ABORTED, LAUNCHER))
    f.wexit = None
    f.outcome("OOMKilled", 137)


def _software(f: _Failure) -> None:
    """software and unknown: a crash, with a traceback only for software."""
    _, node_i = f.node()
    if f.cls == "software":
        lines = (TT.software_error(f.rank) if not f.ctx.wild.active
                 else TT.user_error(f.rank, int(f.ctx.rng("user-error", f.a.index).integers(0, 1 << 30))))
        f.ev.out.extend(_at(f.te + 200_000, lines, node_i))
    f.crash(1, f.te + 200_000, -6 if f.peers(f.te + 300_000) else None)
    f.outcome("Error", 1)


def _cancelled(f: _Failure) -> None:
    """hang, numerics, user_cancel: someone cancels the job (unless the walltime came first)."""
    if not f.killed:
        f.ev.ctld.append(S.ctld(f.td - 500_000, f"_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId={f.j} uid {f.ctx.uid}"))
        f.ev.out += _sigterm(f.ctx, f.a, f.td)
    f.wexit = None
    f.outcome("Error", 143)


def _maintenance(f: _Failure) -> None:
    ev, td, head = f.ev, f.td, f.head
    reason = "scheduled maintenance: firmware upgrade"
    ev.ctld.append(S.ctld(td - 300 * US, f"update_node: node {head} reason set to: {reason}"))
    ev.ctld.append(S.ctld(td - 300 * US, f"update_node: node {head} state set to DRAINING"))
    ev.ctld.append(S.ctld(td - 500_000, f"_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId={f.j} uid 0"))
    ev.out += _sigterm(f.ctx, f.a, td)
    f.wexit = None
    f.outcome("Error", 143)


def _preemption(f: _Failure) -> None:
    j = f.j
    other = j + 97 + int(f.rng.integers(0, 50))
    if f.requeue:
        f.ev.ctld.append(S.ctld(f.td, f"preempted JobId={j} has been requeued to reclaim resources for JobId={other}"))
    else:
        f.ev.ctld.append(S.ctld(f.td, f"preempted JobId={j} has been killed to reclaim resources for JobId={other}"))
    f.ev.out += _sigterm(f.ctx, f.a, f.td)
    f.end_reason = "PREEMPTION"
    f.wexit = None
    f.outcome("Evicted", 143)


# What each class leaves before the job ends (walltime leaves only the job's end).
_BY_CLASS: dict[str, Callable[[_Failure], None]] = {
    "gpu_hardware": _gpu_hardware,
    "gpu_memory": _gpu_memory,
    "gpu_interconnect": _gpu_interconnect,
    "network": _network,
    "collective_timeout": _collective_timeout,
    "host_hardware": _node_lost,
    "node_failure": _node_lost,
    "storage": _storage,
    "oom_gpu": _oom_gpu,
    "oom_host": _oom_host,
    "software": _software,
    "unknown": _software,
    "hang": _cancelled,
    "numerics": _cancelled,
    "user_cancel": _cancelled,
    "maintenance": _maintenance,
    "preemption": _preemption,
}


def _job_end(f: _Failure) -> None:
    """The walltime kill if any, slurmstepd's cancellation, the job's completion and requeue."""
    ev, cls, td, j = f.ev, f.cls, f.td, f.j
    if f.killed or cls == "walltime":
        ev.ctld.append(S.ctld(td, f"Time limit exhausted for JobId={j}"))
        ev.out += _sigterm(f.ctx, f.a, td)
        f.end_reason = "TIME LIMIT"
        f.wexit = None
    if f.end_reason is not None or cls in ("hang", "numerics", "user_cancel", "maintenance"):
        if f.end_reason is not None or not f.killed:
            ev.out.append((td + 300_000, S.stepd_cancel(j, f.head, td, f.end_reason), LAUNCHER))
    ev.ctld += S.job_complete(td + 3 * US, j, f.wexit)
    if f.requeue and cls not in ("node_failure", "host_hardware", "preemption"):
        ev.ctld.append(S.ctld(td + 4 * US, f"Requeuing JobId={j}"))


def attempt_evidence(ctx: RunContext, a: Attempt, inc: Incident | None, requeue: bool,
                     oom_cgroup: tuple[str, str, str] | None = None) -> Evidence:
    """The evidence of one attempt. ``oom_cgroup`` (cpuset, memcg, task memcg) names the
    killed task's cgroup in the oom-killer lines when the job did not run under Slurm."""
    if inc is None:  # completed
        ev = Evidence()
        ev.ctld += S.job_complete(a.end, a.job_id, 0)
        ev.k8s_reason, ev.k8s_exit = "Completed", 0
        return ev
    f = _Failure(ctx, a, inc, requeue, oom_cgroup, ctx.rng("evidence", a.index))
    by_class = _BY_CLASS.get(f.cls)
    if by_class is not None:
        by_class(f)
    _job_end(f)
    f.ev.sort()
    return f.ev
