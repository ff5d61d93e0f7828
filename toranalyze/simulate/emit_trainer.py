"""Megatron-style trainer output of rank 0 (iteration lines, checkpoints, banners).

Yields ``(t_true_us, text)`` in time order; the printed clock is the rank-0
node's (true time + its skew).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from toranalyze.simulate import fmt
from toranalyze.simulate.context import RunContext
from toranalyze.simulate.timeline import Attempt, Chunk, Eval, Save

Line = tuple[int, str]


def loss_at(step: int, noise: float) -> float:
    return 2.05 + 8.8 * math.exp(-step / 350.0) + 0.9 * math.exp(-step / 4000.0) + noise


def lr_at(step: int, total: int, peak: float = 3.0e-4, warmup: int = 100) -> float:
    if step < warmup:
        return peak * step / warmup
    x = min(1.0, (step - warmup) / max(1, total - warmup))
    return 3.0e-5 + (peak - 3.0e-5) * 0.5 * (1.0 + math.cos(math.pi * x))


def banner(ctx: RunContext, a: Attempt) -> Iterator[Line]:
    cfg = ctx.cfg
    sk = ctx.skew(a.nodes[0])
    tp = min(8, cfg.gpus_per_node)
    dp = max(1, ctx.world // tp)
    t = a.start + (a.load_begin - a.start) // 5
    yield t, (
        f"using world size: {ctx.world}, data-parallel size: {dp}, context-parallel size: 1, "
        f"tensor-model-parallel size: {tp}, pipeline-model-parallel size: 1 "
    )
    yield t, "> initializing torch distributed ..."
    t2 = a.start + (a.load_begin - a.start) * 2 // 3
    yield t2, f"> initialized tensor model parallel with size {tp}"
    yield t2, "> initialized pipeline model parallel with size 1"
    yield t2, "> setting random seeds to 1234 ..."
    yield t2, "building GPT model ..."
    yield t2, " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 1157203968"
    tb = a.load_begin
    yield tb, f"[after model, optimizer, and learning rate scheduler are built] datetime: {fmt.bracket(tb + sk)} "
    if a.resumed_from > 0:
        yield tb, f"[{fmt.bracket(tb + sk)}] loading checkpoint from {ctx.ckpt_dir} at iteration {a.resumed_from}"
        te = a.first_step_start - min(2_000_000, (a.first_step_start - tb) // 4)
        yield te, (
            f"[{fmt.bracket(te + sk)}]  successfully loaded checkpoint from {ctx.ckpt_dir} "
            f"[ t 1/{tp}, p 1/1 ] at iteration {a.resumed_from}"
        )
    else:
        yield tb, f"WARNING: could not find the metadata file {ctx.ckpt_dir}/latest_checkpointed_iteration.txt "
        yield tb, "    will not load any checkpoints and will start from random"
    ts = a.first_step_start
    yield ts, "> building train, validation, and test datasets ..."
    yield ts, f"[after dataloaders are built] datetime: {fmt.bracket(ts + sk)} "
    yield ts, "done with setup ..."
    yield ts, "training ..."
    yield ts, f"[before the start of training step] datetime: {fmt.bracket(ts + sk)} "


LOSS_CHUNK = 1 << 16


def _draws(rng: np.random.Generator, skip: int, draw) -> Iterator[float]:  # noqa: ANN001
    """Values of one stream drawn in chunks; the first ``skip`` normals of the generator are
    skipped first. Chunked draws equal one big draw, so the values do not depend on chunking."""
    while skip > 0:
        k = min(skip, LOSS_CHUNK)
        rng.normal(0.0, 0.02, k)
        skip -= k
    while True:
        yield from draw(rng, LOSS_CHUNK).tolist()


@dataclass(frozen=True)
class Reading:
    """What one iteration line reports besides its step: the mean step time and NaN count of the
    steps since the previous line, and the step's loss noise and grad norm."""

    avg_ms: float
    nan_count: int
    loss_noise: float
    grad_norm: float


def _iteration_line(ctx: RunContext, s: int, printed: int, r: Reading) -> str:
    """Step ``s``'s iteration line stamped ``printed``: loss and grad norm, or the NaN count when
    steps since the previous line went NaN."""
    avg_ms, nan_count, nz, gn = r.avg_ms, r.nan_count, r.loss_noise, r.grad_norm
    T = ctx.cfg.train_iters
    gbs = ctx.cfg.global_batch_size
    body = (
        f"[{fmt.bracket(printed)}] iteration {s:8d}/{T:8d} | consumed samples: {s * gbs:12d} | "
        f"elapsed time per iteration (ms): {avg_ms:.1f} | learning rate: {lr_at(s, T):.6E} | "
        f"global batch size: {gbs:5d} |"
    )
    if nan_count:
        return body + f" loss scale: 1.0 | number of skipped iterations: {0:3d} | number of nan iterations: {nan_count:3d} |"
    return body + (
        f" lm loss: {loss_at(s, nz):.6E} | loss scale: 1.0 | grad norm: {gn:.3f} |"
        f" number of skipped iterations: {0:3d} | number of nan iterations: {0:3d} |"
    )


def _save_lines(ctx: RunContext, sv: Save, sk: int) -> Iterator[Line]:
    """A checkpoint save's begin line, and its end line when it completed."""
    s = sv.step
    yield sv.begin, f"[{fmt.bracket(sv.begin + sk)}] saving checkpoint at iteration {s:7d} to {ctx.ckpt_dir}"
    if sv.completed:
        yield sv.end, (
            f"[{fmt.bracket(sv.end + sk)}]   successfully saved checkpoint at iteration {s:7d} to {ctx.ckpt_dir}"
        )


def _eval_lines(ev: Eval) -> Iterator[Line]:
    """A completed validation's block: its loss between two dashed lines."""
    s = ev.step
    vl = loss_at(s, 0.01) + 0.03
    dash = "-" * 100
    yield ev.end, dash
    yield ev.end, (
        f" validation loss at iteration {s} | lm loss value: {vl:.6E} | lm loss PPL: {math.exp(vl):.6E} | "
    )
    yield ev.end, dash


def progress(ctx: RunContext, a: Attempt, chunks: Iterable[Chunk] | None = None) -> Iterator[Line]:
    """Iteration lines, checkpoint saves and validation blocks, in time order.

    ``chunks`` are the attempt's steps (numbers, ends, durations) in order, as
    :meth:`Timeline.steps` hands them out; by default the attempt's kept arrays.
    """
    sk = ctx.skew(a.nodes[0])
    T = ctx.cfg.train_iters
    li = max(1, ctx.cfg.log_interval)
    if chunks is None:
        chunks = [(a.steps, a.step_end, a.step_dur)] if len(a.steps) else []
    n = a.n_steps
    # loss noise: n normals, then n lognormal grad norms, from one generator; read as two streams
    noise = _draws(ctx.rng("loss", a.index), 0, lambda r, k: r.normal(0.0, 0.02, k)) if n else iter(())
    gnorm = _draws(ctx.rng("loss", a.index), n, lambda r, k: r.lognormal(-0.9, 0.25, k)) if n else iter(())
    saves = {s.step: s for s in a.saves}
    evals = {e.step: e for e in a.evals}
    nan_from = a.nan_from_step if a.nan_from_step is not None else 1 << 62
    acc_ms = 0.0
    acc_n = 0
    nan_count = 0
    for steps, ends, durs in chunks:
        # steps of one attempt strictly increase, so every save/eval found here follows its step
        for s, t, dur in zip(steps.tolist(), ends.tolist(), durs.tolist(), strict=True):
            nz = next(noise)
            gn = next(gnorm)
            acc_ms += dur / 1000.0
            acc_n += 1
            if s >= nan_from:
                nan_count += 1
            if s % li == 0 or s == T:
                yield t, _iteration_line(ctx, s, t + sk, Reading(acc_ms / acc_n, nan_count, nz, gn))
                acc_ms = 0.0
                acc_n = 0
                nan_count = 0
            sv = saves.get(s)
            if sv is not None:
                yield from _save_lines(ctx, sv, sk)
            ev = evals.get(s)
            if ev is not None and ev.completed:
                yield from _eval_lines(ev)


def final(ctx: RunContext, a: Attempt) -> Iterator[Line]:
    """Lines after the last step of a completed run."""
    sk = ctx.skew(a.nodes[0])
    yield a.end - 1_000_000, f"[after training is done] datetime: {fmt.bracket(a.end - 1_000_000 + sk)} "
