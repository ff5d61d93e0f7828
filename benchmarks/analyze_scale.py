"""How ``analyze`` scales with the length of a run: wall time and peak RSS per stage.

The run is ``benchmarks/report_30d.toml`` (2 s steps logged every step, about 1.5 failures an
hour) cut to each requested duration. For each size, in a fresh process: ingest, then
``analyze_events`` with every reconstruction function it calls timed, and the peak resident
memory of each (the kernel's high-water mark, reset before the function) printed. Memory and
time should grow in proportion to the days; a stage growing faster is a join that pairs rows it
should not (see reconstruct/intervals.py).

Usage: ``python benchmarks/analyze_scale.py [--durations 1d,3d,10d] [--out benchmarks/out/analyze_scale]``.
Linux only (reads /proc/self/status).
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STAGES = {
    "prepare": ["_prepared", "assign_jobs", "relative_times", "place_untimed_errors", "assign_attempts"],
    "analysis": ["attempt_resources"],
    "progress": ["step_rows", "attempt_table", "step_intervals", "place_steps", "checkpoint_intervals",
                 "eval_intervals", "mark_lost"],
    "slowness": ["detect", "in_periods", "suspects"],
    "incidents": ["build_incidents"],
    "ledger": ["compute"],
}


def _status(key: str) -> int:
    """A /proc/self/status field in MB (VmHWM: peak since the last reset; VmRSS: now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) // 1024
    return 0


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def _timed(stats: dict[str, list[float]], mod: Any, name: str) -> None:
    f = getattr(mod, name)

    @functools.wraps(f)
    def g(*a: Any, **k: Any) -> Any:
        _reset_peak()
        t = time.perf_counter()
        out = f(*a, **k)
        s = stats.setdefault(f"{mod.__name__.rsplit('.', 1)[-1]}.{name}", [0.0, 0.0])
        s[0] += time.perf_counter() - t
        s[1] = max(s[1], _status("VmHWM"))
        return out

    setattr(mod, name, g)


def measure(logs: Path) -> dict[str, Any]:
    """Ingest and analyse one run in this process; per-stage seconds and peak MB."""
    sys.path.insert(0, str(ROOT))
    from toranalyze.ingest.pipeline import IngestOptions, ingest
    from toranalyze.reconstruct import analysis, incidents, ledger, prepare, progress, slowness

    mods = {"prepare": prepare, "analysis": analysis, "progress": progress, "slowness": slowness,
            "incidents": incidents, "ledger": ledger}
    stats: dict[str, list[float]] = {}
    for mod, names in STAGES.items():
        for name in names:
            _timed(stats, mods[mod], name)
    _reset_peak()
    t = time.perf_counter()
    events = ingest((str(logs),), IngestOptions()).events
    res: dict[str, Any] = {"events": events.height, "ingest_s": time.perf_counter() - t, "ingest_mb": _status("VmHWM")}
    _reset_peak()
    t = time.perf_counter()
    an = analysis.analyze_events(events)
    res.update(analyze_s=time.perf_counter() - t, analyze_mb=_status("VmHWM"), incidents=an.incidents.height,
               stages={k: {"s": round(v[0], 2), "peak_mb": int(v[1])} for k, v in stats.items()})
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--durations", default="1d,3d,10d", help="run durations, comma-separated (2h, 3d, ...)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "analyze_scale")
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # the per-size child process
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    for dur in args.durations.split(","):
        logs = args.out / f"month-{dur}"
        if not (logs / "truth.json").exists():
            subprocess.run([sys.executable, "-m", "toranalyze", "simulate", "--config",
                            str(ROOT / "benchmarks" / "report_30d.toml"), "--duration", dur, "--out",
                            str(logs)], check=True, stdout=subprocess.DEVNULL)
        r = json.loads(subprocess.run([sys.executable, __file__, "--one", str(logs)], check=True,
                                      capture_output=True, text=True).stdout)
        print(f"{dur:>4}: {r['events']:>9,} events, {r['incidents']:>5} incidents | ingest {r['ingest_s']:6.1f} s "
              f"{r['ingest_mb']:5d} MB | analyze {r['analyze_s']:5.1f} s {r['analyze_mb']:5d} MB")
        for name, s in sorted(r["stages"].items(), key=lambda kv: -kv[1]["s"])[:6]:
            print(f"        {name:32s} {s['s']:6.2f} s  peak {s['peak_mb']:5d} MB")


if __name__ == "__main__":
    main()
