"""Docs that are generated from code, and the README's commands, stay true."""

from __future__ import annotations

import re
from pathlib import Path

from toranalyze.docgen import events_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_events_reference_is_current() -> None:
    assert (ROOT / "docs" / "events.md").read_text() == events_markdown(), "run: toranalyze schema --markdown > docs/events.md"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", readme, re.S)
    test_cmds = [line.strip() for b in blocks for line in b.splitlines() if "pytest" in line]
    assert test_cmds, "README must show the test command"
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmds[0] in ci, f"{test_cmds[0]!r} is not what .ci/run runs"
