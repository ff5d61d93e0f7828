"""Kernel log lines (syslog ``kern.log``) of GPU nodes: Xid, mlx5, MCE/EDAC, I/O, OOM, noise."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from toranalyze.simulate import fmt
from toranalyze.simulate.context import RunContext
from toranalyze.simulate.wild import kernel_line

Line = tuple[int, str]


def line(ctx: RunContext, host: str, t_us: int, text: str) -> Line:
    """``Mon DD HH:MM:SS host kernel: [uptime] text`` on the host's (skewed) clock (or the job's
    other kernel-log format: ``journalctl -k -o short-iso``, ``dmesg -T``)."""
    if ctx.wild.kernel != "syslog":
        return t_us, kernel_line(ctx.wild.kernel, host, t_us + ctx.skew(host), ctx.uptime_s(host, t_us), text)
    return t_us, f"{fmt.syslog(t_us + ctx.skew(host))} {host} kernel: [{ctx.uptime_s(host, t_us):12.6f}] {text}"


@dataclass(frozen=True)
class Xid:
    """An NVIDIA Xid error: its code and the driver's description."""

    code: int
    text: str


def xid(ctx: RunContext, host: str, t: int, gpu: int, pid: int, err: Xid) -> list[Line]:
    bus = ctx.bus(gpu)
    return [line(ctx, host, t, f"NVRM: Xid (PCI:0000:{bus}): {err.code}, pid={pid}, name=python3, {err.text}")]


def gpu_fell_off(ctx: RunContext, host: str, t: int, gpu: int, pid: int) -> list[Line]:
    bus = ctx.bus(gpu)
    return [
        line(ctx, host, t, f"NVRM: GPU at PCI:0000:{bus}: GPU-{abs(hash_s(host, gpu)):08x}-5c1e-2f4a-8d61-0b7e3a9c{gpu:04d}"),
        line(ctx, host, t, f"NVRM: GPU Board Serial Number: 1652{abs(hash_s(host, gpu)) % 10**9:09d}"),
        *xid(ctx, host, t, gpu, pid, Xid(79, "GPU has fallen off the bus.")),
        line(ctx, host, t + 2000, "NVRM: GPU 0000:" + bus + ".0: GPU has fallen off the bus."),
        line(ctx, host, t + 900_000, "NVRM: A GPU crash dump has been created. If possible, please run"),
        line(ctx, host, t + 900_000, "NVRM: nvidia-bug-report.sh as root to collect this data before"),
        line(ctx, host, t + 900_000, "NVRM: the NVIDIA kernel module is unloaded."),
    ]


def hash_s(host: str, k: int) -> int:
    h = 2166136261
    for ch in f"{host}/{k}":
        h = ((h ^ ord(ch)) * 16777619) & 0xFFFFFFFF
    return h


def mlx5_link(ctx: RunContext, host: str, t_down: int, t_up: int, gpu: int) -> list[Line]:
    b = ctx.hca(gpu)
    dev = f"ibp{int(b[:2], 16)}s0"
    return [
        line(ctx, host, t_down, f"mlx5_core 0000:{b}: mlx5_port_module_event:1144:(pid 0): Port module event[error]: module 0, Cable error, Bad or shorted cable/module"),
        line(ctx, host, t_down + 1500, f"mlx5_core 0000:{b} {dev}: Link down"),
        line(ctx, host, t_up, f"mlx5_core 0000:{b} {dev}: Link up"),
    ]


def mce(ctx: RunContext, host: str, t: int) -> list[Line]:
    return [
        line(ctx, host, t, "mce: [Hardware Error]: Machine check events logged"),
        line(ctx, host, t, "mce: [Hardware Error]: CPU 27: Machine Check Exception: 5 Bank 13: be00000000800400"),
        line(ctx, host, t, "mce: [Hardware Error]: RIP !INEXACT! 10:<ffffffff9a2d6e43> {native_safe_halt+0x13/0x20}"),
        line(ctx, host, t, "EDAC MC1: 1 UE memory read error on CPU_SrcID#1_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x4f1a2c offset:0x0 grain:32 -  err_code:0x0000:0x0090 ProcessorSocketId:0x1 MemoryControllerId:0x0 PhysicalRankId:0 Row:0x1e3a Column:0x2c8 Bank:0x2 BankGroup:0x1)"),
        line(ctx, host, t + 3000, "Kernel panic - not syncing: Fatal machine check"),
    ]


def io_error(ctx: RunContext, host: str, t: int) -> list[Line]:
    return [
        line(ctx, host, t, "LustreError: 11-0: lustre-OST0012-osc-ffff9b3f2a7c4800: operation ost_write to node 10.200.0.12@o2ib failed: rc = -5"),
        line(ctx, host, t + 400, "LustreError: 29374:0:(osc_request.c:1986:osc_brw_redo_request()) @@@ redo for recoverable error -5  req@ffff9b2e1c0a6300 x1790332812544 ost_write"),
        line(ctx, host, t + 900, "Lustre: lustre-OST0012-osc-ffff9b3f2a7c4800: Connection to lustre-OST0012 (at 10.200.0.12@o2ib) was lost; in progress operations using this service will wait for recovery to complete"),
    ]


def slurm_step_cgroup(uid: int, job_id: int) -> tuple[str, str, str]:
    """(cpuset, memcg, task memcg) of a Slurm job's first step."""
    cg = f"/slurm/uid_{uid}/job_{job_id}/step_0"
    return "step_0", cg, f"{cg}/task_0"


def oom_kill(ctx: RunContext, host: str, t: int, pid: int, uid: int, cgroup: tuple[str, str, str]) -> list[Line]:
    """The memory-cgroup oom-killer lines; ``cgroup`` = (cpuset, memcg, task memcg)."""
    cpuset, memcg, task_cg = cgroup
    return [
        line(ctx, host, t, "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"),
        line(ctx, host, t, f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset={cpuset},mems_allowed=0-1,oom_memcg={memcg},task_memcg={task_cg},task=python3,pid={pid},uid={uid}"),
        line(ctx, host, t, f"Memory cgroup out of memory: Killed process {pid} (python3) total-vm:1238455612kB, anon-rss:187334120kB, file-rss:901244kB, shmem-rss:16384kB, UID:{uid} pgtables:379812kB oom_score_adj:0"),
    ]


NOISE = (
    "perf: interrupt took too long (2504 > 2500), lowering kernel.perf_event_max_sample_rate to 79750",
    "TCP: request_sock_TCP: Possible SYN flooding on port 29500. Sending cookies.  Check SNMP counters.",
    "nvidia-peermem: module verification failed: signature and/or required key missing - tainting kernel",
    "[UFW BLOCK] IN=eno1 OUT= MAC=01:00:5e:00:00:01:b4:96:91:3c:0e:21:08:00 SRC=10.0.0.1 DST=224.0.0.1 LEN=36 TOS=0x00 PREC=0xC0 TTL=1 ID=0 DF PROTO=2",
    "audit: type=1400 audit(1709539200.123:412): apparmor=\"DENIED\" operation=\"open\" profile=\"snap.lxd.lxc\" name=\"/proc/sys/vm/max_map_count\" pid=4412 comm=\"lxc\" requested_mask=\"r\" denied_mask=\"r\" fsuid=0 ouid=0",
    "xfs filesystem being remounted at /tmp supports timestamps until 2038 (0x7fffffff)",
    "IPv6: ADDRCONF(NETDEV_CHANGE): eno2: link becomes ready",
    "nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
)


def noise(ctx: RunContext, host: str, t0: int, t1: int) -> Iterator[Line]:
    """Benign kernel chatter, Poisson in time."""
    rate = ctx.cfg.noise_per_hour
    if rate <= 0:
        return
    rng = ctx.rng("kern-noise", host)
    t = t0
    while True:
        t += int(rng.exponential(3600.0 / rate) * 1e6)
        if t >= t1:
            return
        yield line(ctx, host, t, NOISE[int(rng.integers(0, len(NOISE)))])
