"""Ingest speed and memory against the scripts a user would write instead.

Generates a mixed corpus of a chosen size from the simulator and measures, each step in a fresh
child process (so peak RSS is that step's own):

* ``ingest``: the real pipeline (``toranalyze.ingest.pipeline.ingest``), MB/s, lines/s, peak RSS;
* baseline A: polars ``scan_lines(...).select(pl.len())`` over the same files (bare line splitting,
  the practical ceiling);
* baseline B: a per-line Python loop trying each family's main ``re`` pattern and extracting the
  same fields (what one writes by hand);
* sketch: the one-query design the speed target was set from (one lazy polars query over all
  files keeping the lines that hold one of 19 keywords, the iteration lines' fields extracted with
  one anchored pattern): it parses far less than the parsers do, so its ratios to the baselines
  bound what any design that reads every line through polars can reach on this machine;
* chatter: one worker (``-j 1``) ingesting one log of ``--chatter-mb`` where under 2% of the lines
  are steps or failures (an input pipeline's logger, health probes, NCCL_DEBUG=INFO init lines;
  ``make_chatter_log``), in MB/s, with baseline B over the same log in the same rounds;
* per-file fixed cost: 1,000 small files (half kernel logs, half short job outputs) against their
  concatenation, (t_files - t_cat) / 1000;
* ``analyze``: ``analyze_events`` on a table of ``--analyze-events`` events (a simulated run's
  events replicated as distinct jobs), with ``--jobs`` threads and the allocator settings of
  ``toranalyze analyze -j`` (toranalyze/launch.py).

The corpus: simulated runs (Slurm and Kubernetes flavours: kernel logs per node, sacct, slurmctld,
pod YAML, events JSON) give the many small files; their largest mixed logs (Slurm .out / pod
logs: NCCL INFO chatter, iteration lines, watchdog and elastic records) are replicated into big
files until the corpus reaches ``--size-mb``. Everything is written under ``--work``.

Usage::

    python benchmarks/ingest_speed.py --size-mb 200
    python benchmarks/ingest_speed.py --size-mb 1024 --jobs 2 --json benchmarks/out/speed.json
    python benchmarks/ingest_speed.py --size-mb 5120 --only ingest        # memory run
    python benchmarks/ingest_speed.py --size-mb 1024 --repeat 3           # medians of 3 rounds
    python benchmarks/ingest_speed.py --only chatter --chatter-mb 100     # the chatter-heavy log alone

With ``--repeat N`` every step runs N times in interleaved rounds; a figure is the median run's
(times print with their range), a speed ratio the median of the rounds' own ratios.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from toranalyze.launch import analysis_allocator

# The environment as the benchmark got it: polars, once loaded here, puts its own allocator
# default into os.environ, which would then pass for a user's setting.
_START_ENV = dict(os.environ)
MB = 1024 * 1024
STEPS = ("ingest", "baseline_a", "baseline_b", "sketch", "chatter", "per_file", "analyze")


# ----------------------------------------------------------------------------- corpus
def _simulate(out: Path, seed: int, preset: str, flavor: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "toranalyze", "simulate", "--out", str(out), "--seed", str(seed),
         "--preset", preset, "--flavor", flavor],
        check=True, stdout=subprocess.DEVNULL,
    )


def make_corpus(work: Path, size_mb: float, big_mb: float = 64.0) -> Path:
    """Simulated runs (small files) plus big mixed logs replicated up to ``size_mb``."""
    corpus = work / f"corpus-{int(size_mb)}"
    stamp = corpus / ".complete"
    if stamp.exists():
        return corpus
    shutil.rmtree(corpus, ignore_errors=True)
    runs = corpus / "runs"
    _simulate(runs / "llama", 1, "llama3-like", "slurm")
    _simulate(runs / "small-slurm", 2, "small", "slurm")
    _simulate(runs / "small-k8s", 3, "small", "kubernetes")
    (runs / "small-slurm" / "truth.json").unlink()
    for r in ("llama", "small-k8s"):
        (runs / r / "truth.json").unlink()
    have = sum(p.stat().st_size for p in corpus.rglob("*") if p.is_file())
    sources = sorted(
        (p for p in runs.rglob("*") if p.is_file() and p.suffix in (".out", ".log") and "nodes" not in p.parts),
        key=lambda p: -p.stat().st_size,
    )[:4]
    texts = [s.read_bytes() for s in sources]
    big = corpus / "big"
    big.mkdir(parents=True)
    i = 0
    while have < size_mb * MB:
        text = texts[i % len(texts)]
        want = min(big_mb * MB, size_mb * MB - have)
        reps = max(1, int(want // len(text)))
        path = big / f"train-{i:04d}.log"
        with path.open("wb") as fh:
            for _ in range(reps):
                fh.write(text)
        have += path.stat().st_size
        i += 1
    stamp.write_text("ok\n")
    return corpus


def corpus_files(corpus: Path) -> list[Path]:
    return sorted(p for p in corpus.rglob("*") if p.is_file() and not p.name.startswith("."))


def small_files(work: Path, n: int = 1000) -> tuple[Path, Path]:
    """``n`` small files and their concatenation: every other one a node's kernel log (copies of
    simulated ones), the others a short job's output (40 to 1,200 lines of a simulated Slurm
    ``.out``: launcher, NCCL, trainer and Slurm lines), the small files a fleet holds most of."""
    base = work / f"small-files-mixed-{n}"
    many, cat = base / "many", base / "cat" / "all.log"
    if (base / ".complete").exists():
        return many, cat
    shutil.rmtree(base, ignore_errors=True)
    src = work / "small-src"
    if not src.exists():
        _simulate(src, 7, "small", "slurm")
    kernel = sorted(p for p in src.rglob("kern.log"))
    outs = [p.read_text().splitlines(keepends=True) for p in sorted(src.glob("*.out"))]
    sizes = (40, 80, 150, 300, 600, 1200)
    many.mkdir(parents=True)
    cat.parent.mkdir(parents=True)
    with cat.open("wb") as out:
        for k in range(n):
            if k % 2 == 0:
                data = kernel[(k // 2) % len(kernel)].read_bytes()
                name = f"node-{k:04d}.log"
            else:
                lines = outs[(k // 2) % len(outs)]
                size = sizes[(k // 2) % len(sizes)]
                start = (k * 7919) % max(1, len(lines) - size)
                data = "".join(lines[start : start + size]).encode()
                name = f"job-{k:04d}.out"
            (many / name).write_bytes(data)
            out.write(data)
    (base / ".complete").write_text("ok\n")
    return many, cat


# ----------------------------------------------------------------------------- chatter log
# A log where almost nothing matters: an input pipeline's logger, health probes answered every
# second and NCCL's init chatter (NCCL_DEBUG=INFO), with one Megatron iteration line in a hundred
# and a failure every ~20,000 lines. Seeded: the same bytes every run.
_CHATTER_SHARDS = ("pile", "c4-en", "stack-dedup", "arxiv", "wiki-2024")


def _pipeline_line(rng: random.Random, t: str) -> str:
    shard = f"/lustre/datasets/{rng.choice(_CHATTER_SHARDS)}/shard-{rng.randrange(4096):05d}.arrow"
    worker = rng.randrange(16)
    return rng.choice((
        f"{t},{rng.randrange(1000):03d} - data.loader - INFO - [worker {worker}] loaded {shard} "
        f"({rng.randrange(8192, 262144)} rows, {rng.uniform(4, 64):.1f} MiB) in {rng.uniform(0.1, 3):.2f} s",
        f"{t},{rng.randrange(1000):03d} - data.prefetch - INFO - queue depth {rng.randrange(17)}/16, "
        f"waited {rng.uniform(0, 0.02):.4f} s for batch {rng.randrange(10**6)}",
        f"{t},{rng.randrange(1000):03d} - data.tokenizer - DEBUG - [worker {worker}] tokenized "
        f"{rng.randrange(1024, 65536)} samples at {rng.randrange(50_000, 400_000)} samples/s",
        f"{t},{rng.randrange(1000):03d} - data.sampler - INFO - epoch 0: {rng.randrange(10**8)} of 512000000 "
        f"samples drawn, mixture weights pile=0.45 c4=0.30 stack=0.15 arxiv=0.10",
    ))


def _probe_line(rng: random.Random, now: dt.datetime, host: str) -> str:
    ip = f"10.42.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    return rng.choice((
        f'{ip} - - [{now:%d/%b/%Y:%H:%M:%S} +0000] "GET /healthz HTTP/1.1" 200 2 "-" "kube-probe/1.29"',
        f'INFO:     {ip}:{rng.randrange(30000, 65000)} - "GET /metrics HTTP/1.1" 200 OK',
        f"[probe] {host} gpus=8/8 temp_max={rng.randrange(38, 78)}C power={rng.randrange(90, 700)}W "
        f"util={rng.randrange(101)}% mem_used={rng.randrange(1, 80)}GiB ib0=up ib1=up "
        f"latency_ms={rng.uniform(0.2, 9):.1f}",
    ))


def _nccl_init_line(rng: random.Random, host: str, pid: int, dev: int) -> str:
    head = f"{host}:{pid}:{pid + 70 + dev} [{dev}] NCCL INFO"
    c = rng.randrange(32)
    return rng.choice((
        f"{head} Bootstrap : Using eth0:10.42.{dev}.{rng.randrange(1, 255)}<0>",
        f"{head} NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)",
        f"{head} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB eth0:10.42.0.7<0>",
        f"{head} Using network IB",
        f"{head} NCCL_IB_HCA set to mlx5_0,mlx5_1,mlx5_2,mlx5_3",
        f"{head} Setting affinity for GPU {dev} to ffff,ffffffff,00000000,0000ffff,ffffffff",
        f"{head} Channel {c:02d}/32 :    0   1   2   3   4   5   6   7",
        f"{head} Channel {c:02d}/0 : {dev}[{dev}] -> {(dev + 1) % 8}[{(dev + 1) % 8}] via P2P/CUMEM/read",
        f"{head} Channel {c:02d}/1 : {dev}[{dev}] -> {dev + 8}[{dev}] [send] via NET/IB/{dev % 4}/GDRDMA",
        f"{head} Trees [{c}] {dev + 1}/-1/-1->{dev}->{max(dev - 1, -1)} [{c + 1}] -1/-1/-1->{dev}->{dev + 1}",
        f"{head} threadThresholds 8/8/64 | 128/8/64 | 512 | 512",
        f"{head} 32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer",
        f"{head} Connected all rings",
        f"{head} Connected all trees",
        f"{head} cudaDriverVersion 12040",
    ))


def _step_line(step: int, t: str, rng: random.Random) -> str:
    return (f"[{t}] iteration {step:8d}/  500000 | consumed samples: {step * 2048:12d} | elapsed time per "
            f"iteration (ms): {rng.uniform(4900, 5400):.1f} | learning rate: 2.999E-04 | global batch size:  2048 | "
            f"lm loss: {rng.uniform(1.8, 2.6):.6E} | loss scale: 1.0 | grad norm: {rng.uniform(0.2, 0.6):.3f} | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |")


def _failure_line(rng: random.Random, host: str, pid: int, dev: int) -> str:
    return rng.choice((
        f"{host}:{pid}:{pid + 90} [{dev}] NCCL WARN NET/IB : Got completion from peer 10.42.3.18<41234> "
        "with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.42.0.7",
        f"{host}:{pid}:{pid + 90} [{dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got async event : port error",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
        "79.15 GiB of which 1.06 GiB is free.",
    ))


def make_chatter_log(work: Path, size_mb: float, seed: int = 5) -> Path:
    """One log of ``size_mb`` where under 2% of lines are steps or failures (see above)."""
    path = work / f"chatter-{int(size_mb)}.log"
    if path.exists() and path.stat().st_size >= size_mb * MB:
        return path
    rng = random.Random(seed)
    start = dt.datetime(2026, 3, 4, 12, 0, 0)
    hosts = [f"gpu-node-{i:03d}" for i in range(16)]
    step, n, size = 0, 0, 0
    with path.open("w") as out:
        while size < size_mb * MB:
            now = start + dt.timedelta(seconds=n // 40)
            t = now.strftime("%Y-%m-%d %H:%M:%S")
            host, dev = rng.choice(hosts), rng.randrange(8)
            pid = 41000 + 17 * hosts.index(host) + dev
            r = rng.random()
            if r < 0.01:
                step += 1
                line = _step_line(step, t, rng)
            elif r < 0.01005:
                line = _failure_line(rng, host, pid, dev)
            elif r < 0.45:
                line = _pipeline_line(rng, t)
            elif r < 0.70:
                line = _probe_line(rng, now, host)
            else:
                line = _nccl_init_line(rng, host, pid, dev)
            out.write(line + "\n")
            size += len(line) + 1
            n += 1
    return path


# ----------------------------------------------------------------------------- baseline B
# One main pattern per family, extracting the fields the parsers extract for these records.
_B_PATTERNS: dict[str, re.Pattern[str]] = {
    "megatron_iteration": re.compile(
        r"iteration\s+(?P<step>\d+)/\s*(?P<total>\d+) \|.*?elapsed time per iteration \(ms\): (?P<ms>[\d.]+)"
        r"(?:.*?lm loss: (?P<loss>[\d.Ee+-]+|nan))?"
    ),
    "nccl": re.compile(
        r"^(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:[\w./]+:\d+ )?"
        r"NCCL (?P<lvl>INFO|WARN) (?P<msg>.*)"
    ),
    "watchdog": re.compile(
        r"\[Rank (?P<rank>\d+)\].*?(?:Watchdog caught collective operation timeout|detected by watchdog)"
        r".*?(?:SeqNum=(?P<seq>\d+))?"
    ),
    "elastic": re.compile(
        r"^[EWI](?P<md>\d{4}) (?P<hms>[\d:.]+) \d+ torch/distributed/elastic/.*?\] (?P<msg>.*?exitcode: (?P<code>-?\d+)"
        r".*?local_rank: (?P<local>\d+))?"
    ),
    "slurm": re.compile(
        r"(?:srun: error: (?P<node>[\w-]+): task (?P<task>\d+): (?P<what>.*)"
        r"|slurmstepd: error: \*\*\* (?:JOB|STEP) (?P<job>[\d.]+) ON (?P<host>\S+) (?P<state>[A-Z ]+) AT (?P<at>\S+))"
    ),
    "kernel": re.compile(
        r"^(?P<ts>\w{3}\s+\d+ [\d:]+|\S+T\S+) (?P<host>\S+) kernel: (?:\[\s*[\d.]+\] )?"
        r"(?:NVRM: Xid \(PCI:(?P<pci>[\w:.]+)\): (?P<xid>\d+)|(?P<other>.*))"
    ),
    "kubernetes": re.compile(
        r'^(?P<lvl>[IWEF])(?P<md>\d{4}) (?P<hms>[\d:.]+)\s+\d+ (?P<src>[\w.-]+\.go):\d+\] (?P<msg>.*)'
        r'|"reason":\s*"(?P<reason>\w+)"'
    ),
}
_B_TS = re.compile(r"^\[?(\d{4}-\d{2}-\d{2}[ T][\d:.]+)")


def baseline_b(files: list[str]) -> dict[str, Any]:
    rows = 0
    lines = 0
    fields: list[tuple[Any, ...]] = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                lines += 1
                ts = _B_TS.match(line)
                for family, pattern in _B_PATTERNS.items():
                    m = pattern.search(line)
                    if m:
                        fields.append((family, ts.group(1) if ts else None, *m.groups()))
                        rows += 1
                        break
    return {"lines": lines, "rows": rows}


# ----------------------------------------------------------------------------- sketch
# Nineteen keywords that every family's records hold one of (NCCL and watchdog lines, launcher
# and traceback lines, Slurm, kernel and Kubernetes failures, iteration lines).
_SKETCH_KEYWORDS = [
    "iteration", "NCCL", "Watchdog", "watchdog", "exitcode", "Traceback", "Error", "srun:", "slurmstepd",
    "Xid", "kernel:", "OOM", "oom", "Evicted", "reason", "FAILED", "CANCELLED", "timeout", "ECC",
]
_SKETCH_ITERATION = (
    r"^\[(?P<ts>[\d\- :]+)\] iteration\s+(?P<step>\d+)/\s*(?P<total>\d+) \|"
    r".*?elapsed time per iteration \(ms\): (?P<ms>[\d.]+)(?:.*?lm loss: (?P<loss>[\d.Ee+-]+))?"
)


def sketch(files: list[str]) -> dict[str, Any]:
    import polars as pl

    line = pl.col("line")
    kept = pl.concat([pl.scan_lines(p) for p in files], how="vertical").filter(line.str.contains_any(_SKETCH_KEYWORDS))
    out = kept.with_columns(line.str.extract_groups(_SKETCH_ITERATION).alias("it")).collect()
    return {"rows": out.height, "iterations": int(out["it"].struct.field("step").is_not_null().sum())}


# ----------------------------------------------------------------------------- child steps
def _rss_mb() -> float:
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(self_kb, kids_kb) / 1024


def child(step: str, args: list[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if step == "ingest":
        from toranalyze.cli.common import ingest_to
        from toranalyze.ingest.pipeline import IngestOptions, Workers

        jobs, engine, sink, files = int(args[0]), args[1], args[2], args[3:]
        workers = Workers(jobs) if engine == "default" else Workers(jobs, engine)
        # As `toranalyze ingest` does: events streamed to the table file, not held in memory.
        res = ingest_to(Path(sink), files, IngestOptions(), workers)
        out = {"events": res.n_events, "lines": sum(f.lines for f in res.files)}
    elif step == "baseline_a":
        import polars as pl

        n = pl.concat([pl.scan_lines(p) for p in args], how="vertical").select(pl.len()).collect().item()
        out = {"lines": n}
    elif step == "baseline_b":
        out = baseline_b(args)
    elif step == "sketch":
        out = sketch(args)
    elif step == "analyze":
        malloc_conf = os.environ.get("_RJEM_MALLOC_CONF")  # (read before polars loads and sets one)
        import polars as pl

        from toranalyze.reconstruct.analysis import analyze_events

        events = pl.read_parquet(args[0])
        t1 = time.perf_counter()
        analysis = analyze_events(events, jobs=int(args[1]))
        out = {"events": events.height, "load_s": t1 - t0, "analyze_s": time.perf_counter() - t1,
               "jobs": analysis.tor.height, "malloc_conf": malloc_conf}
    out["wall_s"] = time.perf_counter() - t0
    out["rss_mb"] = _rss_mb()
    out["user_s"], out["sys_s"] = _cpu_s()
    return out


def _cpu_s() -> tuple[float, float]:
    """(user, system) CPU seconds of this process and its finished workers."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + kids.ru_utime, own.ru_stime + kids.ru_stime


def run_child(step: str, args: list[str]) -> dict[str, Any]:
    argfile = Path(os.environ.get("TMPDIR", "/tmp")) / f"ingest_speed_args_{os.getpid()}.json"
    argfile.write_text(json.dumps(args))
    env = dict(_START_ENV if step == "analyze" else os.environ)
    if step == "analyze":  # the allocator set up as `toranalyze analyze` sets up its own
        analysis_allocator(["analyze"], env)
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", step, str(argfile)],
                              check=True, capture_output=True, text=True, env=env)
    finally:
        argfile.unlink(missing_ok=True)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


# ----------------------------------------------------------------------------- analyze table
def analyze_table(work: Path, n_events: int) -> Path:
    """A simulated fleet's events replicated as distinct jobs up to ``n_events`` rows."""
    import polars as pl

    target = work / f"events-{n_events}.parquet"
    if target.exists():
        return target
    run = work / "analyze-src"
    if not run.exists():
        _simulate(run, 11, "llama3-like", "slurm")
    from toranalyze.ingest.pipeline import ingest

    base = ingest([str(run)]).events
    copies = max(1, -(-n_events // base.height))
    parts = [
        base.with_columns(
            (pl.col("job_id") + f"-{k}").alias("job_id"),
            (pl.lit(f"copy{k}/") + pl.col("file")).alias("file"),
        )
        for k in range(copies)
    ]
    pl.concat(parts).head(n_events).write_parquet(target)
    return target


# ----------------------------------------------------------------------------- report
class _Rows(list[tuple[str, str]]):
    """Table rows, each also printed to stderr when measured (a long run shows progress)."""

    def append(self, row: tuple[str, str]) -> None:
        print(f"{row[0]}: {row[1]}", file=sys.stderr, flush=True)
        super().append(row)


def _rounds(steps: list[tuple[str, list[str]]], repeat: int) -> list[list[dict[str, Any]]]:
    """Each step's runs: ``repeat`` rounds that take every step once, so that load coming and
    going on a shared machine falls on all of them alike."""
    runs: list[list[dict[str, Any]]] = [[] for _ in steps]
    for _ in range(repeat):
        for i, (step, args) in enumerate(steps):
            runs[i].append(run_child(step, args))
    return runs


def _median_run(runs: list[dict[str, Any]], key: str = "wall_s") -> dict[str, Any]:
    """The run of median ``key`` (the lower one of an even count: a run that happened, so its
    figures belong together), with every run's ``key`` in ``runs_s``."""
    mid = sorted(runs, key=lambda r: float(r[key]))[(len(runs) - 1) // 2]
    return {**mid, "runs_s": [r[key] for r in runs]}


def _spread(r: dict[str, Any]) -> str:
    times = r["runs_s"]
    return f" (median of {len(times)}: {min(times):.2f}-{max(times):.2f} s)" if len(times) > 1 else ""


def _rounds_note(n: int) -> str:
    return f"; median of {n} rounds" if n > 1 else ""


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"| {k.ljust(width)} | {v} |" for k, v in rows)


def _ratio(res: dict[str, Any], rows: _Rows, runs: dict[str, list[dict[str, Any]]], fast: str, base: str) -> None:
    """Each round's own speed ratio of ``fast`` to ``base`` (runs side by side), the median over rounds."""
    ratios = [b["wall_s"] / i["wall_s"] for i, b in zip(runs[fast], runs[base], strict=True)]
    key = f"ratio_{base}" if fast == "ingest" else f"ratio_{fast}_{base}"
    res[key] = statistics.median(ratios)
    res[key.replace("ratio_", "ratios_", 1)] = ratios
    spread = f" (rounds {min(ratios):.3f}-{max(ratios):.3f}x)" if len(ratios) > 1 else ""
    rows.append((f"{fast} / {base} speed", f"{res[key]:.3f}x{spread}"))


def _chatter(work: Path, a: argparse.Namespace, res: dict[str, Any], rows: _Rows) -> None:
    """One worker on the chatter-heavy log, and baseline B on it, in the same rounds."""
    log = make_chatter_log(work, a.chatter_mb)
    mb = log.stat().st_size / MB
    ing, base = _rounds([("ingest", ["1", a.engine, str(work / "events-chatter.parquet"), str(log)]),
                         ("baseline_b", [str(log)])], a.repeat)
    r, b = _median_run(ing), _median_run(base)
    ratios = [x["wall_s"] / y["wall_s"] for y, x in zip(ing, base, strict=True)]
    res["chatter"] = {"mb": mb, "wall_s": r["wall_s"], "runs_s": r["runs_s"], "mb_s": mb / r["wall_s"],
                      "rss_mb": r["rss_mb"], "cpu_s": r["user_s"] + r["sys_s"], "events": r["events"],
                      "baseline_b_s": b["wall_s"], "ratio_baseline_b": statistics.median(ratios)}
    rows.append((f"chatter log (-j 1, {mb:,.0f} MB)",
                 f"{r['wall_s']:.2f} s{_spread(r)}, {mb / r['wall_s']:.1f} MB/s, {r['events']:,} events, "
                 f"peak RSS {r['rss_mb']:,.0f} MB, CPU {r['user_s'] + r['sys_s']:.1f} s; "
                 f"baseline B {b['wall_s']:.2f} s, "
                 f"ingest / baseline B {statistics.median(ratios):.3f}x"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=200.0, help="corpus size (MB)")
    ap.add_argument("--work", default="benchmarks/out/speed", help="where corpora and tables are written")
    ap.add_argument("--jobs", type=int, default=2, help="ingest worker processes; analysis threads")
    ap.add_argument("--engine", default="default", help="ingest engine (local, ray); default: the library default")
    ap.add_argument("--only", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)}")
    ap.add_argument("--analyze-events", type=int, default=10_000_000)
    ap.add_argument("--small-files", type=int, default=1000)
    ap.add_argument("--chatter-mb", type=float, default=100.0, help="size of the chatter-heavy log (MB)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every step this many times, in interleaved rounds; report medians")
    ap.add_argument("--json", default=None, help="also write the figures as JSON")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat takes a count of rounds, at least 1")
    if a.child:
        print(json.dumps(child(a.child[0], json.loads(Path(a.child[1]).read_text()))))
        return
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    only = set(a.only.split(","))
    res: dict[str, Any] = {"size_mb": a.size_mb, "jobs": a.jobs}
    rows = _Rows()
    if only & {"ingest", "baseline_a", "baseline_b", "sketch"}:
        corpus = make_corpus(work, a.size_mb)
        files = [str(p) for p in corpus_files(corpus)]
        mb = sum(os.path.getsize(f) for f in files) / MB
        res["corpus"] = {"files": len(files), "mb": mb}
        rows.append(("corpus", f"{mb:,.0f} MB in {len(files)} files"))
        steps = [(step, args) for step, args in (
            ("ingest", [str(a.jobs), a.engine, str(work / "events.parquet"), *files]),
            ("baseline_a", files),
            ("baseline_b", files),
            ("sketch", files),
        ) if step in only]
        runs = {step: r for (step, _), r in zip(steps, _rounds(steps, a.repeat), strict=True)}
        for step, _ in steps:
            r = res[step] = _median_run(runs[step])
            r["mb_s"] = mb / r["wall_s"]
            lines = f", {r['lines'] / r['wall_s'] / 1e3:,.0f}k lines/s" if 'lines' in r else ""
            rows.append((step, f"{r['wall_s']:.2f} s{_spread(r)}, {r['mb_s']:.1f} MB/s{lines}, "
                               f"peak RSS {r['rss_mb']:,.0f} MB"))
        for fast in ("ingest", "sketch"):
            for base in ("baseline_a", "baseline_b"):
                if fast in res and base in res:
                    _ratio(res, rows, runs, fast, base)
    if "chatter" in only:
        _chatter(work, a, res, rows)
    if "per_file" in only:
        many, cat = small_files(work, a.small_files)
        many_files = [str(p) for p in sorted(many.iterdir())]
        many_runs, cat_runs = _rounds([("ingest", ["1", "default", str(work / "events-many.parquet"), *many_files]),
                                       ("ingest", ["1", "default", str(work / "events-cat.parquet"), str(cat)])],
                                      a.repeat)
        per_round = [(m["wall_s"] - c["wall_s"]) / len(many_files) for m, c in zip(many_runs, cat_runs, strict=True)]
        per = statistics.median(per_round)
        r_many, r_cat = _median_run(many_runs), _median_run(cat_runs)
        res["per_file"] = {"files_s": r_many["wall_s"], "cat_s": r_cat["wall_s"], "per_file_ms": per * 1000,
                           "rounds_ms": [x * 1000 for x in per_round]}
        rows.append(("per-file fixed cost (-j 1)",
                     f"{per * 1000:.1f} ms ({len(many_files)} files {r_many['wall_s']:.2f} s, "
                     f"concatenated {r_cat['wall_s']:.2f} s{_rounds_note(len(per_round))})"))
    if "analyze" in only:
        table = analyze_table(work, a.analyze_events)
        r = res["analyze"] = _median_run(_rounds([("analyze", [str(table), str(a.jobs)])], a.repeat)[0], "analyze_s")
        events = f"{r['events'] / 1e6:.0f}M" if r["events"] >= 1e6 else f"{r['events']:,}"
        rows.append((f"analyze {events} events ({r['jobs']} jobs, -j {a.jobs})",
                     f"load {r['load_s']:.2f} s, analyze_events {r['analyze_s']:.2f} s{_spread(r)}, "
                     f"peak RSS {r['rss_mb']:,.0f} MB, CPU {r['user_s']:.1f} s user + {r['sys_s']:.1f} s system"))
    print(_table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
