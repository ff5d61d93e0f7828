"""The README's main command works end to end on the committed sample run."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]


def _readme_analyze_args() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    first_block = re.findall(r"```bash\n(.*?)```", readme, re.S)[0]
    command = first_block.split("&&")[-1].strip()
    args = shlex.split(command)
    assert args[:2] == ["toranalyze", "analyze"], command
    return args[2:]


def test_readme_main_command_end_to_end(tmp_path: Path) -> None:
    args = _readme_analyze_args()
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "toranalyze", "analyze", *args, "-o", str(out), "-q"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for table in ("events", "attempts", "incidents", "slow_periods", "tor"):
        assert (out / f"{table}.parquet").exists(), table
    # -q prints nothing but the report's path
    assert proc.stdout.strip() == f"report: {out / 'report.html'}", proc.stdout
    assert (out / "report.html").stat().st_size > 10_000 and (out / "plotly.min.js").exists()
    tor = pl.read_parquet(out / "tor.parquet")
    assert tor.height == 1
    row = tor.row(0, named=True)
    assert 0 < row["tor"] <= 1
    buckets = ("useful", "slowdown", "rework", "checkpoint", "detection", "recovery", "other")
    assert sum(row[f"{b}_us"] for b in buckets) == row["t_obs_us"]
    summary = (out / "summary.json").read_text()
    assert '"files_failed": 0' in summary
    # The run's rates.json: the fleet's fits over this run (the same tables as `toranalyze fleet`).
    from toranalyze.fleet.rates import load_rates

    rates = load_rates((out / "rates.json").read_text(), path="rates.json")
    incidents = pl.read_parquet(out / "incidents.parquet")
    assert rates["unexpected"]["failures"] == incidents.filter(~pl.col("planned")).height
    assert sum(p["count"] for p in rates["planned"].values()) == incidents.filter(pl.col("planned")).height
    assert 0 < rates["exposure"]["gpu_hours"] < row["t_obs_us"] / 3.6e9 * 32  # running time only, 32 GPUs


def test_ci_runs_the_readme_test_command() -> None:
    """CI must run exactly what the README tells a new user to run for the tests."""
    readme = (ROOT / "README.md").read_text()
    test_block = re.findall(r"```bash\n(.*?)```", readme, re.S)[1].strip()
    assert "pytest" in test_block
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_block in ci.splitlines(), f"{test_block!r} is not a line of .ci/run"
