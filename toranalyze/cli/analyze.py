"""``toranalyze analyze``: one run's logs -> its tables, rates.json, report.html and a summary."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click

from toranalyze import storage
from toranalyze.cli.common import out, print_warnings, reading, run_options, workers_options, write_summary

if TYPE_CHECKING:  # the stages load when the command runs: `analyze --help` stays light
    from toranalyze.fleet.pipeline import RunOptions, RunProducts
    from toranalyze.ingest.pipeline import Workers

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


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", default=None, metavar="DIR|URL",
              help="Output directory or object-store URL [default: reports/<run name>/].")
@run_options("Do not write report.html.")
@workers_options("Worker processes reading files in parallel",
                 "Where files are read and jobs reconstructed: local processes, or Ray tasks")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors and the report's path.")
def analyze_cmd(paths: tuple[str, ...], out_dir: str | None, options: RunOptions, workers: Workers,
                quiet: bool) -> None:
    """Analyse one run's logs: incidents, TOR ledger, report.html.

    Ingests PATHS (files, folders, globs or URLs), reconstructs the jobs and their incidents,
    computes each job's TOR ledger and writes the tables, rates.json and report.html. A job is
    named by its own name, prefixed by its folder only when two jobs share it."""
    from toranalyze.cli.reports import unrecognised_shapes
    from toranalyze.fleet.pipeline import NothingRead, RunInput, analyze_run
    from toranalyze.reconstruct.job_names import input_root
    from toranalyze.report.text import print_summary

    shown = out_dir.rstrip("/") if out_dir else str(default_out(paths))
    run = RunInput(storage.name(shown), paths, input_root(paths), line_shapes=partial(unrecognised_shapes, paths))
    with storage.output_dir(shown) as target:  # a URL: written here, uploaded when complete
        with reading(quiet) as on_file:
            try:
                products = analyze_run(run, options, workers, on_file)
            except NothingRead as exc:
                print_warnings(exc.warnings)
                raise
        print_warnings(products.warnings)
        report = write_run(products, target)
    if not quiet:
        print_summary(products.analysis, out)
        out.print(f"tables written to {shown}/")
    if report:
        out.print(f"report: {storage.join(shown, report)}", highlight=False, soft_wrap=True)
    elif quiet:
        out.print(f"tables: {shown}/", highlight=False, soft_wrap=True)


def write_run(products: RunProducts, target: Path) -> str | None:
    """Every output of ``analyze`` written into the folder ``target``; the report's file name, if any."""
    from toranalyze.cli.reports import write_page
    from toranalyze.fleet.pipeline import REPORT
    from toranalyze.fleet.rates import dumps
    from toranalyze.fleet.store import write_table, write_text

    target.mkdir(parents=True, exist_ok=True)
    products.events.write_parquet(target / "events.parquet")
    write_summary(products.summary, target)
    for name in TABLES:
        write_table(getattr(products.analysis, name), target / f"{name}.parquet")
    write_text(dumps(products.rates()), target / "rates.json")  # docs/rates.md
    if products.report_html is None:
        return None
    return write_page(target, products.report_html, REPORT).name
