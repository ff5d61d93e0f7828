"""``toranalyze plan``: a future run's TOR, best checkpoint interval and strategy, from rates."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from toranalyze.cli.common import out
from toranalyze.plan.names import STRATEGIES

if TYPE_CHECKING:
    from toranalyze.plan.core import PlanOptions


def _hours(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A duration option in hours; 0 is allowed (a save or restart can be instant), the interval must be > 0."""
    if value is None:
        return None
    from toranalyze.model import parse_duration

    try:
        h = parse_duration(value) / 3600.0
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    if not math.isfinite(h) or h < 0 or (h == 0 and param.name == "ckpt_interval"):
        raise click.BadParameter("must be > 0" if param.name == "ckpt_interval" else "must be >= 0")
    return h


def _rates(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[Any, ...]:
    from toranalyze.plan.inputs import declared

    try:
        return tuple(declared(v) for v in value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def _slow(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[tuple[float, float], ...]:
    out_: list[tuple[float, float]] = []
    for v in value:
        try:
            frac, factor = (float(x) for x in v.split(","))
        except ValueError as e:
            raise click.BadParameter(f"{v!r}: FRACTION,FACTOR, e.g. 0.05,1.34 (factor inf for a stall)") from e
        if not (0 <= frac <= 1) or not (factor >= 1):
            raise click.BadParameter(f"{v!r}: the fraction is 0 to 1 and the step-time factor at least 1")
        out_.append((frac, factor))
    if sum(f for f, _ in out_) > 1:
        raise click.BadParameter("the slow fractions add up to more than the whole running time")
    if sum(f * (1.0 - 1.0 / s) for f, s in out_) >= 1:
        raise click.BadParameter("nothing left of the throughput: the run would never finish")
    return tuple(out_)


def _m(h: float | None) -> str:
    if h is None or not math.isfinite(h):
        return "-"
    return f"{h * 3600:.3g} s" if h < 1 / 60 else (f"{h * 60:.3g} min" if h < 2 else f"{h:.3g} h")


def _t(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def _head(p: dict[str, Any]) -> None:
    i, st = p["inputs"], p["inputs"]["strategy"]
    out.print(f"[bold]{i['gpus']:,} GPUs[/] ({i['gpus_per_node']:g} per node), {i['ideal_days']:g} ideal days; "
              f"{st['name']} checkpoints ({st['describe']}) every {_m(st['interval_h'])} ({st['interval_source']})")
    for caution in p["cautions"]:
        out.print(f"[yellow]caution:[/] {caution}")
    from rich.table import Table

    t = Table(title="failure classes of the planned job")
    for col in ("class", "scales per", "why", "failures", "rate as published", "job failures / day"):
        t.add_column(col, justify="left" if col in ("class", "why") else "right")
    for c in i["classes"]:
        pub = ", ".join(f"{v:.4g} {k}" for k, v in c["published"].items())
        t.add_row(c["class"], c["per"], c["scaling_source"], "-" if c["failures"] is None else str(c["failures"]),
                  pub, f"{c['job_rate_per_hour'] * 24:.4g}")
    if i["classes"]:
        out.print(t)


def _body(p: dict[str, Any]) -> None:
    i, mt, cf, mc, run = p["inputs"], p["mtbf"], p["closed_form"], p["monte_carlo"], p["run"]
    rec = i["recovery"]
    out.print(f"MTBF: {_m(mt['running_h'])} of running (95% {_m(mt['lo_h'])} - {_m(mt['hi_h'])}, {mt['interval']}); "
              f"{_m(mt['wall_h'])} of wall time")
    src = ", ".join(sorted(set(rec["sources"].values())))
    out.print(f"recovery per failure: detection {_m(rec['detect_h'])}, queue {_m(rec['queue_h'])}, start-up "
              f"{_m(rec['startup_h'])} (failures can strike it); from {src}")
    out.print(f"TOR closed form: [bold]{_t(cf['tor'])}[/] (rates' 95%: {_t(cf['lo'])} - {_t(cf['hi'])}); "
              f"fail-slow keeps {i['fail_slow']['throughput_kept']:.4f} of throughput ({i['fail_slow']['source']})")
    out.print(f"TOR Monte Carlo ({i['runs']} runs): [bold]{_t(mc['tor'])}[/] ± {mc['se']:.4f} "
              f"(runs p10-p90 {_t(mc['p10'])} - {_t(mc['p90'])})")
    for reason in p["why_differ"]:
        out.print(f"  - {reason}")
    if run["expected_failures"] is None:
        out.print(f"the run: P(at least one failure) {run['p_any_failure']:.1%}; it would practically never finish "
                  "(TOR under one in a million)")
    else:
        per = run["lost_per_failure_h"]["closed_form"] or {}
        out.print(f"the run: P(at least one failure) {run['p_any_failure']:.1%}, expected failures "
                  f"{run['expected_failures']:.4g}, wall {run['wall_days']:.4g} days"
                  + (f" ({run['calendar_days']:.4g} with the first queue)" if i["recovery"]["queue_first_h"] else ""))
        out.print("time per failure: " + ", ".join(f"{k} {_m(v)}" for k, v in per.items()))
        gh, loss = run["gpu_hours"], run["loss"]
        out.print(f"GPU-hours: useful {gh['useful']:.4g} of {gh['run']:.4g} (saves {gh['saves']:.3g}, failures "
                  f"{gh['failures']:.3g}, fail-slow {gh['fail_slow']:.3g}); loss fail-stop {loss['fail_stop']:.2%}, "
                  f"fail-slow {loss['fail_slow']:.2%}")
    iv = p["intervals"]
    out.print(f"intervals: Young {_m(iv['young_h'])}, Daly {_m(iv['daly_h'])} (blocking {_m(iv['blocking_h'])} "
              f"a save), used {_m(iv['used_h'])}")


def _tables(p: dict[str, Any]) -> None:
    if p["simulated_intervals"]:
        out.print("simulated around the interval (Weibull classes): " + ", ".join(
            f"{_m(r['tau_h'])} {r['tor']:.4f}±{r['se']:.4f}" for r in p["simulated_intervals"]))
    from rich.table import Table

    if p["compare"]:
        t = Table(title="strategies at their best interval")
        for col in ("strategy", "what it does", "interval", "TOR closed form", "TOR Monte Carlo"):
            t.add_column(col, justify="left" if col in ("strategy", "what it does") else "right")
        for r in p["compare"]:
            every = "-" if r["interval_source"].startswith("none") else _m(r["best_interval_h"])
            t.add_row(r["strategy"], r["describe"], every, _t(r["tor_closed_form"]),
                      f"{r['tor_monte_carlo']:.4f} ± {r['mc_se']:.4f}")
        out.print(t)
    t = Table(title="what if (job size)")
    for col in ("GPUs", "interval", "MTBF", "TOR closed form", "TOR Monte Carlo"):
        t.add_column(col, justify="right")
    for r in p["what_if"]:
        t.add_row(f"{r['gpus']:,}", _m(r["tau_h"]), _m(r["mtbf_h"]), _t(r["tor_closed_form"]),
                  f"{r['tor_monte_carlo']:.4f} ± {r['mc_se']:.4f}")
    out.print(t)


def _duration(name: str, help_: str, default: str | None = None) -> Any:
    """A duration option (30s, 5m, 1.5h, 2d), read as hours."""
    return click.option(name, callback=_hours, metavar="DURATION", default=default, show_default=default is not None,
                        help=help_)


@click.command("plan")
@click.option("--rates", "rates_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="FILE",
              help="A rates.json written by `toranalyze fleet` or `toranalyze analyze`.")
@click.option("--rate", "rates", multiple=True, callback=_rates, metavar="CLASS=VALUE/UNIT",
              help="A declared rate in a published unit, e.g. node_failure=6.5/1000-node-days or "
                   "gpu_hardware=1/gpu-year (units: gpu-, node-, job-hour/day/year, 1000-node-days); repeatable; "
                   "replaces a fitted class of that name.")
@click.option("--gpus", type=click.IntRange(min=1), required=True, metavar="N", help="GPUs of the planned job.")
@click.option("--gpus-per-node", type=click.FloatRange(min=1, max=1024), metavar="N",
              help="GPUs per node [default: the rates file's, else 8].")
@click.option("--strategy", type=click.Choice(STRATEGIES), default="blocking", show_default=True,
              help="Checkpointing: blocking saves, async (a short snapshot, then a background persist), memory "
                   "(peer-memory saves, every n-th persisted in the background) or multitier (peer-memory saves, "
                   "every n-th a blocking durable save).")
@click.option("--compare", is_flag=True, help="Also set all four strategies side by side at their best intervals.")
@_duration("--ckpt-interval", "Training time between saves, e.g. 45m [default: the best].")
@_duration("--ckpt-save", "Durable save time (blocking; for async and memory the background persist).", "5m")
@_duration("--snapshot", "Blocking part of an async save.", "10s")
@_duration("--mem-save", "Blocking in-memory/peer save.", "5s")
@_duration("--mem-load", "Restore from memory/peer.", "1m")
@click.option("--every", type=click.IntRange(min=1, max=100_000), default=10, show_default=True, metavar="N",
              help="memory/multitier: a durable save every N saves.")
@click.option("--survival", type=click.FloatRange(0, 1), default=0.9, show_default=True, metavar="P",
              help="memory/multitier: share of failures after which the in-memory copy is usable.")
@_duration("--load", "Durable checkpoint load beyond the start-up "
              "(the observed start-up already holds it).", "0s")
@_duration("--detect", "Failure to detection [default: observed].")
@_duration("--queue", "Waiting for resources after each failure [default: observed].")
@_duration("--startup", "Restart to training, checkpoint load included; failures can strike it "
              "[default: observed].")
@_duration("--restart", "The whole recovery as one start-up (when its phases are unknown).")
@_duration("--queue-first", "Queue at first submission (calendar "
              "time, not TOR).", "0s")
@click.option("--slow", multiple=True, callback=_slow, metavar="FRACTION,FACTOR",
              help="Fail-slow: a fraction of running time at a step-time factor (inf: a stall); repeatable "
                   "[default: the rates file's measured slowdown].")
@click.option("--ideal-days", type=click.FloatRange(min=1e-6, max=36500), default=30.0, show_default=True,
              metavar="DAYS", help="Training time on an ideal system.")
@click.option("--runs", type=click.IntRange(min=2, max=100_000), default=400, show_default=True, metavar="N",
              help="Monte Carlo runs per configuration.")
@click.option("--seed", type=int, default=0, show_default=True, metavar="N",
              help="Seed of the Monte Carlo (the same seed gives the same plan).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (for programs).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write an HTML page with the plan's figures.")
def plan_cmd(rates_path: Path | None, as_json: bool, html_path: Path | None, **kw: Any) -> None:
    """Predict a future run's TOR (closed form and Monte Carlo), its best checkpoint interval and strategy."""
    if rates_path is None and not kw["rates"]:
        raise click.UsageError("give --rates FILE, or at least one --rate CLASS=VALUE/UNIT")
    from toranalyze.cli.common import print_warnings
    from toranalyze.cli.fleet import products_lag
    from toranalyze.fleet.rates import read_rates
    from toranalyze.plan import plan

    doc = read_rates(rates_path) if rates_path else {}
    if rates_path and (lag := products_lag(rates_path.parent)):
        print_warnings([f"{rates_path}: {lag}"])
    opts = _options(kw)
    p = plan(doc, opts)
    if html_path:
        from toranalyze.plan.page import write_page

        write_page(p, html_path)
    if as_json:
        click.echo(json.dumps(_clean(p), indent=1, sort_keys=True, allow_nan=False))
        return
    _head(p)
    _body(p)
    _tables(p)
    if html_path:
        out.print(f"figures: {html_path}")


def _clean(x: Any) -> Any:
    """JSON has no infinity: a number that is not finite (an MTBF with no failure) becomes null."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _options(kw: dict[str, Any]) -> PlanOptions:
    from toranalyze.plan.core import PlanOptions, check_options

    rec = {k: kw[k] for k in ("detect", "queue", "startup", "restart")}
    try:
        opts = PlanOptions(
            gpus=kw["gpus"], ideal_days=kw["ideal_days"], strategy=kw["strategy"], ckpt_interval_h=kw["ckpt_interval"],
            ckpt_save_h=kw["ckpt_save"], snapshot_h=kw["snapshot"], mem_save_h=kw["mem_save"],
            mem_load_h=kw["mem_load"], every=kw["every"], survival=kw["survival"], load_h=kw["load"], recovery=rec,
            queue_first_h=kw["queue_first"], slow=kw["slow"], rates=kw["rates"], gpus_per_node=kw["gpus_per_node"],
            runs=kw["runs"], seed=kw["seed"], compare=kw["compare"])
        check_options(opts)
        return opts
    except ValueError as e:
        raise click.UsageError(str(e)) from e
