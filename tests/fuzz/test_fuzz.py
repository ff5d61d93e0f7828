"""The mutation fuzzer: real excerpts, mutated (tests/fuzz/mutate.py), fed to every parser and to
the whole analyze -> plan path (tests/fuzz/harness.py).

The default run tries a few hundred inputs in seconds; the slow job (``pytest -m slow tests/fuzz``)
tries ``FUZZ_PARSER_INPUTS`` (default 1,000,000) parser inputs and ``FUZZ_RUN_INPUTS`` (default
10,000) whole-run inputs over ``FUZZ_WORKERS`` processes (default 2). A finding is an exception
that is not one of our recorded input errors, a file lost to a fault, a batch over ``BATCH_SECONDS``
(a hang) or a peak RSS over 2 GB. Each finding becomes a test in tests/parsers/test_fuzz_findings.py.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import resource
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import harness, mutate
from toranalyze.ingest.pipeline import ingest

PARSER_BATCH = 1000  # parser inputs per parse call
RUN_BATCH = 12  # files per analyzed run
RUN_BYTES = 256 * 1024  # a whole-run input's size limit (long lines and repeats reach it)
BATCH_SECONDS = 60
RSS_LIMIT = 2 * 1024**3


def _parser_batch(seed: int, n: int = PARSER_BATCH) -> list[str]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        return [str(f) for f in harness.parse_inputs([mutate.mutated(rng) for _ in range(n)], Path(tmp))]


def _run_batch(seed: int, n: int = RUN_BATCH) -> list[str]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        inputs = [mutate.mutated(rng, 200, RUN_BYTES) for _ in range(n)]
        return [str(f) for f in harness.run_inputs(inputs, Path(tmp))]


def _peak_rss() -> int:
    kib = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return kib * 1024


BRIEF = settings(max_examples=3, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.timeout(300)
@BRIEF
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_parsers_take_mutated_real_logs(seed: int) -> None:
    findings = _parser_batch(seed, 200)
    assert findings == [], "\n".join(findings)


@pytest.mark.timeout(300)
@BRIEF
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_analyze_and_plan_take_a_run_of_mutated_real_logs(seed: int) -> None:
    findings = _run_batch(seed, 6)
    assert findings == [], "\n".join(findings)


def _env(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _fuzz(batch: object, total: int, per: int) -> tuple[int, list[str]]:
    """``total`` inputs in batches of ``per`` over FUZZ_WORKERS processes: (inputs tried, findings)."""
    workers = _env("FUZZ_WORKERS", 2)
    seeds = range(_env("FUZZ_SEED", 0), _env("FUZZ_SEED", 0) + max(1, -(-total // per)))  # at least total
    findings: list[str] = []
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(batch, seed) for seed in seeds]  # type: ignore[arg-type]
        for seed, future in zip(seeds, futures, strict=True):
            try:
                # the seed reproduces the batch: _run_batch(seed) or _parser_batch(seed)
                findings += [f"seed {seed}: {f}" for f in future.result(timeout=BATCH_SECONDS * 10)]
            except TimeoutError:
                findings.append(f"batch of seed {seed}: no answer in {BATCH_SECONDS * 10} s (a hang)")
    return len(seeds) * per, findings


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_a_million_mutated_inputs_through_the_parsers() -> None:
    tried, findings = _fuzz(_parser_batch, _env("FUZZ_PARSER_INPUTS", 1_000_000), PARSER_BATCH)
    print(f"{tried} parser inputs, {len(findings)} findings")
    assert findings == [], "\n".join(findings)
    assert _peak_rss() <= RSS_LIMIT


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_ten_thousand_mutated_inputs_through_analyze_and_plan() -> None:
    tried, findings = _fuzz(_run_batch, _env("FUZZ_RUN_INPUTS", 10_000), RUN_BATCH)
    print(f"{tried} whole-run inputs, {len(findings)} findings")
    assert findings == [], "\n".join(findings)
    assert _peak_rss() <= RSS_LIMIT


def test_fuzz_finding_kernel_parser_panic_loses_its_file(tmp_path: Path) -> None:
    """A polars panic (assertion failed: i < self.len()) inside a kernel parser query on one block
    of a fuzzed log once cost the file's events: a parser that fails on a block is now read again
    on its halves, down to single lines (block_events.run_parsers), and says so."""
    rng = random.Random(5005)  # whole-run batch 5005, its 10th input
    inputs = [mutate.mutated(rng, 200, RUN_BYTES) for _ in range(RUN_BATCH)]
    path = tmp_path / "kern.log"
    path.write_bytes(inputs[9])
    (report,) = ingest([str(path)]).files
    assert report.error is None, report.error
    assert report.events >= 1
    assert any("parser 'kernel' failed on them together" in w for w in report.warnings), report.warnings
