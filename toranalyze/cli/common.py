"""What every command shares: the consoles, the ingest options and running ingest with progress."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from toranalyze.errors import NothingReadError
from toranalyze.ingest.engine import default_jobs, import_ray
from toranalyze.ingest.pipeline import IngestOptions, IngestResult, ingest
from toranalyze.ingest.registry import default_registry

err = Console(stderr=True)
# Wide enough for the incident table when writing to a file or a pipe (rich assumes 80 there).
out = Console() if Console().is_terminal else Console(width=140)


def ingest_options(f: Any) -> Any:
    f = click.option("--rules", "rules", multiple=True, type=click.Path(dir_okay=False),
                     help="Extra classification rules (TOML); tried before the built-ins. Repeatable.")(f)
    f = click.option("--parser", "parser", default=None, help="Use this parser for every file instead of sniffing.")(f)
    f = click.option("--year", type=int, default=None, help="Year for timestamps that have none (glog, syslog).")(f)
    f = click.option("-j", "--jobs", type=int, default=None,
                     help="Worker processes reading files in parallel [default: the CPUs available].")(f)
    f = click.option("--ray-address", default=None,
                     help="With --engine ray: an existing Ray cluster (e.g. ray://head:10001, auto) "
                          "[default: start a local one].")(f)
    f = click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                     help="Where files are read (and, for analyze, jobs reconstructed): local processes, or Ray "
                          "tasks (pip install 'toranalyze[ray]').")(f)
    f = click.option("--tz", default="UTC", show_default=True,
                     help="Zone of timestamps that state none (IANA name, e.g. Europe/Paris).")(f)
    return f


def run_ingest(paths: tuple[str, ...], tz: str, year: int | None, parser: str | None,
                rules: tuple[str, ...], quiet: bool = False, jobs: int | None = None,
                engine: str = "local", ray_address: str | None = None,
                sink: Path | None = None) -> IngestResult:
    options = IngestOptions(tz=tz, year=year, parser=parser, rules=tuple(rules))
    if parser:
        default_registry().get(parser)  # fail early on an unknown name
    if engine == "ray":
        import_ray()  # fail early when the extra is missing
    with Progress(TextColumn("[bold]reading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err, transient=True, disable=quiet) as progress:
        task = progress.add_task("", total=None)

        def on_file(i: int, n: int, path: str) -> None:
            progress.update(task, total=n, completed=i, description=Path(path).name)

        result = ingest(paths, options, on_file=on_file, jobs=jobs or default_jobs(), engine=engine,
                        address=ray_address, sink=sink)
    for problem in result.input_errors:
        hint = f" — {problem.hint}" if problem.hint else ""
        err.print(f"[yellow]warning[/]: {problem.where()}: {problem.message}{hint}", highlight=False)
    for f in result.files:
        if f.error:
            err.print(f"[yellow]warning[/]: {f.path}: {f.error}")
        for w in f.warnings:
            err.print(f"[yellow]warning[/]: {f.path}: {w}")
    if result.files_read == 0:
        raise NothingReadError("no input could be read", hint="check the paths; the warnings above say why each failed")
    return result


def write_ingest(result: IngestResult, out_dir: Path, redact: bool = True) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "events.parquet"
    if result.events_path is None or result.events_path.resolve() != target.resolve():
        result.events.write_parquet(target)
    summary = result.summary()
    if redact:  # warnings may quote log text
        from toranalyze.report.redact import redact_json

        summary = redact_json(summary)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def redact_option(f: Any) -> Any:
    return click.option("--no-redact", "no_redact", is_flag=True,
                        help="Keep secrets (tokens, keys, passwords) in the report, terminal and JSON summaries.")(f)


