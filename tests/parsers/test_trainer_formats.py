"""The trainer parser on every format variant it claims, one focused test per variant."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import polars as pl
import pytest
from toranalyze_parsers.trainer import parser

from tests.conftest import extract_lines


def _rows(lines: list[str], kind: str | None = None) -> list[dict[str, Any]]:
    out = extract_lines(parser, lines)
    if kind is not None:
        out = out.filter(pl.col("kind") == kind)
    return out.rows(named=True)


def _one(lines: list[str], kind: str | None = None) -> dict[str, Any]:
    rows = _rows(lines, kind)
    assert len(rows) == 1, rows
    return rows[0]


def _isnan(x: float | None) -> bool:
    return x is not None and math.isnan(x)


# ---------------------------------------------------------------- Megatron iterations

MEG_NEW = (
    "[2024-06-12 10:00:00] iteration      100/  500000 | consumed samples:        51200 | consumed tokens:"
    "    104857600 | elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 400.1 |"
    " learning rate: 3.000000E-04 | global batch size:   512 | lm loss: 2.345678E+00 | load_balancing_loss:"
    " 1.010000E+00 | mtp_1 loss: 2.500000E+00 | loss scale: 1.0 | grad norm: 0.321 | num zeros: 0.0 |"
    " number of skipped iterations:   0 | number of nan iterations:   0 |"
)


def test_megatron_new_format_with_clock_prefix() -> None:
    row = _one([MEG_NEW])
    assert (row["kind"], row["step"], row["step_time_s"], row["loss"]) == ("step", 100, 1.2345, 2.345678)
    assert row["ts"] == datetime(2024, 6, 12, 10, 0, 0) and not row["ts_inferred"]
    assert row["message"].startswith("iteration      100/")


def test_megatron_seconds_bf16_no_loss_scale() -> None:
    line = (
        " iteration    31214/  115311 | consumed samples:     47768496 | consumed tokens:  97829879808 |"
        " elapsed time per iteration (s): 106.46 | learning rate: 5.279E-05 | global batch size:  2048 |"
        " lm loss: 2.198845E+00 | grad norm: 0.242 | num zeros: 0.0 | number of skipped iterations:   0 |"
        " number of nan iterations:   0 | samples per second: 19.238 | TFLOPs: 147.29 |"
    )
    row = _one([line])
    assert (row["step"], row["step_time_s"], row["loss"]) == (31214, 106.46, 2.198845)


def test_megatron_old_format_without_leading_space_or_samples() -> None:
    line = (
        "iteration        3/    1000 | elapsed time per iteration (ms): 128642.7 | learning rate: 5.625E-05 |"
        " lm loss: 4.075232E+01 | loss scale: 1024.0 | number of skipped iterations:   0 |"
        " number of nan iterations:   0 |"
    )
    row = _one([line])
    assert (row["step"], row["step_time_s"], row["loss"]) == (3, 128.6427, 40.75232)


@pytest.mark.parametrize(
    ("loss_field", "counts", "expect"),
    [
        ("| lm loss: nan |", (0, 0), "nan"),
        ("| lm loss: inf |", (0, 0), "inf"),
        ("| lm loss: -inf |", (0, 0), "-inf"),
        ("|", (10, 10), "nan"),  # no loss printed because the iterations were NaN
        ("|", (0, 0), "nan"),  # no loss printed, no reason given
        ("|", (10, 0), None),  # no loss printed because fp16 overflow skipped every iteration
    ],
)
def test_megatron_nan_inf_or_missing_loss(loss_field: str, counts: tuple[int, int], expect: str | None) -> None:
    line = (
        f" iteration      120/  500000 | elapsed time per iteration (ms): 1000.0 {loss_field}"
        f" number of skipped iterations: {counts[0]:3d} | number of nan iterations: {counts[1]:3d} |"
    )
    loss = _one([line])["loss"]
    if expect is None:
        assert loss is None
    else:
        assert math.isnan(loss) if expect == "nan" else loss == float(expect)


def test_megatron_hard_wrapped_record() -> None:
    lines = [
        " iteration    13251/  159576 | consumed samples:      2333840 | consumed tokens:   4779704320 |"
        " elapsed time per iteration (ms): 220631.9 | learning rate:",
        " 5.996E-05 | global batch size:   800 | lm loss: 2.924229E+00 | loss scale: 524288.0 | grad norm: 1.1 |"
        " number of skipped iteratio",
        "ns:   0 | number of nan",
        "iterations:   2 |",
        "time (ms)",
    ]
    row = _one(lines)
    assert (row["line"], row["line_end"], row["step"], row["loss"]) == (1, 4, 13251, 2.924229)
    assert "number of naniterations:   2" in row["message"]  # joined as printed; the rules read it


def test_megatron_wrap_stops_at_the_next_record() -> None:
    lines = [
        " iteration       10/    1000 | elapsed time per iteration (ms): 100.0 | learning",
        " iteration       20/    1000 | elapsed time per iteration (ms): 100.0 |",
    ]
    rows = _rows(lines, "step")
    assert [(r["line"], r["line_end"], r["step"]) for r in rows] == [(1, None, 10), (2, None, 20)]


def test_megatron_clockless_iterations_use_banner_and_log_interval() -> None:
    lines = [
        "[before the start of training step] datetime: 2021-05-23 08:41:06 ",
        " iteration       10/    1000 | elapsed time per iteration (ms): 5000.0 | lm loss: 9.0E+00 |",
        "time (ms) | forward-compute: 264.79",
        " iteration       20/    1000 | elapsed time per iteration (ms): 3000.0 | lm loss: 8.0E+00 |",
        "[2021-05-23 08:43:00,000] [INFO] [logging.py:68:log_dist] [Rank 0] step=20, skipped=0, lr=[0.0001]",
        " iteration       30/    1000 | elapsed time per iteration (ms): 2000.0 | lm loss: 7.0E+00 |",
    ]
    st = _rows(lines, "step")
    start = datetime(2021, 5, 23, 8, 41, 6)
    # 10 iterations x 5 s, then 10 x 3 s; the DeepSpeed record re-anchors: + 10 x 2 s
    assert [r["ts"] for r in st] == [
        start + timedelta(seconds=50), start + timedelta(seconds=80), datetime(2021, 5, 23, 8, 43, 20)
    ]
    assert all(r["ts_inferred"] for r in st)
    # DeepSpeed's own step counter is context when Megatron iterations exist
    assert _one(lines, "info")["step"] == 20


def test_megatron_resume_interval_counts_from_loaded_checkpoint() -> None:
    lines = [
        "[after dataloaders are built] datetime: 2022-01-01 00:00:00 ",
        "  successfully loaded checkpoint from /ckpt at iteration 12000",
        " iteration    12010/  159576 | elapsed time per iteration (s): 2.0 | lm loss: 3.0E+00 |",
    ]
    assert _one(lines, "step")["ts"] == datetime(2022, 1, 1, 0, 0, 20)
    load = _one(lines, "ckpt_load")
    assert load["step"] == 12000


def test_megatron_no_clock_at_all_leaves_ts_null() -> None:
    row = _one([" iteration       10/    1000 | elapsed time per iteration (ms): 5000.0 | lm loss: 9.0E+00 |"])
    assert row["ts"] is None and not row["ts_inferred"]


def test_megatron_timer_chatter_is_noise_not_events() -> None:
    lines = [
        "time (ms) | forward-compute: 148.22 | forward-recv: 508.65",
        "(min, max) time across ranks (ms):",
        "    forward-backward ...............................: (1200.12, 1201.50)",
        "[Rank 51] (after 20 iterations) memory (MB) | allocated: 19494.4 | max allocated: 22106.0",
        "after 1 iterations memory (MB) | allocated: 10857.5625 | max allocated: 26118.2",
        "Effective Tera Flops per GPU: 41.31 and total parameters 52.005 B",
        "  micro_batch_size ................................ 4",
        " > number of parameters on (tensor, pipeline) model parallel rank (1, 2): 805560320",
    ]
    assert extract_lines(parser, lines).height == 0
    from toranalyze.ingest.lines import lines_from_strings
    from toranalyze.ingest.noise import noise_mask

    prepared = lines_from_strings(lines)
    assert prepared.filter(noise_mask([parser])).height == len(lines)


# ---------------------------------------------------------------- Megatron evaluation / checkpoints / start / exit


@pytest.mark.parametrize(
    "line",
    [
        " validation loss at iteration 7000 | lm loss value: 7.174200E+00 | lm loss PPL: 1.305315E+03 |",
        "valid loss at iteration 7000 | lm loss value: 7.174200E+00 | lm loss PPL: 1.305315E+03 |",
        " validation loss at iteration 7000 on validation set | lm loss value: 7.174200E+00 | lm loss PPL: 1.3E+03 |",
    ],
)
def test_megatron_validation_variants(line: str) -> None:
    row = _one([line])
    assert (row["kind"], row["step"], row["loss"]) == ("eval_end", 7000, 7.1742)


def test_megatron_checkpoint_old_and_new_with_timers() -> None:
    old = _rows([
        "saving checkpoint at iteration   33241 to /gpfsscratch/checkpoints",
        "  successfully saved checkpoint at iteration   33241 to /gpfsscratch/checkpoints",
        "time (ms) | save-checkpoint: 57514.53",
    ])
    assert [(r["kind"], r["step"], r["duration_s"]) for r in old] == [
        ("ckpt_save_begin", 33241, None), ("ckpt_save_end", 33241, 57.51453)
    ]
    new = _rows([
        "saving checkpoint at iteration     120 to /ckpt in torch_dist format",
        "  successfully saved checkpoint from iteration     120 to /ckpt [ t 1/1, p 1/1 ]",
        "(min, max) time across ranks (ms):",
        "    save-checkpoint ................................: (4321.00, 4400.50)",
    ])
    assert [(r["kind"], r["step"], r["duration_s"]) for r in new] == [
        ("ckpt_save_begin", 120, None), ("ckpt_save_end", 120, 4.4005)
    ]


def test_megatron_load_variants_collapse_into_one_load() -> None:
    rows = _rows([
        " loading checkpoint from /ckpt at iteration 120",
        "  successfully loaded checkpoint from /ckpt [ t 0/4, p 0/12 ] at iteration 120",
    ])
    assert [(r["kind"], r["line"], r["step"]) for r in rows] == [("ckpt_load", 1, 120)]


def test_megatron_fresh_start_is_a_load_of_step_zero() -> None:
    row = _one([
        "WARNING: could not find the metadata file /ckpt/latest_checkpointed_iteration.txt ",
        "    will not load any checkpoints and will start from random",
    ])
    assert (row["kind"], row["step"], row["line"], row["line_end"]) == ("ckpt_load", 0, 1, 2)


def test_megatron_start_banners_are_one_init_with_derived_clock() -> None:
    lines = [
        "using world size: 64, data-parallel-size: 1, tensor-model-parallel size: 4, pipeline-model-parallel size: 16 ",
        "> initializing torch distributed ...",
        "> initializing tensor model parallel with size 4",
        "time to initialize megatron (seconds): 70.184",
        "[after megatron is initialized] datetime: 2021-06-10 23:06:14 ",
        "building GPT model ...",
        "[after dataloaders are built] datetime: 2021-06-10 23:06:15 ",
        "training ...",
        "[before the start of training step] datetime: 2021-06-10 23:06:16 ",
    ]
    rows = _rows(lines)
    assert [(r["kind"], r["line"]) for r in rows] == [("init", 1), ("init_done", 7)]
    init, done = rows
    assert init["ts"] == datetime(2021, 6, 10, 23, 5, 3, 816000) and init["ts_inferred"] and init["n_gpus"] == 64
    assert done["ts"] == datetime(2021, 6, 10, 23, 6, 16) and not done["ts_inferred"]  # the latest banner


def test_two_starts_give_two_inits() -> None:
    it = " iteration       10/    1000 | elapsed time per iteration (ms): 100.0 | lm loss: 9.0E+00 |"
    rows = _rows(["> initializing torch distributed ...", it, "> initializing torch distributed ...", it])
    assert [r["kind"] for r in rows] == ["init", "step", "init", "step"]  # the repeated step is a new attempt


@pytest.mark.parametrize(
    ("line", "kind", "state", "step", "duration"),
    [
        ("[exiting program after 1190.0357275923093 minutes] datetime: 2021-08-08 01:00:51 ", "job_end",
         "COMPLETED", 7, 71402.143656),
        ("[exiting program at iteration 1000] datetime: 2021-08-08 01:00:51 ", "job_end", "COMPLETED", 1000, None),
        ("[after training is done] datetime: 2021-08-08 01:00:51 ", "job_end", "COMPLETED", 7, None),
        ("exiting program after receiving SIGTERM.", "info", "EXIT", 7, None),
        ("Detected kill switch at /tmp/kill-switch. Exiting", "info", "EXIT", 7, None),
    ],
)
def test_megatron_exit_banners(line: str, kind: str, state: str, step: int, duration: float | None) -> None:
    it = " iteration        7/    1000 | elapsed time per iteration (ms): 100.0 | lm loss: 9.0E+00 |"
    row = _one([it, line], kind)
    assert (row["state"], row["step"], row["code"]) == (state, step, "0" if kind == "job_end" else None)
    assert row["duration_s"] == (pytest.approx(duration) if duration else None)


# ---------------------------------------------------------------- DeepSpeed


DS_STEP = "[2024-03-01 10:00:{:02d},000] [INFO] [logging.py:96:log_dist] [Rank 0] step={}, skipped=0, lr=[0.0001]"


def test_deepspeed_steps_when_no_trainer_iterations() -> None:
    lines = [
        DS_STEP.format(0, 10),
        "[2024-03-01 10:00:00,001] [INFO] [timer.py:260:stop] epoch=0/micro_step=10/global_step=10, "
        "RunningAvgSamplesPerSec=50.1, CurrSamplesPerSec=49.9, MemAllocated=3.4GB, MaxMemAllocated=6.1GB",
        DS_STEP.format(6, 20),
    ]
    rows = _rows(lines, "step")
    assert [(r["step"], r["ts"]) for r in rows] == [
        (10, datetime(2024, 3, 1, 10, 0, 0)), (20, datetime(2024, 3, 1, 10, 0, 6))
    ]
    assert all(r["loss"] is None and r["step_time_s"] is None for r in rows)


@pytest.mark.parametrize(
    "line",
    [
        "[2024-03-01 10:00:05,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
        "step. Attempted loss scale: 65536, reducing to 32768",
        "[deepspeed] fp16 dynamic loss scale overflow! Rank 0 Skipping step. Attempted loss scale: 4294967296, "
        "reducing to 2147483648",
        "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0",
    ],
)
def test_overflow_is_a_warning(line: str) -> None:
    row = _one([line])
    assert (row["kind"], row["severity"]) == ("warning", "warning")


def test_loss_scale_floor_is_an_error() -> None:
    row = _one(["Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."])
    assert (row["kind"], row["severity"]) == ("error", "error")


def test_deepspeed_checkpoint_records_per_rank_collapse() -> None:
    lines = [
        "[2024-03-01 10:00:07,000] [INFO] [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint global_step20 is "
        "begin to save!",
        "[2024-03-01 10:00:08,000] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model checkpoint: "
        "/ck/global_step20/mp_rank_00_model_states.pt",
        "[2024-03-01 10:00:09,000] [INFO] [engine.py:3000:_save_zero_checkpoint] zero checkpoint saved "
        "/ck/global_step20/zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "[2024-03-01 10:00:09,500] [INFO] [engine.py:3000:_save_zero_checkpoint] zero checkpoint saved "
        "/ck/global_step20/zero_pp_rank_1_mp_rank_00_optim_states.pt",
        "[2024-03-01 10:00:10,000] [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint global_step20 "
        "is ready now!",
        "[2024-03-01 10:10:00,000] [INFO] [engine.py:2900:_load_checkpoint] rank: 0 loading checkpoint: "
        "/ck/global_step20/mp_rank_00_model_states.pt",
        "[2024-03-01 10:10:01,000] [INFO] [engine.py:2900:_load_checkpoint] rank: 1 loading checkpoint: "
        "/ck/global_step20/mp_rank_00_model_states.pt",
    ]
    rows = _rows(lines)
    assert [(r["kind"], r["line"], r["step"], r["ts"]) for r in rows] == [
        ("ckpt_save_begin", 1, 20, datetime(2024, 3, 1, 10, 0, 7)),  # the earliest clock of a beginning
        ("ckpt_save_end", 3, 20, datetime(2024, 3, 1, 10, 0, 10)),  # the latest of an end
        ("ckpt_load", 6, 20, datetime(2024, 3, 1, 10, 10, 1)),
    ]


def test_megatron_and_deepspeed_save_lines_are_one_save() -> None:
    rows = _rows([
        "saving checkpoint at iteration   33241 to /ckpt",
        "[2021-08-08 01:00:44,221] [INFO] [logging.py:68:log_dist] [Rank 0] Saving model checkpoint: "
        "/ckpt/global_step33241/mp_rank_00_model_states.pt",
        "  successfully saved checkpoint at iteration   33241 to /ckpt",
    ])
    assert [(r["kind"], r["line"], r["ts"]) for r in rows] == [
        ("ckpt_save_begin", 1, datetime(2021, 8, 8, 1, 0, 44, 221000)), ("ckpt_save_end", 3, None)
    ]


# ---------------------------------------------------------------- HF Trainer

HF_HEAD = [
    "[INFO|trainer.py:1143] 2024-03-01 10:00:00,000 >> ***** Running training *****",
    "[INFO|trainer.py:1149] 2024-03-01 10:00:00,000 >>   Total optimization steps = 4",
]


def test_hf_loss_dicts_take_step_and_time_from_the_bar() -> None:
    lines = [
        *HF_HEAD,
        "  0%|          | 0/4 [00:00<?, ?it/s]\r 25%|██▌       | 1/4 [00:10<00:30, 10.00s/it]"
        "\r 50%|█████     | 2/4 [00:20<00:20, 10.00s/it]",
        "{'loss': 2.5, 'grad_norm': 1.2, 'learning_rate': 4e-05, 'epoch': 0.5}",
        " 50%|█████     | 2/4 [00:20<00:20, 10.00s/it]\r 75%|███████▌  | 3/4 [00:31<00:10, 10.50s/it]"
        "\r100%|██████████| 4/4 [00:41<00:00, 10.30s/it]",
        "{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '2e-05', 'epoch': '1'}",
    ]
    rows = _rows(lines, "step")  # the bar's own steps give way to the dicts
    assert [(r["line"], r["step"], r["step_time_s"]) for r in rows] == [(4, 2, 10.0), (6, 4, 10.3)]
    assert rows[0]["loss"] == 2.5 and _isnan(rows[1]["loss"])
    assert rows[0]["ts"] == datetime(2024, 3, 1, 10, 0, 20) and rows[0]["ts_inferred"]


def test_hf_dicts_without_bar_use_step_key_or_running_count() -> None:
    rows = _rows([
        "{'loss': 2.5, 'learning_rate': 4e-05, 'epoch': 0.01}",
        "{'loss': 2.4, 'learning_rate': 4e-05, 'epoch': 0.02}",
        "{'loss': 2.4, 'learning_rate': 4e-05, 'epoch': 0.02}",  # a second node prints the same dict
        "{'loss': 2.3, 'learning_rate': 4e-05, 'epoch': 0.03, 'step': 500}",
    ], "step")
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 2.5), (2, 2.4), (500, 2.3)]
    assert all(r["ts"] is None for r in rows)


def test_hf_eval_and_train_summary() -> None:
    rows = _rows([
        "[INFO|trainer.py:3000] 2024-03-01 10:05:00,000 >> ***** Running Evaluation *****",
        "{'eval_loss': 2.4, 'eval_runtime': 5.5, 'eval_samples_per_second': 10.0, 'epoch': 1.0}",
        "{'train_runtime': 46.0, 'train_samples_per_second': 1.0, 'train_steps_per_second': 0.087, "
        "'train_loss': 2.45, 'epoch': 1.0}",
        "Training completed. Do not forget to share your model on huggingface.co/models =)",
    ])
    assert [(r["kind"], r["state"]) for r in rows] == [
        ("eval_begin", None), ("eval_end", None), ("job_end", "COMPLETED")
    ]
    assert rows[0]["ts"] == datetime(2024, 3, 1, 10, 5)
    assert (rows[1]["loss"], rows[1]["duration_s"]) == (2.4, 5.5)
    assert rows[2]["duration_s"] == 46.0


def test_hf_checkpoints() -> None:
    rows = _rows([
        "[INFO|trainer.py:2000] 2024-03-01 10:00:42,000 >> Saving model checkpoint to out/checkpoint-500",
        "[INFO|configuration_utils.py:400] 2024-03-01 10:00:42,100 >> Configuration saved in "
        "out/checkpoint-500/config.json",
        "[INFO|modeling_utils.py:2000] 2024-03-01 10:00:45,000 >> Model weights saved in "
        "out/checkpoint-500/model.safetensors",
        "[INFO|trainer.py:2100] 2024-03-01 11:00:00,000 >> Loading model from out/checkpoint-500.",
        "[INFO|trainer.py:1800] 2024-03-01 11:00:05,000 >>   Continuing training from checkpoint, will skip to "
        "saved global_step",
        "[INFO|trainer.py:1801] 2024-03-01 11:00:05,000 >>   Continuing training from global step 500",
        "[INFO|trainer.py:2000] 2024-03-01 12:00:00,000 >> Saving model checkpoint to out",  # final export
    ])
    assert [(r["kind"], r["step"], r["ts"]) for r in rows] == [
        ("ckpt_save_begin", 500, datetime(2024, 3, 1, 10, 0, 42)),
        ("ckpt_save_end", 500, datetime(2024, 3, 1, 10, 0, 45)),
        ("ckpt_load", 500, datetime(2024, 3, 1, 11, 0, 5)),
    ]


def test_hf_eval_bar_with_other_total_is_no_step() -> None:
    rows = _rows([
        *HF_HEAD,
        "  0%|          | 0/4 [00:00<?, ?it/s]\r 25%|██▌       | 1/4 [00:10<00:30, 10.00s/it]",
        "  0%|          | 0/63 [00:00<?, ?it/s]\r 50%|█████     | 31/63 [00:05<00:05, 6.10it/s]",
        "Map: 100%|██████████| 1000/1000 [00:01<00:00, 900.00 examples/s]",
    ], "step")
    assert [(r["step"], r["step_time_s"]) for r in rows] == [(1, 10.0)]


def test_hf_process_banner_is_init() -> None:
    row = _one([
        "05/25/2021 06:35:01 - WARNING - __main__ - Process rank: 0, device: cuda:0, n_gpu: 1distributed "
        "training: True, 16-bits training: False"
    ])
    assert (row["kind"], row["ts"]) == ("init", datetime(2021, 5, 25, 6, 35, 1))


# ---------------------------------------------------------------- PyTorch Lightning / NeMo


def test_nemo_progress_bar_steps() -> None:
    bar = (
        "Epoch 0: :   0%|          | 0/603000 [00:00<?, ?it/s]"
        "\rEpoch 0: :   0%|          | 1001/603000 [00:05<317:00:58, reduced_train_loss=2.600, global_step=1000.0, "
        "consumed_samples=1.28e+6, train_step_timing in s=1.900]"
        "\rEpoch 0: :   0%|          | 1002/603000 [00:07<317:00:58, reduced_train_loss=2.500, global_step=1001.0, "
        "consumed_samples=1.28e+6, train_step_timing in s=1.950]"
        "\rEpoch 0: :   0%|          | 1002/603000 [00:08<317:00:58, reduced_train_loss=2.500, global_step=1001.0, "
        "consumed_samples=1.28e+6, train_step_timing in s=1.950]"
    )
    rows = _rows(["[NeMo I 2024-06-17 08:00:10 nlp_overrides:1100] Restoring states", bar], "step")
    # global_step counts steps completed before the one reported
    assert [(r["step"], r["step_time_s"], r["loss"]) for r in rows] == [(1001, 1.9, 2.6), (1002, 1.95, 2.5)]
    assert rows[0]["ts"] == datetime(2024, 6, 17, 8, 0, 15) and rows[0]["ts_inferred"]


def test_nemo_scientific_global_step_and_unknown_total() -> None:
    rows = _rows([
        "Epoch 0: : 100%|██████████| 2000/2000 [43:24:54<00:00, reduced_train_loss=0.139, global_step=2e+3, "
        "consumed_samples=2.56e+5, train_step_timing in s=68.70, val_loss=0.212]",
        "Epoch 1: : 1it [00:04,  4.36s/it, v_num=d3c7, reduced_train_loss=0.674, global_step=2.001e+3, "
        "train_step_timing in s=3.370]",
    ], "step")
    assert [(r["step"], r["step_time_s"]) for r in rows] == [(2001, 68.7), (2002, 3.37)]


def test_lightning_bar_without_global_step_counts_batches() -> None:
    row = _one(["Epoch 3:  45%|████▌     | 450/1000 [10:00<12:13, 0.75it/s, v_num=1, loss=2.31]"], "step")
    assert (row["step"], row["loss"]) == (3450, 2.31)
    assert row["step_time_s"] == pytest.approx(1 / 0.75)
    assert _one(["Epoch 3:  45%|████▌     | 450/1000 [10:00<12:13, 0.75it/s, v_num=1]"], "step")["loss"] is None


def test_lightning_validation_bars_and_checkpoints() -> None:
    lines = [
        "[NeMo I 2024-06-17 08:00:00 exp_manager:396] Experiments will be logged at /results",
        "Epoch 0:  50%|█████     | 0/4 [00:00<?, ?it/s]\rEpoch 0:  50%|█████     | 2/4 [00:10<00:10, 5.00s/it]",
        "Validation DataLoader 0:   0%|          | 0/10 [00:00<?, ?it/s]"
        "\rValidation DataLoader 0: 100%|██████████| 10/10 [00:20<00:00,  2.53it/s]",
        "Epoch 0, global step 2: 'val_loss' reached 2.05000 (best 2.05000), saving model to "
        "'/results/checkpoints/megatron_gpt--val_loss=2.05-step=2.ckpt' as top 10",
        "Epoch 0, global step 4: 'val_loss' was not in top 10",
        "`Trainer.fit` stopped: `max_steps=4` reached.",
    ]
    rows = _rows(lines)
    assert [(r["kind"], r["step"]) for r in rows] == [
        ("step", 2), ("eval_begin", 2), ("eval_end", 2), ("ckpt_save_begin", 2), ("job_end", 2)
    ]
    # validation starts after the training repaint it follows, not at the last line clock
    assert rows[1]["ts"] == datetime(2024, 6, 17, 8, 0, 10) and rows[2]["ts"] == datetime(2024, 6, 17, 8, 0, 30)
    assert rows[-1]["state"] == "COMPLETED"


def test_nemo_global_checkpoint_save_gives_begin_and_end() -> None:
    rows = _rows([
        "[NeMo I 2025-04-11 14:48:45 nemo_logging:393] Global Checkpoint Save : Rank: 0 : Iteration: 50 : "
        "Start time: 1744408121.151s : Save duration: 4.389s",
        "[NeMo I 2025-04-11 14:48:46 nemo_logging:393] Successfully saved checkpoint from iteration      50 to /ck",
    ])
    start = datetime(2025, 4, 11, 21, 48, 41, 151000)  # epoch seconds are UTC
    assert [(r["kind"], r["step"], r["ts"], r["ts_offset_s"]) for r in rows] == [
        ("ckpt_save_begin", 50, start, 0), ("ckpt_save_end", 50, start + timedelta(seconds=4.389), 0)
    ]
    assert rows[1]["duration_s"] == 4.389


def test_lightning_restore_and_start() -> None:
    rows = _rows([
        "GPU available: True (cuda), used: True",
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8",
        "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/8",
        "[NeMo I 2024-06-17 08:00:10 nlp_overrides:1100] Restoring states from the checkpoint path at "
        "/results/checkpoints/megatron_gpt--val_loss=2.10-step=1000-consumed_samples=128000.0.ckpt",
        "Total estimated model params size (MB): 26000",
    ])
    assert [(r["kind"], r["step"]) for r in rows] == [("init", None), ("ckpt_load", 1000), ("init_done", None)]
    assert rows[0]["ts"] == datetime(2024, 6, 17, 8, 0, 10) and rows[0]["ts_inferred"]


# ---------------------------------------------------------------- torchtitan

TITAN = "[rank0]:[titan] 2025-01-10 10:00:{:02d},000 - root - INFO - {}"


def test_torchtitan_steps_with_colours_and_nan() -> None:
    rows = _rows([
        TITAN.format(20, "\x1b[31mstep: 110  \x1b[32mloss:  3.2345  \x1b[38;2;180;60;0mgrad_norm:  0.4567  "
                     "\x1b[38;2;54;234;195mmemory: 30.12GiB(38.05%)  \x1b[34mtps: 5,856  \x1b[36mtflops: 271.34  "
                     "\x1b[35mmfu: 27.43%\x1b[39m"),
        TITAN.format(30, "step: 120  loss:     nan  memory: 30.12GiB(38.05%)  tps: 5,856  mfu: 27.43%"),
        "[rank0]:2024-05-01 12:00:00,123 - root - INFO - step: 130  loss:  3.0000  memory: 30.12GiB(38.05%)  "
        "wps: 5,856  mfu: 27.43%",
        TITAN.format(40, "step: 140  loss:  2.9000  grad_norm:  0.4  memory: 30.12GiB(38.05%)  tps: 5,856  "
                     "tflops: 271.34  mfu: 27.43%  elapsed_time_per_step: 1.234s"),
    ], "step")
    assert [(r["step"], r["ts"]) for r in rows][:2] == [
        (110, datetime(2025, 1, 10, 10, 0, 20)), (120, datetime(2025, 1, 10, 10, 0, 30))
    ]
    assert rows[0]["loss"] == 3.2345 and _isnan(rows[1]["loss"])
    assert rows[2]["ts"] == datetime(2024, 5, 1, 12, 0, 0, 123000)  # older format, no '[titan]'
    assert [r["step_time_s"] for r in rows] == [None, None, None, 1.234]


def test_torchtitan_checkpoints_and_lifecycle() -> None:
    rows = _rows([
        TITAN.format(0, "Starting job: Llama 3 8B training"),
        TITAN.format(5, "Loading the checkpoint at step 100."),
        TITAN.format(9, "Finished loading the checkpoint in 4.00 seconds."),
        TITAN.format(10, "Training starts at step 101, with local batch size 8, global batch size 64, sequence "
                         "length 2048, total steps 1000 (warmup 200)"),
        TITAN.format(20, "step: 110  loss:  3.2345  memory: 30.12GiB(38.05%)  tps: 5,856  mfu: 27.43%"),
        TITAN.format(31, "Saving the checkpoint (or staging if async is enabled)."),
        TITAN.format(43, "Finished saving the checkpoint (or staging if async is enabled)in 12.34 seconds."),
        TITAN.format(50, "validate step: 110  loss:  3.1000  memory: 30.12GiB(38.05%)  tps: 9,000"),
        TITAN.format(55, "Loading resume checkpoint from ./outputs/checkpoint/step-110."),
        TITAN.format(57, "Finished loading resume checkpoint in 2.00 seconds."),
        TITAN.format(59, "Training completed"),
    ])
    got = [(r["kind"], r["step"], r["duration_s"]) for r in rows]
    assert got == [
        ("init", None, None), ("ckpt_load", 100, 4.0), ("init_done", None, None), ("step", 110, None),
        ("ckpt_save_begin", 110, None), ("ckpt_save_end", 110, 12.34), ("eval_end", 110, None),
        ("ckpt_load", 110, 2.0), ("job_end", 110, None),
    ]
    assert rows[1]["ts"] == datetime(2025, 1, 10, 10, 0, 9)  # a load ends when it finished
    assert rows[6]["loss"] == 3.1 and rows[-1]["state"] == "COMPLETED"


def test_torchtitan_save_messages_of_other_versions() -> None:
    rows = _rows([
        TITAN.format(1, "Saving a full checkpoint at step 500"),
        TITAN.format(3, "Finished saving the checkpoint in 2.50 seconds"),
        TITAN.format(5, "Saving a model only checkpoint in torch.bfloat16 at last step, step 1000."),
        TITAN.format(6, "Last step checkpoint completed in 0.12s"),
        TITAN.format(7, "Loading initial checkpoint from /hf/llama (HF format)."),
    ])
    assert [(r["kind"], r["step"], r["duration_s"]) for r in rows] == [
        ("ckpt_save_begin", 500, None), ("ckpt_save_end", 500, 2.5),
        ("ckpt_save_begin", 1000, None), ("ckpt_save_end", 1000, 0.12), ("info", None, None),
    ]


# ---------------------------------------------------------------- MLPerf

ML = ':::MLLOG {{"namespace": "", "time_ms": {}, "event_type": "{}", "key": "{}", "value": {}, "metadata": {}}}'


def test_mlperf_per_rank_copies_count_once() -> None:
    lines = [
        ML.format(1000, "INTERVAL_START", "init_start", "null", '{"file": "a.py", "lineno": 1}'),
        ML.format(1005, "INTERVAL_START", "init_start", "null", '{"file": "a.py", "lineno": 1}'),
        ML.format(2000, "POINT_IN_TIME", "cache_clear", "true", '{"file": "a.py", "lineno": 3}'),
        ML.format(9000, "INTERVAL_END", "init_stop", "null", '{"file": "a.py", "lineno": 2}'),
        ML.format(9001, "INTERVAL_START", "run_start", "null", '{"file": "a.py", "lineno": 2}'),
        ML.format(12000, "POINT_IN_TIME", "tracked_stats",
                  '{"train_step_timing": 2.9, "reduced_train_loss": 2.77}', '{"file": "a.py", "step": 2048}'),
        ML.format(12000, "POINT_IN_TIME", "tracked_stats",
                  '{"train_step_timing": 2.9, "reduced_train_loss": 2.77}', '{"file": "a.py", "step": 2048}'),
        ML.format(14600, "POINT_IN_TIME", "tracked_stats",
                  '{"train_step_timing": 2.6, "reduced_train_loss": NaN}', '{"file": "a.py", "step": 4096}'),
        ML.format(14700, "INTERVAL_START", "eval_start", "null", '{"file": "a.py", "epoch_num": 4096}'),
        ML.format(15000, "POINT_IN_TIME", "tracked_stats", '{"validation_step_timing": 0.3}',
                  '{"file": "a.py", "step": 4096}'),
        ML.format(17700, "INTERVAL_END", "eval_stop", "null", '{"file": "a.py", "epoch_num": 4096}'),
        ML.format(18000, "INTERVAL_END", "run_stop", "null", '{"file": "a.py", "status": "aborted"}'),
    ]
    rows = _rows(lines)
    assert [(r["kind"], r["step"]) for r in rows] == [
        ("init", None), ("init_done", None), ("info", None), ("step", 1), ("step", 2),
        ("eval_begin", 2), ("eval_end", 2), ("info", 2),
    ]
    assert rows[0]["ts"] == datetime(1970, 1, 1, 0, 0, 1) and rows[0]["ts_offset_s"] == 0
    assert rows[3]["step_time_s"] == 2.9 and rows[3]["loss"] == 2.77 and _isnan(rows[4]["loss"])
    assert rows[6]["duration_s"] == 3.0
    stop = rows[-1]
    assert (stop["state"], stop["severity"], stop["duration_s"]) == ("EXIT", "warning", 8.999)
    assert "aborted" in stop["message"]


# ---------------------------------------------------------------- m4


def test_m4_step_time_from_cumulative_elapsed() -> None:
    it = ("iteration: {:5d}/500000   0% | elapsed time: {} | per_token_loss: {} | lr: 9.990E-06 | "
          "num_opt_steps: {} |")
    rows = _rows([
        it.format(2475, "07:37:00", "3.1600", 2475),
        it.format(2500, "07:41:19", "3.1525", 2500),
        it.format(2525, "1 day, 0:00:00", "nan", 2525),
        it.format(25, "00:05:00", "3.9", 25),  # a restart: elapsed goes back
    ], "step")
    assert [r["step"] for r in rows] == [2475, 2500, 2525, 25]
    assert rows[0]["step_time_s"] is None
    assert rows[1]["step_time_s"] == pytest.approx(259 / 25)
    assert rows[2]["step_time_s"] == pytest.approx((86400 - 27679) / 25) and _isnan(rows[2]["loss"])
    assert rows[3]["step_time_s"] is None


def test_m4_validation_and_debug_traces() -> None:
    rows = _rows([
        "iteration:  2500/500000   0% | elapsed time: 07:41:19 | per_token_loss: 3.1525 |",
        "PID 431169:  After activation tracker at opt_step 2501",
        "PID 431171:  Before backward pass in _do_batch",
        "** Starting validation **",
        "Validation logs: val_per_token_loss: 3.0179 | val_per_example_loss: 14921.1 |",
        "** Finished validation **",
    ])
    # a debug trace says where a process was, it is no progress: evaluations follow the last iteration
    assert [(r["kind"], r["severity"], r["step"]) for r in rows] == [
        ("step", "info", 2500), ("info", "debug", 2501), ("eval_begin", "info", 2500), ("eval_end", "info", 2500)
    ]


# ---------------------------------------------------------------- cross-framework rules


def test_steps_of_one_attempt_are_kept_once() -> None:
    it = " iteration       10/    1000 | elapsed time per iteration (ms): 100.0 | lm loss: 9.0E+00 |"
    assert len(_rows([it, it, it], "step")) == 1


def test_tqdm_steps_only_without_other_steps() -> None:
    bar = "  0%|          | 0/2 [00:00<?, ?it/s]\r 50%|█████     | 1/2 [00:10<00:10, 10.00s/it]"
    ds = "[2024-03-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=1, skipped=0, lr=[0.0001]"
    rows = _rows([bar, ds])
    assert [(r["kind"], r["step"], r["line"]) for r in rows] == [("step", 1, 2)]  # DeepSpeed's beat tqdm


def test_steps_going_back_without_banners_are_a_new_attempt() -> None:
    it = " iteration {:8d}/  159576 | elapsed time per iteration (ms): 18000.0 | lm loss: {} |"
    rows = _rows([it.format(6900, "6.4E+00"), it.format(6910, "1.1E+01"), it.format(6900, "6.3E+00")], "step")
    # a rollback re-computes 6900: both computations are kept (the first one is rework)
    assert [(r["step"], r["loss"]) for r in rows] == [(6900, 6.4), (6910, 11.0), (6900, 6.3)]


def test_deepspeed_pipeline_engine_steps() -> None:
    rows = _rows([
        "[2023-01-01 10:00:00,000] [INFO] [engine.py:1] steps: 100 loss: 2.3456 iter time (s): 1.234 samples/sec: 51.8",
        "steps: 200 loss: nan aux_loss: 0.0100 iter time (s): 1.300 samples/sec: 50.0",
    ], "step")
    assert [(r["step"], r["step_time_s"]) for r in rows] == [(100, 1.234), (200, 1.3)]
    assert rows[0]["loss"] == 2.3456 and _isnan(rows[1]["loss"])


@pytest.mark.parametrize(
    ("line", "step", "secs", "loss"),
    [
        # GPT-NeoX: current/mean iteration time, 'lm_loss'
        (" samples/sec: 95.1 | iteration      100/  320000 | elapsed time per iteration (ms): 1234.5/1240.0 |"
         " learning rate: 6.000E-05 | approx flops per GPU: 150.2TFLOPS | lm_loss: 2.345600E+00 |"
         " loss scale: 65536.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
         100, 1.2345, 2.3456),
        # continuous training: no total
        (" iteration      100/infinity | consumed samples:        51200 | elapsed time per iteration (ms): 1000.0 |"
         " lm loss: 2.000000E+00 |", 100, 1.0, 2.0),
        # forks without colons
        (" iteration      100/    1000 | elapsed time per iteration (ms): 500.0 | learning rate 1.000E-04 |"
         " lm loss 3.000000E+00 | loss scale 1024.0 |", 100, 0.5, 3.0),
        (" iteration      100/    1000 | elapsed time per iteration (ms): 500.0 | learning rate 1.000E-04 |"
         " loss 3.500000E+00 | loss scale 1024.0 |", 100, 0.5, 3.5),
    ],
)
def test_megatron_family_variants(line: str, step: int, secs: float, loss: float) -> None:
    row = _one([line])
    assert (row["step"], row["step_time_s"], row["loss"]) == (step, secs, loss)
