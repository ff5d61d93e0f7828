"""``toranalyze fleet``: many runs -> the fleet store (tables, manifest) and a summary.

The stages are imported when the command runs, not for its ``--help``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from toranalyze.cli.common import err, out, plain, print_warnings, run_options, workers_options

if TYPE_CHECKING:
    import polars as pl

    from toranalyze.fleet.build import BuildResult
    from toranalyze.fleet.pipeline import OutputOptions, RunOptions
    from toranalyze.fleet.summary import FleetSummary
    from toranalyze.ingest.pipeline import Workers


def write_fleet_products(store_dir: Path, tables: dict[str, pl.DataFrame], output: OutputOptions,
                         title: str) -> Path | None:
    """rates.json (docs/rates.md) and the fleet report over the merged tables (redacted in each
    run's part already, when asked), each written to a temporary name and renamed, and only when
    its text changed (an unchanged re-run writes nothing). Returns the report's path."""
    from toranalyze.cli.reports import write_fleet_report
    from toranalyze.fleet.rates import build_rates, dumps
    from toranalyze.fleet.store import write_text

    doc = build_rates(tables["jobs"], tables["attempts"], tables["incidents"], tables["exposure"])
    write_text(dumps(doc), store_dir / "rates.json")
    if not output.report:
        return None
    return write_fleet_report(store_dir, tables, doc, title=title, redacted=output.redact)


PRODUCTS = ".products.json"  # the products' summary and the tables they were made from


def _products(store_dir: Path, result: BuildResult | None, output: OutputOptions,
              title: str) -> tuple[FleetSummary, list[str], Path | None]:
    """rates.json, the report and the summary of the store's tables (made anew when ``result``
    is None). When the build changed nothing and the last products were made from these very
    tables (manifest), options and version, they stand: reading every table and fitting the
    rates again would cost time that grows with the store, for the same bytes."""
    from toranalyze.fleet.store import Store, write_text
    from toranalyze.fleet.summary import summarize, summary_from, summary_record
    from toranalyze.fleet.tables import TABLES

    stamp = _stamp(store_dir, output, title)
    kept = None if result is None or result.rewritten else _kept(store_dir, stamp, output)
    if kept is not None:
        return summary_from(kept["summary"]), kept["no_jobs"], store_dir / kept["page"] if kept["page"] else None
    st = Store(store_dir)
    tables = st.read_tables()
    no_jobs = _runs_without_jobs(result, tables["jobs"]) if result is not None else []
    page = write_fleet_products(store_dir, tables, output, title)
    summary = summarize(st.manifest.runs, *(tables[t] for t in TABLES))
    write_text(json.dumps({"stamp": stamp, "generation": st.manifest.generation, "summary": summary_record(summary),
                           "no_jobs": no_jobs, "page": page.name if page else None}), store_dir / PRODUCTS)
    return summary, no_jobs, page


def products_lag(store_dir: Path) -> str | None:
    """Why the products in ``store_dir`` lag its tables (runs added with ``--add`` since they were
    made), with the command that remakes them; None when they do not, or it is not a fleet store."""
    from toranalyze.errors import InputError
    from toranalyze.fleet.store import read_manifest

    try:
        made = json.loads((store_dir / PRODUCTS).read_text(encoding="utf-8")).get("generation")
        now = read_manifest(store_dir).generation
    except (OSError, ValueError, AttributeError, InputError):
        return None
    if not isinstance(made, int) or made == now:
        return None
    return (f"made before the store's last {now - made} change(s) (runs added with --add); "
            f"toranalyze fleet --refresh -o {plain(str(store_dir))} remakes it")


def _stamp(store_dir: Path, output: OutputOptions, title: str) -> str:
    from toranalyze import __version__
    from toranalyze.fleet.store import MANIFEST

    manifest = store_dir / MANIFEST
    text = manifest.read_text(encoding="utf-8") if manifest.is_file() else ""
    key = json.dumps([text, output.report, output.redact, title, __version__])
    return hashlib.sha256(key.encode()).hexdigest()


def _kept(store_dir: Path, stamp: str, output: OutputOptions) -> dict | None:
    """The last products' record, if they are still those of these tables and options."""
    try:
        kept = json.loads((store_dir / PRODUCTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("stamp") != stamp or not (store_dir / "rates.json").is_file():
        return None
    if output.report and not (kept.get("page") and (store_dir / kept["page"]).is_file()):
        return None
    return kept


def _print_summary(s: FleetSummary, result: BuildResult | None, store_dir: str) -> None:
    import polars as pl
    from rich.table import Table

    from toranalyze.fleet.tables import TABLES

    done = "" if result is None else (f" ({len(result.analyzed)} analysed, {result.reused} unchanged, "
                                      f"{len(result.removed)} removed)")
    out.print(f"[bold]{s.runs}[/] runs{done}, [bold]{s.jobs}[/] jobs, {s.attempts} attempts")
    out.print(
        f"running time {s.gpu_hours:,.1f} GPU-hours ({s.node_hours:,.1f} node-hours) of "
        f"{s.wall_gpu_hours:,.1f} GPU-hours observed; lost to interruptions (detection, recovery, rework) "
        f"{s.lost_gpu_hours:,.1f} GPU-hours"
    )
    if s.by_class.height:
        t = Table(title="incidents by root cause")
        for col in ("root cause", "unexpected", "planned"):
            t.add_column(col, justify="left" if col == "root cause" else "right")
        for cls, unexpected, planned in s.by_class.iter_rows():
            t.add_row(plain(cls), str(unexpected or ""), str(planned or ""))
        total = s.by_class.select(pl.col("unexpected", "planned").sum()).row(0)
        t.add_row("[bold]total[/]", *(f"[bold]{n}[/]" for n in total))
        out.print(t)
    else:
        out.print("no incidents")
    if s.tor_quantiles:
        qs = "  ".join(f"p{round(q * 100)} {v:.4f}" for q, v in s.tor_quantiles.items())
        out.print(f"TOR over jobs: {qs}  mean {s.tor_mean:.4f}")
    if result is not None:
        out.print(f"tables written to {plain(store_dir)}/ ({', '.join(TABLES)}: Delta tables)"
                  if result.rewritten else f"nothing changed in {plain(store_dir)}/", soft_wrap=True)


def _runs_without_jobs(result: BuildResult, jobs: pl.DataFrame) -> list[str]:
    """A line for each run read without error that gave no job: a folder of other files is said to
    be one, not merely counted among the runs."""
    with_jobs = set(jobs["run"].to_list())
    return [f"run {r.id} ({r.path}): no training job found in its logs — check that it holds a run's logs "
            f"(toranalyze coverage {r.path} shows the lines no parser recognised)"
            for r in result.runs if not r.error and r.id not in with_jobs]


@click.command("fleet")
@click.argument("paths", nargs=-1)
@click.option("-o", "--out", "out_dir", required=True, metavar="DIR|URL",
              help="Fleet store directory or object-store URL (created; updated in place on later runs).")
@click.option("--add", is_flag=True,
              help="Add or update only the runs under PATHS and keep the store's others (without it the store "
                   "holds exactly the runs found). Costs the same at any store size; rates.json and the report "
                   "are not remade: --refresh does that.")
@click.option("--refresh", is_flag=True,
              help="Remake rates.json and the report from the store alone (no PATHS): after runs were added "
                   "with --add.")
@workers_options("Batches of runs analysed in parallel, one worker process (or Ray CPU) each",
                 "Where batches of runs are analysed: local processes, or Ray tasks")
@run_options("Write no HTML reports (the fleet's nor each run's).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary; only errors and the report's path.")
def fleet(paths: tuple[str, ...], out_dir: str, add: bool, refresh: bool, workers: Workers, options: RunOptions,
          quiet: bool) -> None:
    """Analyse many runs into a fleet store.

    Each PATH is a run directory or a directory of runs. Writes the fleet tables DIR/jobs,
    attempts, incidents and exposure (Delta tables), DIR/rates.json and DIR/report.html. Runs whose
    files did not change since the last time are not analysed again."""
    from toranalyze import storage
    from toranalyze.fleet.store import MANIFEST

    if refresh and (paths or add):
        raise click.UsageError("--refresh remakes the products of the store as it is: give no PATH and no --add")
    if not refresh and not paths:
        raise click.UsageError("Missing argument 'PATHS...': the runs to analyse (or --refresh to remake the "
                               "products of the store)")
    out_dir = out_dir.rstrip("/") or out_dir
    # A URL: the store is copied here, updated, and its changes uploaded (the manifest last).
    with storage.output_dir(out_dir, mirror=True, last=(MANIFEST,)) as store_dir:
        result = None if refresh else _build(paths, out_dir, store_dir, workers, options, quiet=quiet, add=add)
        if refresh and not (store_dir / MANIFEST).is_file():
            from toranalyze.errors import InputError

            raise InputError("no fleet store here (no manifest.json)", path=out_dir,
                             hint="build one first: toranalyze fleet RUNS -o DIR")
        if result is not None and add:
            _print_added(result, store_dir, out_dir, quiet)
            return
        title = storage.name(out_dir) if storage.is_url(out_dir) else store_dir.resolve().name
        summary, no_jobs, page = _products(store_dir, result, options.output, title)
        print_warnings(no_jobs)
    if not quiet:
        _print_summary(summary, result, out_dir)
    # Where the planner's input and the report are, quiet or not (plan --rates reads the first).
    out.print(f"rates: {plain(storage.join(out_dir, 'rates.json'))}", highlight=False, soft_wrap=True)
    if page is not None:
        out.print(f"report: {plain(storage.join(out_dir, page.name))}", highlight=False, soft_wrap=True)


def _build(paths: tuple[str, ...], out_dir: str, store_dir: Path, workers: Workers, options: RunOptions, *,
           quiet: bool, add: bool) -> BuildResult:
    """The store brought up to date with ``paths`` (a progress bar unless ``quiet``), its warnings printed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from toranalyze import storage
    from toranalyze.fleet.build import Interrupted, Listing, build

    with Progress(TextColumn("[bold]{task.fields[stage]}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.description}"), console=err, transient=True,
                  disable=quiet) as bar:
        task = bar.add_task("", total=None, stage="finding runs")

        def progress(stage: str, done: int, total: int, run: str) -> None:
            bar.update(task, stage=stage, total=total, completed=done, description=run)

        try:
            listing = Listing(skip=[out_dir] if storage.is_url(out_dir) else [], add=add)
            result = build(paths, store_dir, options, workers, progress=progress, listing=listing)
        except Interrupted as stop:
            bar.stop()
            err.print(f"interrupted: {stop.stored} runs analysed and stored, {stop.left} not; run the same "
                      "command again to go on (stored runs are not analysed again)", soft_wrap=True)
            raise SystemExit(130) from None
    print_warnings(result.warnings)
    print_warnings([f"run {r.id} ({r.path}): {r.error}" for r in result.runs if r.error])
    return result


def _print_added(result: BuildResult, store_dir: Path, out_dir: str, quiet: bool) -> None:
    """What ``--add`` did, and that the products now lag the store (remade by ``--refresh``)."""
    from toranalyze.fleet.store import read_manifest

    if not quiet:
        out.print(f"[bold]{len(result.runs)}[/] runs given ({len(result.analyzed)} analysed, {result.reused} "
                  f"unchanged); the store holds [bold]{read_manifest(store_dir).runs}[/] runs")
    if result.rewritten:
        out.print(f"rates.json and the report do not include them yet: toranalyze fleet --refresh -o "
                  f"{plain(out_dir)} remakes them", highlight=False, soft_wrap=True)
