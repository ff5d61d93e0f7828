"""Line rules for Kubernetes component logs and training-operator logs.

klog (kube-scheduler, kube-controller-manager, kubelet)::

    I0815 09:55:48.613828    1 schedule_one.go:826] "Unable to schedule pod; no fit; waiting" pod="ns/p" err="0/12 ..."
    I0217 14:41:37.439852    1 event.go:281] Event(v1.ObjectReference{Kind:"Node", ..., Name:"n1", ...}):
        type: 'Normal' reason: 'NodeNotReady' ...   (one line in the log)
    I0901 00:25:09.311469    1 event.go:291] "Event occurred" object="ns/p" kind="Pod" apiVersion="v1"
        type="Warning" reason="NodeNotReady" message="..."   (one line in the log)

The klog stamp has no year (``ts_year_known=False``); when a collector prefix
with a zone precedes it (CRI ``2023-08-15T17:55:26.28+08:00 stderr F``, docker
json-file ``{"log": ..., "time": ...}``) that stamp wins. A syslog prefix
(``May 28 16:05:50 host kubelet[123]:``) names the node a kubelet runs on.

Operators log through logrus text (``time="..." level=info msg="..." job=ns/name``),
logrus JSON or zap JSON (``{"level":"info","ts":...,"msg":"..."}``); the job
lifecycle sentences they print are the same as their Event messages.
"""

from __future__ import annotations

from typing import NamedTuple

import polars as pl
from toranalyze_parsers.kubernetes.common import conform_ev

from toranalyze.parser_api import contains_any, offset_iso, ts_epoch_ms, ts_glog, ts_iso

_KLOG = (
    r"(?:^|[\s\":])(?P<sev>[IWEF])(?P<mmdd>[0-9]{4}) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6})\s+[0-9]+ "
    r"(?P<file>[\w.-]+\.go):[0-9]+\] (?P<msg>.*)$"
)
_SYSLOG = r"^[A-Z][a-z]{2} +[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2} (?P<host>[\w.-]+) (?P<comp>[\w.-]+)\[[0-9]+\]: "
_DOCKER = r'^\{"log":"(?P<log>.*?)(?:\\n)?","stream":"\w+","time":"(?P<time>[^"]+)"\}\s*$'
_Q = r'"((?:[^"\\]|\\.)*)"'  # a klog/logrus quoted value


def _kv(msg: pl.Expr, key: str) -> pl.Expr:
    """A structured klog/logrus value: key="..." (unescaped) or key=bare."""
    quoted = msg.str.extract(rf"(?:^|\s){key}={_Q}", 1).str.replace_all(r'\"', '"', literal=True)
    bare = msg.str.extract(rf"(?:^|\s){key}=([^\s\"]\S*)", 1)
    return pl.coalesce(quoted, bare)


def _tail(ref: pl.Expr) -> pl.Expr:
    """'ns/name' -> 'name'."""
    return ref.str.extract(r"([^/]+)$", 1)


class _Rule(NamedTuple):
    """One klog message shape -> an Event-like row."""

    when: pl.Expr  # the message matches
    reason: str | None  # None: the reason is named in the message ('Recording <Reason> event')
    etype: str
    obj_kind: str | None
    obj_name: pl.Expr
    note: pl.Expr
    node: pl.Expr | None = None


def _klog_rules(msg: pl.Expr) -> list[_Rule]:
    """Structured (klog.InfoS) messages and the printf-style ones that preceded them."""
    no_name = pl.lit(None, pl.String)
    old_unsched = msg.str.extract_groups(r"^Unable to schedule (\S+?)[/ ](\S+?): (.*?); waiting$")
    old_bound = msg.str.extract_groups(r'^pod (\S+) is bound successfully on node "?([^",\s]+)"?')
    old_notready = msg.str.extract(r"^Node (\S+) is (?:NotReady|unresponsive) as of ", 1)
    old_record = msg.str.extract(r"^Recording \w+ event message for node (\S+)", 1)
    old_evicted = msg.str.extract(r"^pod (\S+) is evicted successfully", 1)
    taint_pod = pl.coalesce(_kv(msg, "pod"), msg.str.extract(r"deleting [Pp]od:? (\S+)", 1))
    taint = msg.str.contains(r'^"?NoExecuteTaintManager is deleting [Pp]od') | (
        msg.str.starts_with('"Deleting pod"') & msg.str.contains("taint-eviction-controller", literal=True)
    )
    return [
        # kube-scheduler
        _Rule(msg.str.starts_with('"Unable to schedule pod; no fit; waiting"'), "FailedScheduling", "Warning", "Pod",
              _tail(_kv(msg, "pod")), _kv(msg, "err")),
        _Rule(old_unsched.struct.field("1").is_not_null(), "FailedScheduling", "Warning", "Pod",
              old_unsched.struct.field("2"), old_unsched.struct.field("3")),
        _Rule(msg.str.starts_with('"Successfully bound pod to node"'), "Scheduled", "Normal", "Pod",
              _tail(_kv(msg, "pod")), msg, _kv(msg, "node")),
        _Rule(old_bound.struct.field("1").is_not_null(), "Scheduled", "Normal", "Pod",
              _tail(old_bound.struct.field("1")), msg, old_bound.struct.field("2")),
        # kubelet eviction manager
        _Rule(msg.str.starts_with('"Eviction manager: pod is evicted successfully"'), "Evicted", "Warning", "Pod",
              _tail(_kv(msg, "pod")), msg),
        _Rule(old_evicted.is_not_null(), "Evicted", "Warning", "Pod", _tail(old_evicted), msg),
        _Rule(msg.str.contains(r'^"?[Ee]viction manager: (?:attempting to reclaim|must evict pod)'),
              "EvictionThresholdMet", "Warning", None, no_name, msg),
        _Rule(msg.str.contains(r'^"?(?:System OOM encountered|Got sys oom event)'), "SystemOOM", "Warning", None,
              no_name, msg),
        # node readiness: kubelet's own view, then the node-lifecycle controller's
        _Rule(msg.str.starts_with('"Node became not ready"'), "NodeNotReady", "Normal", "Node",
              _kv(msg, "node"), msg, _kv(msg, "node")),
        _Rule(msg.str.starts_with("Node became not ready: "), "NodeNotReady", "Normal", None, no_name, msg),
        _Rule(msg.str.starts_with('"Node is NotReady. Adding it to the Taint queue"'), "NodeNotReady", "Normal",
              "Node", _kv(msg, "node"), msg, _kv(msg, "node")),
        _Rule(old_notready.is_not_null(), "NodeNotReady", "Normal", "Node", old_notready, msg, old_notready),
        _Rule(msg.str.starts_with('"Recording event message for node"'), None, "Normal", "Node",
              _kv(msg, "node"), msg, _kv(msg, "node")),
        _Rule(old_record.is_not_null(), None, "Normal", "Node", old_record, msg, old_record),
        # taint-based eviction (controller-manager)
        _Rule(taint, "TaintManagerEviction", "Normal", "Pod", _tail(taint_pod), msg),
    ]


def _prepare(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Unwrap docker json-file lines and note syslog hosts; keep lines that may be klog."""
    text = pl.col("text")
    docker = text.str.extract_groups(_DOCKER)
    log = (
        docker.struct.field("log")
        .str.replace_all(r'\"', '"', literal=True)
        .str.replace_all("\\\\", "\\", literal=True)
    )
    dtime = docker.struct.field("time")
    syslog = text.str.extract_groups(_SYSLOG)
    return lines.filter(text.str.contains(".go:", literal=True)).with_columns(
        pl.coalesce(log, text).alias("_t"),
        pl.coalesce(ts_iso(dtime), pl.when(pl.col("p_off").is_not_null()).then(pl.col("p_ts"))).alias("_pts"),
        pl.coalesce(offset_iso(dtime), pl.col("p_off")).alias("_poff"),
        syslog.struct.field("host").alias("_host"),
    )


def extract_klog(lines: pl.LazyFrame) -> pl.LazyFrame:
    """EV_SCHEMA rows for the klog records above."""
    lf = _prepare(lines)
    k = pl.col("_t").str.extract_groups(_KLOG)
    lf = lf.with_columns(k.alias("_k")).filter(pl.col("_k").struct.field("msg").is_not_null())
    msg = pl.col("_k").struct.field("msg")
    klog_ts = ts_glog(pl.col("_k").struct.field("mmdd"), pl.col("_k").struct.field("hms"))
    stated = pl.col("_pts").is_not_null()
    time_cols = [
        pl.when(stated).then(pl.col("_pts")).otherwise(klog_ts).alias("ts"),
        pl.when(stated).then(pl.col("_poff")).alias("ts_offset_s"),
        stated.alias("ts_year_known"),
    ]
    # Events the component logged while recording them (both klog generations).
    occurred = lf.filter(msg.str.starts_with('"Event occurred"')).select(
        pl.col("line"),
        *time_cols,
        _kv(msg, "type").alias("ev_type"),
        _kv(msg, "reason").alias("reason"),
        _kv(msg, "kind").alias("obj_kind"),
        _tail(_kv(msg, "object")).alias("obj_name"),
        _kv(msg, "message").alias("note"),
        pl.col("_host").alias("node_hint"),
    )
    legacy = msg.str.extract_groups(
        r"^Event\(\w+\.ObjectReference\{Kind:\"(\w*)\", Namespace:\"([^\"]*)\", Name:\"([^\"]*)\".*?\}\): "
        r"type: '(\w+)' reason: '(\w+)' ?(.*)$"
    )
    old_event = lf.with_columns(legacy.alias("_e")).filter(pl.col("_e").struct.field("5").is_not_null()).select(
        pl.col("line"),
        *time_cols,
        pl.col("_e").struct.field("4").alias("ev_type"),
        pl.col("_e").struct.field("5").alias("reason"),
        pl.col("_e").struct.field("1").alias("obj_kind"),
        pl.col("_e").struct.field("3").alias("obj_name"),
        pl.col("_e").struct.field("6").alias("note"),
        pl.col("_host").alias("node_hint"),
    )
    frames = [conform_ev(occurred), conform_ev(old_event)]
    named_reason = pl.coalesce(_kv(msg, "event"), msg.str.extract(r"^Recording (\w+) event", 1))
    for rule in _klog_rules(msg):
        node = pl.col("_host") if rule.node is None else pl.coalesce(rule.node, pl.col("_host"))
        frames.append(
            conform_ev(
                lf.filter(rule.when).select(
                    pl.col("line"),
                    *time_cols,
                    pl.lit(rule.etype).alias("ev_type"),
                    (named_reason if rule.reason is None else pl.lit(rule.reason)).alias("reason"),
                    pl.lit(rule.obj_kind, pl.String).alias("obj_kind"),
                    rule.obj_name.alias("obj_name"),
                    rule.note.alias("note"),
                    node.alias("node_hint"),
                )
            )
        )
    return pl.concat(frames, how="vertical").unique("line", keep="first", maintain_order=True)


# Operator log sentences -> event reason phase (the operator records the same text as an Event).
_JOB_SENTENCE = (
    r"^(?P<kind>[A-Z]\w*Job) (?P<ref>\S+?) (?:is |has )?"
    r"(?P<what>restarting because|failed because|is failed because|successfully completed|running|created)"
)
_PHASE = {
    "restarting because": "Restarting",
    "failed because": "Failed",
    "is failed because": "Failed",
    "successfully completed": "Succeeded",
    "running": "Running",
    "created": "Created",
}


def extract_operator(lines: pl.LazyFrame) -> pl.LazyFrame:
    """EV_SCHEMA rows for training-operator lifecycle lines (logrus text/JSON, zap JSON)."""
    text = pl.col("text")
    cand = lines.filter(contains_any(text, ["msg=", '"msg":', "INFO[", "WARN[", "ERRO[", '"reason": "']))
    logrus_msg = text.str.extract(rf"(?:^|\s)msg={_Q}", 1).str.replace_all(r'\"', '"', literal=True)
    json_msg = text.str.extract(rf'"msg":\s*{_Q}', 1).str.replace_all(r'\"', '"', literal=True)
    # logrus on a terminal: 'INFO[0289] <msg>  key=value ...'; zap console (controller-runtime
    # events): '<time>\tDEBUG\tevents\t<msg>\t{json}' (the reader peels the time).
    tty_msg = text.str.extract(r"^(?:INFO|WARN|ERRO|DEBU)\[[0-9]+\]\s+(.+?)(?:\s{2,}\w[\w.-]*=.*)?$", 1)
    zap_msg = text.str.extract(r"^(?:\S+\t)?(?:DEBUG|INFO|WARN|ERROR)\t[\w.-]+\t([^\t]+)", 1)
    iso_time = pl.coalesce(
        text.str.extract(r'(?:^|\s)time="([^"]+)"', 1),
        text.str.extract(r'"(?:time|ts)":\s*"([^"]+)"', 1),
    )
    epoch = text.str.extract(r'"ts":\s*([0-9]{9,}(?:\.[0-9]+)?)', 1)
    lf = cand.with_columns(
        pl.coalesce(logrus_msg, json_msg, tty_msg, zap_msg).alias("_m"),
        pl.coalesce(ts_iso(iso_time), ts_epoch_ms(epoch.cast(pl.Float64, strict=False) * 1000)).alias("_ts"),
        pl.when(epoch.is_not_null()).then(pl.lit(0, pl.Int32)).otherwise(offset_iso(iso_time)).alias("_off"),
        pl.coalesce(
            text.str.extract(r'(?:^|\s)(?:job|pytorchjob|tfjob|mpijob)="?([^"\s]+)', 1),
            text.str.extract(r'"(?:job|pytorchjob|tfjob|mpijob)":\s*"([^"]+)"', 1),
            text.str.extract(r'"object":\s*\{[^}]*"name":\s*"([^"]+)"', 1),
        )
        .str.extract(r"([^/.]+)$", 1)
        .alias("_job"),
        text.str.extract(r'"reason":\s*"(\w+)"', 1).alias("_reason"),
        text.str.extract(r'"type":\s*"(Normal|Warning)"', 1).alias("_type"),
        text.str.extract(r'"kind":\s*"(\w+)"', 1).alias("_okind"),
    ).filter(pl.col("_m").is_not_null())
    m = pl.col("_m")
    sentence = m.str.extract_groups(_JOB_SENTENCE)
    exited = m.str.extract_groups(r"^Pod: ([^.\s]+)\.(\S+) exited with code (-?[0-9]+)")
    phase = sentence.struct.field("what").replace_strict(_PHASE, default=None, return_dtype=pl.String)
    reason = pl.coalesce(
        pl.col("_reason"),
        pl.when(phase.is_not_null()).then(pl.concat_str([sentence.struct.field("kind"), phase])),
        pl.when(exited.struct.field("3").is_not_null()).then(pl.lit("ExitedWithCode")),
    )
    job = pl.coalesce(_tail(sentence.struct.field("ref")), pl.col("_job"))
    return conform_ev(
        lf.with_columns(reason.alias("_r"), job.alias("_j"), sentence.struct.field("kind").alias("_sk"))
        .filter(pl.col("_r").is_not_null())
        .select(
            pl.col("line"),
            pl.coalesce(pl.col("_ts"), pl.col("p_ts")).alias("ts"),
            pl.when(pl.col("_ts").is_not_null()).then(pl.col("_off")).otherwise(pl.col("p_off")).alias("ts_offset_s"),
            pl.coalesce(pl.col("_type"), pl.when(phase == "Restarting").then(pl.lit("Warning")), pl.lit("Normal"))
            .alias("ev_type"),
            pl.col("_r").alias("reason"),
            pl.coalesce(pl.col("_okind"), pl.col("_sk")).alias("obj_kind"),
            pl.col("_j").alias("obj_name"),
            pl.col("_j").alias("job_hint"),
            m.alias("note"),
        )
    )
