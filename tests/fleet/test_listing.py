"""Listing a fleet's runs: the same runs, files, stamps and problems whether one process walks
the folders or several take shares of them; links to runs resolved as ``realpath`` does; and
the content hash stable across versions (a store is not analysed again after an upgrade)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fleet.conftest import touch
from toranalyze.errors import InputError
from toranalyze.fleet import runs as runs_mod
from toranalyze.fleet.runs import list_runs
from toranalyze.fleet.stamps import content_hash, hash_runs


def _hostile_fleet(root: Path) -> None:
    """Runs of several shapes, with what a real folder of runs holds besides: links to runs (absolute,
    relative, through a linked folder, a chain), a link back up, a dangling link, a FIFO, names that
    are not UTF-8, hidden folders."""
    for i in range(12):
        touch(root / "runs", f"r{i:02d}/slurm-{i}.out", f"r{i:02d}/nodes/gpu-{i}/kern.log",
               f"r{i:02d}/logs/rank-0.log")
    touch(root / "runs", "deep/a/b/pod.log", "deep/a/pods/x.yaml", ".hidden/x.log", "r03/.cache/y.log")
    elsewhere = root / "elsewhere"
    touch(elsewhere, "target/train.log", "target/nodes/n1/kern.log")
    os.symlink(elsewhere / "target", root / "runs" / "linked-abs")
    os.symlink(Path("..") / "elsewhere" / "target", root / "runs" / "linked-rel")
    os.symlink(elsewhere, root / "hop")
    os.symlink(root / "hop" / "target", root / "runs" / "linked-hop")
    os.symlink(root / "runs" / "linked-abs", root / "runs" / "linked-chain")
    os.symlink(root / "runs", root / "runs" / "deep" / "loop")
    os.symlink(root / "nowhere", root / "runs" / "r01" / "dangling.log")
    os.mkfifo(root / "runs" / "r02" / "pipe.log")
    bad = os.fsencode(root / "runs" / "r04") + b"/bad-\xff.log"
    with open(bad, "wb") as f:
        f.write(b"x\n")
    os.mkdir(os.fsencode(root / "runs") + b"/folder-\xfe")


def test_shares_walked_by_workers_give_what_one_process_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hostile_fleet(tmp_path)
    one: list[InputError] = []
    alone = list_runs([str(tmp_path / "runs")], problems=one, jobs=1)
    monkeypatch.setattr(runs_mod, "PARALLEL_AT", 2)  # (the folder has 18 sub-folders)
    many: list[InputError] = []
    shared = list_runs([str(tmp_path / "runs")], problems=many, jobs=2)
    assert shared.runs == alone.runs and shared.files.equals(alone.files)
    assert [(p.message, p.path) for p in many] == [(p.message, p.path) for p in one]
    ids = [r.id for r in alone.runs]
    assert ids == sorted(ids) and len(ids) == 18  # 12, deep/a/b and deep/a/pods, 4 links
    assert {"runs/linked-abs", "runs/linked-rel", "runs/linked-hop", "runs/linked-chain"} <= set(ids)
    reasons = " | ".join(p.message for p in one)
    for reason in ("symlink loop", "not a regular file (a FIFO)", "not valid UTF-8", "cannot read"):
        assert reason in reasons
    r04 = alone.files.filter(alone.files["run"] == "runs/r04")
    assert r04["name"].to_list() == ["logs/rank-0.log", "nodes/gpu-4/kern.log", "slurm-4.out"]
    stat = os.stat(tmp_path / "runs" / "r04" / "slurm-4.out")
    assert r04.row(2)[2:4] == (stat.st_size, stat.st_mtime_ns)


def test_a_link_resolves_as_realpath_does(tmp_path: Path) -> None:
    _hostile_fleet(tmp_path)
    for name in ("linked-abs", "linked-rel", "linked-hop", "linked-chain", "r05", "deep/loop"):
        path = str(tmp_path / "runs" / name)
        runs_mod._real_folder.cache_clear()
        assert runs_mod._realpath(path) == os.path.realpath(path)


def test_the_content_hash_is_the_one_earlier_versions_stored(tmp_path: Path) -> None:
    """Pinned: a change of the hash's recipe would analyse every stored run again."""
    touch(tmp_path / "fleet", "r1/a.log", "r1/nodes/n1/kern.log")
    listed = list_runs([str(tmp_path / "fleet")])
    (run,) = listed.runs
    assert content_hash(run, "salt") == "90d1f40f4411cef744a1abf8d95fa769"
    hashes, stamps = hash_runs(listed.runs, listed.files, "salt")
    assert hashes == {"fleet/r1": content_hash(run, "salt")}
    assert stamps["name"].to_list() == ["a.log", "nodes/n1/kern.log"] and stamps["digest"].null_count() == 0
