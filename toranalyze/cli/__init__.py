"""Command line: the only place that touches the terminal and writes outputs.

Library errors (``ToranalyzeError``) become one user message here, naming
``file:line`` when known and the next step to take.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

import click

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

if TYPE_CHECKING:
    from toranalyze.fleet.pipeline import OutputOptions
    from toranalyze.ingest.pipeline import IngestOptions, IngestResult, Workers

__all__ = ["cli", "main"]  # the command group; launch.py runs main

# Commands kept in their own modules, imported only when one runs or shows its help, so that
# ``toranalyze --help`` loads no dataframe or plotting library. Name -> (module:attribute, the
# line shown for it in ``toranalyze --help``; set as the command's short help when it loads).
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("toranalyze.cli.analyze:analyze_cmd", "One run's logs -> tables, TOR ledger and report.html."),
    "fleet": ("toranalyze.cli.fleet:fleet", "Many runs -> the fleet store, rates.json and a report."),
    "plan": ("toranalyze.cli.plan:plan_cmd", "A future run's TOR, best interval and checkpoint strategy."),
    "simulate": ("toranalyze.simulate.command:simulate", "Simulate a run (or a fleet): real-format logs, truth.json."),
}


class LazyGroup(click.Group):
    """A group whose LAZY_COMMANDS are imported on first use. An import error is a broken
    install: it shows when the command is used, never hides the command."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in LAZY_COMMANDS:
            return super().get_command(ctx, cmd_name)
        target, short = LAZY_COMMANDS[cmd_name]
        module, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        if command.short_help is None:  # the listing's line (a test checks they agree)
            command.short_help = short
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing, with the lazy commands' lines from the table (nothing imported)."""
        rows = []
        for name in self.list_commands(ctx):
            if name in LAZY_COMMANDS and name not in self.commands:
                rows.append((name, LAZY_COMMANDS[name][1]))
            elif (command := self.get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _print_files(result: IngestResult) -> None:
    from rich.table import Table

    table = Table(title="inputs", show_lines=False)
    for col in ("file", "parser", "lines", "events", "coverage"):
        table.add_column(col, overflow="fold")
    for f in result.files:
        cov = "-" if f.coverage is None else f"{f.coverage:.1%}"
        table.add_row(plain(f.path), f.error and "[red]failed[/]" or plain(f.parser), str(f.lines), str(f.events), cov)
    out.print(table)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="toranalyze")
def cli() -> None:
    """Forensic reliability analysis of LLM training runs."""


@cli.command("ingest")
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", required=True, metavar="DIR|URL",
              help="Output directory, or an object-store URL (s3://bucket/prefix; toranalyze docs storage).")
@ingest_options
@workers_options("Worker processes reading files in parallel", "Where files are read: local processes, or Ray tasks")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or tables.")
@redact_options
def ingest_cmd(paths: tuple[str, ...], out_dir: str, ingest: IngestOptions, workers: Workers, quiet: bool,
               output: OutputOptions) -> None:
    """Parse logs into one event table.

    Reads PATHS (files, folders, globs or URLs) into DIR/events.parquet and DIR/summary.json
    (per-file coverage). Secrets are redacted from all three outputs (the table, the summary and
    the terminal) unless --no-redact."""
    from toranalyze.errors import NothingReadError
    from toranalyze.fleet.pipeline import ingest_notes
    from toranalyze.storage import output_dir

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
@click.option("--top", type=int, default=20, show_default=True, metavar="N", help="How many line shapes to show.")
def coverage_cmd(paths: tuple[str, ...], top: int) -> None:
    """Show the log lines no parser recognised, grouped by shape."""
    from rich.table import Table

    from toranalyze.cli.reports import uncovered
    from toranalyze.fleet.pipeline import NothingRead

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
    from rich.table import Table

    from toranalyze.ingest.registry import default_registry

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
@click.option("--rules", "rules", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Also load this rules file (TOML). Repeatable.")
def rules_cmd(rules: tuple[str, ...]) -> None:
    """List the classification rules in the order they are tried."""
    from rich.table import Table

    from toranalyze.ingest.classify import load_rules

    table = Table()
    for col in ("id", "class", "source", "kind", "code/state", "match", "from"):
        table.add_column(col, overflow="fold")
    for r in load_rules(rules):
        table.add_row(r.id, r.failure_class, ",".join(r.source), ",".join(r.kind),
                      ",".join(r.code + r.state), r.match or "", r.origin)
    out.print(table)


@cli.command("schema")
@click.option("--markdown", is_flag=True, help="Print the reference page (toranalyze docs events) from the code.")
def schema_cmd(markdown: bool) -> None:
    """Print the event table's columns with their types and meaning."""
    from toranalyze.schema import COLUMN_DOCS, EVENT_SCHEMA

    if markdown:
        from toranalyze.docgen import events_markdown

        click.echo(events_markdown(), nl=False)
        return
    for name, dtype in EVENT_SCHEMA.items():
        out.print(f"[bold]{name}[/] ({dtype}): {COLUMN_DOCS[name]}")


@cli.command("docs")
@click.argument("name", required=False, metavar="[NAME]")
def docs_cmd(name: str | None) -> None:
    """Print a reference page (docs/NAME.md), or list them.

    The pages ship with the installed package: what a --help text points at is here."""
    from toranalyze.docgen import doc_names, doc_text

    if name is None:
        for page in doc_names():
            click.echo(page)
        return
    click.echo(doc_text(name), nl=False)


def _known_error(exc: Exception) -> int | None:
    """Print a library error as one message and give its exit code; None for any other
    exception. The error classes load polars, so they are imported once an error was raised."""
    from toranalyze.errors import ToranalyzeError

    if isinstance(exc, ToranalyzeError):
        where = exc.where()
        err.print(f"[red]error[/]: {plain(where + ': ' if where else '')}{plain(exc.message)}", soft_wrap=True)
        if exc.hint:
            err.print(f"  next: {plain(exc.hint)}", soft_wrap=True)
        return 2
    polars = sys.modules.get("polars")
    if polars is not None and isinstance(exc, polars.exceptions.PolarsError):  # should not happen; say so
        err.print(f"[red]internal error[/] (please report): {type(exc).__name__}: {exc}")
        return 3
    return None


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:  # Ctrl-C (click turns KeyboardInterrupt into Abort)
        err.print("interrupted: run the same command again to finish (analyze and ingest write their "
                  "outputs only once done; a fleet store keeps the runs it stored)")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:
        code = _known_error(exc)
        if code is None:
            raise
        sys.exit(code)
