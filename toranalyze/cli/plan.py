"""``toranalyze plan``: predicted TOR and checkpoint interval of a future run from rates.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from toranalyze.cli.common import out
from toranalyze.fleet.rates import read_rates
from toranalyze.model import parse_duration
from toranalyze.plan.core import PlanOptions, plan


def _hours(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        h = parse_duration(value) / 3600.0
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    if h <= 0:
        raise click.BadParameter("must be > 0")
    return h


def _m(h: float | None) -> str:
    return "-" if h is None else (f"{h * 60:.1f} min" if h < 2 else f"{h:.2f} h")


def _print(p: dict[str, Any]) -> None:
    i, cf, mc, iv = p["inputs"], p["closed_form"], p["monte_carlo"], p["intervals"]
    out.print(f"[bold]{i['gpus']} GPUs[/], {i['ideal_days']:g} ideal days: mean up-time between failures "
              f"{_m(i['mtbf_h'])} (95% {_m(i['mtbf_lo_h'])} - {_m(i['mtbf_hi_h'])}); checkpoint every "
              f"{_m(i['ckpt_interval_h'])}, save {_m(i['ckpt_save_h'])}, repair {_m(i['repair_h'])} "
              f"({i['repair_source']})")
    for caution in p["cautions"]:
        out.print(f"[yellow]caution:[/] {caution}")
    lo = "-" if cf["lo"] is None else f"{cf['lo']:.4f}"
    hi = "-" if cf["hi"] is None else f"{cf['hi']:.4f}"
    out.print(f"TOR closed form (exact, fail-stop): [bold]{cf['tor']:.4f}[/] (rates' 95%: {lo} - {hi})")
    out.print(f"TOR Monte Carlo ({i['runs']} runs): [bold]{mc['tor']:.4f}[/] (95% {mc['lo']:.4f} - {mc['hi']:.4f})")
    for reason in p["why_differ"]:
        out.print(f"  - {reason}")
    opt = iv["optimum"]
    g = opt["gain_over_daly"]
    out.print(f"best interval: Young {_m(iv['young_h'])}, Daly {_m(iv['daly_h'])}, simulated optimum "
              f"{_m(opt['tau_h'])} (TOR {opt['tor']:.4f}; gain over {'Daly' if iv['daly_h'] else 'the interval used'} "
              f"{g['tor']:+.4f}, 95% {g['lo']:+.4f} - "
              f"{g['hi']:+.4f})")
    t = Table(title="what if")
    for col in ("GPUs", "interval", "every", "MTBF", "TOR closed form", "TOR Monte Carlo"):
        t.add_column(col, justify="right")
    for r in p["what_if"]:
        t.add_row(str(r["gpus"]), r["interval"], _m(r["tau_h"]), _m(r["mtbf_h"]), f"{r['tor_closed_form']:.4f}",
                  f"{r['tor_monte_carlo']:.4f} ± {(r['mc_hi'] - r['mc_lo']) / 2:.4f}")
    out.print(t)


@click.command("plan")
@click.option("--rates", "rates_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A rates.json written by `toranalyze fleet` or `toranalyze analyze`.")
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="GPUs of the planned job.")
@click.option("--ckpt-interval", callback=_hours, help="Checkpoint interval, e.g. 45m [default: Daly's].")
@click.option("--ckpt-save", callback=_hours, default="5m", show_default=True, help="Blocking save time.")
@click.option("--restart", callback=_hours, help="Repair time per failure [default: the observed downtime].")
@click.option("--ideal-days", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="Training time on an ideal system.")
@click.option("--runs", type=click.IntRange(min=2), default=400, show_default=True, help="Monte Carlo runs.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (for programs).")
def plan_cmd(rates_path: Path, gpus: int, ckpt_interval: float | None, ckpt_save: float, restart: float | None,
             ideal_days: float, runs: int, seed: int, as_json: bool) -> None:
    """Predict a future run's TOR (closed form and Monte Carlo) and its best checkpoint interval."""
    rates = read_rates(rates_path)
    p = plan(rates, PlanOptions(gpus, ckpt_interval, ckpt_save, restart, ideal_days, runs, seed))
    if as_json:
        click.echo(json.dumps(p, indent=1, sort_keys=True))
    else:
        _print(p)
