"""``toranalyze simulate``: write realistic logs of simulated training runs, with the truth."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click
import numpy as np

from toranalyze.model import (
    RunConfig,
    config_from_dict,
    load_preset,
    parse_duration,
    preset_names,
)
from toranalyze.simulate.timeline import Timeline, simulate_timeline
from toranalyze.simulate.truth import dumps, job_truth, truth_document
from toranalyze.simulate.wild import PLAIN, WildSpec


def _replayer(stream: list[int]) -> Callable[[], np.random.Generator]:
    """A factory of generators seeded like the run's own: replays its steps chunk by chunk."""
    return lambda: np.random.default_rng(stream)


@dataclass(frozen=True)
class Overrides:
    """What the command line changes in a configuration's jobs (None, empty: as configured)."""

    duration: float | None = None  # seconds
    nodes: int | None = None
    flavor: str | None = None
    jobs: int | None = None
    bad_nodes: tuple[tuple[str, float], ...] = ()  # (host, multiplier), added to the configuration's


def job_configs(data: dict[str, Any], seed: int, overrides: Overrides = Overrides()) -> list[RunConfig]:
    """The run configs of one simulation: one job, or a fleet of varied jobs."""
    base = config_from_dict(data)
    over: dict[str, Any] = {}
    if overrides.bad_nodes:
        over["bad_nodes"] = tuple(sorted((dict(base.bad_nodes) | dict(overrides.bad_nodes)).items()))
    if overrides.duration is not None:
        over["duration_s"] = overrides.duration
    if overrides.nodes is not None:
        over["nodes"] = overrides.nodes
    if overrides.flavor is not None:
        over["flavor"] = overrides.flavor
    fleet = data.get("fleet")
    jobs = overrides.jobs
    n_jobs = jobs if jobs is not None else int(fleet.get("jobs", 1)) if fleet else 1
    if n_jobs <= 1 and not fleet:
        cfg = replace(base, **over)
        cfg.validate()
        return [cfg]
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 7])
    sizes = list(fleet.get("nodes", [base.nodes])) if fleet else [base.nodes]
    d_lo, d_hi = (
        [parse_duration(x) for x in fleet.get("duration", [base.duration_s, base.duration_s])]
        if fleet
        else (base.duration_s, base.duration_s)
    )
    flavors = list(fleet.get("flavors", [base.flavor])) if fleet else [base.flavor]
    # the flavour of each job comes from its own stream, so that mixing flavours leaves every
    # job's size, length and start (and so its history) as they were with one flavour
    frng = np.random.default_rng([seed & 0xFFFFFFFF, 8])
    start = base.start
    out: list[RunConfig] = []
    first_id = base.first_job_id
    t_off = 0.0
    for k in range(n_jobs):
        n = int(sizes[int(rng.integers(0, len(sizes)))])
        d = float(rng.uniform(d_lo, d_hi))
        fl = flavors[int(frng.integers(0, len(flavors)))] if len(flavors) > 1 else flavors[0]
        kw: dict[str, Any] = {"name": f"{base.name}-{k:03d}", "nodes": n, "duration_s": d, "flavor": fl,
                              "first_job_id": first_id + k * 5000}
        kw.update(over)
        # jobs start staggered over the fleet's window
        from toranalyze.simulate.timeline import epoch_us, iso_z  # local import: keep module import light

        kw["start"] = iso_z(epoch_us(start) + int(t_off * 1e6))[:19] + "Z"
        t_off += float(rng.exponential(3 * 3600.0))
        cfg = replace(base, **kw)
        cfg.validate()
        out.append(cfg)
    return out


def run_simulation(out: Path, seed: int, data: dict[str, Any], preset: str | None,
                   overrides: Overrides = Overrides()) -> tuple[list[Timeline], dict[str, int]]:
    """Draw and write every job; returns the timelines and file sizes (relative path -> bytes)."""
    from toranalyze.simulate.emit_kubernetes import KubeWriter
    from toranalyze.simulate.writer import RunWriter

    cfgs = job_configs(data, seed, overrides)
    wild = WildSpec.from_data(data)
    multi = len(cfgs) > 1
    tls: list[Timeline] = []
    sizes: dict[str, int] = {}
    truths = []
    for k, cfg in enumerate(cfgs):
        stream = [seed & 0xFFFFFFFF, k]
        # keep running sums only; the writer replays the steps chunk by chunk (bounded memory)
        tl = simulate_timeline(cfg, rng=np.random.default_rng(stream), keep_steps=False,
                               replay=_replayer(stream))
        tl.seed = seed
        tls.append(tl)
        d = out / cfg.name if multi else out
        wj = wild.draw(seed, k, cfg.flavor, cfg.gpus_per_node) if wild is not None else PLAIN
        if cfg.flavor == "kubernetes":
            s = KubeWriter(tl, seed, k, wj).write(d)
        else:
            s = RunWriter(tl, seed, k, wj).write_slurm(d)
        prefix = f"{cfg.name}/" if multi else ""
        sizes.update({prefix + name: v for name, v in s.items()})
        jt = job_truth(tl)
        if wj.active:  # only with a [wild] table: other truth files stay as they were
            jt["size_stated"] = wj.size_stated(cfg.flavor)
            jt["wild"] = wj.truth(cfg.flavor)
        truths.append(jt)
    params = cfgs[0].to_params() if not multi else {"jobs": [c.to_params() for c in cfgs]}
    doc = truth_document(seed, preset, params, truths)
    text = dumps(doc)
    (out / "truth.json").write_text(text, encoding="utf-8")
    sizes["truth.json"] = len(text)
    return tls, sizes


def _overrides(duration: str | None, nodes: int | None, flavor: str | None, jobs: int | None,
               bad_node: tuple[str, ...]) -> Overrides:
    """The command line's options, parsed (a ValueError names the one that is wrong)."""
    return Overrides(parse_duration(duration) if duration else None, nodes, flavor, jobs,
                     tuple(_bad_node(b) for b in bad_node))


def _bad_node(spec: str) -> tuple[str, float]:
    host, _, mult = spec.partition("=")
    try:
        return host.strip(), float(mult)
    except ValueError:
        raise ValueError(f"--bad-node {spec!r}: expected HOST=MULTIPLIER, e.g. gpu-002=20") from None


@click.command("simulate")
@click.option("--seed", type=int, default=0, show_default=True, metavar="N",
              help="Random seed (same seed, same bytes).")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Output directory (created).")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A TOML run configuration (see docs/simulate.md); overrides --preset.")
@click.option("--preset", default="small", show_default=True, metavar="NAME",
              help="A packaged preset: "
                   + ", ".join(["small", "llama3-like", "fleet", "fleet-wild", "exp-closed-form"]) + ".")
@click.option("--duration", metavar="DURATION",
              help="Ideal training time of each job, e.g. 6h, 2d (train_iters = duration / step time).")
@click.option("--nodes", type=int, metavar="N", help="Nodes per job.")
@click.option("--flavor", type=click.Choice(["slurm", "kubernetes"]), help="Scheduler flavour of the logs.")
@click.option("--jobs", type=int, metavar="N", help="Number of jobs (a fleet: one subdirectory per job).")
@click.option("--bad-node", "bad_node", multiple=True, metavar="HOST=MULT",
              help="Plant a bad node: HOST meets node-level failures MULT times as often (e.g. gpu-002=20). "
                   "Repeatable; recorded in truth.json.")
def simulate(seed: int, out: Path, config: Path | None, preset: str, **options: Any) -> None:
    """Simulate a training run (or a fleet) and write its logs in real formats plus truth.json."""
    # ``options``: --duration, --nodes, --flavor, --jobs, --bad-node, read by _overrides
    import tomllib

    try:
        if config is not None:
            with open(config, "rb") as fh:
                data = tomllib.load(fh)
            preset_name = None
        else:
            data = load_preset(preset)
            preset_name = preset
        tls, sizes = run_simulation(out, seed, data, preset_name, _overrides(**options))
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    total = sum(sizes.values())
    for tl in tls:
        inc = ", ".join(i.root_cause for i in tl.incidents) or "none"
        click.echo(
            f"{tl.config.name}: {len(tl.attempts)} attempt(s), incidents: {inc}; TOR {tl.tor:.4f}"
        )
    click.echo(f"wrote {len(sizes)} files, {total / 1e6:.2f} MB to {out}")


__all__ = ["simulate", "run_simulation", "job_configs", "Overrides", "preset_names", "math"]
