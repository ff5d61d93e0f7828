"""NCCL_DEBUG=INFO output: start-up chatter of every rank and IB error lines."""

from __future__ import annotations

from collections.abc import Iterator

from toranalyze.simulate.context import RunContext
from toranalyze.simulate.timeline import Attempt

NCCL_VERSION = "2.18.5+cuda12.2"
Line = tuple[int, str]


def prefix(ctx: RunContext, a: Attempt, rank: int, tid_off: int = 0) -> str:
    host = ctx.host_of(a, rank)
    pid = ctx.pid(a, rank)
    return f"{host}:{pid}:{pid + tid_off} [{rank % ctx.G}]"


def init_chatter(ctx: RunContext, a: Attempt, only_node: int | None = None) -> Iterator[Line]:
    """Every rank's NCCL init lines, interleaved; ends with Init COMPLETE for every rank.

    ``only_node`` keeps the lines of that node's ranks (one pod's log); the times and
    the draws are those of the whole run either way."""
    rng = ctx.rng("nccl-init", a.index)
    world = ctx.world
    G = ctx.G
    t0 = a.start + (a.load_begin - a.start) * 2 // 5
    t1 = a.start + (a.load_begin - a.start) * 3 // 5
    comm_id = int(rng.integers(1 << 60, 1 << 62))
    n_extra = max(0, ctx.cfg.nccl_chatter - 6)
    span = max(1, t1 - t0)
    # Phase 1: bootstrap / transport lines per rank (order shuffled between ranks)
    order = rng.permutation(world)
    step = max(1, span // (2 * max(1, world)))
    t = t0
    for r in order:
        r = int(r)
        if only_node is not None and r // G != only_node:
            t += step
            continue
        p = prefix(ctx, a, r)
        host = ctx.host_of(a, r)
        ip = ctx.ip(host)
        if r == 0:
            yield t, f"{p} NCCL INFO NCCL version {NCCL_VERSION}"
        yield t, f"{p} NCCL INFO Bootstrap : Using ibp12s0:{ip}<0>"
        yield t, f"{p} NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation"
        yield t, f"{p} NCCL INFO cudaDriverVersion 12020"
        yield t, (
            f"{p} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB "
            f"[4]mlx5_4:1/IB [5]mlx5_5:1/IB [6]mlx5_6:1/IB [7]mlx5_7:1/IB ; OOB ibp12s0:{ip}<0>"
        )
        yield t, f"{p} NCCL INFO Using network IB"
        for k in range(n_extra):
            c = (r + k) % 4
            if c == 0:
                yield t, f"{p} NCCL INFO Channel {k:02d}/32 :    {r} {(r + 1) % world} {(r + 2) % world}"
            elif c == 1:
                yield t, f"{p} NCCL INFO Setting affinity for GPU {r % G} to ffffffff,00000000,ffffffff"
            elif c == 2:
                yield t, f"{p} NCCL INFO NVLS multicast support is not available on dev {r % G}"
            else:
                yield t, f"{p} NCCL INFO P2P Chunksize set to 524288"
        t += step
    # Phase 2: Init COMPLETE for every rank
    order = rng.permutation(world)
    for r in order:
        r = int(r)
        if only_node is not None and r // G != only_node:
            t += step
            continue
        p = prefix(ctx, a, r)
        yield t, (
            f"{p} NCCL INFO comm 0x{0x55d0c0000000 + r * 0x1f40:x} rank {r} nranks {world} cudaDev {r % G} "
            f"nvmlDev {r % G} busId {ctx.bus(r % G).replace(':', '')}0 commId 0x{comm_id:x} - Init COMPLETE"
        )
        t += step


def ib_error(ctx: RunContext, a: Attempt, rank: int, peer_rank: int) -> list[str]:
    """The IB completion error as NCCL prints it on the rank whose link failed."""
    p = prefix(ctx, a, rank, 135)
    peer_ip = ctx.ip(ctx.host_of(a, peer_rank))
    port = 40000 + (peer_rank * 97) % 20000
    return [
        f"{p} transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer {peer_ip}<{port}> with error 12, "
        f"opcode 0, len 0, vendor err 129 (Recv)",
        f"{p} NCCL INFO transport/net.cc:1134 -> 6",
        f"{p} NCCL INFO proxy.cc:679 -> 6",
        f"{p} NCCL INFO proxy.cc:858 -> 6 [Proxy Thread]",
    ]
