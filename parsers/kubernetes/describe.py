"""``kubectl describe pod|node|pytorchjob`` output, as line rules over blocks.

A describe document is a run of ``Key:  value`` lines whose indentation nests
them (container -> ``Last State:`` -> ``Reason:``). Each ``Name:`` line at column
0 opens a block (``describe pods`` prints many); window expressions carry the
block's object (pod, node, or the ``Kind:`` a custom resource states), node and
job to every line, and a state block
(``State:`` / ``Last State:`` with its deeper-indented fields) is grouped into one
record whose ``line`` is the header and ``line_end`` the last field.

Records: container terminations (``job_end`` with reason/exit code/Finished and a
``job_start`` at Started), running containers, waiting reasons (CrashLoopBackOff),
a pod's own ``Reason:`` (Evicted, ...), node conditions with their
LastTransitionTime, ``Unschedulable: true``, a job's Status.Conditions (True
ones) and Start Time, and the ``Events:`` table rows (ages are relative: ts null
unless an anchor is given).
"""

from __future__ import annotations

from datetime import datetime

import polars as pl
from toranalyze_parsers.kubernetes.common import (
    BAD_WAIT,
    INTERVAL,
    JOB_CONDITIONS,
    QUIET_WAIT,
    RFC1123,
    conform_ev,
    events_to_raw,
    job_from_pod,
    rfc1123_parts,
)

from toranalyze.parser_api import conform_raw, file_key, file_starts, offset_iso, ts_iso

_KV = r"^(?P<ind>\s*)(?P<key>[A-Z][\w -]*?):(?:\s+(?P<val>.*?))?\s*$"
_EVENT_ROW = (
    r"^`?\s*(?P<type>Normal|Warning)\s+(?P<reason>[A-Za-z][\w.-]*)\s+"
    rf"(?P<age>{INTERVAL})\s+(?P<src>[\w.-]+(?:, [\w.-]+)?)\s+(?P<msg>.*?)`?\s*$"
)
# kubectl <= 1.9: FirstSeen LastSeen Count From SubObjectPath Type Reason Message.
_OLD_EVENT_ROW = (
    r"^\s+(?P<first>(?:[0-9]+[ydhms])+)\s+(?P<age>(?:[0-9]+[ydhms])+)\s+(?P<count>[0-9]+)\s+"
    r"(?P<src>\{[^}]*\}|[\w.-]+(?:, [\w.-]+)?)\s+"
    r"(?:(?P<sub>[\w.]*\{[^}]*\})\s+)?(?P<type>Normal|Warning)\s+(?P<reason>[A-Za-z][\w.-]*)\s+(?P<msg>.*?)\s*$"
)
_CONDITION_ROW = (
    rf"^\s+(?P<type>[A-Z]\w*)\s+(?P<status>True|False|Unknown)\s+(?P<hb>{RFC1123})\s+(?P<tt>{RFC1123})\s+"
    r"(?P<reason>\w+)(?:\s+(?P<msg>.*?))?\s*$"
)
# A condition row with a heartbeat and a transition time: of all describe outputs only a node's
# conditions print both, so the row names a node's fragment even pasted alone.
_NODE_CONDITION = rf"^\s+[A-Z]\w*\s+(?:True|False|Unknown)\s+{RFC1123}\s+{RFC1123}\s"
# Lines that only a describe output prints: a fragment pasted without its 'Name:' header. An
# Events row (type, reason, age, source) is one too, with or without its table around it, quoted
# as inline code in a post (a backtick before its indent), and pasted alone without its indent.
_FRAGMENT = (
    rf"^(?:Events|Conditions|Containers):\s*$|^\s*(?:Last )?State:\s+(?:Terminated|Waiting)\s*$|{_NODE_CONDITION}"
    r"|^Reason:\s+[A-Z]\w+\s*$|^\s+[0-9]+[ydhms]\s+[0-9]+[ydhms]\s+[0-9]+\s+\S.*\s(?:Normal|Warning)\s"
    rf"|^`?\s*(?:Normal|Warning)\s+[A-Z][\w.-]*\s+{INTERVAL}\s+[\w.-]+(?:, [\w.-]+)?\s+\S"
)
_FIELDS = ("Reason", "Message", "Exit Code", "Signal", "Started", "Finished")
_SECTIONS = ["Name", "Conditions", "Volumes", "QoS Class", "Node-Selectors", "Tolerations", "Events",
             "Containers", "Init Containers", "Ephemeral Containers", "Readiness Gates"]
_CONDITION_KEYS = ["Last Transition Time", "Last Update Time", "Message", "Reason", "Status", "Type"]
_JOB_LABEL = (
    r"(?:training\.kubeflow\.org/job-name|pytorch-job-name|batch\.kubernetes\.io/job-name|"
    r"jobset\.sigs\.k8s\.io/jobset-name|volcano\.sh/job-name|(?:^|\s)job-name)=([\w.-]+)"
)


def _blocks(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Add block context (_blk, _obj_kind, _obj_name, _node, _job) and parsed key/values."""
    text = pl.col("text")
    kv = text.str.extract_groups(_KV)
    named = text.str.contains(r"^Name:\s+\S")
    # A block opens at each 'Name:' line and at each file's first line (the files of a batch):
    # a file's lines before its first 'Name:' are a block of their own, a pasted fragment or none.
    lf = lines.with_columns(
        (named | file_starts()).cum_sum().alias("_blk"),
        named.alias("_named"),
        kv.struct.field("ind").str.len_chars().alias("_ind"),
        kv.struct.field("key").alias("_key"),
        kv.struct.field("val").alias("_val"),
    )
    first = lambda e: e.drop_nulls().first().over("_blk")  # noqa: E731 - a tiny window helper
    # Only a node's conditions table has a heartbeat column (and its rows a heartbeat time): it
    # names a node's fragment too.
    is_node = text.str.contains(
        rf"^(?:(?:Roles|Taints|Unschedulable|CreationTimestamp):|\s+Type\s+Status\s+LastHeartbeatTime\s)|{_NODE_CONDITION}"
    ).any().over("_blk")
    name = first(text.str.extract(r"^Name:\s+(\S+)", 1))
    pod_node = first(text.str.extract(r"^Node:\s+([^/\s<]+)", 1))
    owner = first(text.str.extract(r"^Controlled By:\s+\w*Job/(\S+)", 1))
    label = first(text.str.extract(_JOB_LABEL, 1))
    # Custom resources (describe pytorchjob) state their kind; pods and nodes do not.
    kind = first(text.str.extract(r"^Kind:\s+(\w+)", 1)).str.to_lowercase()
    obj_kind = pl.when(is_node).then(pl.lit("node")).otherwise(pl.coalesce(kind, pl.lit("pod")))
    job = (
        pl.when(is_node)
        .then(None)
        .when(kind.str.ends_with("job"))
        .then(name)
        .otherwise(pl.coalesce(label, owner, job_from_pod(name)))
    )
    # Kept: blocks opened by 'Name:', and a block before it holding a describe-only line.
    keep = (pl.col("_named").first() | text.str.contains(_FRAGMENT).any()).over("_blk")
    return (
        lf.with_columns(
            obj_kind.alias("_obj_kind"),
            name.alias("_obj_name"),
            pl.when(is_node).then(name).otherwise(pod_node).alias("_node"),
            job.alias("_job"),
            keep.alias("_keep"),
        )
        .filter(pl.col("_keep"))
        .drop("_keep", "_named")
    )


def _state_records(lf: pl.LazyFrame) -> pl.LazyFrame:
    """One row per State/Last State block with its fields and the container's restart count."""
    ind, key = pl.col("_ind"), pl.col("_key")
    is_hdr = key.is_in(["State", "Last State"]).fill_null(False)
    # Container headers: '  pytorch:' directly under Containers:/Init Containers:.
    container = pl.col("text").str.extract(r"^  ([\w.-]+):$", 1)
    hdr_ind = pl.when(is_hdr).then(ind).otherwise(None).forward_fill().over(file_key())
    # A block ends at the next key of its container (or a container / section header). A
    # termination message can carry the program's last lines ('RuntimeError: ...' at column 0):
    # those continue the block.
    nested = key.is_not_null() & (ind >= 2) & (ind <= hdr_ind)
    section = (ind == 0) & key.is_in(_SECTIONS)
    brk = (~is_hdr & (nested | container.is_not_null() | section)).fill_null(False)
    lf = lf.with_columns(
        container.forward_fill().over("_blk").alias("_ctr"),
        # A file's end ends its last block too (a batch's next file starts a segment).
        (is_hdr | brk | file_starts()).cum_sum().alias("_seg"),
    )
    lf = lf.with_columns(
        pl.col("_val").filter(key == "Restart Count").first().over("_blk", "_ctr").alias("_restarts"),
    ).filter(is_hdr.any().over("_seg"))
    field = lambda k: pl.col("_val").filter(key == k).first().alias(k)  # noqa: E731
    extra = ~is_hdr & ~key.is_in(_FIELDS).fill_null(False)
    return (
        lf.group_by("_seg", maintain_order=True)
        .agg(
            pl.col("line").first().alias("line"),
            pl.col("line").last().alias("line_end"),
            pl.col("_key").first().alias("which"),
            pl.col("_val").first().alias("phase"),
            pl.col("line").filter(key == "Started").first().alias("started_line"),
            *[field(k) for k in _FIELDS],
            pl.col("text").filter(extra).str.strip_chars().str.join(" | ").alias("_more"),
            *[pl.col(c).first() for c in ("_ctr", "_restarts", "_obj_name", "_node", "_job")],
        )
    )


def _ts(stamp: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    ts, off = rfc1123_parts(stamp)
    # '0001-01-01' is how describe prints a zero time (status unknown).
    valid = ts.dt.year() > 1970
    return pl.when(valid).then(ts), pl.when(valid).then(off)


def _state_detail() -> pl.Expr:
    """What a state block adds after its reason: exit code, signal, message and any other lines."""
    code = pl.col("Exit Code")
    return pl.concat_str(
        [
            pl.when(code.is_not_null()).then(pl.format(" (exit code {})", code)),
            pl.when(pl.col("Signal").is_not_null()).then(pl.format(" (signal {})", pl.col("Signal"))),
            pl.when(pl.col("Message").is_not_null()).then(pl.format(": {}", pl.col("Message"))),
            pl.when(pl.col("_more").str.len_chars() > 0).then(pl.format(" | {}", pl.col("_more"))),
        ],
        ignore_nulls=True,
    )


def _state_common() -> list[pl.Expr]:
    """The job, node and attempt of a state block's rows."""
    restarts = pl.col("_restarts").cast(pl.Int32, strict=False)
    # The previous run of a container that has restarted N times was attempt N-1.
    previous = pl.when(restarts > 0).then(restarts - 1)
    attempt = pl.when(pl.col("which") == "Last State").then(previous).otherwise(restarts)
    return [
        pl.col("_job").alias("job_id"),
        pl.col("_node").alias("node"),
        attempt.cast(pl.Int32, strict=False).alias("attempt"),
    ]


def _terminated_rows(states: pl.LazyFrame, who: pl.Expr, detail: pl.Expr) -> pl.LazyFrame:
    """A job_end per Terminated block: info when it completed with exit code 0, else an error. A
    generic 'Error' beside exit code 0 is a runtime's slip (the pod Succeeded): Completed; a named
    reason (OOMKilled with 0, as some kernels report it) is kept."""
    code = pl.col("Exit Code")
    generic = pl.col("Reason").is_null() | (pl.col("Reason") == "Error")
    reason = pl.when((code == "0") & generic).then(pl.lit("Completed")).otherwise(pl.col("Reason"))
    ok = (reason == "Completed") & (code == "0")
    finished_ts, finished_off = _ts(pl.col("Finished"))
    return states.filter(pl.col("phase") == "Terminated").select(
        finished_ts.alias("ts"),
        finished_off.alias("ts_offset_s"),
        pl.lit("job_end").alias("kind"),
        pl.when(ok).then(pl.lit("info")).otherwise(pl.lit("error")).alias("severity"),
        code.alias("code"),
        reason.fill_null("Terminated").alias("state"),
        pl.concat_str([who, pl.lit(" terminated: "), reason.fill_null("Terminated"), detail]).alias("message"),
        pl.col("line"),
        pl.col("line_end"),
        *_state_common(),
    )


def _started_rows(states: pl.LazyFrame, who: pl.Expr) -> pl.LazyFrame:
    """A job_start per Terminated or Running block that states when it started."""
    started_ts, started_off = _ts(pl.col("Started"))
    return states.filter(pl.col("phase").is_in(["Terminated", "Running"]) & started_ts.is_not_null()).select(
        started_ts.alias("ts"),
        started_off.alias("ts_offset_s"),
        pl.lit("job_start").alias("kind"),
        pl.lit("info").alias("severity"),
        pl.lit("Running").alias("state"),
        pl.concat_str([who, pl.lit(" started")]).alias("message"),
        # A terminated block keeps its header for the job_end row; the start points at Started:.
        pl.when(pl.col("phase") == "Running").then(pl.col("line")).otherwise(pl.col("started_line")).alias("line"),
        *_state_common(),
    )


def _waiting_rows(states: pl.LazyFrame, who: pl.Expr, detail: pl.Expr) -> pl.LazyFrame:
    """A row per Waiting block with a reason: info for a quiet wait, an error for a bad one, else a warning."""
    reason = pl.col("Reason")
    quiet, bad = list(QUIET_WAIT), list(BAD_WAIT)
    return states.filter((pl.col("phase") == "Waiting") & reason.is_not_null()).select(
        pl.when(reason.is_in(quiet)).then(pl.lit("info")).otherwise(pl.lit("warning")).alias("kind"),
        pl.when(reason.is_in(quiet))
        .then(pl.lit("info"))
        .when(reason.is_in(bad))
        .then(pl.lit("error"))
        .otherwise(pl.lit("warning"))
        .alias("severity"),
        reason.alias("state"),
        pl.concat_str([who, pl.lit(" waiting: "), reason, detail]).alias("message"),
        pl.col("line"),
        pl.col("line_end"),
        *_state_common(),
    )


def _state_rows(states: pl.LazyFrame) -> pl.LazyFrame:
    """The rows of the State/Last State blocks: ends, then starts, then waits."""
    who = pl.format("container {} of pod/{}", pl.col("_ctr").fill_null("?"), pl.col("_obj_name").fill_null("?"))
    detail = _state_detail()
    ends = _terminated_rows(states, who, detail)
    starts = _started_rows(states, who)
    waiting = _waiting_rows(states, who, detail)
    return pl.concat([conform_raw(f) for f in (ends, starts, waiting)], how="vertical")


def _pod_reason_rows(lf: pl.LazyFrame) -> pl.LazyFrame:
    """A pod's own 'Reason:' at column 0 (Evicted, NodeLost, Preempting, UnexpectedAdmissionError ...)."""
    top = pl.col("_ind") == 0
    message = pl.col("_val").filter(top & (pl.col("_key") == "Message")).first().over("_blk")
    return conform_raw(
        lf.with_columns(message.alias("_msg"))
        .filter(top & (pl.col("_key") == "Reason") & (pl.col("_obj_kind") == "pod"))
        .select(
            pl.lit("error").alias("kind"),
            pl.lit("error").alias("severity"),
            pl.col("_val").alias("state"),
            pl.concat_str(
                [
                    pl.col("_val"),
                    pl.lit(": "),
                    pl.col("_msg").fill_null(""),
                    pl.lit(" [pod/") + pl.col("_obj_name") + "]",
                ],
                ignore_nulls=True,
            ).alias("message"),
            pl.col("line"),
            pl.col("_job").alias("job_id"),
            pl.col("_node").alias("node"),
        )
    )


def _condition_parts(c: pl.Expr) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """(state, severity, message) of a condition row: Ready/NotReady or the condition's type; a
    node not ready or without network is an error, another condition a warning."""
    ctype, status = c.struct.field("type"), c.struct.field("status")
    ready = ctype == "Ready"
    state = (
        pl.when(ready & (status == "True")).then(pl.lit("Ready")).when(ready).then(pl.lit("NotReady")).otherwise(ctype)
    )
    severity = (
        pl.when(ready & (status == "True"))
        .then(pl.lit("info"))
        .when(ready | ctype.is_in(["NetworkUnavailable"]))
        .then(pl.lit("error"))
        .otherwise(pl.lit("warning"))
    )
    message = pl.format(
        "{}={} {}: {}", ctype, status, c.struct.field("reason"), c.struct.field("msg").fill_null("")
    ).alias("message")
    return state, severity, message


def _condition_rows(lf: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(the Ready and abnormal conditions, a node lost) of the node blocks."""
    c = pl.col("text").str.extract_groups(_CONDITION_ROW)
    ctype, status = c.struct.field("type"), c.struct.field("status")
    ts, off = rfc1123_parts(c.struct.field("tt"))
    ready = ctype == "Ready"
    state, severity, message = _condition_parts(c)
    nodes = lf.filter(pl.col("_obj_kind") == "node").with_columns(c.alias("_c"))
    conditions = nodes.filter(ctype.is_not_null() & (ready | (status == "True"))).select(
        ts.alias("ts"),
        off.alias("ts_offset_s"),
        pl.lit("node_state").alias("kind"),
        severity.alias("severity"),
        state.alias("state"),
        message,
        pl.col("line"),
        pl.col("_node").alias("node"),
    )
    # Every condition turns Unknown when the kubelet stops posting status: the node is unreachable.
    # The Ready row says so already; a fragment pasted without it needs one of the others.
    no_ready = ~ready.fill_null(False).any().over("_blk")
    lost = nodes.filter((c.struct.field("reason") == "NodeStatusUnknown") & no_ready).select(
        ts.alias("ts"),
        off.alias("ts_offset_s"),
        pl.lit("node_state").alias("kind"),
        pl.lit("error").alias("severity"),
        pl.lit("NodeStatusUnknown").alias("state"),
        message,
        pl.col("line"),
        pl.col("_node").alias("node"),
    )
    return conditions, lost


def _cordon_rows(lf: pl.LazyFrame) -> pl.LazyFrame:
    """A warning per node marked ``Unschedulable: true``."""
    return lf.filter(
        (pl.col("_obj_kind") == "node") & (pl.col("_key") == "Unschedulable") & (pl.col("_val") == "true")
    ).select(
        pl.lit("node_state").alias("kind"),
        pl.lit("warning").alias("severity"),
        pl.lit("SchedulingDisabled").alias("state"),
        # (a fragment pasted without its 'Name:' line names no node)
        pl.format("Unschedulable: true (node {} cordoned)", pl.col("_node").fill_null("?")).alias("message"),
        pl.col("line"),
        pl.col("_node").alias("node"),
    )


def _node_rows(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Node conditions (Ready, and any abnormal one), a lost node and a cordon."""
    conditions, lost = _condition_rows(lf)
    return pl.concat([conform_raw(conditions), conform_raw(lost), conform_raw(_cordon_rows(lf))], how="vertical")


def _job_rows(lf: pl.LazyFrame) -> pl.LazyFrame:
    """describe of a training-operator / batch Job: Status.Conditions and Status.Start Time.

    The generic describer prints each condition's fields in alphabetical order, so
    every condition starts at its 'Last Transition Time'.
    """
    key = pl.col("_key")
    job = lf.filter(pl.col("_obj_kind").str.ends_with("job"))
    cond = job.filter((pl.col("_ind") >= 4) & key.is_in(_CONDITION_KEYS)).with_columns(
        (key == "Last Transition Time").cum_sum().over("_blk").alias("_c")
    )
    field = lambda k: pl.col("_val").filter(key == k).first().alias(k)  # noqa: E731
    groups = (
        cond.filter(pl.col("_c") > 0)
        .group_by("_blk", "_c", maintain_order=True)
        .agg(
            pl.col("line").first().alias("line"),
            pl.col("line").filter(key == "Type").first().alias("line_end"),
            *[field(k) for k in _CONDITION_KEYS],
            pl.col("_obj_kind").first(),
            pl.col("_obj_name").first(),
            pl.col("_job").first(),
        )
        .filter((pl.col("Status") == "True") & pl.col("Type").is_in(list(JOB_CONDITIONS)))
    )
    state = pl.coalesce(pl.col("Reason"), pl.col("Type"))
    stamp = pl.col("Last Transition Time")
    conditions = groups.select(
        ts_iso(stamp).alias("ts"),
        offset_iso(stamp).alias("ts_offset_s"),
        pl.col("Type").replace_strict({k: v[0] for k, v in JOB_CONDITIONS.items()}).alias("kind"),
        pl.col("Type").replace_strict({k: v[1] for k, v in JOB_CONDITIONS.items()}).alias("severity"),
        state.alias("state"),
        pl.format("{}: {} [{}/{}]", state, pl.col("Message").fill_null(""), pl.col("_obj_kind"),
                  pl.col("_obj_name").fill_null("?")).alias("message"),
        pl.col("line"),
        pl.col("line_end"),
        pl.col("_job").alias("job_id"),
    )
    start = pl.col("_val")
    started = job.filter((key == "Start Time") & (pl.col("_ind") == 2)).select(
        ts_iso(start).alias("ts"),
        offset_iso(start).alias("ts_offset_s"),
        pl.lit("job_start").alias("kind"),
        pl.lit("info").alias("severity"),
        pl.lit("Running").alias("state"),
        pl.format("{} {} started", pl.col("_obj_kind"), pl.col("_obj_name").fill_null("?")).alias("message"),
        pl.col("line"),
        pl.col("_job").alias("job_id"),
    )
    return pl.concat([conform_raw(conditions), conform_raw(started)], how="vertical")


def _event_rows(lf: pl.LazyFrame, anchor: datetime | None) -> pl.LazyFrame:
    cand = lf.filter(pl.col("text").str.contains(r"^`?(?:\s.*)?(?:Normal|Warning)"))
    new = cand.with_columns(pl.col("text").str.extract_groups(_EVENT_ROW).alias("_g"))
    old = cand.with_columns(pl.col("text").str.extract_groups(_OLD_EVENT_ROW).alias("_g"))
    g = pl.col("_g")
    src = g.struct.field("src")
    host = pl.coalesce(src.str.extract(r"^\{\S+ (\S+)\}$", 1), src.str.extract(r"^[\w.-]+, (\S+)$", 1))
    fields = [
        pl.col("line"),
        g.struct.field("type").alias("ev_type"),
        g.struct.field("reason").alias("reason"),
        g.struct.field("msg").alias("note"),
        g.struct.field("age").alias("age"),
        pl.col("_obj_kind").alias("obj_kind"),
        pl.col("_obj_name").alias("obj_name"),
        host.alias("src_host"),
        pl.col("_job").alias("job_hint"),
        pl.col("_node").alias("node_hint"),
    ]
    rows = pl.concat(
        [
            conform_ev(new.filter(g.struct.field("reason").is_not_null()).select(fields)),
            conform_ev(
                old.filter(g.struct.field("reason").is_not_null()).select(
                    *fields, g.struct.field("count").cast(pl.Int64, strict=False).alias("count")
                )
            ),
        ],
        how="vertical",
    )
    return events_to_raw(rows, anchor)


def extract_describe(lines: pl.LazyFrame, anchor: datetime | None = None) -> pl.LazyFrame:
    """RAW rows from describe pod/node output found in the lines."""
    # Cheap gate: nothing below runs on files that hold no describe block or pasted fragment of one.
    text = pl.col("text")
    fragment = (text.str.starts_with("Name:") | text.str.contains(_FRAGMENT)).any().over(file_key())
    gated = lines.filter(fragment)
    lf = _blocks(gated)
    return pl.concat(
        [
            _state_rows(_state_records(lf)),
            _pod_reason_rows(lf),
            _node_rows(lf),
            _job_rows(lf),
            _event_rows(lf, anchor),
        ],
        how="vertical",
    )
