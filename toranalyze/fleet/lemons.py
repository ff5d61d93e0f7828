"""Lemon nodes: nodes with improbably many unexpected incidents for their running time.

Only incidents of node-level classes count (GPU, host and network categories of the taxonomy).

Each node's count is tested one-sided against a Poisson with mean ``rate x node_hours``, the
rate being the whole fleet's. (A leave-one-out rate would give a lemon a slightly lower bar, but
a zero expectation, and so p = 0, whenever the rest of a small fleet has no failure.) The
p-values are adjusted across nodes by Benjamini-Hochberg (``scipy.stats.false_discovery_control``)
and a node is a lemon when its adjusted value is below ``alpha``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from toranalyze.fleet.fit import failures, node_rates
from toranalyze.taxonomy import TAXONOMY

ALPHA = 0.05
# Classes whose cause sits on a node; software, OOM or hangs name a rank's node without the
# node being at fault, and mixing them in would flag the nodes of busy small jobs.
NODE_CLASSES = frozenset(c.name for c in TAXONOMY.values() if c.category in ("gpu", "host", "network"))


def node_tests(fail: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Per node: failures, node-hours, expected failures, p-value and BH q-value (sorted by q)."""
    nodes = node_rates(fail, exposure).filter(pl.col("node_hour") > 0)
    if nodes.is_empty():
        return nodes.with_columns(*(pl.lit(None, pl.Float64).alias(c) for c in ("expected", "p_value", "q_value")))
    k = nodes["failures"].to_numpy().astype(float)
    e = nodes["node_hour"].to_numpy().astype(float)
    mu = k.sum() / e.sum() * e
    p = np.where(k > 0, stats.poisson.sf(k - 1, mu), 1.0)
    q = stats.false_discovery_control(p, method="bh")
    return nodes.with_columns(pl.Series("expected", mu), pl.Series("p_value", p), pl.Series("q_value", q)).sort(
        "q_value", "node")


def lemon_nodes(incidents: pl.DataFrame, exposure: pl.DataFrame, alpha: float = ALPHA) -> list[dict[str, Any]]:
    """The lemons, each with its incidents (run, job, incident, class, onset) as evidence."""
    fail = failures(incidents, exposure).filter(pl.col("failure_class").is_in(list(NODE_CLASSES)))
    tests = node_tests(fail, exposure).filter(pl.col("q_value") < alpha)
    if tests.is_empty():
        return []
    ev = (
        fail.explode("nodes").filter(pl.col("nodes").is_in(tests["node"].to_list()))
        .sort("t_onset", "run", "job", "incident")
    )
    out = []
    for row in tests.iter_rows(named=True):
        mine = ev.filter(pl.col("nodes") == row["node"])
        out.append({
            "node": row["node"],
            "failures": int(row["failures"]),
            "node_hours": float(f"{row['node_hour']:.9g}"),
            "expected": float(f"{row['expected']:.9g}"),
            "p_value": float(f"{row['p_value']:.6g}"),
            "q_value": float(f"{row['q_value']:.6g}"),
            "incidents": [
                {"run": r["run"], "job": r["job"], "incident": int(r["incident"]), "class": r["failure_class"],
                 "t_onset": None if r["t_onset"] is None else r["t_onset"].strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
                for r in mine.iter_rows(named=True)
            ],
        })
    return out
