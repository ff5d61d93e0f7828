"""What a fleet costs per job: runs in batches against runs one at a time, and against ingest.

Simulates ``--runs`` jobs of the ``fleet`` preset (``--duration`` each, one folder per run) and
measures, each step in a fresh child process (CPU = user + system of the child and its workers,
peak RSS = the largest child's high-water mark):

* ``batched``: ``toranalyze fleet DIR -o STORE --no-report -j J`` (runs in batches, fleet/batch.py);
* ``alone``: the same build with every run analysed on its own (the pipeline before batches);
* ``ingest``: ``ingest`` of the same files (no analysis, nothing written): the floor a fleet
  cannot go under, and ``batched / ingest`` the overhead of everything else;
* ``ray`` (with ``--ray``): the batched build as Ray tasks with 1 and then 2 workers.

The ratios are taken within one invocation, so they hold on any machine; the seconds are this
machine's. The alone step is skipped with ``--no-alone`` (it takes about 0.4 CPU-s a job).

    python benchmarks/fleet_scale.py --runs 400 --jobs 2 [--ray] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r'''
import json, os, resource, sys, time
from pathlib import Path
step, runs_dir, store, jobs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t0 = time.perf_counter()
if step == "ingest":
    from toranalyze.fleet.runs import find_runs, run_files
    from toranalyze.ingest.pipeline import ingest
    files = [f for r in find_runs([runs_dir]) for f in run_files(r)]
    n = ingest(files).events.height
else:
    from toranalyze.fleet import build as b
    from toranalyze.fleet.pipeline import OutputOptions, RunOptions
    from toranalyze.ingest.pipeline import Workers
    if step == "alone":
        b.BATCH_RUNS = 1  # a batch of one run is analysed on its own
    engine = "ray" if step.startswith("ray") else "local"
    os.environ["RAY_DISABLE_USAGE_STATS"] = "1"
    options = RunOptions(output=OutputOptions(report=False))
    r = b.build([runs_dir], Path(store), options, Workers(jobs=jobs, engine=engine))
    n = len(r.runs)
wall = time.perf_counter() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": wall, "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                  "peak_rss_mb": max(me.ru_maxrss, kids.ru_maxrss) / 1024, "n": n}))
'''


def _step(step: str, runs_dir: Path, work: Path, jobs: int) -> dict[str, Any]:
    store = work / f"store-{step}"
    out = subprocess.run([sys.executable, "-c", _CHILD, step, str(runs_dir), str(store), str(jobs)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _simulate(out: Path, runs: int, duration: str, seed: int) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "toranalyze", "simulate", "--preset", "fleet", "--jobs", str(runs),
                    "--duration", duration, "--seed", str(seed), "--out", str(out)], check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--duration", default="30m")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2, help="workers of the batched and alone builds")
    ap.add_argument("--no-alone", action="store_true")
    ap.add_argument("--ray", action="store_true", help="also the batched build as Ray tasks, 1 then 2 workers")
    ap.add_argument("--work", type=Path, help="keep the runs and stores here (default: a temporary folder)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        runs_dir = work / "runs"
        sim_s = 0.0 if runs_dir.is_dir() else _simulate(runs_dir, args.runs, args.duration, args.seed)
        size = sum(p.stat().st_size for p in runs_dir.rglob("*") if p.is_file())
        res: dict[str, Any] = {"runs": args.runs, "duration": args.duration, "bytes": size, "simulate_s": sim_s}
        steps = ["ingest", "batched"] + ([] if args.no_alone else ["alone"])
        for step in steps:
            res[step] = _step(step, runs_dir, work, args.jobs)
            print(f"{step:8s} {res[step]['wall_s']:7.1f} s wall {res[step]['cpu_s']:7.1f} CPU-s "
                  f"{1000 * res[step]['cpu_s'] / args.runs:6.1f} CPU-ms/job  peak {res[step]['peak_rss_mb']:.0f} MB",
                  flush=True)
        if args.ray:
            for n in (1, 2):
                res[f"ray{n}"] = _step(f"ray{n}", runs_dir, work, n)
                print(f"ray x{n}  {res[f'ray{n}']['wall_s']:7.1f} s wall", flush=True)
            res["ray_speedup"] = res["ray1"]["wall_s"] / res["ray2"]["wall_s"]
        res["batched_cpu_ms_per_job"] = 1000 * res["batched"]["cpu_s"] / args.runs
        res["batched_over_ingest_wall"] = res["batched"]["wall_s"] / res["ingest"]["wall_s"]
        if "alone" in res:
            res["alone_over_batched_cpu"] = res["alone"]["cpu_s"] / res["batched"]["cpu_s"]
        for k in ("batched_cpu_ms_per_job", "batched_over_ingest_wall", "alone_over_batched_cpu", "ray_speedup"):
            if k in res:
                print(f"{k}: {res[k]:.2f}")
        if args.json:
            args.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
