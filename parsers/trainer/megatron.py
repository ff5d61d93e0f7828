"""Megatron-LM / Megatron-DeepSpeed: iterations, validation, checkpoints, start-up and exit banners.

Iteration records are sometimes hard-wrapped by the publisher or the terminal (``learning`` /
`` rate``, ``iteratio`` / ``ns``): a record that does not end with ``|`` swallows up to three
following lines, concatenated as they are (the wrap may fall inside a word, so no separator is
added and field patterns tolerate missing blanks); ``line_end`` is the last line swallowed.

Older builds print no clock on iteration lines. Their time is rebuilt from the latest clock a
line of the file states (``datetime:`` banners, DeepSpeed's ``[ts]`` records, a collector
prefix) plus the per-iteration time × iterations since the previous logged iteration (the log
interval), summed over the iterations logged since that clock; such rows get ``ts_inferred``.

``loss`` is ``lm loss`` (NaN / inf as printed). Megatron omits it when no iteration of the log
interval produced a loss: then it is NaN when the interval had NaN iterations (or says nothing),
and null when its iterations were all skipped for fp16 overflow (a calibrating loss scaler is no
numerics failure).

Exits the trainer decides itself (``exiting program after N minutes`` — the time budget,
``exiting program at iteration N``, ``after training is done``) are ``job_end`` rows with state
COMPLETED and code 0; exits on a signal or a kill switch are ``info`` rows with state ``EXIT`` (the
scheduler's records say why the job ended).
A start without a checkpoint (``will not load any checkpoints and will start from random``)
is a ``ckpt_load`` at step 0.
"""

from __future__ import annotations

import polars as pl
from toranalyze_parsers.trainer.common import NUM, NUM_OR_NAN, add_seconds, field, message, part, to_int

from toranalyze.parser_api import NAIVE_US, contains_any, file_key, file_starts, fill_where

_ITER = r"(?:^|\s)iteration\s+([0-9]+)\s*/\s*([0-9]+|infinity)\s*\|"
# A line that starts a record of its own is never a continuation of a wrapped iteration line.
_NEW_RECORD = (
    r"^\s*(?:iteration\s+[0-9]|time \(ms\)|\[|-{5}|valid(?:ation)? loss|saving|\s*successfully|\(min, max\)"
    r"|training \.\.\.|$)"
)
_MAX_WRAP = 3

_ELAPSED = r"elapsed time per iteration \((ms|s)\):\s*(" + NUM + ")"
# 'lm loss: 2.3E+00', GPT-NeoX 'lm_loss: …', forks without the colon ('lm loss 2.3E+00 |')
_LM_LOSS = rf"lm[\s_]*loss:?\s*({NUM_OR_NAN})"
_ANY_LOSS = rf"\|\s*loss:?\s*({NUM_OR_NAN})"
_EVAL = r"valid(?:ation)? loss at iteration\s+([0-9]+)"

_SAVE_BEGIN = r"(?:^|\s)saving checkpoint at iteration\s+([0-9]+)"
_SAVE_END = r"(?i)successfully saved checkpoint (?:at|from) iteration\s+([0-9]+)"
_LOAD = r"(?:^|\s)loading (?:\w+ )?checkpoint from \S+ at iteration\s+([0-9]+)"
_LOADED = r"successfully loaded (?:\w+ )?checkpoint from .*?at iteration\s+([0-9]+)"
_NO_CKPT = r"could not find the metadata file"
_SAVE_TIMER = r"save-checkpoint(?:\s*\.+)?:\s*\(?(" + NUM + r")(?:,\s*(" + NUM + r")\))?"

_INIT = (
    r"^\s*(?:using world size:\s*[0-9]+|> initializing torch distributed"
    r"|> initiali(?:zing|zed) tensor model parallel with"
    r"|building \w+ model \.\.\.)"
)
_WORLD = r"using world size:\s*([0-9]+)"
_INIT_DONE = r"^\s*training \.\.\.\s*$|\[(?:after dataloaders are built|before the start of training step)\] datetime:"
_TTI = r"time to initialize megatron \(seconds\):\s*(" + NUM + ")"
_AFTER_INIT = r"\[after megatron is initialized\] datetime:"
_DONE = r"exiting program (?:after [0-9.]+ minutes|at iteration\s+[0-9]+)|\[after training is done\] datetime:"
_EXIT = r"exiting program after receiving SIGTERM|Detected kill switch at"
# Forks print a warning when a step's gradient norm is not finite (the step is then skipped).
_BAD_GRAD = r"Bad grad_?norm detected|grad_?norm\s*=\s*(?:nan|inf)\b"

NOISE: tuple[str, ...] = (
    r"^\s*time \(ms\)",
    r"\(min, max\) time across ranks \(ms\):",
    r"^\s+[\w\-/ ]+?\s*\.{3,}:?\s*\(\s*" + NUM + r",\s*" + NUM + r"\)",
    r"\(after [0-9]+ iterations\) memory \(MB\)",
    r"^\s*after [0-9]+ iterations memory \(MB\)",
    r"^Effective Tera Flops per GPU:",
    r"^-{20,}\s*$",
    r"^-+ (?:end of )?arguments -+\s*$",
    r"^\s{2}\w+ \.{3,} ",  # the arguments dump
    r"^\s*>{1,3} ",  # Megatron's print_rank_0 start-up chatter ('> building …', ' > loading …', '>>> done …')
    r"\] datetime: [0-9]{4}-[0-9]{2}-[0-9]{2}",
    r"^\s*(?:time to initialize megatron|setting number of micro-batches|using torch\.\w+ for parameters"
    r"|done with setups? \.\.\.|building \w+ model \.\.\.|training \.\.\.\s*$|Evaluating iter [0-9]+)",
    r"^\s+(?:reading sizes|reading pointers|reading document index|creating numpy buffer|creating memory view"
    r"|loaded indexed file|total number of (?:samples|epochs)|number of documents|document indices in"
    r"|(?:train|validation|test):|will not load any checkpoints)",
    r"^make: (?:Entering|Leaving) directory|^make: Nothing to be done",
    r"^(?:Detected CUDA files, patching ldflags|Emitting ninja build file|Building extension module"
    r"|Loading extension module|Allowing ninja to set a default number of workers|ninja: no work to do)",
    # torch's compiler-mismatch warning, printed once per fused kernel built at start-up
    r"cpp_extension\.py:[0-9]+: UserWarning:\s*$|^\s*!! WARNING !!\s*$|^!{20,}\s*$"
    r"|warnings\.warn\(WRONG_COMPILER_WARNING",
    r"^(?:Your compiler \(\S+\) is not compatible with the compiler Pytorch was|built with for this platform, "
    r"which is|use \S+ to to compile your extension|compile PyTorch from source using|\S+ to compile your extension\."
    r"|See https://github\.com/pytorch/pytorch/blob/master/CONTRIBUTING\.md|with compiling PyTorch from source\.)",
    _SAVE_BEGIN,
    _SAVE_END,
    _LOAD,
    _LOADED,
)


def _ends_record(s: pl.Expr) -> pl.Expr:
    return s.str.strip_chars_end().str.ends_with("|")


def _joined(lines: pl.LazyFrame) -> pl.LazyFrame:
    """Iteration rows with ``_rec`` = the record text (wrapped lines joined) and ``line_end``."""
    t = pl.col("text")
    # The step is read here, from the record's first line (where _ITER matched, so joining the
    # wrapped lines cannot move the match): one regex pass both selects and reads.
    iters = (
        lines.filter(t.str.contains("iteration", literal=True))
        .with_columns(t.str.extract(_ITER, 1).alias("_step"))
        .filter(pl.col("_step").is_not_null())
        .with_columns(_ends_record(t).alias("_ends"))
        .collect()
    )
    whole = iters.filter("_ends").with_columns(t.alias("_rec"), pl.lit(None, pl.Int64).alias("line_end"))
    wrapped = iters.filter(~pl.col("_ends"))
    if wrapped.height == 0:
        return whole.drop("_ends").lazy()
    return _wrapped_joined(lines, whole.drop("_ends"), wrapped.drop("_ends").lazy())


def _wrapped_joined(lines: pl.LazyFrame, whole: pl.DataFrame, wrapped: pl.LazyFrame) -> pl.LazyFrame:
    """``whole`` records and the ``wrapped`` ones with up to _MAX_WRAP following lines joined."""
    t = pl.col("text")
    # Only wrapped records look ahead: the following lines are fetched by line number.
    need = pl.concat([wrapped.select((pl.col("line") + k).alias("line")) for k in range(1, _MAX_WRAP + 1)])
    following = lines.join(need, on="line", how="semi").unique("line", keep="first").select("line", "text")
    for k in range(1, _MAX_WRAP + 1):
        wrapped = wrapped.join(
            following.select((pl.col("line") - k).alias("line"), pl.col("text").alias(f"_n{k}")),
            on="line",
            how="left",
        )
    rec: pl.Expr = t
    extra: pl.Expr = pl.lit(None, pl.Int64)
    going: pl.Expr = pl.lit(True)
    for k in range(1, _MAX_WRAP + 1):
        nxt = pl.col(f"_n{k}")
        going = (going & ~_ends_record(rec) & nxt.is_not_null() & ~nxt.str.contains(_NEW_RECORD)).fill_null(False)
        rec = pl.when(going).then(rec + nxt).otherwise(rec)
        extra = pl.when(going).then(pl.lit(k, pl.Int64)).otherwise(extra)
    wrapped = wrapped.with_columns(rec.alias("_rec"), (pl.col("line") + extra).alias("line_end")).drop(
        [f"_n{k}" for k in range(1, _MAX_WRAP + 1)]
    )
    return pl.concat([whole.lazy(), wrapped], how="vertical").sort("_i")


def _iterations(records: pl.DataFrame) -> pl.LazyFrame:
    """Step rows of the iteration ``records`` (``_joined``)."""
    rec = pl.col("_rec")
    el = rec.str.extract_groups(_ELAPSED)
    per = pl.when(el.struct.field("1") == "ms").then(1000.0).otherwise(1.0)
    secs = (el.struct.field("2").cast(pl.Float64, strict=False) / per).round(9)  # ms -> s without binary noise
    return records.with_columns(_loss(records)).lazy().select(
        "line",
        "line_end",
        "p_ts",
        pl.lit("step").alias("kind"),
        pl.lit("info").alias("severity"),
        to_int(pl.col("_step")).alias("step"),
        secs.alias("step_time_s"),
        "loss",
        rec.str.strip_chars().alias("message"),
    )


def _loss(records: pl.DataFrame) -> pl.Series:
    """'lm loss', else any '| loss', else what the dropped-loss rule gives; each fallback is
    searched only in the records the previous one left without a loss (usually none)."""
    # Megatron leaves the loss out when no iteration of the interval produced one: NaN iterations
    # (loss NaN) or fp16-overflow skips (loss unknown, null: a skipped step is no numerics failure).
    nan_its = field(r"number of nan\s*iterations:\s*([0-9]+)", "_rec")
    skipped = field(r"number of skipped\s*iterations:\s*([0-9]+)", "_rec")
    dropped = pl.when((nan_its.fill_null(0) == 0) & (skipped.fill_null(0) > 0)).then(None).otherwise(float("nan"))
    loss = records.select(field(_LM_LOSS, "_rec").alias("loss")).to_series()
    for fallback in (field(_ANY_LOSS, "_rec"), dropped):
        loss = fill_where(loss, records, loss.is_null(), fallback.cast(pl.Float64, strict=False))
    return loss


def _save_timers(lines: pl.LazyFrame) -> pl.LazyFrame:
    """'time (ms) | save-checkpoint: 57514.53' or a '(min, max)' block row -> (line, _save_s) (max)."""
    t = pl.col("text")
    timer = t.str.extract_groups(_SAVE_TIMER)
    secs = pl.max_horizontal(
        timer.struct.field("1").cast(pl.Float64, strict=False), timer.struct.field("2").cast(pl.Float64, strict=False)
    )
    return (
        lines.filter(t.str.contains("save-checkpoint", literal=True))
        .select("line", (secs / 1000.0).round(9).alias("_save_s"))
        .filter(pl.col("_save_s").is_not_null())
        .unique("line", keep="first", maintain_order=True)
    )


def _start_times(lines: pl.LazyFrame) -> pl.LazyFrame:
    """'[after megatron is initialized] datetime: T' − 'time to initialize megatron (seconds): X' = the
    process start, as (line, _started)."""
    t = pl.col("text")
    tti = lines.filter(t.str.contains("time to initialize megatron", literal=True)).select(
        "line", field(_TTI).alias("_tti")
    )
    after = lines.filter(t.str.contains(_AFTER_INIT)).select("line", "clock")
    return (
        after.join_asof(tti, on="line", strategy="backward", tolerance=3)
        .select("line", add_seconds(pl.col("clock"), -pl.col("_tti")).alias("_started"))
        .filter(pl.col("_started").is_not_null())
    )


def _iteration_index(records: pl.DataFrame) -> pl.LazyFrame:
    """(line, _block): how many iteration records start at or before each iteration line."""
    its = records.lazy().select("line").unique()
    block = pl.col("_block").cast(pl.Int64, strict=False)
    return its.sort("line").with_row_index("_block", offset=1).with_columns(block)


def _block_of(frame: pl.LazyFrame, index: pl.LazyFrame, name: str) -> pl.LazyFrame:
    return frame.join_asof(index.rename({"_block": name}), on="line", strategy="backward").with_columns(
        pl.col(name).fill_null(0)
    )


# Every line _simple_kind tags holds one of these (a cheap literal test before the regexes).
_SIMPLE_WORDS = (
    "grad_norm", "gradnorm", "loss at iteration", "checkpoint", "datetime:", "training ...", "> initiali",
    "world size", "model ...", "kill switch", "exiting program",
)


def _simple_kind(t: pl.Expr) -> pl.Expr:
    """The kind of a one-line record; null for other lines."""
    return (
        pl.when(t.str.contains(_EVAL)).then(pl.lit("eval_end"))
        .when(t.str.contains(_SAVE_BEGIN)).then(pl.lit("ckpt_save_begin"))
        .when(t.str.contains(_SAVE_END)).then(pl.lit("ckpt_save_end"))
        .when(t.str.contains(_LOAD) | t.str.contains(_LOADED) | t.str.contains(_NO_CKPT)).then(pl.lit("ckpt_load"))
        .when(t.str.contains(_INIT)).then(pl.lit("init"))
        .when(t.str.contains(_INIT_DONE)).then(pl.lit("init_done"))
        .when(t.str.contains(_DONE)).then(pl.lit("job_end"))
        .when(t.str.contains(_EXIT)).then(pl.lit("info"))
        .when(t.str.contains(_BAD_GRAD)).then(pl.lit("warning"))
    )


def _simple_step(t: pl.Expr) -> pl.Expr:
    """The iteration an eval, checkpoint or exit line names (as text)."""
    return pl.coalesce(
        t.str.extract(_EVAL, 1),
        t.str.extract(_SAVE_BEGIN, 1),
        t.str.extract(_SAVE_END, 1),
        t.str.extract(_LOAD, 1),
        t.str.extract(_LOADED, 1),
        t.str.extract(r"exiting program at iteration\s+([0-9]+)", 1),
    )


def _after_no_ckpt(lines: pl.LazyFrame) -> pl.LazyFrame:
    """(line, _next): the text of the line after each 'could not find the metadata file …' line,
    which it continues."""
    t = pl.col("text")
    after_no_ckpt = lines.filter(t.str.contains(_NO_CKPT)).select((pl.col("line") + 1).alias("line"))
    return (
        lines.join(after_no_ckpt, on="line", how="semi")
        .unique("line", keep="first")
        .select((pl.col("line") - 1).alias("line"), pl.col("text").alias("_next"))
    )


def _with_timers_and_starts(rows: pl.LazyFrame, lines: pl.LazyFrame, records: pl.DataFrame) -> pl.LazyFrame:
    """``rows`` with ``_save_s`` and ``_started``: a save's duration is printed by the timer just
    after it; an init banner takes the start time derived later in the same start-up (no iteration
    in between). (A start-up of another file of a batch never counts: its line says which file it is in.)"""
    index = _iteration_index(records)
    started = _block_of(_start_times(lines).sort("line"), index, "_sblock").with_columns(file_key().alias("_sfile"))
    same = (pl.col("_sblock") == pl.col("_block")) & (pl.col("_sfile") == file_key())
    return (
        _block_of(rows, index, "_block")
        .join_asof(_save_timers(lines).sort("line"), on="line", strategy="forward", tolerance=3)
        .join_asof(started, on="line", strategy="forward")
        .with_columns(pl.when(same).then(pl.col("_started")).alias("_started"))
    )


def _simple_columns(rows: pl.LazyFrame) -> pl.LazyFrame:
    """The event columns of the one-line records."""
    t = pl.col("text")
    kind = pl.col("kind")
    no_ckpt_end = (
        t.str.contains(_NO_CKPT) & pl.col("_next").str.contains("will not load any checkpoints", literal=True)
    ).fill_null(False)
    ts = (
        pl.when(kind == "init").then(pl.col("_started"))
        .when(t.str.contains("datetime:", literal=True)).then(pl.col("clock"))
    )
    minutes = field(r"exiting program after ([0-9.]+) minutes")
    return rows.select(
        "line",
        pl.when(no_ckpt_end).then(pl.col("line") + 1).alias("line_end"),
        "kind",
        pl.when(kind == "warning").then(pl.lit("warning")).otherwise(pl.lit("info")).alias("severity"),
        ts.alias("ts"),
        ((kind == "init") & pl.col("_started").is_not_null()).alias("ts_inferred"),
        pl.when(t.str.contains(_NO_CKPT)).then(pl.lit(0, pl.Int64)).otherwise(to_int(_simple_step(t))).alias("step"),
        pl.when(kind == "eval_end").then(field(rf"lm loss value:\s*({NUM_OR_NAN})")).alias("loss"),
        pl.when(kind == "ckpt_save_end").then(pl.col("_save_s"))
        .when(kind == "job_end").then(minutes * 60.0)
        .alias("duration_s"),
        pl.when(kind == "init").then(to_int(t.str.extract(_WORLD, 1))).alias("n_gpus"),
        pl.when(kind == "job_end").then(pl.lit("COMPLETED"))
        .when(kind == "info").then(pl.lit("EXIT"))
        .alias("state"),
        pl.when(kind == "job_end").then(pl.lit("0")).alias("code"),
        pl.when(no_ckpt_end)
        .then(message() + pl.lit(" ") + pl.col("_next").str.strip_chars())
        .otherwise(message())
        .alias("message"),
    )


def _simple(lines: pl.LazyFrame, records: pl.DataFrame) -> pl.LazyFrame:
    """One-line records: validation, checkpoints, start-up and exit banners (``records``: the
    iteration records, which delimit start-ups)."""
    t = pl.col("text")
    rows = (
        lines.filter(contains_any(t, _SIMPLE_WORDS))
        .with_columns(_simple_kind(t).alias("kind"))
        .filter(pl.col("kind").is_not_null() & ~t.str.contains(_ITER))
        .join(_after_no_ckpt(lines), on="line", how="left")
        .sort("line")
    )
    return _simple_columns(_with_timers_and_starts(rows, lines, records))


def _with_inferred_time(lines: pl.LazyFrame, steps: pl.LazyFrame, simple: pl.LazyFrame) -> pl.LazyFrame:
    """Place clock-less iteration rows: latest clock on a line + the iterations' summed times."""
    anchors = lines.filter(pl.col("clock").is_not_null()).select(
        "line", pl.col("clock").alias("_anchor"), pl.lit(0, pl.Int8).alias("_ord")
    )
    loads = simple.filter(pl.col("kind") == "ckpt_load").select(
        "line", pl.col("step").alias("_load"), pl.lit(1, pl.Int8).alias("_ord")
    )
    s = steps.with_columns(pl.lit(2, pl.Int8).alias("_ord"))
    # At one line the clock comes first, so a step whose own line is dated restarts the sum.
    both = pl.concat([anchors, loads, s], how="diagonal_relaxed").sort("line", "_ord")
    is_step = pl.col("_ord") == 2
    is_anchor = pl.col("_ord") == 0
    ref = pl.coalesce(pl.when(is_step).then(pl.col("step")), pl.col("_load"))
    prev = ref.shift(1).forward_fill().over(file_key())
    nxt = ref.shift(-1).backward_fill().over(file_key())
    span = (
        pl.when(prev.is_not_null() & (pl.col("step") > prev)).then(pl.col("step") - prev)
        .when(nxt.is_not_null() & (nxt > pl.col("step"))).then(pl.min_horizontal(pl.col("step"), nxt - pl.col("step")))
        .otherwise(pl.min_horizontal(pl.col("step"), pl.lit(1)).clip(lower_bound=1))
    )
    spent = pl.when(is_step & pl.col("p_ts").is_null()).then(pl.col("step_time_s") * span).otherwise(0.0)
    # A running count (the window takes slices, not a hash); a file of a batch starts a group.
    group = (is_anchor | file_starts()).cum_sum().set_sorted()
    return (
        both.with_columns(
            group.alias("_group"),
            spent.fill_null(0.0).alias("_spent"),
            pl.col("_anchor").forward_fill().over(file_key()).alias("_base"),
        )
        .with_columns(add_seconds(pl.col("_base"), pl.col("_spent").cum_sum().over("_group")).alias("_placed"))
        .filter(is_step)
        .with_columns(pl.when(pl.col("p_ts").is_null()).then(pl.col("_placed")).alias("ts"))
        .with_columns(pl.col("ts").is_not_null().alias("ts_inferred"))
        .drop("_placed", "_load", "_anchor", "_ord", "_group", "_spent", "_base", "p_ts")
    )


def extract(lines: pl.LazyFrame) -> list[pl.LazyFrame]:
    records = _joined(lines).collect()  # the iteration records, read once for steps and the index
    simple = _simple(lines, records).collect().lazy()  # used twice
    steps = _iterations(records)
    if records["p_ts"].null_count() == 0:  # every record dated by its prefix: nothing to place
        steps = steps.with_columns(pl.lit(None, NAIVE_US).alias("ts"), pl.lit(False).alias("ts_inferred")).drop("p_ts")
    else:
        steps = _with_inferred_time(lines, steps, simple)
    return [part(steps), part(simple)]
