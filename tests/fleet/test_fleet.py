"""``toranalyze fleet`` over a few simulated runs (tables, incremental updates, re-runs that write
nothing, a store that survives a failure or kill -9 at any point), and the Delta store itself
over synthetic runs (one transaction per table and batch, compaction, the stamp cache)."""

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
from deltalake import DeltaTable
from polars.testing import assert_frame_equal

from toranalyze.cli import cli
from toranalyze.fleet import store
from toranalyze.fleet.build import build
from toranalyze.fleet.rates import load_rates
from toranalyze.fleet.runs import Run
from toranalyze.fleet.schema import EXPOSURE_SCHEMA, FLEET_ATTEMPTS_SCHEMA, FLEET_INCIDENTS_SCHEMA, JOBS_SCHEMA
from toranalyze.fleet.stamps import hash_run
from toranalyze.fleet.tables import SORT_KEYS, TABLES, RunTables

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
    """Every file under ``d`` (Delta logs and data files included) by its path."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


def _build(paths: list[Path], out: Path) -> object:
    return build([str(p) for p in paths], out)


@pytest.fixture(scope="module")
def clean_store(fleet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("store") / "clean"
    _build([fleet_dir], out)
    return out


def _same_tables(a: Path, b: Path) -> None:
    for t, frame in store.Store(a).read_tables().items():
        assert_frame_equal(frame, store.Store(b).read(t), check_exact=True)


def test_tables_read_as_delta_tables(clean_store: Path) -> None:
    """Any Delta reader sees the tables (here polars, at the latest version)."""
    jobs = pl.read_delta(str(clean_store / "jobs"))
    assert sorted(jobs["run"]) == ["fleet/fleet-000", "fleet/fleet-001", "fleet/fleet-002"]
    assert set(SCHEMAS["jobs"].names()) <= set(jobs.columns)


def test_tables_follow_their_contracts(clean_store: Path, fleet_dir: Path) -> None:
    truth = json.loads((fleet_dir / "truth.json").read_text())
    tables = store.Store(clean_store).read_tables()
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


def test_rerun_analyses_nothing_and_writes_nothing(fleet_dir: Path, clean_store: Path, tmp_path: Path) -> None:
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
    s = store.Store(out)
    assert s.read("jobs")["run"].to_list() == ["fleet/fleet-000", "fleet/fleet-001", "fleet/fleet-100"]
    assert sorted(s.runs()) == ["fleet/fleet-000", "fleet/fleet-001", "fleet/fleet-100"]
    # the reports of replaced and removed runs are gone with them
    assert sorted(p.name for p in (out / store.PARTS).iterdir()) == sorted(map(store.page_name, s.runs()))
    # the same inputs into a fresh store give the same tables
    fresh = tmp_path / "fresh"
    _build([runs], fresh)
    _same_tables(out, fresh)


def test_failure_between_writes_leaves_a_consistent_store_that_heals(
    fleet_dir: Path, clean_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "fleet"
    shutil.copytree(fleet_dir, runs)
    shutil.rmtree(runs / "fleet-002")  # the store changes: every table loses a run
    out = tmp_path / "store"
    shutil.copytree(clean_store, out)
    old_manifest = (out / "manifest.json").read_bytes()
    real = store.write_deltalake
    calls = []

    def failing(*args: object, **kwargs: object) -> None:
        calls.append(args[0])
        if len(calls) == 2:
            raise OSError("disk full (simulated)")
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "write_deltalake", failing)
    with pytest.raises(OSError, match="simulated"):
        _build([runs], out)
    monkeypatch.setattr(store, "write_deltalake", real)
    # The manifest still names the old versions, and they read as the old store although the
    # first table is a version ahead of it.
    assert (out / "manifest.json").read_bytes() == old_manifest
    versions = json.loads(old_manifest)["versions"]
    assert DeltaTable(out / "jobs").version() > versions["jobs"]
    for t in TABLES:
        assert_frame_equal(pl.read_delta(str(out / t), version=versions[t]),
                           pl.read_delta(str(clean_store / t)), check_row_order=False)
    healed = _build([runs], out)
    assert healed.analyzed == [] and healed.rewritten  # type: ignore[attr-defined]
    assert store.Store(out).read("jobs")["run"].to_list() == ["fleet/fleet-000", "fleet/fleet-001"]
    assert pl.read_delta(str(out / "jobs"))["run"].unique().sort().to_list() == [
        "fleet/fleet-000", "fleet/fleet-001"]  # the latest version too, once healed


def test_kill_9_mid_run_then_rerun_heals(fleet_dir: Path, clean_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "toranalyze", "fleet", str(fleet_dir), "-o", str(out), "-j", "1", "-q"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / store.PARTS).is_dir() or (out / "jobs").is_dir():  # the batch's commit has begun
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Whatever was committed reads whole; the next run heals and gives the clean store's tables.
    _consistent(out)
    result = CliRunner().invoke(cli, ["fleet", str(fleet_dir), "-o", str(out), "-j", "1"])
    assert result.exit_code == 0, result.output
    assert "3 runs" in result.output
    _same_tables(out, clean_store)
    assert store.Store(out).runs().keys() == store.Store(clean_store).runs().keys()
    assert sorted(p.name for p in (out / store.PARTS).iterdir()) == sorted(map(store.page_name, store.Store(out).runs()))


def _consistent(out: Path) -> None:
    """The manifest's versions read, and every table holds rows of stored runs only."""
    s = store.Store(out)
    ids = set(s.runs())
    for t in TABLES:
        assert set(s.read(t)["run"]) <= ids, t


# ---- the store over synthetic runs ----


def _tables(run: str, exposure: int = 3) -> RunTables:
    """Rows of one run: a job, an attempt, an incident and ``exposure`` exposure rows (the other
    columns null, which every schema allows)."""
    keys = {"jobs": [{"job": "j"}], "attempts": [{"job": "j", "attempt": 1}],
            "incidents": [{"job": "j", "incident": 1}],
            "exposure": [{"job": "j", "attempt": 1, "node": f"n{i:03d}"} for i in range(exposure)]}
    frames = []
    for t in TABLES:
        rows = pl.DataFrame(keys[t]).with_columns(pl.lit(run).alias("run"))
        frames.append(rows.select(pl.col(c).cast(d) if c in rows.columns else pl.lit(None, d).alias(c)
                                  for c, d in SCHEMAS[t].items()).sort(SORT_KEYS[t]))
    return RunTables(*frames)


def _rec(run: str, h: str = "h1", exposure: int = 3, error: str | None = None) -> store.RunRecord:
    return store.RunRecord(run, f"/data/{run}", f"{h}-{run}", _tables(run, exposure),
                           {"error": error, "notes": ["a note"], "files_failed": 0}, {"report.html": f"<p>{h}</p>"})


def test_a_batch_adds_replaces_and_deletes_in_one_transaction_per_table(tmp_path: Path) -> None:
    s = store.Store(tmp_path)
    assert s.record([_rec("a"), _rec("b"), _rec("c", error="nothing readable")])
    before = dict(s.manifest.versions)
    # b re-analysed (a new hash, more rows), c gone, d new: one commit of each table
    assert s.record([_rec("b", "h2", exposure=5), _rec("d")], drop=["c"])
    assert all(s.manifest.versions[t] == before[t] + 1 for t in before)
    for t in (*TABLES, store.RUNS):
        last = DeltaTable(tmp_path / t).history(1)[0]
        assert last["operation"] == "WRITE" and last["generation"] == str(s.manifest.generation)
    again = store.Store(tmp_path)  # as the next process sees it
    assert again.read("jobs")["run"].to_list() == ["a", "b", "d"]
    assert again.read("exposure").group_by("run").len().sort("run")["len"].to_list() == [3, 5, 3]
    runs = again.runs()
    assert runs["b"].hash == "h2-b" and runs["b"].generation == 2 and runs["a"].generation == 1
    assert runs["a"].notes == ("a note",) and "c" not in runs
    assert sorted(p.name for p in (tmp_path / store.PARTS).iterdir()) == ["a", "b", "d"]
    assert (tmp_path / store.PARTS / "b" / "report.html").read_text() == "<p>h2</p>"
    assert sorted(p.name for p in (tmp_path / store.PARTS / "b").iterdir()) == sorted([store.OWNER, "report.html"])


def test_an_unchanged_commit_writes_nothing(tmp_path: Path) -> None:
    s = store.Store(tmp_path)
    s.record([_rec("a"), _rec("b")])
    before = _digests(tmp_path)
    again = store.Store(tmp_path)
    current = again.run_frame().select("run", "path", "hash", "files").sort("run")
    assert not again.record([]) and not again.commit(current)
    assert _digests(tmp_path) == before
    # a moved run (same hash, another path) updates only the runs table
    moved = current.with_columns(pl.when(pl.col("run") == "a").then(pl.lit("/elsewhere/a")).otherwise("path")
                                 .alias("path"))
    versions = dict(again.manifest.versions)
    assert again.commit(moved)
    assert {t for t in versions if again.manifest.versions[t] != versions[t]} == {store.RUNS}
    assert store.Store(tmp_path).runs()["a"].path == "/elsewhere/a"


def test_a_crash_mid_commit_leaves_the_previous_version_and_heals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = store.Store(tmp_path)
    s.record([_rec("a"), _rec("b")])
    real = store.write_deltalake
    calls = []

    def failing(*args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) == 4:  # after jobs, attempts, incidents: exposure and runs not written
            raise OSError("killed (simulated)")
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "write_deltalake", failing)
    with pytest.raises(OSError, match="simulated"):
        s.record([_rec("a", "h2", exposure=7), _rec("c")], drop=["b"])
    monkeypatch.setattr(store, "write_deltalake", real)
    assert pl.read_delta(str(tmp_path / "jobs"))["run"].sort().to_list() == ["a", "c"]  # ahead of the manifest
    healed = store.Store(tmp_path)
    assert healed.healed
    settled = _digests(tmp_path)
    assert not store.Store(tmp_path).healed and _digests(tmp_path) == settled  # healed once, then left alone
    assert healed.read("jobs")["run"].to_list() == ["a", "b"]
    assert pl.read_delta(str(tmp_path / "jobs"))["run"].sort().to_list() == ["a", "b"]  # restored
    assert sorted(p.name for p in (tmp_path / store.PARTS).iterdir()) == ["a", "b"]  # its pages swept
    assert sorted(p.name for p in (tmp_path / store.PARTS / "a").iterdir()) == sorted([store.OWNER, "report.html"])
    assert (tmp_path / store.PARTS / "a" / "report.html").read_text() == "<p>h1</p>"  # the committed rows' page
    assert healed.record([_rec("a", "h2", exposure=7), _rec("c")], drop=["b"])
    assert store.Store(tmp_path).read("exposure").group_by("run").len().sort("run")["len"].to_list() == [7, 3]


KILLER = """
import sys
from pathlib import Path
sys.path[:0] = [{root!r}, {tests!r}]
from test_fleet import _rec
from toranalyze.fleet import store
s = store.Store(Path({out!r}))
for i in range(10_000):
    s.record([_rec(f"r{{(i * 7 + k) % 40:03d}}", f"h{{i}}") for k in range(5)], drop=[f"r{{(i * 11) % 40:03d}}"])
"""


@pytest.mark.parametrize("delay", [0.8, 1.3, 2.1])
def test_kill_9_at_any_point_of_a_commit(tmp_path: Path, delay: float) -> None:
    """A process committing batch after batch (adds, replacements, drops, compactions) killed at
    some moment: the store opens, reads consistent, and takes the next batch."""
    script = KILLER.format(root=str(Path(__file__).parents[2]), tests=str(Path(__file__).parent), out=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and not (tmp_path / "manifest.json").exists():
        time.sleep(0.01)
    time.sleep(delay)
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _consistent(tmp_path)
    s = store.Store(tmp_path)
    assert all(r.hash.endswith(r.id) for r in s.runs().values())
    assert s.record([_rec("r000", "last")])
    assert store.Store(tmp_path).runs()["r000"].hash == "last-r000"


def test_compaction_keeps_one_file_per_bucket(tmp_path: Path) -> None:
    s = store.Store(tmp_path)
    for i in range(20):  # one run per commit: one new file per table each time
        s.record([_rec(f"run-{i:03d}")])
    for t in (*TABLES, store.RUNS):  # compacted whenever a bucket passed COMPACT_AT files
        assert 1 <= s.files(t) <= store.COMPACT_AT, t
    assert s.compact(force=True)
    assert all(s.files(t) == 1 for t in (*TABLES, store.RUNS))  # fewer than 1,000 runs: one bucket
    compacted = _digests(tmp_path)
    assert not store.Store(tmp_path).healed and _digests(tmp_path) == compacted
    assert store.Store(tmp_path).read("jobs")["run"].to_list() == [f"run-{i:03d}" for i in range(20)]


def test_buckets_double_with_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past each power of two (of RUNS_PER_BUCKET runs) the tables are re-bucketed once, so a
    compacted table keeps at most one file per RUNS_PER_BUCKET runs, and replacing a run still
    touches its bucket only."""
    monkeypatch.setattr(store, "RUNS_PER_BUCKET", 5)
    s = store.Store(tmp_path)
    for lo in range(0, 40, 10):
        s.record([_rec(f"run-{i:03d}") for i in range(lo, lo + 10)])
    assert s.manifest.buckets == store.bucket_count(40) == 8
    s.compact(force=True)
    for t in (*TABLES, store.RUNS):
        assert s.files(t) <= 40 // 5, t
        parts = {int(p.name.split("=")[1]) for p in (tmp_path / t).glob("bucket=*") if any(p.iterdir())}
        assert parts <= set(range(8))
    before = {t: s.read(t) for t in TABLES}
    assert s.record([_rec("run-007", "h2", exposure=6)])
    again = store.Store(tmp_path)
    assert again.manifest.buckets == 8
    exposure = again.read("exposure")
    assert exposure.filter(pl.col("run") == "run-007").height == 6
    assert_frame_equal(exposure.filter(pl.col("run") != "run-007"),
                       before["exposure"].filter(pl.col("run") != "run-007"))
    assert again.record([], drop=[f"run-{i:03d}" for i in range(30)])  # the store shrinks: fewer buckets
    assert again.manifest.buckets == store.bucket_count(10) == 2
    assert store.Store(tmp_path).read("jobs")["run"].to_list() == [f"run-{i:03d}" for i in range(30, 40)]


def test_a_store_of_the_first_format_is_migrated_without_analysing_again(tmp_path: Path) -> None:
    """Format 1: runs/<hash>/ parts (tables, status.json, report.html), merged <table>.parquet
    and a manifest listing the runs. Opening it records the parts in one commit."""
    runs = []
    for rid in ("a", "b"):
        part = tmp_path / "runs" / f"h-{rid}"
        part.mkdir(parents=True)
        tables = _tables(rid)
        tables.jobs = tables.jobs.with_columns(pl.lit(f"runs/h-{rid}/report.html").alias("report"))
        for t in TABLES:
            tables.get(t).write_parquet(part / f"{t}.parquet")
        (part / "status.json").write_text(json.dumps({"run": rid, "error": None, "notes": [f"n-{rid}"],
                                                       "files_failed": 0}))
        (part / "report.html").write_text(f"<p>{rid}</p>")
        runs.append({"id": rid, "path": f"/data/{rid}", "hash": f"h-{rid}"})
    (tmp_path / "jobs.parquet").write_bytes(b"merged")
    (tmp_path / "manifest.json").write_text(json.dumps({"store_version": 1, "runs": runs, "tables": {}}))
    s = store.Store(tmp_path)
    assert s.read("jobs")["report"].to_list() == ["reports/a/report.html", "reports/b/report.html"]
    assert s.read("exposure").height == 6 and s.runs()["b"].notes == ("n-b",) and s.hashes() == {"h-a", "h-b"}
    assert (tmp_path / "reports" / "a" / "report.html").read_text() == "<p>a</p>"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*TABLES, "manifest.json", "reports", "runs"])
    assert json.loads((tmp_path / "manifest.json").read_text())["store_version"] == store.STORE_VERSION


def test_a_store_of_an_unknown_format_is_refused_with_the_next_step(tmp_path: Path) -> None:
    from toranalyze.errors import InputError

    (tmp_path / "manifest.json").write_text(json.dumps({"store_version": 99}))
    with pytest.raises(InputError, match="another toranalyze") as err:
        store.Store(tmp_path)
    assert err.value.path == str(tmp_path / "manifest.json") and "new directory" in (err.value.hint or "")


def test_stamps_skip_rehashing_unchanged_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toranalyze.fleet import stamps as stamps_mod

    d = tmp_path / "run"
    d.mkdir()
    for name in ("a.log", "b.log", "c.log"):
        (d / name).write_text(f"{name}\n")
    run = Run("run", str(d), ("a.log", "b.log", "c.log"))
    first, stamps = hash_run(run, "salt")
    read: list[str] = []
    real = stamps_mod._file_digest
    monkeypatch.setattr(stamps_mod, "_file_digest", lambda p: (read.append(Path(p).name), real(p))[1])
    known = stamps.with_columns(pl.lit(str(d)).alias("path")).select(stamps_mod.KNOWN_SCHEMA.names())
    again, same = hash_run(run, "salt", known=known)
    assert again == first and same.equals(stamps) and read == []
    (d / "b.log").write_text("b.log, changed\n")
    os.utime(d / "c.log", ns=(1, 1))  # touched: same bytes, another mtime
    second, _ = hash_run(run, "salt", known=known)
    assert sorted(read) == ["b.log", "c.log"] and second != first
    assert second == hash_run(run, "salt")[0]  # the same digest as reading every file


def test_products_rates_and_reports(fleet_dir: Path, tmp_path: Path) -> None:
    """rates.json and the fleet report over the merged tables, a job report per run linked from
    jobs.report, and an unchanged re-run that rewrites none of them."""
    out = tmp_path / "store"
    first = CliRunner().invoke(cli, ["fleet", str(fleet_dir), "-o", str(out), "-j", "1", "-q"])
    assert first.exit_code == 0, first.output
    assert first.output.strip() == f"rates: {out / 'rates.json'}\nreport: {out / 'report.html'}"
    rates = load_rates((out / "rates.json").read_text(), path="rates.json")
    tables = store.Store(out).read_tables()
    assert rates["unexpected"]["failures"] == tables["incidents"].filter(~pl.col("planned")).height
    jobs = tables["jobs"]
    assert jobs["report"].str.starts_with(f"{store.PARTS}/").all()
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
