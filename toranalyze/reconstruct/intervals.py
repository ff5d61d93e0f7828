"""Range look-ups that stay linear in the number of records, for long runs with many incidents.

An equality join on ``job`` followed by a range filter pairs every interruption with every
record (or step row) of its job: a month of two-second steps with a thousand incidents is a
billion rows. The functions here give the same rows without forming those pairs.
"""

from __future__ import annotations

import polars as pl


def in_windows(
    windows: pl.DataFrame,
    records: pl.DataFrame,
    key: str = "attempt_idx",
    by: tuple[str, ...] = ("job",),
    on: str = "t",
) -> pl.DataFrame:
    """Each record inside a window ``[_lo, _hi]`` of its group, with that window's columns.

    ``windows``: the ``by`` columns, ``key``, _lo, _hi (integers). ``records``: the ``by``
    columns, ``on``, and anything else (a ``key`` column there is replaced by the window's).
    Returns the pairs ``by == by and _lo <= on <= _hi``, records in their input order: exactly
    what the equality join on ``by`` followed by that filter returns, with ``records``' columns
    after ``windows``'.

    An interruption's window lies between two attempt starts (a slow period between two others
    of its attempt), so a group's windows do not overlap and a record can only be in the last
    window starting at or before it (``join_asof``). A group whose windows overlap all the same
    takes the pairwise join, for that group alone.
    """
    grp = list(by)
    w = windows.filter(pl.col("_lo") <= pl.col("_hi")).sort(*grp, "_lo")
    clash = w.filter(pl.col("_lo") <= pl.col("_hi").shift(1).over(grp)).select(grp).unique()
    recs = records.drop(key, strict=False).with_row_index("_i")
    recs = recs.filter(pl.all_horizontal(pl.col(c).is_not_null() for c in [*grp, on]))
    solo_w = w.join(clash, on=grp, how="anti")
    solo_r = recs.join(clash, on=grp, how="anti").sort(on, maintain_order=True)
    hit = solo_r.join_asof(
        solo_w.sort("_lo"), left_on=on, right_on="_lo", by=grp, strategy="backward", check_sortedness=False
    ).filter(pl.col("_hi").is_not_null() & (pl.col(on) <= pl.col("_hi")))
    out = [hit]
    if clash.height:
        many = w.join(clash, on=grp, how="semi").join(recs.join(clash, on=grp, how="semi"), on=grp)
        out.append(many.filter((pl.col(on) >= pl.col("_lo")) & (pl.col(on) <= pl.col("_hi"))))
    cols = [*windows.columns, *(c for c in recs.columns if c not in windows.columns)]
    return pl.concat([f.select(cols) for f in out]).sort("_i", key, maintain_order=True).drop("_i")


def min_after(queries: pl.DataFrame, rows: pl.DataFrame, value: str) -> pl.DataFrame:
    """For each query (job, attempt, step) the smallest ``value`` of a row of the same job with
    ``attempt_idx > attempt`` and ``step >= step`` (null when none): job, attempt, ``value``.

    The later attempts ``[attempt + 1, ∞)`` are cut into at most one aligned block of 2^k
    attempts per level k (the binary digits of ``attempt + 1``). Per level, each block's rows
    become a running minimum of ``value`` from the highest step down, looked up with
    ``join_asof`` at the query's step: O((rows + queries) · log attempts) rows in all.
    """
    out_schema = pl.Schema({"job": queries.schema["job"], "attempt": queries.schema["attempt"],
                            value: rows.schema[value]})
    # Jobs as integers, so that (job, block) is one integer key: _j · 2^32 + block.
    codes = pl.concat([rows.select("job"), queries.select("job")]).unique().with_row_index("_j")
    j = pl.col("_j").cast(pl.Int64) * (1 << 32)
    r = (
        rows.filter(pl.col("step").is_not_null() & pl.col(value).is_not_null())
        .join(codes, on="job")
        .select(j.alias("_j"), pl.col("attempt_idx").cast(pl.Int64), "step", value)
        .sort("step", value)  # within any block: step order, the smallest value first among equal steps
    )
    q = queries.join(codes, on="job").select(
        "job", "attempt", "step", j.alias("_j"), (pl.col("attempt").cast(pl.Int64) + 1).alias("_x")
    )
    if r.height == 0 or q.height == 0:
        return pl.DataFrame(schema=out_schema)
    levels = (int(r.select(pl.col("attempt_idx").max()).item()) + 1).bit_length()
    found = []
    for k in range(levels):
        bit = (pl.col("_x") // (1 << k)) % 2 == 1
        ask = q.filter(bit).select("job", "attempt", "step", (pl.col("_j") + pl.col("_x") // (1 << k)).alias("_g"))
        q = q.with_columns(pl.when(bit).then(pl.col("_x") + (1 << k)).otherwise(pl.col("_x")).alias("_x"))
        if ask.height == 0:
            continue
        g = pl.col("_g")
        block = (
            r.select((pl.col("_j") + pl.col("attempt_idx") // (1 << k)).alias("_g"), pl.col("step").alias("_s"), value)
            .sort("_g", maintain_order=True)
            .with_columns(pl.col(value).cum_min(reverse=True).over("_g"))
            # one row per (block, step): the first, whose running minimum covers its equals
            .filter(((g != g.shift(1)) | (pl.col("_s") != pl.col("_s").shift(1))).fill_null(True))
        )
        found.append(
            ask.sort("step").join_asof(
                block, left_on="step", right_on="_s", by="_g", strategy="forward", check_sortedness=False
            )
        )
    if not found:
        return pl.DataFrame(schema=out_schema)
    return (
        pl.concat([f.select("job", "attempt", value) for f in found])
        .group_by("job", "attempt")
        .agg(pl.col(value).min())
        .filter(pl.col(value).is_not_null())
        .cast(out_schema)
    )


def packed_key(df: pl.DataFrame, cols: list[str]) -> pl.Expr | None:
    """Integer columns packed into one Int64 that sorts as they do together (one numeric column
    to sort or compare instead of several), or None when they hold nulls or their ranges need
    more than 62 bits."""
    if df.height == 0 or not all(df.schema[c].is_integer() for c in cols):
        return None
    if df.select(pl.any_horizontal(pl.col(cols).is_null().any())).item():
        return None
    lo_hi = df.select(*[pl.col(c).min().alias(f"lo{i}") for i, c in enumerate(cols)],
                      *[pl.col(c).max().alias(f"hi{i}") for i, c in enumerate(cols)]).row(0)
    lo, hi = lo_hi[: len(cols)], lo_hi[len(cols):]
    bits = [int(h - low).bit_length() for low, h in zip(lo, hi, strict=True)]
    if sum(bits) > 62:
        return None
    expr, shift = pl.lit(0, pl.Int64), 0
    for c, low, b in reversed(list(zip(cols, lo, bits, strict=True))):
        expr = expr + (pl.col(c).cast(pl.Int64) - low) * (1 << shift)
        shift += b
    return expr
