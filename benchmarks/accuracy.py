"""Accuracy of the reconstruction against simulator truth: the acceptance table.

Two modes:

* ``e2e`` (default): ``toranalyze simulate --seed N --preset P --out DIR`` writes logs and
  ``truth.json``; ``toranalyze.pipeline.ingest`` parses them; ``analyze_events`` reconstructs;
  ``toranalyze.score`` compares. This measures parsers and reconstruction together.
* ``direct``: the simulator's timeline is turned into the events perfect parsers would emit
  (``score.events_from_timeline``), so the reconstruction alone is measured.

Usage::

    python benchmarks/accuracy.py --runs 60 --presets small,llama3-like,fleet,exp-closed-form
    python benchmarks/accuracy.py --mode direct --runs 100
    python benchmarks/accuracy.py --json out.json   # the per-job scores too
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from toranalyze.analysis import AnalysisOptions, analyze_events
from toranalyze.score import events_from_timeline, format_summary, score_run, summarize


def run_direct(preset: str, seed: int) -> list[dict]:
    from toranalyze.model import config_from_dict, load_preset
    from toranalyze.simulate.timeline import simulate_timeline
    from toranalyze.simulate.truth import job_truth

    tl = simulate_timeline(config_from_dict(load_preset(preset)), seed=seed)
    an = analyze_events(events_from_timeline(tl), AnalysisOptions())
    return score_run(an, {"jobs": [job_truth(tl)]})


def run_e2e(preset: str, seed: int, work: Path) -> list[dict]:
    from toranalyze.pipeline import ingest

    out = work / f"{preset}-{seed}"
    subprocess.run(
        [sys.executable, "-m", "toranalyze", "simulate", "--seed", str(seed), "--preset", preset, "--out", str(out)],
        check=True,
        capture_output=True,
    )
    truth = json.loads((out / "truth.json").read_text())
    logs = [str(p) for p in sorted(out.iterdir()) if p.name != "truth.json"]
    res = ingest(logs)
    an = analyze_events(res.events, AnalysisOptions())
    return score_run(an, truth)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("e2e", "direct"), default="e2e")
    ap.add_argument("--runs", type=int, default=60, help="simulated runs in total (spread over the presets)")
    ap.add_argument("--presets", default="small,llama3-like,fleet,exp-closed-form")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--json", help="write the summary and per-job scores here")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per job")
    args = ap.parse_args(argv)
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    jobs: list[dict] = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.runs):
            preset = presets[k % len(presets)]
            seed = args.first_seed + k // len(presets)
            sc = run_direct(preset, seed) if args.mode == "direct" else run_e2e(preset, seed, Path(tmp))
            for j in sc:
                j["preset"], j["seed"] = preset, seed
                if args.verbose:
                    bad = [(m["root_true"], m.get("root_est")) for m in j["incidents"] if not m["root_ok"]]
                    print(
                        f"{preset:16s} seed={seed:<3d} tor true={j['tor_true']:.4f} est={j.get('tor_est') or 0:.4f} "
                        f"incidents {j['n_inc_true']}/{j['n_inc_est']} wrong={bad} extra={j.get('extra_incidents')}"
                    )
            jobs += sc
    s = summarize(jobs)
    print(f"mode={args.mode} runs={args.runs} presets={','.join(presets)} ({time.time() - t0:.0f} s)")
    print(format_summary(s))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "jobs": jobs}, indent=1, default=str))
    return 0 if all(v is not False for v in s["pass"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
