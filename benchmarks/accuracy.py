"""Accuracy of the reconstruction against simulator truth: the acceptance table.

Two modes:

* ``e2e`` (default): the simulator writes a run's logs and ``truth.json`` (the code path of
  ``toranalyze simulate``); ``toranalyze.ingest.pipeline.ingest`` parses them with the real parsers;
  ``analyze_events`` reconstructs; ``toranalyze.simulate.score`` compares. Parsers and reconstruction
  are measured together.
* ``direct``: the simulator's timeline is turned into the events perfect parsers would emit
  (``score.events_from_timeline``), so the reconstruction alone is measured.

Runs are drawn from *scenarios* (``--scenarios``): the packaged presets by name (``small``,
``llama3-like``, ``fleet``, ``exp-closed-form``: full size, slow end to end) and compact
variants sized for a routine end-to-end check (see ``SCENARIOS``). Together the compact ones
cover every simulated failure class (scripted by seed), fail-slow episodes, planned stops,
hangs (cancelled and killed by the wall-time limit), NaN rollbacks, one id per attempt and
requeue under one id, logging every step and every N steps, multi-job fleets, the closed-form
setting, and the Kubernetes flavour when the simulator writes it (skipped, and said, otherwise).

Usage::

    python benchmarks/accuracy.py --runs 54                      # compact e2e suite
    python benchmarks/accuracy.py --scenarios small --runs 4     # the full small preset
    python benchmarks/accuracy.py --mode direct --runs 100 --scenarios small,llama3-like,fleet,exp-closed-form
    python benchmarks/accuracy.py --keep runs/acc --json out.json -v   # keep logs, per-job scores
    python benchmarks/accuracy.py --keep runs/acc --reuse          # re-score kept runs (no simulate/ingest)
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from toranalyze.reconstruct.analysis import AnalysisOptions, analyze_events
from toranalyze.simulate.score import events_from_timeline, format_summary, score_run, summarize

# Every class the simulator can script, in the order compact runs cycle through them.
CLASSES = (
    "gpu_hardware",
    "network",
    "oom_host",
    "software",
    "preemption",
    "hang",
    "numerics",
    "oom_gpu",
    "gpu_memory",
    "gpu_interconnect",
    "collective_timeout",
    "host_hardware",
    "node_failure",
    "storage",
    "maintenance",
    "user_cancel",
    "unknown",
)


def _preset(name: str) -> dict[str, Any]:
    from toranalyze.model import load_preset

    return copy.deepcopy(load_preset(name))


def _script(seed: int, k: int, at_min: list[float], offset: int = 0) -> list[dict[str, str]]:
    """``k`` scripted incidents at the given up-times (minutes), classes cycling with the seed."""
    out = []
    for i in range(k):
        cls = CLASSES[(seed * k + i + offset) % len(CLASSES)]
        out.append({"at": f"{at_min[i]:.1f}m", "class": cls})
    return out


def compact(seed: int) -> dict[str, Any]:
    """2 nodes, 80 min of 5 s steps logged every step, three scripted incidents and fail-slow."""
    d = _preset("small")
    r = d["run"]
    r.update(
        name="compact",
        nodes=2,
        spare_nodes=4,
        duration="80m",
        ckpt_interval_steps=60,
        eval_interval_steps=240,
        queue_wait=[20.0, 120.0],
        watchdog_timeout="5m",
        nan_run_on=["3m", "6m"],
        slow_rate_per_hour=0.8,
        slow_duration=["4m", "9m"],
        slow_factor=[1.2, 1.5],
        nccl_chatter=4,
    )
    d["detection"] = {"hang": ["12m", "20m"]}
    d["script"] = _script(seed, 3, [14.0 + seed % 5, 36.0 + seed % 7, 58.0 + seed % 4])
    return d


def compact_requeue(seed: int) -> dict[str, Any]:
    """One Slurm id requeued, a line every 10 steps, a 35 min wall-time limit (walltime stops, and
    hangs the limit kills), two scripted incidents."""
    d = compact(seed)
    r = d["run"]
    r.update(name="compact-requeue", job_id_mode="requeue", log_interval=10, ckpt_interval_steps=50,
             eval_interval_steps=0, walltime="35m", duration="70m")
    d["detection"] = {"hang": ["25m", "40m"]}
    d["script"] = _script(seed, 2, [20.0 + seed % 6, 47.0 + seed % 5], offset=5)
    return d


def fleet_mini(seed: int) -> dict[str, Any]:
    """Three jobs of 1-4 nodes, 40-100 min each, with the fleet's failure mix at 25x the rate."""
    d = _preset("fleet")
    d["fleet"].update(jobs=3, nodes=[1, 2, 4], duration=["40m", "100m"])
    d["run"].update(watchdog_timeout="6m", walltime="75m", slow_rate_per_hour=0.4, slow_duration=["5m", "12m"],
                    slow_factor=[1.2, 1.5], nccl_chatter=3)
    for f in d.get("failures", {}).values():
        f["rate"] = float(f["rate"]) * 25
    d["detection"] = {"hang": ["15m", "30m"]}
    return d


def llama_mini(seed: int) -> dict[str, Any]:
    """The Llama-3 mix on 4 nodes for 2 h of 8 s steps (GPU failure rates 2000x, maintenance 15x), slow
    episodes."""
    d = _preset("llama3-like")
    d["run"].update(nodes=4, spare_nodes=6, duration="2h", ckpt_interval_steps=100, eval_interval_steps=400,
                    startup=[60.0, 180.0], ckpt_load=[30.0, 90.0], queue_wait=[30.0, 300.0],
                    watchdog_timeout="8m", slow_rate_per_hour=0.5, slow_duration=["8m", "20m"], nccl_chatter=3)
    for f in d.get("failures", {}).values():
        f["rate"] = float(f["rate"]) * (2000 if f.get("per") == "gpu_hour" else 15)
    return d


def closed_form_mini(seed: int) -> dict[str, Any]:
    """The closed-form setting (exponential failures, fixed repair) over 10 h of 60 s steps."""
    d = _preset("exp-closed-form")
    d["run"].update(duration="10h")
    return d


def compact_k8s(seed: int) -> dict[str, Any]:
    """The compact run in the Kubernetes flavour."""
    d = compact(seed)
    d["run"].update(name="compact-k8s", flavor="kubernetes")
    return d


SCENARIOS = {
    "compact": compact,
    "compact-requeue": compact_requeue,
    "fleet-mini": fleet_mini,
    "llama-mini": llama_mini,
    "closed-form-mini": closed_form_mini,
    "compact-k8s": compact_k8s,
}
DEFAULT_SCENARIOS = "compact,compact-requeue,fleet-mini,llama-mini,closed-form-mini,compact-k8s"
PRESETS = ("small", "llama3-like", "fleet", "exp-closed-form")


def scenario_data(name: str, seed: int) -> dict[str, Any]:
    if name in SCENARIOS:
        return SCENARIOS[name](seed)
    if name in PRESETS:
        return _preset(name)
    raise SystemExit(f"unknown scenario {name!r}; known: {', '.join([*SCENARIOS, *PRESETS])}")


class Unsupported(Exception):
    """The simulator cannot write this scenario (yet)."""


def run_direct(name: str, seed: int) -> list[dict]:
    import numpy as np

    from toranalyze.simulate.command import job_configs
    from toranalyze.simulate.timeline import simulate_timeline
    from toranalyze.simulate.truth import job_truth

    jobs = []
    for k, cfg in enumerate(job_configs(scenario_data(name, seed), seed)):
        tl = simulate_timeline(cfg, rng=np.random.default_rng([seed & 0xFFFFFFFF, k]))
        an = analyze_events(events_from_timeline(tl, job_dir=f"sim/{cfg.name}"), AnalysisOptions())
        jobs += score_run(an, {"jobs": [job_truth(tl)]})
    return jobs


def simulate_and_ingest(name: str, seed: int, out: Path, reuse: bool = False) -> tuple[Any, dict]:
    """Write the run's logs (unless kept from before), parse them; returns (events, truth)."""
    import polars as pl

    from toranalyze.ingest.pipeline import ingest
    from toranalyze.simulate.command import run_simulation

    cache = out / "events.parquet"
    if reuse and cache.exists() and (out / "truth.json").exists():
        return pl.read_parquet(cache), json.loads((out / "truth.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    try:
        run_simulation(out, seed, scenario_data(name, seed), name if name in PRESETS else None)
    except ValueError as e:
        if "not written yet" in str(e):
            raise Unsupported(str(e)) from e
        raise
    truth = json.loads((out / "truth.json").read_text())
    logs = [str(p) for p in sorted(out.iterdir()) if p.name not in ("truth.json", "events.parquet")]
    events = ingest(logs).events
    events.write_parquet(cache)
    return events, truth


def run_e2e(name: str, seed: int, work: Path, reuse: bool = False) -> list[dict]:
    events, truth = simulate_and_ingest(name, seed, work / f"{name}-{seed}", reuse)
    return score_run(analyze_events(events, AnalysisOptions()), truth)


def evaluate(
    scenarios: list[str],
    runs: int,
    mode: str = "e2e",
    first_seed: int = 0,
    keep: Path | None = None,
    reuse: bool = False,
    verbose: bool = False,
) -> tuple[dict, list[dict], list[str]]:
    """Score ``runs`` runs spread over the scenarios; returns (summary, per-job scores, notes).

    A scenario the simulator cannot write is skipped with a note and its runs go to the others.
    """
    jobs: list[dict] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = keep or Path(tmp)
        live = list(scenarios)
        seeds = {name: first_seed for name in scenarios}
        k = done = 0
        while done < runs and live:
            name = live[k % len(live)]
            seed = seeds[name]
            seeds[name] += 1
            k += 1
            t0 = time.time()
            try:
                sc = run_direct(name, seed) if mode == "direct" else run_e2e(name, seed, work, reuse)
            except Unsupported as e:
                live.remove(name)
                notes.append(f"scenario {name} skipped: {e}")
                continue
            done += 1
            for j in sc:
                j["preset"], j["seed"] = name, seed
                if verbose:
                    bad = [(m["root_true"], m.get("root_est")) for m in j["incidents"] if not m["root_ok"]]
                    err = j.get("tor_abs_err")
                    print(
                        f"{name:16s} seed={seed:<3d} tor true={j['tor_true']:.4f} est={j.get('tor_est') or 0:.4f} "
                        f"err={err if err is None else round(err, 4)} incidents {j['n_inc_true']}/{j['n_inc_est']} "
                        f"wrong={bad} extra={j.get('extra_incidents')} slow={len(j['slow'])}/"
                        f"{sum(s['found'] for s in j['slow'])}+{j['slow_false']} ({time.time() - t0:.0f} s)",
                        flush=True,
                    )
            jobs += sc
    return summarize(jobs), jobs, notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("e2e", "direct"), default="e2e")
    ap.add_argument("--runs", type=int, default=54, help="simulated runs in total (spread over the scenarios)")
    ap.add_argument("--scenarios", "--presets", dest="scenarios", default=DEFAULT_SCENARIOS,
                    help=f"comma-separated: {', '.join([*SCENARIOS, *PRESETS])}")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, help="keep the simulated logs (and parsed events) in this directory")
    ap.add_argument("--reuse", action="store_true", help="with --keep: reuse the events parsed before")
    ap.add_argument("--json", help="write the summary and per-job scores here")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per job")
    args = ap.parse_args(argv)
    scenarios = [p.strip() for p in args.scenarios.split(",") if p.strip()]
    t0 = time.time()
    s, jobs, notes = evaluate(scenarios, args.runs, args.mode, args.first_seed, args.keep, args.reuse, args.verbose)
    print(f"mode={args.mode} runs={args.runs} scenarios={','.join(scenarios)} ({time.time() - t0:.0f} s)")
    for n in notes:
        print(n)
    print(format_summary(s))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "notes": notes, "jobs": jobs}, indent=1, default=str))
    return 0 if all(v is not False for v in s["pass"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
