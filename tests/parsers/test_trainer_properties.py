"""Properties of the trainer parser, and its classification rules."""

from __future__ import annotations

import math
from importlib import resources

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toranalyze_parsers.trainer import parser

from tests.conftest import extract_lines
from toranalyze.ingest.classify import classify, load_rules, parse_rules
from toranalyze.schema import KINDS, RAW_SCHEMA, SEVERITIES

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Fragments of real records, so that random lines get near the parser's patterns.
FRAGMENTS = [
    " iteration ", "/ 1000 |", " elapsed time per iteration (ms): ", "lm loss: ", "nan", "inf", " | ",
    "saving checkpoint at iteration ", "successfully saved checkpoint from iteration ", "datetime: ",
    "2021-05-23 08:41:06", "[2024-01-01 00:00:00,000] ", "[INFO] [logging.py:1:f] ", "step=", ", skipped=0, lr=",
    "{'loss': ", "'epoch': 1}", "%|", "| 3/10 [", "00:05<00:10, ", "1.5s/it", "]", "\r", ":::MLLOG ",
    '{"time_ms": ', '"key": "tracked_stats"', '"train_step_timing": ', "Epoch 0: ", "global_step=",
    "[rank0]:[titan] ", " - root - INFO - ", "step: ", "  loss: ", "iteration: ", "| elapsed time: ",
    "** Starting validation **", "Global Checkpoint Save : Rank: 0 : ", "global_step", "checkpoint-",
]


LINE = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=12), max_size=8).map("".join)


@SETTINGS
@given(st.lists(LINE, min_size=1, max_size=12))
def test_never_raises_and_returns_raw_schema(raw: list[str]) -> None:
    lines = [s.replace("\n", " ") for s in raw]
    out = extract_lines(parser, lines)
    assert out.schema == RAW_SCHEMA
    assert set(out["kind"]) <= set(KINDS) and set(out["severity"]) <= set(SEVERITIES)
    assert out["message"].null_count() == 0 and out["line"].null_count() == 0
    assert out.filter(pl.col("line") > len(lines)).height == 0


LOSS = st.one_of(
    st.floats(min_value=1e-6, max_value=1e3, allow_nan=False),
    st.sampled_from(["nan", "inf", "-inf", None]),
)


@SETTINGS
@given(
    step=st.integers(min_value=1, max_value=10**7),
    elapsed=st.floats(min_value=0.1, max_value=10**6, allow_nan=False),
    unit=st.sampled_from(["ms", "s"]),
    loss=LOSS,
    lead=st.sampled_from(["", " ", "[2024-06-12 10:00:00] ", "[default7]: "]),
    scale=st.booleans(),
)
def test_megatron_iteration_fields_round_trip(
    step: int, elapsed: float, unit: str, loss: float | str | None, lead: str, scale: bool
) -> None:
    loss_text = "" if loss is None else f" lm loss: {loss if isinstance(loss, str) else format(loss, '.6E')} |"
    line = (
        f"{lead}iteration {step:8d}/ 99999999 | consumed samples: 42 | elapsed time per iteration ({unit}): "
        f"{elapsed:.1f} | learning rate: 1.000E-04 |{loss_text}{' loss scale: 4096.0 |' if scale else ''}"
        " number of skipped iterations:   0 | number of nan iterations:   0 |"
    )
    (row,) = extract_lines(parser, [line]).rows(named=True)
    assert (row["kind"], row["step"]) == ("step", step)
    want_s = float(f"{elapsed:.1f}") / (1000 if unit == "ms" else 1)
    assert row["step_time_s"] == pytest.approx(want_s, rel=1e-9)
    if loss is None or loss == "nan":
        assert math.isnan(row["loss"])
    elif isinstance(loss, str):
        assert row["loss"] == float(loss)
    else:
        assert row["loss"] == pytest.approx(float(format(loss, ".6E")))


@SETTINGS
@given(st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=40), st.integers(1, 4))
def test_tqdm_repaints_give_each_reached_step_once(increments: list[int], ranks: int) -> None:
    total = 1000
    ns = []
    n = 0
    for inc in increments:  # repaints never go back; 0 increments are repeated repaints
        n = min(total, n + inc % 3)
        ns.append(n)
    bar = "\r".join(
        f"{100 * k // total:3d}%|#         | {k}/{total} [{i // 60:02d}:{i % 60:02d}<00:10, 2.00s/it]"
        for i, k in enumerate([0, *ns])
    )
    steps = extract_lines(parser, [bar] * ranks).filter(pl.col("kind") == "step")
    assert steps["step"].to_list() == sorted({k for k in ns if k > 0})


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=20), st.randoms(use_true_random=False))
def test_mlperf_rank_copies_count_once(copies: list[int], rnd: object) -> None:
    lines = []
    for i, c in enumerate(copies):
        rec = (
            f':::MLLOG {{"namespace": "", "time_ms": {1_000_000 + 2600 * i}, "event_type": "POINT_IN_TIME", '
            f'"key": "tracked_stats", "value": {{"train_step_timing": 2.6, "reduced_train_loss": 2.7}}, '
            f'"metadata": {{"file": "x.py", "lineno": 1, "step": {2048 * (i + 1)}}}}}'
        )
        lines += [rec] * c
    rnd.shuffle(lines)  # type: ignore[attr-defined]
    steps = extract_lines(parser, lines).filter(pl.col("kind") == "step").sort("ts")
    # one step per record whatever the copies; numbered in time order, not in line order
    assert steps["step"].to_list() == list(range(1, len(copies) + 1))


@SETTINGS
@given(st.lists(st.sampled_from([
    "using world size: 8, data-parallel-size: 8, tensor-model-parallel size: 1, pipeline-model-parallel size: 1 ",
    "> initializing torch distributed ...",
    "building GPT model ...",
    "> initializing tensor model parallel with size 1",
    "> initialized tensor model parallel with size 8",
]), min_size=1, max_size=10))
def test_start_banners_of_one_start_are_one_init(banners: list[str]) -> None:
    out = extract_lines(parser, banners)
    assert out["kind"].to_list() == ["init"] and out["line"].to_list() == [1]


# ---------------------------------------------------------------- rules


def _trainer_rules() -> list:
    text = (resources.files("toranalyze") / "rules" / "trainer.toml").read_text(encoding="utf-8")
    return parse_rules(text, "trainer.toml")


def _classify(lines: list[str]) -> list[tuple[str, str | None, str]]:
    out = extract_lines(parser, lines).with_columns(pl.lit("trainer").alias("source"))
    got = classify(out, _trainer_rules()).collect()
    return list(zip(got["kind"], got["failure_class"], got["severity"], strict=True))


@pytest.mark.parametrize(
    "line",
    [
        " iteration      120/  500000 | elapsed time per iteration (ms): 1000.0 | lm loss: nan | number of "
        "skipped iterations:   0 | number of nan iterations:   0 |",
        " iteration      110/  500000 | elapsed time per iteration (ms): 1200.0 | loss scale: 1.0 | number of "
        "skipped iterations:  10 | number of nan iterations:  10 |",
        " iteration      110/  500000 | elapsed time per iteration (ms): 1200.0 | lm loss: inf | number of skipped"
        " iterations:   0 | number of nan iterations:   0 |",
        "{'loss': nan, 'learning_rate': 4e-05, 'epoch': 0.5}",
        "{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '2e-05', 'epoch': '1'}",
        "[rank0]:[titan] 2025-01-10 10:00:30,000 - root - INFO - step: 120  loss:     nan  memory: 30.12GiB(38.05%)",
        "Epoch 0: :  47%|████▋     | 7/15 [06:19<07:13, reduced_train_loss=nan, global_step=5.000]",
        "iteration:  2500/500000   0% | elapsed time: 07:41:19 | per_token_loss: nan | lr: 9.990E-06 |",
        ' validation loss at iteration 7000 | lm loss value: nan | lm loss PPL: nan |',
    ],
)
def test_nan_and_inf_losses_are_numerics(line: str) -> None:
    ((kind, cls, sev),) = _classify([line])
    assert kind in ("step", "eval_end") and (cls, sev) == ("numerics", "error")


def test_mlperf_nan_loss_is_numerics() -> None:
    line = (
        ':::MLLOG {"namespace": "", "time_ms": 1684435766361, "event_type": "POINT_IN_TIME", "key": '
        '"tracked_stats", "value": {"train_step_timing": 2.9, "reduced_train_loss": NaN}, "metadata": {"step": 1}}'
    )
    assert _classify([line]) == [("step", "numerics", "error")]


@pytest.mark.parametrize(
    "line",
    [
        # iterations skipped for fp16 overflow: no loss printed, but no NaN either
        " iteration       10/    1000 | consumed samples:           40 | elapsed time per iteration (ms): 5837.9 |"
        " learning rate: 0.000E+00 | global batch size:     4 | loss scale: 8388608.0 | number of skipped "
        "iterations:  10 | number of nan iterations:   0 |",
        "[2024-03-01 10:00:05,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
        "step. Attempted loss scale: 65536, reducing to 32768",
    ],
)
def test_recovered_numerics_are_warnings(line: str) -> None:
    """fp16 overflow skips are numerics evidence, but a warning: the run recovers from them."""
    assert [(cls, sev) for _, cls, sev in _classify([line])] == [("numerics", "warning")]


@pytest.mark.parametrize(
    "line",
    [
        # a huge validation loss overflows the perplexity, not the loss
        " validation loss at iteration 7000 | lm loss value: 1.142026E+01 | lm loss PPL: inf |",
        " iteration     7010/  159576 | elapsed time per iteration (ms): 19904.0 | lm loss: 1.142026E+01 | loss "
        "scale: 2048.0 | grad norm: 219645.978 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    ],
)
def test_not_failures(line: str) -> None:
    assert all(cls is None for _, cls, _ in _classify([line]))


def test_loss_scale_floor_is_numerics_critical() -> None:
    line = "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
    assert _classify([line]) == [("error", "numerics", "critical")]


def test_trainer_rules_load_with_the_builtins() -> None:
    ids = [r.id for r in load_rules()]
    assert {"trainer-nan-iterations", "trainer-loss-nan", "trainer-loss-scale-floor"} <= set(ids)
