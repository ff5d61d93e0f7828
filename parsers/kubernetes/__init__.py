"""Kubernetes parser: API documents, kubectl renderings, component and operator logs.

Documents (claimed by ``sniff``, read whole by ``parse``):

* JSON / YAML from the API or ``kubectl get -o json|yaml`` (single objects,
  ``List``/``EventList``/``PodList``, ``-w`` streams, watch envelopes): Events
  (core/v1 and events.k8s.io/v1), Pods, Nodes, PyTorchJob-like and batch Jobs;
* ``kubectl describe pod|node|pytorchjob`` output and ``kubectl get
  events|pods|nodes`` tables: parsed by the same line rules as when they are
  embedded in a text log, and claimed so that every line of the capture counts
  as understood.

Line rules (``extract``, run over every text log): events, pods and nodes
tables, describe blocks, klog lines of kube-scheduler / kube-controller-manager /
kubelet, training-operator lifecycle lines (logrus text/JSON, zap JSON), Kueue's preemption sentence
opening a line, and a cloud's record of a node's instance preempted (``compute.instances.preempted``, a spot
node reclaimed; AWS's spot interruption notice and Batch's ``Host EC2 ... terminated``).

Cross-row facts stay within one file (within one read block of 32 MiB of a long
one) or one document: a taint eviction is marked "(its node was NotReady)" when
the same capture shows that pod's NodeNotReady, events borrow job and node from
pods listed beside them, and a describe block or state record ends at its file's
end. The line rules may read several small files at once (``batched``): they keep
those facts apart with ``file_key`` / ``file_starts``.

Time: API objects carry RFC 3339 UTC times; klog has no year. kubectl tables
and describe's Events print ages relative to when kubectl ran, so their rows
have ts null (the age stays in the message) unless the parser is built with an
``anchor``: ``KubernetesParser(anchor=datetime(2024, 3, 14, 10, 30))`` (naive UTC
capture time) places them at anchor - age with ``ts_inferred`` set.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import polars as pl
from toranalyze_parsers.kubernetes.cloud import extract_cloud_preemptions
from toranalyze_parsers.kubernetes.common import EV_SCHEMA, events_to_raw
from toranalyze_parsers.kubernetes.describe import extract_describe
from toranalyze_parsers.kubernetes.docs import iter_objects, load_values, looks_json
from toranalyze_parsers.kubernetes.eviction import extract_evictions, extract_workload_preemptions
from toranalyze_parsers.kubernetes.klog import extract_klog, extract_operator
from toranalyze_parsers.kubernetes.node_status import extract_node_status
from toranalyze_parsers.kubernetes.objects import event_row, job_rows, node_rows, pod_index, pod_rows
from toranalyze_parsers.kubernetes.scheduler import extract_unschedulable
from toranalyze_parsers.kubernetes.status_tables import HEADERS, extract_status_tables
from toranalyze_parsers.kubernetes.tables import HEADER, extract_event_tables

from toranalyze.parser_api import RAW_SCHEMA, Parser, conform_raw, empty_raw, literal_gate, read_text, read_text_events

_API_KINDS = r"(?:Event|Pod|Node|Job|\w+Job|List|EventList|PodList|NodeList|\w+JobList)"
_JSON_HEAD = re.compile(
    rf'^\s*[\[{{]\s*(?:"apiVersion"\s*:\s*"[\w./-]+"\s*,\s*)?"(?:kind"\s*:\s*"{_API_KINDS}"|apiVersion"\s*:)'
    r'|^\s*\{\s*"type"\s*:\s*"(?:ADDED|MODIFIED|DELETED|BOOKMARK)"\s*,\s*"object"\s*:'
)
_JSON_KIND = re.compile(rf'"kind"\s*:\s*"{_API_KINDS}"')
# Blank lines as [ \t\r]*\n, not \s*\n: \s takes newlines too, and the ways to split a run of blank
# lines between the repeats grow exponentially when the key never comes.
_YAML_HEAD = re.compile(r"^(?:#.*\n|---[ \t\r]*\n|[ \t\r]*\n)*(?:apiVersion|kind|items):[ \n]", re.MULTILINE)
_YAML_KIND = re.compile(rf"^\s*-?\s*kind:\s*{_API_KINDS}\s*$", re.MULTILINE)
_DESCRIBE_HEAD = re.compile(r"\A\s*Name:\s+\S+\n(?:Namespace|Roles):\s")
_TABLE_HEAD = re.compile("|".join((HEADER, *HEADERS)))


class KubernetesParser(Parser):
    name = "kubernetes"
    source = "kubernetes"
    # Safe: the line rules are per line but for describe blocks, state records and the
    # NodeNotReady look-up, and those are cut at each file's start or grouped by file_key.
    batched = True
    noise = (
        # klog lines of Go components, and operator info/debug chatter.
        r"(?:^|\s)[IW][0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}\s+[0-9]+ [\w.-]+\.go:[0-9]+\] ",
        r'^time="[^"]+" level=(?:debug|info|trace) msg=',
        r'^\{"level":"(?:debug|info)"',
        # table / describe headers and rulers
        r"^\s*Type\s+Reason\s+Age\s+From\s+Message\s*$",
        r"^\s*-{4}\s+-{6}\s+-{4}\s+-{4}\s+-{7}\s*$",
        HEADER,
        *HEADERS,
    )

    # What each line rule filters on first: klog '.go:', operator 'msg=', node tables' status,
    # event tables' TYPE column (blank-delimited), describe's 'Name:', pod tables' READY column;
    # pasted fragments: describe's state blocks and conditions, eviction messages, operator events.
    gates = (
        literal_gate([".go:", "msg=", '"msg":', "Ready", "Unknown", "State:", "Started:", "Reason:", "Exit Code:",
                      "Unschedulable:", "Pressure", "low on resource", "Evicted", "OOMKilled", "exited with code",
                      "is restarting", "unresponsive", "compute.instances.preempted", "nodes are available: ",
                      "stopped posting", "Preempted to accommodate", "nterruption", "Host EC2"]),
        r"(?:Normal|Warning)\s",  # a gate may be looser than the rule: searching for "\s" first is slow
        r"^Name:",
        r"\s[0-9]+/[0-9]+\s+[A-Z]",
    )

    def __init__(self, anchor: datetime | None = None) -> None:
        self.anchor = anchor

    # ------------------------------------------------------------ documents
    def sniff(self, head: str) -> bool:
        if looks_json(head):
            return bool(_JSON_HEAD.match(head) and _JSON_KIND.search(head)) or bool(
                re.match(r'^\s*\{\s*"type"\s*:\s*"(?:ADDED|MODIFIED|DELETED)"\s*,\s*"object"\s*:', head)
            )
        if _YAML_HEAD.match(head):
            return bool(_YAML_KIND.search(head))
        return bool(_DESCRIBE_HEAD.match(head) or _TABLE_HEAD.match(head.lstrip("\n")))

    def parse(self, path: str) -> pl.LazyFrame:
        text = read_text(path)
        if looks_json(text) or _YAML_HEAD.match(text[:4096]):
            return self.parse_objects(text)
        # describe output / events tables: the line rules, over the whole file
        events = read_text_events(path, [self]).events
        return events.drop([c for c in ("parser", "source") if c in events.columns]).lazy()

    def parse_objects(self, text: str) -> pl.LazyFrame:
        """RAW rows for every API object in a JSON/YAML document or stream."""
        objects = [obj for value in load_values(text) for obj in iter_objects(value)]
        # Events name only their pod; pods captured alongside them (get pods,events) give its job and node.
        pods = pod_index(objects)
        ev_rows: list[dict[str, Any]] = []
        raw_rows: list[dict[str, Any]] = []
        for obj in objects:
            try:
                _object_rows(obj, pods, ev_rows, raw_rows)
            except (ValueError, TypeError, OverflowError, AttributeError):
                continue  # a field no object of its kind holds (an impossible date, a list for a map): that object only
        frames = []
        if ev_rows:
            schema = {k: EV_SCHEMA[k] for k in {k for r in ev_rows for k in r}}
            ev = pl.DataFrame(_fitting(ev_rows, schema), schema=schema, strict=False)
            frames.append(events_to_raw(ev.lazy(), self.anchor))
        if raw_rows:
            schema = {k: RAW_SCHEMA[k] for k in {k for r in raw_rows for k in r}}
            frames.append(conform_raw(pl.DataFrame(_fitting(raw_rows, schema), schema=schema, strict=False)))
        if not frames:
            return empty_raw()
        return pl.concat(frames, how="vertical").sort("line", maintain_order=True)

    # ----------------------------------------------------------- line rules
    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame:
        ev = pl.concat([extract_event_tables(lines), extract_klog(lines), extract_operator(lines)], how="vertical")
        return pl.concat(
            [
                events_to_raw(ev, self.anchor),
                extract_describe(lines, self.anchor),
                extract_status_tables(lines, self.anchor),
                extract_evictions(lines),
                extract_workload_preemptions(lines),
                extract_unschedulable(lines),
                extract_node_status(lines),
                extract_cloud_preemptions(lines),
            ],
            how="vertical",
        ).sort("line", maintain_order=True)


parser = KubernetesParser()

__all__ = ["KubernetesParser", "parser"]  # the entry point names `parser`


def _object_rows(obj: dict[str, Any], pods: dict[str, Any], ev_rows: list[dict[str, Any]],
                 raw_rows: list[dict[str, Any]]) -> None:
    """One API object's rows, added to ``ev_rows`` (an Event) or ``raw_rows`` (a Pod, Node or Job)."""
    kind = str(obj.get("kind") or "")
    if kind == "Event":
        row = event_row(obj)
        if row["obj_kind"] == "Pod" and row["obj_name"] in pods:
            row["job_hint"], row["node_hint"] = pods[row["obj_name"]]
        ev_rows.append(row)
    elif kind == "Pod":
        raw_rows.extend(pod_rows(obj))
    elif kind == "Node":
        raw_rows.extend(node_rows(obj))
    elif kind.endswith("Job"):
        raw_rows.extend(job_rows(obj))


_INT_BITS = {pl.Int8: 8, pl.Int16: 16, pl.Int32: 32, pl.Int64: 64}


def _fitting(rows: list[dict[str, Any]], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """``rows`` with a number too big for its integer column (a count of 2**35 or 1e20) set to null:
    the frame builder refuses it even when not strict."""
    bounds = {k: 1 << (_INT_BITS[dtype.base_type()] - 1) for k, dtype in schema.items()
              if dtype.base_type() in _INT_BITS}
    for row in rows:
        for key, bound in bounds.items():
            value = row.get(key)
            if isinstance(value, int | float) and not -bound <= value < bound:
                row[key] = None
    return rows
