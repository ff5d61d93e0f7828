"""The trainer parser on real published logs: goldens, ground-truth numbers, coverage, rules."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import cache
from importlib import resources
from pathlib import Path

import polars as pl
import pytest
from toranalyze_parsers.trainer import parser

from tests.conftest import DATA, assert_golden, parse_file
from toranalyze.ingest.classify import Rule, classify, parse_rules
from toranalyze.ingest.reader import read_text_events
from toranalyze.schema import validate_raw

HERE = DATA / "trainer"
REAL = HERE / "real"
GOLDEN = HERE / "golden"
REAL_FILES = sorted(p.name for p in REAL.iterdir())

N448 = REAL / "mlperf-v3.0_nvidia-coreweave_hgxh100_n448_gpt3_result_0.txt.zst"
N64 = REAL / "mlperf-v3.0_nvidia_dgxh100_n64_nemo_gpt3_result_0.txt.zst"
N16 = REAL / "bigscience_meg_ds_3d_gpt2_perf_n16-ds-off.out"


def _rules() -> list[Rule]:
    text = (resources.files("toranalyze") / "rules" / "trainer.toml").read_text(encoding="utf-8")
    return parse_rules(text, "trainer.toml")


@cache
def _events(name: str) -> pl.DataFrame:
    """Parsed once per test session (frames are immutable)."""
    return parse_file(parser, REAL / name)


def _kind(events: pl.DataFrame, kind: str) -> pl.DataFrame:
    return events.filter(pl.col("kind") == kind)


@pytest.mark.parametrize("name", REAL_FILES)
def test_real_logs_golden(name: str) -> None:
    events = _events(name)
    validate_raw(events.drop("parser", "source"), "trainer")
    assert_golden(events, GOLDEN / f"{Path(name.removesuffix('.zst')).stem}.json")


# ---------------------------------------------------------------- ground truth (INDEX.md)


@pytest.mark.parametrize(
    ("path", "steps", "first_step", "step_sum", "step_mean", "evals", "eval_sum", "run_s", "init_min"),
    [
        (N448, 220, 2287, 569.6, 2.589, 22, 74.4, 655.6, 12.49),
        (N64, 288, 3001, 3481.1, 12.087, 24, 365.3, 3857.3, 4.94),
    ],
)
def test_mlperf_ground_truth(
    path: Path, steps: int, first_step: int, step_sum: float, step_mean: float, evals: int, eval_sum: float,
    run_s: float, init_min: float,
) -> None:
    ev = _events(path.name)
    st = _kind(ev, "step")
    assert st.height == steps
    assert st["step"].to_list() == list(range(first_step, first_step + steps))
    assert st["step_time_s"].sum() == pytest.approx(step_sum, abs=0.05)
    assert st["step_time_s"].mean() == pytest.approx(step_mean, abs=0.0005)
    assert st["ts"].is_sorted()
    assert (st["ts_offset_s"] == 0).all() and not st["ts_inferred"].any()
    # the run resumes from the reference checkpoint (in units of this run's batch)
    assert _kind(ev, "ckpt_load")["step"].to_list() == [first_step - 1]
    ends = _kind(ev, "eval_end")
    assert _kind(ev, "eval_begin").height == evals and ends.height == evals
    assert ends["duration_s"].sum() == pytest.approx(eval_sum, abs=0.05)
    stop = _kind(ev, "job_end").row(0, named=True)  # run_stop, status success
    assert (stop["state"], stop["code"]) == ("COMPLETED", "0")
    assert stop["duration_s"] == pytest.approx(run_s, abs=0.05)
    assert stop["severity"] == "info" and "success" in stop["message"]
    (init,) = _kind(ev, "init")["ts"].to_list()  # one init although every rank logs init_start
    (done,) = _kind(ev, "init_done")["ts"].to_list()
    assert (done - init).total_seconds() / 60 == pytest.approx(init_min, abs=0.005)


def test_mlperf_n448_step_extremes_and_time() -> None:
    st = _kind(_events(N448.name), "step")
    assert st["step_time_s"].min() == pytest.approx(2.504, abs=0.0005)
    assert st["step_time_s"].max() == pytest.approx(2.969, abs=0.0005)
    assert st["ts"][0] == datetime(2023, 5, 18, 18, 49, 26, 361000)  # time_ms 1684435766361, UTC
    assert st["loss"][0] == pytest.approx(2.7798423767089844)


def test_bigscience_n16_time_rebuilt_from_datetime_and_iteration_times() -> None:
    ev = _events(N16.name)
    st = _kind(ev, "step")
    assert st.height == 62
    assert st["step"].to_list() == list(range(1, 63))
    assert st["step_time_s"].sum() == pytest.approx(7866.8, abs=0.05)
    assert st["step_time_s"][0] == pytest.approx(144.9156)
    assert st["step_time_s"][1:].mean() == pytest.approx(126.6, abs=0.05)
    # no clock on iteration lines: '[before the start of training step] datetime: 2021-06-10 23:06:15'
    # plus the summed per-iteration times
    start = datetime(2021, 6, 10, 23, 6, 15)
    assert st["ts_inferred"].all()
    assert st["ts"][0] == start + timedelta(seconds=144.9156)
    assert st["ts"][-1] == start + timedelta(seconds=7866.8488)
    init = _kind(ev, "init").row(0, named=True)
    # 'time to initialize megatron (seconds): 70.184' before '[after megatron is initialized] datetime: 23:06:14'
    assert init["ts"] == datetime(2021, 6, 10, 23, 5, 3, 816000) and init["ts_inferred"]
    assert init["n_gpus"] == 64 and init["line"] == 49
    assert _kind(ev, "init").height == 1
    done = _kind(ev, "init_done").row(0, named=True)
    assert done["ts"] == start and not done["ts_inferred"]
    assert _kind(ev, "ckpt_load")["step"].to_list() == [0]  # 'will not load any checkpoints'


# ---------------------------------------------------------------- specific real records


def test_wrapped_iteration_lines_are_one_record() -> None:
    st = _kind(_events("bloom176b_throughput_drop_slow_gpu_42780.log"), "step")
    assert st["line"].to_list() == [1, 4, 7, 10, 13]
    assert st["line_end"].to_list() == [3, 6, 9, 12, 15]
    assert st["step_time_s"].to_list() == [105.16, 105.17, 106.25, 110.17, 111.14]
    assert st["loss"][0] == pytest.approx(2.117073)
    wrapped = _kind(_events("tr8b104b_rollback_13250_skip_data_wrapped.log"), "step")
    assert wrapped.select("line", "line_end", "step").rows() == [(1, 3, 13251), (5, None, 14000)]
    assert wrapped["step_time_s"][0] == pytest.approx(220.6319)


def test_zero3_iterations_placed_after_deepspeed_clock() -> None:
    ev = _events("bigscience_megds_zero3_52b_n16_time_limit_cancel_1999616.log")
    st = _kind(ev, "step")
    anchor = datetime(2021, 5, 27, 21, 32, 12, 92000)  # last DeepSpeed activation-checkpointing record
    assert st["ts"][0] == anchor + timedelta(seconds=123.7424)
    assert st["ts"][3] == anchor + timedelta(seconds=123.7424 + 128.917 + 128.6427 + 127.766)
    done = _kind(ev, "init_done").row(0, named=True)  # 'training ...' takes the next clock
    assert done["ts"] == datetime(2021, 5, 27, 21, 32, 12, 91000) and done["ts_inferred"]


def test_skipped_iterations_without_loss_and_log_interval() -> None:
    ev = _events("bigscience_meg_gpt2_n16_pp16_user_scancel_1809577.log")
    st = _kind(ev, "step")
    first = st.row(0, named=True)
    # no 'lm loss': all 10 iterations were skipped for fp16 overflow, none was NaN -> unknown, not NaN
    assert first["step"] == 10 and first["loss"] is None
    # log interval 10: iteration 10 = the datetime banner + 10 x 5.8379 s
    assert first["ts"] == datetime(2021, 5, 23, 8, 41, 6) + timedelta(seconds=58.379)
    assert st["ts"][1] == first["ts"] + timedelta(seconds=27.111)
    # classified: an interval of overflow-skipped iterations is a numerics warning, never an error
    classified = classify(ev.with_columns(pl.lit("trainer").alias("source")), _rules()).collect()
    flagged = classified.filter(pl.col("failure_class").is_not_null())
    assert flagged.height and set(flagged["failure_class"]) == {"numerics"} and set(flagged["severity"]) == {"warning"}


def test_checkpoint_save_then_time_budget_exit() -> None:
    ev = _events("tr1_13b_ckpt_save_exit_then_not_scheduled_alert.log")
    begin = _kind(ev, "ckpt_save_begin").row(0, named=True)
    end = _kind(ev, "ckpt_save_end").row(0, named=True)
    # Megatron's line and DeepSpeed's per-rank record are one save; the clock is DeepSpeed's
    assert (begin["line"], begin["step"], begin["ts"]) == (3, 33241, datetime(2021, 8, 8, 1, 0, 44, 221000))
    assert (end["line"], end["step"], end["duration_s"]) == (5, 33241, 57.51453)
    exit_ = _kind(ev, "job_end").row(0, named=True)  # the time budget: a clean exit
    assert exit_["state"] == "COMPLETED"
    assert exit_["step"] == 33241 and exit_["ts"] == datetime(2021, 8, 8, 1, 0, 51)
    assert exit_["duration_s"] == pytest.approx(1190.0357275923093 * 60)
    assert _kind(ev, "ckpt_save_begin").height == 1 and _kind(ev, "ckpt_save_end").height == 1


def test_validation_records() -> None:
    hang = _events("bloom176b_eval_hang_45000_pulse.log")
    assert _kind(hang, "eval_end").select("step", "loss").rows() == [(45000, 2.327091)]
    glitch = _events("tr8_104b_exp1_loss_glitch_7000_then_nan_rollback_6210.log")
    assert _kind(glitch, "eval_end").select("line", "step", "loss").rows() == [(3, 7000, 7.1742)]
    assert _kind(glitch, "step")["step"].to_list() == [7000, 7010, 7220]


def test_hf_trainer_tqdm_steps() -> None:
    ev = _events("bigscience_hf_ds_zero3_gpt2_n4_success_full_run_1832555.log")
    st = _kind(ev, "step")
    # 4 ranks repaint the same bar: 16 steps once each, placed at 'Running training' + elapsed
    assert st["step"].to_list() == list(range(1, 17))
    start = datetime(2021, 5, 25, 6, 38, 26, 360000)
    assert st["ts"][0] == start + timedelta(seconds=58) and st["ts"][-1] == start + timedelta(seconds=919)
    assert st["step_time_s"][0] == 58.76 and st["ts_inferred"].all()
    assert st["loss"].null_count() == 16  # bars carry no loss: unknown, not NaN
    assert _kind(ev, "init_done")["ts"].to_list() == [start]
    (exit_,) = _kind(ev, "job_end").rows(named=True)  # 4x 'Training completed' + 4 summaries
    assert exit_["state"] == "COMPLETED"
    assert exit_["duration_s"] == 919.097 and exit_["step"] == 16


def test_m4_records() -> None:
    ev = _events("tr141_exp6_iter2500_validation_then_node_failure_iam37.log")
    assert ev.select("kind", "step").rows() == [("step", 2500), ("eval_begin", 2500), ("eval_end", 2500)]
    assert ev["loss"][0] == 3.1525
    trace = _events("tr141_exp05_node_iam15_unresponsive_cuda_unknown_error.log")
    assert trace.select("kind", "severity", "step").rows() == [("info", "debug", 235)]
    assert _events("tr141_exp3_fs_freeze_rank0_dstate_hang_last_lines.log").height == 0


def test_resume_and_restart_logs() -> None:
    resumed = _kind(_events("tr8b104b_resume_from_global_step12000_override_lr.log"), "step")
    assert resumed.select("step", "step_time_s").rows() == [(12000, 207.9675), (12001, 279.2066)]
    init = _events("tr1_13b_restart_on_bad_node_cuda_oom_at_barrier.log")
    # the restart's start: first banner, clock of the next DeepSpeed record
    assert init.select("kind", "line", "ts", "ts_inferred").rows() == [
        ("init", 1, datetime(2021, 8, 12, 8, 19, 28, 225000), True)
    ]


def test_no_trainer_events_in_foreign_logs() -> None:
    for name in ("bloom176b_cuda_unknown_error_gpu_crash.log", "tr1_13b_dataloader_shm_bus_error.log",
                 "tr141_exp2_cuda_unknown_error_then_node_failure_iam49.log"):
        assert _events(name).height == 0, name


def test_real_logs_have_no_numerics_failures() -> None:
    """None of the published excerpts logs a NaN loss: no numerics error (fp16 overflow skips are warnings)."""
    rules = _rules()
    for name in REAL_FILES:
        ev = _events(name).with_columns(pl.lit("trainer").alias("source"))
        flagged = classify(ev, rules).collect().filter(pl.col("failure_class").is_not_null())
        assert flagged.filter(pl.col("severity") != "warning").height == 0, name


# ---------------------------------------------------------------- coverage


@pytest.mark.parametrize(
    ("name", "covered"),
    [
        ("bloom176b_throughput_drop_slow_gpu_42780.log", 15),
        ("tr1_13b_fp16_loss_spike_29020.log", 15),
        ("tr1_13b_ckpt_save_exit_then_not_scheduled_alert.log", 7),  # 3 cluster-watchdog lines are slurm's
        ("bigscience_hf_ds_zero3_gpt2_n4_success_full_run_1832555.log", 50),  # 12 blank lines
        ("tr141_exp3_fs_freeze_rank0_dstate_hang_last_lines.log", 27),
        ("mlperf-v3.0_nvidia_dgxh100_n64_nemo_gpt3_result_0.txt.zst", 1065),
        ("bigscience_meg_gpt2_n16_pp16_user_scancel_1809577.log", 128),  # the rest: srun/slurm/launcher
        ("bigscience_meg_ds_3d_gpt2_perf_n16-ds-off.out", 811),  # the rest: blank and launcher lines
    ],
)
def test_coverage_of_trainer_lines(name: str, covered: int) -> None:
    assert read_text_events(str(REAL / name), [parser]).covered == covered
