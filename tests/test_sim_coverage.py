"""The parsers recognise every line the simulator writes, except its deliberate noise."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from toranalyze.ingest.coverage import uncovered_lines
from toranalyze.ingest.discover import discover
from toranalyze.ingest.registry import default_registry
from toranalyze.ingest.streams import read_head
from toranalyze.simulate.command import simulate
from toranalyze.simulate.emit_kernel import NOISE as KERNEL_NOISE
from toranalyze.simulate.writer import PY_WARNINGS

ROOT = Path(__file__).resolve().parents[1]
# The simulator's benign chatter: unrelated kernel messages, Python warnings, the launcher banner.
NOISE = [n for n in (*KERNEL_NOISE, *PY_WARNINGS) if n.strip()] + ["torch/distributed/run.py:"]


def _coverage_of_non_noise(run: Path) -> tuple[int, int, pl.DataFrame]:
    registry = default_registry()
    total = missed = 0
    misses = []
    files, _ = discover([str(run)])
    for f in files:
        mode, parsers = registry.choose(f.path, read_head(f.path).decode("utf-8", "replace"))
        text = Path(f.path).read_text(errors="replace").splitlines()
        is_noise = [any(n in line for n in NOISE) for line in text]
        total += sum(1 for line, noisy in zip(text, is_noise, strict=True) if line.strip() and not noisy)
        if mode != "text":
            continue  # a document parser reads the whole file
        lost = uncovered_lines(f.path, parsers).filter(
            ~pl.col("raw").map_elements(lambda r: any(n in r for n in NOISE), return_dtype=pl.Boolean)
        )
        missed += lost.height
        misses.append(lost.with_columns(pl.lit(f.path).alias("file")))
    return total, missed, pl.concat(misses) if misses else pl.DataFrame()


@pytest.mark.parametrize("flavor", ["slurm", "kubernetes"])
def test_simulated_lines_are_recognised(tmp_path: Path, flavor: str) -> None:
    if flavor == "slurm":
        run = ROOT / "sample_logs" / "gpt-small"
    else:
        run = tmp_path / "k8s"
        res = CliRunner().invoke(simulate, ["--seed", "3", "--preset", "small", "--flavor", flavor, "--out", str(run)])
        if res.exit_code != 0 and "flavor" in res.output:
            pytest.skip(f"the simulator has no {flavor} flavour: {res.output.strip()}")
        assert res.exit_code == 0, res.output
    total, missed, misses = _coverage_of_non_noise(run)
    assert total > 1000
    coverage = 1 - missed / total
    assert coverage >= 0.99, (coverage, misses.head(20).to_dicts())
