"""Where each attempt ran and on how much: its nodes and GPU count, from the records themselves.

Nodes come from the records of the job's processes and scheduler (trainer, torch, NCCL,
Slurm, Kubernetes) that the attempt owns. Kernel logs are read from every node the job ever
used and carry benign noise in between, so they name an attempt's nodes only when nothing else
does. GPUs are the largest count a record of the attempt states (NCCL ``nranks``, the trainer's
world size, an allocation's GPUs), else the job's largest; ``gpus_source`` is the family of the
record that states it (``slurm``, ``kubernetes``, ``nccl``, ``trainer``).

A node is a host: the count is the hosts named, or the scheduler's stated count when it is larger
(an allocation whose other hosts say nothing). A launcher's count of its agents (torchrun's
``group_world_size``) counts pods on Kubernetes, several to a host: it is used only when no host
is named and no scheduler states a count.
"""

from __future__ import annotations

import polars as pl

from toranalyze.reconstruct.intervals import agg_by
from toranalyze.reconstruct.tables import RESOURCES_SCHEMA

SCHEDULERS = ("slurm", "kubernetes")


def attempt_resources(ev: pl.DataFrame) -> pl.DataFrame:
    """Events with ``job`` and ``attempt_idx`` (after ``assign_attempts``) -> RESOURCES_SCHEMA rows."""
    if "attempt_idx" not in ev.columns or ev.height == 0:
        return pl.DataFrame(schema={**RESOURCES_SCHEMA, "job": ev.schema.get("job", pl.String)})
    ev = ev.select("job", "attempt_idx", "node", "source", "n_gpus", "n_nodes").with_columns(
        pl.when(pl.col("source").is_in(SCHEDULERS)).then(pl.col("n_nodes")).alias("_sched_n")).filter(
        pl.col("job").is_not_null() & pl.col("attempt_idx").is_not_null())  # (the columns read, not all)
    key = ["job", "attempt_idx"]
    named = ev.filter(pl.col("node").is_not_null()).with_columns((pl.col("source") == "kernel").alias("_kern"))
    # Per attempt: the nodes of its non-kernel records, else of its kernel records.
    nodes = (
        named.group_by(*key, "_kern")
        .agg(pl.col("node").unique().sort().alias("node_list"))
        .sort(*key, "_kern")
        .group_by(key, maintain_order=True)
        .first()
        .drop("_kern")
    )
    # Records are in attempt order: the groups are slices.
    # the family of the record stating the largest count: where the size comes from
    said = pl.col("source").cast(pl.String).filter(pl.col("n_gpus") == pl.col("n_gpus").max()).first()
    sizes = (pl.col("n_gpus").max().alias("_g"), said.alias("_gs"), pl.col("n_nodes").max().alias("_n"),
             pl.col("_sched_n").max().alias("_sn"))
    stated = agg_by(ev.select(*key, "source", "n_gpus", "n_nodes", "_sched_n"), key, *sizes)
    job_gpus = (stated.sort("_g", descending=True, nulls_last=True).group_by("job", maintain_order=True)
                .agg(pl.col("_g").first().alias("_jg"), pl.col("_gs").first().alias("_jgs")))  # (its largest)
    out = (
        stated.join(nodes, on=key, how="left")
        .join(job_gpus, on="job", how="left")
        .with_columns(pl.col("node_list").fill_null(pl.lit([], pl.List(pl.String))))
        .with_columns(
            pl.coalesce("_g", "_jg").alias("gpus"),
            pl.when(pl.col("_g").is_not_null()).then(pl.col("_gs"))
            .when(pl.col("_jg").is_not_null()).then(pl.col("_jgs") + pl.lit(" (another attempt)")).alias("gpus_source"),
            pl.when(pl.col("node_list").list.len() > 0)
            .then(pl.max_horizontal(pl.col("node_list").list.len().cast(pl.Int32), pl.col("_sn")))
            .otherwise(pl.coalesce("_sn", "_n")).alias("nodes"),
            pl.col("attempt_idx").alias("attempt"),
        )
        .with_columns(pl.when(pl.col("nodes") > 0).then(pl.col("nodes")).alias("nodes"))
    )
    # ``job`` keeps its type (the analysis codes jobs as integers).
    return out.select([pl.col(c) if c == "job" else pl.col(c).cast(t) for c, t in RESOURCES_SCHEMA.items()]).sort(
        "job", "attempt")
