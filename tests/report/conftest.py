"""Fixtures of the report tests: the sample run analysed once, and a hostile copy of it.

The hostile copy carries markup and secrets where logs can put them: a node name, a file name,
the job's name and the evidence lines. Each hostile script sets ``window.__pwned``; a report is
safe when that never happens and the text shows as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from toranalyze.ingest.pipeline import ingest
from toranalyze.reconstruct.analysis import Analysis, analyze_events
from toranalyze.reconstruct.job_names import rename_jobs
from toranalyze.report.job import JobReportInput
from toranalyze.report.redact import redact_frames, redact_json, redact_strings

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_logs"
SAMPLE = SAMPLES / "gpt-small"

SCRIPT = '<script>window.__pwned="script"</script>'
IMG = "<img src=x onerror=\"window.__pwned='img'\">"
SVG = "<svg onload=\"window.__pwned='svg'\">"
SECRETS = {
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345": "huggingface",
    "ghp_0123456789abcdefghijABCDEFGHIJ012345": "github",
    "AKIAIOSFODNN7EXAMPLE": "aws",
    "Bearer eyJhbGciOiJIUzI1NiJ9.payload.signature": "bearer",
    "password=hunter2secret": "password",
}
HOSTILE_NODE = f"gpu-004{IMG}"
HOSTILE_FILE_PART = f"slurm-731400{SCRIPT}.out"
HOSTILE_JOB = f"gpt{SVG}{SCRIPT}"


@dataclass
class Run:
    analysis: Analysis
    events: pl.DataFrame
    summary: dict[str, Any]


@pytest.fixture(scope="session")
def both_samples() -> Run:
    """Both sample runs (Slurm and Kubernetes flavours of one history), analysed in one pass."""
    result = ingest([str(SAMPLES)])
    return Run(analyze_events(result.events), result.events, result.summary())


@pytest.fixture(scope="session")
def sample_run(both_samples: Run) -> Run:
    """The Slurm sample run alone: its job, its events and its files."""
    prefix = str(SAMPLE) + "/"
    an = both_samples.analysis
    job = an.tor.filter(pl.col("path") == str(SAMPLE))["job"][0]
    keep = {k: (v.filter(pl.col("job") == job) if v is not None else None) for k, v in (
        ("attempts", an.attempts), ("incidents", an.incidents), ("slow_periods", an.slow_periods), ("tor", an.tor),
        ("progress", an.progress), ("checkpoints", an.checkpoints))}
    summary = dict(both_samples.summary)
    summary["per_file"] = [f for f in summary["per_file"] if f["path"].startswith(prefix)]
    return Run(Analysis(notes=[n for n in an.notes if prefix[:-1] + "::" in n], **keep),  # type: ignore[arg-type]
               both_samples.events.filter(pl.col("file").str.starts_with(prefix)), summary)


@pytest.fixture(scope="session")
def hostile_run(sample_run: Run) -> Run:
    """The sample run with markup in a node, a file and the job's name, and secrets in evidence."""
    ev = sample_run.events
    first = sample_run.analysis.incidents.sort("incident").row(0, named=True)["evidence"]
    refs = pl.DataFrame({"_ref": first}).with_columns(
        pl.col("_ref").str.extract(r"^(.*):(\d+)$", 1).alias("file"),
        pl.col("_ref").str.extract(r"^(.*):(\d+)$", 2).cast(pl.Int64).alias("line"),
        pl.lit(True).alias("_hit"),
    ).drop("_ref")
    payload = " ".join([SCRIPT, IMG, *SECRETS])
    ev = (
        ev.join(refs, on=["file", "line"], how="left")
        .with_columns(
            pl.when(pl.col("_hit")).then(pl.col("message") + " " + pl.lit(payload)).otherwise("message").alias("message"),
            pl.col("node").replace({"gpu-004": HOSTILE_NODE}),
            pl.col("file").str.replace("slurm-731400.out", HOSTILE_FILE_PART, literal=True),
        )
        .drop("_hit")
    )
    an = analyze_events(ev)
    an = rename_jobs(an, {an.tor["job"][0]: HOSTILE_JOB})
    summary = dict(sample_run.summary)
    summary["input_errors"] = [f"bad line {SCRIPT} with token {next(iter(SECRETS))}"]
    return Run(an, ev, summary)


def redacted_input(run: Run) -> JobReportInput:
    """The report's input as ``analyze`` hands it over with redaction on (the default): secrets
    taken out of every frame and the summary at the one point where a run's outputs are made."""
    return JobReportInput(redact_frames(run.analysis), redact_strings(run.events), redact_json(run.summary))
