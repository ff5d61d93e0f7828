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


def test_every_module_the_docs_name_exists() -> None:
    """A path like ``toranalyze/ingest/clock.py`` or ``reconstruct/contracts.py`` in the README or
    docs/ names a file of the tree (a moved module leaves no stale pointer behind)."""
    packages = [p.name for p in (ROOT / "toranalyze").iterdir() if p.is_dir() and not p.name.startswith("_")]
    pattern = re.compile(r"`((?:toranalyze/|parsers/|(?:" + "|".join(packages) + r")/)[\w/]+\.py)")
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for path in pattern.findall(doc.read_text()):
            where = [ROOT / path, ROOT / "toranalyze" / path]
            if not any(p.exists() for p in where):
                missing.append(f"{doc.name}: {path}")
    assert not missing, "docs name modules that do not exist: " + ", ".join(missing)
