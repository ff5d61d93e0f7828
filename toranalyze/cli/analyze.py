"""``toranalyze analyze``: one run's logs -> its tables, rates.json, report.html and a summary."""

from __future__ import annotations

from pathlib import Path

import click

from toranalyze.cli.common import ingest_options, out, redact_option, run_ingest, write_ingest
from toranalyze.cli.reports import unrecognised_shapes, write_job_report
from toranalyze.fleet.rates import build_rates, dumps
from toranalyze.fleet.store import write_table, write_text
from toranalyze.fleet.tables import run_tables
from toranalyze.reconstruct.analysis import Analysis, AnalysisOptions, analyze_events
from toranalyze.report.names import input_root, job_keys, rename_jobs, short_job_names
from toranalyze.report.text import print_summary

TABLES = ("attempts", "incidents", "slow_periods", "tor")


def default_out(paths: tuple[str, ...]) -> Path:
    first = Path(paths[0].rstrip("/"))
    name = first.stem if first.is_file() else first.name
    return Path("reports") / (name or "run")


def write_run_rates(analysis: Analysis, target: Path, inputs: tuple[str, ...]) -> Path:
    """The run's own rates.json: the fleet's fits over this one run's tables (the same
    ``run_tables`` as ``toranalyze fleet``, so one run and a fleet of one agree)."""
    t = run_tables(target.name, input_root(inputs), analysis)
    path = target / "rates.json"
    write_text(dumps(build_rates(t.jobs, t.attempts, t.incidents, t.exposure)), path)
    return path


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Output directory [default: reports/<run name>/].")
@ingest_options
@click.option("--ideal-step-time", type=float, default=None,
              help="Ideal seconds per step; default: the median of the job's healthy steps.")
@click.option("--no-report", is_flag=True, help="Do not write report.html.")
@redact_option
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors and the report's path.")
def analyze_cmd(paths: tuple[str, ...], out_dir: str | None, tz: str, year: int | None, parser: str | None,
                rules: tuple[str, ...], jobs: int | None, engine: str, ray_address: str | None,
                ideal_step_time: float | None, no_report: bool, no_redact: bool, quiet: bool) -> None:
    """Ingest logs, reconstruct incidents, compute each job's TOR ledger and write report.html.

    Job names in the tables, the terminal and the report are the short names of
    toranalyze.report.names (the job's name, prefixed by its folder only when ambiguous)."""
    target = Path(out_dir) if out_dir else default_out(paths)
    redact = not no_redact
    result = run_ingest(paths, tz, year, parser, rules, quiet, jobs, engine, ray_address)
    write_ingest(result, target, redact=redact)
    analysis = analyze_events(result.events, AnalysisOptions(ideal_step_time_s=ideal_step_time))
    analysis = rename_jobs(analysis, short_job_names(job_keys(analysis), paths))
    for name in TABLES:
        write_table(getattr(analysis, name), target / f"{name}.parquet")
    write_run_rates(analysis, target, paths)  # docs/rates.md
    if not quiet:
        print_summary(analysis, out, redact=redact)
        out.print(f"tables written to {target}/")
    if no_report:
        if quiet:
            out.print(f"tables: {target}/", highlight=False, soft_wrap=True)
        return
    summary = result.summary()
    report = write_job_report(target, analysis, result.events, summary, redact=redact,
                              shapes=unrecognised_shapes(paths, summary["lines"]))
    out.print(f"report: {report}", highlight=False, soft_wrap=True)
