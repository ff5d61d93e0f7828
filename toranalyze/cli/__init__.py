"""Command line: the only place that touches the terminal and writes outputs.

Library errors (``ToranalyzeError``) become one user message here, naming
``file:line`` when known and the next step to take.
"""

from __future__ import annotations

import sys
from typing import Any

import click
import polars as pl
from rich.table import Table

from toranalyze import __version__
from toranalyze.cli.common import (
    err,
    ingest_options,
    ingest_to,
    out,
    plain,
    print_warnings,
    reading,
    redact_options,
    workers_options,
    write_summary,
)
from toranalyze.errors import NothingReadError, ToranalyzeError
from toranalyze.fleet.pipeline import NothingRead, OutputOptions, ingest_notes
from toranalyze.ingest.pipeline import IngestOptions, IngestResult, Workers
from toranalyze.ingest.registry import default_registry
from toranalyze.storage import output_dir

__all__ = ["cli"]  # the command group; launch.py runs it


def _print_files(result: IngestResult) -> None:
    table = Table(title="inputs", show_lines=False)
    for col in ("file", "parser", "lines", "events", "coverage"):
        table.add_column(col, overflow="fold")
    for f in result.files:
        cov = "-" if f.coverage is None else f"{f.coverage:.1%}"
        table.add_row(plain(f.path), f.error and "[red]failed[/]" or plain(f.parser), str(f.lines), str(f.events), cov)
    out.print(table)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="toranalyze")
def cli() -> None:
    """Forensic reliability analysis of LLM training runs."""


@cli.command("ingest")
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", required=True, metavar="DIR|URL",
              help="Output directory, or an object-store URL (s3://bucket/prefix, docs/storage.md).")
@ingest_options
@workers_options("Worker processes reading files in parallel", "Where files are read: local processes, or Ray tasks")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or tables.")
@redact_options
def ingest_cmd(paths: tuple[str, ...], out_dir: str, ingest: IngestOptions, workers: Workers, quiet: bool,
               output: OutputOptions) -> None:
    """Parse logs (paths or URLs) into DIR/events.parquet and DIR/summary.json (per-file coverage).

    Secrets are redacted from all three outputs (the table, the summary and the terminal) unless
    --no-redact."""
    with output_dir(out_dir) as target:  # a URL: written here, uploaded when complete
        with reading(quiet) as on_file:
            # Streamed to the table file block by block: memory does not grow with the input.
            result = ingest_to(target / "events.parquet", paths, ingest, workers, redact=output.redact,
                               on_file=on_file)
        s, warnings = ingest_notes(result, output)  # counts the table's rows: before a staging folder goes
        print_warnings(warnings)
        if result.files_read == 0:
            raise NothingReadError("no input could be read",
                                   hint="check the paths; the warnings above say why each failed")
        write_summary(s, target)
    if not quiet:
        _print_files(result)
    out.print(f"{s['events']} events from {s['files_read']}/{s['files']} files "
              f"(coverage {s['coverage']:.1%}) -> {plain(out_dir)}" if s["coverage"] is not None
              else f"-> {plain(out_dir)}", soft_wrap=True)


@cli.command("coverage")
@click.argument("paths", nargs=-1, required=True)
@click.option("--top", type=int, default=20, show_default=True, help="How many line shapes to show.")
def coverage_cmd(paths: tuple[str, ...], top: int) -> None:
    """Show the lines of text logs that no parser recognised, grouped by shape."""
    from toranalyze.cli.reports import uncovered

    try:
        missed, problems = uncovered(paths)
    except NothingRead as exc:
        print_warnings(exc.warnings)
        raise
    print_warnings(problems)
    if missed is None:
        out.print("every non-blank line of the text logs was recognised")
        return
    from toranalyze.ingest.coverage import line_shapes

    shapes = line_shapes(missed, top)
    table = Table(title=f"{missed.height} unrecognised lines; most common shapes")
    table.add_column("count", justify="right")
    table.add_column("shape", overflow="fold")
    table.add_column("first seen", overflow="fold")
    for row in shapes.iter_rows(named=True):
        table.add_row(str(row["count"]), row["shape"], str(row["first"]))
    out.print(table)


@cli.command("parsers")
def parsers_cmd() -> None:
    """List every registered parser with its distribution and version."""
    table = Table()
    for col in ("name", "source", "distribution", "version", "claims whole files", "entry point"):
        table.add_column(col)
    for e in default_registry().entries():
        doc_claims = "yes" if type(e.parser).sniff is not _base_sniff() else "no"
        table.add_row(e.parser.name, e.parser.source, e.distribution, e.version, doc_claims, e.entry_point)
    out.print(table)


def _base_sniff() -> Any:
    from toranalyze.ingest.contract import Parser

    return Parser.sniff


@cli.command("rules")
@click.option("--rules", "rules", multiple=True, type=click.Path(dir_okay=False), help="Also load this file.")
def rules_cmd(rules: tuple[str, ...]) -> None:
    """List the classification rules in the order they are tried."""
    from toranalyze.ingest.classify import load_rules

    table = Table()
    for col in ("id", "class", "source", "kind", "code/state", "match", "from"):
        table.add_column(col, overflow="fold")
    for r in load_rules(rules):
        table.add_row(r.id, r.failure_class, ",".join(r.source), ",".join(r.kind),
                      ",".join(r.code + r.state), r.match or "", r.origin)
    out.print(table)


@cli.command("schema")
@click.option("--markdown", is_flag=True, help="Print the reference page docs/events.md.")
def schema_cmd(markdown: bool) -> None:
    """Print the event table's columns with their types and meaning."""
    from toranalyze.schema import COLUMN_DOCS, EVENT_SCHEMA

    if markdown:
        from toranalyze.docgen import events_markdown

        click.echo(events_markdown(), nl=False)
        return
    for name, dtype in EVENT_SCHEMA.items():
        out.print(f"[bold]{name}[/] ({dtype}): {COLUMN_DOCS[name]}")


def _register_commands() -> None:
    """Commands that live beside their stage. They ship in every install: an import error here is a
    broken install and must show, never hide the command."""
    from toranalyze.cli.analyze import analyze_cmd
    from toranalyze.cli.fleet import fleet
    from toranalyze.cli.plan import plan_cmd
    from toranalyze.simulate.command import simulate

    cli.add_command(analyze_cmd)
    cli.add_command(simulate)
    cli.add_command(fleet)
    cli.add_command(plan_cmd)


_register_commands()


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        err.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except ToranalyzeError as exc:
        where = exc.where()
        err.print(f"[red]error[/]: {plain(where + ': ' if where else '')}{plain(exc.message)}", soft_wrap=True)
        if exc.hint:
            err.print(f"  next: {plain(exc.hint)}", soft_wrap=True)
        sys.exit(2)
    except pl.exceptions.PolarsError as exc:  # should not happen; say so plainly
        err.print(f"[red]internal error[/] (please report): {type(exc).__name__}: {exc}")
        sys.exit(3)
