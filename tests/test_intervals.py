"""Linear range look-ups (reconstruct/intervals.py): the same rows as the pairwise join they
replace, and no join of the analysis growing faster than the run."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toranalyze.reconstruct.analysis import analyze_events, events_frame
from toranalyze.reconstruct.intervals import AsofOn, OrderedKeys, asof_in_order, in_windows, min_after

JOBS = st.sampled_from(["a", "b"])
WINDOWS = st.lists(st.tuples(JOBS, st.integers(0, 60), st.integers(-5, 30)), max_size=8)
RECORDS = st.lists(st.tuples(JOBS, st.integers(-5, 100), st.integers(0, 3)), max_size=40)


def _windows(ws: list[tuple[str, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        [(j, i, lo, lo + w) for i, (j, lo, w) in enumerate(ws)],
        schema={"job": pl.String, "attempt_idx": pl.Int32, "_lo": pl.Int64, "_hi": pl.Int64},
        orient="row",
    )


@settings(max_examples=150, deadline=None)
@given(WINDOWS, RECORDS)
def test_in_windows_is_the_pairwise_join(ws: list[tuple[str, int, int]], rs: list[tuple[str, int, int]]) -> None:
    win = _windows(ws)
    rec = pl.DataFrame(rs, schema={"job": pl.String, "t": pl.Int64, "v": pl.Int64}, orient="row").with_columns(
        pl.lit(7, pl.Int32).alias("attempt_idx")  # replaced by the window's
    )
    want = win.join(rec.drop("attempt_idx"), on="job").filter((pl.col("t") >= pl.col("_lo")) & (pl.col("t") <= pl.col("_hi")))
    got = in_windows(win, rec)
    assert got.columns == want.columns
    assert got.sort(got.columns).equals(want.sort(want.columns))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(JOBS, st.integers(0, 9), st.one_of(st.none(), st.integers(0, 30)),
                       st.one_of(st.none(), st.integers(0, 1000))), max_size=60),
    st.lists(st.tuples(JOBS, st.integers(0, 10), st.one_of(st.none(), st.integers(0, 32))), max_size=10),
)
def test_min_after_is_the_pairwise_minimum(rows: list[Any], qs: list[Any]) -> None:
    r = pl.DataFrame(rows, schema={"job": pl.String, "attempt_idx": pl.Int32, "step": pl.Int64, "t_end": pl.Int64},
                     orient="row")
    q = pl.DataFrame(qs, schema={"job": pl.String, "attempt": pl.Int32, "step": pl.Int64}, orient="row")
    want = (
        q.join(r.rename({"step": "_s"}), on="job")
        .filter((pl.col("attempt_idx") > pl.col("attempt")) & (pl.col("_s") >= pl.col("step")))
        .group_by("job", "attempt")
        .agg(pl.col("t_end").min())
        .filter(pl.col("t_end").is_not_null())
    )
    got = min_after(q, r, "t_end")
    assert got.schema == want.schema
    assert got.sort("job", "attempt").equals(want.sort("job", "attempt"))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(-20, 40)), max_size=40, unique=True),
    st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 5)), st.integers(-1, 3),
                       st.one_of(st.none(), st.integers(-30, 50))), max_size=12),
    st.sampled_from(["backward", "forward"]),
    st.booleans(),
)
def test_asof_in_order_is_the_asof_join(rows: list[Any], left: list[Any], strategy: str, exact: bool) -> None:
    right = pl.DataFrame(sorted(rows), schema={"job": pl.UInt32, "attempt_idx": pl.Int32, "_s": pl.Int64},
                         orient="row").with_columns((pl.col("_s") * 10).alias("v"), pl.col("_s").alias("step"))
    q = pl.DataFrame(left, schema={"job": pl.UInt32, "attempt_idx": pl.Int32, "step": pl.Int64},
                     orient="row").sort("step", nulls_last=True)
    by = ["job", "attempt_idx"]
    want = q.join_asof(right, left_on="step", right_on="_s", by=by, strategy=strategy,  # type: ignore[arg-type]
                       allow_exact_matches=exact, check_sortedness=False)
    keys = OrderedKeys(right, by, "_s")
    assert keys.ok == (right.height > 0)
    if keys.ok:
        got = asof_in_order(q, right, AsofOn("step", "_s", strategy, exact), by, keys)
        assert got.equals(want)


def _run(n_attempts: int, steps_per_attempt: int) -> list[dict[str, Any]]:
    """A job that fails ``n_attempts - 1`` times, each failure with three error records."""
    rec: list[dict[str, Any]] = []
    t, step = 0.0, 0
    for a in range(n_attempts):
        rec.append(dict(ts=t, kind="job_start", job_id=str(a + 1), file="r/sacct"))
        if a:
            rec.append(dict(ts=t + 2, kind="ckpt_load", step=step - 5, file="r/train"))
            step -= 5
        t += 5
        for _ in range(steps_per_attempt):
            t += 2.0
            step += 1
            rec.append(dict(ts=t, kind="step", step=step, step_time_s=2.0, file="r/train"))
        last = a == n_attempts - 1
        if not last:
            rec += [dict(ts=t + 3 + i, kind="error", rank=i, failure_class="software", file="r/train")
                    for i in range(3)]
        rec.append(dict(ts=t + 10, kind="job_end", job_id=str(a + 1), state="COMPLETED" if last else "FAILED",
                        file="r/sacct"))
        t += 60
    return rec


def _largest_join(monkeypatch: pytest.MonkeyPatch, events: pl.DataFrame) -> tuple[int, int]:
    """(rows of the largest frame any join of the analysis returned, incidents found)."""
    sizes = [0]
    for name in ("join", "join_asof", "join_where"):
        orig = getattr(pl.DataFrame, name)

        def wrapped(self: pl.DataFrame, *a: Any, _orig: Any = orig, **k: Any) -> pl.DataFrame:
            out = _orig(self, *a, **k)
            sizes.append(out.height)
            return out

        monkeypatch.setattr(pl.DataFrame, name, wrapped)
    an = analyze_events(events)
    monkeypatch.undo()
    return max(sizes), an.incidents.height


def test_no_join_of_the_analysis_grows_faster_than_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # Twice the attempts of twice the length: four times the records. A join pairing every
    # incident with every step row of its job would grow eight times, and exceed the records.
    small = events_frame(_run(20, 40))
    big = events_frame(_run(40, 80))
    assert big.height > 3.7 * small.height
    j_small, n_small = _largest_join(monkeypatch, small)
    j_big, n_big = _largest_join(monkeypatch, big)
    assert (n_small, n_big) == (19, 39)
    assert j_big <= big.height
    assert j_big <= 4.5 * j_small


def _slow_run(n_periods: int) -> list[dict[str, Any]]:
    """One attempt of 2 s steps with ``n_periods`` stretches of 20 steps at 3 s."""
    rec: list[dict[str, Any]] = [dict(ts=0.0, kind="job_start", job_id="1", file="r/sacct")]
    t, step = 5.0, 0
    for _ in range(n_periods):
        for dt in [2.0] * 40 + [3.0] * 20:
            t += dt
            step += 1
            rec.append(dict(ts=t, kind="step", step=step, step_time_s=dt, file="r/train"))
    rec.append(dict(ts=t + 10, kind="job_end", job_id="1", state="COMPLETED", file="r/sacct"))
    return rec


def test_slow_periods_do_not_pair_with_every_step_row(monkeypatch: pytest.MonkeyPatch) -> None:
    small, big = events_frame(_slow_run(8)), events_frame(_slow_run(16))
    j_small, _ = _largest_join(monkeypatch, small)
    j_big, _ = _largest_join(monkeypatch, big)
    assert analyze_events(big).slow_periods.height == 16
    assert j_big <= big.height
    assert j_big <= 2.2 * j_small
