"""``toranalyze analyze``, ``fleet`` and ``plan`` end to end on the folders of real logs in tests/data.

Real logs are excerpts: hosts named without a GPU count, a world size smaller than the nodes
named, jobs with no step to measure. The command must still write every table, rates.json and
the report, and say what it could not measure instead of failing; the rates it writes must be
ones ``plan`` accepts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from toranalyze.cli import cli
from toranalyze.fleet.rates import check_rates

DATA = Path(__file__).resolve().parent.parent / "data"
FOLDERS = sorted(
    [p for p in DATA.glob("*/real") if p.is_dir()]
    + [p for s in ("real_excerpts", "real_excerpts_heldout") for p in (DATA / s).iterdir() if p.is_dir()]
)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(DATA)))
def test_analyze_writes_every_output(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["analyze", str(folder), "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    tor = pl.read_parquet(out / "tor.parquet")
    assert pl.read_parquet(out / "events.parquet").height > 0
    rates = check_rates(json.loads((out / "rates.json").read_text()))  # what plan reads
    assert rates["gpus_per_node"] >= 1
    assert (out / "report.html").stat().st_size > 0
    # Every job with a TOR has it in [0, 1] (0: time observed, no step in it); one without says why.
    assert tor.filter(pl.col("tor").is_not_null() & ((pl.col("tor") < 0) | (pl.col("tor") > 1))).height == 0
    if tor["tor"].null_count():
        assert "no step time to measure against" in result.output


def test_there_are_real_folders() -> None:
    assert len(FOLDERS) >= 10


def test_fleet_of_real_folders_and_a_plan_from_its_rates(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for folder in FOLDERS:
        shutil.copytree(folder, runs / str(folder.relative_to(DATA)).replace("/", "-"))
    runner = CliRunner()
    fleet = runner.invoke(cli, ["fleet", str(runs), "-o", str(tmp_path / "fleet"), "-j", "1"], catch_exceptions=False)
    assert fleet.exit_code == 0, fleet.output
    assert pl.read_delta(str(tmp_path / "fleet" / "jobs"))["run"].n_unique() == len(FOLDERS)
    assert (tmp_path / "fleet" / "report.html").stat().st_size > 0
    rates = tmp_path / "fleet" / "rates.json"
    for gpus in ("8", "4096"):
        plan = runner.invoke(cli, ["plan", "--rates", str(rates), "--gpus", gpus, "--json", "--runs", "50"],
                             catch_exceptions=False)
        assert plan.exit_code == 0, plan.output
        tor = json.loads(plan.output)["closed_form"]["tor"]
        assert 0 < tor <= 1
