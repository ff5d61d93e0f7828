"""The ground truth of simulated runs (``truth.json``), built from timelines."""

from __future__ import annotations

import json
from typing import Any

from toranalyze.simulate.timeline import US, Attempt, Incident, SlowPeriod, Timeline, iso_z

SCHEMA_VERSION = 1


def _s(us: int | None) -> float | None:
    return None if us is None else round(us / US, 6)


def attempt_id(tl: Timeline, a: Any) -> str:
    """The scheduler id of an attempt: the Slurm job id, or the PyTorchJob's name (every
    Kubernetes record of the job names it; pods keep their names across restarts)."""
    return tl.config.name if tl.config.flavor == "kubernetes" else str(a.job_id)


def _attempt_truth(tl: Timeline, a: Attempt) -> dict[str, Any]:
    return {
        "attempt": a.index,
        "job_id": attempt_id(tl, a),
        "nodes": list(a.nodes),
        "start": iso_z(a.start),
        "end": iso_z(a.end),
        "exit_state": a.exit_state,
        "exit_code": a.exit_code,
        "first_step": a.first_step,
        "last_step": a.last_step,
        "resumed_from_step": a.resumed_from,
        "first_step_start": iso_z(a.first_step_start),
        "checkpoints_saved": [s.step for s in a.saves if s.completed],
    }


def _implicated(tl: Timeline, inc: Incident) -> tuple[list[str], list[int]]:
    """(nodes, ranks) an incident implicates: a whole node's ranks when the node itself went."""
    if inc.node is None:
        return [], []
    if inc.root_cause in ("node_failure", "host_hardware", "oom_host"):
        G = tl.config.gpus_per_node
        j = tl.attempts[inc.attempt].nodes.index(inc.node)
        return [inc.node], list(range(j * G, (j + 1) * G))
    return [inc.node], ([inc.rank] if inc.rank is not None else [])


def _incident_truth(tl: Timeline, inc: Incident) -> dict[str, Any]:
    nodes, ranks = _implicated(tl, inc)
    return {
        "attempt": inc.attempt,
        "job_id": attempt_id(tl, tl.attempts[inc.attempt]),
        "root_cause": inc.root_cause,
        "planned": inc.planned,
        "nodes": nodes,
        "ranks": ranks,
        "gpu": inc.gpu,
        "t_onset": iso_z(inc.t_fail),
        "t_last_progress": iso_z(inc.t_last_progress),
        "t_first_error": iso_z(inc.t_first_error),
        "t_detected": iso_z(inc.t_detected),
        "t_restart": iso_z(inc.t_restart),
        "t_resumed": iso_z(inc.t_resumed),
        "t_caught_up": iso_z(inc.t_caught_up),
        "last_step": inc.last_step,
        "lost_steps": inc.lost_steps,
        "lost_time_s": _s(inc.lost_time_us),
        "downtime_s": _s((inc.t_resumed if inc.t_resumed is not None else tl.t_end) - inc.t_last_progress),
        "killed_by_walltime": inc.killed_by_walltime,
        "during_checkpoint_save": inc.in_save,
    }


def _slow_truth(p: SlowPeriod) -> dict[str, Any]:
    return {
        "attempt": p.attempt,
        "start": iso_z(p.start),
        "end": iso_z(p.end),
        "factor": round(p.factor, 4),
        "node": p.node,
        "rank": p.rank,
        "first_step": p.first_step,
        "last_step": p.last_step,
    }


def job_truth(tl: Timeline) -> dict[str, Any]:
    cfg = tl.config
    job_ids: list[str] = []
    for a in tl.attempts:
        if attempt_id(tl, a) not in job_ids:
            job_ids.append(attempt_id(tl, a))
    doc = {
        "job": cfg.name,
        "job_ids": job_ids,
        "flavor": cfg.flavor,
        "n_nodes": cfg.nodes,
        "gpus_per_node": cfg.gpus_per_node,
        "n_gpus": cfg.n_gpus,
        "t_start": iso_z(tl.t_start),
        "t_end": iso_z(tl.t_end),
        "ideal_step_time_s": _s(tl.ideal_step_us),
        "train_iters": cfg.train_iters,
        "attempts": [_attempt_truth(tl, a) for a in tl.attempts],
        "incidents": [_incident_truth(tl, inc) for inc in tl.incidents],
        "slow_periods": [_slow_truth(p) for p in tl.slow_periods],
        "clock_skew_s": {h: _s(v) for h, v in sorted(tl.clock_skew_us.items())},
        "ledger_us": dict(tl.ledger_us),
        "tor": round(tl.tor, 6),
    }
    if cfg.bad_nodes:  # only when planted: truth files without bad nodes stay as they were
        doc["bad_nodes"] = {h: m for h, m in cfg.bad_nodes}
    return doc


def truth_document(seed: int, preset: str | None, params: dict[str, Any], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "seed": seed, "preset": preset, "params": params, "jobs": jobs}


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=False, ensure_ascii=True) + "\n"
