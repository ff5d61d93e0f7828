"""Per-run emission context: host identities, pids, addresses, paths, skews.

All emission randomness comes from its own generators seeded from the run seed,
so the timeline's draws never depend on what is emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from toranalyze.simulate.timeline import Attempt, Timeline
from toranalyze.simulate.wild import PLAIN, WildJob

BUS_IDS = ("18:00", "2a:00", "3a:00", "5d:00", "9a:00", "ab:00", "ba:00", "db:00")
HCA_BUS = ("0c:00.0", "12:00.0", "48:00.0", "54:00.0", "8a:00.0", "94:00.0", "c8:00.0", "d2:00.0")


@dataclass
class RunContext:
    tl: Timeline
    seed: int
    job_index: int = 0
    ckpt_dir: str = ""
    workdir: str = "/workspace/megatron"
    uid: int = 1000
    user: str = "mlteam"
    wild: WildJob = PLAIN  # what this job draws from a [wild] table (plain output without one)
    _host_ip: dict[str, str] = field(default_factory=dict)
    _boot_us: dict[str, int] = field(default_factory=dict)
    _pids: dict[tuple[int, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cfg = self.tl.config
        self.cfg = cfg
        if not self.ckpt_dir:
            self.ckpt_dir = f"/lustre/checkpoints/{cfg.name}"
        r = self.rng("hosts")
        for i, h in enumerate(self.tl.hosts):
            self._host_ip[h] = f"10.{10 + (i // 250)}.{(i % 250) // 50}.{(i % 50) + 11}"
            self._boot_us[h] = self.tl.t_start - int(r.integers(2 * 86400, 40 * 86400)) * 1_000_000

    def rng(self, *tag: str | int) -> np.random.Generator:
        """A generator for one emission stream, independent of the others."""
        key = [self.seed & 0xFFFFFFFF, self.job_index] + [
            (sum(ord(c) * 131**k for k, c in enumerate(t)) & 0xFFFFFFFF) if isinstance(t, str) else int(t) for t in tag
        ]
        return np.random.default_rng(key)

    # identities -------------------------------------------------------------
    def ip(self, host: str) -> str:
        return self._host_ip[host]

    def skew(self, host: str) -> int:
        return self.tl.clock_skew_us.get(host, 0)

    def uptime_s(self, host: str, t_us: int) -> float:
        return (t_us - self._boot_us[host]) / 1e6

    def host_of(self, a: Attempt, rank: int) -> str:
        return a.nodes[rank // self.cfg.gpus_per_node]

    def pid(self, a: Attempt, rank: int) -> int:
        key = (a.index, rank)
        if key not in self._pids:
            base = 10000 + (a.index * 7919 + (rank // self.cfg.gpus_per_node) * 104729) % 3000000
            self._pids[key] = base + 2 * (rank % self.cfg.gpus_per_node) + 17
        return self._pids[key]

    def launcher_pid(self, a: Attempt, node_i: int) -> int:
        return 9000 + (a.index * 6007 + node_i * 7717) % 2000000

    def bus(self, gpu: int) -> str:
        return BUS_IDS[gpu % len(BUS_IDS)]

    def hca(self, gpu: int) -> str:
        return HCA_BUS[gpu % len(HCA_BUS)]

    @property
    def G(self) -> int:
        return self.cfg.gpus_per_node

    @property
    def world(self) -> int:
        return self.cfg.n_gpus
