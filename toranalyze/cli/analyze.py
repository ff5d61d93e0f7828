"""``toranalyze analyze``: one run's logs -> its tables, rates.json, report.html and a summary."""

from __future__ import annotations

from pathlib import Path

import click

from toranalyze import storage
from toranalyze.cli.common import ingest_options, out, redact_option, run_ingest, write_ingest
from toranalyze.cli.reports import unrecognised_shapes, write_job_report
from toranalyze.fleet.rates import build_rates, dumps
from toranalyze.fleet.store import write_table, write_text
from toranalyze.fleet.tables import run_tables
from toranalyze.ingest.engine import default_jobs
from toranalyze.reconstruct.analysis import Analysis, AnalysisOptions, analyze_events
from toranalyze.report.names import input_root, job_keys, rename_jobs, short_job_names
from toranalyze.report.text import print_summary

TABLES = ("attempts", "incidents", "slow_periods", "tor")


def default_out(paths: tuple[str, ...]) -> Path:
    if storage.is_url(paths[0]):
        found = storage.stat(paths[0])
        name = storage.name(paths[0])
        name = Path(name).stem if found is not None and not found.is_dir else name
        return Path("reports") / (name or "run")
    first = Path(paths[0].rstrip("/"))
    name = first.stem if first.is_file() else first.name
    return Path("reports") / (name or "run")


def write_run_rates(analysis: Analysis, target: Path, inputs: tuple[str, ...], run: str | None = None) -> Path:
    """The run's own rates.json: the fleet's fits over this one run's tables (the same
    ``run_tables`` as ``toranalyze fleet``, so one run and a fleet of one agree). ``run``: the
    run's name (default: the folder's)."""
    t = run_tables(run or target.name, input_root(inputs), analysis)
    path = target / "rates.json"
    write_text(dumps(build_rates(t.jobs, t.attempts, t.incidents, t.exposure)), path)
    return path


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", default=None, metavar="DIR|URL",
              help="Output directory or object-store URL [default: reports/<run name>/].")
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
    shown = out_dir.rstrip("/") if out_dir else str(default_out(paths))
    options = AnalysisOptions(ideal_step_time_s=ideal_step_time)
    with storage.output_dir(shown) as target:  # a URL: written here, uploaded when complete
        report = _analyze_into(target, storage.name(shown), paths, options, tz, year, parser, rules, jobs, engine,
                               ray_address, not no_report, not no_redact, quiet)
    if not quiet:
        out.print(f"tables written to {shown}/")
    if report:
        out.print(f"report: {storage.join(shown, report)}", highlight=False, soft_wrap=True)
    elif quiet:
        out.print(f"tables: {shown}/", highlight=False, soft_wrap=True)


def _analyze_into(target: Path, run: str, paths: tuple[str, ...], options: AnalysisOptions, tz: str,
                  year: int | None, parser: str | None, rules: tuple[str, ...], jobs: int | None, engine: str,
                  ray_address: str | None, report: bool, redact: bool, quiet: bool) -> str | None:
    """Every output of ``analyze`` written into the folder ``target``; the report's file name, if written."""
    result = run_ingest(paths, tz, year, parser, rules, quiet, jobs, engine, ray_address)
    write_ingest(result, target, redact=redact)
    # With --engine ray, groups of jobs are reconstructed as Ray tasks too (local: in this process).
    analysis = analyze_events(result.events, options, engine=engine, jobs=jobs or default_jobs(), address=ray_address)
    analysis = rename_jobs(analysis, short_job_names(job_keys(analysis), paths))
    for name in TABLES:
        write_table(getattr(analysis, name), target / f"{name}.parquet")
    write_run_rates(analysis, target, paths, run)  # docs/rates.md
    if not quiet:
        print_summary(analysis, out, redact=redact)
    if not report:
        return None
    summary = result.summary()
    page = write_job_report(target, analysis, result.events, summary, redact=redact,
                            shapes=unrecognised_shapes(paths, summary["lines"]))
    return page.name
