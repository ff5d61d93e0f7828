"""The console entry point's allocator settings: for ``analyze`` only, never over the user's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from toranalyze.launch import ANALYSIS_MALLOC_CONF, MALLOC_ENV, analysis_allocator


@pytest.mark.parametrize("argv", [["analyze", "logs/"], ["analyze", "-j", "2", "x"], ["--quiet-flag", "analyze"]])
def test_analysis_commands_get_the_setting(argv: list[str]) -> None:
    env: dict[str, str] = {}
    assert analysis_allocator(argv, env, platform="linux")
    assert env == {MALLOC_ENV: ANALYSIS_MALLOC_CONF}


@pytest.mark.parametrize("argv", [[], ["ingest", "analyze"], ["fleet", "runs/"], ["simulate"], ["--version"]])
def test_other_commands_keep_the_default(argv: list[str]) -> None:
    env: dict[str, str] = {}
    assert not analysis_allocator(argv, env)
    assert env == {}


def test_only_on_linux() -> None:
    env: dict[str, str] = {}
    assert not analysis_allocator(["analyze", "x"], env, platform="darwin")
    assert env == {}
    assert analysis_allocator(["analyze", "x"], env, platform="linux")


def test_a_users_setting_is_kept() -> None:
    env = {MALLOC_ENV: "narenas:2"}
    assert not analysis_allocator(["analyze", "x"], env)
    assert env == {MALLOC_ENV: "narenas:2"}


def test_the_setting_leaves_the_environment_once_polars_loaded() -> None:
    # Worker processes started by the command (file readers) must get the user's environment.
    code = (
        "import os, sys\n"
        "sys.argv = ['toranalyze', 'analyze', '--help']\n"
        "from toranalyze.launch import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print('RESULT', os.environ.get({MALLOC_ENV!r}), 'polars' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != MALLOC_ENV}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "RESULT None True"


def test_the_benchmark_gives_its_analyze_child_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    # polars, once loaded, puts its own default into os.environ; the benchmark must not take it
    # for a user's setting (it did, and measured the default under the setting's name).
    import importlib.util
    import json
    from pathlib import Path

    import polars  # noqa: F401  (loaded in this process, as in the benchmark's)

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "ingest_speed.py"
    spec = importlib.util.spec_from_file_location("ingest_speed_under_test", path)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "_START_ENV", {k: v for k, v in os.environ.items() if k != MALLOC_ENV})
    monkeypatch.setenv(MALLOC_ENV, "dirty_decay_ms:500,muzzy_decay_ms:1000")  # polars' own, as it sets it
    seen: dict[str, str | None] = {}

    class _Done:
        stdout = json.dumps({"ok": True}) + "\n"

    def fake_run(cmd: list[str], **kw: object) -> _Done:
        env = kw.get("env")
        assert isinstance(env, dict)
        seen[cmd[-2]] = env.get(MALLOC_ENV)
        return _Done()

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    bench.run_child("analyze", ["events.parquet", "2"])
    bench.run_child("baseline_a", ["x.log"])
    polars_own = "dirty_decay_ms:500,muzzy_decay_ms:1000"
    wanted = ANALYSIS_MALLOC_CONF if sys.platform.startswith("linux") else None
    assert seen == {"analyze": wanted, "baseline_a": polars_own}
