"""Shared by the fleet tests: small simulated fleets of 30-minute jobs."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from toranalyze.cli import cli


def simulated_fleet(factory: pytest.TempPathFactory, name: str, jobs: int, seed: int) -> Path:
    """A folder of ``jobs`` runs of the ``fleet`` preset (one per job), made once per test module."""
    root = factory.mktemp(name) / "fleet"
    res = CliRunner().invoke(cli, ["simulate", "--out", str(root), "--preset", "fleet", "--jobs", str(jobs),
                                   "--seed", str(seed), "--duration", "30m"])
    assert res.exit_code == 0, res.output
    return root


def touch(root: Path, *rels: str) -> None:
    """Files at these paths under ``root``, each holding its own path (folders made as needed)."""
    for rel in rels:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel + "\n")
