"""A trainer log read in many blocks places its steps as when read whole (``TrainerParser.carry``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from toranalyze_parsers.trainer import parser as trainer
from toranalyze_parsers.trainer.carry import carry

from toranalyze.ingest import blocks as ingest_blocks
from toranalyze.ingest import reader
from toranalyze.ingest.blocks import Chunks
from toranalyze.ingest.held import HELD_BLOCKS
from toranalyze.ingest.lines import prepare_lines
from toranalyze.ingest.reader import read_text_events

STEPS = 3000


def _repaint(i: int, total: int, desc: str = "") -> str:
    m, s = divmod(2 * i, 60)
    h, m = divmod(m, 60)
    elapsed = f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"
    return f"{desc}{i * 100 // total:3d}%|          | {i}/{total} [{elapsed}<00:00,  2.00s/it]"


def _hf_log(path: Path, newline_repaints: bool) -> None:
    """HF Trainer's banner, then one bar of STEPS repaints (2 s a step) with a loss dict every 50
    steps and an evaluation bar every 1000; repaints separated by \\r (tqdm writing to a file) or
    each on its own line."""
    sep = "\n" if newline_repaints else "\r"
    out = [
        "[INFO|trainer.py:2128] 2024-05-07 11:03:12,000 >> ***** Running training *****\n",
        f"[INFO|trainer.py:2134] 2024-05-07 11:03:12,000 >>   Total optimization steps = {STEPS:,}\n",
    ]
    for i in range(STEPS + 1):
        out.append(sep + _repaint(i, STEPS))
        if i and i % 50 == 0:
            out.append(f"\n{{'loss': {2 + 1 / i:.4f}, 'learning_rate': 1e-05, 'epoch': {i / STEPS:.3f}}}\n")
        if i and i % 1000 == 0:
            out.append("".join("\r" + _repaint(k, 20, "Evaluating: ") for k in range(21)) + "\n")
    path.write_text("".join(out) + "\n")


@pytest.mark.parametrize("newline_repaints", [False, True])
def test_steps_read_in_many_blocks_are_placed_as_in_one(tmp_path: Path, newline_repaints: bool) -> None:
    path = tmp_path / "train.log"
    _hf_log(path, newline_repaints)
    assert path.stat().st_size > 40 * 4096
    whole = read_text_events(str(path), [trainer]).events
    blocks = read_text_events(str(path), [trainer], block_bytes=4096).events
    steps = whole.filter(kind="step")
    assert steps.height == STEPS // 50 and steps["ts"].null_count() == 0
    # 2 s a step from the banner's clock: the whole read is right, and the blocks agree with it
    late = steps.select((pl.col("ts") - pl.col("ts").min()).dt.total_seconds() - 2 * (pl.col("step") - 50))
    assert late.to_series().abs().max() <= 1
    cols = ["line", "kind", "step", "ts", "ts_inferred", "loss"]
    assert_frame_equal(blocks.select(cols), whole.select(cols))


def test_the_carried_lines_are_few_and_name_the_bar_start_clock(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    _hf_log(path, newline_repaints=True)
    lines = prepare_lines(next(iter(Chunks(str(path)))))
    kept = carry(lines)
    assert 0 < kept.height <= 8  # the banners, each bar's start and latest repaint, a clock
    start = kept.filter(pl.col("text").str.contains(r"\| 0/3000 \["))
    assert start["p_ts"].to_list() == [dt.datetime(2024, 5, 7, 11, 3, 12)]
    assert kept["line"].is_sorted()


REAL = Path(__file__).resolve().parent.parent / "data" / "trainer" / "real"


@pytest.mark.parametrize(
    "name", ["bigscience_meg_gpt2_n16_pp16_user_scancel_1809577.log", "bigscience_meg_ds_3d_gpt2_perf_n16-ds-off.out"]
)
def test_clockless_megatron_iterations_read_in_many_blocks_are_placed_as_in_one(name: str) -> None:
    """Real Megatron logs whose iteration records state no clock: each is placed at the latest
    clock plus the iteration times summed since, a sum that now goes on across blocks."""
    path = str(REAL / name)
    whole = read_text_events(path, [trainer]).events.filter(kind="step")
    blocks = read_text_events(path, [trainer], block_bytes=4096).events.filter(kind="step")
    assert whole.height > 5 and whole["ts_inferred"].all()
    cols = ["line", "step", "ts", "ts_inferred"]
    assert_frame_equal(blocks.select(cols), whole.select(cols))


def _blocks(path: str, block_bytes: int) -> int:
    return sum(1 for _ in Chunks(path, block_bytes))


@pytest.mark.parametrize(
    ("name", "block_bytes"),
    [
        ("mlperf-v3.0_nvidia-coreweave_hgxh100_n448_gpt3_result_0.txt.zst", 64 * 1024),
        ("mlperf-v3.0_nvidia_dgxh100_n64_nemo_gpt3_result_0.txt.zst", 16 * 1024),
        ("bigscience_hf_ds_zero3_gpt2_n4_success_full_run_1832555.log", 4096),
    ],
)
def test_counted_and_repainted_steps_read_in_many_blocks_are_those_of_one(name: str, block_bytes: int) -> None:
    """MLPerf counts its steps on from the checkpoint step; four HF ranks repaint the same bar one
    after another. Both the count and the steps already reported go on across blocks (the MLPerf
    logs in bigger blocks than 4 KB only to keep the test fast: a block holds a few records)."""
    path = str(REAL / name)
    assert _blocks(path, block_bytes) >= 3
    whole = read_text_events(path, [trainer]).events.filter(kind="step")
    blocks = read_text_events(path, [trainer], block_bytes=block_bytes).events.filter(kind="step")
    assert whole.height >= 16
    cols = ["line", "step", "ts", "ts_inferred", "step_time_s", "loss"]
    assert_frame_equal(blocks.select(cols), whole.select(cols))


def _hf_dicts_log(path: Path, filler: int) -> None:
    """HF loss dicts with neither a bar nor a 'step' key (their steps are counted), and halfway
    ``filler`` lines that hold nothing of the trainer's (blocks the parser's gates rule out)."""
    dicts = [f"{{'loss': {2 + 1 / i:.6f}, 'learning_rate': 1e-05, 'epoch': {i / 1000:.4f}}}\n" for i in range(1, 1001)]
    other = [f"worker {k}: nothing to report here\n" for k in range(filler)]
    path.write_text("".join(dicts[:500] + other + dicts[500:]))


def test_counted_loss_dicts_read_in_many_blocks_are_numbered_as_in_one(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    _hf_dicts_log(path, filler=400)
    whole = read_text_events(str(path), [trainer]).events.filter(kind="step")
    blocks = read_text_events(str(path), [trainer], block_bytes=4096).events.filter(kind="step")
    assert whole["step"].to_list() == list(range(1, 1001))
    assert_frame_equal(blocks.select("line", "step", "loss"), whole.select("line", "step", "loss"))


def test_the_step_source_chosen_goes_on_across_blocks(tmp_path: Path) -> None:
    """Megatron's iteration records every 100 steps and DeepSpeed's ``step=`` line every step: the
    records are the steps, in blocks holding DeepSpeed's lines only too."""
    out = []
    for i in range(1, 1001):
        out.append(f"[2024-05-07 11:00:00,000] [INFO] [logging.py:60:log_dist] [Rank 0] step={i}, skipped=0, lr=[1e-05]\n")
        if i == 1 or i % 100 == 0:
            out.append(f" iteration {i:8d}/    1000 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.0E+00 |\n")
    path = tmp_path / "train.log"
    path.write_text("".join(out))
    whole = read_text_events(str(path), [trainer]).events.filter(kind="step")
    blocks = read_text_events(str(path), [trainer], block_bytes=4096).events.filter(kind="step")
    assert whole["step"].to_list() == [1, *range(100, 1001, 100)]
    assert_frame_equal(blocks.select("line", "step"), whole.select("line", "step"))


def _startup_log(path: Path, filler: int, chatter: int) -> None:
    """A Megatron start-up whose banners state no clock (the next clock, after the model is built,
    times them), ``chatter`` lines of NCCL set-up between the banners and that clock, and
    ``filler`` lines of an earlier attempt's iterations before it."""
    out = [
        f" iteration {i:8d}/   10000 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.0E+00 |\n"
        for i in range(1, filler + 1)
    ]
    out += [
        "using world size: 32, data-parallel size: 4, tensor-model-parallel size: 8\n",
        "> initializing torch distributed ...\n",
    ]
    out += [
        f"gpu-001:6545{k % 8}:6545{k % 8} [{k % 8}] NCCL INFO Channel {k % 32:02d}/32 :    0 1 2 3 4 5 6 7\n"
        for k in range(chatter)
    ]
    out += [
        "> initialized tensor model parallel with size 8\n",
        "[after model, optimizer, and learning rate scheduler are built] datetime: 2024-03-04 12:36:31\n",
        "[before the start of training step] datetime: 2024-03-04 12:36:40\n",
    ]
    out += [
        f" iteration {i:8d}/   10000 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.0E+00 |\n"
        for i in range(filler + 1, filler + 40)
    ]
    path.write_text("".join(out))


@pytest.mark.parametrize("filler", [0, 30, 70])
@pytest.mark.parametrize("chatter", [20, 60, 120])
def test_a_startup_record_cut_by_blocks_takes_the_next_clock_as_in_one(
    tmp_path: Path, filler: int, chatter: int
) -> None:
    """The banners collapse into one start-up record timed by the next clock below them, also when
    a block boundary (or a whole block of NCCL chatter, which the trainer's gates rule out) falls
    between the banners and that clock: the block's rows wait for the next block to time them."""
    path = tmp_path / "train.log"
    _startup_log(path, filler, chatter)
    assert _blocks(str(path), 4096) >= 2
    whole = read_text_events(str(path), [trainer]).events
    blocks = read_text_events(str(path), [trainer], block_bytes=4096).events
    init = whole.filter(kind="init")
    assert init.height == 1 and init["ts"].to_list() == [dt.datetime(2024, 3, 4, 12, 36, 31)]
    cols = ["line", "kind", "step", "ts", "ts_inferred"]
    assert_frame_equal(blocks.select(cols), whole.select(cols))


def test_rows_wait_for_a_later_block_at_most_a_few_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory stays bounded: a start-up record whose clock lies many blocks below is yielded once
    HELD_BLOCKS blocks wait, and the time the later block gives it is applied by the caller."""
    path = tmp_path / "train.log"
    _startup_log(path, 0, 2000)
    assert _blocks(str(path), 8192) > HELD_BLOCKS + 2
    read = []
    chunks = ingest_blocks.Chunks.__iter__

    def counted(self: ingest_blocks.Chunks) -> Iterator[pl.DataFrame]:
        for frame in chunks(self):
            read.append(frame.height)
            yield frame

    monkeypatch.setattr(ingest_blocks.Chunks, "__iter__", counted)
    blocks = reader.TextEvents(str(path), [trainer], block_bytes=8192)
    first = next(iter(blocks))
    assert first["kind"].to_list() == ["init"] and first["ts"].to_list() == [None]
    assert len(read) == HELD_BLOCKS + 1  # yielded untimed, not held to the end
    whole = read_text_events(str(path), [trainer]).events.filter(kind="init")
    late = read_text_events(str(path), [trainer], block_bytes=8192).events.filter(kind="init")
    assert late["ts"].to_list() == whole["ts"].to_list() == [dt.datetime(2024, 3, 4, 12, 36, 31)]
