"""Which node an event happened on, when its line does not say, and which records are only peers' symptoms.

Real collections put the host in the path, not the line: ``dmesg/<host>.log``,
``<host>/kern.log``, ``logs/<host>-dmesg.txt``, ``kern.log.<host>``, a pod's log named after
the pod. A path names a node only when that name is a node the run's other sources name
(scheduler node lists, syslog hosts, pod -> node bindings): a folder called ``logs`` or a file
called ``rank3.txt`` names nothing. A pod log takes the node its pod was bound to
("Successfully assigned ns/pod to node", describe's ``Node:``, a pod table's NODE column).

Peer symptoms are what every surviving rank reports when one peer dies: ``ncclRemoteError``,
"remote process exited or there was a network error", a connection reset or closed by the
peer, a broken pipe. They carry the ``network`` class (with nothing better they are the best
guess), but the incident stage never prefers them over node-local evidence of a death; see
docs/root_cause.md.
"""

from __future__ import annotations

import re
from pathlib import PurePath

import polars as pl

from toranalyze import storage
from toranalyze.ingest.classify import attribution_roles
from toranalyze.reconstruct.jobs import scope_expr

# Messages that only say a peer went away: never a cause when a death is in evidence.
PEER_SYMPTOM = attribution_roles().peer_symptom
# Node-local evidence that a process, a GPU or a node died.
DEATH_CLASSES = ("oom_host", "oom_gpu", "gpu_hardware", "gpu_memory", "gpu_interconnect", "node_failure",
                 "host_hardware")

# Words of log file names that are not host names ('kern.log.gpu-07', 'gpu-07-dmesg.txt').
_LOG_WORDS = r"(?i)^(?:dmesg|kern|kernel|syslog|messages|journal|journalctl|log|logs|txt|out|err|gz|zst|bz2)$"
_ASSIGNED = r"Successfully assigned (?:[\w.-]+/)?([\w.-]+) to ([\w.-]+)"


def is_peer_symptom() -> pl.Expr:
    """Records of class network whose text only says a peer went away."""
    return (pl.col("failure_class") == "network") & pl.col("message").fill_null("").str.contains(PEER_SYMPTOM)


def path_candidates(path: str) -> list[str]:
    """Names a path could give its host by: every folder, the file stem, and the stem's pieces
    once log words ('dmesg', 'kern', 'log') are cut off at '.', '-' or '_' (of a URL: its key's)."""
    p = PurePath(storage.key_of(path))
    names = [*p.parts[:-1], p.name, p.name.split(".")[0]]
    pieces = [w for w in re.split(r"[._]", p.name) if w and not re.match(_LOG_WORDS, w)]
    names += pieces
    for piece in pieces:  # 'gpu-07-dmesg' -> 'gpu-07'
        names.append(re.sub(r"(?i)[-_](?:dmesg|kern|kernel|syslog|messages|journal)$", "", piece))
        names.append(re.sub(r"(?i)^(?:dmesg|kern|kernel|syslog|messages|journal)[-_]", "", piece))
    return list(dict.fromkeys(n for n in names if n))


Pods = dict[tuple[int, str], str]  # (scope, pod) -> node


def pod_bindings(ev: pl.DataFrame) -> Pods:
    """(scope, pod) -> node from Kubernetes records that state both (scope: jobs.scope_expr)."""
    if "message" not in ev.columns or ev.height == 0:
        return {}
    k8s = ev.select("source", "message", "node", scope_expr(ev)).filter(pl.col("source") == "kubernetes")
    assigned = k8s.select("scope", pl.col("message").str.extract_groups(_ASSIGNED).alias("g")).unnest("g")
    named = k8s.filter(pl.col("node").is_not_null()).select(
        "scope", pl.col("message").str.extract(r"\bpod/([\w.-]+)", 1).alias("1"), pl.col("node").alias("2")
    )
    pairs = pl.concat([assigned.drop_nulls(), named.drop_nulls()]).unique(["scope", "1"], keep="first",
                                                                          maintain_order=True)
    return {(sc, pod): node for sc, pod, node in pairs.iter_rows()}


def attribute_nodes(ev: pl.DataFrame, pods: Pods | None = None) -> pl.DataFrame:
    """Fill ``node`` of rows that name none from their file's path (a node its scope names, or a
    pod bound to one); rows that name a node keep it. ``pods``: pod_bindings() of the events, when
    ``ev`` no longer holds their messages."""
    if ev.height == 0 or ev["node"].null_count() == 0:
        return ev
    # Nodes each scope names anywhere; a row may list several ('gpu-01,gpu-07').
    named = ev.select(scope_expr(ev), "node").drop_nulls().unique().with_columns(
        pl.col("node").str.split(",")).explode("node").select("scope", pl.col("node").str.strip_chars())
    known = set(named.iter_rows())
    pods = pod_bindings(ev) if pods is None else pods
    files = ev.select("node", "file", scope_expr(ev)).filter(pl.col("node").is_null() & pl.col("file").is_not_null())
    mapping: dict[str, str] = {}
    for path, scope in files.select("file", "scope").unique().iter_rows():  # one pass per file, not per line
        for name in path_candidates(path):
            node = name if (scope, name) in known else pods.get((scope, name))
            if node is not None:
                mapping[path] = node
                break
    if not mapping:
        return ev
    by_path = pl.col("file").replace_strict(mapping, default=None, return_dtype=pl.String)
    return ev.with_columns(pl.coalesce(pl.col("node"), by_path).alias("node"))


# Records of a process killed from outside (SIGKILL / exit 137) on one node. When an incident's
# only error records are peers' symptoms and such a kill is on record, the kill is the death
# (whose cause the logs do not give); when node-local death evidence exists, the symptoms are set
# aside (incidents.py applies both to every incident at once).
KILL_RULES = attribution_roles().kill
# Network-class rules on first-hand evidence (a port, link or adapter failing): never a peer's
# echo of a death elsewhere, so a network failure they show before any death is the cause.
LINK_RULES = attribution_roles().link
