"""Weibull fits of times between failures with right-censoring.

The point estimate comes from ``scipy.stats.weibull_min.fit`` on ``scipy.stats.CensoredData``.
The intervals are profile-likelihood intervals: for a fixed shape ``k`` the scale's maximum
likelihood has the closed form ``scale**k = sum(t**k) / r`` (sum over observed and censored
times, ``r`` observed failures), so the profile in ``k`` is explicit and its 95% bounds are the
roots of ``2*(l_max - l(k)) = chi2_1(0.95)`` (found with ``scipy.optimize.brentq``). The scale's
interval, and that of the mean time between failures ``scale * gamma(1 + 1/shape)``, profile out
the shape with ``scipy.optimize.minimize_scalar``. The likelihood ratio of
the Weibull against the exponential (shape 1) gives the constant-rate verdict.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

MIN_FAILURES = 3  # fewer observed failures give no usable shape


@dataclass(frozen=True)
class WeibullFit:
    shape: float
    shape_lo: float
    shape_hi: float
    scale: float  # in the unit of the times given (hours of the chosen exposure)
    scale_lo: float
    scale_hi: float
    mean: float  # mean time between failures, scale * gamma(1 + 1/shape): the long-run rate is 1/mean
    mean_lo: float
    mean_hi: float
    n_failures: int
    n_censored: int
    lr_stat: float  # 2 * (loglik Weibull - loglik exponential)
    p_value: float  # of the constant-rate (shape = 1) hypothesis
    constant_rate_rejected: bool

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _loglik(k: float, lam: float, x: np.ndarray, c: np.ndarray) -> float:
    """Censored Weibull log-likelihood: densities of observed times, survival of censored ones
    (-inf where a power overflows, which only happens far outside any interval)."""
    z = np.concatenate([x, c]) / lam
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        v = len(x) * (math.log(k) - math.log(lam)) + (k - 1) * np.log(x / lam).sum() - np.exp(k * np.log(z)).sum()
    return float(v) if np.isfinite(v) else -math.inf


def _profile_scale(k: float, x: np.ndarray, c: np.ndarray) -> float:
    t = np.concatenate([x, c])
    top = float(t.max())  # powers of t / max stay <= 1
    return top * float((np.power(t / top, k).sum() / len(x)) ** (1.0 / k))


def _profile(k: float, x: np.ndarray, c: np.ndarray) -> float:
    return _loglik(k, _profile_scale(k, x, c), x, c)


def _bound(f: Any, inside: float, step: float, limit: float) -> float:
    """Where ``f`` (positive inside the interval) crosses zero going from ``inside`` by factors of ``step``."""
    out = inside
    for _ in range(60):
        nxt = out * step
        if (step > 1 and nxt > limit) or (step < 1 and nxt < limit):
            return limit
        if not f(nxt) >= 0:  # below the cut (or -inf): the bound lies between out and nxt
            try:
                return float(optimize.brentq(lambda v: max(f(v), -1e6), min(out, nxt), max(out, nxt)))
            except ValueError:  # the profile is flat or not finite there: keep the last inside point
                return out
        out = nxt
    return limit


def fit_weibull(observed: np.ndarray, censored: np.ndarray, conf: float = 0.95) -> WeibullFit | None:
    """Fit times between failures (``observed``) and running times after the last failure
    (``censored``), both positive, in one unit. None with fewer than ``MIN_FAILURES`` failures, or
    when the shape has no finite estimate: failures all the same time apart (clock-quantized
    gaps, a replayed log) make the likelihood grow without bound as the shape does."""
    x = np.asarray(observed, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    c = np.asarray(censored, dtype=float)
    c = c[np.isfinite(c) & (c > 0)]
    if len(x) < MIN_FAILURES or np.ptp(x) <= 1e-9 * float(x.max()):
        return None
    data = stats.CensoredData(uncensored=x, right=c)
    # start scipy's censored fit at the maximum of the explicit profile: same answer, far fewer
    # (slow, generic) likelihood evaluations
    k0 = float(optimize.minimize_scalar(lambda kk: -_profile(kk, x, c), bounds=(0.02, 50.0), method="bounded").x)
    k, _, lam = stats.weibull_min.fit(data, k0, floc=0, scale=_profile_scale(k0, x, c))
    k, lam = float(k), float(lam)
    lmax = _loglik(k, lam, x, c)
    crit = float(stats.chi2.ppf(conf, 1)) / 2.0
    f_shape = lambda kk: _profile(kk, x, c) - (lmax - crit)  # noqa: E731
    k_lo = _bound(f_shape, k, 0.8, 1e-3)
    k_hi = _bound(f_shape, k, 1.25, 1e3)
    if not (math.isfinite(k) and math.isfinite(lam) and 0 < k_lo <= k <= k_hi):  # (a shape past the bounds searched)
        return None

    def prof(s: float, mean: bool) -> float:
        """Profile log-likelihood of a scale (or of a mean) minus the interval's cut."""
        sc = (lambda kk: s / math.gamma(1.0 + 1.0 / kk)) if mean else (lambda kk: s)
        res = optimize.minimize_scalar(lambda kk: -_loglik(kk, sc(kk), x, c), bounds=(k_lo / 2, k_hi * 2),
                                       method="bounded")
        return float(-res.fun) - (lmax - crit)

    s_lo = _bound(lambda s: prof(s, False), lam, 0.85, lam * 1e-4)
    s_hi = _bound(lambda s: prof(s, False), lam, 1.18, lam * 1e4)
    m = lam * math.gamma(1.0 + 1.0 / k)
    m_lo = _bound(lambda s: prof(s, True), m, 0.85, m * 1e-4)
    m_hi = _bound(lambda s: prof(s, True), m, 1.18, m * 1e4)
    l_exp = _profile(1.0, x, c)
    lr = max(0.0, 2.0 * (lmax - l_exp))
    p = float(stats.chi2.sf(lr, 1))
    return WeibullFit(k, k_lo, k_hi, lam, s_lo, s_hi, m, m_lo, m_hi, int(len(x)), int(len(c)), lr, p, p < 1.0 - conf)
