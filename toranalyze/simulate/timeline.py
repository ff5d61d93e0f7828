"""Draw the history of one training run from the model (pure: no I/O).

Everything is in integer microseconds since the Unix epoch (UTC). The ledger
follows docs/ledger.md and is checked to sum exactly to T_obs.

Precedence where the ledger's phases could overlap: a save or evaluation that
*completed* after the last completed step stays in ``checkpoint`` / ``other``;
``detection`` is the rest, from the end of the last completed activity (step,
save or evaluation) to the failure being detected. Warm-up steps are preserved
steps, so their extra time lands in ``slowdown``.
"""

from __future__ import annotations

import datetime as dt
import math
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from toranalyze.model import RunConfig, is_planned

US = 1_000_000

# Which classes take the implicated node out of the allocation for the next attempt.
REPLACES_NODE = frozenset(
    {"gpu_hardware", "gpu_memory", "gpu_interconnect", "host_hardware", "node_failure", "network"}
)
NO_NODE = frozenset({"preemption", "maintenance", "user_cancel", "walltime", "numerics"})

# Scheduler end state (sacct State, ExitCode) of an attempt that ended by each class.
EXIT_STATE: dict[str, tuple[str, str]] = {
    "gpu_hardware": ("FAILED", "1:0"),
    "gpu_memory": ("FAILED", "1:0"),
    "gpu_interconnect": ("FAILED", "1:0"),
    "network": ("FAILED", "1:0"),
    "collective_timeout": ("FAILED", "1:0"),
    "storage": ("FAILED", "1:0"),
    "oom_gpu": ("FAILED", "1:0"),
    "software": ("FAILED", "1:0"),
    "unknown": ("FAILED", "1:0"),
    "host_hardware": ("NODE_FAIL", "0:0"),
    "node_failure": ("NODE_FAIL", "0:0"),
    "oom_host": ("OUT_OF_MEMORY", "0:125"),
    "hang": ("CANCELLED by 1000", "0:0"),
    "numerics": ("CANCELLED by 1000", "0:0"),
    "user_cancel": ("CANCELLED by 1000", "0:0"),
    "maintenance": ("CANCELLED by 0", "0:0"),
    "preemption": ("PREEMPTED", "0:0"),
    "walltime": ("TIMEOUT", "0:0"),
}


def epoch_us(iso: str) -> int:
    d = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.UTC)
    return int(round(d.timestamp())) * US


@overload
def iso_z(us: int) -> str: ...
@overload
def iso_z(us: None) -> None: ...
@overload
def iso_z(us: int | None) -> str | None: ...


def iso_z(us: int | None) -> str | None:
    if us is None:
        return None
    d = dt.datetime.fromtimestamp(us // US, dt.UTC).replace(microsecond=us % US)
    return d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class Save:
    step: int
    begin: int
    end: int
    completed: bool
    poisoned: bool = False  # written after a NaN onset: not used to resume


@dataclass(slots=True)
class Eval:
    step: int
    begin: int
    end: int
    completed: bool


@dataclass
class SlowPeriod:
    attempt: int
    start: int
    end: int
    factor: float
    node: str
    rank: int
    first_step: int
    last_step: int


@dataclass
class Attempt:
    index: int
    job_id: int
    nodes: list[str]
    start: int
    load_begin: int
    first_step_start: int
    end: int = 0
    resumed_from: int = 0
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step_dur: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    saves: list[Save] = field(default_factory=list)
    evals: list[Eval] = field(default_factory=list)
    nan_from_step: int | None = None
    exit_state: str = "COMPLETED"
    exit_code: str = "0:0"
    incident: int | None = None
    last_activity_end: int = 0
    # running summaries of the steps (kept whether or not the arrays are)
    n_steps: int = 0
    first_step_no: int | None = None
    last_step_no: int | None = None
    last_step_end: int | None = None
    nan_first_end: int | None = None  # end of the first step at or after nan_from_step
    blocks: _Blocks | None = None

    @property
    def first_step(self) -> int | None:
        return self.first_step_no

    @property
    def last_step(self) -> int | None:
        return self.last_step_no


@dataclass
class Incident:
    attempt: int
    root_cause: str
    planned: bool
    node: str | None
    gpu: int | None
    rank: int | None
    t_fail: int  # onset (truth only)
    t_last_progress: int
    t_first_error: int | None
    t_detected: int
    t_restart: int | None = None
    t_resumed: int | None = None
    t_caught_up: int | None = None
    last_step: int = 0  # highest step completed before the interruption
    lost_steps: int = 0
    lost_time_us: int = 0
    in_save: bool = False
    killed_by_walltime: bool = False


@dataclass
class Timeline:
    config: RunConfig
    seed: int
    t_start: int
    t_end: int
    ideal_step_us: int
    attempts: list[Attempt]
    incidents: list[Incident]
    slow_periods: list[SlowPeriod]
    ledger_us: dict[str, int]
    clock_skew_us: dict[str, int]
    hosts: list[str]
    # draws the same run again (a fresh generator seeded like the first), for replaying the steps
    replay: Callable[[], np.random.Generator] | None = None
    steps_kept: bool = True

    @property
    def tor(self) -> float:
        return self.ledger_us["useful"] / self.ledger_us["t_obs"] if self.ledger_us["t_obs"] else 1.0

    def steps(self) -> StepSource:
        """The steps of every attempt, attempt by attempt, without holding them all."""
        return StepSource(self)


Chunk = tuple[np.ndarray, np.ndarray, np.ndarray]  # step numbers, ends (µs), durations (µs)


class StepSource:
    """Step chunks of a timeline's attempts, in attempt order.

    With the arrays kept it slices them; otherwise it replays the simulation with a
    generator seeded like the original (same draws, same steps) and hands out the
    chunks of the attempt asked for, so memory stays bounded by one chunk (at most a
    checkpoint interval of steps). Asking for an earlier attempt restarts the replay.
    """

    def __init__(self, tl: Timeline):
        self.tl = tl
        self._gen: Iterator[tuple[int, Chunk]] | None = None
        self._pending: tuple[int, Chunk] | None = None
        self._served = -1  # highest attempt whose chunks were handed out

    def attempt(self, index: int) -> Iterator[Chunk]:
        """The chunks of one attempt, in order (empty if it made no step)."""
        tl = self.tl
        if tl.steps_kept:
            a = tl.attempts[index]
            if len(a.steps):
                yield a.steps, a.step_end, a.step_dur
            return
        if self._gen is None or index <= self._served:
            if tl.replay is None:
                raise ValueError("the timeline kept no steps and has no replay")
            self._gen = _generate(tl.config, tl.replay(), _Result(), record=False)
            self._pending = None
        self._served = index
        while True:
            if self._pending is None:
                self._pending = next(self._gen, None)
                if self._pending is None:
                    return
            i, chunk = self._pending
            if i > index:
                return
            self._pending = None
            if i == index:
                yield chunk


class _End(Exception):
    pass


class _Sim:
    def __init__(self, cfg: RunConfig, rng: np.random.Generator):
        self.cfg = cfg
        self.rng = rng
        self.step_us = int(round(cfg.step_time_s * US))
        self.U = 0  # up-time consumed (µs)
        # random processes first, then the scripted incidents (each fires once)
        self.cls = [p.failure_class for p in cfg.failures] + [c for _, c in cfg.script]
        self.next_fail = [self._draw_fail(p) for p in cfg.failures] + [float(u) * US for u, _ in cfg.script]
        # planted bad nodes: one extra Poisson process per (bad host, node-level class) with the
        # extra rate; it only counts while the host is in the allocation (thinning), see bad_host
        self.extra: list[tuple[str, float]] = []  # (host, events per second of up-time)
        for host, m in cfg.bad_nodes:
            for p in cfg.failures:
                if p.per != "job_hour" and not is_planned(p.failure_class) and m > 1:
                    self.extra.append((host, p.rate_per_hour(1, cfg.gpus_per_node) * (m - 1.0) / 3600.0))
                    self.cls.append(p.failure_class)
                    self.next_fail.append(self._draw_extra(len(self.extra) - 1, self.U))
        self.next_slow = self._draw_slow()
        self.slow_left = 0
        self.slow_cur: SlowPeriod | None = None
        self.slow_periods: list[SlowPeriod] = []
        self.nan_stop: int | None = None  # wall time at which a NaN run is stopped
        self.nan_onset_step: int | None = None

    # -- random draws
    def _draw_fail(self, p) -> float:
        return self.U + p.draw_s(self.rng, self.cfg.nodes, self.cfg.gpus_per_node) * US

    def _draw_extra(self, k: int, at: float) -> float:
        lam = self.extra[k][1]
        return math.inf if lam <= 0 else at + float(self.rng.exponential(1.0 / lam)) * US

    def bad_host(self, idx: int) -> str | None:
        """The planted bad host an extra process belongs to (None for the job's own processes)."""
        k = idx - len(self.cfg.failures) - len(self.cfg.script)
        return self.extra[k][0] if k >= 0 else None

    def skip(self, idx: int, current: list[str], at: float) -> bool:
        """An extra process fired while its host is not in the allocation: redraw, no incident."""
        host = self.bad_host(idx)
        if host is None or host in current:
            return False
        self.next_fail[idx] = self._draw_extra(idx - len(self.cfg.failures) - len(self.cfg.script), at)
        return True

    def redraw(self, idx: int) -> None:
        if idx < len(self.cfg.failures):
            self.next_fail[idx] = self._draw_fail(self.cfg.failures[idx])
        elif self.bad_host(idx) is not None:
            self.next_fail[idx] = self._draw_extra(idx - len(self.cfg.failures) - len(self.cfg.script), self.U)
        else:
            self.next_fail[idx] = math.inf

    def _draw_slow(self) -> float:
        r = self.cfg.slow_rate_per_hour
        return math.inf if r <= 0 else self.U + float(self.rng.exponential(3600.0 / r)) * US

    def uni_us(self, lo_hi: tuple[float, float]) -> int:
        lo, hi = lo_hi
        return int(round((lo if hi <= lo else float(self.rng.uniform(lo, hi))) * US))

    # -- the next uptime event as a wall time, given the wall time t at uptime self.U
    def next_event(self, t: int, wall_end: float) -> tuple[float, str, int]:
        best, kind, idx = wall_end, "walltime", -1
        if self.nan_stop is not None:
            if self.nan_stop < best:
                best, kind = self.nan_stop, "nan_stop"
        else:
            for i, u in enumerate(self.next_fail):
                w = t + max(0.0, u - self.U)
                if w < best:
                    best, kind, idx = w, "fail", i
        w = t + max(0.0, self.next_slow - self.U)
        if w < best:
            best, kind = w, "slow"
        return best, kind, idx


class _Blocks:
    """Per-attempt sums of step durations by checkpoint block (steps ``(b*K, (b+1)*K]``).

    Runs are only ever rolled back to a checkpoint (a multiple of K) or to the start, so
    these sums give the ledger and the lost time exactly without keeping every step.
    """

    __slots__ = ("K", "b", "useful", "slow", "dur")

    def __init__(self, K: int):
        self.K = K
        self.b = array("q")
        self.useful = array("q")
        self.slow = array("q")
        self.dur = array("q")

    def add(self, first_step: int, durs: np.ndarray, ideal: int) -> None:
        b = (first_step - 1) // self.K
        u = int(np.minimum(durs, ideal).sum())
        sl = int(np.maximum(durs - ideal, 0).sum())
        d = int(durs.sum())
        if self.b and self.b[-1] == b:
            self.useful[-1] += u
            self.slow[-1] += sl
            self.dur[-1] += d
        else:
            self.b.append(b)
            self.useful.append(u)
            self.slow.append(sl)
            self.dur.append(d)

    def _side(self, b: int, lim: int) -> bool:
        """True if block b lies at or below step lim, False if above (never split)."""
        if (b + 1) * self.K <= lim:
            return True
        if b * self.K >= lim:
            return False
        raise AssertionError(f"rollback to step {lim} splits checkpoint block {b}")

    def kept(self, lim: int) -> tuple[int, int, int]:
        """(useful, slowdown, rework) when steps above ``lim`` are lost."""
        u = sl = r = 0
        for k, b in enumerate(self.b):
            if self._side(b, lim):
                u += self.useful[k]
                sl += self.slow[k]
            else:
                r += self.dur[k]
        return u, sl, r

    def dur_between(self, lo: int, hi: int) -> int:
        """Sum of durations of the steps ``lo < step <= hi``."""
        tot = 0
        for k, b in enumerate(self.b):
            if not self._side(b, lo) and (hi >= 1 << 60 or self._side(b, hi)):
                tot += self.dur[k]
        return tot


@dataclass
class _Result:
    attempts: list[Attempt] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    slow_periods: list[SlowPeriod] = field(default_factory=list)
    skews: dict[str, int] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    ideal: int = 0
    # incidents whose catch-up step lies in a later attempt: (incident index, step)
    pending: list[tuple[int, int]] = field(default_factory=list)


def _first_error(cls: str, te: int, t_det: int, nan_first_end: int | None, watchdog_us: int) -> int | None:
    """Wall time of the incident's first error record (None: the failure writes none)."""
    if cls == "numerics":
        return nan_first_end if nan_first_end is not None else te
    if cls in ("hang",):
        return None
    if cls == "collective_timeout":
        return min(t_det, te + watchdog_us)
    if cls in ("node_failure", "host_hardware"):
        return te if cls == "host_hardware" else min(t_det, te + (t_det - te) // 2)
    if cls in ("walltime", "preemption", "maintenance", "user_cancel"):
        return t_det
    return te


class _Run:
    """One run being drawn: the run-wide state (allocation, clean checkpoints, the wall
    clock between attempts) and the state of the attempt in progress.

    The methods consume the generator in a fixed order; that order *is* the run, so a
    second generator seeded alike replays it exactly.
    """

    # the attempt in progress, set by start_attempt
    a: Attempt
    wall_end: float  # wall time at which the scheduler kills the attempt (inf: no limit)
    tc: int  # the attempt's wall clock
    s: int  # the next step to draw
    warm_left: int  # warm-up steps still to come
    ended: tuple[str, int, int] | None  # (kind, failure index, wall time) of what ended the attempt
    last_step_done: int

    def __init__(self, cfg: RunConfig, rng: np.random.Generator, res: _Result, record: bool):
        self.cfg, self.rng, self.res, self.record = cfg, rng, res, record
        self.sim = sim = _Sim(cfg, rng)
        n_hosts = cfg.nodes + cfg.spare_nodes
        hosts = [f"{cfg.host_prefix}-{i:03d}" for i in range(1, n_hosts + 1)]
        skew_max = int(cfg.clock_skew_s * US)
        skews = {h: (int(rng.integers(-skew_max, skew_max + 1)) if skew_max else 0) for h in hosts}
        res.hosts, res.skews, res.ideal = hosts, skews, sim.step_us
        res.slow_periods = sim.slow_periods
        self.current = hosts[: cfg.nodes]
        self.spares = hosts[cfg.nodes :]
        self.fixed = cfg.fixed_repair_s is not None
        self.save_us = int(round(cfg.ckpt_save_s * US))
        self.clean_ckpts: list[int] = []  # completed, unpoisoned checkpoint steps
        self.resume = 0  # step the next attempt resumes from
        self.t = epoch_us(cfg.start)  # wall time the next attempt starts
        self.job_id = cfg.first_job_id

    # -- an attempt's start
    def start_attempt(self) -> None:
        cfg, sim = self.cfg, self.sim
        i = len(self.res.attempts)
        if self.fixed:
            startup = 0
            load = 0
        else:
            startup = sim.uni_us(cfg.startup_s)
            load = sim.uni_us(cfg.ckpt_load_s) if self.resume > 0 else 0
        if i > 0 and cfg.job_id_mode == "new_job":
            self.job_id += int(self.rng.integers(1, 40))
        t = self.t
        a = Attempt(i, self.job_id, list(self.current), t, t + startup, t + startup + load, resumed_from=self.resume)
        a.blocks = _Blocks(cfg.ckpt_interval_steps)
        self.res.attempts.append(a)
        self.a = a
        self.wall_end = (t + cfg.walltime_s * US) if cfg.walltime_s else math.inf
        self.tc = a.first_step_start
        a.last_activity_end = self.tc
        self.s = self.resume + 1
        self.warm_left = 0 if self.fixed else cfg.warmup_steps
        sim.nan_stop = None
        sim.nan_onset_step = None
        sim.slow_left = 0
        sim.slow_cur = None
        self.ended = None
        self.last_step_done = self.resume

    # -- the steps
    def draw_attempt(self) -> Iterator[tuple[int, Chunk]]:
        """Draw the attempt's steps, saves and evaluations until it completes or something ends it."""
        cfg, sim = self.cfg, self.sim
        i = self.a.index
        while self.s <= cfg.train_iters and self.ended is None:
            boundary = self._next_boundary()
            nums, ends, durs = self._draw_chunk(boundary)
            te, kind, idx = sim.next_event(self.tc, self.wall_end)
            if te < ends[-1]:
                k = int(np.searchsorted(ends, te, side="right"))
                if kind == "slow":
                    k = max(k, 1)  # the onset takes effect after the step in progress
                if self._commit(nums[:k], ends[:k], durs[:k]):
                    yield i, (nums[:k], ends[:k], durs[:k])
                self._advance(int(ends[k - 1]) if k else self.tc, k)
                self.s = self.last_step_done + 1
                self._interrupt(te, kind, idx)
                continue
            if self._commit(nums, ends, durs):
                yield i, (nums, ends, durs)
            self._advance(int(ends[-1]), len(nums))
            self.s = boundary + 1
            self._after_boundary(boundary)
        self._close_slow(self.last_step_done, self.a.last_activity_end)

    def _next_boundary(self) -> int:
        """The next step after which the run saves or evaluates (or its last step)."""
        cfg, s = self.cfg, self.s
        K, E = cfg.ckpt_interval_steps, cfg.eval_interval_steps
        boundary = min(cfg.train_iters, ((s + K - 1) // K) * K)
        if E:
            boundary = min(boundary, ((s + E - 1) // E) * E)
        return boundary

    def _draw_chunk(self, boundary: int) -> Chunk:
        """Steps ``s..boundary`` as if nothing interrupts them: numbers, ends, durations."""
        cfg, sim, s = self.cfg, self.sim, self.s
        n = boundary - s + 1
        mult = self.rng.lognormal(0.0, cfg.jitter_sigma, n) if cfg.jitter_sigma > 0 else np.ones(n)
        warm = self.warm_left
        if warm:
            w = min(warm, n)
            ramp = 1.0 + (cfg.warmup_factor - 1.0) * (np.arange(warm, warm - w, -1) / cfg.warmup_steps)
            mult[:w] *= ramp
        if sim.slow_left and sim.slow_cur is not None:
            w = min(sim.slow_left, n)
            mult[:w] *= sim.slow_cur.factor
        durs = np.maximum(1, np.rint(mult * sim.step_us)).astype(np.int64)
        ends = self.tc + np.cumsum(durs)
        nums = np.arange(s, boundary + 1, dtype=np.int64)
        return nums, ends, durs

    def _commit(self, nums: np.ndarray, ends: np.ndarray, durs: np.ndarray) -> bool:
        """Record completed steps in the attempt's summaries; False if there are none."""
        a, res = self.a, self.res
        if not len(nums):
            return False
        self.last_step_done = last = int(nums[-1])
        a.last_activity_end = int(ends[-1])
        first = int(nums[0])
        if a.n_steps == 0:
            a.first_step_no = first
        a.n_steps += len(nums)
        a.last_step_no = last
        a.last_step_end = int(ends[-1])
        if self.record:
            assert a.blocks is not None  # recording attempts get their blocks at start
            a.blocks.add(first, durs, self.sim.step_us)
        if a.nan_from_step is not None and a.nan_first_end is None and last >= a.nan_from_step:
            a.nan_first_end = int(ends[max(0, a.nan_from_step - first)])
        if res.pending:
            keep = []
            for k_inc, target in res.pending:
                if first <= target <= last:
                    res.incidents[k_inc].t_caught_up = int(ends[target - first])
                else:
                    keep.append((k_inc, target))
            res.pending = keep
        return True

    def _advance(self, new_tc: int, consumed: int) -> None:
        """Move the clocks over the ``consumed`` steps just committed, ending at ``new_tc``."""
        sim = self.sim
        sim.U += new_tc - self.tc
        self.warm_left = max(0, self.warm_left - consumed)
        if sim.slow_left:
            sim.slow_left -= min(sim.slow_left, consumed)
            if sim.slow_left == 0:
                self._close_slow(self.last_step_done, new_tc)
        self.tc = new_tc

    def _close_slow(self, end_step: int, end_t: int) -> None:
        sim = self.sim
        if sim.slow_cur is not None and sim.slow_cur.first_step <= end_step:
            sim.slow_cur.last_step = end_step
            sim.slow_cur.end = end_t
            sim.slow_periods.append(sim.slow_cur)
        sim.slow_cur = None
        sim.slow_left = 0

    def _interrupt(self, te: float, kind: str, idx: int) -> None:
        """An event at ``te`` during the steps: a slowdown starts, a NaN sets in, or the attempt ends."""
        sim = self.sim
        if kind == "slow":
            sim.next_slow = sim._draw_slow()
            if sim.slow_cur is None:
                self._start_slow()
            return
        if kind == "fail" and sim.skip(idx, self.current, sim.U):
            return
        if kind == "fail" and sim.cls[idx] == "numerics":
            self._nan_onset(idx, int(te))
            return
        self.ended = (kind, idx, int(te))

    def _start_slow(self) -> None:
        cfg, rng, G = self.cfg, self.rng, self.cfg.gpus_per_node
        f = float(rng.uniform(*cfg.slow_factor))
        dur = float(rng.uniform(*cfg.slow_duration_s))
        nsteps = max(1, int(math.ceil(dur / (cfg.step_time_s * f))))
        slow_node = int(rng.integers(0, cfg.nodes))
        slow_gpu = int(rng.integers(0, G))
        self.sim.slow_left = nsteps
        tc, s = self.tc, self.s
        self.sim.slow_cur = SlowPeriod(self.a.index, tc, tc, f, self.current[slow_node], slow_node * G + slow_gpu, s, s)

    def _nan_onset(self, idx: int, at: int) -> None:
        """A NaN sets in: it shows from step ``s`` on and the run is stopped a while after ``at``."""
        sim = self.sim
        sim.redraw(idx)
        sim.nan_onset_step = self.s
        self.a.nan_from_step = self.s
        sim.nan_stop = at + sim.uni_us(self.cfg.nan_run_on_s)

    # -- checkpoint save / evaluation after the boundary step
    def _after_boundary(self, boundary: int) -> None:
        cfg = self.cfg
        T, K, E = cfg.train_iters, cfg.ckpt_interval_steps, cfg.eval_interval_steps
        phases = []
        if boundary % K == 0 or boundary == T:
            phases.append("save")
        if E and boundary % E == 0 and boundary != T:
            phases.append("eval")
        for ph in phases:
            self._phase(ph, boundary)
            if self.ended is not None:
                break

    def _phase_us(self, ph: str) -> int:
        cfg = self.cfg
        if ph != "save":
            return int(round(cfg.eval_s * US))
        if cfg.ckpt_save_jitter > 0 and not self.fixed:
            return int(round(self.save_us * float(self.rng.lognormal(0.0, cfg.ckpt_save_jitter))))
        return self.save_us

    def _event_during(self, d: int) -> tuple[float, str, int]:
        """The event that interrupts a save/evaluation of ``d`` µs starting now (inf: none does)."""
        sim, tc = self.sim, self.tc
        te, kind, idx = sim.next_event(tc, self.wall_end)
        while kind in ("slow", "fail") and te < tc + d:
            if kind == "slow":
                sim.next_slow = sim._draw_slow() + (te - tc)  # onsets during a save are skipped
            elif not sim.skip(idx, self.current, sim.U + (te - tc)):
                break
            te, kind, idx = sim.next_event(tc, self.wall_end)
        if te < tc + d and kind == "fail" and sim.cls[idx] == "numerics":
            # onset during a save/eval: the NaN shows on the next step
            self._nan_onset(idx, tc + d)
            te = math.inf
        return te, kind, idx

    def _phase(self, ph: str, boundary: int) -> None:
        """One save or evaluation after ``boundary``; an event during it ends the attempt."""
        a, sim, tc = self.a, self.sim, self.tc
        d = self._phase_us(ph)
        te, kind, idx = self._event_during(d)
        poisoned = sim.nan_stop is not None
        if te < tc + d:
            if ph == "save":
                a.saves.append(Save(boundary, tc, int(te), False, poisoned))
            elif self.record:
                a.evals.append(Eval(boundary, tc, int(te), False))
            sim.U += int(te) - tc
            self.ended = (kind, idx, int(te))
            return
        if ph == "save":
            if not self.record:
                a.saves.clear()  # only the last save is looked at while drawing
            a.saves.append(Save(boundary, tc, tc + d, True, poisoned))
            if not poisoned:
                self.clean_ckpts.append(boundary)
        elif self.record:
            a.evals.append(Eval(boundary, tc, tc + d, True))
        sim.U += d
        self.tc += d
        a.last_activity_end = self.tc

    # -- an attempt's end
    def complete_attempt(self) -> None:
        a = self.a
        tail = 0 if self.fixed else self.sim.uni_us((5.0, 30.0))
        a.end = a.last_activity_end + tail
        a.exit_state, a.exit_code = "COMPLETED", "0:0"

    def record_incident(self) -> Incident:
        """The incident that ended the attempt: root cause, where, when it was detected."""
        assert self.ended is not None
        a, cfg = self.a, self.cfg
        kind, idx, te = self.ended
        if kind == "walltime":
            cls = "walltime"
        elif kind == "nan_stop":
            cls = "numerics"
        else:
            cls = self.sim.cls[idx]
            self.sim.redraw(idx)
        node, gpu, rank = self._culprit(cls, kind, idx)
        t_det, killed_by_wall = self._detection(cls, te)
        last_progress = a.last_step_end if a.n_steps and a.last_step_end is not None else a.first_step_start
        inc = Incident(
            attempt=a.index,
            root_cause=cls,
            planned=is_planned(cls),
            node=node,
            gpu=gpu,
            rank=rank,
            t_fail=te,
            t_last_progress=last_progress,
            t_first_error=_first_error(cls, te, t_det, a.nan_first_end, int(cfg.watchdog_timeout_s * US)),
            t_detected=t_det,
            last_step=self.last_step_done,
            in_save=bool(a.saves and not a.saves[-1].completed),
            killed_by_walltime=killed_by_wall,
        )
        self.res.incidents.append(inc)
        a.incident = len(self.res.incidents) - 1
        a.end = t_det
        if killed_by_wall and cls != "walltime":
            a.exit_state, a.exit_code = "TIMEOUT", "0:0"
        else:
            a.exit_state, a.exit_code = EXIT_STATE[cls]
        return inc

    def _culprit(self, cls: str, kind: str, idx: int) -> tuple[str | None, int | None, int | None]:
        """(node, GPU, rank) the failure hit; a planted bad node's own failure hits that node."""
        if cls in NO_NODE:
            return None, None, None
        cfg, rng, G = self.cfg, self.rng, self.cfg.gpus_per_node
        node_i = int(rng.integers(0, cfg.nodes))
        gpu = int(rng.integers(0, G))
        rank = node_i * G + gpu
        node = self.current[node_i]
        bad = self.sim.bad_host(idx) if kind == "fail" else None
        if bad is not None:
            node_i = self.current.index(bad)
            rank, node = node_i * G + gpu, bad
        return node, gpu, rank

    def _detection(self, cls: str, te: int) -> tuple[int, bool]:
        """(detection time, whether the walltime kill came first)."""
        cfg, sim = self.cfg, self.sim
        if cls == "walltime":
            t_det = te
        elif cls == "numerics":
            t_det = te + (0 if self.fixed else sim.uni_us(cfg.detection_range("numerics")))
        elif self.fixed:
            t_det = te
        else:
            t_det = te + sim.uni_us(cfg.detection_range(cls))
        if t_det > self.wall_end:
            return int(self.wall_end), True
        return t_det, False

    # -- between attempts
    def prepare_next(self, inc: Incident) -> None:
        """Replace the failed node, choose the checkpoint to resume from, and queue."""
        cfg = self.cfg
        cls = inc.root_cause
        if inc.node is not None and cls in REPLACES_NODE and self.spares:
            j = self.current.index(inc.node)
            self.current = list(self.current)
            self.current[j] = self.spares.pop(0)
        self.resume = self._resume_point(cls)
        if inc.last_step > self.resume:
            assert self.a.incident is not None
            self.res.pending.append((self.a.incident, inc.last_step))  # caught up in a later attempt
        repair_s = cfg.fixed_repair_s
        queue = int(round(repair_s * US)) if repair_s is not None else self.sim.uni_us(cfg.queue_wait_s)
        self.t = inc.t_detected + queue

    def _resume_point(self, cls: str) -> int:
        """The last clean checkpoint; after NaNs, ``nan_rollback_ckpts`` more before the onset."""
        ckpts = self.clean_ckpts
        if cls != "numerics":
            return ckpts[-1] if ckpts else 0
        onset = self.a.nan_from_step or self.last_step_done + 1
        good = [c for c in ckpts if c < onset]
        k = len(good) - 1 - self.cfg.nan_rollback_ckpts
        resume = good[k] if k >= 0 else 0
        ckpts[:] = [c for c in ckpts if c <= resume]
        return resume


def _generate(
    cfg: RunConfig, rng: np.random.Generator, res: _Result, record: bool = True
) -> Iterator[tuple[int, Chunk]]:
    """Draw one run, yielding ``(attempt, (steps, ends, durations))`` chunks as they are drawn.

    Everything else (attempts, saves, incidents, slow periods, per-attempt summaries)
    lands in ``res``. A chunk never spans two checkpoint blocks. The draws do not depend
    on who consumes the chunks, so a second generator seeded alike replays the same run;
    a replay passes ``record=False`` and keeps no saves, evaluations or block sums.
    """
    run = _Run(cfg, rng, res, record)
    while True:
        run.start_attempt()
        yield from run.draw_attempt()
        if run.ended is None:
            run.complete_attempt()
            return
        inc = run.record_incident()
        # the up-time clock stops at the failure; failure processes keep their schedule
        if len(res.attempts) >= cfg.max_attempts:
            return
        run.prepare_next(inc)


def _recorded(a: Attempt) -> _Blocks:
    if a.blocks is None:  # every attempt the generator yields records its step blocks
        raise AssertionError(f"attempt {a.index} has no step blocks")
    return a.blocks


_NEVER = 1 << 62  # a step no rollback reaches


def _draw_run(cfg: RunConfig, rng: np.random.Generator, keep_steps: bool) -> _Result:
    """Run the generator to its end; with ``keep_steps`` the attempts get their step arrays."""
    res = _Result()
    if not keep_steps:
        for _ in _generate(cfg, rng, res):
            pass
        return res
    parts: dict[int, list[Chunk]] = {}
    for i, chunk in _generate(cfg, rng, res):
        parts.setdefault(i, []).append(chunk)
    for a in res.attempts:
        got = parts.pop(a.index, [])
        if got:
            a.steps = np.concatenate([c[0] for c in got])
            a.step_end = np.concatenate([c[1] for c in got])
            a.step_dur = np.concatenate([c[2] for c in got])
    return res


def _step_outcomes(attempts: list[Attempt], blocks: list[_Blocks]) -> tuple[int, int, int]:
    """(useful, slowdown, rework): a step is preserved unless a later attempt resumes below it."""
    n_att = len(attempts)
    suffix_min = [_NEVER] * (n_att + 1)
    for j in range(n_att - 1, -1, -1):
        suffix_min[j] = min(suffix_min[j + 1], attempts[j].resumed_from)
    useful = slowdown = rework = 0
    for j in range(n_att):
        u, sl, r = blocks[j].kept(suffix_min[j + 1])
        useful += u
        slowdown += sl
        rework += r
    return useful, slowdown, rework


def _settle_incidents(attempts: list[Attempt], incidents: list[Incident], blocks: list[_Blocks]) -> None:
    """Each incident's restart and resume times, lost steps and time, and catching up."""
    n_att = len(attempts)
    resumes = [a.resumed_from for a in attempts]
    for inc in incidents:
        j = inc.attempt
        if j + 1 >= n_att:
            inc.t_caught_up = None
            continue
        nxt = attempts[j + 1]
        inc.t_restart = nxt.start
        inc.t_resumed = nxt.first_step_start
        inc.lost_steps = max(0, inc.last_step - nxt.resumed_from)
        r_next = nxt.resumed_from
        lost = blocks[j].dur_between(r_next, _NEVER)
        lim = resumes[j]  # steps of earlier attempts that survived up to attempt j
        k = j - 1
        while k >= 0 and lim > r_next:
            lost += blocks[k].dur_between(r_next, lim)
            lim = min(lim, resumes[k])
            k -= 1
        inc.lost_time_us = lost
        if inc.last_step <= nxt.resumed_from:
            inc.t_caught_up = nxt.first_step_start


def _ledger(attempts: list[Attempt], useful: int, slowdown: int, rework: int) -> dict[str, int]:
    """The ledger's buckets (docs/ledger.md), checked to sum exactly to T_obs."""
    checkpoint = sum(s.end - s.begin for a in attempts for s in a.saves if s.completed)
    other = attempts[0].first_step_start - attempts[0].start
    other += sum(e.end - e.begin for a in attempts for e in a.evals if e.completed)
    detection = 0
    recovery = 0
    for a in attempts:
        if a.incident is not None:
            detection += a.end - a.last_activity_end
        if a.index > 0:
            prev = attempts[a.index - 1]
            recovery += a.first_step_start - prev.end
    last = attempts[-1]
    if last.incident is None:
        other += last.end - last.last_activity_end
    t_obs = last.end - attempts[0].start
    ledger = {
        "useful": useful,
        "slowdown": slowdown,
        "rework": rework,
        "checkpoint": checkpoint,
        "detection": detection,
        "recovery": recovery,
        "other": other,
        "t_obs": t_obs,
    }
    total = sum(v for k, v in ledger.items() if k != "t_obs")
    assert total == t_obs, f"ledger buckets sum to {total} µs, T_obs is {t_obs} µs"
    return ledger


def simulate_timeline(
    cfg: RunConfig,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    keep_steps: bool = True,
    replay: Callable[[], np.random.Generator] | None = None,
) -> Timeline:
    """Draw one run. Give ``rng`` or ``seed`` (``seed`` seeds ``numpy.random.default_rng``).

    ``keep_steps=False`` keeps only running sums of the steps (memory independent of the
    run's length); ``replay`` (a factory of generators seeded like ``rng``) then lets
    :meth:`Timeline.steps` draw them again for emission. Both modes give the same timeline.
    """
    cfg.validate()
    if rng is None:
        rng = np.random.default_rng(seed)
    res = _draw_run(cfg, rng, keep_steps)
    attempts, incidents = res.attempts, res.incidents
    blocks = [_recorded(a) for a in attempts]
    useful, slowdown, rework = _step_outcomes(attempts, blocks)
    _settle_incidents(attempts, incidents, blocks)
    assert rework == sum(inc.lost_time_us for inc in incidents), "rework must equal the lost time of the incidents"
    return Timeline(
        config=cfg,
        seed=-1 if seed is None else int(seed),
        t_start=attempts[0].start,
        t_end=attempts[-1].end,
        ideal_step_us=res.ideal,
        attempts=attempts,
        incidents=incidents,
        slow_periods=res.slow_periods,
        ledger_us=_ledger(attempts, useful, slowdown, rework),
        clock_skew_us=res.skews,
        hosts=res.hosts,
        replay=replay,
        steps_kept=keep_steps,
    )
