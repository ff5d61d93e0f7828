"""Runs analysed in batches give exactly the tables, notes and errors each run gives alone.

The runs are chosen to meet if anything lets them: simulated jobs of both flavours that share host
names and time windows, the messy ``fleet-wild`` preset, real excerpts, two copies of a run (one
with its clock moved), year-less kernel logs beside scheduler logs of different years, and a run
nothing in which can be read.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from toranalyze.cli import cli
from toranalyze.fleet import batch as batch_mod
from toranalyze.fleet import build as build_mod
from toranalyze.fleet import store
from toranalyze.fleet.batch import BatchTask, analyze_batch, batches
from toranalyze.fleet.build import build
from toranalyze.fleet.pipeline import OutputOptions, RunOptions, RunTask, analyze_task
from toranalyze.fleet.runs import Run
from toranalyze.fleet.tables import TABLES

ROOT = Path(__file__).resolve().parents[2]
NO_REPORT = RunOptions(output=OutputOptions(report=False))


def _simulate(out: Path, *args: str) -> None:
    res = CliRunner().invoke(cli, ["simulate", "--out", str(out), *args])
    assert res.exit_code == 0, res.output


def _year_less_run(d: Path, year: int) -> None:
    """A Slurm job output dated ``year`` and a kernel log whose stamps state no year."""
    (d / "nodes" / "gpu-001").mkdir(parents=True)
    (d / "slurm-4242.out").write_text(
        f"[{year}-03-01 10:00:00] job 4242 started on gpu-001\n"
        f"[{year}-03-01 10:00:05,000] iteration 10/ 1000 | elapsed time per iteration (ms): 500.0 | lm loss: 3.2\n"
        f"[{year}-03-01 10:00:10,000] iteration 20/ 1000 | elapsed time per iteration (ms): 500.0 | lm loss: 3.1\n"
    )
    (d / "nodes" / "gpu-001" / "kern.log").write_text(
        "Mar  1 10:00:12 gpu-001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
    )


@pytest.fixture(scope="module")
def mixed_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("batches") / "fleet"
    _simulate(root / "sim", "--preset", "fleet", "--jobs", "4", "--seed", "21", "--duration", "40m")
    _simulate(root / "wild", "--preset", "fleet-wild", "--jobs", "3", "--seed", "4", "--duration", "40m")
    shutil.copytree(ROOT / "sample_logs" / "gpt-small", root / "copies" / "a")
    shutil.copytree(ROOT / "sample_logs" / "gpt-small", root / "copies" / "b")
    shifted = root / "copies" / "b" / "slurm-731400.out"  # b: the same run, one job output a year later
    if shifted.is_file():
        shifted.write_text(shifted.read_text().replace("2024-", "2025-"))
    shutil.copytree(ROOT / "sample_logs" / "gpt-small-k8s", root / "copies" / "k8s")
    for name in ("kernel", "slurm"):
        shutil.copytree(ROOT / "tests" / "data" / name, root / "excerpts" / name,
                        ignore=shutil.ignore_patterns("golden", "real"))
    _year_less_run(root / "years" / "y2023", 2023)
    _year_less_run(root / "years" / "y2025", 2025)
    (root / "broken").mkdir()
    (root / "broken" / "job.log").write_bytes(b"\x00" * 64)
    return root


def _alone(batch: BatchTask) -> list[Any]:
    return [analyze_task(t) for t in batch.tasks]


def _store(fleet: Path, out: Path, monkeypatch: pytest.MonkeyPatch, *, alone: bool, max_runs: int = 500) -> Path:
    with monkeypatch.context() as m:
        if alone:
            m.setattr(build_mod, "analyze_batch", _alone)
        m.setattr(build_mod, "BATCH_RUNS", max_runs)
        result = build([str(fleet)], out, NO_REPORT)
    assert len(result.runs) >= 10
    return out


def test_batches_give_the_tables_of_runs_alone(mixed_fleet: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _store(mixed_fleet, tmp_path / "alone", monkeypatch, alone=True)
    together = _store(mixed_fleet, tmp_path / "together", monkeypatch, alone=False)
    small = _store(mixed_fleet, tmp_path / "small", monkeypatch, alone=False, max_runs=3)
    for t in TABLES:
        want = store.Store(alone).read(t)
        assert want.height > 0
        for got in (together, small):
            assert_frame_equal(store.Store(got).read(t), want, check_exact=True)
    runs = store.Store(alone).runs()  # id, hash, error, notes, files failed
    assert {k: (r.hash, r.error, r.notes, r.files_failed) for k, r in store.Store(together).runs().items()} == {
        k: (r.hash, r.error, r.notes, r.files_failed) for k, r in runs.items()}
    assert any(r.error for r in runs.values())  # the run nothing of which could be read


def test_job_reports_rendered_from_a_batch_are_those_of_runs_alone(mixed_fleet: Path) -> None:
    from toranalyze.fleet.runs import find_runs

    runs = [r for r in find_runs([str(mixed_fleet)]) if r.id.split("/")[1] in ("sim", "copies", "broken")]
    batch = BatchTask(tuple(RunTask(r, f"h{i}", RunOptions()) for i, r in enumerate(runs)))
    got, want = analyze_batch(batch), _alone(batch)
    assert len(got) == len(want) >= 5
    for g, w in zip(got, want, strict=True):
        assert (g.run.id, g.error, g.notes, g.files_failed) == (w.run.id, w.error, w.notes, w.files_failed)
        assert g.report_html == w.report_html, g.run.id
        assert (g.report_html is None) == (w.error is not None)
        for t in TABLES:
            assert_frame_equal(g.tables.get(t), w.tables.get(t), check_exact=True)


def test_a_batch_that_fails_is_analysed_run_by_run(mixed_fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = [Run("years/y2023", str(mixed_fleet / "years" / "y2023"), ("nodes/gpu-001/kern.log", "slurm-4242.out")),
            Run("years/y2025", str(mixed_fleet / "years" / "y2025"), ("nodes/gpu-001/kern.log", "slurm-4242.out"))]
    task = BatchTask(tuple(RunTask(r, f"h{i}", NO_REPORT) for i, r in enumerate(runs)))

    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("a bug met on one run's records")

    with monkeypatch.context() as m:
        m.setattr(batch_mod, "analyze_events", boom)
        got = analyze_batch(task)
    want = _alone(task)
    assert [o.error for o in got] == [None, None]
    for g, w in zip(got, want, strict=True):
        for t in TABLES:
            assert_frame_equal(g.tables.get(t), w.tables.get(t), check_exact=True)
    years = [o.tables.incidents["t_first_error"].dt.year().to_list() for o in got]
    assert years == [[2023], [2025]]  # each run's year-less kernel line dated by its own run


def test_runs_of_one_folder_never_share_a_batch() -> None:
    def task(rid: str, path: str) -> RunTask:
        return RunTask(Run(rid, path, (rid,)), rid, NO_REPORT)

    tasks = [task("a.log", "/logs"), task("b.log", "/logs"), task("r1", "/runs/r1"), task("c.log", "/logs")]
    got = batches(tasks, {}, max_runs=10)
    for b in got:
        paths = [t.run.path for t in b.tasks]
        assert len(paths) == len(set(paths))
    assert sorted(t.run.id for b in got for t in b.tasks) == sorted(t.run.id for t in tasks)


def test_batches_are_bounded_by_runs_and_bytes() -> None:
    tasks = [RunTask(Run(f"r{i}", f"/runs/r{i}", ("x",)), str(i), NO_REPORT) for i in range(10)]
    sizes = {f"r{i}": 100 for i in range(10)}
    assert [len(b.tasks) for b in batches(tasks, sizes, max_runs=4)] == [4, 4, 2]
    assert [len(b.tasks) for b in batches(tasks, sizes, max_runs=100, max_bytes=250)] == [2, 2, 2, 2, 2]
    big = dict(sizes, r0=10_000)  # a run larger than the bound alone is a batch of its own
    assert [len(b.tasks) for b in batches(tasks, big, max_runs=100, max_bytes=250)] == [1, 2, 2, 2, 2, 1]


# ---- the global steps keep scopes apart (what the batches' equality rests on) ----


def _events(rows: list[dict[str, Any]]) -> pl.DataFrame:
    from toranalyze.reconstruct.analysis import events_frame

    return events_frame(rows).with_columns(pl.Series("scope", [r.get("scope", 0) for r in rows], pl.UInt32))


def test_a_path_names_a_node_of_its_own_scope_only() -> None:
    from toranalyze.reconstruct.attribution import attribute_nodes

    ev = _events([
        {"ts": 0, "file": "/f/a/dmesg/gpu-x9.log", "source": "kernel", "kind": "error", "scope": 0},
        {"ts": 0, "file": "/f/b/slurmctld.log", "source": "slurm", "kind": "job_start", "node": "gpu-x9", "scope": 1},
        {"ts": 0, "file": "/f/b/dmesg/gpu-x9.log", "source": "kernel", "kind": "error", "scope": 1},
    ])
    assert attribute_nodes(ev)["node"].to_list() == [None, "gpu-x9", "gpu-x9"]
    assert attribute_nodes(ev.drop("scope"))["node"].to_list() == ["gpu-x9"] * 3  # one scope: the name is known


def test_a_folder_joins_the_only_job_of_its_own_scope() -> None:
    from toranalyze.reconstruct.jobs import assign_jobs, with_time

    rows = []
    for scope, run in enumerate(("a", "b")):
        rows += [
            {"ts": 0, "file": f"/f/{run}/job/slurm-7.out", "source": "trainer", "kind": "init", "job_id": "7",
             "scope": scope},
            {"ts": 5, "file": f"/f/{run}/job/slurm-7.out", "source": "trainer", "kind": "step", "step": 1,
             "job_id": "7", "scope": scope},
            {"ts": 9, "file": f"/f/{run}/kernel/kern.log", "source": "kernel", "kind": "error", "scope": scope},
        ]
    ev, jobs = assign_jobs(with_time(_events(rows)))
    assert sorted(jobs["job"].to_list()) == ["/f/a/job::7", "/f/b/job::7"]
    assert ev.filter(pl.col("source") == "kernel")["job"].to_list() == ["/f/a/job::7", "/f/b/job::7"]


def test_clock_references_are_taken_in_each_scope() -> None:
    from toranalyze.reconstruct.skew import clock_offsets

    rows = []
    for scope, shift in ((0, 0), (1, 120)):  # scope 1: its trainer's clock is two minutes ahead
        for k in range(4):
            for file, src, dt in (("ctl.log", "slurm", 0), ("out.log", "trainer", shift)):
                rows.append({"ts": 600 * k + dt, "file": f"/f/{scope}/{file}", "source": src, "scope": scope,
                             "kind": "job_start" if k == 0 else "step", "job_id": "7", "step": k, "attempt": 0})
    off = dict(clock_offsets(_events(rows)).select("unit", "offset_s").iter_rows())
    assert off == {"/f/0/ctl.log": 0.0, "/f/0/out.log": 0.0, "/f/1/ctl.log": 0.0, "/f/1/out.log": 120.0}
