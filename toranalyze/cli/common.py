"""What every command shares: the consoles, the options (declared once, each group built into its
options object here), the progress bar of files read and the warnings.

Light to import: the commands' options are declared from here, and ``--help`` must not load the
dataframe or plotting libraries; the objects the options build are imported when they are built.
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from toranalyze.fleet.pipeline import OutputOptions, RunOptions
    from toranalyze.ingest.pipeline import IngestOptions, IngestResult, Workers
    from toranalyze.reconstruct.analysis import AnalysisOptions

err = Console(stderr=True)
# Wide enough for the incident table when writing to a file or a pipe (rich assumes 80 there).
out = Console() if Console().is_terminal else Console(width=140)


Decorator = Callable[[Any], Any]


def _grouped(dest: str, make: Callable[..., Any], options: dict[str, Decorator]) -> Decorator:
    """Click options declared once and handed to the command as one object: the values of
    ``options`` (parameter name -> click.option) become ``dest=make(**values)``."""
    def decorate(f: Any) -> Any:
        @functools.wraps(f)
        def command(*args: Any, **kw: Any) -> Any:
            kw[dest] = make(**{name: kw.pop(name) for name in options})
            return f(*args, **kw)

        for option in reversed(list(options.values())):
            command = option(command)
        return command

    return decorate


def _ingest(tz: str, year: int | None, parser: str | None, rules: tuple[str, ...]) -> IngestOptions:
    from toranalyze.ingest.pipeline import IngestOptions
    from toranalyze.ingest.registry import default_registry

    if parser:
        default_registry().get(parser)  # fail early on an unknown name
    return IngestOptions(tz=tz, year=year, parser=parser, rules=tuple(rules))


# --tz, --year, --parser, --rules -> ``ingest: IngestOptions``
ingest_options = _grouped("ingest", _ingest, {
    "tz": click.option("--tz", default="UTC", show_default=True, metavar="ZONE",
                       help="Zone of timestamps that state none (IANA name, e.g. Europe/Paris)."),
    "year": click.option("--year", type=int, default=None, metavar="YEAR",
                         help="Year for timestamps that have none (glog, syslog)."),
    "parser": click.option("--parser", "parser", default=None, metavar="NAME",
                           help="Use this parser for every file instead of sniffing (toranalyze parsers "
                                "lists them)."),
    "rules": click.option("--rules", "rules", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
                          help="Extra classification rules (TOML); tried before the built-ins. Repeatable."),
})


def _workers(jobs: int | None, engine: str, ray_address: str | None) -> Workers:
    from toranalyze.ingest.engine import default_jobs, import_ray
    from toranalyze.ingest.pipeline import Workers

    if engine == "ray":
        import_ray()  # fail early when the extra is missing
    return Workers(jobs or default_jobs(), engine, ray_address)


def workers_options(jobs_help: str, engine_help: str) -> Decorator:
    """-j/--jobs, --engine, --ray-address -> ``workers: Workers`` (what a job is: the command's help)."""
    return _grouped("workers", _workers, {
        "jobs": click.option("-j", "--jobs", type=int, default=None, metavar="N",
                             help=f"{jobs_help} [default: the CPUs available]."),
        "engine": click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                               help=f"{engine_help} (pip install 'toranalyze[ray]')."),
        "ray_address": click.option("--ray-address", default=None, metavar="ADDRESS",
                                    help="With --engine ray: an existing Ray cluster (e.g. ray://head:10001, auto) "
                                         "[default: start a local one with --jobs CPUs]."),
    })


def _analysis(ideal_step_time: float | None) -> AnalysisOptions:
    from toranalyze.reconstruct.analysis import AnalysisOptions

    return AnalysisOptions(ideal_step_time_s=ideal_step_time)


def _output(report: bool, no_redact: bool) -> OutputOptions:
    from toranalyze.fleet.pipeline import OutputOptions

    return OutputOptions(report=report, redact=not no_redact)


def _run(ingest: IngestOptions, analysis: AnalysisOptions, output: OutputOptions) -> RunOptions:
    from toranalyze.fleet.pipeline import RunOptions

    return RunOptions(ingest, analysis, output)


# --ideal-step-time -> ``analysis: AnalysisOptions``
analysis_options = _grouped("analysis", _analysis, {
    "ideal_step_time": click.option("--ideal-step-time", type=float, default=None, metavar="SECONDS",
                                    help="Ideal seconds per step; default: the median of the job's healthy steps."),
})

_NO_REDACT = click.option("--no-redact", "no_redact", is_flag=True,
                          help="Keep secrets (tokens, keys, passwords) in every output: tables, reports, JSON "
                               "files and the terminal.")

# --no-redact -> ``output: OutputOptions`` (for commands that write no report)
redact_options = _grouped("output", lambda no_redact: _output(False, no_redact),
                          {"no_redact": _NO_REDACT})


def output_options(report_help: str) -> Decorator:
    """--no-report, --no-redact -> ``output: OutputOptions``."""
    return _grouped("output", lambda no_report, no_redact: _output(not no_report, no_redact), {
        "no_report": click.option("--no-report", is_flag=True, help=report_help),
        "no_redact": _NO_REDACT,
    })


def run_options(report_help: str) -> Decorator:
    """The options of a run, built once into ``options: RunOptions``: ingest, analysis and output."""
    return _grouped("options", _run, {
        "ingest": ingest_options, "analysis": analysis_options, "output": output_options(report_help),
    })


@contextmanager
def reading(quiet: bool) -> Iterator[Callable[[int, int, str], None]]:
    """A progress bar of files read (none when ``quiet``); yields the ``on_file`` callback."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]reading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err, transient=True, disable=quiet) as progress:
        task = progress.add_task("", total=None)

        def on_file(i: int, n: int, path: str) -> None:
            progress.update(task, total=n, completed=i, description=Path(path).name)

        yield on_file


def ingest_to(table: Path, paths: Sequence[str], options: IngestOptions, workers: Workers, *, redact: bool = True,
              on_file: Callable[[int, int, str], None] | None = None) -> IngestResult:
    """The events of ``paths`` streamed into the Parquet file ``table`` (secrets redacted unless
    ``redact`` is false): the workers spool them as parts beside it, one streaming pass writes
    the table, so memory does not grow with the input."""
    from toranalyze import storage
    from toranalyze.ingest.pipeline import ROW_GROUP, IngestResult, ingest
    from toranalyze.report.redact import redact_lazy

    table.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".ingest-", dir=table.parent) as spool:
        result = ingest(paths, options, workers, on_file=on_file, spool=Path(spool))
        plan = redact_lazy(result.plan) if redact else result.plan
        storage.sink_parquet(plan, table, ROW_GROUP)
    return IngestResult(table, result.files, result.input_errors)


def plain(text: object) -> str:
    """Text for rich markup that is shown as it is: brackets in a path (``in/[/].log``) are not
    tags, and the bytes of a non-UTF-8 file name are spelt ``\\xff``."""
    from toranalyze.ingest.discover import printable

    return escape(printable(str(text)))


def print_warnings(lines: list[str]) -> None:
    for line in lines:  # one line each, however long: the path must stay whole
        err.print(f"[yellow]warning[/]: {plain(line)}", highlight=False, soft_wrap=True)


def write_summary(summary: dict[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
