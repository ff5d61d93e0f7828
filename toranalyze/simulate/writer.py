"""Stream a simulated run to disk: one file at a time, lines merged in time order.

Memory stays bounded by the largest single incident (a watchdog flood of every
rank): files are written through a buffered handle from generators, never built
whole in memory, and the steps come chunk by chunk from ``Timeline.steps()``.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from toranalyze.simulate import emit_kernel as K
from toranalyze.simulate import emit_slurm as S
from toranalyze.simulate import emit_trainer as TR
from toranalyze.simulate import fmt
from toranalyze.simulate.context import RunContext
from toranalyze.simulate.emit_nccl import init_chatter
from toranalyze.simulate.emit_torch import launcher_start
from toranalyze.simulate.evidence import Evidence, attempt_evidence
from toranalyze.simulate.timeline import US, Attempt, Timeline
from toranalyze.simulate.wild import (
    KERNEL_FILE,
    PLAIN,
    Tagged,
    WildJob,
    Wrapper,
    env_dump,
    tag,
    torchrun_rendezvous,
    wrapped,
)

Line = tuple[int, str]
BUF = 1 << 20

PY_WARNINGS = (
    "/usr/local/lib/python3.10/dist-packages/transformer_engine/pytorch/attention.py:4397: UserWarning: "
    "flash-attn may provide important feature support or performance improvement. Please install "
    "flash-attn >= 2.1.1, <= 2.4.2.",
    "  warnings.warn(",
    "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader "
    "will create 16 worker processes in total. Our suggested max number of worker in current system is 12, which "
    "is smaller than what this DataLoader is going to create. Please be aware that excessive worker creation "
    "might get DataLoader running slow or even freeze, lower the worker number to avoid potential "
    "slowness/freeze if necessary.",
    "  warnings.warn(_create_warning_msg(",
)


def write_lines(path: Path, lines: Iterable[str]) -> int:
    """Write lines (without newlines) through a buffer; returns bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    chunk: list[str] = []
    size = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for line in lines:
            chunk.append(line)
            size += len(line) + 1
            if size >= BUF:
                s = "\n".join(chunk) + "\n"
                fh.write(s)
                n += len(s)
                chunk, size = [], 0
        if chunk:
            s = "\n".join(chunk) + "\n"
            fh.write(s)
            n += len(s)
    return n


def merged(*streams: Iterable[Line]) -> Iterator[str]:
    """Merge time-ordered streams (stable for equal times: earlier streams first)."""
    for _, text in heapq.merge(*streams, key=lambda x: x[0]):
        yield text


class RunWriter:
    def __init__(self, tl: Timeline, seed: int, job_index: int = 0, wild: WildJob = PLAIN):
        self.tl = tl
        self.ctx = RunContext(tl, seed, job_index, wild=wild)
        self.requeue = tl.config.job_id_mode == "requeue"
        self._ev: dict[int, Evidence] = {}
        self.steps = tl.steps()  # step chunks, attempt by attempt (replayed when not kept)
        self._submit: dict[int, int] = {}
        rng = self.ctx.rng("submit")
        for a in tl.attempts:
            if a.index == 0:
                self._submit[0] = a.start - int(rng.integers(10, 900)) * US
            else:
                prev = tl.attempts[a.index - 1]
                self._submit[a.index] = min(a.start, prev.end + int(rng.integers(2, 20)) * US)

    def evidence(self, a: Attempt) -> Evidence:
        if a.index not in self._ev:
            inc = self.tl.incidents[a.incident] if a.incident is not None else None
            self._ev[a.index] = attempt_evidence(self.ctx, a, inc, self.requeue)
        return self._ev[a.index]

    # ---------------------------------------------------------------- console (rank 0 node)
    def console(self, a: Attempt) -> Iterator[str]:
        ctx = self.ctx
        if ctx.wild.active:
            return self.wild_lines(a, None)
        t_l = a.start + min(3 * US, (a.load_begin - a.start) // 10)
        launch: list[Line] = []
        for ni in range(len(a.nodes)):
            launch += [(t_l + ni * 1000, s) for s in launcher_start(ctx, a, ni, t_l + ni * 1000)]
        warn_t = a.start + (a.load_begin - a.start) // 2
        warns: list[Line] = []
        for ni in range(min(len(a.nodes), 4)):
            warns += [(warn_t + ni * 1000, s) for s in PY_WARNINGS]
        ev = self.evidence(a)
        streams: list[Iterable[Line]] = [
            launch,
            TR.banner(ctx, a),
            init_chatter(ctx, a),
            warns,
            TR.progress(ctx, a, self.steps.attempt(a.index)),
            [(t, s) for t, s, _ in ev.out],
        ]
        if a.incident is None:
            streams.append(TR.final(ctx, a))
        return merged(*streams)

    def wild_lines(self, a: Attempt, only_node: int | None) -> Iterator[str]:
        """One attempt's console (``only_node`` None) or one pod's log lines as the job's
        ``[wild]`` draw prints them: its size statements, its NCCL debug level, its wrapper."""
        ctx, wild = self.ctx, self.ctx.wild
        nodes = range(len(a.nodes)) if only_node is None else [only_node]
        master = self.pod_of(0) or a.nodes[0]
        t_l = a.start + min(3 * US, (a.load_begin - a.start) // 10)
        warn_t = a.start + (a.load_begin - a.start) // 2
        launch: list[Line] = []
        warns: list[Line] = []
        for ni in nodes:
            tn = t_l + ni * 1000
            launch += [(tn, s) for s in launcher_start(ctx, a, ni, tn)]
            if wild.size_source == "torchrun":
                host = a.nodes[ni]
                g = fmt.glog(tn + 400_000 + ctx.skew(host))
                head = (f"I{g} {ctx.launcher_pid(a, ni)} "
                        f"torch/distributed/elastic/agent/server/api.py:568] ")
                launch += [(tn + 400_000, head + s if s.startswith("[") else s)
                           for s in torchrun_rendezvous(master, ni, len(a.nodes), ctx.G)]
            if only_node is not None or ni < 4:
                warns += [(warn_t + ni * 1000, s) for s in PY_WARNINGS]
        launch.sort(key=lambda x: x[0])
        ev = self.evidence(a)
        out = [(t, s) for t, s, node in ev.out if only_node is None or node == only_node]
        streams: list[Iterable[Tagged]] = [tag(launch, "stderr")]
        head0 = only_node is None or only_node == 0
        if head0:
            banner: Iterable[Line] = TR.banner(ctx, a)
            if not wild.megatron_size:
                banner = ((t, s) for t, s in banner if not s.startswith("using world size:"))
            if wild.size_source == "env":
                te = a.start + (a.load_begin - a.start) // 6
                banner = heapq.merge([(te, s) for s in env_dump(master, ctx.world, ctx.G)], banner,
                                     key=lambda x: x[0])
            streams.append(tag(banner, "stdout"))
        if wild.nccl_info:
            streams.append(tag(init_chatter(ctx, a, only_node=only_node), "stderr"))
        streams.append(tag(warns, "stderr"))
        if head0:
            streams.append(tag(TR.progress(ctx, a, self.steps.attempt(a.index)), "stdout"))
        streams.append(tag(out, "stderr"))
        if head0 and a.incident is None:
            streams.append(tag(TR.final(ctx, a), "stdout"))
        host = a.nodes[0 if only_node is None else only_node]
        w = Wrapper(wild.wrapper, host, ctx.skew(host), self.pod_of(only_node), pid=ctx.pid(a, 0))
        return wrapped(w, streams)

    def pod_of(self, ni: int | None) -> str | None:
        """The pod that prints node ``ni``'s lines (none under Slurm)."""
        return None

    def console_files(self) -> Iterator[tuple[str, Iterator[str]]]:
        """(file name, lines) of the Slurm console files."""
        if self.requeue:
            def chain() -> Iterator[str]:
                for a in self.tl.attempts:
                    yield from self.console(a)
            yield f"slurm-{self.tl.attempts[0].job_id}.out", chain()
        else:
            for a in self.tl.attempts:
                yield f"slurm-{a.job_id}.out", self.console(a)

    # ---------------------------------------------------------------- scheduler
    def sacct(self) -> Iterator[str]:
        yield S.SACCT_HEADER
        for a in self.tl.attempts:
            yield from S.sacct_rows(self.ctx, a, self._submit[a.index])

    def ctld_lines(self) -> list[Line]:
        out: list[Line] = []
        for a in self.tl.attempts:
            if a.index == 0 or not self.requeue:
                out += S.allocate(a, self._submit[a.index])
            else:
                out.append(S.allocate(a, self._submit[a.index])[1])
            out += self.evidence(a).ctld
        out.sort(key=lambda x: x[0])
        return out

    def ctld_noise(self) -> Iterator[Line]:
        """Other users' jobs starting and ending on the cluster."""
        rng = self.ctx.rng("ctld-noise")
        t = self.tl.t_start - 600 * US
        jid = self.tl.config.first_job_id - 50
        end = self.tl.t_end + 600 * US
        # Slurm never gives two jobs one id: the other jobs skip every id of this job's attempts
        # (not only the first), and never complete one of them.
        ours = {a.job_id for a in self.tl.attempts}
        while True:
            t += int(rng.exponential(1800.0) * US)
            if t >= end:
                return
            jid += 1
            while jid in ours:
                jid += 1
            node = f"cpu-{int(rng.integers(1, 64)):03d}"
            yield S.ctld(t, f"sched: Allocate JobId={jid} NodeList={node} #CPUs=8 Partition=cpu")
            if jid - 3 not in ours:
                yield S.ctld(t + 2000, f"_job_complete: JobId={jid - 3} WEXITSTATUS 0")
                yield S.ctld(t + 3000, f"_job_complete: JobId={jid - 3} done")

    def slurmctld(self) -> Iterator[str]:
        return merged(self.ctld_lines(), self.ctld_noise())

    # ---------------------------------------------------------------- kernel logs
    def used_hosts(self) -> list[str]:
        seen: list[str] = []
        for a in self.tl.attempts:
            for h in a.nodes:
                if h not in seen:
                    seen.append(h)
        return sorted(seen)

    def kern(self, host: str) -> Iterator[str]:
        ev_lines: list[Line] = []
        for a in self.tl.attempts:
            ev_lines += self.evidence(a).kern.get(host, [])
        ev_lines.sort(key=lambda x: x[0])
        t0 = self.tl.t_start - 1800 * US
        t1 = self.tl.t_end + 1800 * US
        return merged(ev_lines, K.noise(self.ctx, host, t0, t1))

    # ---------------------------------------------------------------- all files
    def write_slurm(self, out: Path) -> dict[str, int]:
        sizes: dict[str, int] = {}
        out.mkdir(parents=True, exist_ok=True)
        sizes["sacct.txt"] = write_lines(out / "sacct.txt", self.sacct())
        sizes["slurmctld.log"] = write_lines(out / "slurmctld.log", self.slurmctld())
        for name, lines in self.console_files():
            sizes[name] = write_lines(out / name, lines)
            for a in self.tl.attempts:  # console evidence is written once: free it
                if (self.requeue or name == f"slurm-{a.job_id}.out") and a.index in self._ev:
                    self._ev[a.index].out = []
        for h in self.used_hosts():
            rel = os.path.join("nodes", h, KERNEL_FILE[self.ctx.wild.kernel])
            sizes[rel] = write_lines(out / rel, self.kern(h))
        return sizes
