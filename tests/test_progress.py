"""Progress curve: rollbacks, lost steps, checkpoints, evaluations, logging intervals."""

from __future__ import annotations

import pytest

from toranalyze.reconstruct.analysis import AnalysisOptions, analyze_events, events_frame


def _steps(t0, s0, s1, dt=10.0, rep=True, every=1, f="r/t"):
    out = []
    for s in range(s0, s1 + 1):
        if (s - s0 + 1) % every == 0:
            out.append(dict(ts=t0 + (s - s0 + 1) * dt, kind="step", step=s, step_time_s=dt if rep else None, file=f))
    return out


def test_rollback_gives_lost_steps_and_rework():
    rec = [dict(ts=0, kind="job_start", job_id="1", file="r/s")] + _steps(0, 1, 30)
    rec += [dict(ts=301, kind="job_end", job_id="1", state="FAILED", file="r/s")]
    rec += [dict(ts=400, kind="job_start", job_id="2", file="r/s"), dict(ts=420, kind="ckpt_load", step=20, file="r/t")]
    rec += _steps(420, 21, 40)
    rec += [dict(ts=621, kind="job_end", job_id="2", state="COMPLETED", file="r/s")]
    an = analyze_events(events_frame(rec))
    t = an.tor.row(0, named=True)
    assert t["rework_us"] == 10 * 10_000_000
    assert t["steps_lost"] == 10 and t["steps_preserved"] == 40
    inc = an.incidents.row(0, named=True)
    assert inc["lost_steps"] == 10 and inc["lost_time_s"] == pytest.approx(100.0)
    assert an.attempts["steps_lost"].to_list() == [10, 0]


def test_resume_without_ckpt_load_uses_first_step_minus_one():
    rec = [dict(ts=0, kind="init", file="r/t")] + _steps(0, 1, 10)
    rec += [dict(ts=200, kind="init", file="r/t")] + _steps(200, 6, 12)
    an = analyze_events(events_frame(rec))
    assert an.attempts["resumed_from"].to_list() == [0, 5]
    assert an.incidents["lost_steps"].to_list() == [5]


def test_checkpoint_begin_end_pair_and_lone_lines():
    rec = [dict(ts=0, kind="init", file="r/t")] + _steps(0, 1, 10)
    rec += [dict(ts=101, kind="ckpt_save_begin", step=10, file="r/t"), dict(ts=109, kind="ckpt_save_end", step=10, file="r/t")]
    rec += _steps(109, 11, 20)
    # lone end line with a duration
    rec += [dict(ts=214, kind="ckpt_save_end", step=20, duration_s=5.0, file="r/t")]
    rec += _steps(214, 21, 30)
    # lone end line, no duration: spans from the last step's end
    rec += [dict(ts=320, kind="ckpt_save_end", step=30, file="r/t")]
    rec += _steps(320, 31, 40)
    an = analyze_events(events_frame(rec))
    assert an.tor["checkpoint_s"][0] == pytest.approx(8 + 5 + 6)  # 214-209 = 5 unattributed -> other


def test_spike_inferred_checkpoint_from_lone_begin():
    rec = [dict(ts=0, kind="init", file="r/t")] + _steps(0, 1, 10)
    rec += [dict(ts=100, kind="ckpt_save_begin", step=10, file="r/t")]
    rec += _steps(112, 11, 20)  # the next step ends at 122: 12 s of saving before its 10 s of compute
    an = analyze_events(events_frame(rec))
    assert an.tor["checkpoint_s"][0] == pytest.approx(12.0)


def test_eval_goes_to_other_and_logging_interval_rows():
    rec = [dict(ts=0, kind="init", file="r/t")] + _steps(0, 1, 50, rep=False, every=5)
    rec += [dict(ts=500, kind="eval_begin", file="r/t"), dict(ts=530, kind="eval_end", file="r/t")]
    rec += _steps(530, 51, 100, rep=False, every=5)
    an = analyze_events(events_frame(rec))
    t = an.tor.row(0, named=True)
    assert t["eval_s"] == pytest.approx(30.0)
    assert t["ideal_step_time_s"] == pytest.approx(10.0)
    assert t["steps_preserved"] == 100
    assert t["useful_s"] == pytest.approx(1000.0)


def _coarse_run(seed=0, n=300, every=1, save_at=(100, 200), eval_at=(200,)):
    """Steps of ~5 s (jitter 2 %) reported to 0.1 ms, stamped to the second (truncated) like
    Megatron; saves of ~20 s, evaluations of 30 s without a timestamp of their own."""
    import math

    import numpy as np

    rng = np.random.default_rng(seed)
    t = 100.0 + rng.uniform(0, 1)
    rec = [dict(ts=100, kind="job_start", job_id="1", file="r/s"), dict(ts=float(int(t)), kind="init", file="r/t")]
    exact = []
    acc, k = 0.0, 0
    for s in range(1, n + 1):
        d = 5.0 * float(rng.lognormal(0, 0.02))
        t += d
        acc, k = acc + d, k + 1
        exact.append(d)
        if s % every == 0:
            rec.append(dict(ts=float(math.floor(t)), kind="step", step=s, step_time_s=round(acc / k, 4), file="r/t"))
            acc, k = 0.0, 0
        if s in save_at:
            rec.append(dict(ts=float(math.floor(t)), kind="ckpt_save_begin", step=s, file="r/t"))
            t += 20.0 + rng.uniform(-2, 2)
            rec.append(dict(ts=float(math.floor(t)), kind="ckpt_save_end", step=s, file="r/t"))
        if s in eval_at:
            rec.append(dict(ts=float(math.floor(t)), ts_inferred=True, kind="eval_end", step=s, file="r/t"))
            t += 30.0
    rec.append(dict(ts=float(math.floor(t + 10)), kind="job_end", job_id="1", state="COMPLETED", file="r/s"))
    return rec, exact


def test_second_resolution_stamps_are_sharpened_by_the_reported_step_times():
    """Truncated stamps used as step ends moved ~0.1 s per step from steps to `other`; chained
    on the reported times the steps are contiguous and exactly as long as reported."""
    rec, exact = _coarse_run()
    an = analyze_events(events_frame(rec), AnalysisOptions(ideal_step_time_s=5.0))
    t = an.tor.row(0, named=True)
    useful = sum(min(d, 5.0) for d in exact)
    slow = sum(max(d - 5.0, 0.0) for d in exact)
    assert t["useful_s"] == pytest.approx(useful, abs=0.5)
    assert t["slowdown_s"] == pytest.approx(slow, abs=0.5)
    assert t["checkpoint_s"] == pytest.approx(40.0, abs=4.5)  # two saves of 20 +- 2 s
    assert t["eval_s"] == pytest.approx(30.0, abs=1.5)  # the block placed at the save's end time


def test_rows_averaging_several_steps_count_their_jitter_above_t_star():
    """A line every 10 steps hides single steps; useful time is still per step (min(d, t*)), so
    the spread of the steps inside a row is estimated from the job's own rows."""
    rec, exact = _coarse_run(seed=3, n=600, every=10, save_at=(200, 400), eval_at=())
    an = analyze_events(events_frame(rec), AnalysisOptions(ideal_step_time_s=5.0))
    t = an.tor.row(0, named=True)
    slow = sum(max(d - 5.0, 0.0) for d in exact)
    assert slow > 20  # the jitter alone: about 0.04 s a step
    assert t["slowdown_s"] == pytest.approx(slow, rel=0.25)
    assert t["useful_s"] + t["slowdown_s"] == pytest.approx(sum(exact), abs=1.0)


def _refine_scan(rows):
    """refine_ends as the sequential scan it is specified as (one row at a time)."""
    import polars as pl

    from toranalyze.reconstruct.progress import resolution_us

    grp = ("job", "attempt_idx")
    r = rows.sort(*grp, "step").with_columns(
        resolution_us(pl.col("t_log")).over(grp).alias("_res"),
        (pl.col("step") - pl.col("step").shift(1).over(grp)).alias("_n"),
        pl.struct(*grp).rle_id().alias("_g"),
    )
    t, res, rep, n, g = (r[c].to_list() for c in ("t_log", "_res", "rep_us", "_n", "_g"))
    out, cum = list(t), [0] * len(t)
    i0, lo, hi, c, tol = 0, t[0], t[0] + res[0], 0, 0
    for i in range(1, len(t) + 1):
        if i < len(t) and g[i] == g[i - 1] and res[i] > 0 and (rep[i] or 0) > 0 and (n[i] or 0) > 0:
            ci, ti = c + n[i] * rep[i], tol + n[i] * 60 + 100
            lo2, hi2 = max(lo, t[i] - ci), min(hi, t[i] + res[i] - ci)
            if lo2 <= hi2 + ti:
                lo, hi, c, tol, cum[i] = lo2, max(hi2, lo2), ci, ti, ci
                continue
        for j in range(i0, i):
            out[j] = lo + cum[j]
        if i < len(t):
            i0, lo, hi, c, tol = i, t[i], t[i] + res[i], 0, 0
    return r.with_columns(pl.Series("t_end", out, pl.Int64)).drop("_res", "_n", "_g")


@pytest.mark.parametrize("bulk", [0, 2])
@pytest.mark.parametrize("seed", range(40))
def test_refine_ends_equals_the_sequential_scan(seed, bulk, monkeypatch):
    """Chains found by whole-column passes are the scan's, on second and millisecond clocks with
    stalls (saves) and jitter that break chains anywhere."""
    import numpy as np
    import polars as pl
    from polars.testing import assert_frame_equal

    from toranalyze.reconstruct import progress
    from toranalyze.reconstruct.progress import refine_ends

    monkeypatch.setattr(progress, "_BULK_ROUNDS", bulk)  # 0: the one-row-at-a-time corrections alone
    rng = np.random.default_rng(seed)
    parts = []
    for job in range(3):
        for att in range(2):
            k = int(rng.integers(1, 60))
            step = np.cumsum(rng.choice([1, 1, 1, 2, 5], k)) + 10 * att
            d = rng.normal(1.3, 0.05 if seed % 2 else 0.4, k).clip(0.2)
            stall = rng.random(k) < 0.1
            true_end = 1_700_000_000 + np.cumsum(d * np.diff(step, prepend=step[0] - 1) + stall * rng.uniform(0, 30, k))
            res = [1.0, 1e-3][(seed + job) % 2]
            t_log = (np.floor(true_end / res) * res * 1e6).round().astype(np.int64)
            rep = (d * 1e6 + rng.normal(0, 200, k)).round().astype(np.int64)
            rep = np.where(rng.random(k) < 0.05, 0, rep)
            parts.append(pl.DataFrame({"job": f"j{job}", "attempt_idx": att, "step": step, "t_log": t_log,
                                       "rep_us": rep}).with_columns(
                pl.when(pl.int_range(pl.len()) % 17 == 3).then(None).otherwise(pl.col("rep_us")).alias("rep_us")))
    rows = pl.concat(parts).with_columns(pl.col("attempt_idx").cast(pl.Int32))
    got = refine_ends(rows)
    assert_frame_equal(got, _refine_scan(rows))


def test_sort_by_key_skips_only_a_strictly_ordered_frame():
    import polars as pl

    from toranalyze.reconstruct.progress import sort_by_key

    ordered = pl.DataFrame({"a": [1, 1, 2], "b": [1, 2, 0], "x": ["p", "q", "r"]})
    assert sort_by_key(ordered, "a", "b").equals(ordered)
    shuffled = ordered[[2, 0, 1]]
    assert sort_by_key(shuffled, "a", "b").equals(ordered)
    ties = pl.DataFrame({"a": [1, 1], "b": [2, 2], "x": ["p", "q"]})  # not strictly ordered: sorted as asked
    assert sort_by_key(ties, "a", "b").sort("x").equals(ties)
    with_null = pl.DataFrame({"a": [1, None], "b": [1, 2]})
    assert sort_by_key(with_null, "a", "b")["a"].to_list() == [None, 1]


@pytest.mark.parametrize("packed", [True, False])
def test_step_rows_merge_ranks_with_and_without_packed_keys(packed, monkeypatch):
    """Records of one step from several ranks are one row (earliest time, median reported time,
    their count) whether the keys are packed into one integer or compared column by column."""
    import polars as pl

    from toranalyze.reconstruct import progress

    if not packed:
        monkeypatch.setattr(progress, "packed_key", lambda df, cols: None)
    us = 1_000_000
    ev = pl.DataFrame({
        "job": pl.Series([0, 0, 0, 0, 1, 0, 0], dtype=pl.UInt32),
        "attempt_idx": pl.Series([0, 0, 0, 1, 0, 0, 0], dtype=pl.Int32),
        "step": [2, 1, 2, 1, 1, 2, 3],
        "t": [20 * us, 10 * us, 21 * us, 50 * us, 11 * us, 19 * us, 30 * us],
        "step_time_s": [1.0, 1.0, 3.0, 1.0, 1.0, 2.0, None],
        "kind": ["step"] * 7,
    })
    rows = progress.step_rows(ev)
    assert rows.select("job", "attempt_idx", "step", "t_log", "rep_us", "n_ranks").rows() == [
        (0, 0, 1, 10 * us, us, 1),
        (0, 0, 2, 19 * us, 2 * us, 3),
        (0, 0, 3, 30 * us, None, 1),
        (0, 1, 1, 50 * us, us, 1),
        (1, 0, 1, 11 * us, us, 1),
    ]
