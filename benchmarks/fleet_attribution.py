"""Fleet attribution against the truth on ``fleet-wild`` fleets.

For each seed: simulate a ``fleet-wild`` fleet into a temporary directory, run ``toranalyze
fleet DIR -o STORE --no-report -q`` on it and compare the fleet tables with ``truth.json``:

- per failure class, the unexpected (unplanned) incidents found against the true ones; a class
  with at least 3 true incidents whose count is off by more than 1 is flagged;
- the jobs whose ``gpus`` is null although a record states their size (truth ``size_stated``);
- the fleet's exposure (running GPU-hours, docs/fleet.md: each attempt from its start to its end,
  or to its incident's first error, or to its last progress when the incident shows no error or
  is a hang) against the truth's, in per cent, over the jobs whose size some log states (the
  others' GPU-hours are unknown to any reader of the logs: the reports flag them);
- root-cause confusion: each true incident matched to the analyzer's incident of the same job
  nearest in last progress (within ``--match-window`` seconds), true → found, ``missed`` when
  none matches; found incidents that match no true one count as ``(none) → found``.

When the fleet command fails on the whole directory, every job is analysed on its own so that
one job the analyzer cannot read does not hide the others; the jobs that fail are listed with
the last line of their error and left out of every comparison.

    python benchmarks/fleet_attribution.py --seeds 101,102 --jobs 24 [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from toranalyze.fleet.store import Store
from toranalyze.taxonomy import PLANNED

ROOT = Path(__file__).resolve().parents[1]


def _epoch(x: Any) -> float | None:
    """Seconds since the epoch of a truth string (``…Z``) or a table datetime (naive = UTC)."""
    if x is None:
        return None
    if isinstance(x, str):
        x = dt.datetime.fromisoformat(x.replace("Z", "+00:00"))
    if x.tzinfo is None:
        x = x.replace(tzinfo=dt.UTC)
    return x.timestamp()


def _cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "toranalyze", *args], capture_output=True, text=True, env=env,
                          check=False)


def _last_error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [s for s in (proc.stderr or proc.stdout).splitlines() if s.strip() and not s.strip().startswith("^")]
    return lines[-1].strip() if lines else f"exit {proc.returncode}"


def _tables(store: Path) -> dict[str, pl.DataFrame]:
    tables = Store(store).read_tables()
    return {t: tables[t] for t in ("jobs", "incidents", "exposure")}


def analyse(fleet_dir: Path, work: Path, jobs: list[str]) -> tuple[dict[str, pl.DataFrame], dict[str, str]]:
    """The fleet tables of ``fleet_dir`` and the jobs the analyzer failed on (job -> error)."""
    store = work / "store"
    proc = _cli(["fleet", str(fleet_dir), "-o", str(store), "--no-report", "-q"])
    if proc.returncode == 0:
        return _tables(store), {}
    failed: dict[str, str] = {}
    parts: dict[str, list[pl.DataFrame]] = {}
    for job in jobs:
        js = work / f"store-{job}"
        p = _cli(["fleet", str(fleet_dir / job), "-o", str(js), "--no-report", "-q", "-j", "1"])
        if p.returncode != 0:
            failed[job] = _last_error(p)
            continue
        for name, df in _tables(js).items():
            parts.setdefault(name, []).append(df)
    return {k: pl.concat(v, how="diagonal_relaxed") for k, v in parts.items()}, failed


def truth_exposure_gpu_hours(job: dict[str, Any]) -> float:
    """Running GPU-hours of one truth job, as docs/fleet.md defines exposure."""
    inc_by_attempt = {i["attempt"]: i for i in job["incidents"]}
    total = 0.0
    for a in job["attempts"]:
        start = _epoch(a["start"])
        end = _epoch(a["end"])
        inc = inc_by_attempt.get(a["attempt"])
        if inc is not None:
            end = _epoch(inc["t_first_error"]) or _epoch(inc["t_last_progress"])
        if start is not None and end is not None and end > start:
            total += (end - start) / 3600.0 * job["n_gpus"]
    return total


def compare(truth: dict[str, Any], tables: dict[str, pl.DataFrame], failed: dict[str, str],
            window_s: float) -> dict[str, Any]:
    tjobs = [j for j in truth["jobs"] if j["job"] not in failed]
    # A run's id is its path as given to fleet ('fleet/wild-007', or 'wild-007' when analysed alone).
    by_run = pl.col("run").str.split("/").list.last().alias("run")
    inc = tables.get("incidents", pl.DataFrame())
    jobs_t = tables.get("jobs", pl.DataFrame())
    inc = inc.with_columns(by_run) if inc.height else inc
    jobs_t = jobs_t.with_columns(by_run) if jobs_t.height else jobs_t
    expo = tables.get("exposure", pl.DataFrame())
    true_cls: Counter[str] = Counter()
    found_cls: Counter[str] = Counter()
    confusion: Counter[tuple[str, str]] = Counter()
    for j in tjobs:
        for i in j["incidents"]:
            if not i["planned"]:
                true_cls[i["root_cause"]] += 1
        found = inc.filter(pl.col("run") == j["job"]).to_dicts() if inc.height else []
        for f in found:
            if not f["planned"] and f["root_cause"] not in PLANNED:
                found_cls[f["root_cause"]] += 1
        used: set[int] = set()
        for i in j["incidents"]:
            t = _epoch(i["t_last_progress"])
            best, best_d = None, window_s
            for k, f in enumerate(found):
                ft = _epoch(f["t_last_progress"]) or _epoch(f["t_detected"])
                if k in used or ft is None or t is None:
                    continue
                if abs(ft - t) <= best_d:
                    best, best_d = k, abs(ft - t)
            if best is None:
                confusion[(i["root_cause"], "missed")] += 1
            else:
                used.add(best)
                confusion[(i["root_cause"], str(found[best]["root_cause"]))] += 1
        for k, f in enumerate(found):
            if k not in used:
                confusion[("(none)", str(f["root_cause"]))] += 1
    classes = sorted(set(true_cls) | set(found_cls))
    per_class = [{"class": c, "true": true_cls[c], "found": found_cls[c],
                  "flag": true_cls[c] >= 3 and abs(found_cls[c] - true_cls[c]) > 1} for c in classes]
    null_gpus = []
    # the run's job named as the truth names it (a run may hold other users' jobs too)
    gpus_by_job = ({r["run"]: r["gpus"] for r in jobs_t.filter(pl.col("job") == pl.col("run")).select("run", "gpus")
                    .to_dicts()} if jobs_t.height else {})
    for j in tjobs:
        if j.get("size_stated", True) and gpus_by_job.get(j["job"]) is None:
            null_gpus.append(j["job"])
    # Exposure is compared over the jobs whose size a log states: the others' GPU-hours cannot be
    # known (the reports flag them), and their truth is left out with them.
    sized = [j for j in tjobs if j.get("size_stated", True)]
    t_exp = sum(truth_exposure_gpu_hours(j) for j in sized)
    expo = expo.with_columns(by_run) if expo.height else expo
    f_exp = (float(expo.filter(pl.col("run").is_in([j["job"] for j in sized]))["gpu_hours"].sum())
             if expo.height else 0.0)
    return {
        "jobs": len(truth["jobs"]),
        "analysed": len(tjobs),
        "failed": failed,
        "per_class": per_class,
        "size_stated": sum(1 for j in tjobs if j.get("size_stated", True)),
        "gpus_null_though_stated": null_gpus,
        "exposure_gpu_hours": {"true": round(t_exp, 2), "found": round(f_exp, 2),
                               "error_pct": round(100.0 * (f_exp - t_exp) / t_exp, 2) if t_exp else None},
        "confusion": [{"true": a, "found": b, "n": n} for (a, b), n in sorted(confusion.items())],
    }


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Sums over seeds (the exposure error is recomputed from the sums)."""
    true_c: Counter[str] = Counter()
    found_c: Counter[str] = Counter()
    conf: Counter[tuple[str, str]] = Counter()
    for r in results:
        for row in r["per_class"]:
            true_c[row["class"]] += row["true"]
            found_c[row["class"]] += row["found"]
        for row in r["confusion"]:
            conf[(row["true"], row["found"])] += row["n"]
    t = sum(r["exposure_gpu_hours"]["true"] for r in results)
    f = sum(r["exposure_gpu_hours"]["found"] for r in results)
    classes = sorted(set(true_c) | set(found_c))
    return {
        "jobs": sum(r["jobs"] for r in results),
        "analysed": sum(r["analysed"] for r in results),
        "per_class": [{"class": c, "true": true_c[c], "found": found_c[c],
                       "flag": true_c[c] >= 3 and abs(found_c[c] - true_c[c]) > 1} for c in classes],
        "size_stated": sum(r["size_stated"] for r in results),
        "gpus_null_though_stated": sum(len(r["gpus_null_though_stated"]) for r in results),
        "exposure_gpu_hours": {"true": round(t, 2), "found": round(f, 2),
                               "error_pct": round(100.0 * (f - t) / t, 2) if t else None},
        "confusion": [{"true": a, "found": b, "n": n} for (a, b), n in sorted(conf.items())],
    }


def markdown(seeds: list[int], results: list[dict[str, Any]], total: dict[str, Any]) -> str:
    out = [f"## fleet-wild attribution (seeds {', '.join(map(str, seeds))})", ""]
    out += [f"Jobs: {total['jobs']}, analysed: {total['analysed']}", ""]
    for s, r in zip(seeds, results, strict=True):
        for job, err in sorted(r["failed"].items()):
            out.append(f"- seed {s}, {job}: the analyzer failed: `{err}`")
    out += ["", "| class | true | found | flag |", "| --- | ---: | ---: | --- |"]
    for row in total["per_class"]:
        out.append(f"| {row['class']} | {row['true']} | {row['found']} | {'**off**' if row['flag'] else ''} |")
    e = total["exposure_gpu_hours"]
    out += ["", "| measure | value |", "| --- | --- |",
            f"| jobs with a stated size | {total['size_stated']} |",
            f"| of which `gpus` is null | {total['gpus_null_though_stated']} |",
            f"| exposure GPU-h (jobs of stated size), truth | {e['true']} |",
            f"| exposure GPU-h (jobs of stated size), found | {e['found']} |",
            f"| exposure error | {e['error_pct']} % |"]
    wrong = [c for c in total["confusion"] if c["true"] != c["found"]]
    out += ["", "| true → found | n |", "| --- | ---: |"]
    for c in sorted(wrong, key=lambda c: (-c["n"], c["true"], c["found"])):
        out.append(f"| {c['true']} → {c['found']} | {c['n']} |")
    right = sum(c["n"] for c in total["confusion"] if c["true"] == c["found"])
    out += ["", f"Matched with the right root cause: {right}."]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="101,102")
    ap.add_argument("--jobs", type=int, default=24)
    ap.add_argument("--match-window", type=float, default=900.0, help="seconds (default 900)")
    ap.add_argument("--json", dest="json_out", type=Path)
    ap.add_argument("--keep", type=Path, help="keep the fleets and stores under this directory")
    ap.add_argument("--config", type=Path, help="a simulator configuration instead of the fleet-wild preset "
                    "(e.g. benchmarks/fleet_wild_hardware.toml: node-level failures ten times as frequent)")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    results = []
    with tempfile.TemporaryDirectory(prefix="fleet-attr-") as tmp:
        base = args.keep if args.keep is not None else Path(tmp)
        for seed in seeds:
            work = base / f"seed-{seed}"
            fleet_dir = work / "fleet"
            source = ["--config", str(args.config)] if args.config else ["--preset", "fleet-wild"]
            proc = _cli(["simulate", "--seed", str(seed), *source, "--jobs", str(args.jobs), "--out", str(fleet_dir)])
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return 1
            truth = json.loads((fleet_dir / "truth.json").read_text(encoding="utf-8"))
            tables, failed = analyse(fleet_dir, work, [j["job"] for j in truth["jobs"]])
            results.append(compare(truth, tables, failed, args.match_window))
    total = merge(results)
    print(markdown(seeds, results, total))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps({"seeds": seeds, "per_seed": results, "total": total}, indent=1) + "\n",
                                 encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
