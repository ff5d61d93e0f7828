"""What each failure class leaves in each source, for one attempt.

``attempt_evidence`` returns time-stamped lines for the attempt's console file,
the nodes' kernel logs and the scheduler log. Times are true UTC microseconds;
the printed clocks are the sources' own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toranalyze.simulate import emit_kernel as K
from toranalyze.simulate import emit_slurm as S
from toranalyze.simulate import emit_torch as TT
from toranalyze.simulate import fmt
from toranalyze.simulate.context import RunContext
from toranalyze.simulate.emit_nccl import ib_error
from toranalyze.simulate.timeline import US, Attempt, Incident

Line = tuple[int, str]
NLine = tuple[int, str, int]  # (time, text, node index of the process that printed it)
LAUNCHER = -1  # printed by srun/slurmstepd on the batch host, not by a training node

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


def _torchrun_all(ctx: RunContext, a: Attempt, t: int, root_rank: int, root_code: int, root_t: int,
                  fail_node: int | None, code_fail: int, code_other: int | None) -> list[NLine]:
    out: list[NLine] = []
    G = ctx.G
    for ni in range(len(a.nodes)):
        if fail_node is not None and ni == fail_node:
            failed = [(root_rank % G, code_fail)] if code_fail != code_other else [(lr, code_fail) for lr in range(G)]
        elif code_other is None:
            continue
        else:
            failed = [(lr, code_other) for lr in range(G)]
        dt = 0 if ni == fail_node else 200_000 + ni * 1000
        out += _at(t + dt, TT.torchrun_failure(ctx, a, ni, t + dt, failed, (root_rank, root_code, root_t)), ni)
    return out


def _srun_exit(a: Attempt, t: int, nodes: list[int], code: int) -> list[NLine]:
    out = [(t + 500_000, f"srun: error: {a.nodes[i]}: task {i}: Exited with exit code {code}", LAUNCHER) for i in nodes]
    out.append((t + 600_000, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", LAUNCHER))
    return out


def _sigterm(ctx: RunContext, a: Attempt, t: int) -> list[NLine]:
    out: list[NLine] = []
    for ni, host in enumerate(a.nodes):
        g = fmt.glog(t + ctx.skew(host))
        out.append((t, f"W{g} {ctx.launcher_pid(a, ni)} torch/distributed/elastic/agent/server/api.py:741] "
                       f"Received Signals.SIGTERM death signal, shutting down workers", ni))
    return out


def attempt_evidence(ctx: RunContext, a: Attempt, inc: Incident | None, requeue: bool,
                     oom_cgroup: tuple[str, str, str] | None = None) -> Evidence:
    """The evidence of one attempt. ``oom_cgroup`` (cpuset, memcg, task memcg) names the
    killed task's cgroup in the oom-killer lines when the job did not run under Slurm."""
    ev = Evidence()
    cfg = ctx.cfg
    G = ctx.G
    rng = ctx.rng("evidence", a.index)
    j = a.job_id
    head = a.nodes[0]
    if inc is None:  # completed
        ev.ctld += S.job_complete(a.end, j, 0)
        ev.k8s_reason, ev.k8s_exit = "Completed", 0
        return ev
    cls = inc.root_cause
    te, td = inc.t_fail, inc.t_detected
    node_i = a.nodes.index(inc.node) if inc.node is not None else None
    rank = inc.rank if inc.rank is not None else 0
    gpu = inc.gpu if inc.gpu is not None else 0
    host = inc.node
    pid = ctx.pid(a, rank)
    W = int(cfg.watchdog_timeout_s * US)
    watchdog_t = te + W
    killed = inc.killed_by_walltime
    end_reason: str | None = None  # slurmstepd reason
    wexit: int | None = 1

    def watchdogs(skip_node: int | None) -> None:
        if watchdog_t > td:
            return
        seq = _seq(inc)
        for r in range(ctx.world):
            if skip_node is not None and r // G == skip_node:
                continue
            ran = W // 1000 + int(rng.integers(5, 900))
            ev.out.extend(_at(watchdog_t + (r % 97) * 3000, TT.watchdog_timeout(ctx, r, seq, 25165824, ran), r // G))

    if cls == "gpu_hardware":
        assert host is not None and node_i is not None  # every class outside NO_NODE has its node
        ev.add_kern(host, K.gpu_fell_off(ctx, host, te, gpu, pid))
        ev.out.extend(_at(te + 800_000, TT.cuda_error(rank, "unknown error"), node_i))
        for lr in range(G):
            r = node_i * G + lr
            if r != rank:
                abort = TT.terminate_abort(r, "CUDA error: unknown error")
                ev.out.extend(_at(te + 1_200_000 + lr * 10_000, abort, node_i))
        watchdogs(node_i)
        if not killed:
            ev.out += _torchrun_all(ctx, a, td, rank, 1, te + 800_000, node_i, 1, -6)
            ev.out += _srun_exit(a, td, list(range(len(a.nodes))), 1)
        ev.ctld += [
            S.ctld(td + 2 * US, f"update_node: node {host} reason set to: Xid 79 GPU fell off the bus"),
            S.ctld(td + 2 * US, f"update_node: node {host} state set to DRAINED"),
        ]
        ev.k8s_reason, ev.k8s_exit = "Error", 1
    elif cls == "gpu_memory":
        assert host is not None and node_i is not None  # every class outside NO_NODE has its node
        ev.add_kern(host, K.xid(ctx, host, te, gpu, 94, pid, "Contained: SM (0x1). RST: No, D-RST: No"))
        ev.out.extend(_at(te + 500_000, TT.cuda_error(rank, "uncorrectable ECC error encountered"), node_i))
        if not killed:
            ev.out += _torchrun_all(ctx, a, td, rank, 1, te + 500_000, node_i, 1, None)
            ev.out += _srun_exit(a, td, [node_i], 1)
        ev.ctld += [
            S.ctld(td + 2 * US, f"update_node: node {host} reason set to: Xid 94 uncorrectable ECC"),
            S.ctld(td + 2 * US, f"update_node: node {host} state set to DRAINED"),
        ]
        ev.k8s_reason, ev.k8s_exit = "Error", 1
    elif cls == "gpu_interconnect":
        assert host is not None and node_i is not None  # every class outside NO_NODE has its node
        link = int(rng.integers(0, 18))
        ev.add_kern(
            host,
            K.xid(
                ctx,
                host,
                te,
                gpu,
                74,
                pid,
                f"NVLink: fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
            ),
        )
        watchdogs(None)
        if not killed:
            ev.out += _torchrun_all(ctx, a, td, rank, -6, watchdog_t, node_i, -6, -6)
            ev.out += _srun_exit(a, td, list(range(len(a.nodes))), 1)
        ev.ctld += [
            S.ctld(td + 2 * US, f"update_node: node {host} reason set to: Xid 74 NVLink error"),
            S.ctld(td + 2 * US, f"update_node: node {host} state set to DRAINED"),
        ]
        ev.k8s_reason, ev.k8s_exit = "Error", 1
    elif cls == "network":
        assert host is not None and node_i is not None  # every class outside NO_NODE has its node
        up = te + int(rng.integers(60, 180)) * US
        ev.add_kern(host, K.mlx5_link(ctx, host, te, up, gpu))
        warn = ""
        for lr in range(G):
            r = node_i * G + lr
            peer = (r + G) % ctx.world if ctx.world > G else (r + 1) % ctx.world
            lines = ib_error(ctx, a, r, peer)
            warn = warn or lines[0].split("NCCL WARN ", 1)[1]
            ev.out.extend(_at(te + 300_000 + lr * 40_000, lines, node_i))
        for lr in range(G):
            r = node_i * G + lr
            ev.out.extend(_at(td - 2 * US + lr * 1000, TT.nccl_remote_error(r, warn), node_i))
        if not killed:
            ev.out += _torchrun_all(ctx, a, td, rank, -6, td - 2 * US, node_i, -6, None)
            ev.out += _srun_exit(a, td, [node_i], 1)
        ev.ctld += [
            S.ctld(td + 2 * US, f"update_node: node {host} reason set to: IB link flapping"),
            S.ctld(td + 2 * US, f"update_node: node {host} state set to DRAINED"),
        ]
        ev.k8s_reason, ev.k8s_exit = "Error", 1
    elif cls == "collective_timeout":
        watchdogs(None)
        if not killed:
            ev.out += _torchrun_all(ctx, a, td, rank, -6, watchdog_t, node_i, -6, -6)
            ev.out += _srun_exit(a, td, list(range(len(a.nodes))), 1)
        ev.k8s_reason, ev.k8s_exit = "Error", 1
    elif cls in ("host_hardware", "node_failure"):
        assert host is not None and node_i is not None  # every class outside NO_NODE has its node
        if cls == "host_hardware":
            ev.add_kern(host, K.mce(ctx, host, te))
        t_nr = te + (td - te) // 2
        ev.ctld.append(S.ctld(t_nr, f"error: Nodes {host} not responding"))
        ev.ctld.append(S.ctld(td - US, f"error: Nodes {host} not responding, setting DOWN"))
        ev.ctld.append(S.ctld(td, f"Killing JobId={j} on failed node {host}"))
        if requeue:
            ev.ctld.append(S.ctld(td + 1000, f"requeue job JobId={j} due to failure of node {host}"))
        ev.out.append((td, f"srun: error: Node failure on {host}", LAUNCHER))
        ev.out.append(
            (td + 100_000, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", LAUNCHER)
        )
        end_reason = "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS"
        wexit = None
        ev.k8s_reason, ev.k8s_exit = "NodeLost", 137
    elif cls == "storage":
        assert host is not None and node_i is not None  # every class outside NO_NODE has its node
        ev.add_kern(host, K.io_error(ctx, host, te))
        step = max(cfg.ckpt_interval_steps, (inc.last_step // cfg.ckpt_interval_steps) * cfg.ckpt_interval_steps)
        ev.out.extend(_at(te + 2 * US, TT.storage_error(rank, ctx.ckpt_dir, step), node_i))
        if not killed:
            ev.out += _torchrun_all(ctx, a, td, rank, 1, te + 2 * US, node_i, 1, None)
            ev.out += _srun_exit(a, td, [node_i], 1)
        ev.k8s_reason, ev.k8s_exit = "Error", 1
    elif cls == "oom_gpu":
        assert host is not None and node_i is not None  # every class outside NO_NODE has its node
        ev.out.extend(_at(te + 300_000, TT.cuda_oom(rank, gpu), node_i))
        if not killed:
            ev.out += _torchrun_all(ctx, a, td, rank, 1, te + 300_000, node_i, 1, None)
            ev.out += _srun_exit(a, td, [node_i], 1)
        ev.k8s_reason, ev.k8s_exit = "Error", 1
    elif cls == "oom_host":
        assert host is not None and node_i is not None  # every class outside NO_NODE has its node
        ev.add_kern(host, K.oom_kill(ctx, host, te, pid, j, ctx.uid, oom_cgroup))
        if not killed:
            ev.out += _torchrun_all(ctx, a, td, rank, -9, te, node_i, -9, None)
            ev.out.append(
                (
                    td + 400_000,
                    f"slurmstepd: error: Detected 1 oom_kill event in StepId={j}.0. "
                    f"Some of the step tasks have been OOM Killed.",
                    LAUNCHER,
                )
            )
            ev.out.append((td + 500_000, f"srun: error: {host}: task {node_i}: Out Of Memory", LAUNCHER))
            ev.out.append(
                (td + 600_000, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", LAUNCHER)
            )
        wexit = None
        ev.k8s_reason, ev.k8s_exit = "OOMKilled", 137
    elif cls == "software" or cls == "unknown":
        assert host is not None and node_i is not None  # every class outside NO_NODE has its node
        if cls == "software":
            ev.out.extend(_at(te + 200_000, TT.software_error(rank), node_i))
        if not killed:
            ev.out += _torchrun_all(ctx, a, td, rank, 1, te + 200_000, node_i, 1, None)
            ev.out += _srun_exit(a, td, [node_i], 1)
        ev.k8s_reason, ev.k8s_exit = "Error", 1
    elif cls in ("hang", "numerics", "user_cancel"):
        if not killed:
            ev.ctld.append(S.ctld(td - 500_000, f"_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId={j} uid {ctx.uid}"))
            ev.out += _sigterm(ctx, a, td)
        wexit = None
        ev.k8s_reason, ev.k8s_exit = "Error", 143
    elif cls == "maintenance":
        ev.ctld.append(
            S.ctld(td - 300 * US, f"update_node: node {head} reason set to: scheduled maintenance: firmware upgrade")
        )
        ev.ctld.append(S.ctld(td - 300 * US, f"update_node: node {head} state set to DRAINING"))
        ev.ctld.append(S.ctld(td - 500_000, f"_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId={j} uid 0"))
        ev.out += _sigterm(ctx, a, td)
        wexit = None
        ev.k8s_reason, ev.k8s_exit = "Error", 143
    elif cls == "preemption":
        other = j + 97 + int(rng.integers(0, 50))
        if requeue:
            ev.ctld.append(S.ctld(td, f"preempted JobId={j} has been requeued to reclaim resources for JobId={other}"))
        else:
            ev.ctld.append(S.ctld(td, f"preempted JobId={j} has been killed to reclaim resources for JobId={other}"))
        ev.out += _sigterm(ctx, a, td)
        end_reason = "PREEMPTION"
        wexit = None
        ev.k8s_reason, ev.k8s_exit = "Evicted", 143
    if killed or cls == "walltime":
        ev.ctld.append(S.ctld(td, f"Time limit exhausted for JobId={j}"))
        ev.out += _sigterm(ctx, a, td)
        end_reason = "TIME LIMIT"
        wexit = None
    if end_reason is not None or cls in ("hang", "numerics", "user_cancel", "maintenance"):
        if end_reason is not None or not killed:
            ev.out.append((td + 300_000, S.stepd_cancel(j, head, td, end_reason), LAUNCHER))
    ev.ctld += S.job_complete(td + 3 * US, j, wexit)
    if requeue and cls not in ("node_failure", "host_hardware", "preemption"):
        ev.ctld.append(S.ctld(td + 4 * US, f"Requeuing JobId={j}"))
    ev.sort()
    return ev
