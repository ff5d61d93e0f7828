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
   carry), else the directory's main run (a run known by its name first, then the one whose
   records come from the most files, then the one with the most records).
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


SCOPE = "scope"  # the optional event column naming each record's input (a run of a fleet batch)


def scope_expr(events: pl.DataFrame) -> pl.Expr:
    """The records' ``scope``: the column when the events carry one, else one scope for all.
    Records of different scopes never share a job, a node or a clock (see fleet/batch.py)."""
    return pl.col(SCOPE) if SCOPE in events.columns else pl.lit(0, pl.UInt32).alias(SCOPE)


def job_name() -> pl.Expr:
    """The job name a record's message states (``JobName=``, ``job-name:``), else null."""
    # Every match holds "job" in some case: the pattern reads only the messages a literal search
    # keeps (the others become null first), a fifth less than reading every message.
    msg = pl.col("message")
    return pl.when(msg.str.contains("(?i)job")).then(msg).str.extract(_NAME_RE, 1)


def _fold_dirs(ev: pl.DataFrame) -> dict[str, str]:
    """Map each input directory to the directory that holds its run.

    A directory whose records name a scheduler id and include lifecycle records (steps, starts,
    ends) holds a run. A directory without ids (per
    node kernel logs under ``nodes/gpu-001/``, per-rank trainer logs under ``rank0/``) belongs
    to its nearest ancestor that holds a run; with no such ancestor it stands alone when it
    has training records, else it joins the only run there is.

    ``ev``: ``dir``, ``base_job_id``, ``run_kind`` (a record of a start, an end or training) and
    ``scope`` (the input the directory came from: a fleet analyses many runs' logs at once, and a
    directory never joins another input's run).
    """
    facts = ev.group_by("dir").agg(
        pl.col("base_job_id").is_not_null().any().alias("ids"),
        pl.col("run_kind").any().alias("life"),
        pl.col("base_job_id").drop_nulls().unique().alias("_idset"),
        pl.col("scope").first(),
    )
    scope_of = dict(facts.select("dir", "scope").iter_rows())
    with_ids = set(facts.filter(pl.col("ids") & pl.col("life"))["dir"].to_list())
    idsets = {d: set(x) for d, x in facts.select("dir", "_idset").iter_rows()}
    # A sub-directory whose ids all belong to an ancestor's run (per-pod YAML under ``pods/``,
    # per-attempt scheduler dumps) is part of that run.
    for d in sorted(with_ids, key=len, reverse=True):
        if any(a in with_ids and idsets[d] <= idsets[a] for a in _ancestors(d)):
            with_ids.discard(d)
    alone = set(facts.filter(~pl.col("ids") & pl.col("life"))["dir"].to_list())
    out: dict[str, str] = {}

    def ancestor(d: str, pool: set[str]) -> str | None:
        return next((a for a in _ancestors(d) if a in pool), None)

    for d in facts["dir"].to_list():
        if d in with_ids:
            continue
        a = ancestor(d, with_ids)
        if a is not None:
            out[d] = a
        elif d not in alone:
            a = ancestor(d, alone)
            if a is not None:
                out[d] = a
            else:
                runs = [r for r in with_ids | alone if scope_of[r] == scope_of[d]]
                if len(runs) == 1:
                    out[d] = runs[0]
    return out


def _ancestors(d: str) -> list[str]:
    """The directories holding ``d`` (those it starts with followed by '/', and ""), deepest first."""
    out, end = [], len(d)
    while (i := d.rfind("/", 1, end)) > 0:  # (each '/' after the first character, from the right)
        out.append(d[:i])
        end = i
    return out + ([""] if d else [])


def with_time(events: pl.DataFrame) -> pl.DataFrame:
    """Add ``t`` (Int64 µs since the epoch) and a stable row id ``row``."""
    return events.with_columns(
        pl.col("ts").dt.epoch("us").alias("t"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row"),
    )


def assign_jobs(events: pl.DataFrame, coded: bool = False) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Add ``job`` (a stable key) to every event; return (events, jobs).

    ``jobs`` has one row per job: ``job``, ``path`` (directory), ``job_ids`` (scheduler ids of
    its attempts, in order), ``identity`` ("scheduler" | "job-name" | "directory"), sorted by
    ``job``. The events get ``dir`` and ``base_job_id`` too; with ``coded`` their ``job`` is the
    job's row in ``jobs`` (UInt32) instead of its name, ``dir`` is left out and ``file_code`` numbers
    their files in the order they first come (a null file too).
    """
    # Every record of a (file, scheduler id) pair gets the same job: the rule is decided on the
    # pairs (a few thousand rows however many records), which are summed up from blocks of
    # consecutive records with the same file and id (a log's records come together), with
    # files, directories, base ids and runs as integer codes. Each record takes its block's job
    # by a slot look-up at the end. A ``stated_job`` column (job_name()) stands in for the message.
    block, blocks = _blocks(events)
    blocks, files, bases = _coded_blocks(blocks)
    pairs = _pairs(blocks)
    files, dirs = _folded_files(files, pairs, bases)
    pairs = pairs.with_columns(files["dir_code"].gather(pairs["file_code"]).alias("dir_code"))
    run_of, identity_of = _chain_ids(_id_facts(pairs, files, dirs, bases))
    # Runs, then each directory's own key ("<dir>::"), coded in name order so that ties between
    # runs break by name.
    runs = pl.Series("job", sorted(set(run_of.values())), dtype=pl.String)
    names = pl.concat([runs, dirs["dir"] + "::"])
    pairs = _with_named_files(pairs, files, runs)
    pairs = _pair_jobs(pairs, dirs, bases, run_of, identity_of, runs)
    for key in names.gather(pairs["job_code"].unique()).to_list():
        if key.endswith("::"):
            identity_of[key] = "directory"
    jobs = _job_table(pairs, names, dirs, bases, identity_of)
    blocks = blocks.join(pairs.select("file_code", "base_code", "job_code"), on=["file_code", "base_code"], how="left",
                         nulls_equal=True,
                         maintain_order="left")
    base = bases["base_job_id"].gather(blocks["base_code"]).gather(block).alias("base_job_id")
    if coded:
        rank = (
            names.to_frame().with_row_index("job_code")
            .join(jobs.select("job").with_row_index("_rank"), on="job", how="left")
            .sort("job_code")["_rank"]
        )
        return events.with_columns(
            base, rank.gather(blocks["job_code"]).gather(block).alias("job"), blocks["file_code"].gather(block)
        ), jobs
    return events.with_columns(
        dirs["dir"].gather(files["dir_code"].gather(blocks["file_code"])).gather(block).alias("dir"),
        base,
        names.gather(blocks["job_code"]).gather(block).alias("job"),
    ), jobs


# Kinds that tell a directory holds a run (rather than kernel logs of its nodes).
_RUN_KINDS = ("step", "init", "job_start", "job_end")


def _blocks(events: pl.DataFrame) -> tuple[pl.Series, pl.DataFrame]:
    """(each record's block, the blocks): a block is a stretch of consecutive records with the
    same file and scheduler id. Per block: ``file``, ``job_id``, ``n`` records, ``t_min``,
    ``t_life`` (last lifecycle record), ``run_kind`` (a record of a run kind), ``has_steps`` and the
    first ``stated_job`` stated; ``block`` numbers the blocks in record order."""
    name = pl.col("stated_job") if "stated_job" in events.columns else job_name()
    kind = pl.col("kind")
    # Two non-decreasing run ids: their sum grows where either does (by 1 or 2, hence rle_id).
    # (flagged sorted, as a run id is: the group-by then takes the blocks as slices, twice as fast)
    blk = (pl.col("file").rle_id() + pl.col("job_id").rle_id()).rle_id().set_sorted().alias("block")
    ev = events.select(
        blk, "file", "job_id", "t", pl.when(kind.is_in(LIFECYCLE_KINDS)).then(pl.col("t")).alias("t_life"),
        kind.is_in(_RUN_KINDS).alias("run_kind"), (kind == "step").alias("has_steps"), name.alias("stated_job"),
        scope_expr(events),
    )
    blocks = ev.group_by("block", maintain_order=True).agg(
        pl.col("file").first(), pl.col("scope").first(), pl.col("job_id").first(), pl.len().alias("n"),
        pl.col("t").min().alias("t_min"),
        pl.col("t_life").max(), pl.col("run_kind").any(), pl.col("has_steps").any(),
        pl.col("stated_job").drop_nulls().first(),
    )
    return ev["block"], blocks


def _coded_blocks(blocks: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The blocks with ``file_code`` (file code) and ``base_code`` (base id code, null without an id), the
    files (``file_code``, ``file``, ``dir``; in code order) and the base ids (``base_code``, ``base_job_id``;
    sorted)."""
    # Files numbered as they first come: rows in file and line order are then in code order too.
    files = blocks.select("file", "scope").unique("file", maintain_order=True).with_row_index(
        "file_code").with_columns(_dir_expr().alias("dir"))
    ids = blocks.select(pl.col("job_id").unique().drop_nulls()).with_columns(
        pl.col("job_id").str.strip_chars().str.extract(_BASE_RE, 1).alias("base_job_id")
    )
    bases = ids.select(pl.col("base_job_id").drop_nulls().unique().sort()).with_row_index("base_code")
    ids = ids.join(bases, on="base_job_id", how="left").select("job_id", "base_code")
    blocks = blocks.join(files.select("file", "file_code"), on="file", how="left", nulls_equal=True,
                         maintain_order="left").join(ids, on="job_id", how="left", maintain_order="left")
    return blocks, files, bases


def _pairs(blocks: pl.DataFrame) -> pl.DataFrame:
    """One row per (``file_code``, ``base_code``): its blocks summed up. ``stated_job`` is the first name stated
    and ``name_block`` its block; ``t_min_block`` is the first block holding the earliest time."""
    return blocks.group_by("file_code", "base_code", maintain_order=True).agg(
        pl.col("n").sum(), pl.col("t_min").min(), pl.col("t_life").max(), pl.col("run_kind").any(),
        pl.col("has_steps").any(), pl.col("stated_job").drop_nulls().first(),
        pl.col("block").filter(pl.col("stated_job").is_not_null()).first().alias("name_block"),
        pl.col("block").filter(pl.col("t_min") == pl.col("t_min").min()).first().alias("t_min_block"),
    )


def _folded_files(files: pl.DataFrame, pairs: pl.DataFrame, bases: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The files with ``dir`` folded into the directory of their run (``_fold_dirs``), its code
    ``dir_code`` and ``train_file`` (a step record in the file); the folded directories (``dir_code``,
    ``dir``; sorted)."""
    dir0 = files.select(pl.col("dir").unique().sort()).with_row_index("dir0_code")
    files = files.join(dir0, on="dir", how="left").sort("file_code")
    pre = pairs.with_columns(files["dir0_code"].gather(pairs["file_code"]).alias("dir0_code"))
    pre = pre.with_columns(files["scope"].gather(pairs["file_code"]).alias("scope"))
    pre = pre.group_by("dir0_code", "base_code").agg(pl.col("run_kind").any(), pl.col("scope").first())
    pre = pre.select(dir0["dir"].gather(pre["dir0_code"]).alias("dir"),
                     bases["base_job_id"].gather(pre["base_code"]).alias("base_job_id"), "run_kind", "scope")
    files = files.with_columns(pl.col("dir").replace_strict(_fold_dirs(pre), default=pl.col("dir")).alias("dir"))
    dirs = files.select(pl.col("dir").unique().sort()).with_row_index("dir_code")
    step_files = pairs.filter(pl.col("has_steps"))["file_code"].unique()
    files = files.join(dirs, on="dir", how="left").sort("file_code").with_columns(
        pl.col("file_code").is_in(step_files.implode()).alias("train_file"))
    return files, dirs


def _id_facts(pairs: pl.DataFrame, files: pl.DataFrame, dirs: pl.DataFrame, bases: pl.DataFrame) -> pl.DataFrame:
    """One row per base id of a directory (``dir``, ``base_job_id``), in time order within the
    directory: ``train`` (seen in a file with steps), ``t0``/``t1`` (first record, last
    lifecycle record or else ``t0``) and the first job ``name`` its records state."""
    ids = (
        pairs.with_columns(files["train_file"].gather(pairs["file_code"]).alias("train"))
        .filter(pl.col("base_code").is_not_null())
        .group_by("dir_code", "base_code")
        .agg(
            pl.col("train").any(),
            pl.col("t_min").min().alias("t0"),
            pl.col("t_life").max().alias("t1"),
            pl.col("stated_job").sort_by("name_block").drop_nulls().first().alias("name"),
        )
        .with_columns(pl.col("t1").fill_null(pl.col("t0")))
    )
    ids = ids.with_columns(dirs["dir"].gather(ids["dir_code"]).alias("dir"),
                           bases["base_job_id"].gather(ids["base_code"]).alias("base_job_id"))
    return ids.sort("dir", "t0", "base_job_id", nulls_last=True)


def _chain_ids(ids: pl.DataFrame) -> tuple[dict[tuple[str, str], str], dict[str, str]]:
    """Chain the base ids of each directory into runs: ({(dir, base): run key}, {run key:
    identity}). A small loop over scheduler ids (not over records)."""
    run_of: dict[tuple[str, str], str] = {}
    identity_of: dict[str, str] = {}
    for d, grp in ids.group_by("dir", maintain_order=True):
        _chain_dir(str(d[0]), grp, run_of, identity_of)
    return run_of, identity_of


def _chain_dir(dname: str, ids: pl.DataFrame, run_of: dict[tuple[str, str], str], identity_of: dict[str, str]) -> None:
    """``_chain_ids`` for the ids of one directory, in time order; a run is [key, end]."""
    open_runs: list[list] = []
    by_name: dict[str, list] = {}
    for row in ids.iter_rows(named=True):
        base, name, t0, t1 = row["base_job_id"], row["name"], row["t0"], row["t1"]
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
        best = _run_continued(open_runs, base, t0, row["train"], identity_of)
        if best is None:
            best = [f"{dname}::{base}", t1]
            open_runs.append(best)
            identity_of[best[0]] = "scheduler"
        else:
            best[1] = max(x for x in (best[1], t1) if x is not None) if (best[1] or t1) else None
        run_of[(dname, base)] = best[0]


def _run_continued(open_runs: list[list], base: str | None, t0: int | None, train: bool,
                   identity_of: dict[str, str]) -> list | None:
    """The open run a nameless id starting at ``t0`` continues (the latest ending before it), if any."""
    # Only numeric (Slurm) ids are resubmitted under a new id; a Kubernetes owner keeps its name
    # across pod restarts, so another name is another job.
    if base is None or not base.split("_")[0].isdigit():
        return None
    best = None
    for run in open_runs:
        if not run[0].rsplit("::", 1)[-1].split("_")[0].isdigit():
            continue
        # A nameless id seen only in scheduler files (another user's job in a shared controller
        # log) never continues a run known by its name.
        if not train and identity_of.get(run[0]) == "job-name":
            continue
        if t0 is None or run[1] is None or run[1] <= t0 + 1_000_000:
            if best is None or (run[1] or 0) > (best[1] or 0):
                best = run
    return best


def _with_named_files(pairs: pl.DataFrame, files: pl.DataFrame, runs: pl.Series) -> pl.DataFrame:
    """``file_named``: the run a file's name starts with ('wild-007-master-0.log' -> 'wild-007', a pod's
    log named after its pod, the pod after its job), the longest such name; null for the others."""
    stem = pl.col("file").fill_null("").str.extract(r"([^/\\]+)$", 1).str.to_lowercase()
    named = files.select("file_code", "dir", stem.alias("_stem"))
    found: list[pl.DataFrame] = []
    # A run's key is '<dir>::<name>'; a few runs per directory: one cheap filter each, longest name first.
    keys = [(code, *key.rsplit("::", 1)) for code, key in enumerate(runs.to_list()) if "::" in key]
    for code, where, name in sorted(keys, key=lambda x: -len(x[2])):
        starts = (pl.col("_stem").str.starts_with(name.lower())
                  & pl.col("_stem").str.slice(len(name), 1).is_in(["-", "_", ".", ""])
                  & ((pl.col("dir") == where) | pl.col("dir").str.starts_with(where + "/")))
        found.append(named.filter(starts).select("file_code", pl.lit(code, pl.Int64).alias("file_named")))
    by_file = pl.concat(found).unique("file_code", keep="first", maintain_order=True) if found else None
    if by_file is None or by_file.height == 0:
        return pairs.with_columns(pl.lit(None, pl.Int64).alias("file_named"))
    return pairs.join(by_file, on="file_code", how="left", maintain_order="left")


def _pair_jobs(pairs: pl.DataFrame, dirs: pl.DataFrame, bases: pl.DataFrame, run_of: dict[tuple[str, str], str],
               identity_of: dict[str, str], runs: pl.Series) -> pl.DataFrame:
    """The pairs with ``job_code``, their job's code (``runs`` then the directories' own keys).

    A pair with an id takes its run; one without takes the run most of its file's records
    belong to, else the run its file is named after (``file_named``), else the directory's main
    run: a run known by its job name first, then the one whose records come from the most files,
    then the one with the most records (other users' jobs in a shared controller log are
    nameless, live in that one file and, chained one after the other, can still outnumber the
    run's own scheduler records), else the directory itself.
    (The time spans of runs are not consulted: a look-up limited to the main run, as this one
    was, can only give the main run.)
    """
    code = {name: i for i, name in enumerate(runs.to_list())}
    mapping = pl.DataFrame(
        {"dir": [k[0] for k in run_of], "base_job_id": [k[1] for k in run_of],
         "run_code": [code[v] for v in run_of.values()]},
        schema={"dir": pl.String, "base_job_id": pl.String, "run_code": pl.Int64},
    ).join(dirs, on="dir").join(bases, on="base_job_id").select("dir_code", "base_code", "run_code")
    pairs = pairs.join(mapping, on=["dir_code", "base_code"], how="left", maintain_order="left")
    with_run = pairs.filter(pl.col("run_code").is_not_null())
    file_run = (
        with_run.group_by("file_code", "run_code").agg(pl.col("n").sum().alias("len"))
        .sort("len", "run_code", descending=[True, False])
        .group_by("file_code", maintain_order=True)
        .first()
        .select("file_code", pl.col("run_code").alias("file_job"))
    )
    named = [code[k] for k, v in identity_of.items() if v == "job-name"]
    first_run = (
        with_run.group_by("dir_code", "run_code")
        .agg(pl.col("n").sum().alias("len"), pl.col("file_code").n_unique().alias("_nf"))
        .with_columns(pl.col("run_code").is_in(named).alias("_named"))
        .sort("_named", "_nf", "len", "run_code", descending=[True, True, True, False])
        .group_by("dir_code", maintain_order=True)
        .agg(pl.col("run_code").first().alias("dir_job"))
    )
    pairs = pairs.join(file_run, on="file_code", how="left", maintain_order="left").join(
        first_run, on="dir_code", how="left", maintain_order="left")
    return pairs.with_columns(
        pl.coalesce("run_code", "file_job", "file_named", "dir_job",
                    runs.len() + pl.col("dir_code").cast(pl.Int64)).alias("job_code")
    ).drop("file_named")


def _job_table(pairs: pl.DataFrame, names: pl.Series, dirs: pl.DataFrame, bases: pl.DataFrame,
               identity_of: dict[str, str]) -> pl.DataFrame:
    """One row per job: ``job``, ``path``, ``job_ids`` (base ids by their first timed record)
    and ``identity``, sorted by ``job``."""
    timed_id = pl.col("base_code").is_not_null() & pl.col("t_min").is_not_null()
    pairs = pairs.sort("t_min", "t_min_block", nulls_last=True)
    jobs = (
        pairs.with_columns(bases["base_job_id"].gather(pairs["base_code"]).alias("job_ids"))
        .group_by("job_code")
        .agg(pl.col("dir_code").first().alias("path"), pl.col("job_ids").filter(timed_id).unique(maintain_order=True))
        .with_columns(pl.when(pl.col("job_ids").list.len() > 0).then(pl.col("job_ids")).alias("job_ids"))  # none: null
    )
    return (
        jobs.with_columns(names.gather(jobs["job_code"]).alias("job"), dirs["dir"].gather(jobs["path"]).alias("path"))
        .select("job", "path", "job_ids")
        .with_columns(
            pl.col("job").replace_strict(identity_of, default="directory", return_dtype=pl.String).alias("identity")
        )
        .sort("job")
    )


SAME_MOMENT_US = 5_000_000  # stamps this close may be out of order (resolution, skew between hosts)


def _progress_before(markers: pl.DataFrame, progress: pl.DataFrame) -> pl.DataFrame:
    """``progress_before``: how many progress records of the job are stamped more than SAME_MOMENT_US
    before each marker. Both frames are in (job, t) order and ``progress`` counts its records
    per job in ``progress_count`` (1, 2, ...): the count at the last one stamped before is the answer."""
    # An as-of join by job needs its keys sorted within each job only: no sort of either side.
    return (
        markers.with_columns((pl.col("t") - SAME_MOMENT_US).alias("_t_old"))
        .join_asof(progress.select("job", pl.col("t").alias("_t_prog"),
                                   pl.col("progress_count").alias("progress_before")),
                   left_on="_t_old", right_on="_t_prog", by="job", strategy="backward",
                   allow_exact_matches=False, check_sortedness=False)
        .with_columns(pl.col("progress_before").fill_null(0))
        .drop("_t_old", "_t_prog")
    )


def assign_attempts(events: pl.DataFrame, keep: pl.Series | None = None) -> pl.DataFrame:
    """Add ``attempt_idx`` (0-based, per job, in time order) to every timed event, of the jobs
    ``keep`` (None: all; the others' events are left out).

    Events without a time get the attempt of the previous timed event of their file (they
    cannot open an attempt).
    """
    kept = pl.lit(True) if keep is None else pl.col("job").is_in(keep.implode())
    # The attempts are found on the few columns they depend on, in time order; the other
    # columns are reordered once, at the end.
    timed = _attempt_numbers(_in_attempt_order(events, kept))
    timed = events[timed["position"]].with_columns(timed["attempt_idx"])
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


def _in_attempt_order(events: pl.DataFrame, kept: pl.Expr) -> pl.DataFrame:
    """The timed records of the kept jobs in (job, t) order, ends and steps before starts at
    equal times, then as they come: ``position`` (row in ``events``), ``job``, ``t``, ``is_progress`` (a
    progress record), ``is_marker`` (a start marker) and ``step_logged`` (the step of a step record)."""
    kind = pl.col("kind")
    keys = events.select(
        "job", "t", "row", kind.is_in(PROGRESS_KINDS).alias("is_progress"), kind.is_in(MARKER_KINDS).alias("is_marker"),
        pl.when((kind == "step") & pl.col("step").is_not_null()).then(pl.col("step")).alias("step_logged"),
    ).with_row_index("position").filter(pl.col("t").is_not_null() & kept)
    later_kind = pl.col("is_progress").not_()
    # Records in row-id order (as they come) sort stably on (job, t, kind order) packed into one
    # integer, which breaks ties by row id as the four-column sort does.
    packed = None
    if keys["row"].is_sorted():
        packed = packed_key(keys.with_columns(later_kind.cast(pl.Int8).alias("_ko")), ["job", "t", "_ko"])
    if packed is None:
        order = keys.select(pl.arg_sort_by("job", "t", later_kind, "row"))[:, 0]
    else:
        order = keys.with_columns(later_kind.cast(pl.Int8).alias("_ko")).select(
            pl.arg_sort_by(packed, maintain_order=True))[:, 0]
    timed = keys.drop("row")[order]
    if timed["job"].null_count() == 0:  # in job order: windows over jobs take slices
        timed = timed.with_columns(pl.col("job").set_sorted())
    return timed


def _attempt_numbers(timed: pl.DataFrame) -> pl.DataFrame:
    """``attempt_idx`` of the records (``_in_attempt_order``)."""
    is_prog = pl.col("is_progress")
    timed = timed.with_columns(is_prog.cast(pl.Int64).cum_sum().over("job").alias("progress_count"), _step_back())
    timed = timed.with_columns((pl.col("is_marker") | pl.col("step_back")).alias("opens"))
    markers = timed.filter(pl.col("opens")).select("job", "t", "progress_count", "step_back")
    # For a backward step, "progress since the last marker" counts the step itself.
    markers = markers.with_columns(
        pl.when(pl.col("step_back")).then(pl.col("progress_count") - 1).otherwise(pl.col("progress_count"))
        .alias("progress_since")
    )
    # A marker opens an attempt when progress came since the previous one, not counting progress
    # stamped within seconds before it: second-resolution stamps and clock skew between hosts
    # put an attempt's first step at or just before its start, init or load lines.
    markers = _progress_before(markers, timed.filter(is_prog)).with_columns(
        (pl.col("progress_since").shift(1).over("job").is_null()
         | (pl.col("progress_before") > pl.col("progress_since").shift(1).over("job"))).alias("new_attempt")
    )
    # A backward step with no marker since the last progress opens an attempt too. (The markers
    # are the marked rows in order: their flags go back to those positions.)
    where = timed.select(pl.col("opens").arg_true())[:, 0]
    new = pl.repeat(False, timed.height, dtype=pl.Boolean, eager=True).alias("new_attempt")
    new = new.scatter(where, markers["new_attempt"])
    timed = timed.with_columns(new)
    # The first marker of the job is attempt 0 and so are events before it.
    opened = pl.col("new_attempt").cast(pl.Int32).cum_sum().over("job")
    timed = timed.with_columns((opened - 1).clip(0).alias("attempt_idx"))
    # If the first marker of a job comes after progress (more than seconds of it, as above), that
    # progress was an attempt of its own.
    first_marker_prog = markers.group_by("job").agg(pl.col("progress_before").first().alias("first_marker_progress"))
    return timed.join(first_marker_prog, on="job", how="left").with_columns(
        pl.when(pl.col("first_marker_progress") > 0)
        .then(
            pl.col("attempt_idx")
            + pl.when(pl.col("new_attempt").cast(pl.Int32).cum_sum().over("job") > 0).then(1).otherwise(0)
        )
        .otherwise(pl.col("attempt_idx"))
        .cast(pl.Int32)
        .alias("attempt_idx")
    )


def _step_back() -> pl.Expr:
    """``step_back``: a step more than 2 below the previous step record of the job (which also opens
    an attempt); rows in job order."""
    # Over the whole table, then kept where the previous step record is of the same job (the
    # runs of equal jobs number them): no window per job.
    step = pl.col("step_logged")
    grp = pl.col("job").rle_id()
    prev = pl.when(pl.when(step.is_not_null()).then(grp).shift(1).forward_fill() == grp).then(
        step.shift(1).forward_fill())
    return (step.is_not_null() & (step < prev - 2)).fill_null(False).alias("step_back")
