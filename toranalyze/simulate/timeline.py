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


def _generate(
    cfg: RunConfig, rng: np.random.Generator, res: _Result, record: bool = True
) -> Iterator[tuple[int, Chunk]]:
    """Draw one run, yielding ``(attempt, (steps, ends, durations))`` chunks as they are drawn.

    Everything else (attempts, saves, incidents, slow periods, per-attempt summaries)
    lands in ``res``. A chunk never spans two checkpoint blocks. The draws do not depend
    on who consumes the chunks, so a second generator seeded alike replays the same run;
    a replay passes ``record=False`` and keeps no saves, evaluations or block sums.
    """
    sim = _Sim(cfg, rng)
    G = cfg.gpus_per_node
    n_hosts = cfg.nodes + cfg.spare_nodes
    hosts = [f"{cfg.host_prefix}-{i:03d}" for i in range(1, n_hosts + 1)]
    skew_max = int(cfg.clock_skew_s * US)
    skews = {h: (int(rng.integers(-skew_max, skew_max + 1)) if skew_max else 0) for h in hosts}
    res.hosts, res.skews, res.ideal = hosts, skews, sim.step_us
    res.slow_periods = sim.slow_periods
    pool = list(hosts)
    current = pool[: cfg.nodes]
    spares = pool[cfg.nodes :]
    repair_s = cfg.fixed_repair_s
    fixed = repair_s is not None
    t0 = epoch_us(cfg.start)
    T = cfg.train_iters
    K = cfg.ckpt_interval_steps
    E = cfg.eval_interval_steps
    save_us = int(round(cfg.ckpt_save_s * US))
    ideal = sim.step_us

    attempts = res.attempts
    incidents = res.incidents
    clean_ckpts: list[int] = []  # completed, unpoisoned checkpoint steps
    resume = 0
    t = t0
    job_id = cfg.first_job_id
    done = False

    while not done:
        i = len(attempts)
        if fixed:
            startup = 0
            load = 0
        else:
            startup = sim.uni_us(cfg.startup_s)
            load = sim.uni_us(cfg.ckpt_load_s) if resume > 0 else 0
        if i > 0 and cfg.job_id_mode == "new_job":
            job_id += int(rng.integers(1, 40))
        a = Attempt(i, job_id, list(current), t, t + startup, t + startup + load, resumed_from=resume)
        a.blocks = _Blocks(K)
        attempts.append(a)
        wall_end = (t + cfg.walltime_s * US) if cfg.walltime_s else math.inf
        tc = a.first_step_start
        a.last_activity_end = tc
        s = resume + 1
        warm_left = 0 if fixed else cfg.warmup_steps
        sim.nan_stop = None
        sim.nan_onset_step = None
        sim.slow_left = 0
        sim.slow_cur = None
        ended: tuple[str, int, int] | None = None  # (kind, failure index, wall time)
        last_step_done = resume

        # `a` is bound at definition: the closure only ever serves this attempt.
        def commit(nums: np.ndarray, ends: np.ndarray, durs: np.ndarray, a: Attempt = a) -> bool:
            nonlocal last_step_done
            if not len(nums):
                return False
            last_step_done = int(nums[-1])
            a.last_activity_end = int(ends[-1])
            first = int(nums[0])
            if a.n_steps == 0:
                a.first_step_no = first
            a.n_steps += len(nums)
            a.last_step_no = last_step_done
            a.last_step_end = int(ends[-1])
            if record:
                assert a.blocks is not None  # recording attempts get their blocks at start
                a.blocks.add(first, durs, ideal)
            if a.nan_from_step is not None and a.nan_first_end is None and last_step_done >= a.nan_from_step:
                a.nan_first_end = int(ends[max(0, a.nan_from_step - first)])
            if res.pending:
                keep = []
                for k_inc, target in res.pending:
                    if first <= target <= last_step_done:
                        incidents[k_inc].t_caught_up = int(ends[target - first])
                    else:
                        keep.append((k_inc, target))
                res.pending = keep
            return True

        def close_slow(end_step: int, end_t: int) -> None:
            if sim.slow_cur is not None and sim.slow_cur.first_step <= end_step:
                sim.slow_cur.last_step = end_step
                sim.slow_cur.end = end_t
                sim.slow_periods.append(sim.slow_cur)
            sim.slow_cur = None
            sim.slow_left = 0

        while s <= T and ended is None:
            boundary = min(T, ((s + K - 1) // K) * K)
            if E:
                boundary = min(boundary, ((s + E - 1) // E) * E)
            n = boundary - s + 1
            mult = rng.lognormal(0.0, cfg.jitter_sigma, n) if cfg.jitter_sigma > 0 else np.ones(n)
            if warm_left:
                w = min(warm_left, n)
                ramp = 1.0 + (cfg.warmup_factor - 1.0) * (np.arange(warm_left, warm_left - w, -1) / cfg.warmup_steps)
                mult[:w] *= ramp
            if sim.slow_left and sim.slow_cur is not None:
                w = min(sim.slow_left, n)
                mult[:w] *= sim.slow_cur.factor
            durs = np.maximum(1, np.rint(mult * sim.step_us)).astype(np.int64)
            ends = tc + np.cumsum(durs)
            nums = np.arange(s, boundary + 1, dtype=np.int64)
            te, kind, idx = sim.next_event(tc, wall_end)
            if te < ends[-1]:
                k = int(np.searchsorted(ends, te, side="right"))
                if kind == "slow":
                    k = max(k, 1)  # the onset takes effect after the step in progress
                if commit(nums[:k], ends[:k], durs[:k]):
                    yield i, (nums[:k], ends[:k], durs[:k])
                new_tc = int(ends[k - 1]) if k else tc
                sim.U += new_tc - tc
                consumed = k
                warm_left = max(0, warm_left - consumed)
                if sim.slow_left:
                    sim.slow_left -= min(sim.slow_left, consumed)
                    if sim.slow_left == 0:
                        close_slow(last_step_done, new_tc)
                tc = new_tc
                s = last_step_done + 1
                if kind == "slow":
                    sim.next_slow = sim._draw_slow()
                    if sim.slow_cur is None:
                        f = float(rng.uniform(*cfg.slow_factor))
                        dur = float(rng.uniform(*cfg.slow_duration_s))
                        nsteps = max(1, int(math.ceil(dur / (cfg.step_time_s * f))))
                        slow_node = int(rng.integers(0, cfg.nodes))
                        slow_gpu = int(rng.integers(0, G))
                        sim.slow_left = nsteps
                        sim.slow_cur = SlowPeriod(
                            i, tc, tc, f, current[slow_node], slow_node * G + slow_gpu, s, s
                        )
                    continue
                if kind == "fail" and sim.skip(idx, current, sim.U):
                    continue
                if kind == "fail" and sim.cls[idx] == "numerics":
                    sim.redraw(idx)
                    sim.nan_onset_step = s
                    a.nan_from_step = s
                    sim.nan_stop = int(te) + sim.uni_us(cfg.nan_run_on_s)
                    continue
                ended = (kind, idx, int(te))
                break
            if commit(nums, ends, durs):
                yield i, (nums, ends, durs)
            sim.U += int(ends[-1]) - tc
            warm_left = max(0, warm_left - n)
            if sim.slow_left:
                sim.slow_left -= min(sim.slow_left, n)
                if sim.slow_left == 0:
                    close_slow(last_step_done, int(ends[-1]))
            tc = int(ends[-1])
            s = boundary + 1
            # checkpoint save / evaluation after the boundary step
            phases = []
            if boundary % K == 0 or boundary == T:
                phases.append("save")
            if E and boundary % E == 0 and boundary != T:
                phases.append("eval")
            for ph in phases:
                if ph == "save":
                    d = save_us
                    if cfg.ckpt_save_jitter > 0 and not fixed:
                        d = int(round(save_us * float(rng.lognormal(0.0, cfg.ckpt_save_jitter))))
                else:
                    d = int(round(cfg.eval_s * US))
                te, kind, idx = sim.next_event(tc, wall_end)
                while kind in ("slow", "fail") and te < tc + d:
                    if kind == "slow":
                        sim.next_slow = sim._draw_slow() + (te - tc)  # onsets during a save are skipped
                    elif not sim.skip(idx, current, sim.U + (te - tc)):
                        break
                    te, kind, idx = sim.next_event(tc, wall_end)
                if te < tc + d and kind == "fail" and sim.cls[idx] == "numerics":
                    # onset during a save/eval: the NaN shows on the next step
                    sim.redraw(idx)
                    sim.nan_onset_step = s
                    a.nan_from_step = s
                    sim.nan_stop = tc + d + sim.uni_us(cfg.nan_run_on_s)
                    te = math.inf
                poisoned = sim.nan_stop is not None
                if te < tc + d:
                    if ph == "save":
                        a.saves.append(Save(boundary, tc, int(te), False, poisoned))
                    elif record:
                        a.evals.append(Eval(boundary, tc, int(te), False))
                    sim.U += int(te) - tc
                    ended = (kind, idx, int(te))
                    break
                if ph == "save":
                    if not record:
                        a.saves.clear()  # only the last save is looked at while drawing
                    a.saves.append(Save(boundary, tc, tc + d, True, poisoned))
                    if not poisoned:
                        clean_ckpts.append(boundary)
                elif record:
                    a.evals.append(Eval(boundary, tc, tc + d, True))
                sim.U += d
                tc += d
                a.last_activity_end = tc

        # close the attempt
        close_slow(last_step_done, a.last_activity_end)
        last_progress = a.last_step_end if a.n_steps and a.last_step_end is not None else a.first_step_start
        if ended is None:
            tail = 0 if fixed else sim.uni_us((5.0, 30.0))
            a.end = a.last_activity_end + tail
            a.exit_state, a.exit_code = "COMPLETED", "0:0"
            done = True
            break

        kind, idx, te = ended
        if kind == "walltime":
            cls = "walltime"
        elif kind == "nan_stop":
            cls = "numerics"
        else:
            cls = sim.cls[idx]
            sim.redraw(idx)
        node_i: int | None = None
        gpu: int | None = None
        rank: int | None = None
        node: str | None = None
        if cls not in NO_NODE:
            node_i = int(rng.integers(0, cfg.nodes))
            gpu = int(rng.integers(0, G))
            rank = node_i * G + gpu
            node = current[node_i]
            bad = sim.bad_host(idx) if kind == "fail" else None
            if bad is not None:  # a planted bad node's own failure
                node_i = current.index(bad)
                rank, node = node_i * G + gpu, bad
        # detection
        if cls == "walltime":
            t_det = te
        elif cls == "numerics":
            t_det = te + (0 if fixed else sim.uni_us(cfg.detection_range("numerics")))
        elif fixed:
            t_det = te
        else:
            t_det = te + sim.uni_us(cfg.detection_range(cls))
        killed_by_wall = False
        if t_det > wall_end:
            t_det = int(wall_end)
            killed_by_wall = True
        # the first error record of the incident
        if cls == "numerics":
            first_err = a.nan_first_end if a.nan_first_end is not None else te
        elif cls in ("hang",):
            first_err = None
        elif cls == "collective_timeout":
            first_err = min(t_det, te + int(cfg.watchdog_timeout_s * US))
        elif cls in ("node_failure", "host_hardware"):
            first_err = te if cls == "host_hardware" else min(t_det, te + (t_det - te) // 2)
        elif cls in ("walltime", "preemption", "maintenance", "user_cancel"):
            first_err = t_det
        else:
            first_err = te
        inc = Incident(
            attempt=i,
            root_cause=cls,
            planned=is_planned(cls),
            node=node,
            gpu=gpu,
            rank=rank,
            t_fail=te,
            t_last_progress=last_progress,
            t_first_error=first_err,
            t_detected=t_det,
            last_step=last_step_done,
            in_save=bool(a.saves and not a.saves[-1].completed),
            killed_by_walltime=killed_by_wall,
        )
        incidents.append(inc)
        a.incident = len(incidents) - 1
        a.end = t_det
        if killed_by_wall and cls != "walltime":
            a.exit_state, a.exit_code = "TIMEOUT", "0:0"
        else:
            a.exit_state, a.exit_code = EXIT_STATE[cls]
        # the up-time clock stops at the failure; failure processes keep their schedule
        if i + 1 >= cfg.max_attempts:
            done = True
            break
        # next attempt: replace the node, choose the checkpoint, queue
        if node is not None and cls in REPLACES_NODE and spares:
            j = current.index(node)
            current = list(current)
            current[j] = spares.pop(0)
        if cls == "numerics":
            onset = a.nan_from_step or last_step_done + 1
            good = [c for c in clean_ckpts if c < onset]
            k = len(good) - 1 - cfg.nan_rollback_ckpts
            resume = good[k] if k >= 0 else 0
            clean_ckpts[:] = [c for c in clean_ckpts if c <= resume]
        else:
            resume = clean_ckpts[-1] if clean_ckpts else 0
        if inc.last_step > resume:
            res.pending.append((a.incident, inc.last_step))  # caught up in a later attempt
        queue = int(round(repair_s * US)) if repair_s is not None else sim.uni_us(cfg.queue_wait_s)
        t = t_det + queue


def _recorded(a: Attempt) -> _Blocks:
    if a.blocks is None:  # every attempt the generator yields records its step blocks
        raise AssertionError(f"attempt {a.index} has no step blocks")
    return a.blocks


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
    res = _Result()
    if keep_steps:
        parts: dict[int, list[Chunk]] = {}
        for i, chunk in _generate(cfg, rng, res):
            parts.setdefault(i, []).append(chunk)
        for a in res.attempts:
            got = parts.pop(a.index, [])
            if got:
                a.steps = np.concatenate([c[0] for c in got])
                a.step_end = np.concatenate([c[1] for c in got])
                a.step_dur = np.concatenate([c[2] for c in got])
    else:
        for _ in _generate(cfg, rng, res):
            pass
    attempts, incidents = res.attempts, res.incidents

    # ---- outcome per step: preserved or lost
    n_att = len(attempts)
    resumes = [a.resumed_from for a in attempts]
    useful = slowdown = rework = 0
    big = 1 << 62
    suffix_min = [big] * (n_att + 1)
    for j in range(n_att - 1, -1, -1):
        suffix_min[j] = min(suffix_min[j + 1], resumes[j])
    blocks = [_recorded(a) for a in attempts]
    for j in range(n_att):
        u, sl, r = blocks[j].kept(suffix_min[j + 1])
        useful += u
        slowdown += sl
        rework += r
    # incidents: restart times, lost steps, catching up
    for inc in incidents:
        j = inc.attempt
        if j + 1 < n_att:
            nxt = attempts[j + 1]
            inc.t_restart = nxt.start
            inc.t_resumed = nxt.first_step_start
            inc.lost_steps = max(0, inc.last_step - nxt.resumed_from)
            r_next = nxt.resumed_from
            lost = blocks[j].dur_between(r_next, big)
            lim = resumes[j]  # steps of earlier attempts that survived up to attempt j
            k = j - 1
            while k >= 0 and lim > r_next:
                lost += blocks[k].dur_between(r_next, lim)
                lim = min(lim, resumes[k])
                k -= 1
            inc.lost_time_us = lost
            if inc.last_step <= nxt.resumed_from:
                inc.t_caught_up = nxt.first_step_start
        else:
            inc.t_caught_up = None
    assert rework == sum(inc.lost_time_us for inc in incidents), "rework must equal the lost time of the incidents"

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
    return Timeline(
        config=cfg,
        seed=-1 if seed is None else int(seed),
        t_start=attempts[0].start,
        t_end=last.end,
        ideal_step_us=res.ideal,
        attempts=attempts,
        incidents=incidents,
        slow_periods=res.slow_periods,
        ledger_us=ledger,
        clock_skew_us=res.skews,
        hosts=res.hosts,
        replay=replay,
        steps_kept=keep_steps,
    )
