"""End to end: ``toranalyze fleet`` over a few simulated runs: tables, incremental updates,
byte-identical re-runs, and a store that survives a failure (or kill -9) at any point."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from toranalyze.cli import cli
from toranalyze.fleet import store
from toranalyze.fleet.build import build
from toranalyze.fleet.rates import load_rates
from toranalyze.fleet.schema import EXPOSURE_SCHEMA, FLEET_ATTEMPTS_SCHEMA, FLEET_INCIDENTS_SCHEMA, JOBS_SCHEMA
from toranalyze.fleet.tables import TABLES

SCHEMAS = {"jobs": JOBS_SCHEMA, "attempts": FLEET_ATTEMPTS_SCHEMA, "incidents": FLEET_INCIDENTS_SCHEMA,
           "exposure": EXPOSURE_SCHEMA}


def _simulate(out: Path, seed: int, jobs: int) -> None:
    res = CliRunner().invoke(cli, ["simulate", "--seed", str(seed), "--out", str(out), "--preset", "fleet",
                                   "--jobs", str(jobs), "--duration", "40m", "--nodes", "1"])
    assert res.exit_code == 0, res.output


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sim") / "fleet"
    _simulate(d, seed=5, jobs=3)
    return d


def _digests(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.glob("*")) if p.is_file()}


def _build(paths: list[Path], out: Path) -> object:
    return build([str(p) for p in paths], out)


@pytest.fixture(scope="module")
def clean_store(fleet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("store") / "clean"
    _build([fleet_dir], out)
    return out


def test_tables_follow_their_contracts(clean_store: Path, fleet_dir: Path) -> None:
    truth = json.loads((fleet_dir / "truth.json").read_text())
    tables = {t: pl.read_parquet(clean_store / f"{t}.parquet") for t in TABLES}
    for t, frame in tables.items():
        assert frame.schema == SCHEMAS[t], t
    jobs = tables["jobs"]
    assert sorted(jobs["run"]) == ["fleet/fleet-000", "fleet/fleet-001", "fleet/fleet-002"]
    assert jobs["job"].to_list() == [j["job"] for j in truth["jobs"]]  # job names relative to the run
    assert (jobs["gpus"] == 8).all() and (jobs["nodes"] == 1).all()
    by_job = {j["job"]: j for j in truth["jobs"]}
    for row in jobs.iter_rows(named=True):
        t = by_job[row["job"]]
        assert row["n_attempts"] == len(t["attempts"])
        assert row["n_incidents"] == len(t["incidents"])
        assert row["n_planned"] == sum(i["planned"] for i in t["incidents"])
    exp = tables["exposure"]
    # Exposure is running time: never more than the observed span, and GPU-hours = hours x 8 here.
    per_job = exp.group_by("run", "job").agg(pl.col("hours").sum()).join(jobs, on=["run", "job"])
    assert (per_job["hours"] * 3600 <= per_job["span_s"] + 1e-6).all()
    assert (exp["gpu_hours"] - exp["hours"] * 8).abs().max() < 1e-9  # type: ignore[operator]
    assert exp["node"].null_count() == 0


def test_rerun_analyses_nothing_and_is_byte_identical(fleet_dir: Path, clean_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    shutil.copytree(clean_store, out)
    before = _digests(out)
    result = _build([fleet_dir], out)
    assert result.analyzed == [] and result.reused == 3 and not result.rewritten  # type: ignore[attr-defined]
    assert _digests(out) == before


def test_new_changed_and_removed_runs(fleet_dir: Path, clean_store: Path, tmp_path: Path) -> None:
    runs = tmp_path / "fleet"
    shutil.copytree(fleet_dir, runs)
    out = tmp_path / "store"
    shutil.copytree(clean_store, out)
    # a new run, a changed run, a removed run
    _simulate(tmp_path / "more", seed=9, jobs=1)
    shutil.copytree(tmp_path / "more", runs / "fleet-100")  # one job: written flat
    with open(next((runs / "fleet-001").glob("nodes/*/kern.log")), "a") as f:
        f.write("a line nobody recognises\n")
    shutil.rmtree(runs / "fleet-002")
    result = _build([runs], out)
    assert result.analyzed == ["fleet/fleet-001", "fleet/fleet-100"]  # type: ignore[attr-defined]
    assert result.removed == ["fleet/fleet-002"]  # type: ignore[attr-defined]
    jobs = pl.read_parquet(out / "jobs.parquet")
    assert jobs["run"].to_list() == ["fleet/fleet-000", "fleet/fleet-001", "fleet/fleet-100"]
    manifest = store.read_manifest(out)
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(r.hash for r in manifest.runs)
    assert store.tables_current(out, manifest)
    # the same inputs into a fresh store give the same bytes
    fresh = tmp_path / "fresh"
    _build([runs], fresh)
    assert {k: v for k, v in _digests(fresh).items() if k != "manifest.json"} == {
        k: v for k, v in _digests(out).items() if k != "manifest.json"
    }


def test_failure_between_writes_leaves_a_consistent_store_that_heals(
    fleet_dir: Path, clean_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "fleet"
    shutil.copytree(fleet_dir, runs)
    shutil.rmtree(runs / "fleet-002")  # the store changes: tables must be rewritten
    out = tmp_path / "store"
    shutil.copytree(clean_store, out)
    old_manifest = (out / "manifest.json").read_bytes()
    real = store.write_table
    calls = []

    def failing(frame: pl.DataFrame, path: Path) -> None:
        calls.append(path.name)
        if len(calls) == 2:
            raise OSError("disk full (simulated)")
        real(frame, path)

    monkeypatch.setattr(store, "write_table", failing)
    with pytest.raises(OSError, match="simulated"):
        _build([runs], out)
    monkeypatch.setattr(store, "write_table", real)
    # The manifest still describes the old store; every table is whole; no temporary file is left.
    assert (out / "manifest.json").read_bytes() == old_manifest
    for t in TABLES:
        pl.read_parquet(out / f"{t}.parquet")
    assert not list(out.glob(".*.tmp"))
    assert not store.tables_current(out, store.read_manifest(out))  # jobs.parquet is ahead of it
    healed = _build([runs], out)
    assert healed.analyzed == [] and healed.rewritten  # type: ignore[attr-defined]
    assert store.tables_current(out, store.read_manifest(out))
    assert pl.read_parquet(out / "jobs.parquet")["run"].to_list() == ["fleet/fleet-000", "fleet/fleet-001"]


def test_kill_9_mid_run_then_rerun_heals(fleet_dir: Path, clean_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "toranalyze", "fleet", str(fleet_dir), "-o", str(out), "-j", "1", "-q"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        parts = out / "runs"
        if parts.is_dir() and any(not p.name.startswith(".") for p in parts.iterdir()):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Whatever was written is whole: no manifest yet, or one whose tables match it.
    manifest = store.read_manifest(out)
    if manifest.runs:
        assert store.tables_current(out, manifest)
    for p in (out / "runs").iterdir():
        if not p.name.startswith("."):
            assert store.has_part(out, p.name)
    result = CliRunner().invoke(cli, ["fleet", str(fleet_dir), "-o", str(out), "-j", "1"])
    assert result.exit_code == 0, result.output
    assert "3 runs" in result.output
    fresh = tmp_path / "fresh" / "store"  # the same inputs into a new store of the same name
    assert CliRunner().invoke(cli, ["fleet", str(fleet_dir), "-o", str(fresh), "-j", "1", "-q"]).exit_code == 0
    assert _digests(out) == _digests(fresh) | {"manifest.json": _digests(out)["manifest.json"]}
    assert {k: v for k, v in _digests(out).items() if k in _digests(clean_store)} == (
        _digests(clean_store) | {"manifest.json": _digests(out)["manifest.json"]})
    assert store.read_manifest(out).runs == store.read_manifest(clean_store).runs


def test_products_rates_and_reports(fleet_dir: Path, tmp_path: Path) -> None:
    """rates.json and the fleet report over the merged tables, a job report per run linked from
    jobs.report, and an unchanged re-run that rewrites none of them."""
    out = tmp_path / "store"
    first = CliRunner().invoke(cli, ["fleet", str(fleet_dir), "-o", str(out), "-j", "1", "-q"])
    assert first.exit_code == 0, first.output
    assert first.output.strip() == f"rates: {out / 'rates.json'}\nreport: {out / 'report.html'}"
    rates = load_rates((out / "rates.json").read_text(), path="rates.json")
    incidents = pl.read_parquet(out / "incidents.parquet")
    assert rates["unexpected"]["failures"] == incidents.filter(~pl.col("planned")).height
    jobs = pl.read_parquet(out / "jobs.parquet")
    page = (out / "report.html").read_text()
    for link in jobs["report"].unique():
        assert (out / link).is_file() and f'href="{link}"' in page, link
        assert '"../../plotly.min.js"' in (out / link).read_text()  # the store's one copy
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    again = CliRunner().invoke(cli, ["fleet", str(fleet_dir), "-o", str(out), "-j", "1", "-q"])
    assert again.exit_code == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == stamps  # nothing rewritten


def test_outputs_get_the_usual_file_mode(tmp_path: Path) -> None:
    """Temporary files are 0600 and temporary folders 0700; what is renamed into place must not
    stay so, or a shared report folder is unreadable to everyone else."""
    import stat

    store.write_text("x", tmp_path / "a.txt")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o666 & ~mask
