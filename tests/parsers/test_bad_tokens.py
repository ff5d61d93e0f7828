"""One bad token drops its row, never the file: numbers too big for their column, digits of other
scripts, impossible stamps. The file's other events are the events of the file without that line.

Parsers turn text into numbers only through casts that give null on failure, and match digits
only as ASCII [0-9] (a regex ``\\d`` takes any script's digits, which no cast reads): checked for
every parser and ingest module at once below.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import polars as pl
import pytest

from toranalyze.ingest.pipeline import IngestOptions, ingest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TRAINER = (DATA / "trainer/real/bloom176b_lm_loss_spike_31214.log").read_text().splitlines(keepends=True)[:20]
SACCT = (DATA / "slurm/sacct_parsable2_node_fail_requeue_preempt.txt").read_text().splitlines(keepends=True)
NCCL = [
    "2024-03-01T10:00:00Z gpu-001:1234:1300 [0] NCCL INFO cudaDev 0 busId 1000 commId 0xabc - Init COMPLETE\n",
    "gpu-001:1234:1300 [0] include/socket.h:403 NCCL WARN Connect to 10.0.0.2<5000> failed : Connection refused\n",
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=4, "
    "NumelOut=4, Timeout(ms)=8000) ran for 8097 milliseconds before timing out.\n",
    "gpu-001:1234:1300 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 busId 1000 - Abort COMPLETE\n",
]
TQDM = [
    "[INFO|trainer.py:1339] 2021-05-25 06:53:45,378 >> ***** Running training *****\n",
    "  0%|          | 0/16 [00:00<?, ?it/s]\n",
    "  6%|▋         | 1/16 [00:58<14:41, 58.76s/it]\n",
    " 12%|█▎        | 2/16 [02:00<13:54, 59.61s/it]\n",
]

AR3, FW3 = "\u0663", "\uff13"  # Arabic-Indic and fullwidth three
CASES = {
    "rank prefix past Int32": (TRAINER, "[rank4294967296]: RuntimeError: CUDA error: an illegal memory access\n"),
    "rank prefix in Arabic-Indic digits": (TRAINER, f"[rank{AR3}]: RuntimeError: CUDA error: an illegal memory access\n"),
    "rank prefix in fullwidth digits": (TRAINER, f"[rank{FW3}]: RuntimeError: CUDA error\n"),
    "srun task id in other digits": (TRAINER, f"{AR3}{AR3}: RuntimeError: CUDA error\n"),
    "huge alloctres": (SACCT, SACCT[1].replace("gres/gpu=256", "gres/gpu=99999999999999999999999")),
    "huge alloctres node count": (SACCT, SACCT[1].replace("node=32|", "node=99999999999999999999|")),
    "NCCL device in fullwidth digits": (NCCL, NCCL[1].replace("[0]", f"[{FW3}]")),
    "NCCL timeout in other digits": (NCCL, NCCL[2].replace("Timeout(ms)=8000", f"Timeout(ms)={AR3}000")),
    "tqdm elapsed past Int64 microseconds": (TQDM, " 19%|█▉        | 3/16 [99999999999999999999:00<12:56, 59.72s/it]\n"),
    "date in fullwidth digits": (NCCL, NCCL[0].replace("2024-03-01", "\uff12\uff10\uff12\uff14-03-01")),
    "2**64 in a JSON log line": (TRAINER, '{"step": 18446744073709551616, "loss": 1.5, "time": "2024-03-01T10:00:00Z"}\n'),
}


def _events(path: Path, skip: int | None = None) -> pl.DataFrame:
    """A file's events without file names (and, when ``skip`` is given, without the rows of that
    line, the lines after it numbered as if it were not there)."""
    result = ingest([str(path)], IngestOptions(year=2024))
    assert [f.error for f in result.files] == [None]
    events = result.events.drop("file")
    if skip is None:
        return events
    events = events.filter(pl.col("line") != skip)
    shift = [pl.when(pl.col(c) > skip).then(pl.col(c) - 1).otherwise(pl.col(c)).alias(c) for c in ("line", "line_end")]
    return events.with_columns(shift)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_token_drops_its_row_not_the_file(tmp_path: Path, case: str) -> None:
    lines, bad = CASES[case]
    at = min(3, len(lines))
    suffix = ".txt" if lines is SACCT else ".log"
    good, with_bad = tmp_path / f"good{suffix}", tmp_path / f"bad{suffix}"
    good.write_text("".join(lines))
    with_bad.write_text("".join(lines[:at] + [bad] + lines[at:]))
    expected = _events(good)
    assert expected.height, "the good lines give events"
    kept = _events(with_bad, skip=at + 1)
    assert kept.equals(expected), case


SOURCES = sorted([*ROOT.joinpath("parsers").rglob("*.py"), *ROOT.joinpath("toranalyze", "ingest").rglob("*.py")])
EXACT = {"String", "Utf8", "Categorical", "Binary"}  # casts that cannot fail


def _strict_casts(source: str) -> list[int]:
    """Lines of ``.cast(...)`` calls to a number or time type that raise on a value they cannot hold."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cast"):
            continue
        target = node.args[0] if node.args else None
        name = getattr(target, "attr", getattr(target, "id", None))
        lenient = any(k.arg == "strict" and isinstance(k.value, ast.Constant) and k.value.value is False
                      for k in node.keywords)
        if not lenient and name not in EXACT:
            found.append(node.lineno)
    return found


def _unicode_digit_classes(source: str) -> list[int]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [t.start[0] for t in tokens if t.type == tokenize.STRING and _has_digit_class(t.string)]


def _has_digit_class(literal: str) -> bool:
    i = 0
    while (i := literal.find("\\", i)) >= 0:
        if literal[i + 1 : i + 2] == "d":
            return True
        i += 2
    return False


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_text_becomes_numbers_only_leniently(path: Path) -> None:
    source = path.read_text()
    assert _strict_casts(source) == [], "cast with strict=False: a value the column cannot hold becomes null"
    assert _unicode_digit_classes(source) == [], r"match digits as [0-9]: \d takes every script's digits"
