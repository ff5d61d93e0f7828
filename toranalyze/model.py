"""The stochastic model of a training run and its closed forms.

One module serves both the simulator (which draws runs from :class:`RunConfig`)
and the planner (which evaluates the closed forms), so the two cannot drift.

Closed forms follow docs/ledger.md and the derivations of the TOR reference
(fail-stop exact renewal-reward form, first-order forms, fail-slow first order,
Young / Daly / availability-optimal checkpoint intervals). All times in the
closed forms share one unit (the caller's choice).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from toranalyze.taxonomy import PLANNED, TAXONOMY

# --------------------------------------------------------------------------- closed forms


def tor_fail_stop_exact(M: float, tau: float, delta: float, R: float) -> float:
    """Exact TOR under the fail-stop assumptions (Poisson failures over up-time, mean M;
    interval tau of running, blocking save delta, fixed repair R, loss since the last
    completed save): ``q = exp(-(tau+delta)/M)``, ``TOR = tau*q / ((1-q)*(M+R))``."""
    if M <= 0 or tau <= 0 or delta < 0 or R < 0:
        raise ValueError("need M > 0, tau > 0, delta >= 0, R >= 0")
    if math.isinf(M):
        return tau / (tau + delta)
    q = math.exp(-(tau + delta) / M)
    return tau * q / ((1.0 - q) * (M + R))


def tor_first_order(M: float, tau: float, delta: float, R: float) -> float:
    """First-order TOR for large M: ``(M*tau/(tau+delta) - tau/2) / (M+R)``."""
    if math.isinf(M):
        return tau / (tau + delta)
    return (M * tau / (tau + delta) - tau / 2.0) / (M + R)


def tor_first_order_simple(M: float, tau: float, delta: float, R: float) -> float:
    """The fully linearised form ``1 - delta/tau - (tau/2 + R)/M``."""
    return 1.0 - delta / tau - (tau / 2.0 + R) / M


def tor_fail_slow_first_order(
    M_s: float, tau: float, delta: float, T_s: float, r_s: float, R_s: float = 0.0
) -> float:
    """Fail-slow first order: episodes of preservation ratio r_s lasting T_s (plus a stop
    R_s) every M_s of wall time: ``((M_s-T_s-R_s)*tau/(tau+delta) + r_s*T_s) / M_s``."""
    return ((M_s - T_s - R_s) * tau / (tau + delta) + r_s * T_s) / M_s


@dataclass(frozen=True)
class FailSlow:
    """Fail-slow episodes: one every ``M_s`` of wall time, lasting ``T_s`` at preservation ratio
    ``r_s``, plus a stop of ``R_s``."""

    M_s: float
    T_s: float
    r_s: float
    R_s: float = 0.0


def tor_both_first_order(M: float, tau: float, delta: float, R: float, slow: FailSlow) -> float:
    """Fail-stop and fail-slow together, first order."""
    return 1.0 - delta / tau - (tau / 2.0 + R) / M - ((1.0 - slow.r_s) * slow.T_s + slow.R_s) / slow.M_s


def young_interval(delta: float, M: float) -> float:
    """Young (1974): ``tau = sqrt(2*delta*M)``."""
    return math.sqrt(2.0 * delta * M)


def daly_interval(delta: float, M: float) -> float:
    """Daly (2006) higher-order optimum; ``M`` when ``delta >= 2M``."""
    if delta >= 2.0 * M:
        return M
    x = delta / (2.0 * M)
    return math.sqrt(2.0 * delta * M) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta


def availability_optimal_interval(T_s: float, T_f: float, T_r: float, detection: float = 0.0) -> float:
    """Saxena et al.: ``T_c = T_s + sqrt(2*(T_f+T_r)*T_s + T_s**2)``; at least the detection
    latency when that is longer (a checkpoint cannot usefully be younger than detection)."""
    t = T_s + math.sqrt(2.0 * (T_f + T_r) * T_s + T_s * T_s)
    return max(t, detection)


# --------------------------------------------------------------------------- durations

_DUR = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|ms|s|m|min|h|d|w)?\s*$")
_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(value: str | float | int) -> float:
    """'2d', '90m', '1.5h', '30s' or a number of seconds -> seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    m = _DUR.match(value)
    if not m:
        raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 90m, 6h, 2d)")
    return float(m.group(1)) * _UNIT[m.group(2)]


def _duration_range(value: Any, where: str) -> tuple[float, float]:
    """A ``[low, high]`` pair of durations (``["5s", "40s"]``)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"{where}: expected [low, high] durations, got {value!r}")
    return parse_duration(value[0]), parse_duration(value[1])


# --------------------------------------------------------------------------- configuration

# Seconds from failure onset to the attempt being declared failed, per class, as
# (low, high) of a uniform draw. ``None`` means "the NCCL watchdog timeout".
DEFAULT_DETECTION: dict[str, tuple[float, float] | None] = {
    "gpu_hardware": None,  # the failed rank dies, the others wait on the collective
    "gpu_memory": (5.0, 40.0),  # CUDA ECC error raised on the rank, process aborts
    "gpu_interconnect": None,
    "network": (20.0, 120.0),  # NCCL surfaces the IB completion error
    "collective_timeout": None,
    "host_hardware": (60.0, 300.0),  # node stops responding (SlurmdTimeout)
    "node_failure": (60.0, 300.0),
    "storage": (5.0, 60.0),
    "oom_gpu": (3.0, 20.0),
    "oom_host": (2.0, 15.0),
    "software": (3.0, 30.0),
    "numerics": (5.0, 20.0),  # from the stop decision (after nan_run_on) to the job end
    "hang": (3600.0, 10800.0),  # a human notices and cancels (unless walltime comes first)
    "preemption": (0.0, 30.0),
    "maintenance": (0.0, 30.0),
    "user_cancel": (0.0, 10.0),
    "unknown": (30.0, 600.0),
}

SIM_CLASSES = tuple(
    c for c in TAXONOMY if c not in ("walltime", "scheduling", "fail_slow")
)  # drawn by rate processes; walltime and slowness have their own mechanisms


@dataclass(frozen=True)
class FailureProcess:
    """Interruptions of one class: renewal process over the job's up-time."""

    failure_class: str
    rate: float  # events per unit of exposure (per hour)
    per: str = "gpu_hour"  # gpu_hour | node_hour | job_hour
    shape: float = 1.0  # Weibull shape; 1 = exponential

    def rate_per_hour(self, n_nodes: int, gpus_per_node: int) -> float:
        k = {"gpu_hour": n_nodes * gpus_per_node, "node_hour": n_nodes, "job_hour": 1}[self.per]
        return self.rate * k

    def draw_s(self, rng: np.random.Generator, n_nodes: int, gpus_per_node: int) -> float:
        """Up-time (s) until the next event (inf if the rate is zero)."""
        lam = self.rate_per_hour(n_nodes, gpus_per_node) / 3600.0
        if lam <= 0:
            return math.inf
        mean = 1.0 / lam
        if self.shape == 1.0:
            return float(rng.exponential(mean))
        scale = mean / math.gamma(1.0 + 1.0 / self.shape)  # keep the mean
        return float(scale * rng.weibull(self.shape))


@dataclass(frozen=True)
class RunConfig:
    """Everything the simulator draws from. Durations in seconds."""

    name: str = "run"
    start: str = "2024-03-04T08:00:00Z"
    nodes: int = 4
    gpus_per_node: int = 8
    spare_nodes: int = 8
    host_prefix: str = "gpu"
    # work
    duration_s: float = 6 * 3600.0  # ideal training time (train_iters * step_time)
    step_time_s: float = 6.0  # nominal (median) step time = t*
    jitter_sigma: float = 0.03  # lognormal sigma of the step-time multiplier (median 1)
    global_batch_size: int = 512
    log_interval: int = 1
    # checkpoints and evaluation
    ckpt_interval_steps: int = 200
    ckpt_save_s: float = 30.0
    ckpt_save_jitter: float = 0.1  # lognormal sigma
    eval_interval_steps: int = 0  # 0 = no evaluation
    eval_s: float = 60.0
    # recovery
    startup_s: tuple[float, float] = (60.0, 180.0)  # process start -> before checkpoint load
    ckpt_load_s: tuple[float, float] = (30.0, 90.0)
    queue_wait_s: tuple[float, float] = (30.0, 600.0)  # between attempts
    warmup_steps: int = 3
    warmup_factor: float = 2.0  # first step after (re)start is this much slower, decaying
    fixed_repair_s: float | None = None  # closed-form mode: detection 0, recovery exactly R
    max_attempts: int = 100
    # failures
    failures: tuple[FailureProcess, ...] = ()
    script: tuple[tuple[float, str], ...] = ()  # (up-time s, class): incidents that happen for sure
    # planted bad nodes: (host, multiplier); such a host meets every node-level class (rates per GPU-
    # or node-hour) this many times as often as a healthy one while it is in the job's allocation
    bad_nodes: tuple[tuple[str, float], ...] = ()
    detection: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    watchdog_timeout_s: float = 1800.0
    nan_run_on_s: tuple[float, float] = (600.0, 1800.0)  # NaN steps logged before someone stops the run
    nan_rollback_ckpts: int = 1  # extra checkpoints to roll back beyond the last clean one
    walltime_s: float | None = None  # per attempt; the job is requeued when it is hit
    # fail-slow
    slow_rate_per_hour: float = 0.0  # episodes per hour of up-time (job level)
    slow_duration_s: tuple[float, float] = (600.0, 3600.0)
    slow_factor: tuple[float, float] = (1.2, 1.6)
    # scheduler / emission
    flavor: str = "slurm"  # slurm | kubernetes
    job_id_mode: str = "new_job"  # new_job (one id per attempt) | requeue (one id)
    first_job_id: int = 424200
    clock_skew_s: float = 3.0  # per-node clock offsets drawn uniform in +-this
    nccl_chatter: int = 12  # INFO lines per rank at init
    noise_per_hour: float = 4.0  # unrelated warnings per node-hour

    # ---- derived
    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def train_iters(self) -> int:
        return max(1, int(round(self.duration_s / self.step_time_s)))

    def detection_range(self, cls: str) -> tuple[float, float]:
        d = self.detection.get(cls, DEFAULT_DETECTION.get(cls, (10.0, 60.0)))
        if d is None:
            w = self.watchdog_timeout_s
            return (w + 1.0, w + 30.0)
        return (float(d[0]), float(d[1]))

    def validate(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError("nodes and gpus_per_node must be >= 1")
        if self.step_time_s <= 0 or self.duration_s <= 0:
            raise ValueError("step_time_s and duration_s must be > 0")
        if self.ckpt_interval_steps < 1:
            raise ValueError("ckpt_interval_steps must be >= 1")
        for p in self.failures:
            if p.failure_class not in TAXONOMY or p.failure_class not in SIM_CLASSES:
                raise ValueError(f"cannot simulate failure class {p.failure_class!r}")
            if p.per not in ("gpu_hour", "node_hour", "job_hour"):
                raise ValueError(f"unknown exposure {p.per!r}")
            if p.rate < 0 or p.shape <= 0:
                raise ValueError("failure rates must be >= 0 and shapes > 0")
        for _, m in self.bad_nodes:
            if m < 1:
                raise ValueError("bad node multipliers must be >= 1")
        for _, c in self.script:
            if c not in SIM_CLASSES:
                raise ValueError(f"cannot simulate failure class {c!r}")
        if self.flavor not in ("slurm", "kubernetes"):
            raise ValueError("flavor must be slurm or kubernetes")
        if self.job_id_mode not in ("new_job", "requeue"):
            raise ValueError("job_id_mode must be new_job or requeue")

    def to_params(self) -> dict[str, Any]:
        """JSON-friendly parameters (for truth.json)."""
        d = asdict(self)
        d["failures"] = [asdict(p) for p in self.failures]
        d["script"] = [{"at_s": u, "class": c} for u, c in self.script]
        if self.bad_nodes:
            d["bad_nodes"] = {h: m for h, m in self.bad_nodes}
        else:
            del d["bad_nodes"]  # absent when none is planted: truth files stay as they were
        d["detection"] = {k: (list(v) if v else None) for k, v in sorted(self.detection.items())}
        for k, v in list(d.items()):
            if isinstance(v, tuple):
                d[k] = list(v)
        d["train_iters"] = self.train_iters
        return d


def is_planned(cls: str) -> bool:
    return cls in PLANNED


_DURATION_KEYS = {f.name for f in fields(RunConfig) if f.name.endswith("_s")}


def _coerce(key: str, value: Any) -> Any:
    if key in _DURATION_KEYS:
        if isinstance(value, (list, tuple)):
            return tuple(parse_duration(v) for v in value)
        return None if value is None else parse_duration(value)
    if isinstance(value, list):
        return tuple(value)
    return value


def config_from_dict(data: dict[str, Any], base: RunConfig | None = None) -> RunConfig:
    """Build a RunConfig from a (TOML) mapping: a flat ``[run]`` table plus
    ``[failures.<class>]`` tables (``rate``, ``per``, ``shape``), ``[detection]`` and
    ``[bad_nodes]`` (host = rate multiplier)."""
    base = base or RunConfig()
    run = dict(data.get("run", {}))
    known = {f.name for f in fields(RunConfig)}
    kw: dict[str, Any] = {}
    for k, v in run.items():
        key = k if k in known else (k + "_s" if k + "_s" in known else None)
        if key is None:
            raise ValueError(f"unknown run parameter {k!r}")
        kw[key] = _coerce(key, v)
    if "failures" in data:
        procs = []
        for cls in sorted(data["failures"]):
            spec = data["failures"][cls]
            procs.append(
                FailureProcess(
                    cls, float(spec.get("rate", 0.0)), spec.get("per", "gpu_hour"), float(spec.get("shape", 1.0))
                )
            )
        kw["failures"] = tuple(procs)
    if "bad_nodes" in data:
        kw["bad_nodes"] = tuple(sorted((str(h), float(m)) for h, m in data["bad_nodes"].items()))
    if "script" in data:
        kw["script"] = tuple(sorted((parse_duration(e["at"]), str(e["class"])) for e in data["script"]))
    if "detection" in data:
        det = dict(base.detection)
        for cls, v in data["detection"].items():
            det[cls] = None if v == "watchdog" else _duration_range(v, f"detection.{cls}")
        kw["detection"] = det
    cfg = replace(base, **kw)
    cfg.validate()
    return cfg


def load_config(path: str | Path) -> RunConfig:
    with open(path, "rb") as fh:
        return config_from_dict(tomllib.load(fh))


def preset_names() -> list[str]:
    return sorted(
        p.name[:-5] for p in (resources.files("toranalyze") / "presets").iterdir() if p.name.endswith(".toml")
    )


def load_preset(name: str) -> dict[str, Any]:
    """The raw mapping of a packaged preset (``[run]``, ``[failures.*]``, optional ``[fleet]``)."""
    res = resources.files("toranalyze") / "presets" / f"{name}.toml"
    if not res.is_file():
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(preset_names())}")
    return tomllib.loads(res.read_text(encoding="utf-8"))
