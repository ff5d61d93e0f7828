"""Processes and the kernel itself: the OOM killer, hung tasks, lockups, panics and oopses.

These are multi-line reports; each becomes one event spanning its lines:

* the OOM report runs from ``X invoked oom-killer:`` to its ``Killed process N (X)`` line and
  its message joins those two with the ``oom-kill:constraint=…`` line; the Slurm job id is read
  from the cgroup path (``/slurm/uid_1000/job_123/…``, ``…/slurmstepd.scope/job_123/…``);
* a hung task, lockup, panic or oops runs from its headline over the stack-dump lines after
  it; the message adds the kernel modules seen in the stack (``[modules: nfs, sunrpc]``) so a
  rule can tell a task stuck in NFS from one stuck in the GPU driver.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.kernel.common import event, has, runs

_HUNG = r"^INFO: task .+:[0-9]+ blocked for more than [0-9]+ seconds"
_SOFT = r"^(?:watchdog|NMI watchdog): (?:BUG: soft lockup|Watchdog detected hard LOCKUP)"
_STALL = r"^(?:rcu: )?INFO: rcu_\w+ (?:detected stalls|self-detected stall)"
_PANIC = r"^Kernel panic - not syncing: "
_OOPS = r"^(?:BUG: unable to handle|general protection fault|Oops: |kernel BUG at )"
_WARN = r"^WARNING: CPU: [0-9]+ PID: [0-9]+ at "

# Lines of a stack dump / task report that follow a headline.
_TRACE = (
    r"^\s*(?:"
    r"(?:CPU: [0-9]+ (?:UID: [0-9]+ )?PID: [0-9]+ Comm: |Hardware name: |Workqueue: |Modules linked in: "
    r"|Call Trace:|Showing stack)"
    r"|(?:\S.* )?(?:Not tainted|Tainted: )"
    r"|\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message"
    r"|task:\S+\s+state:\w"
    r"|\S+\s+[DRS]\s+(?:[0-9a-f]{16}\s+)?[0-9]+\s+[0-9]+\s+[0-9]+\s+0x[0-9a-f]+"
    r"|</?(?:TASK|IRQ|NMI)>"
    r"|(?:\? )?[\w.$]+\+0x[0-9a-f]+/0x[0-9a-f]+(?: \[[\w]+\])?\s*$"
    r"|\[<[0-9a-f]+>\]"
    r"|(?:RIP|RSP|RAX|RDX|RBP|R08|R10|R13|Code|FS|CS|CR2|DR0|DR3|DR6|PKRU|PGD|PUD|PMD|PTE|PF): "
    r"|(?:[0-9a-f]{16}\s*)+$"
    r"|(?:\.\.\. )?(?:CPU#?[0-9]+|rcu: |\(detected by|\s*[0-9]+-\.\.\.)"
    r"|Kernel Offset: |---\[ end (?:Kernel panic|trace)"
    r")"
)
_MODULE = r"\[(\w+)\]\s*$"


def trace_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    body = pl.col("body")
    start = pl.any_horizontal(body.str.contains(p) for p in (_HUNG, _SOFT, _STALL, _PANIC, _OOPS, _WARN))
    cand = lf.with_columns(runs(start, body.str.contains(_TRACE)).alias("_rec"))
    recs = (
        cand.filter(pl.col("_rec").is_not_null())
        .group_by("_rec")
        .agg(
            pl.col("line").min(),
            pl.col("line").max().alias("_last"),
            pl.col("msg").first(),
            pl.col("body").first().alias("_head"),
            pl.col("body")
            .str.extract(_MODULE, 1)
            .drop_nulls()
            .unique(maintain_order=True)
            .str.join(", ")
            .alias("_mods"),
        )
    )
    head = pl.col("_head")
    hung = head.str.contains(_HUNG)
    severe = head.str.contains(_PANIC) | head.str.contains(_OOPS) | head.str.contains("hard LOCKUP")
    warn = head.str.contains(_WARN) | head.str.contains(_STALL)
    return recs.select(
        event(
            pl.when(warn).then(pl.lit("warning")).otherwise(pl.lit("error")),
            pl.when(severe).then(pl.lit("critical")).when(warn).then(pl.lit("warning")).otherwise(pl.lit("error")),
            message=pl.when((pl.col("_mods") != "") & (hung | ~warn))
            .then(pl.format("{} [modules: {}]", pl.col("msg"), pl.col("_mods")))
            .otherwise(pl.col("msg")),
            line_end=pl.when(pl.col("_last") > pl.col("line")).then(pl.col("_last")),
        )
    )


_KILLED = r"\bKilled process [0-9]+ \("
_CONSTRAINT = r"oom-kill:constraint="
_MEMCG_JOB = r"(?:oom_memcg|task_memcg)=[^,]*/job_([0-9]+)(?:/|,|$)"
_OOM_SPAN = 5000  # lines an OOM report may take (task tables on big hosts are long)


def _oom_lines(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The lines an OOM kill may show on, marked (_start, _kill, _bare) and each with the lines of
    the next kill and next report start, the last constraint line (_cline, _ctext) and the previous kill."""
    body = pl.col("body")
    constraint = body.str.contains(_CONSTRAINT, literal=True)
    o = lf.filter(has("oom-kill", "Killed process", "invoked oom-killer", "Out of memory")).select(
        "line",
        "msg",
        "body",
        body.str.contains(" invoked oom-killer: ", literal=True).alias("_start"),
        body.str.contains(_KILLED).alias("_kill"),
        pl.when(constraint).then(pl.col("line")).alias("_cline"),
        pl.when(constraint).then(body.str.strip_chars()).alias("_ctext"),
        body.str.contains(r"^Out of memory(?: and no killable processes|: Kill process)").alias("_bare"),
    )
    return o.with_columns(
        pl.when("_kill").then(pl.col("line")).backward_fill().alias("_next_kill"),
        pl.when("_start").then(pl.col("line")).shift(-1).backward_fill().alias("_next_start"),
        pl.col("_cline").forward_fill(),
        pl.col("_ctext").forward_fill(),
        pl.when("_kill").then(pl.col("line")).shift(1).forward_fill().alias("_prev_kill"),
    )


def _report_starts(o: pl.LazyFrame) -> pl.LazyFrame:
    """(line, _head, _end) per report start: _end the line of its kill when that comes before the
    next report and within ``_OOM_SPAN`` lines, else null."""
    return o.filter("_start").select(
        pl.col("line"),
        pl.col("msg").alias("_head"),
        pl.when(
            (pl.col("_next_kill") < pl.col("_next_start").fill_null(pl.col("_next_kill") + 1))
            & (pl.col("_next_kill") - pl.col("line") <= _OOM_SPAN)
        )
        .then(pl.col("_next_kill"))
        .alias("_end"),
    )


def _reports(o: pl.LazyFrame, starts: pl.LazyFrame) -> pl.LazyFrame:
    """A report's start with its kill line (_killmsg) and the constraint line within it (_ctext)."""
    kills = o.filter("_kill").select(
        pl.col("line").alias("_end"), pl.col("msg").alias("_killmsg"), "_cline", "_ctext"
    )
    return starts.join(kills, on="_end", how="left").with_columns(
        pl.when(pl.col("_cline") > pl.col("line")).then(pl.col("_ctext")).alias("_ctext")
    )


def _lone_kills(o: pl.LazyFrame, starts: pl.LazyFrame) -> pl.LazyFrame:
    """The kill and bare out-of-memory lines no report ends with."""
    in_record = starts.filter(pl.col("_end").is_not_null()).select(pl.col("_end").alias("line"))
    lone = o.filter(pl.col("_kill") | pl.col("_bare")).join(in_record, on="line", how="anti")
    # An old kernel prints 'Out of memory: Kill process N … or sacrifice child' right before its
    # 'Killed process N' line: that pair is one kill.
    return lone.filter(~(pl.col("_bare") & pl.col("body").str.contains("or sacrifice child", literal=True)))


def oom_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """One event per OOM kill; a ``Killed process`` line outside a report stands alone."""
    o = _oom_lines(lf)
    starts = _report_starts(o)
    parts = pl.concat_str([pl.col("_head"), pl.col("_ctext"), pl.col("_killmsg")], separator=" | ", ignore_nulls=True)
    # The constraint line just before a lone kill, not one an earlier kill consumed.
    lone_job = pl.when(
        (pl.col("line") - pl.col("_cline") <= 5) & (pl.col("_cline") > pl.col("_prev_kill").fill_null(0))
    ).then(pl.col("_ctext").str.extract(_MEMCG_JOB, 1))
    return pl.concat(
        [
            _reports(o, starts).select(
                event(
                    "error",
                    "error",
                    message=parts,
                    line_end=pl.col("_end"),
                    job_id=pl.col("_ctext").str.extract(_MEMCG_JOB, 1),
                )
            ),
            _lone_kills(o, starts).select(event("error", "error", job_id=lone_job)),
        ],
        how="diagonal_relaxed",
    )


# A container runtime's own record of an OOM kill in a container's cgroup, where the kernel's report is not
# pasted: containerd's CRI plugin ('msg="TaskOOM event container_id:\"4bcb…\""'), its event bus
# ('msg="event published" ns=moby topic=/tasks/oom type=containerd.events.TaskOOM') and dockerd's event
# stream, as text ('container oom 29d72966e0be… (image=…)') or as the API's JSON ('{"status":"oom","id":…}').
RUNTIME_OOM_FRAGMENTS = ("TaskOOM event", "topic=/tasks/oom", "container oom ", '"status":"oom"', '"Action":"oom"')
_RUNTIME_OOM = (
    r"\bTaskOOM event\b|\btopic=/tasks/oom\b|\bcontainer oom [0-9a-f]{12}"
    r'|"(?:status|Action)"\s*:\s*"oom"'
)


def runtime_oom_events(lf: pl.LazyFrame) -> pl.LazyFrame:
    """One error per OOM event a container runtime (containerd, dockerd) reports."""
    return lf.filter(has(*RUNTIME_OOM_FRAGMENTS) & pl.col("body").str.contains(_RUNTIME_OOM)).select(
        event("error", "error")
    )


NOISE = (
    r"oom_reaper: reaped process [0-9]+",
    r"\bMemory cgroup stats for /",
    r"\[\s*pid\s*\]\s+uid\s+tgid\s+total_vm\s+rss",
    r"\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message",
)
