"""Recognition of failures in short real excerpts pasted in public issue threads.

Usage: python benchmarks/real_excerpts.py [--heldout | --set DIR] [--verbose]

Each excerpt listed in tests/data/real_excerpts/manifest.toml (or the held-out set with
--heldout, which is never tuned on, or any folder holding a manifest.toml of the same form with
--set, e.g. a new collection scored before anything is tuned on it) is ingested alone and
analysed. Reported:

- recall: the excerpt's expected class is among the failure classes of its events or the
  root causes of its incidents; for a misleading success (``expected = []``, ``success = true``:
  a healthy run whose lines look alarming) a hit is no class and no root cause at all;
- false claims on successes: successes given a failure class;
- false classes: failure classes emitted that the manifest does not expect;
- no event: excerpts that yield no classified event at all;
- node: excerpts whose manifest names a node, and how many of them the events name.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from toranalyze.ingest.pipeline import IngestOptions, ingest
from toranalyze.reconstruct.analysis import AnalysisOptions, analyze_events

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def load_manifest(heldout: bool, folder: Path | None = None) -> tuple[Path, list[dict]]:
    root = folder or DATA / ("real_excerpts_heldout" if heldout else "real_excerpts")
    with open(root / "manifest.toml", "rb") as fh:
        return root, tomllib.load(fh)["excerpt"]


def score(root: Path, entry: dict) -> dict:
    result = ingest([str(root / entry["file"])], IngestOptions())
    ev = result.events
    classes = set(ev["failure_class"].drop_nulls().to_list())
    roots: set[str] = set()
    if ev.height:
        inc = analyze_events(ev, AnalysisOptions()).incidents
        roots = set(inc["root_cause"].drop_nulls().to_list()) if inc.height else set()
    expected = set(entry["expected"])
    success = bool(entry.get("success")) or not expected
    nodes = set(ev.filter(ev["failure_class"].is_not_null())["node"].drop_nulls().to_list()) if ev.height else set()
    return {
        "file": entry["file"],
        "expected": sorted(expected),
        "classes": sorted(classes),
        "roots": sorted(roots),
        "hit": not (classes | roots) if success else bool(expected & (classes | roots)),
        "success": success,
        "false": sorted(classes - expected),
        "no_event": not classes and not success,
        "node_expected": entry.get("node"),
        "node_hit": entry.get("node") in nodes if entry.get("node") else None,
    }


def summarize(rows: list[dict]) -> dict:
    with_node = [r for r in rows if r["node_expected"]]
    return {
        "excerpts": len(rows),
        "recall": sum(r["hit"] for r in rows),
        "successes": sum(r["success"] for r in rows),
        "false_claims": sum(r["success"] and not r["hit"] for r in rows),
        "with_false_classes": sum(bool(r["false"]) for r in rows),
        "false_classes": sum(len(r["false"]) for r in rows),
        "no_event": sum(r["no_event"] for r in rows),
        "node_named": len(with_node),
        "node_hit": sum(bool(r["node_hit"]) for r in with_node),
    }


def per_class(rows: list[dict]) -> str:
    """Recall by expected class (an excerpt with two expected classes counts for both)."""
    seen: dict[str, list[int]] = {}
    for r in rows:
        for cls in r["expected"] or ["(success)"]:
            seen.setdefault(cls, [0, 0])
            seen[cls][0] += r["hit"]
            seen[cls][1] += 1
    lines = ["| class | found | excerpts |", "| --- | --- | --- |"]
    lines += [f"| {k} | {h} | {n} |" for k, (h, n) in sorted(seen.items())]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--heldout", action="store_true", help="score the held-out set")
    ap.add_argument("--set", type=Path, default=None, metavar="DIR", help="score the excerpts of DIR/manifest.toml")
    ap.add_argument("--verbose", action="store_true", help="one row per excerpt")
    ap.add_argument("--classes", action="store_true", help="recall per expected class")
    args = ap.parse_args()
    if args.set and args.heldout:
        ap.error("--set and --heldout name different sets: give one")
    root, entries = load_manifest(args.heldout, args.set)
    rows = [score(root, e) for e in entries]
    if args.verbose:
        print("| excerpt | expected | classes | roots | verdict | node |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            verdict = "hit" if r["hit"] else ("FALSE CLAIM" if r["success"] else "MISS")
            if r["false"]:
                verdict += f" (+{','.join(r['false'])})"
            node = "" if r["node_hit"] is None else ("ok" if r["node_hit"] else f"missed {r['node_expected']}")
            print(
                f"| {r['file']} | {','.join(r['expected']) or 'success'} | {','.join(r['classes']) or '-'} "
                f"| {','.join(r['roots']) or '-'} | {verdict} | {node} |"
            )
        print()
    if args.classes:
        print(per_class(rows))
    s = summarize(rows)
    n = s["excerpts"]
    name = str(args.set) if args.set else ("held-out" if args.heldout else "tuning")
    print(f"set: {name} ({n} excerpts)")
    print(f"recall: {s['recall']}/{n} = {s['recall'] / n:.1%}")
    print(f"successes with a false claim: {s['false_claims']}/{s['successes']}")
    print(f"excerpts with false classes: {s['with_false_classes']}/{n} ({s['false_classes']} false classes)")
    print(f"excerpts with no classified event: {s['no_event']}/{n}")
    print(f"node named: {s['node_hit']}/{s['node_named']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
