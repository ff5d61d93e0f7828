"""Score an :class:`~toranalyze.reconstruct.analysis.Analysis` against a simulator ``truth.json``.

Pure functions: ``score_run(analysis, truth_doc)`` returns per-job metrics, ``summarize(runs)``
aggregates many runs and checks the acceptance bounds, ``format_summary`` renders a table.

Matching
    Analysis jobs are matched to truth jobs by shared scheduler ids (else, one job each, by
    position). Incidents are matched greedily in time: each truth incident takes the unmatched
    estimated incident of the same job whose ``t_last_progress`` and ``t_detected`` are closest
    (summed distance within ``match_tolerance_s``). A slow period is found when an estimated
    period of the job overlaps it in time; an estimated period overlapping no true one is a
    false positive. Recall counts the true periods the logs can show (``_slow_observable``:
    ``min_steps`` slow steps in log rows wholly inside the period); the others are counted apart.

Lost steps
    ``lost_steps_exact_share`` compares with what the logs can show: a trainer that logs every
    N steps leaves no trace of the steps it completed after its last line, so the truth's count
    is reduced by those (``lost_observable``); ``lost_steps_exact_share_raw`` compares with the
    truth as it is. With one line per step the two are the same.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Callable
from typing import Any

import polars as pl

from toranalyze.reconstruct.tables import BUCKETS

PHASES = ("t_last_progress", "t_first_error", "t_detected", "t_restart", "t_resumed", "t_caught_up")

ACCEPTANCE = {
    "tor_abs_err_median": 0.005,
    "tor_abs_err_max": 0.02,
    "incident_count_exact_share": 0.95,
    "root_cause_accuracy": 0.95,
    "phase_median_err_s": 60.0,
    "lost_steps_exact_share": 1.0,
    "slow_recall": 0.90,
    "slow_factor_within_10pct_share": 1.0,
    "slow_false_per_run": 0.1,
}


def _req(v: Any) -> float:
    """Seconds since the epoch of a time the truth always gives."""
    t = _t(v)
    if t is None:
        raise ValueError("truth record without a time where one is required")
    return t


def _t(v: Any) -> float | None:
    """Seconds since the epoch from an ISO string or a datetime; None stays None."""
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        d = v
    else:
        d = dt.datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.UTC)
    return d.timestamp()


def _match_jobs(tor: pl.DataFrame, truth_jobs: list[dict]) -> list[tuple[dict, str | None]]:
    est = [(r["job"], set(r["job_ids"] or [])) for r in tor.iter_rows(named=True)]
    out = []
    used: set[str] = set()
    for i, tj in enumerate(truth_jobs):
        ids = set(tj.get("job_ids") or [])
        best = None
        for job, eids in est:
            if job not in used and ids & eids:
                best = job
                break
        if best is None and len(truth_jobs) == len(est) and est[i][0] not in used:
            best = est[i][0]
        if best is not None:
            used.add(best)
        out.append((tj, best))
    return out


def _observable_last_step(ti: dict, tj: dict, log_interval: int) -> int:
    """The highest step of the interrupted attempt that its log shows: steps are logged every
    ``log_interval`` (and the last one), so steps completed after the last logged one are
    invisible; never below the step the attempt resumed from."""
    last = int(ti["last_step"])
    if log_interval <= 1 or last == tj.get("train_iters"):
        return last
    att = next((a for a in tj.get("attempts") or [] if a.get("attempt") == ti.get("attempt")), None)
    floor = int(att["resumed_from_step"]) if att else 0
    return max((last // log_interval) * log_interval, floor)


def _slow_observable(p: dict, log_interval: int, min_steps: int) -> bool:
    """Can the logs show this slow period? It needs ``min_steps`` slow steps in log rows that lie
    wholly inside it (a row averages the ``log_interval`` steps it covers), and at least two rows."""
    li = max(1, log_interval)
    first, last = int(p["first_step"]), int(p["last_step"])
    rows = max(0, last // li - (first - 1 + li - 1) // li)  # logged steps s with first <= s-li+1, s <= last
    return rows >= max(2 if li > 1 else 1, -(-min_steps // li))


def _tor_scores(row: dict[str, Any], tj: dict) -> dict[str, Any]:
    """The TOR and ledger errors of an estimated job row against its truth job."""
    total = sum(row[f"{b}_us"] for b in BUCKETS)
    return dict(
        tor_true=tj["tor"],
        tor_est=row["tor"],
        tor_abs_err=abs(row["tor"] - tj["tor"]) if row["tor"] is not None else None,
        ledger_sums=total == row["t_obs_us"],
        t_obs_err_s=(row["t_obs_us"] - tj["ledger_us"]["t_obs"]) / 1e6,
        bucket_err_s={b: (row[f"{b}_us"] - tj["ledger_us"][b]) / 1e6 for b in BUCKETS if b in tj["ledger_us"]},
        ideal_err_s=(row["ideal_step_time_s"] or 0) - tj["ideal_step_time_s"],
    )


def _nearest_incident(ti: dict, est: list[dict], used: set[int], match_tolerance_s: float) -> int | None:
    """The unmatched estimated incident whose last progress and detection times are closest to
    the truth incident's (summed distance within ``match_tolerance_s``); the first of equals."""
    tl, td = _req(ti["t_last_progress"]), _req(ti["t_detected"])
    best, best_d = None, None
    for k, e in enumerate(est):
        if k in used:
            continue
        d = abs((_t(e["t_last_progress"]) or 0) - tl) + abs((_t(e["t_detected"]) or 0) - td)
        if d <= match_tolerance_s and (best_d is None or d < best_d):
            best, best_d = k, d
    return best


def _phase_errors(e: dict, ti: dict) -> dict[str, float | None]:
    """Per phase both sides give: the distance in seconds; None when only one side gives it."""
    out: dict[str, float | None] = {}
    for p in PHASES:
        a, b = _t(e[p]), _t(ti.get(p))
        if a is not None and b is not None:
            out[p] = abs(a - b)
        elif (a is None) != (b is None):
            out[p] = None  # one side missing
    return out


def _matched_incident(m: dict[str, Any], ti: dict, e: dict, tj: dict, log_interval: int) -> None:
    """Fill ``m`` with the root cause, lost steps and phase errors of a matched incident."""
    m["root_est"] = e["root_cause"]
    m["root_ok"] = e["root_cause"] == ti["root_cause"]
    m["lost_true"], m["lost_est"] = ti["lost_steps"], e["lost_steps"]
    # What the logs can show: the steps lost after the last logged one are not in them.
    m["lost_observable"] = max(0, ti["lost_steps"] - (int(ti["last_step"]) -
                                                      _observable_last_step(ti, tj, log_interval)))
    m["phase_err_s"] = _phase_errors(e, ti)


def _incident_scores(
    t_inc: list[dict], est: list[dict], tj: dict, match_tolerance_s: float, log_interval: int
) -> tuple[list[dict[str, Any]], set[int]]:
    """Per truth incident, in order, its match among ``est`` and scores; and the matched indices."""
    used: set[int] = set()
    incs = []
    for ti in t_inc:
        best = _nearest_incident(ti, est, used, match_tolerance_s)
        m: dict[str, Any] = {"root_true": ti["root_cause"], "matched": best is not None}
        if best is not None:
            used.add(best)
            _matched_incident(m, ti, est[best], tj, log_interval)
        else:
            m["root_ok"] = False
        incs.append(m)
    return incs, used


def _slow_scores(
    t_slow: list[dict], sp: list[dict], log_interval: int, slow_min_steps: int
) -> tuple[list[dict[str, Any]], int]:
    """Per true slow period: found (the first estimated period overlapping it), factors and
    whether the logs can show it; and the number of estimated periods overlapping none."""
    found_est: set[int] = set()
    slows = []
    for p in t_slow:
        s0, s1 = _req(p["start"]), _req(p["end"])
        hit = None
        for k, e in enumerate(sp):
            if (_t(e["start"]) or 0) < s1 and (_t(e["end"]) or 0) > s0:
                hit = k if hit is None else hit
                found_est.add(k)
        ent: dict[str, Any] = {
            "found": hit is not None,
            "factor_true": p["factor"],
            "observable": _slow_observable(p, log_interval, slow_min_steps),
        }
        if hit is not None:
            ent["factor_est"] = sp[hit]["factor"]
            ent["factor_rel_err"] = abs(sp[hit]["factor"] - p["factor"]) / p["factor"]
        slows.append(ent)
    return slows, len(sp) - len(found_est)


def score_job(
    an: Any,
    tj: dict,
    job: str | None,
    *,
    match_tolerance_s: float = 3600.0,
    log_interval: int = 1,
    slow_min_steps: int = 5,
) -> dict[str, Any]:
    res: dict[str, Any] = {"job": tj.get("job"), "matched_job": job}
    t_inc = tj.get("incidents") or []
    t_slow = tj.get("slow_periods") or []
    if job is None:
        res.update(
            tor_true=tj.get("tor"), tor_est=None, tor_abs_err=None, ledger_sums=None, n_inc_true=len(t_inc),
            n_inc_est=0, incidents=[], slow=[{"found": False, "factor_rel_err": None} for _ in t_slow],
            slow_false=0,
        )
        return res
    res.update(_tor_scores(an.tor.filter(pl.col("job") == job).row(0, named=True), tj))
    est = an.incidents.filter(pl.col("job") == job).sort("t_last_progress").to_dicts()
    res["n_inc_true"], res["n_inc_est"] = len(t_inc), len(est)
    res["incidents"], used = _incident_scores(t_inc, est, tj, match_tolerance_s, log_interval)
    res["extra_incidents"] = [est[k]["root_cause"] for k in range(len(est)) if k not in used]
    sp = an.slow_periods.filter(pl.col("job") == job).to_dicts()
    res["slow"], res["slow_false"] = _slow_scores(t_slow, sp, log_interval, slow_min_steps)
    return res


def _log_intervals(truth: dict) -> dict[str, int]:
    """Job name -> logging interval from the truth's parameters (one job, or ``params.jobs``)."""
    params = truth.get("params") or {}
    jobs = params.get("jobs")
    per: list[Any] = jobs if isinstance(jobs, list) else [params]
    return {str(p.get("name")): int(p.get("log_interval") or 1) for p in per if isinstance(p, dict)}


def score_run(an: Any, truth: dict) -> list[dict[str, Any]]:
    """Per truth job: TOR error, ledger sum check, incident matching, slow-period matching."""
    li = _log_intervals(truth)
    return [
        score_job(an, tj, job, log_interval=li.get(str(tj.get("job")), 1))
        for tj, job in _match_jobs(an.tor, truth.get("jobs") or [])
    ]


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarize(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate per-job scores into the acceptance metrics (and pass/fail per bound)."""
    tor_errs = [j["tor_abs_err"] for j in jobs if j.get("tor_abs_err") is not None]
    incs = [m for j in jobs for m in j["incidents"]]
    phase: dict[str, list[float]] = {p: [] for p in PHASES}
    phase_missing = {p: 0 for p in PHASES}
    for m in incs:
        for p, v in (m.get("phase_err_s") or {}).items():
            if v is None:
                phase_missing[p] += 1
            else:
                phase[p].append(v)
    lost = [m for m in incs if m.get("matched")]
    all_slows = [s for j in jobs for s in j["slow"]]
    slows = [s for s in all_slows if s.get("observable", True)]
    found = [s for s in slows if s["found"]]
    out = {
        "jobs": len(jobs),
        "tor_abs_err_median": _median(tor_errs),
        "tor_abs_err_max": max(tor_errs) if tor_errs else None,
        "ledger_sums_exact": all(j.get("ledger_sums") for j in jobs),
        "incident_count_exact_share": (
            sum(j["n_inc_true"] == j["n_inc_est"] for j in jobs) / len(jobs) if jobs else None
        ),
        "incidents_true": len(incs),
        "incidents_matched": sum(1 for m in incs if m["matched"]),
        "root_cause_accuracy": sum(m["root_ok"] for m in incs) / len(incs) if incs else None,
        "phase_median_err_s": {p: _median(v) for p, v in phase.items()},
        "phase_missing": phase_missing,
        "lost_steps_exact_share": (
            sum(m.get("lost_observable", m["lost_true"]) == m["lost_est"] for m in lost) / len(lost) if lost else None
        ),
        "lost_steps_exact_share_raw": (
            sum(m["lost_true"] == m["lost_est"] for m in lost) / len(lost) if lost else None
        ),
        "slow_true": len(slows),
        "slow_unobservable": len(all_slows) - len(slows),
        "slow_recall_all": sum(s["found"] for s in all_slows) / len(all_slows) if all_slows else None,
        "slow_recall": len(found) / len(slows) if slows else None,
        "slow_factor_within_10pct_share": (
            sum(s["factor_rel_err"] <= 0.10 for s in found) / len(found) if found else None
        ),
        "slow_false_per_run": sum(j["slow_false"] for j in jobs) / len(jobs) if jobs else None,
        "confusions": _confusions(incs),
    }
    out["pass"] = _checks(out)
    return out


def _confusions(incs: list[dict]) -> dict[str, int]:
    c: dict[str, int] = {}
    for m in incs:
        if not m["root_ok"]:
            k = f"{m['root_true']} -> {m.get('root_est', 'unmatched')}"
            c[k] = c.get(k, 0) + 1
    return dict(sorted(c.items(), key=lambda kv: -kv[1]))


def _checks(s: dict[str, Any]) -> dict[str, bool | None]:
    def le(v, b):
        return None if v is None else v <= b

    def ge(v, b):
        return None if v is None else v >= b

    ph = [v for v in s["phase_median_err_s"].values() if v is not None]
    return {
        "tor_median": le(s["tor_abs_err_median"], ACCEPTANCE["tor_abs_err_median"]),
        "tor_max": le(s["tor_abs_err_max"], ACCEPTANCE["tor_abs_err_max"]),
        "incident_count": ge(s["incident_count_exact_share"], ACCEPTANCE["incident_count_exact_share"]),
        "root_cause": ge(s["root_cause_accuracy"], ACCEPTANCE["root_cause_accuracy"]),
        "phases": (max(ph) <= ACCEPTANCE["phase_median_err_s"]) if ph else None,
        "lost_steps": ge(s["lost_steps_exact_share"], ACCEPTANCE["lost_steps_exact_share"]),
        "slow_recall": ge(s["slow_recall"], ACCEPTANCE["slow_recall"]),
        "slow_factor": ge(s["slow_factor_within_10pct_share"], ACCEPTANCE["slow_factor_within_10pct_share"]),
        "slow_false": le(s["slow_false_per_run"], ACCEPTANCE["slow_false_per_run"]),
        "ledger_sums": s["ledger_sums_exact"],
    }


def format_summary(s: dict[str, Any]) -> str:
    def f(v, p=4):
        return "n/a" if v is None else (f"{v:.{p}f}" if isinstance(v, float) else str(v))

    lines = [
        f"jobs scored                     {s['jobs']}",
        f"|TOR est - true| median / max   {f(s['tor_abs_err_median'])} / {f(s['tor_abs_err_max'])}"
        f"   (bounds 0.005 / 0.02)",
        f"ledger sums exactly to T_obs    {s['ledger_sums_exact']}",
        f"incident count exact (share)    {f(s['incident_count_exact_share'], 3)}   (bound 0.95)",
        f"incidents true / matched        {s['incidents_true']} / {s['incidents_matched']}",
        f"root cause accuracy             {f(s['root_cause_accuracy'], 3)}   (bound 0.95)",
        f"lost steps exact (share)        {f(s['lost_steps_exact_share'], 3)}   (of the logged steps; "
        f"{f(s.get('lost_steps_exact_share_raw'), 3)} counting steps done after the last log line)",
        "phase boundary median error (s) "
        + ", ".join(f"{p[2:]}={f(v, 1)}" for p, v in s["phase_median_err_s"].items())
        + "   (bound 60)",
        f"slow periods true / recall      {s['slow_true']} / {f(s['slow_recall'], 3)}   (bound 0.90; "
        f"{s.get('slow_unobservable', 0)} more too short to show in the log rows, recall with them "
        f"{f(s.get('slow_recall_all'), 3)})",
        f"slow factor within 10% (share)  {f(s['slow_factor_within_10pct_share'], 3)}",
        f"false slow periods per run      {f(s['slow_false_per_run'], 3)}   (bound 0.1)",
    ]
    if s["confusions"]:
        lines.append("root-cause confusions           " + "; ".join(f"{k}: {v}" for k, v in s["confusions"].items()))
    lines.append("pass: " + ", ".join(f"{k}={v}" for k, v in s["pass"].items()))
    return "\n".join(lines)


_US = 1_000_000
_TIMELINE_COLUMNS = ("t", "kind", "source", "job_id", "step", "step_time_s", "loss", "duration_s", "state", "code",
                     "node", "rank", "failure_class", "file")


def _attempt_events(add: Callable[..., None], a: Any, slurm: str, train: str) -> None:
    """An attempt's scheduler start and end and its trainer records, in the order they are added."""
    import numpy as np

    jid = str(a.job_id)
    add(1, t=a.start, kind="job_start", source="slurm", job_id=jid, file=slurm)
    add(1, t=a.start, kind="init", source="trainer", file=train)
    if a.resumed_from > 0:
        add(1, t=a.first_step_start, kind="ckpt_load", source="trainer", step=a.resumed_from,
            duration_s=(a.first_step_start - a.load_begin) / _US, file=train)
    n = len(a.steps)
    if n:
        loss = np.full(n, 2.0)
        if a.nan_from_step is not None:
            loss[a.steps >= a.nan_from_step] = np.nan
        add(n, t=a.step_end.tolist(), kind="step", source="trainer", step=a.steps.tolist(),
            step_time_s=(a.step_dur / _US).tolist(), loss=loss.tolist(), file=train)
    for s in a.saves:
        add(1, t=s.begin, kind="ckpt_save_begin", source="trainer", step=s.step, file=train)
        if s.completed:
            add(1, t=s.end, kind="ckpt_save_end", source="trainer", step=s.step, file=train)
    for e in a.evals:
        add(1, t=e.begin, kind="eval_begin", source="trainer", step=e.step, file=train)
        if e.completed:
            add(1, t=e.end, kind="eval_end", source="trainer", step=e.step, file=train)
    add(1, t=a.end, kind="job_end", source="slurm", job_id=jid, state=a.exit_state, code=a.exit_code, file=slurm)


def _incident_events(add: Callable[..., None], inc: Any, train: str, kern: str) -> None:
    """An unplanned, non-numerics incident's classified error, and collective timeouts on two
    other ranks as its symptoms (unless it is one itself, or a hang)."""
    if inc.t_first_error is None or inc.planned or inc.root_cause == "numerics":
        return
    add(1, t=inc.t_first_error, kind="error", source="kernel", node=inc.node, rank=inc.rank,
        failure_class=inc.root_cause, file=kern)
    if inc.root_cause not in ("collective_timeout", "hang"):
        add(2, t=min(inc.t_detected, inc.t_first_error + 600 * _US), kind="error", source="nccl",
            rank=[0, 1], failure_class="collective_timeout", file=train)


def _as_events(cols: dict[str, list]) -> pl.DataFrame:
    """The columns as an event table in time order, with the event schema's columns and dtypes."""
    from toranalyze.schema import EVENT_SCHEMA

    df = pl.DataFrame(cols, schema_overrides={"t": pl.Int64, "rank": pl.Int32, "step": pl.Int64})
    df = df.with_columns(
        pl.col("t").cast(pl.Datetime("us", "UTC")).alias("ts"),
        pl.lit(False).alias("ts_inferred"),
        pl.when(pl.col("kind") == "error").then(pl.lit("error")).otherwise(pl.lit("info")).alias("severity"),
        pl.lit("").alias("message"),
        pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("line"),
    ).sort("t")
    out = []
    for name, dtype in EVENT_SCHEMA.items():
        out.append(pl.col(name).cast(dtype) if name in df.columns else pl.lit(None, dtype).alias(name))
    return df.select(out)


def events_from_timeline(tl: Any, job_dir: str = "sim") -> pl.DataFrame:
    """The events a perfect set of parsers would extract from a simulated timeline.

    Scores the reconstruction alone (no parsing in the loop): scheduler start/end per attempt,
    trainer init / checkpoint load / steps (NaN loss after a numerics onset) / saves / evals, and
    per incident one classified error at its first-error time on its node plus collective
    timeouts on two other ranks as symptoms.
    """
    import numpy as np

    cols: dict[str, list] = {k: [] for k in _TIMELINE_COLUMNS}

    def add(n: int, **kv: Any) -> None:
        for k in cols:
            v = kv.get(k)
            cols[k].extend(list(v) if isinstance(v, list | np.ndarray) else [v] * n)

    slurm, train, kern = f"{job_dir}/slurm.out", f"{job_dir}/train.log", f"{job_dir}/kern.log"
    for a in tl.attempts:
        _attempt_events(add, a, slurm, train)
    for inc in tl.incidents:
        _incident_events(add, inc, train, kern)
    return _as_events(cols)
