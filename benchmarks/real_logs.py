"""Coverage and failure recognition on a folder of published real logs.

Usage: python benchmarks/real_logs.py REAL_LOGS_DIR [--markdown]

REAL_LOGS_DIR holds the real logs in family sub-folders with an INDEX.md whose table labels
each file (the layout of the public collection this project tests against). For each labelled
file the script ingests it alone, then reports: lines, coverage, the failure classes of its
events, the root causes the analysis derives, and whether the expected class was found.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

import polars as pl

from toranalyze.ingest.coverage import uncovered_lines
from toranalyze.ingest.pipeline import IngestOptions, ingest
from toranalyze.ingest.registry import default_registry
from toranalyze.ingest.streams import read_head
from toranalyze.reconstruct.analysis import AnalysisOptions, analyze_events

# Publisher's label (first word of the INDEX "label" column) -> failure classes that count as
# recognising it. None: the label is not a failure; the check is that no failure is claimed.
EXPECTED: dict[str, set[str] | None] = {
    "network-ib": {"network"},
    "network-socket": {"network"},
    "software-exception": {"software"},
    "cancelled-user": {"user_cancel"},
    "cancelled-timelimit": {"walltime"},
    "gpu-hardware": {"gpu_hardware", "gpu_memory"},
    "hang": {"hang"},
    "loss-spike-recovered": None,
    "resume": None,
    "straggler": {"fail_slow"},
    "success": None,
    "nan-divergence": {"numerics"},
    "node-failure": {"node_failure"},
    "storage-io": {"storage", "hang"},
    "whole-run": None,
}


def read_index(root: Path) -> list[tuple[str, str, str]]:
    """(path, family, label) for every row of INDEX.md's first table."""
    rows = []
    for line in (root / "INDEX.md").read_text().splitlines():
        m = re.match(r"\|\s*`([^`]+)`\s*\|[^|]*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|", line)
        if not m:
            continue
        path = m.group(1)
        if path.startswith("timelines/"):  # the whole-run table has other columns
            rows.append((path, "timeline", "whole-run"))
        else:
            rows.append((path, m.group(2), m.group(3)))
    return rows


def analyse_file(path: Path) -> dict:
    result = ingest([str(path)], IngestOptions())
    registry = default_registry()
    mode, parsers = registry.choose(str(path), read_head(str(path)).decode("utf-8", "replace"))
    missed = uncovered_lines(str(path), parsers).height if mode == "text" else 0
    report = result.files[0]
    ev = result.events
    classes = sorted(set(ev["failure_class"].drop_nulls().to_list()))
    roots: list[str] = []
    slow = 0
    if ev.height:
        analysis = analyze_events(ev, AnalysisOptions())
        roots = analysis.incidents["root_cause"].to_list() if analysis.incidents.height else []
        slow = analysis.slow_periods.height
    return {
        "lines": report.lines,
        "missed": missed,
        "covered": report.covered,
        "error": report.error,
        "classes": classes,
        "roots": roots,
        "slow": slow,
        "ckpt_load": int(ev.filter(pl.col("kind") == "ckpt_load").height),
        "first_step": ev.filter(pl.col("kind") == "step")["step"].min(),
    }


def verdict(label: str, info: dict) -> str:
    key = label.split()[0]
    expected = EXPECTED.get(key, "?")
    if expected == "?":
        return "no expectation for this label"
    found = set(info["classes"]) | set(info["roots"]) | ({"fail_slow"} if info["slow"] else set())
    if expected is None:
        if key == "resume":
            if info["ckpt_load"]:
                return "hit (checkpoint load found)"
            return f"n/a: no load line in the excerpt; steps from {info['first_step']} parsed"
        unplanned = [r for r in info["roots"] if r not in {"walltime", "user_cancel", "preemption", "scheduling"}]
        return "hit (no failure claimed)" if not unplanned else f"false alarm: {unplanned}"
    hit = expected & found
    return f"hit ({', '.join(sorted(hit))})" if hit else f"miss (expected {'/'.join(sorted(expected))})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    args = ap.parse_args()
    rows = read_index(args.root)
    if not rows:
        print("no labelled files found in INDEX.md", file=sys.stderr)
        return 1
    fam_lines: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    print(
        "| file | family | label | lines | coverage | unrecognised non-blank | event classes "
        "| incident root causes | verdict |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rel, family, label in rows:
        info = analyse_file(args.root / rel)
        fam = family.split("+")[0].strip()
        fam_lines[fam][0] += info["covered"]
        fam_lines[fam][1] += info["lines"]
        fam_lines[fam][2] += info["missed"]
        cov = f"{info['covered'] / info['lines']:.1%}" if info["lines"] else "-"
        print(
            f"| {rel} | {family} | {label} | {info['lines']} | {cov} | {info['missed']} "
            f"| {', '.join(info['classes']) or '-'} | "
            f"{', '.join(info['roots']) or '-'} | {info['error'] or verdict(label, info)} |"
        )
    print()
    print("| family | lines | covered | coverage | unrecognised non-blank lines |")
    print("| --- | --- | --- | --- | --- |")
    for fam, (cov, n, missed) in sorted(fam_lines.items()):
        print(f"| {fam} | {n} | {cov} | {cov / n:.1%} | {missed} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
