"""Slurm output: ``sacct -P`` (parsable2), slurmctld log lines, srun/slurmstepd lines."""

from __future__ import annotations

from toranalyze.simulate import fmt
from toranalyze.simulate.context import RunContext
from toranalyze.simulate.timeline import US, Attempt

SACCT_HEADER = "JobID|JobName|Partition|Account|User|State|ExitCode|Submit|Start|End|Elapsed|NNodes|NCPUS|NodeList|AllocTRES"
Line = tuple[int, str]


def sacct_rows(ctx: RunContext, a: Attempt, submit: int) -> list[str]:
    cfg = ctx.cfg
    n = len(a.nodes)
    cpus = 96 * n
    nl = fmt.hostlist(a.nodes)
    el = fmt.hms((a.end - a.start) // US)
    st, en, su = fmt.iso(a.start), fmt.iso(a.end), fmt.iso(submit)
    tres = f"billing={cpus},cpu={cpus},gres/gpu={n * cfg.gpus_per_node},mem={1900 * n}G,node={n}"
    state, code = a.exit_state, a.exit_code
    step_state = {"COMPLETED": "COMPLETED", "TIMEOUT": "CANCELLED", "PREEMPTED": "CANCELLED",
                  "NODE_FAIL": "CANCELLED", "OUT_OF_MEMORY": "OUT_OF_MEMORY", "FAILED": "FAILED"}.get(
        state, "CANCELLED")
    step_code = {"FAILED": "1:0", "OUT_OF_MEMORY": "0:125"}.get(state, "0:0" if state == "COMPLETED" else "0:15")
    batch_code = "0:15" if step_state == "CANCELLED" else code
    j = a.job_id
    return [
        f"{j}|{cfg.name}|gpu|{ctx.user}-proj|{ctx.user}|{state}|{code}|{su}|{st}|{en}|{el}|{n}|{cpus}|{nl}|{tres}",
        f"{j}.batch|batch||{ctx.user}-proj||{step_state}|{batch_code}|{st}|{st}|{en}|{el}|1|96|{a.nodes[0]}|cpu=96,gres/gpu={cfg.gpus_per_node},mem={1900}G,node=1",
        f"{j}.extern|extern||{ctx.user}-proj||COMPLETED|0:0|{st}|{st}|{en}|{el}|{n}|{cpus}|{nl}|{tres}",
        f"{j}.0|torchrun||{ctx.user}-proj||{step_state}|{step_code}|{st}|{st}|{en}|{el}|{n}|{n}|{nl}|cpu={n},gres/gpu={n * cfg.gpus_per_node},mem={1900 * n}G,node={n}",
    ]


def ctld(t: int, text: str) -> Line:
    return t, f"[{fmt.iso_ms(t)}] {text}"


def allocate(a: Attempt, submit: int, partition: str = "gpu") -> list[Line]:
    return [
        ctld(submit, f"_slurm_rpc_submit_batch_job: JobId={a.job_id} InitPrio=4294901512 usec=612"),
        ctld(a.start, f"sched: Allocate JobId={a.job_id} NodeList={fmt.hostlist(a.nodes)} #CPUs={96 * len(a.nodes)} Partition={partition}"),
    ]


def job_complete(t: int, job_id: int, wexit: int | None) -> list[Line]:
    out = []
    if wexit is not None:
        out.append(ctld(t, f"_job_complete: JobId={job_id} WEXITSTATUS {wexit}"))
    out.append(ctld(t + 1000, f"_job_complete: JobId={job_id} done"))
    return out


def stepd_cancel(job_id: int, host: str, t: int, reason: str | None) -> str:
    why = f" DUE TO {reason}" if reason else ""
    return f"slurmstepd: error: *** JOB {job_id} ON {host} CANCELLED AT {fmt.iso(t)}{why} ***"
