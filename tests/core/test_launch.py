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
    assert analysis_allocator(argv, env)
    assert env == {MALLOC_ENV: ANALYSIS_MALLOC_CONF}


@pytest.mark.parametrize("argv", [[], ["ingest", "analyze"], ["fleet", "runs/"], ["simulate"], ["--version"]])
def test_other_commands_keep_the_default(argv: list[str]) -> None:
    env: dict[str, str] = {}
    assert not analysis_allocator(argv, env)
    assert env == {}


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
