"""Line rules for Slurm records found in text logs.

Three places write them: the job's own stdout/stderr (slurmstepd banners, srun
errors, cgroup OOM notices), the daemons' logs (slurmctld/slurmd, with an
``[ISO.ms]`` or journald stamp that ``toranalyze.ingest.lines`` peels, or behind a
syslog prefix handled here), and cluster watchdog scripts that poll squeue and
print ``PULSE:`` / ``ALERT:`` lines into the run log.

Each rule is one literal prefilter plus one regex with named groups, evaluated
over the whole column of candidate lines; a rule returns only the columns it knows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl
from toranalyze_parsers.slurm.common import (
    JOB_ID,
    REASON_STATE,
    SIGNALS,
    base_job_id,
    elapsed_seconds,
    hostlist_count,
    single_host,
)

from toranalyze.parser_api import NAIVE_US, contains_any, ts_iso, ts_month_name

# Reasons Slurm itself gives a node it takes out of service (sinfo -R, scontrol show node).
NODE_REASONS = ["Not responding", "Kill task failed", "Prolog error", "Epilog error", "batch job complete failure",
                "Node unexpectedly rebooted", "Low RealMemory", "Low socket*core*thread count", "health check failed"]
_NODE_REASON = "|".join(r.replace("*", r"\*") for r in NODE_REASONS)

# sinfo's short state names; a trailing '*' marks a node that is not responding.
_SINFO_STATES = ("alloc", "boot", "comp", "down", "drain", "drng", "fail", "failg", "idle", "maint", "mix", "plnd",
                 "resv", "unk")

# Cheap first cut: only lines holding one of these reach the rules.
KEYWORDS = [
    "***", "srun:", "salloc:", "sbatch:", "Submitted batch job", "slurm", "oom-kill", "oom_kill",
    "OOM", "memory limit", "JobId=", "job_id ", "StepId=", "Nodes ", "Node ", "node ", "PULSE:",
    "ALERT:", "is scheduled to start", "is running for", "waiting to be scheduled", "preempted ", "job is preempted",
    "Main process received SIGTERM", "ime limit", *NODE_REASONS, "Reason=", "State=", "launch failed requeued held",
    "ResumeTimeout", "power_save", "PBS: job killed", *[f"{st}* " for st in _SINFO_STATES], "ReqNodeNotAvail",
    "Nodes required for job are DOWN",
]

# A daemon line behind a syslog prefix ('Mar  1 12:00:00 host slurmctld[12]: '). A journald
# short-iso stamp is peeled by toranalyze.ingest.lines already, leaving 'host slurmctld[12]: '.
_SYSLOG = (
    r"^(?P<mon>[A-Z][a-z]{2})\s+(?P<day>[0-9]{1,2}) (?P<hms>[0-9][0-9]:[0-9][0-9]:[0-9][0-9](?:\.[0-9]+)?) \S+ "
    r"(?:slurm\w*|srun)(?:\[[0-9]+\])?: "
)
# Dropped from messages: the syslog stamp, host and daemon tag say nothing about the event.
_DAEMON_PREFIX = (
    r"^(?:[A-Z][a-z]{2}\s+[0-9]{1,2} [0-9][0-9]:[0-9][0-9]:[0-9][0-9](?:\.[0-9]+)? )?(?:\S+ )?"
    r"(?:slurmctld|slurmd|slurmdbd)(?:\[[0-9]+\])?: "
)
# slurmd tags records of a step with '[123.batch] '.
_STEP_TAG = rf"^(?:\S+ )*?\[(?P<tag>{JOB_ID})(?:\.\w+)?\] "


def _jid(name: str = "job") -> str:
    return rf"(?P<{name}>{JOB_ID})"


def _ctld_job(name: str = "job") -> str:
    """How slurmctld names a job: 'JobId=123_4(130)', 'job_id 123', 'StepId=123.0'."""
    return rf"(?:JobId=|job_id |job |StepId=){_jid(name)}(?:\.\w+)?(?:\([0-9]+\))?"


_ID = _jid()
_CTLD_JOB = _ctld_job()


def _g(name: str) -> pl.Expr:
    return pl.col("_g").struct.field(name)


def _with_line_clock(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Add _lts/_loff/_lyk (the line's own daemon clock, else the peeled prefix) and _tag (slurmd step tag)."""
    sys = pl.col("text").str.extract_groups(_SYSLOG)
    sys_ts = ts_month_name(sys.struct.field("mon"), sys.struct.field("day"), sys.struct.field("hms"))
    return lines.with_columns(
        pl.coalesce(sys_ts, pl.col("p_ts")).alias("_lts"),
        pl.when(sys_ts.is_not_null()).then(pl.lit(None, pl.Int32)).otherwise(pl.col("p_off")).alias("_loff"),
        sys_ts.is_null().alias("_lyk"),
        pl.col("text").str.extract(_STEP_TAG, 1).alias("_tag"),
    )


@dataclass(frozen=True)
class _Base:
    """The keyword-filtered lines, with their text joined by newlines: a rule whose literal is
    absent then costs one substring search of a Python string, not a polars query (about 0.25 ms
    each, 60 rules per block: most of the Slurm parser's cost on a small file). No literal holds
    a newline, so the joined text holds it exactly when some line does."""

    frame: pl.DataFrame
    text: str

    @classmethod
    def of(cls, frame: pl.DataFrame) -> _Base:
        return cls(frame, frame.select(pl.col("text").str.join("\n")).item() or "")


def _rule(
    base: _Base,
    literal: str,
    regex: str,
    kind: str | pl.Expr,
    severity: str | pl.Expr,
    **cols: pl.Expr,
) -> pl.DataFrame | None:
    """Rows of lines containing ``literal`` and matching ``regex``; ``_g`` holds the named groups.

    Runs eagerly on the (small) keyword-filtered frame: a rule whose literal is absent costs
    one substring search and compiles no regex.
    """
    if literal not in base.text:
        return None
    hits = base.frame.filter(pl.col("text").str.contains(literal, literal=True))
    hits = hits.filter(pl.col("text").str.contains(regex))
    if hits.is_empty():
        return None
    hits = hits.with_columns(pl.col("text").str.extract_groups(regex).alias("_g"))
    exprs: dict[str, pl.Expr] = {
        "kind": pl.lit(kind) if isinstance(kind, str) else kind,
        "severity": pl.lit(severity) if isinstance(severity, str) else severity,
        "message": pl.col("text").str.replace(_DAEMON_PREFIX, "").str.strip_chars(),
        **cols,
    }
    if "job_id" in exprs:
        exprs["job_id"] = pl.coalesce(exprs["job_id"], base_job_id(pl.col("_tag")))
    return hits.select("line", "_lts", "_loff", "_lyk", *[e.alias(k) for k, e in exprs.items()])


def _banners(base: _Base) -> list[pl.DataFrame | None]:
    """slurmstepd / srun '*** JOB|STEP N [ON NODE] CANCELLED AT T [DUE TO R] ***' in all its shapes."""
    regex = (
        r"\*\*\* (?P<what>JOB|STEP) (?P<id>[\w.+\[\]%\-]+)(?: ON (?P<on>[^\s*]+))? "
        r"(?:CANCELLED AT (?P<at>\S+)|(?P<failed>FAILED)|(?P<ume>UNCORRECTABLE MEMORY ERROR) AT (?P<uat>\S+)"
        r"|(?P<stepd>STEPD TERMINATED) ON (?P<son>\S+) AT (?P<sat>\S+))"
        r"(?P<rest>[^*]*)\*\*\*(?:\s+on (?P<after>\S+))?"
    )
    rest = _g("rest")
    reason = rest.str.extract(r"DUE TO ([A-Z][A-Z ]*[A-Z])", 1)
    reason = pl.when(_g("ume").is_not_null()).then(pl.lit("UNCORRECTABLE MEMORY ERROR")).otherwise(reason)
    state = (
        pl.when(_g("failed").is_not_null())
        .then(pl.lit("FAILED"))
        .when(reason.is_not_null())
        .then(reason.replace_strict(REASON_STATE, default="CANCELLED", return_dtype=pl.String))
        .otherwise(pl.lit("CANCELLED"))
    )
    severity = (
        pl.when(reason == "UNCORRECTABLE MEMORY ERROR")
        .then(pl.lit("critical"))
        .when(state.is_in(["NODE_FAIL", "FAILED"]) | _g("stepd").is_not_null())
        .then(pl.lit("error"))
        .otherwise(pl.lit("warning"))
    )
    at = pl.coalesce(_g("at"), _g("uat"), _g("sat"))
    node = pl.coalesce(_g("on"), _g("son"), rest.str.extract(r" on (\S+)", 1), _g("after"))
    frame = _rule(
        base, "***", regex,
        kind=pl.when(_g("stepd").is_not_null()).then(pl.lit("error")).otherwise(pl.lit("job_end")),
        severity=severity,
        job_id=base_job_id(_g("id")),
        node=node,
        state=pl.when(_g("stepd").is_not_null()).then(pl.lit(None, pl.String)).otherwise(state),
        ts=ts_iso(at),
    )
    reason_line = _rule(base, "*** REASON:", r"\*\*\* REASON: (?P<why>.*?) \*\*\*", "info", "info")
    return [frame, reason_line]


def _oom(base: _Base) -> list[pl.DataFrame | None]:
    """cgroup OOM notices (three wordings) and the older jobacct memory-limit kills."""
    detected = (
        rf"Detected (?P<n>[0-9]+) oom[-_]kill events?(?:\(s\))?(?: in (?:step |StepId=)?{_ID}(?:\.(?P<step>\w+))?)?"
    )
    limit = (
        rf"(?:(?:Job|Step) {_ID}(?:\.(?P<step>\w+))? exceeded memory limit|Exceeded (?:job|step) memory limit)"
        r"(?P<rest>.*)"
    )
    # 'Exceeded step memory limit at some point.' is printed even when nothing was killed: a warning
    # of no end state (the step went on; the class comes from a kill, when there is one).
    notice = _g("rest").str.contains("at some point")
    level = pl.when(notice).then(pl.lit("warning")).otherwise(pl.lit("error"))
    oom_end = pl.when(~notice).then(pl.lit("OUT_OF_MEMORY"))
    # Pasted as one line, the notice is followed by srun's task line, which names the node.
    srun_node = pl.col("text").str.extract(r"srun: error: ([^\s:`'\"]+): tasks? [0-9,\-\[\]]+: ", 1)
    return [
        _rule(base, "Detected", detected, "error", "error", job_id=_g("job"), state=pl.lit("OUT_OF_MEMORY"),
              node=srun_node),
        _rule(base, "emory limit", limit, level, level, job_id=_g("job"), state=oom_end),
    ]


def _pbs(base: _Base) -> list[pl.DataFrame | None]:
    """PBS/Torque's note in the job's output when it kills a job over a limit: the same end as
    Slurm's (``=>> PBS: job killed: walltime 86415 exceeded limit 86400`` is a TIMEOUT)."""
    killed = r"PBS: job killed: (?P<what>walltime|mem|vmem|pmem) \S+ exceeded limit \S+"
    state = _g("what").replace_strict({"walltime": "TIMEOUT"}, default="OUT_OF_MEMORY", return_dtype=pl.String)
    return [_rule(base, "PBS: job killed", killed, "job_end", "error", state=state)]


def _srun(base: _Base) -> list[pl.DataFrame | None]:
    tasks = r"srun: error: (?P<node>[^\s:]+): tasks? (?P<tasks>[0-9,\-\[\]]+): (?P<what>.+?)\s*$"
    what = _g("what")
    signame = what.str.replace(r"\s*\(core dumped\)$", "")
    code = pl.coalesce(
        what.str.extract(r"Exited with exit code (-?[0-9]+)", 1),
        signame.replace_strict(SIGNALS, default=None, return_dtype=pl.Int32).cast(pl.String),
    )
    step_ref = rf"(?:job step |StepId=|job ){_ID}(?:\.(?P<step>\w+))?"
    return [
        _rule(
            base, "srun: error:", tasks, "error", "error",
            node=_g("node"),
            rank=_g("tasks").str.extract(r"([0-9]+)", 1).cast(pl.Int32, strict=False),
            code=code,
            state=pl.when(what.str.contains("(?i)out of memory")).then(pl.lit("OUT_OF_MEMORY")),
        ),
        _rule(base, "Node failure on", r"Node failure on (?P<node>[^\s,`'\"]+)", "error", "error",
              node=_g("node"), state=pl.lit("NODE_FAIL")),
        _rule(base, "srun: Job step aborted", r"srun: Job step aborted", "warning", "warning"),
        _rule(base, "srun: Job step ", r"srun: Job step (?P<job>[0-9]+)\.\w+ aborted before step completely launched",
              "warning", "warning", job_id=_g("job")),
        _rule(base, "srun: forcing job termination", r"srun: forcing job termination", "warning", "warning"),
        _rule(base, "Timed out waiting for job step", r"srun: error: Timed out waiting for job step",
              "warning", "warning"),
        _rule(base, "srun: ", rf"srun: (?:Force Terminated|Terminating|sending Ctrl-C to) {step_ref}",
              "warning", "warning", job_id=_g("job")),
        _rule(base, "Unable to allocate resources", r"(?:srun|salloc|sbatch): error: Unable to allocate resources",
              "error", "error"),
        _rule(base, "Unable to create step", rf"srun: error: Unable to create step for job {_ID}", "error", "error",
              job_id=_g("job")),
        # Allocation life cycle as the client tools print it.
        _rule(base, "queued and waiting for resources", rf"(?:srun|salloc): job {_ID} queued and waiting",
              "job_submit", "info", job_id=_g("job"), state=pl.lit("PENDING")),
        _rule(base, "Pending job allocation", rf"salloc: Pending job allocation {_ID}", "job_submit", "info",
              job_id=_g("job"), state=pl.lit("PENDING")),
        _rule(base, "Submitted batch job", rf"^Submitted batch job {_ID}", "job_submit", "info",
              job_id=_g("job"), state=pl.lit("PENDING")),
        _rule(base, "allocat",
              rf"(?:srun|salloc): job {_ID} has been allocated resources|salloc: Granted job allocation {_jid('job2')}",
              "job_start", "info", job_id=pl.coalesce(_g("job"), _g("job2")), state=pl.lit("RUNNING")),
        _rule(base, "has been revoked", rf"salloc: Job allocation {_ID} has been revoked", "job_end", "warning",
              job_id=_g("job"), state=pl.lit("REVOKED")),
    ]


def _ctld(base: _Base) -> list[pl.DataFrame | None]:
    """slurmctld / slurmd records: job life cycle, node failures and node states."""
    complete = rf"_job_complete: {_CTLD_JOB} (?P<how>WEXITSTATUS|WTERMSIG) (?P<code>-?[0-9]+)"
    how_state = (
        pl.when(_g("how") == "WTERMSIG")
        .then(pl.lit(None, pl.String))  # a signal may be a scancel or a crash: the state is not on the line
        .when(_g("code") == "0")
        .then(pl.lit("COMPLETED"))
        .otherwise(pl.lit("FAILED"))
    )
    verdict = (
        rf"_job_complete: (?:requeue )?{_CTLD_JOB} "
        r"(?P<what>OOM failure|cancelled by node failure|cancelled by interactive user|per user/system request)"
    )
    verdict_state = _g("what").replace_strict(
        {"OOM failure": "OUT_OF_MEMORY", "cancelled by node failure": "NODE_FAIL",
         "cancelled by interactive user": "CANCELLED", "per user/system request": "REQUEUED"},
        default=None, return_dtype=pl.String,
    )
    failed_node = rf"Killing {_CTLD_JOB} (?:on|due to) failed node (?P<node>[^\s,]+)"
    requeue = rf"requeue (?:job )?{_CTLD_JOB}.*? due to failure of node (?P<node>[^\s,]+)"
    removing = rf"Removing failed node (?P<node>[^\s,]+) from {_CTLD_JOB}"
    not_resp = r"Nodes? (?P<nodes>\S+?),? not responding(?P<down>, setting DOWN)?"
    set_state = r"(?:\w+: )?node (?P<node>\S+) state set to (?P<st>[A-Z_]+)"
    reason = r"(?:\w+: )?node (?P<node>\S+) reason set to: (?P<why>.*)$"
    allocate = rf"sched: Allocate {_CTLD_JOB} NodeList=(?P<nodes>\S+)"
    started = rf"(?:sched/backfill: _start_job: |backfill: )Started {_CTLD_JOB} in (?P<part>\S+) on (?P<nodes>\S+)"
    alloc_rpc = rf"_slurm_rpc_allocate_resources: {_CTLD_JOB} NodeList=(?P<nodes>\S+)"
    submit = rf"_slurm_rpc_submit_batch_job:? {_CTLD_JOB}"
    # 'Time limit exhausted for JobId=N' and the job named first ('job_time_limit: ... JobId=N ... exhausted').
    exhausted = r"(?i:time limit (?:exhausted|reached))"
    timelimit = rf"{exhausted}.*?{_CTLD_JOB}|{_ctld_job('job2')}.*?{exhausted}"
    preempt = rf"preempted {_CTLD_JOB} (?:has been |suspended )(?P<how>requeued|killed|by gang)"
    kill_rpc = rf"REQUEST_KILL_JOB {_CTLD_JOB} uid (?P<uid>[0-9]+)"
    run_err = rf"slurmd error running {_CTLD_JOB} on node\(s\)=(?P<node>[^\s:]+): (?P<why>.*)$"
    nodes = _g("nodes").str.strip_chars_end(",")
    st = _g("st").replace({"DRAINED": "DRAIN", "DRAINING": "DRAIN"})
    out_of_service = _g("why").str.contains(rf"(?i){_NODE_REASON}").fill_null(False)
    return [
        _rule(base, "_job_complete", complete, "job_end",
              pl.when(how_state == "COMPLETED").then(pl.lit("info")).otherwise(pl.lit("error")),
              job_id=_g("job"), code=_g("code"), state=how_state),
        _rule(base, "_job_complete", verdict, "job_end",
              pl.when(verdict_state == "CANCELLED").then(pl.lit("warning")).otherwise(pl.lit("error")),
              job_id=_g("job"), state=verdict_state),
        _rule(base, "failed node", failed_node, "job_end", "error",
              job_id=_g("job"), node=_g("node"), state=pl.lit("NODE_FAIL")),
        _rule(base, "due to failure of node", requeue, "job_end", "error",
              job_id=_g("job"), node=_g("node"), state=pl.lit("NODE_FAIL")),
        _rule(base, "Removing failed node", removing, "error", "error", job_id=_g("job"), node=_g("node")),
        _rule(base, "not responding", not_resp,
              pl.when(_g("down").is_not_null()).then(pl.lit("node_state")).otherwise(pl.lit("error")), "error",
              node=single_host(nodes), n_nodes=hostlist_count(nodes),
              state=pl.when(_g("down").is_not_null()).then(pl.lit("DOWN"))),
        _rule(base, "now responding", r"Node (?P<node>\S+) now responding", "node_state", "info",
              node=_g("node"), state=pl.lit("RESPONDING")),
        _rule(base, "state set to", set_state, "node_state",
              pl.when(st.is_in(["DOWN", "FAIL", "FAILING"])).then(pl.lit("error"))
              .when(st == "DRAIN").then(pl.lit("warning")).otherwise(pl.lit("info")),
              node=_g("node"), state=st),
        # A reason Slurm (or its health check) gives a node it takes out of service is an error;
        # an administrator's free-text reason (a drain for maintenance, an Xid noted) stays information.
        _rule(base, "reason set to", reason,
              pl.when(out_of_service).then(pl.lit("error")).otherwise(pl.lit("info")),
              pl.when(out_of_service).then(pl.lit("error")).otherwise(pl.lit("info")), node=_g("node")),
        _rule(base, "returned to service", r"node (?P<node>\S+) returned to service", "node_state", "info",
              node=_g("node"), state=pl.lit("RESUME")),
        _rule(base, "unexpectedly rebooted", r"Node (?P<node>\S+) unexpectedly rebooted", "node_state", "warning",
              node=_g("node"), state=pl.lit("REBOOTED")),
        _rule(base, "sched: Allocate", allocate, "job_start", "info",
              job_id=_g("job"), node=single_host(_g("nodes")), n_nodes=hostlist_count(_g("nodes")),
              state=pl.lit("RUNNING")),
        _rule(base, "Started ", started, "job_start", "info",
              job_id=_g("job"), node=single_host(_g("nodes")), n_nodes=hostlist_count(_g("nodes")),
              state=pl.lit("RUNNING")),
        _rule(base, "_slurm_rpc_allocate_resources", alloc_rpc,
              pl.when(_g("nodes") == "(null)").then(pl.lit("job_submit")).otherwise(pl.lit("job_start")), "info",
              job_id=_g("job"), node=single_host(_g("nodes")), n_nodes=hostlist_count(_g("nodes")),
              state=pl.when(_g("nodes") == "(null)").then(pl.lit("PENDING")).otherwise(pl.lit("RUNNING"))),
        _rule(base, "_slurm_rpc_submit_batch_job", submit, "job_submit", "info",
              job_id=_g("job"), state=pl.lit("PENDING")),
        _rule(base, "ime limit", timelimit, "job_end", "warning",
              job_id=pl.coalesce(_g("job"), _g("job2")), state=pl.lit("TIMEOUT")),
        _rule(base, "preempted ", preempt,
              pl.when(_g("how") == "by gang").then(pl.lit("warning")).otherwise(pl.lit("job_end")), "warning",
              job_id=_g("job"),
              state=pl.when(_g("how") == "by gang").then(pl.lit("SUSPENDED")).otherwise(pl.lit("PREEMPTED"))),
        _rule(base, "REQUEST_KILL_JOB", kill_rpc, "job_end", "warning",
              job_id=_g("job"), state=pl.lit("CANCELLED")),
        _rule(base, "slurmd error running", run_err, "error", "error", job_id=_g("job"), node=_g("node")),
    ]


def _watchdog(base: _Base) -> list[pl.DataFrame | None]:
    """squeue-polling watchdogs that report the job's state into the run log."""
    running = (
        rf"is running for (?P<el>\S+) since (?P<since>\S+) \({_ID} on '[^']*' partition"
        r"(?: \((?P<nodes>[^()\s]+)\)?)?"
    )
    waiting = rf"is waiting to be scheduled \({_ID}"
    scheduled = rf"is scheduled to start in (?P<in>.*?) \(at (?P<at>\S+)\) \({_ID}"
    alert = r"ALERT: (?P<name>\S+) is not RUNNING or SCHEDULED"
    # submitit's handler of Slurm's preemption signal: 'submitit WARNING (2022-07-12 04:18:45,881) -
    # Caught signal SIGHUP on learnfair0293: this job is preempted.' (it then requeues the job).
    submitit = (
        r"^submitit \w+ \((?P<at>[0-9]{4}-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9](?:[.,][0-9]+)?)\) - "
        r"Caught signal (?P<sig>\w+) on (?P<node>[\w.\-]+): this job is preempted"
    )
    return [
        _rule(base, "is running for", running, "heartbeat", "info",
              job_id=base_job_id(_g("job")), duration_s=elapsed_seconds(_g("el")),
              node=single_host(_g("nodes")), n_nodes=hostlist_count(_g("nodes")), state=pl.lit("RUNNING")),
        _rule(base, "waiting to be scheduled", waiting, "info", "info",
              job_id=base_job_id(_g("job")), state=pl.lit("PENDING")),
        _rule(base, "is scheduled to start", scheduled, "info", "info",
              job_id=base_job_id(_g("job")), state=pl.lit("PENDING")),
        _rule(base, "ALERT:", alert, "warning", "warning"),
        _rule(base, "job is preempted", submitit, "job_end", "warning",
              node=_g("node"), state=pl.lit("PREEMPTED"), ts=ts_iso(_g("at"))),
    ]


def _sigterm_bursts(base: _Base) -> list[pl.DataFrame | None]:
    """One warning per burst of launcher 'Main process received SIGTERM' lines (the rest is noise)."""
    hits = base.frame.filter(pl.col("text").str.starts_with("Main process received SIGTERM"))
    first = hits.filter(pl.col("line").diff().fill_null(10**9) > _BURST_GAP)
    return [
        first.select(
            "line", "_lts", "_loff", "_lyk",
            pl.lit("warning").alias("kind"), pl.lit("warning").alias("severity"),
            pl.col("text").str.strip_chars().alias("message"), pl.lit("15").alias("code"),
        )
    ]


_BURST_GAP = 200  # lines; a later SIGTERM wave is a new burst

def _node_reports(base: _Base) -> list[pl.DataFrame | None]:
    """Node and job status as admins paste it: sinfo -R / -lNe rows, scontrol show node|job fields,
    squeue reasons, power-save resume failures and the controller being unreachable."""
    sinfo_r = (
        rf"^\s*(?P<why>(?:{_NODE_REASON})\b.*?)\s+(?P<user>\S+)\s+"
        r"(?P<at>[0-9]{4}-[0-9][0-9]-[0-9][0-9]T[0-9:]+)\s+(?P<nodes>\S+)\s*$"
    )
    sinfo_l = (
        r"^(?P<nodes>[\w.\-\[\],]+)\s+[0-9]+\s+\S+\s+(?P<st>(?:down|drain\w*|fail\w*)[*~#!%$@^-]?)\s+.*?\s"
        rf"(?P<why>(?:{_NODE_REASON})\b.*?)\s*$"
    )
    shown = r"\bState=(?P<st>\S*(?:DOWN|DRAIN|FAIL|NOT_RESPONDING)\S*)"
    reason = rf"\bReason=(?P<why>(?:{_NODE_REASON})[^\[]*?)\s*(?:\[(?P<who>[^@\]]+)@(?P<at>[^\]]+)\])?\s*$"
    held = r"Reason=launch_failed_requeued_held|\(launch failed requeued held\)"
    resume = r"node (?P<node>\S+) not resumed by ResumeTimeout"
    resume_fail = r"power_save: handle failed nodes (?P<nodes>\S+)"
    ctld = (
        r"(?P<who>srun|salloc|sbatch|squeue|sinfo|scontrol|slurm_load_\w+)\S*:? (?:error: )?"
        r".*Unable to contact slurm controller"
    )
    # sinfo's partition summary (PARTITION AVAIL TIMELIMIT NODES STATE NODELIST): a state with the '*'
    # suffix is one the controller cannot reach ('The node is presently not responding', sinfo(1)), whatever
    # the state before it; a state without it says nothing of a failure (an admin's drain, a reservation).
    summary = (
        r"^\s*(?P<part>[\w.\-]+\*?)\s+(?:up|down|drain|inact)\s+\S+\s+(?P<n>[0-9]+)\s+"
        rf"(?P<st>{'|'.join(_SINFO_STATES)})\*\s+(?P<nodes>\S+)\s*$"
    )
    # squeue's reason for a pending job whose nodes are out of service: 'ReqNodeNotAvail, UnavailableNodes:<list>'
    # (listed only when they are DOWN, DRAINED or not responding; an empty list is a job merely waiting) and
    # 'Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions'.
    pending = (
        r"(?P<why>ReqNodeNotAvail, UnavailableNodes:[\w\[]\S*?|"
        r"Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions)[)`.]*\s*$"
    )
    state = _g("st").str.extract(r"(DOWN|DRAIN|FAIL)", 1)
    return [
        # both reasons hold 'Nodes' ('UnavailableNodes:', 'Nodes required'): one rule reads them
        _rule(base, "Nodes", pending, "warning", "warning", message=pl.format("job pending: {}", _g("why"))),
        _rule(base, "* ", summary, "node_state", "error", node=single_host(_g("nodes")),
              state=_g("st").str.to_uppercase(),
              message=pl.format("sinfo: {} node(s) {} in partition {} {}* (NOT_RESPONDING)", _g("n"), _g("nodes"),
                                _g("part"), _g("st"))),
        _rule(base, "T", sinfo_r, "node_state", "error", node=single_host(_g("nodes")), state=pl.lit("DOWN"),
              ts=ts_iso(_g("at"))),
        _rule(base, " ", sinfo_l, "node_state", "error", node=single_host(_g("nodes")),
              state=_g("st").str.extract(r"^(down|drain|fail)", 1).str.to_uppercase()),
        _rule(base, "State=", shown, "node_state", "error", state=state),
        _rule(base, "Reason=", reason, "error", "error", ts=ts_iso(_g("at"))),
        _rule(base, "launch", held, "error", "error", state=pl.lit("LAUNCH_FAILED")),
        _rule(base, "ResumeTimeout", resume, "node_state", "error", node=_g("node"), state=pl.lit("DOWN")),
        _rule(base, "power_save", resume_fail, "node_state", "error", node=single_host(_g("nodes")),
              state=pl.lit("POWER_UP_FAILED")),
        _rule(base, "Unable to contact slurm controller", ctld, "error", "error"),
    ]


_GENERIC = r"^(?:\S+ )*?(?:srun|salloc|sbatch|slurmstepd|slurmd|slurmctld)(?:\[[0-9]+\])?: error: "

_FAMILIES: tuple[Callable[[_Base], list[pl.DataFrame | None]], ...] = (
    _banners, _oom, _pbs, _srun, _ctld, _watchdog, _sigterm_bursts, _node_reports,
)

_OUT_SCHEMA = {"line": pl.Int64, "kind": pl.String, "severity": pl.String, "message": pl.String}


def extract_slurm_lines(lines: pl.LazyFrame) -> pl.LazyFrame:
    """All Slurm line records of a prepared-lines frame (columns as in RAW_SCHEMA, not yet conformed).

    The keyword filter and the line clock run over the whole column; the rules then run eagerly
    on the few lines left (most rules find their literal absent and cost nothing more).
    """
    base = _with_line_clock(lines.filter(contains_any(pl.col("text"), KEYWORDS))).collect()
    joined = _Base.of(base)
    frames = [f for family in _FAMILIES for f in family(joined) if f is not None and f.height]
    specific = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame(schema=_OUT_SCHEMA)
    # Any other 'srun: error:' / 'slurmstepd: error:' line is kept as a warning: it is Slurm's, but no rule knows it.
    generic = (
        base.filter(pl.col("text").str.contains(_GENERIC))
        .join(specific.select("line").unique(), on="line", how="anti")
        .select("line", "_lts", "_loff", "_lyk", pl.lit("warning").alias("kind"), pl.lit("warning").alias("severity"),
                pl.col("text").str.strip_chars().alias("message"))
    )
    out = pl.concat([specific, generic], how="diagonal_relaxed")
    for name, dtype in (("ts", NAIVE_US), ("_lts", NAIVE_US), ("_loff", pl.Int32), ("_lyk", pl.Boolean)):
        if name not in out.columns:
            out = out.with_columns(pl.lit(None, dtype).alias(name))
    own = pl.col("ts").is_not_null()
    return (
        out.lazy()
        .with_columns(
            pl.when(own).then(pl.lit(None, pl.Int32)).otherwise(pl.col("_loff")).alias("ts_offset_s"),
            pl.when(own).then(pl.lit(True)).otherwise(pl.col("_lyk")).alias("ts_year_known"),
            pl.coalesce("ts", "_lts").alias("ts"),
        )
        .drop("_lts", "_loff", "_lyk")
        .sort("line", maintain_order=True)
    )


NOISE: tuple[str, ...] = (
    # torch.distributed.launch shutting down after slurmstepd's SIGTERM: one warning per burst is kept.
    r"^Killing subprocess [0-9]+\s*$",
    r"^Main process received SIGTERM, exiting\s*$",
    # slurmctld / slurmd bookkeeping around a job's life cycle.
    r"_job_complete: (?:JobId=|job_id )\S+ done",
    r"_slurm_rpc_(?:complete_batch_script|complete_job_allocation|step_complete|job_step_create)",
    r"Resending TERMINATE_JOB request",
    r"_sync_nodes_to_comp_job|cleanup_completing|job_step_signal|_job_signal",
    r"launch task StepId=|Launching batch job [0-9]+ for UID|_run_prolog: |task/affinity: |done with job\s*$",
    # srun chatter that carries no state change.
    r"srun: (?:got SIGCONT|interrupt \(one more within 1 sec to abort\)|Job [0-9]+ step creation temporarily disabled"
    r"|Step created for|job [0-9]+ step creation still disabled|Warning: can't honor)",
    r"salloc: (?:Waiting for resource configuration|Nodes \S+ are ready for job|Relinquishing job allocation)",
)
