"""An example third-party parser, written only against ``toranalyze.parser_api``.

It reads the log of ``acme-trainer``, an in-house training launcher (a made-up format)::

    [acme 2024-03-01 10:00:00.250+00:00] step 10/500 loss=2.4817 step_time=1.25s
    [acme 2024-03-01 10:00:30.000+00:00] heartbeat ok
    [acme 2024-03-01 10:03:10.000+00:00] checkpoint saved at step 150
    [acme 2024-03-01 10:04:02.000+00:00] FATAL rank 3 on gpu-node-7: CUDA error: an illegal memory access

A distribution ships it under the ``toranalyze.parsers`` entry-point group::

    [project.entry-points."toranalyze.parsers"]
    acme-trainer = "acme_trainer_parser:parser"
"""

from __future__ import annotations

import polars as pl

from toranalyze.parser_api import ISO_PATTERN, Parser, conform_raw, literal_gate, offset_iso, ts_iso

_LINE = rf"^\[acme ({ISO_PATTERN})\] (.*)$"


def _number(pattern: str, dtype: pl.DataType) -> pl.Expr:
    """The first group of ``pattern`` in a record's body, as ``dtype`` (null when absent)."""
    return pl.col("body").str.extract(pattern, 1).cast(dtype, strict=False)


class AcmeTrainerParser(Parser):
    """Step, checkpoint and fatal-error records of acme-trainer logs."""

    name = "acme-trainer"
    source = "acme"
    gates = (literal_gate(["[acme "]),)  # every record starts with it: other blocks skip this parser
    noise = (r"^\[acme [^\]]+\] heartbeat ok$",)
    batched = True  # one-line records: nothing reaches across the files of a batch

    def extract(self, lines: pl.LazyFrame) -> pl.LazyFrame:
        body = pl.col("body")
        kind = (
            pl.when(body.str.starts_with("step "))
            .then(pl.lit("step"))
            .when(body.str.starts_with("checkpoint saved"))
            .then(pl.lit("ckpt_save_end"))
            .when(body.str.starts_with("FATAL "))
            .then(pl.lit("error"))
        )
        records = (
            lines.filter(pl.col("text").str.starts_with("[acme "))
            .with_columns(
                pl.col("text").str.extract(_LINE, 1).alias("stamp"),
                pl.col("text").str.extract(_LINE, 2).alias("body"),
            )
            .with_columns(kind.alias("kind"))
            .filter(pl.col("kind").is_not_null())
        )
        return conform_raw(
            records.select(
                "line",
                "kind",
                pl.when(pl.col("kind") == "error").then(pl.lit("error")).otherwise(pl.lit("info")).alias("severity"),
                ts_iso(pl.col("stamp")).alias("ts"),
                offset_iso(pl.col("stamp")).alias("ts_offset_s"),
                _number(r"step (\d+)", pl.Int64()).alias("step"),
                _number(r"loss=([0-9.]+|nan)", pl.Float64()).alias("loss"),
                _number(r"step_time=([0-9.]+)s", pl.Float64()).alias("step_time_s"),
                _number(r"rank (\d+)", pl.Int32()).alias("rank"),
                body.str.extract(r" on ([\w.\-]+):", 1).alias("node"),
                body.alias("message"),
            )
        )


parser = AcmeTrainerParser()
