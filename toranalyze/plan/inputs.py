"""What the planner takes from a rates document and from the command line, checked once.

One source of truth per class: a fitted class' rate is its failures over the fleet's exposure in
the class' scaling unit; every other number the document holds about it (``rate``, ``exposure``,
``per_1000_node_days``) must agree with that, or the document is refused naming the field. A class
can instead be declared with a rate in a published unit (``--rate``), which replaces a fitted one.
Each class scales with job size per GPU, per node or per job: declared, fitted (when the
likelihoods tell the units apart) or, when the fit cannot tell, by its category in the taxonomy.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from scipy import stats

from toranalyze.errors import RatesError
from toranalyze.fleet import fit as fleet_fit
from toranalyze.plan.strategy import Phase, Recovery

PER = fleet_fit.PER_UNIT  # per GPU, node or job -> the exposure unit of rates.json
EXPOSURE_KEY = {"gpu": "gpu_hours", "node": "node_hours", "job": "job_hours"}
CONF = 0.95


@dataclass(frozen=True)
class ClassRate:
    """One failure class of the planned job: failures per hour per GPU, node or job."""

    name: str
    rate: float  # per unit-hour of ``per``
    per: str  # gpu | node | job
    failures: int | None  # None for a declared rate (no count behind it)
    exposure: float | None  # unit-hours the count was seen over
    shape: float = 1.0  # Weibull shape of the gaps (1: Poisson)
    source: str = "fitted"  # fitted | taxonomy | declared
    evidence: str = ""

    def multiplier(self, gpus: float, gpn: float) -> float:
        return {"gpu": gpus, "node": gpus / gpn, "job": 1.0}[self.per]

    def per_hour(self, gpus: float, gpn: float) -> float:
        return self.rate * self.multiplier(gpus, gpn)


def scaling(name: str, fit: dict[str, Any]) -> tuple[str, str, str]:
    """(per, source, evidence) of a fitted class: as the document states it, else decided here as
    ``toranalyze fleet`` decides it when it writes the document."""
    stated = fit.get("scaling")
    if isinstance(stated, dict) and stated.get("per") in PER:
        return stated["per"], str(stated.get("source") or "declared"), str(stated.get("evidence") or "")
    d = fleet_fit.scaling(name, fit)
    return d["per"], d["source"], d["evidence"]


def _agree(value: Any, expected: float, field: str) -> None:
    """A derived number in the document must match its source (9 significant digits are kept)."""
    if value is None or not isinstance(value, (int, float)):
        return
    if not math.isclose(float(value), expected, rel_tol=1e-6, abs_tol=1e-300):
        raise RatesError(f"{value!r} contradicts failures / exposure = {expected:.9g}", field=field,
                         hint="one source of truth: remove the field or make it agree (docs/plan.md)")


def _fitted(name: str, fit: dict[str, Any], exposure: dict[str, Any]) -> ClassRate:
    where = f"$.classes.{name}"
    k = int(fit["failures"])
    for unit, key in EXPOSURE_KEY.items():  # every number about the class must follow from k and exposure
        e = float(exposure.get(key) or 0.0)
        block = (fit.get("rates") or {}).get(PER[unit]) or {}
        if block.get("exposure") is not None:
            _agree(block["exposure"], e, f"{where}.rates.{PER[unit]}.exposure")
        if e > 0:
            _agree(block.get("rate"), k / e, f"{where}.rates.{PER[unit]}.rate")
    nd = float(exposure.get("node_days") or 0.0)
    if nd > 0:
        _agree(((fit.get("per_1000_node_days") or {}).get("rate")), 1000.0 * k / nd, f"{where}.per_1000_node_days.rate")
    per, source, evidence = scaling(name, fit)
    e = float(exposure.get(EXPOSURE_KEY[per]) or 0.0)
    if k > 0 and e <= 0:
        raise RatesError(f"{k} failure(s) over no running time: no rate follows", field=f"{where}.failures",
                         hint="analyse whole runs (with their step or scheduler lines), not a pasted excerpt")
    wb = fit.get("weibull") or {}
    shape = float(wb["shape"]) if wb.get("constant_rate_rejected") and wb.get("unit") == PER[per] else 1.0
    return ClassRate(name, k / e if e > 0 else 0.0, per, k, e, shape, source, evidence)


def fitted_classes(doc: dict[str, Any]) -> list[ClassRate]:
    exposure = doc.get("exposure") or {}
    return [_fitted(n, f, exposure) for n, f in sorted((doc.get("classes") or {}).items())]


# --------------------------------------------------------------------------- published units

# per unit-hour of gpu/node/job, of each published unit
UNITS: dict[str, tuple[str, float]] = {
    "gpu-hour": ("gpu", 1.0), "gpu-day": ("gpu", 1 / 24), "gpu-year": ("gpu", 1 / 8766),
    "node-hour": ("node", 1.0), "node-day": ("node", 1 / 24), "1000-node-days": ("node", 1 / 24000),
    "node-year": ("node", 1 / 8766), "job-hour": ("job", 1.0), "job-day": ("job", 1 / 24),
}
_RATE = re.compile(r"^\s*([a-z_]+)\s*=\s*([0-9.eE+-]+)\s*(?:/|per)\s*([a-z0-9-]+)\s*$")


def declared(text: str) -> ClassRate:
    """``CLASS=VALUE/UNIT``, e.g. ``node_failure=6.5/1000-node-days`` or ``gpu_hardware=0.01/gpu-year``."""
    m = _RATE.match(text.lower())
    if not m or m.group(3) not in UNITS:
        raise ValueError(f"not a rate: {text!r} (CLASS=VALUE/UNIT, UNIT one of {', '.join(UNITS)})")
    value = float(m.group(2))
    if not math.isfinite(value) or value < 0 or value > 1e6:
        raise ValueError(f"{text!r}: a rate is a number from 0 to 1e6")
    per, factor = UNITS[m.group(3)]
    return ClassRate(m.group(1), value * factor, per, None, None, 1.0, "declared", f"{m.group(2)} per {m.group(3)}")


def published(c: ClassRate) -> dict[str, float]:
    """The class' rate in the units papers print for its scaling."""
    if c.per == "node":
        return {"per 1000 node-days": c.rate * 24000, "per node-day": c.rate * 24}
    if c.per == "gpu":
        return {"per GPU-year": c.rate * 8766, "per 1000 GPU-days": c.rate * 24000}
    return {"per job-day": c.rate * 24}


# --------------------------------------------------------------------------- intervals

def garwood(k: int, exposure: float, conf: float = CONF) -> tuple[float, float]:
    """Exact Poisson interval of a rate (chi-square form)."""
    a = 1.0 - conf
    lo = stats.chi2.ppf(a / 2, 2 * k) / (2 * exposure) if k > 0 else 0.0
    return float(lo), float(stats.chi2.ppf(1 - a / 2, 2 * k + 2) / (2 * exposure))


RULE_OF_THREE = -math.log(0.05)  # one-sided 95% upper bound on a Poisson mean after 0 events (~3)


def rate_interval(classes: list[ClassRate], gpus: float, gpn: float) -> tuple[float, float, float] | None:
    """The planned job's failure rate (per running hour) and its 95% interval: the exact Poisson
    interval of the total count, scaled to the combined rate (exact when the classes scale alike).
    Declared classes add their rate without spread. None when no count lies behind it."""
    fitted = [c for c in classes if c.failures is not None and c.exposure]
    fixed = sum(c.per_hour(gpus, gpn) for c in classes if c.failures is None)
    k = sum(c.failures or 0 for c in fitted)
    lam = sum(c.per_hour(gpus, gpn) for c in fitted)
    if not fitted or k == 0:
        return None
    lo, hi = garwood(k, 1.0)
    return lam + fixed, lam * lo / k + fixed, lam * hi / k + fixed


def zero_failure_bound(doc: dict[str, Any], gpus: float, gpn: float) -> float | None:
    """With no failure seen: the rule-of-three upper bound on the job's rate (per running hour),
    counting the exposure per node (the hardware view: the largest rate a size-scaled class could have)."""
    e = float((doc.get("exposure") or {}).get("node_hours") or 0.0)
    return RULE_OF_THREE / e * gpus / gpn if e > 0 else None


# --------------------------------------------------------------------------- recovery and slowness

def _phase(doc: dict[str, Any], part: str) -> tuple[Phase, str] | None:
    d = (doc.get("downtime") or {}).get(part)
    if not d or not d.get("mean_s"):
        return None
    sigma = float((d.get("lognormal") or {}).get("sigma") or 0.0)
    return Phase(float(d["mean_s"]) / 3600.0, sigma), f"observed {part} (n={d.get('n')})"


DEFAULT_PHASES_H = {"detect": 2 / 60, "queue": 0.0, "startup": 8 / 60}  # 10 min in all, as before


def recovery(doc: dict[str, Any], given: dict[str, float | None]) -> tuple[Recovery, dict[str, str]]:
    """Detection, queue and start-up: given on the command line, else observed in the rates file
    (detection; queue; start-up, checkpoint load included), else a default; ``restart`` given
    alone stands for the whole recovery and is exposed to failures."""
    phases: dict[str, Phase] = {}
    source: dict[str, str] = {}
    observed = {"detect": "detection", "queue": "queue", "startup": "startup"}
    for name, part in observed.items():
        if given.get(name) is not None:
            phases[name], source[name] = Phase(float(given[name] or 0.0)), "given"
        elif given.get("restart") is not None:
            phases[name] = Phase(float(given["restart"] or 0.0) if name == "startup" else 0.0)
            source[name] = "--restart" if name == "startup" else "in --restart"
        elif (obs := _phase(doc, part)) is not None:
            phases[name], source[name] = obs
        else:
            phases[name], source[name] = Phase(DEFAULT_PHASES_H[name]), "default (none observed)"
    return Recovery(phases["detect"], phases["queue"], phases["startup"]), source


def slowness(doc: dict[str, Any], given: list[tuple[float, float]]) -> tuple[float, str]:
    """The fraction of running time's throughput kept despite fail-slow periods and stalls: from
    ``--slow FRACTION,FACTOR`` (a fraction of running time at a step-time factor; factor inf for a
    stall), else from the rates file's measured slowdown, else 1."""
    if given:
        lost = sum(f * (1.0 - (0.0 if math.isinf(s) else 1.0 / s)) for f, s in given)
        return max(0.0, 1.0 - lost), "given"
    fs = doc.get("fail_slow") or {}
    if fs.get("loss_fraction") is not None:
        return max(0.0, 1.0 - float(fs["loss_fraction"])), f"observed ({fs.get('slow_hours', 0):.3g} slow hours)"
    return 1.0, "none given or observed"
