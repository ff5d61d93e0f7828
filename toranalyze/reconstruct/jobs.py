"""Job and attempt identity: which events belong to which training run and which (re)start.

A **job** is one training run however many attempts it took. The identity rule, in order:

1. Events are first grouped by the *input directory* of their file (``events.file``'s folder):
   one run's logs live together. Events without a file share the group ``""``.
2. Inside a directory, scheduler ids are normalized to a base id (``1234.0`` / ``1234.batch`` →
   ``1234``; array tasks ``1234_7`` and Kubernetes owners are kept as they are).
3. Base ids are chained into runs: ids that carry the same job name (``JobName=`` / ``job-name``
   in the record) are one run; without a name, ids whose time spans follow each other
   (a resubmission, a requeue under a new id) chain into one run, while ids whose spans overlap
   are separate runs — so a directory holding several concurrent jobs yields one row per job.
   A nameless id seen only in scheduler files (another user's job in a shared controller log)
   never continues a run known by its name, and only numeric (Slurm) ids chain in time: a
   Kubernetes owner keeps its name across restarts, so another name is another job.
4. Events without a scheduler id take the run of their file (the id most of the file's events
   carry), else the run whose time span contains them, else the directory's main run (a run
   known by its name first, then the one whose records come from the most files, then the one
   with the most records).
   When no event of a directory names a scheduler id, the whole directory is one job
   (``identity = "directory"``).

An **attempt** is one (re)start of the training process inside a job. Attempt boundaries are
start markers — scheduler ``job_start`` (job, step, pod), trainer ``init``, launcher
``restart`` and ``ckpt_load`` — and a step number going backwards. A marker opens a new attempt
only when progress or an end (a ``step`` or ``job_end``) happened since the previous marker, so
a cluster of markers (job start, one ``init`` per rank, checkpoint load) is one attempt.
"""

from __future__ import annotations

import polars as pl

from toranalyze.reconstruct.intervals import packed_key

MARKER_KINDS = ("job_start", "init", "restart", "ckpt_load")
PROGRESS_KINDS = ("step", "job_end")
# Kinds whose records delimit an attempt's life (kernel chatter does not).
LIFECYCLE_KINDS = (
    "job_start",
    "job_end",
    "init",
    "init_done",
    "step",
    "ckpt_save_begin",
    "ckpt_save_end",
    "ckpt_load",
    "eval_begin",
    "eval_end",
    "restart",
)
_NAME_RE = r"(?i)\b(?:job_?name|job-name)\s*[=:]\s*['\"]?([A-Za-z0-9_.\-]+)"
_BASE_RE = r"^([^.]+?)(?:\.(?:\d+|batch|extern|interactive))?$"


def _dir_expr() -> pl.Expr:
    f = pl.col("file").fill_null("")
    return pl.when(f.str.contains("/")).then(f.str.replace(r"/[^/]*$", "")).otherwise(pl.lit(""))


def job_name() -> pl.Expr:
    """The job name a record's message states (``JobName=``, ``job-name:``), else null."""
    return pl.col("message").str.extract(_NAME_RE, 1)


def _fold_dirs(ev: pl.DataFrame) -> dict[str, str]:
    """Map each input directory to the directory that holds its run.

    A directory whose records name a scheduler id and include lifecycle records (steps, starts,
    ends) holds a run. A directory without ids (per
    node kernel logs under ``nodes/gpu-001/``, per-rank trainer logs under ``rank0/``) belongs
    to its nearest ancestor that holds a run; with no such ancestor it stands alone when it
    has training records, else it joins the only run there is.

    ``ev``: ``_dir``, ``_base`` and ``_life`` (a record of a start, an end or training).
    """
    facts = ev.group_by("_dir").agg(
        pl.col("_base").is_not_null().any().alias("ids"),
        pl.col("_life").any().alias("life"),
        pl.col("_base").drop_nulls().unique().alias("_idset"),
    )
    with_ids = set(facts.filter(pl.col("ids") & pl.col("life"))["_dir"].to_list())
    idsets = {d: set(x) for d, x in facts.select("_dir", "_idset").iter_rows()}
    # A sub-directory whose ids all belong to an ancestor's run (per-pod YAML under ``pods/``,
    # per-attempt scheduler dumps) is part of that run.
    for d in sorted(with_ids, key=len, reverse=True):
        if any(a in with_ids and idsets[d] <= idsets[a] for a in _ancestors(d)):
            with_ids.discard(d)
    alone = set(facts.filter(~pl.col("ids") & pl.col("life"))["_dir"].to_list())
    out: dict[str, str] = {}

    def ancestor(d: str, pool: set[str]) -> str | None:
        return next((a for a in _ancestors(d) if a in pool), None)

    for d in facts["_dir"].to_list():
        if d in with_ids:
            continue
        a = ancestor(d, with_ids)
        if a is not None:
            out[d] = a
        elif d not in alone:
            a = ancestor(d, alone)
            if a is not None:
                out[d] = a
            elif len(with_ids | alone) == 1:
                out[d] = next(iter(with_ids | alone))
    return out


def _ancestors(d: str) -> list[str]:
    """The directories holding ``d`` (those it starts with followed by '/', and ""), deepest first."""
    return [d[:i] for i in range(len(d) - 1, 0, -1) if d[i] == "/"] + ([""] if d else [])


def with_time(events: pl.DataFrame) -> pl.DataFrame:
    """Add ``t`` (Int64 µs since the epoch) and a stable row id ``_row``."""
    return events.with_columns(
        pl.col("ts").dt.epoch("us").alias("t"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"),
    )


def assign_jobs(events: pl.DataFrame, coded: bool = False) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Add ``job`` (a stable key) to every event; return (events, jobs).

    ``jobs`` has one row per job: ``job``, ``path`` (directory), ``job_ids`` (scheduler ids of
    its attempts, in order), ``identity`` ("scheduler" | "job-name" | "directory"), sorted by
    ``job``. The events get ``_dir`` and ``_base`` too; with ``coded`` their ``job`` is the
    job's row in ``jobs`` (UInt32) instead of its name, ``_dir`` is left out and ``_fc`` numbers
    their files (any order; a null file too).
    """
    # The rule runs on the few columns it reads, with files, directories, base ids and runs as
    # integer codes (one hash of each distinct string, then numeric keys over the records); the
    # names are attached to the events at the end. A ``_name`` column (job_name()) stands in for
    # the message text.
    name = pl.col("_name") if "_name" in events.columns else job_name()
    ev = events.select("file", "job_id", "kind", "t", "_row", name.alias("_name"))
    files = ev.select(pl.col("file").unique()).with_row_index("_fc").with_columns(_dir_expr().alias("_dir"))
    ids = ev.select(pl.col("job_id").unique().drop_nulls()).with_columns(
        pl.col("job_id").str.strip_chars().str.extract(_BASE_RE, 1).alias("_base")
    )
    bases = ids.select(pl.col("_base").drop_nulls().unique().sort()).with_row_index("_bc")
    ids = ids.join(bases, on="_base", how="left").select("job_id", "_bc")
    ev = ev.join(files.select("file", "_fc"), on="file", how="left", nulls_equal=True).join(ids, on="job_id",
                                                                                          how="left")
    ev = ev.select("_fc", "_bc", "kind", "t", "_row", "_name")
    # Directories, folded into the directory of their run.
    dir0 = files.select(pl.col("_dir").unique().sort()).with_row_index("_d0")
    files = files.join(dir0, on="_dir", how="left")
    life = pl.col("kind").is_in(("step", "init", "job_start", "job_end")).any().alias("_life")
    pre = ev.with_columns(files["_d0"].gather(ev["_fc"]).alias("_d0")).group_by("_d0", "_bc").agg(life)
    pre = pre.select(dir0["_dir"].gather(pre["_d0"]).alias("_dir"),
                     bases["_base"].gather(pre["_bc"]).alias("_base"), "_life")
    files = files.with_columns(pl.col("_dir").replace_strict(_fold_dirs(pre), default=pl.col("_dir")).alias("_dir"))
    dirs = files.select(pl.col("_dir").unique().sort()).with_row_index("_dc")
    files = files.join(dirs, on="_dir", how="left").sort("_fc")
    step_files = ev.filter(pl.col("kind") == "step").select("_fc").unique()
    files = files.with_columns(pl.col("_fc").is_in(step_files["_fc"].implode()).alias("_trainfile"))
    ev = ev.with_columns(files["_dc"].gather(ev["_fc"]).alias("_dc"),
                         files["_trainfile"].gather(ev["_fc"]).alias("_trainfile"))
    ids = (
        ev.filter(pl.col("_bc").is_not_null())
        .group_by("_dc", "_bc")
        .agg(
            pl.col("_trainfile").any().alias("train"),
            pl.col("t").min().alias("t0"),
            pl.col("t").filter(pl.col("kind").is_in(LIFECYCLE_KINDS)).max().alias("t1"),
            pl.col("_name").drop_nulls().first().alias("name"),
        )
        .with_columns(pl.col("t1").fill_null(pl.col("t0")))
    )
    ids = ids.with_columns(dirs["_dir"].gather(ids["_dc"]).alias("_dir"),
                           bases["_base"].gather(ids["_bc"]).alias("_base"))
    ids = ids.sort("_dir", "t0", "_base", nulls_last=True)
    # Chain ids into runs: a small loop over scheduler ids (not over lines).
    run_of: dict[tuple[str, str], str] = {}
    identity_of: dict[str, str] = {}
    for d, grp in ids.group_by("_dir", maintain_order=True):
        dname = d[0]
        open_runs: list[list] = []  # [key, end]
        by_name: dict[str, list] = {}
        for row in grp.iter_rows(named=True):
            base, name, t0, t1 = row["_base"], row["name"], row["t0"], row["t1"]
            if name is not None:
                run = by_name.get(name)
                if run is None:
                    run = [f"{dname}::{name}", t1]
                    by_name[name] = run
                    open_runs.append(run)
                    identity_of[run[0]] = "job-name"
                else:
                    run[1] = max(x for x in (run[1], t1, t0) if x is not None) if (run[1] or t1) else None
                run_of[(dname, base)] = run[0]
                continue
            best = None
            # Only numeric (Slurm) ids are resubmitted under a new id; a Kubernetes owner keeps
            # its name across pod restarts, so another name is another job.
            chainable = base is not None and base.split("_")[0].isdigit()
            for run in open_runs if chainable else []:
                if not run[0].rsplit("::", 1)[-1].split("_")[0].isdigit():
                    continue
                # A nameless id seen only in scheduler files (another user's job in a shared
                # controller log) never continues a run known by its name.
                if not row["train"] and identity_of.get(run[0]) == "job-name":
                    continue
                if t0 is None or run[1] is None or run[1] <= t0 + 1_000_000:
                    if best is None or (run[1] or 0) > (best[1] or 0):
                        best = run
            if best is None:
                best = [f"{dname}::{base}", t1]
                open_runs.append(best)
                identity_of[best[0]] = "scheduler"
            else:
                best[1] = max(x for x in (best[1], t1) if x is not None) if (best[1] or t1) else None
            run_of[(dname, base)] = best[0]
    # Runs, then each directory's own key ("<dir>::"), coded in name order so that ties between
    # runs break by name as before.
    runs = pl.Series("job", sorted(set(run_of.values())), dtype=pl.String)
    names = pl.concat([runs, dirs["_dir"] + "::"])
    code = {name: i for i, name in enumerate(runs.to_list())}
    mapping = pl.DataFrame(
        {"_dir": [k[0] for k in run_of], "_base": [k[1] for k in run_of], "_rc": [code[v] for v in run_of.values()]},
        schema={"_dir": pl.String, "_base": pl.String, "_rc": pl.Int64},
    ).join(dirs, on="_dir").join(bases, on="_base").select("_dc", "_bc", "_rc")
    ev = ev.join(mapping, on=["_dc", "_bc"], how="left")
    # Events without an id: the file's majority run, else the run spanning their time, else
    # the directory's first run, else the directory itself.
    file_run = (
        ev.filter(pl.col("_rc").is_not_null())
        .group_by("_fc", "_rc")
        .len()
        .sort("len", "_rc", descending=[True, False])
        .group_by("_fc", maintain_order=True)
        .first()
        .select("_fc", pl.col("_rc").alias("_file_job"))
    )
    ev = ev.join(file_run, on="_fc", how="left")
    spans = (
        ev.filter(pl.col("_rc").is_not_null())
        .group_by("_dc", "_rc")
        .agg(pl.col("t").min().alias("_s0"), pl.col("t").max().alias("_s1"))
        .sort("_s0", "_rc")
    )
    # The directory's fallback run: a run known by its job name first, then the one whose
    # records come from the most files, then the one with the most records. Other users' jobs
    # in a shared controller log are nameless, live in that one file and, chained one after the
    # other, can still outnumber the run's own scheduler records.
    named = [code[k] for k, v in identity_of.items() if v == "job-name"]
    first_run = (
        ev.filter(pl.col("_rc").is_not_null())
        .group_by("_dc", "_rc")
        .agg(pl.len().alias("len"), pl.col("_fc").n_unique().alias("_nf"))
        .with_columns(pl.col("_rc").is_in(named).alias("_named"))
        .sort("_named", "_nf", "len", "_rc", descending=[True, True, True, False])
        .group_by("_dc", maintain_order=True)
        .agg(pl.col("_rc").first().alias("_dir_job"))
    )
    spans = spans.join(first_run, left_on=["_dc", "_rc"], right_on=["_dc", "_dir_job"], how="semi")
    ev = ev.join(first_run, on="_dc", how="left")
    need = ev.filter(pl.col("_rc").is_null() & pl.col("_file_job").is_null() & pl.col("t").is_not_null())
    if need.height and spans.height:
        hit = (
            need.select("_row", "_dc", "t")
            .sort("t")
            .join_asof(
                spans.rename({"_rc": "_span_job"}).sort("_s0"),
                left_on="t",
                right_on="_s0",
                by="_dc",
                check_sortedness=False,
            )
            .filter(pl.col("t") <= pl.col("_s1"))
            .select("_row", "_span_job")
        )
        ev = ev.join(hit, on="_row", how="left")
    else:
        ev = ev.with_columns(pl.lit(None, pl.Int64).alias("_span_job"))
    ev = ev.with_columns(
        pl.coalesce("_rc", "_file_job", "_span_job", "_dir_job", runs.len() + pl.col("_dc").cast(pl.Int64)).alias("_jc")
    )
    for key in names.gather(ev["_jc"].unique()).to_list():
        if key.endswith("::"):
            identity_of[key] = "directory"
    jobs = (
        ev.group_by("_jc")
        .agg(
            pl.col("_dc").first().alias("path"),
            pl.col("_bc")
            .filter(pl.col("t").is_not_null())
            .sort_by(pl.col("t").filter(pl.col("t").is_not_null()))
            .unique(maintain_order=True)
            .drop_nulls()
            .alias("job_ids"),
        )
    )
    jobs = jobs.with_columns(names.gather(jobs["_jc"]).alias("job"), dirs["_dir"].gather(jobs["path"]).alias("path"))
    ids_of = jobs.select("_jc", "job_ids").explode("job_ids")
    ids_of = (
        ids_of.with_columns(bases["_base"].gather(ids_of["job_ids"]).alias("job_ids"))
        .group_by("_jc", maintain_order=True)
        .agg(pl.col("job_ids").drop_nulls())
    )
    jobs = (
        jobs.drop("job_ids").join(ids_of, on="_jc", how="left")
        .select("job", "path", "job_ids")
        .with_columns(
            pl.col("job").replace_strict(identity_of, default="directory", return_dtype=pl.String).alias("identity")
        )
        .sort("job")
    )
    if coded:
        rank = (
            names.to_frame().with_row_index("_jc")
            .join(jobs.select("job").with_row_index("_rank"), on="job", how="left")
            .sort("_jc")["_rank"]
        )
        return events.with_columns(
            bases["_base"].gather(ev["_bc"]).alias("_base"), rank.gather(ev["_jc"]).alias("job"), ev["_fc"]
        ), jobs
    return events.with_columns(
        dirs["_dir"].gather(ev["_dc"]).alias("_dir"),
        bases["_base"].gather(ev["_bc"]).alias("_base"),
        names.gather(ev["_jc"]).alias("job"),
    ), jobs


SAME_MOMENT_US = 5_000_000  # stamps this close may be out of order (resolution, skew between hosts)


def _progress_before(markers: pl.DataFrame, progress: pl.DataFrame) -> pl.DataFrame:
    """``_p_old``: how many progress records of the job are stamped more than SAME_MOMENT_US
    before each marker."""
    last_of_moment = (pl.col("job") != pl.col("job").shift(-1)) | (pl.col("t") != pl.col("t").shift(-1))
    counted = (
        progress.select("job", "t").sort("job", "t")
        .with_columns(pl.int_range(1, pl.len() + 1).over("job").alias("_p_old"))
        .filter(last_of_moment.fill_null(True))  # the count at each (job, time): its last row
        .sort("t")
    )
    return (
        markers.with_row_index("_seq")  # the markers' time order, kept
        .with_columns((pl.col("t") - SAME_MOMENT_US).alias("_t_old")).sort("_t_old")
        .join_asof(counted.rename({"t": "_t_prog"}), left_on="_t_old", right_on="_t_prog", by="job",
                   strategy="backward", allow_exact_matches=False, check_sortedness=False)
        .with_columns(pl.col("_p_old").fill_null(0))
        .sort("_seq")
        .drop("_seq", "_t_old", "_t_prog")
    )


def assign_attempts(events: pl.DataFrame, keep: pl.Series | None = None) -> pl.DataFrame:
    """Add ``attempt_idx`` (0-based, per job, in time order) to every timed event, of the jobs
    ``keep`` (None: all; the others' events are left out).

    Events without a time get the attempt of the previous timed event of their file (they
    cannot open an attempt).
    """
    kept = pl.lit(True) if keep is None else pl.col("job").is_in(keep.implode())
    # At equal times, ends and steps come before starts. The attempts are found on the columns
    # they depend on, in that order; the other columns are reordered once, at the end.
    keys = events.select("job", "t", "kind", "_row", "step").with_row_index("_pos").filter(
        pl.col("t").is_not_null() & kept)
    later_kind = pl.col("kind").is_in(PROGRESS_KINDS).not_()
    # Records in row-id order (as they come) sort stably on (job, t, kind order) packed into one
    # integer, which breaks ties by row id as the four-column sort does.
    packed = None
    if keys["_row"].is_sorted():
        packed = packed_key(keys.with_columns(later_kind.cast(pl.Int8).alias("_ko")), ["job", "t", "_ko"])
    if packed is None:
        order = keys.select(pl.arg_sort_by("job", "t", later_kind, "_row"))[:, 0]
    else:
        order = keys.with_columns(later_kind.cast(pl.Int8).alias("_ko")).select(
            pl.arg_sort_by(packed, maintain_order=True))[:, 0]
    timed = keys[order]
    if timed["job"].null_count() == 0:  # in job order: windows over jobs take slices
        timed = timed.with_columns(pl.col("job").set_sorted())
    is_marker = pl.col("kind").is_in(MARKER_KINDS)
    is_prog = pl.col("kind").is_in(PROGRESS_KINDS)
    # A step more than 2 below the previous step record of the job also opens an attempt.
    timed = timed.with_columns(
        is_prog.cast(pl.Int64).cum_sum().over("job").alias("_prog"),
    )
    # (in place: the previous step record's step is the last one before the row, within the job)
    is_step = (pl.col("kind") == "step") & pl.col("step").is_not_null()
    prev_step = pl.when(is_step).then(pl.col("step")).shift(1).forward_fill().over("job")
    timed = timed.with_columns((is_step & (pl.col("step") < prev_step - 2)).fill_null(False).alias("_back"))
    is_mark = (is_marker | pl.col("_back")).alias("_is_mark")
    timed = timed.with_columns(is_mark)
    markers = timed.filter(pl.col("_is_mark")).select(
        "_row", "job", "t", "_prog", pl.col("_back"), pl.col("kind"))
    # For a backward step, "progress since the last marker" counts the step itself.
    markers = markers.with_columns(
        pl.when(pl.col("_back")).then(pl.col("_prog") - 1).otherwise(pl.col("_prog")).alias("_p")
    )
    # A marker opens an attempt when progress came since the previous one, not counting progress
    # stamped within seconds before it: second-resolution stamps and clock skew between hosts
    # put an attempt's first step at or just before its start, init or load lines.
    markers = _progress_before(markers, timed.filter(is_prog)).with_columns(
        (pl.col("_p").shift(1).over("job").is_null()
         | (pl.col("_p_old") > pl.col("_p").shift(1).over("job"))).alias("_new")
    )
    # A backward step with no marker since the last progress opens an attempt too. (The markers
    # are the marked rows in order: their flags go back to those positions.)
    where = timed.select(pl.col("_is_mark").arg_true())[:, 0]
    new = pl.repeat(False, timed.height, dtype=pl.Boolean, eager=True).alias("_new").scatter(where, markers["_new"])
    timed = timed.with_columns(new)
    # The first marker of the job is attempt 0 and so are events before it.
    timed = timed.with_columns((pl.col("_new").cast(pl.Int32).cum_sum().over("job") - 1).clip(0).alias("attempt_idx"))
    # If the first marker of a job comes after progress (more than seconds of it, as above), that
    # progress was an attempt of its own.
    first_marker_prog = markers.group_by("job").agg(pl.col("_p_old").first().alias("_fm"))
    timed = timed.join(first_marker_prog, on="job", how="left").with_columns(
        pl.when(pl.col("_fm") > 0)
        .then(
            pl.col("attempt_idx")
            + pl.when(pl.col("_new").cast(pl.Int32).cum_sum().over("job") > 0).then(1).otherwise(0)
        )
        .otherwise(pl.col("attempt_idx"))
        .cast(pl.Int32)
        .alias("attempt_idx")
    )
    timed = events[timed["_pos"]].with_columns(timed["attempt_idx"])
    untimed = events.filter(pl.col("t").is_null() & kept)
    if untimed.height:
        ref = timed.select("file", "line", "attempt_idx").sort("line")
        untimed = (
            untimed.sort("line")
            .join_asof(ref, on="line", by="file", strategy="backward", check_sortedness=False)
            .with_columns(pl.col("attempt_idx").fill_null(0).cast(pl.Int32))
        )
        return pl.concat([timed, untimed.select(timed.columns)], how="vertical")
    return timed
