"""The ingest speed harness end to end on a small corpus: every figure is reported, and ingest keeps
its speed ratios against the baselines measured in the same run (no absolute time is asserted).
One ingest worker, like the baselines: with two, the ratio also follows what else holds the
second core. The floors catch a threefold slowdown: on a shared 2-core machine at load 4-9 this
corpus gave 0.067-0.092x baseline B and 0.015-0.016x baseline A (baseline B alone moved between
1.3 and 2.8 s). The figures for a 1 GB corpus are in docs/speed.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FLOOR_B = 0.03
FLOOR_A = 0.005
FLOOR_CHATTER_B = 0.02  # an 8 MB chatter log: the child's start-up is most of ingest's time


@pytest.mark.slow  # simulates a corpus and reads it four ways (about a minute)
def test_harness_reports_every_figure_and_ingest_keeps_its_ratios(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "ingest_speed.py"), "--size-mb", "96", "--small-files", "40", "--jobs", "1",
         "--work", str(tmp_path / "work"), "--only", "ingest,baseline_a,baseline_b,sketch,chatter,per_file",
         "--chatter-mb", "8", "--repeat", "2",
         "--json", str(out)],
        check=True, capture_output=True, text=True, cwd=ROOT,
    )
    res = json.loads(out.read_text())
    figures = json.dumps(res)  # every failure message carries the whole measurement
    assert res["corpus"]["mb"] > 90 and res["corpus"]["files"] > 100, figures  # big logs and many small files
    ingest = res["ingest"]
    assert ingest["events"] > 100_000 and ingest["lines"] > ingest["events"], figures
    assert res["baseline_a"]["lines"] >= ingest["lines"], figures  # the same files, split only
    assert ingest["rss_mb"] < 1024, figures  # events stream to Parquet: memory does not follow the corpus
    assert res["ratio_baseline_b"] >= FLOOR_B, figures
    assert res["ratio_baseline_a"] >= FLOOR_A, figures
    # The one-query sketch keeps some lines, finds the iteration lines and beats the per-line loop.
    sketch = res["sketch"]
    assert 0 < sketch["iterations"] < sketch["rows"] <= res["baseline_a"]["lines"], figures
    assert res["ratio_sketch_baseline_b"] > 1 and len(res["ratios_sketch_baseline_a"]) == 2, figures
    # The chatter log: under 2% of its lines are steps or failures, and ingest finds them.
    chatter = res["chatter"]
    assert chatter["mb"] >= 8 and 0 < chatter["events"] < 0.02 * chatter["mb"] * 1024 * 1024 / 100, figures
    assert len(chatter["runs_s"]) == 2 and chatter["cpu_s"] > 0, figures
    assert chatter["ratio_baseline_b"] >= FLOOR_CHATTER_B, figures
    per = res["per_file"]
    # The per-file cost is the mean of the rounds' differences; the fastest runs of the two ways alone can
    # come out in either order when other work holds the cores (seen: 2.25 s for the files, 2.56 s joined).
    assert per["files_s"] > 0 and per["cat_s"] > 0 and per["per_file_ms"] > 0, figures
    # Two interleaved rounds: each step's runs listed, the figures those of the median run (the
    # lower of two), a ratio the median of the rounds' own ratios; CPU times reported.
    for step in ("ingest", "baseline_a", "baseline_b"):
        assert len(res[step]["runs_s"]) == 2 and res[step]["wall_s"] == min(res[step]["runs_s"]), figures
    assert ingest["user_s"] > 0 and ingest["sys_s"] >= 0, figures
    ratios = res["ratios_baseline_b"]
    assert len(ratios) == 2 and res["ratio_baseline_b"] == pytest.approx(sum(ratios) / 2), figures
    assert len(per["rounds_ms"]) == 2 and per["per_file_ms"] == pytest.approx(sum(per["rounds_ms"]) / 2), figures
