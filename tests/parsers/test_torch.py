"""torch parser: crash records, torchrun/elastic lines and one-line runtime failures.

Real logs (tests/data/torch/real) are checked by golden files and by what their
publishers say happened; format variants the real logs lack are checked line by line.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toranalyze_parsers.torch import parser

from tests.conftest import assert_golden, extract_lines, parse_file
from toranalyze.ingest.classify import builtin_rules, classify, load_rules
from toranalyze.ingest.reader import read_text_events
from toranalyze.schema import KINDS, RAW_SCHEMA, SEVERITIES

DATA = Path(__file__).parent.parent / "data" / "torch"
REAL = DATA / "real"
TORCH_RULES = [r for r in builtin_rules() if r.origin == "builtin:torch.toml"]


def run(text: str) -> pl.DataFrame:
    return extract_lines(parser, text.split("\n"))


def classified(frame: pl.DataFrame) -> pl.DataFrame:
    """Apply only this family's rules (other families' rules are tested with their parsers)."""
    if "source" not in frame.columns:
        frame = frame.with_columns(pl.lit("trainer").alias("source"))
    return classify(frame, TORCH_RULES).collect()


def one(frame: pl.DataFrame, **where: object) -> dict:
    rows = frame.filter(*[pl.col(k) == v for k, v in where.items()]) if where else frame
    assert rows.height == 1, rows
    return rows.row(0, named=True)


# ---------------------------------------------------------------- real logs


REAL_FILES = sorted(p.name for p in REAL.glob("*.log"))


@pytest.mark.parametrize("name", REAL_FILES)
def test_real_golden(name: str) -> None:
    assert_golden(parse_file(parser, REAL / name), DATA / "golden" / f"{name}.json")


# file -> (line, line_end, code, failure_class) of every error the file must yield
LABELLED = {
    # BLOOM: GPU crash seen by the NCCL cleanup thread of local rank 3
    "bloom176b_cuda_unknown_error_gpu_crash.log": [(1, 10, "c10::CUDAError", "gpu_hardware")],
    # tr1-13B: the Python traceback and the C++ abort at exit both name the ECC error
    "tr1_13b_ecc_uncorrectable_crash_43680.log": [
        (3, 20, "RuntimeError", "gpu_memory"),
        (21, 42, "c10::Error", "gpu_memory"),
    ],
    # the restart on the bad node: hardware, but the text is an OOM (the analysis may upgrade it)
    "tr1_13b_restart_on_bad_node_cuda_oom_at_barrier.log": [(11, 22, "RuntimeError", "oom_gpu")],
    # m4: two and three processes abort with 'unknown error' before the node is declared failed
    "tr141_exp05_node_iam15_unresponsive_cuda_unknown_error.log": [
        (8, 18, "c10::CUDAError", "gpu_hardware"),
        (20, 28, "c10::CUDAError", "gpu_hardware"),
    ],
    "tr141_exp2_cuda_unknown_error_then_node_failure_iam49.log": [
        (1, 11, "c10::CUDAError", "gpu_hardware"),
        (12, 20, "c10::CUDAError", "gpu_hardware"),
        (23, 32, "c10::CUDAError", "gpu_hardware"),
    ],
    # the broken node's traceback tail: 'unhandled system error' is a socket/IB failure
    "mlengineering_jz_broken_node_unhandled_system_error_conn_refused.log": [(1, 3, "RuntimeError", "network")],
}


@pytest.mark.parametrize("name", sorted(LABELLED))
def test_real_failures_are_classified(name: str) -> None:
    ev = classified(parse_file(parser, REAL / name))
    got = ev.filter(pl.col("kind") == "error").select("line", "line_end", "code", "failure_class").rows()
    assert got == LABELLED[name]


def test_bloom_crash_names_rank_and_origin() -> None:
    row = one(parse_file(parser, REAL / "bloom176b_cuda_unknown_error_gpu_crash.log"))
    assert row["rank"] == 3  # from the [default3]: tee prefix
    assert row["message"] == "c10::CUDAError: CUDA error: unknown error [raised from query at CUDAEvent.h:95]"


def test_traceback_behind_a_task_and_run_id_prefix_is_one_record() -> None:
    # A workflow runner's '[step/task (pid N)] [<uuid>] ' before every line (dolly's logs): both
    # are peeled, one space each, so the frames keep their indentation and the exception joins.
    head = "2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] [09c561ee-a44c-4795-967c-7183a83b3160] "
    body = ["Traceback (most recent call last):",
            '  File "/opt/conda/lib/python3.7/site-packages/torch/serialization.py", line 379, in save',
            "    _save(obj, opened_zipfile, pickle_module, pickle_protocol)",
            "OSError: [Errno 28] No space left on device"]
    row = one(run("\n".join(head + b for b in body)))
    assert (row["line"], row["line_end"]) == (1, 4)
    assert row["message"].startswith("OSError: [Errno 28] No space left on device")


def test_ecc_traceback_message_is_the_exception_line() -> None:
    ev = parse_file(parser, REAL / "tr1_13b_ecc_uncorrectable_crash_43680.log")
    assert ev["message"][0] == (
        "RuntimeError: transform: failed to synchronize: cudaErrorECCUncorrectable: "
        "uncorrectable ECC error encountered [at __init__.py:145 in backward]"
    )


def test_oom_at_barrier_keeps_innermost_frame() -> None:
    row = one(parse_file(parser, REAL / "tr1_13b_restart_on_bad_node_cuda_oom_at_barrier.log"))
    assert row["message"] == "RuntimeError: CUDA error: out of memory [at distributed_c10d.py:2420 in barrier]"


def test_character_interleaved_dataloader_tracebacks() -> None:
    ev = classified(parse_file(parser, REAL / "tr1_13b_dataloader_shm_bus_error.log"))
    workers = ev.filter(pl.col("code") == "-7")
    assert workers["line"].to_list() == [1, 2, 3, 4]  # each worker's shm bus error
    tb = one(ev, code="RuntimeError")
    assert tb["line"] == 5
    assert tb["message"].startswith("RuntimeError: DataLoader worker (pid 30882) is killed by signal: Bus error.")
    assert set(ev["failure_class"]) == {"software"}


def test_traceback_ending_in_nccl_error_is_ours_with_its_text() -> None:
    row = one(parse_file(parser, REAL / "mlengineering_jz_broken_node_unhandled_system_error_conn_refused.log"))
    assert "unhandled system error" in row["message"]
    assert "ncclSystemError: System call (socket, malloc, munmap, etc) failed." in row["message"]


@pytest.mark.parametrize(
    "name",
    [
        "bigscience_meg_gpt2_n16_pp16_user_scancel_1809577.log",  # trainer + launcher SIGTERM flood
        "tr141_exp6_iter2500_validation_then_node_failure_iam37.log",  # slurm node failure
        "mlengineering_desync_report_collective_mismatch_repro.log",  # ProcessGroupNCCL's own report
    ],
)
def test_no_events_where_other_families_speak(name: str) -> None:
    assert parse_file(parser, REAL / name).height == 0


@pytest.mark.parametrize(
    ("name", "covered"),
    [
        ("bloom176b_cuda_unknown_error_gpu_crash.log", 10),
        ("tr1_13b_ecc_uncorrectable_crash_43680.log", 40),  # + an iteration line and 'time (ms)'
        ("tr1_13b_restart_on_bad_node_cuda_oom_at_barrier.log", 12),  # + Megatron start-up lines
        ("tr1_13b_dataloader_shm_bus_error.log", 33),  # the last, unindented interleaved code line
        ("tr141_exp2_cuda_unknown_error_then_node_failure_iam49.log", 30),  # + blank and srun lines
    ],
)
def test_coverage_of_crash_text(name: str, covered: int) -> None:
    assert read_text_events(str(REAL / name), [parser]).covered == covered


# ---------------------------------------------------------------- Python tracebacks

CHAINED = """\
Traceback (most recent call last):
  File "/w/data.py", line 3, in load
    return open(p).read()
OSError: [Errno 5] Input/output error: '/ckpt/model.pt'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/w/train.py", line 9, in <module>
    load()
  File "/w/train.py", line 5, in load_ckpt
    raise RuntimeError("checkpoint load failed") from None
RuntimeError: checkpoint load failed
next unrelated line"""


def test_chained_traceback_is_one_record_with_final_exception() -> None:
    row = one(classified(run(CHAINED)))
    assert (row["line"], row["line_end"], row["code"]) == (1, 13, "RuntimeError")
    assert row["message"] == (
        "RuntimeError: checkpoint load failed [at train.py:5 in load_ckpt]; "
        "earlier: OSError: [Errno 5] Input/output error: '/ckpt/model.pt'"
    )
    assert row["failure_class"] == "storage"  # the cause printed first still decides


def test_direct_cause_chain_and_python311_carets() -> None:
    text = """\
Traceback (most recent call last):
  File "/w/a.py", line 2, in f
    x = d["k"]
        ~^^^^^
KeyError: 'k'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/w/a.py", line 9, in <module>
    f()
ValueError: bad config"""
    row = one(run(text))
    assert (row["line"], row["line_end"], row["code"]) == (1, 12, "ValueError")
    assert row["message"] == "ValueError: bad config [at a.py:9 in <module>]; earlier: KeyError: 'k'"


def test_ranks_interleaved_line_by_line_stay_apart() -> None:
    text = """\
[rank1]: Traceback (most recent call last):
[rank0]: Traceback (most recent call last):
[rank1]:   File "/w/train.py", line 10, in <module>
[rank0]:   File "/w/train.py", line 10, in <module>
[rank1]:     main()
[rank0]:     main()
[rank1]:   File "/w/train.py", line 8, in main
[rank1]:     loss.backward()
[rank1]:     ^^^^^^^^^^^^^^^
[rank0]:   File "/w/train.py", line 8, in main
[rank0]:     loss.backward()
[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered
[rank1]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
[rank1]: For debugging consider passing CUDA_LAUNCH_BLOCKING=1
[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
[rank0]: ncclUnhandledCudaError: Call to CUDA function failed.
[rank0]: Last error:
[rank0]: Cuda failure 'out of memory'
[rank0]: Exception raised from getNCCLComm at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970 (most recent call first):
[rank0]: frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f in /x/libc10.so)
[rank0]: . This may indicate a possible application crash on rank 0 or a network set up issue."""
    ev = classified(run(text))
    r1 = one(ev, line=1)
    assert (r1["line_end"], r1["code"], r1["failure_class"]) == (14, "RuntimeError", "software")
    assert r1["message"] == "RuntimeError: CUDA error: an illegal memory access was encountered [at train.py:8 in main]"
    r0 = one(ev, line=2)
    assert (r0["line_end"], r0["code"]) == (21, "DistBackendError")
    assert r0["message"].startswith("torch.distributed.DistBackendError: NCCL error in: ")
    assert "ncclUnhandledCudaError: Call to CUDA function failed. | Cuda failure 'out of memory'" in r0["message"]
    assert r0["failure_class"] == "oom_gpu"  # NCCL's 'Last error' names the real failure


def test_tee_prefixed_ranks_fill_rank_through_the_reader(tmp_path: Path) -> None:
    lines = [
        "[default0]:Traceback (most recent call last):",
        "[default1]:Traceback (most recent call last):",
        '[default0]:  File "/w/t.py", line 1, in <module>',
        '[default1]:  File "/w/t.py", line 1, in <module>',
        "[default1]:ZeroDivisionError: division by zero",
        "[default0]:ModuleNotFoundError: No module named 'apex'",
    ]
    f = tmp_path / "tee.log"
    f.write_text("\n".join(lines) + "\n")
    ev = parse_file(parser, f).sort("line")
    assert ev.select("line", "line_end", "rank", "code").rows() == [
        (1, 6, 0, "ModuleNotFoundError"),
        (2, 5, 1, "ZeroDivisionError"),
    ]


def test_ray_workers_on_one_node_stay_apart() -> None:
    text = """\
(RayTrainWorker pid=11, ip=10.0.0.1) Traceback (most recent call last):
(RayTrainWorker pid=12, ip=10.0.0.1) Traceback (most recent call last):
(RayTrainWorker pid=11, ip=10.0.0.1)   File "/w/t.py", line 3, in step
(RayTrainWorker pid=12, ip=10.0.0.1)   File "/w/t.py", line 3, in step
(RayTrainWorker pid=12, ip=10.0.0.1) RuntimeError: CUDA error: unknown error
(RayTrainWorker pid=11, ip=10.0.0.1) torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"""
    ev = run(text).sort("line")
    assert ev.select("line", "line_end", "code").rows() == [(1, 6, "OutOfMemoryError"), (2, 5, "RuntimeError")]


def test_truncated_traceback_still_reports_where_it_was() -> None:
    row = one(run('Traceback (most recent call last):\n  File "/w/t.py", line 4, in step\n    y = f(x)'))
    assert row["code"] is None
    assert row["message"] == "Python traceback without its exception line (output cut off) [at t.py:4 in step]"


def test_orphan_exception_lines_are_separate_records() -> None:
    ev = run("RuntimeError: DataLoader worker (pid(s) 12345, 12346) exited unexpectedly\nKeyError: 'x'\nok\nKeyboardInterrupt")
    assert ev.select("line", "line_end", "code").rows() == [
        (1, None, "RuntimeError"),
        (2, None, "KeyError"),
        (4, None, "KeyboardInterrupt"),
    ]


def test_bare_exception_name_after_an_exception_is_interleaved_debris() -> None:
    # two writers: 'RuntimeError' of one process lands right after the other's full line
    row = one(run("RuntimeError: DataLoader worker (pid 1) is killed by signal: Bus error.\nRuntimeError"))
    assert (row["line"], row["line_end"]) == (1, 2)
    assert row["message"] == "RuntimeError: DataLoader worker (pid 1) is killed by signal: Bus error."


def test_headless_tail_with_any_exception_name() -> None:
    row = one(run('  File "/w/m.py", line 3, in f\n    return g(x)\ntorch._dynamo.exc.Unsupported: call_function'))
    assert (row["line"], row["line_end"], row["code"]) == (1, 3, "Unsupported")
    # indented text followed by a 'Key: value' line is no traceback
    assert run("Config:\n    lr: 0.1\nEpoch: 1").height == 0


def test_orphan_nccl_exception_belongs_to_nccl_parser() -> None:
    text = (
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:825, "
        "unhandled system error, NCCL version 2.7.8\nncclSystemError: System call (socket, malloc, munmap, etc) failed."
    )
    assert run(text).height == 0


# ---------------------------------------------------------------- CUDA out of memory, three generations


@pytest.mark.parametrize(
    ("line", "gpu", "code"),
    [
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; "
            "9.73 GiB already allocated; 7.44 MiB free; 9.86 GiB cached)",
            0,
            "RuntimeError",
        ),
        (
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.15 GiB. GPU 3 has a total "
            "capacty of 23.69 GiB of which 912.81 MiB is free. Process 454738 has 22.79 GiB memory in use.",
            3,
            "OutOfMemoryError",
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 5 has a total capacity "
            "of 79.15 GiB of which 1.25 MiB is free. Including non-PyTorch memory, this process has 79.14 GiB "
            "memory in use. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
            5,
            "OutOfMemoryError",
        ),
    ],
)
def test_cuda_oom_generations(line: str, gpu: int, code: str) -> None:
    tb = f'Traceback (most recent call last):\n  File "/w/m.py", line 7, in forward\n    y = self.lin(x)\n{line}'
    row = one(classified(run(tb)))
    assert (row["gpu"], row["code"], row["failure_class"], row["line_end"]) == (gpu, code, "oom_gpu", 4)


def test_wrapped_oom_message_lines_stay_in_the_record() -> None:
    text = """\
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total capacty of 15.77 GiB of which 281.12 MiB is free.
Including non-PyTorch memory, this process has 15.49 GiB memory in use.
Of the allocated memory 15.04 GiB is allocated by PyTorch, and 4.72 MiB is reserved by PyTorch but unallocated."""
    row = one(run(text))
    assert (row["line"], row["line_end"], row["gpu"]) == (1, 3, 0)


@pytest.mark.parametrize(
    ("message", "klass"),
    [
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu_memory"),
        ("RuntimeError: CUDA error: unknown error", "gpu_hardware"),
        ("RuntimeError: CUDA driver error: unknown error", "gpu_hardware"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "software"),
        ("RuntimeError: CUDA error: device-side assert triggered", "software"),
        ("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle)`", "software"),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR", "software"),
        ("RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution", "gpu_interconnect"),
        ("torch.AcceleratorError: CUDA error: misaligned address", "software"),
        ("OSError: [Errno 28] No space left on device", "storage"),
        ("OSError: [Errno 116] Stale file handle", "storage"),
        ("FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding.", "numerics"),
        ("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.", "numerics"),
        ("RuntimeError: DataLoader worker (pid(s) 12345) exited unexpectedly", "software"),
        ("RuntimeError: DataLoader worker (pid 7) is killed by signal: Killed.", "unknown"),
        ("ModuleNotFoundError: No module named 'apex'", "software"),
        # a signal delivered from outside: the scheduler's records decide, not this line
        ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 17 got signal: 15", "unknown"),
        ("KeyboardInterrupt", "unknown"),
        ("RuntimeError: NCCL error in: ../ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8", "network"),
        ("torch.distributed.DistBackendError: NCCL error in: ../x.cpp:1, remote process exited or there was a "
         "network error, NCCL version 2.19.3", "network"),
    ],
)
def test_exception_classes(message: str, klass: str) -> None:
    row = one(classified(run(f'  File "/w/t.py", line 1, in f\n    g()\n{message}')))
    assert row["failure_class"] == klass


# ---------------------------------------------------------------- C++ aborts and fatal errors


def test_cpp_abort_with_multiline_what() -> None:
    text = """\
terminate called after throwing an instance of 'c10::Error'
  what():  CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.
Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f in /x/libc10.so)
frame #1: <unknown function> + 0x1 (0x7f in /x/libc10_cuda.so)
Aborted (core dumped)"""
    row = one(classified(run(text)))
    assert (row["line"], row["line_end"], row["code"], row["failure_class"]) == (1, 8, "c10::Error", "software")
    assert row["message"] == (
        "c10::Error: CUDA error: an illegal memory access was encountered | Search for `cudaErrorIllegalAddress' in "
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information. "
        "[raised from c10_cuda_check_implementation at CUDAException.cpp:43]"
    )


def test_watchdog_abort_is_a_collective_timeout() -> None:
    text = """\
terminate called after throwing an instance of 'c10::DistBackendError'
  what():  [PG 0 Rank 3] Process group watchdog thread terminated with exception: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:565 (most recent call first):"""
    row = one(classified(run(text)))
    assert (row["code"], row["failure_class"]) == ("c10::DistBackendError", "collective_timeout")


def test_watchdog_abort_cut_after_its_rank_is_a_collective_timeout() -> None:
    # https://github.com/huggingface/open-r1/issues/620: three aborts glued on one line, the
    # exception text hard-wrapped onto the next one; the line itself names no application error.
    text = (
        "  what():    what():    what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread "
        "terminated with exception: [Rank 2]"
    )
    row = one(classified(run(text)))
    assert row["failure_class"] == "collective_timeout"


def test_watchdog_abort_with_an_nccl_error_keeps_its_class() -> None:
    text = (
        "  what():  [PG 0 Rank 3] Process group watchdog thread terminated with exception: NCCL error: "
        "unhandled system error, NCCL version 2.18.1"
    )
    assert one(classified(run(text)))["failure_class"] == "network"


def test_std_runtime_error_and_bare_terminate() -> None:
    ev = run(
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:5678\n"
        "plain line\n"
        "terminate called without an active exception"
    )
    assert ev.select("line", "line_end", "code").rows() == [(1, 2, "std::runtime_error"), (4, None, None)]
    assert ev["message"].to_list() == [
        "std::runtime_error: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:5678",
        "terminate called without an active exception",
    ]
    assert classified(ev)["failure_class"].to_list() == ["software", "software"]


def test_faulthandler_dump_is_one_segfault_record() -> None:
    text = """\
Fatal Python error: Segmentation fault

Thread 0x00007f2b6effd700 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 324 in wait

Current thread 0x00007f2c1b7fe740 (most recent call first):
  File "/w/model.py", line 77 in forward
  File "/w/train.py", line 12 in <module>

Extension modules: numpy.core._multiarray_umath, torch._C (total: 20)
Segmentation fault (core dumped)
after"""
    row = one(classified(run(text)))
    assert (row["line"], row["line_end"], row["code"], row["failure_class"]) == (1, 11, "-11", "software")
    assert row["message"] == (
        "Fatal Python error: Segmentation fault; Segmentation fault (core dumped) [at model.py:77 in forward]"
    )


# ---------------------------------------------------------------- torchrun / elastic

CHILD_FAILED = """\
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 263, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-05-21_15:43:04
  host      : node-1
  rank      : 2 (local_rank: 2)
  exitcode  : -15 (pid: 1233)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 1233
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-05-21_15:43:03
  host      : node-1
  rank      : 3 (local_rank: 3)
  exitcode  : -6 (pid: 1234)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 1234
============================================================
srun: error: node-1: task 0: Exited with exit code 1"""


def test_child_failed_error_takes_the_root_cause() -> None:
    row = one(classified(run(CHILD_FAILED)))
    assert (row["line"], row["line_end"], row["code"], row["rank"], row["node"]) == (1, 27, "-6", 3, "node-1")
    assert str(row["ts"]) == "2025-05-21 15:43:03" and row["ts_offset_s"] is None and row["ts_year_known"]
    assert row["message"] == (
        "ChildFailedError: train.py FAILED; root cause: rank 3 (local_rank 3) on node-1 exitcode -6 (SIGABRT) "
        "pid 1234; Signal 6 (SIGABRT) received by PID 1234"
    )
    assert row["failure_class"] == "software"


def test_child_failed_sigkill_is_not_guessed() -> None:
    row = one(classified(run(CHILD_FAILED.replace("-6 (pid: 1234)", "-9 (pid: 1234)"))))
    assert (row["code"], row["failure_class"]) == ("-9", "unknown")
    assert "(SIGKILL)" in row["message"]


def test_root_cause_block_without_the_exception_line() -> None:
    text = """\
E0813 08:21:22.980000 1245483 torch/distributed/elastic/multiprocessing/api.py:984] failed (exitcode: -6) local_rank: 6 (pid: 1246013) of binary: /venv/bin/python3
Root Cause (first observed failure):
[0]:
  time      : 2026-08-13_08:21:19
  host      : zkrh-58
  rank      : 6 (local_rank: 6)
  exitcode  : -6 (pid: 1246013)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 1246013"""
    ev = run(text).sort("line")
    failed, root = ev.row(0, named=True), ev.row(1, named=True)
    assert (failed["code"], failed["rank"], failed["ts_year_known"]) == ("-6", 6, False)
    assert str(failed["ts"]) == "2000-08-13 08:21:22.980000"
    assert failed["message"] == (
        "worker failed (exitcode: -6 = SIGABRT) local_rank: 6 (pid: 1246013) of binary: /venv/bin/python3"
    )
    assert (root["line"], root["line_end"], root["code"], root["node"], root["rank"]) == (2, 9, "-6", "zkrh-58", 6)


def test_elastic_legacy_logging_lines() -> None:
    text = """\
WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 518 closing signal SIGTERM
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 517) of binary: /usr/bin/python
INFO:torch.distributed.elastic.agent.server.api:[default] Worker group FAILED. 3/3 attempts left; will restart worker group
WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting down workers"""
    ev = classified(run(text)).sort("line")
    assert ev.select("line", "kind", "severity", "code", "attempt", "state", "failure_class").rows() == [
        (1, "warning", "warning", "-15", None, None, None),
        (2, "error", "error", "-9", None, None, "unknown"),
        (3, "restart", "warning", None, 1, "FAILED", None),
        (4, "warning", "warning", "-15", None, None, None),
    ]
    assert ev["message"][1] == "worker failed (exitcode: -9 = SIGKILL) local_rank: 0 (pid: 517) of binary: /usr/bin/python"
    assert ev["rank"][1] == 0
    assert ev["ts"].null_count() == 4  # no clock on these lines: the reader uses prefixes or neighbours


def test_elastic_glog_lines_have_yearless_time() -> None:
    text = """\
W0801 13:23:17.366000 140 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 2658 closing signal SIGTERM
E0801 13:23:17.466000 140 /opt/venv/lib/python3.10/site-packages/torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: 1) local_rank: 0 (pid: 2657) of binary: /usr/bin/python3
W0616 00:37:22.830000 4015698 torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM death signal, shutting down workers"""
    ev = classified(run(text)).sort("line")
    assert ev["ts_year_known"].to_list() == [False, False, False]
    assert [str(t) for t in ev["ts"]] == ["2000-08-01 13:23:17.366000", "2000-08-01 13:23:17.466000", "2000-06-16 00:37:22.830000"]
    assert ev.select("kind", "code", "rank", "failure_class").rows() == [
        ("warning", "-15", None, None),
        ("error", "1", 0, "software"),
        ("warning", "-15", None, None),
    ]


@pytest.mark.parametrize(
    ("line", "attempt"),
    [
        ("[INFO] [ft_launcher.py:10] [default] Worker group FAILED. 2/5 attempts left; will restart worker group", 4),
        ("INFO:dlrover.python.elastic_agent.torch.training:[default] Worker group FAILED, is failure node: False,2/3 attempts left; will restart worker group.", 2),
        ("INFO:torch.distributed.elastic.agent.server.api:[default] Worker group UNHEALTHY. 1/1 attempts left; will restart worker group", 1),
    ],
)
def test_worker_group_restart_counts(line: str, attempt: int) -> None:
    row = one(run(line))
    assert (row["kind"], row["attempt"]) == ("restart", attempt)


def test_membership_change_restart() -> None:
    row = one(run("INFO:torch.distributed.elastic.agent.server.api:[default] Detected 1 new nodes from group_rank=1; will restart worker group"))
    assert (row["kind"], row["attempt"]) == ("restart", None)


RDZV = """\
INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:
  restart_count=1
  master_addr=node-1
  master_port=29500
  group_rank=0
  group_world_size=2
  local_ranks=[0, 1, 2, 3, 4, 5, 6, 7]
  role_ranks=[0, 1, 2, 3, 4, 5, 6, 7]
  global_ranks=[0, 1, 2, 3, 4, 5, 6, 7]
  role_world_sizes=[16, 16, 16, 16, 16, 16, 16, 16]
  global_world_sizes=[16, 16, 16, 16, 16, 16, 16, 16]

INFO:torch.distributed.elastic.agent.server.api:[default] Starting worker group"""


def test_rendezvous_result_block() -> None:
    row = one(run(RDZV))
    assert (row["kind"], row["line"], row["line_end"], row["attempt"], row["n_nodes"], row["n_gpus"]) == (
        "info", 1, 11, 1, 2, 16,
    )
    assert row["message"] == "[default] rendezvous complete: restart_count=1 group_rank=0 group_world_size=2 world_size=16"
    # the block and the worker-group chatter after it count as understood (the blank line cannot)
    assert read_lines_covered(RDZV) == 12


def test_launch_config_block() -> None:
    text = """\
INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:
  entrypoint       : /fsx/ddp.py
  min_nodes        : 2
  max_nodes        : 2
  nproc_per_node   : 4
  run_id           : 4
  rdzv_backend     : c10d
  rdzv_endpoint    : ip-10-4-33-25
  max_restarts     : 3
  monitor_interval : 5
  log_dir          : None
  metrics_cfg      : {}
"""
    row = one(run(text))
    assert (row["kind"], row["line_end"], row["n_nodes"], row["n_gpus"]) == ("init", 12, 2, 8)
    assert row["message"] == "torchrun launch: entrypoint=/fsx/ddp.py nodes=2:2 nproc_per_node=4 max_restarts=3"


def test_cut_off_block_still_has_a_message() -> None:
    row = one(run("I0801 13:20:00.000000 140 torch/distributed/launcher/api.py:188] Starting elastic_operator with launch configs:\nnext"))
    assert row["message"] == "torchrun launch: entrypoint=? nodes=?:? nproc_per_node=? max_restarts=?"
    assert (row["kind"], row["ts_year_known"]) == ("init", False)


@pytest.mark.parametrize(
    ("line", "kind", "code"),
    [
        ("INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. "
         "Waiting 300 seconds for other agents to finish.", "info", None),
        ("I0801 13:23:17.366000 140 torch/distributed/elastic/agent/server/local_elastic_agent.py:253] "
         "Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish", "info", None),
        ("[W socket.cpp:601] [c10d] The client socket has failed to connect to [node-1]:29500 "
         "(errno: 111 - Connection refused).", "warning", None),
        ("W0813 22:13:58.000000 1 torch/distributed/elastic/multiprocessing/api.py:900] "
         "Unable to shutdown process 942213 via 2, forcefully exiting via 9", "warning", None),
    ],
)
def test_other_launcher_lines(line: str, kind: str, code: str | None) -> None:
    row = one(run(line))
    assert (row["kind"], row["severity"], row["code"]) == (kind, kind, code)


# ---------------------------------------------------------------- one-line failures


@pytest.mark.parametrize(
    ("line", "code", "klass"),
    [
        ("Segmentation fault (core dumped)", "-11", "software"),
        ("Bus error (core dumped)", "-7", "software"),
        ("Aborted (core dumped)", "-6", "software"),
        ("Killed", "-9", "unknown"),
        ("/var/spool/slurmd/job123/slurm_script: line 45: 12345 Killed                  python train.py", "-9", "unknown"),
        ("bash: line 1:  4242 Segmentation fault      (core dumped) python train.py", "-11", "software"),
        ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).", "-7", "software"),
        ("ERROR: Unexpected segmentation fault encountered in worker.", "-11", "software"),
        ("CUDA driver error: unknown error", None, "gpu_hardware"),
        ("Loss is NaN, stopping training", None, "numerics"),
        ("[rank0]: loss became nan at step 1200, aborting", None, "numerics"),
    ],
)
def test_one_line_failures(line: str, code: str | None, klass: str) -> None:
    row = one(classified(run(line)))
    assert (row["kind"], row["code"], row["failure_class"]) == ("error", code, klass)


def test_skipped_nan_batch_is_only_a_warning() -> None:
    row = one(classified(run("loss is nan, skipping batch")))
    assert (row["kind"], row["severity"], row["failure_class"]) == ("warning", "warning", None)


@pytest.mark.parametrize(
    "line",
    [
        " iteration      100/  311541 | elapsed time per iteration (ms): 25593.4 | lm loss: nan | number of nan iterations:   1 |",
        "node1:123:456 [0] NCCL WARN Cuda failure 'unknown error'",
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE) ran for 8097 milliseconds before timing out.",
        "srun: error: Node failure on jean-zay-iam49",
        "WARNING: could not find the metadata file /ckpt/latest_checkpointed_iteration.txt",
        "/usr/lib/python3/dist-packages/requests/__init__.py:87: RequestsDependencyWarning: urllib3 (2.0.4) doesn't match",
        "  warnings.warn(\"urllib3 ({}) or chardet ({}) doesn't match a supported \"",
        "Main process received SIGTERM, exiting",
        "Killing subprocess 74367",
        "time (ms)",
        "Epoch: 1",
        "> compiling and loading fused kernels ...",
        "    indented config value",
    ],
)
def test_lines_that_are_not_ours(line: str) -> None:
    assert run(line).height == 0


def test_device_assert_thread_lines_are_noise_not_events() -> None:
    line = ("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [32,0,0] "
            "Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.")
    assert run(line).height == 0
    assert read_lines_covered(line) == 1


# ---------------------------------------------------------------- properties


def read_lines_covered(text: str, tmp: Path | None = None) -> int:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "x.log"
        f.write_text(text + "\n")
        return read_text_events(str(f), [parser]).covered


_ALPHABET = st.sampled_from(
    list("abcXYZ019 :'\"()[]#=-_.,\t^~/")
    + ["Traceback (most recent call last):", "  File \"x.py\", line 1, in f", "    g()", "RuntimeError: boom",
       "ValueError", "terminate called after throwing an instance of 'c10::Error'", "  what():  CUDA error: x",
       "frame #0: f", "Exception raised from q at a.h:1 (most recent call first):", "Root Cause (first observed failure):",
       "  time      : 2025-05-21_15:43:03", "  exitcode  : -9 (pid: 1)", "Fatal Python error: Aborted", "[default3]:",
       "[rank1]: ", "During handling of the above exception, another exception occurred:", "Killed", "Last error:",
       "E0801 13:23:17.366000 1 a.py:1] failed (exitcode: -9) local_rank: 0 (pid: 1) of binary: p",
       "[default] Rendezvous complete for workers. Result:", "  restart_count=x", "\u00e9\ufffd"]
)
_LINE = st.lists(_ALPHABET, max_size=6).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_LINE, min_size=1, max_size=40))
def test_never_raises_and_keeps_the_contract(lines: list[str]) -> None:
    out = extract_lines(parser, lines)
    assert out.schema == RAW_SCHEMA
    assert set(out["kind"]) <= set(KINDS) and set(out["severity"]) <= set(SEVERITIES)
    assert out["message"].null_count() == 0 and out["line"].null_count() == 0
    assert out.filter(pl.col("line_end").is_not_null() & (pl.col("line_end") <= pl.col("line"))).height == 0
    assert out.filter((pl.col("line") < 1) | (pl.col("line") > max(len(lines), 1))).height == 0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(max_size=80), min_size=1, max_size=25))
def test_arbitrary_unicode_never_raises(lines: list[str]) -> None:
    out = extract_lines(parser, lines)
    assert out.schema == RAW_SCHEMA
    assert out["message"].null_count() == 0


def test_rules_are_this_familys_and_load_with_the_others() -> None:
    assert TORCH_RULES and all(r.id.startswith("torch-") for r in TORCH_RULES)
    assert {r.id for r in TORCH_RULES} <= {r.id for r in load_rules()}  # no id clashes with other families


_RANK_TB = [
    "Traceback (most recent call last):",
    '  File "/w/train.py", line 10, in <module>',
    "    main()",
    '  File "/w/train.py", line 8, in main',
    "    step(batch)",
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=12, max_size=12))
def test_any_line_interleaving_of_two_ranks_gives_one_record_each(order: list[bool]) -> None:
    a = [f"[default0]:{x}" for x in [*_RANK_TB, "RuntimeError: CUDA error: unknown error"]]
    b = [f"[default1]:{x}" for x in [*_RANK_TB, "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]]
    merged: list[str] = []
    for take_a in order:
        src = a if (take_a and a) or not b else b
        merged.append(src.pop(0))
    merged += a + b
    ev = extract_lines(parser, merged)
    assert ev.height == 2
    assert sorted(m.split(" [at")[0] for m in ev["message"]) == [
        "RuntimeError: CUDA error: unknown error",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]


REAL_TRAINER = Path(__file__).resolve().parent.parent / "data" / "real_excerpts" / "trainer"


def test_a_storage_errno_in_a_loggers_line_is_storage() -> None:
    # https://github.com/THUDM/slime/issues/326: Megatron's async checkpoint writer logs the errno, no traceback.
    row = one(classified(parse_file(parser, REAL_TRAINER / "megatron_async_ckpt_local_process_eio.log")))
    assert (row["kind"], row["failure_class"]) == ("error", "storage")


def test_a_storage_errno_inside_a_traceback_stays_one_event() -> None:
    # https://github.com/pytorch/pytorch/issues/48580: the errno is the traceback's exception line.
    ev = classified(parse_file(parser, REAL_TRAINER / "torch_save_close_eio.log"))
    assert ev.select("code", "failure_class").rows() == [("OSError", "storage")]


def test_another_errno_in_a_loggers_line_is_not_an_event() -> None:
    assert run("ERROR: worker 3 lost its store connection: [Errno 111] Connection refused").height == 0


@pytest.mark.parametrize(
    "line",
    [
        # https://github.com/tenstorrent/tt-metal/issues/37051: a compiler under mpirun on a shared cache.
        "[1,1]<stdout>: brisc build failed. Log: /w/brisck.cc:21:10: fatal error: ../kernel_includes.hpp: "
        "Stale file handle",
        # https://github.com/ai4d-iasc/trixie/issues/37: the shell while GPFS nodes rebooted.
        "-bash: cd: /home/someone: Stale file handle",
        "cp: error writing '/ckpt/step_900/model.pt': No space left on device",
    ],
)
def test_a_strerror_ending_a_tools_line_is_storage(line: str) -> None:
    row = one(classified(run(line)))
    assert (row["kind"], row["failure_class"]) == ("error", "storage")


def test_a_strerror_inside_a_sentence_is_not_an_event() -> None:
    # only the errno text that ends the line, after the failed path, is the error
    assert run("checking mounts: Stale file handle errors are retried by the client").height == 0


def test_a_failed_checkpoint_write_by_torch_save_is_storage() -> None:
    # https://github.com/rwth-i6/returnn/issues/1829: the zip writer names no errno.
    ev = classified(parse_file(parser, REAL_TRAINER / "pytorchstreamwriter_file_write_failed.log"))
    assert ev.select("code", "failure_class").rows() == [("RuntimeError", "storage")]


@pytest.mark.parametrize(
    "line",
    [
        # https://github.com/tensorflow/tensor2tensor/issues/413: TensorFlow's glog line, no traceback.
        "2017-11-13 10:31:59.958338: W tensorflow/core/framework/op_kernel.cc:1192] Resource exhausted: OOM when "
        "allocating tensor with shape[15,8,183,183]",
        # https://github.com/huggingface/transformers/issues/8305: TF2's numbered status, two spaces.
        "  (0) Resource exhausted:  OOM when allocating tensor with shape[3200,3072] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
        # https://github.com/jax-ml/jax/issues/788: XLA's status, hard-wrapped after 'Out'.
        "[1] 2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/local_client.cc:672] "
        "Execution of replica 0 failed: Resource exhausted: Out ",
    ],
)
def test_a_tensorflow_or_xla_resource_exhausted_oom_line_is_oom_gpu(line: str) -> None:
    row = one(classified(run(line)))
    assert (row["kind"], row["failure_class"]) == ("error", "oom_gpu")


def test_an_xla_runtime_error_out_of_memory_is_oom_gpu() -> None:
    # https://github.com/jax-ml/jax/issues/13428: the traceback's exception is XlaRuntimeError.
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    out_flat = compiled.execute(in_flat)\n"
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes."
    )
    assert classified(run(text)).select("code", "failure_class").rows() == [("XlaRuntimeError", "oom_gpu")]


@pytest.mark.parametrize(
    "line",
    [
        "grpc: RESOURCE_EXHAUSTED: Received message larger than max (8388608 vs. 4194304)",
        "Resource exhausted: Quota exceeded for quota metric 'Requests' of service 'storage.googleapis.com'",
    ],
)
def test_a_resource_exhausted_that_is_no_memory_is_not_oom_gpu(line: str) -> None:
    assert "oom_gpu" not in classified(run(line))["failure_class"].to_list()


def test_fairseqs_nan_or_inf_in_input_tensor_is_numerics() -> None:
    # https://github.com/facebookresearch/fairseq/issues/1529: logged through tensorboardX as the loss went NaN.
    row = one(classified(run("2020-10-01 10:25:50 | WARNING | root | NaN or Inf found in input tensor.")))
    assert row["failure_class"] == "numerics"
