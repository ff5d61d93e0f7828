"""Classification rules as data."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from toranalyze.errors import RulesError
from toranalyze.ingest.classify import builtin_rules, classify, load_rules, parse_rules
from toranalyze.schema import EVENT_SCHEMA
from toranalyze.taxonomy import TAXONOMY


def _events(rows: list[dict]) -> pl.DataFrame:
    base = {c: None for c in EVENT_SCHEMA}
    return pl.DataFrame([{**base, "kind": "error", "severity": "error", **r} for r in rows], schema=EVENT_SCHEMA)


RULES = '''
[[rule]]
id = "t-xid79"
class = "gpu_hardware"
source = "kernel"
code = ["79"]
severity = "critical"

[[rule]]
id = "t-ecc"
class = "gpu_memory"
match = '(?i)uncorrectable ECC'

[[rule]]
id = "t-timeout"
class = "walltime"
state = "TIMEOUT"
'''


def test_first_match_wins_and_conditions_are_anded() -> None:
    rules = parse_rules(RULES, "t.toml")
    ev = _events([
        {"source": "kernel", "code": "79", "message": "GPU has fallen off the bus"},
        {"source": "trainer", "code": "79", "message": "exit 79"},
        {"source": "trainer", "message": "CUDA error: uncorrectable ECC error encountered"},
        {"source": "slurm", "kind": "job_end", "state": "TIMEOUT", "message": "x"},
        {"source": "slurm", "message": "nothing to see"},
    ])
    out = classify(ev, rules).collect()
    assert out["failure_class"].to_list() == ["gpu_hardware", None, "gpu_memory", "walltime", None]
    assert out["rule"].to_list() == ["t-xid79", None, "t-ecc", "t-timeout", None]
    assert out["severity"].to_list()[0] == "critical"


def test_user_rules_come_first_and_override(tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text('[[rule]]\nid = "mine-ecc"\nclass = "gpu_hardware"\nmatch = "ECC"\n')
    rules = load_rules([str(f)])
    assert rules[0].id == "mine-ecc"
    out = classify(_events([{"source": "trainer", "message": "uncorrectable ECC"}]), rules).collect()
    assert out["rule"][0] == "mine-ecc"


@pytest.mark.parametrize("text,needle", [
    ('[[rule]]\nid = "x"\nclass = "nope"\nmatch = "a"\n', "unknown class"),
    ('[[rule]]\nid = "x"\nclass = "software"\n', "needs at least one"),
    ('[[rule]]\nid = "x"\nclass = "software"\nmatch = "("\n', "bad regex"),
    ('[[rule]]\nid = "x"\nclass = "software"\nmatch = "a"\ncolour = "red"\n', "unknown keys"),
    ('[[rule]\nid = "x"', "not valid TOML"),
])
def test_malformed_rules_are_explained(text: str, needle: str) -> None:
    with pytest.raises(RulesError, match=needle) as info:
        parse_rules(text, "bad.toml")
    assert "bad.toml" in (info.value.path or "")


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "dup.toml"
    f.write_text('[[rule]]\nid = "d"\nclass = "software"\nmatch = "a"\n[[rule]]\nid = "d"\nclass = "software"\nmatch = "b"\n')
    with pytest.raises(RulesError, match="defined twice"):
        load_rules([str(f)])


def test_builtin_rules_are_valid_and_polars_compiles_every_regex() -> None:
    rules = builtin_rules()
    for r in rules:
        assert r.failure_class in TAXONOMY
        if r.match:
            pl.Series(["probe"]).str.contains(r.match)


@pytest.fixture(scope="module")
def unclassified() -> pl.DataFrame:
    """Events of every test-data family and the sample logs, with their labels cleared, plus
    rows whose source or kind is null."""
    from toranalyze.ingest.pipeline import ingest

    root = Path(__file__).resolve().parents[2]
    dirs = [root / "tests" / "data" / d for d in ("kernel", "kubernetes", "nccl", "slurm", "torch", "trainer")]
    ev = ingest([str(d) for d in dirs] + [str(root / "sample_logs")]).events
    odd = _events([
        {"source": None, "message": "uncorrectable ECC error"},
        {"source": "kernel", "kind": None, "code": "79", "message": "fallen off the bus"},
    ]).select(ev.columns)
    return pl.concat([ev, odd]).with_columns(pl.lit(None, pl.String).alias(c) for c in ("failure_class", "rule"))


@pytest.mark.parametrize("split_rows,per_thread", [(0, 24), (0, 5), (10**9, 24), (0, 1000)])
def test_ingest_classification_equals_classify(
    unclassified: pl.DataFrame, split_rows: int, per_thread: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ingest tries each (source, kind) pair's rows on that pair's rules only, in groups of rules:
    the labels are those of trying every rule on every row, whatever the grouping. A user rule
    with no source or kind condition belongs to every pair's chain."""
    from toranalyze.ingest import pipeline

    mine = tmp_path / "mine.toml"
    mine.write_text('[[rule]]\nid = "mine-any"\nclass = "software"\nmatch = "Traceback|srun: error"\n')
    rules = load_rules([str(mine)])
    monkeypatch.setattr(pipeline, "SPLIT_ROWS", split_rows)
    monkeypatch.setattr(pipeline, "RULES_PER_THREAD", per_thread)
    got = pipeline._classified(unclassified, rules)
    want = classify(unclassified, rules).select(unclassified.columns).collect()
    assert got["failure_class"].null_count() < got.height - 100  # the test input has labelled rows
    assert got.equals(want)
