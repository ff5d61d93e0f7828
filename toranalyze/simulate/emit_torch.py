"""PyTorch output: NCCL watchdog timeouts, Python/C++ errors, torchrun failures."""

from __future__ import annotations

from toranalyze.simulate import fmt
from toranalyze.simulate.context import RunContext
from toranalyze.simulate.emit_nccl import NCCL_VERSION
from toranalyze.simulate.timeline import Attempt

WORKDIR = "/workspace/megatron"


def watchdog_timeout(ctx: RunContext, rank: int, seq: int, numel: int, ran_ms: int) -> list[str]:
    tmo = int(ctx.cfg.watchdog_timeout_s * 1000)
    p = f"[rank{rank}]:"
    return [
        f"{p}[E ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={tmo}) "
        f"ran for {ran_ms} milliseconds before timing out.",
        f"{p}[E ProcessGroupNCCL.cpp:1664] [PG 0 Rank {rank}] Exception (either an error or timeout) detected by "
        f"watchdog at work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.",
        f"{p}[E ProcessGroupNCCL.cpp:578] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the "
        f"asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"{p}[E ProcessGroupNCCL.cpp:584] [Rank {rank}] To avoid data inconsistency, we are taking the entire "
        f"process down.",
    ]


def _stack(rank: int) -> list[str]:
    p = f"[rank{rank}]:"
    return [
        f"{p} Traceback (most recent call last):",
        f'{p}   File "{WORKDIR}/pretrain_gpt.py", line 243, in <module>',
        f"{p}     pretrain(",
        f'{p}   File "{WORKDIR}/megatron/training/training.py", line 311, in pretrain',
        f"{p}     iteration, num_floating_point_operations_so_far = train(",
        f"{p}                                                       ^^^^^^",
        f'{p}   File "{WORKDIR}/megatron/training/training.py", line 1149, in train',
        f"{p}     train_step(forward_step_func,",
        f'{p}   File "{WORKDIR}/megatron/training/training.py", line 616, in train_step',
        f"{p}     losses_reduced = forward_backward_func(",
        f"{p}                      ^^^^^^^^^^^^^^^^^^^^^^",
    ]


def cuda_error(rank: int, what: str) -> list[str]:
    """A CUDA error surfacing as a RuntimeError in the training loop."""
    p = f"[rank{rank}]:"
    return _stack(rank) + [
        f'{p}   File "/usr/local/lib/python3.10/dist-packages/torch/autograd/__init__.py", line 266, in backward',
        f"{p}     Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass",
        f"{p} RuntimeError: CUDA error: {what}",
        f"{p} CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        f"might be incorrect.",
        f"{p} For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
        f"{p} Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        f"{p}",
    ]


def cuda_oom(rank: int, gpu: int) -> list[str]:
    p = f"[rank{rank}]:"
    return _stack(rank) + [
        f'{p}   File "/usr/local/lib/python3.10/dist-packages/torch/nn/functional.py", line 1858, in softmax',
        f"{p}     ret = input.softmax(dim)",
        f"{p}           ^^^^^^^^^^^^^^^^^^",
        f"{p} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU {gpu} has a total "
        f"capacity of 79.11 GiB of which 1.38 GiB is free. Including non-PyTorch memory, this process has 77.72 GiB "
        f"memory in use. Of the allocated memory 72.18 GiB is allocated by PyTorch, and 3.91 GiB is reserved by "
        f"PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        f"Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
    ]


def software_error(rank: int) -> list[str]:
    p = f"[rank{rank}]:"
    return _stack(rank) + [
        f'{p}   File "{WORKDIR}/megatron/core/datasets/gpt_dataset.py", line 197, in __getitem__',
        f"{p}     text, document_ids = self._query_document_sample_shuffle_indices(idx)",
        f'{p}   File "{WORKDIR}/megatron/core/datasets/gpt_dataset.py", line 271, in _query_document_sample_shuffle_indices',
        f"{p}     document_index_beg, document_index_beg_offset = self.sample_index[idx]",
        f"{p}                                                     ~~~~~~~~~~~~~~~~~^^^^^",
        f"{p} IndexError: index 4194304 is out of bounds for axis 0 with size 4194304",
    ]


def storage_error(rank: int, path: str, step: int) -> list[str]:
    p = f"[rank{rank}]:"
    return _stack(rank) + [
        f'{p}   File "{WORKDIR}/megatron/training/checkpointing.py", line 398, in save_checkpoint',
        f"{p}     torch.save(state_dict, checkpoint_name)",
        f'{p}   File "/usr/local/lib/python3.10/dist-packages/torch/serialization.py", line 628, in save',
        f"{p}     with _open_zipfile_writer(f) as opened_zipfile:",
        f"{p} OSError: [Errno 5] Input/output error: '{path}/iter_{step:07d}/mp_rank_00/model_optim_rng.pt'",
    ]


def nccl_remote_error(rank: int, ib_warn: str) -> list[str]:
    p = f"[rank{rank}]:"
    return [
        f"{p}[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank {rank}] Process group watchdog thread terminated with "
        f"exception: NCCL error: remote process exited or there was a network error, NCCL version {NCCL_VERSION}",
        f"{p} ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
        f"prematurely.",
        f"{p} Last error:",
        f"{p} {ib_warn}",
    ]


def terminate_abort(rank: int, what: str) -> list[str]:
    p = f"[rank{rank}]:"
    return [
        f"{p} terminate called after throwing an instance of 'c10::Error'",
        f"{p}   what():  {what}",
    ]


def torchrun_failure(
    ctx: RunContext, a: Attempt, node_i: int, t_us: int, failed: list[tuple[int, int]], root: tuple[int, int, int]
) -> list[str]:
    """torchrun's lines on one node when its workers failed.

    ``failed``: (local_rank, exitcode) of this node's failed workers; ``root``: (global rank, exitcode, t_us)
    of the first observed failure, for the ChildFailedError block.
    """
    host = a.nodes[node_i]
    sk = ctx.skew(host)
    lp = ctx.launcher_pid(a, node_i)
    g = fmt.glog(t_us + sk)
    out: list[str] = []
    G = ctx.G
    for lr in range(G):
        if all(lr != f[0] for f in failed):
            pid = ctx.pid(a, node_i * G + lr)
            out.append(
                f"W{g} {lp} torch/distributed/elastic/multiprocessing/api.py:858] Sending process {pid} closing "
                f"signal SIGTERM"
            )
    for lr, code in failed:
        pid = ctx.pid(a, node_i * G + lr)
        out.append(
            f"E{g} {lp} torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: {code}) "
            f"local_rank: {lr} (pid: {pid}) of binary: /usr/bin/python3"
        )
    rrank, rcode, rt = root
    rhost = ctx.host_of(a, rrank)
    out += [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 892, in main',
        "    run(args)",
        '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 883, in run',
        "    elastic_launch(",
        '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 139, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 270, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "pretrain_gpt.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        f"  time      : {fmt.torchelastic_time(rt + ctx.skew(rhost))}",
        f"  host      : {rhost}",
        f"  rank      : {rrank} (local_rank: {rrank % G})",
        f"  exitcode  : {rcode} (pid: {ctx.pid(a, rrank)})",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "============================================================",
    ]
    return out


def launcher_start(ctx: RunContext, a: Attempt, node_i: int, t_us: int) -> list[str]:
    host = a.nodes[node_i]
    g = fmt.glog(t_us + ctx.skew(host))
    lp = ctx.launcher_pid(a, node_i)
    pre = f"W{g} {lp} torch/distributed/run.py:779] "
    return [
        pre,
        pre + "*****************************************",
        pre + "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
        "system being overloaded, please further tune the variable for optimal performance in your application as "
        "needed. ",
        pre + "*****************************************",
    ]


def user_error(rank: int, pick: int) -> list[str]:
    """A bug in the user's code surfacing on one rank: a missing key, a shape mismatch, a failed
    assertion or the dataset's index error (``pick`` chooses)."""
    p = f"[rank{rank}]:"
    kind = pick % 4
    if kind == 3:
        return software_error(rank)
    stack = _stack(rank)
    if kind == 0:
        return stack + [
            f'{p}   File "{WORKDIR}/pretrain_gpt.py", line 158, in forward_step',
            f"{p}     tokens, labels, loss_mask, attention_mask, position_ids = get_batch(data_iterator)",
            f'{p}   File "{WORKDIR}/pretrain_gpt.py", line 97, in get_batch',
            f'{p}     batch = {{k: v.cuda(non_blocking=True) for k, v in data["tokens_and_mask"].items()}}',
            f"{p}                                                         ~~~~^^^^^^^^^^^^^^^^^^^",
            f"{p} KeyError: 'tokens_and_mask'",
        ]
    if kind == 1:
        return stack + [
            f'{p}   File "{WORKDIR}/megatron/core/transformer/attention.py", line 352, in forward',
            f"{p}     query = query.view(*query.shape[:2], self.num_attention_heads_per_partition, -1)",
            f"{p}             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            f"{p} RuntimeError: shape '[4096, 1, 16, -1]' is invalid for input of size {4096 * 2048 + 1024 * (pick % 7 + 1)}",
        ]
    return stack + [
        f'{p}   File "{WORKDIR}/megatron/core/pipeline_parallel/schedules.py", line 387, in forward_backward_no_pipelining',
        f"{p}     assert len(model) == 1, \"non-pipeline-parallel schedule does not support model chunking\"",
        f"{p}            ^^^^^^^^^^^^^^^",
        f"{p} AssertionError: non-pipeline-parallel schedule does not support model chunking",
    ]
