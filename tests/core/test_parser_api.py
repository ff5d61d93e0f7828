"""The parser API is the one face toranalyze shows to parsers, and toranalyze has no import circle."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

import toranalyze.parser_api as api
from toranalyze.ingest import registry
from toranalyze.ingest.pipeline import IngestOptions, ingest

ROOT = Path(__file__).resolve().parents[2]
ACME = ROOT / "tests" / "data" / "acme_trainer"
API = "toranalyze.parser_api"


def _imported(path: Path) -> Iterator[tuple[int, str]]:
    """Every module a file imports (line, dotted name), function-local imports included."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module


def _outside_api(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line}: {module}" for line, module in _imported(path)
            if module.split(".")[0] == "toranalyze" and module != API]


def test_parsers_import_toranalyze_only_through_the_parser_api() -> None:
    files = [*sorted((ROOT / "parsers").rglob("*.py")), *sorted(ACME.glob("*.py"))]
    assert len(files) > 30
    assert [bad for f in files for bad in _outside_api(f)] == []


def test_every_exported_name_is_documented() -> None:
    assert api.__doc__ and "The contract" in api.__doc__
    assert len(set(api.__all__)) == len(api.__all__)
    for name in api.__all__:
        obj = getattr(api, name)
        if callable(obj):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"
        else:  # constants are described in the module docstring
            assert f"``{name}``" in api.__doc__, f"{name} is not described in the module docstring"


def _module_graph() -> dict[str, set[str]]:
    """toranalyze's modules -> the toranalyze modules each imports (``from pkg import mod`` too)."""
    package = ROOT / "toranalyze"
    names = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module in names:
                subs = {f"{node.module}.{a.name}" for a in node.names}
                found |= (subs & names.keys()) or {node.module}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in names}
        graph[name] = found - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (None: none), by depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_import_circle_between_modules_or_packages() -> None:
    graph = _module_graph()
    assert "toranalyze.ingest.reader" in graph["toranalyze.parser_api"]
    assert _cycle(graph) is None
    packages: dict[str, set[str]] = {}
    for module, imported in graph.items():
        top = ".".join(module.split(".")[:2])
        packages.setdefault(top, set()).update(".".join(m.split(".")[:2]) for m in imported)
    assert _cycle({p: deps - {p} for p, deps in packages.items()}) is None


def test_cycle_search_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.fixture
def acme_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example plugin installed as a distribution (module and dist-info with its entry point)
    on sys.path, and the installed parsers read again; afterwards, forgotten."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "acme_trainer_parser.py").write_text((ACME / "acme_trainer_parser.py").read_text())
    info = site / "acme_trainer_parser-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-trainer-parser\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{api.ENTRY_POINT_GROUP}]\nacme-trainer = acme_trainer_parser:parser\n")
    monkeypatch.syspath_prepend(str(site))
    registry.default_registry(refresh=True)
    yield
    monkeypatch.undo()
    sys.modules.pop("acme_trainer_parser", None)
    registry.default_registry(refresh=True)


def test_a_parser_written_against_the_api_ingests_a_log_end_to_end(acme_installed: None) -> None:
    entry = {e.parser.name: e for e in registry.default_registry().entries()}["acme-trainer"]
    assert (entry.distribution, entry.version) == ("acme-trainer-parser", "0.1.0")
    result = ingest([str(ACME / "train.log")], IngestOptions(rules=(str(ACME / "rules.toml"),)))
    (report,) = result.files
    assert report.error is None and (report.lines, report.covered) == (6, 5)  # the banner alone unread
    acme = result.events.filter(pl.col("parser") == "acme-trainer").sort("line")
    assert acme["kind"].to_list() == ["step", "step", "ckpt_save_end", "error"]
    assert acme["step"].to_list() == [10, 20, 150, None]
    assert acme["loss"].to_list()[:2] == [2.4817, 2.3104]
    fatal = acme.row(3, named=True)
    assert (fatal["node"], fatal["rank"], fatal["line"]) == ("gpu-node-7", 3, 6)
    assert (fatal["failure_class"], fatal["rule"], fatal["source"]) == ("software", "acme-fatal-cuda", "acme")
    assert str(fatal["ts"]) == "2024-03-01 10:04:02+00:00"


def test_the_example_parser_alone_reads_through_its_own_parse() -> None:
    sys.path.insert(0, str(ACME))
    try:
        import acme_trainer_parser  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ACME))
        sys.modules.pop("acme_trainer_parser", None)
    rows = acme_trainer_parser.parser.parse(str(ACME / "train.log")).collect()
    assert rows["kind"].to_list() == ["step", "step", "ckpt_save_end", "error"]
    assert set(api.RAW_SCHEMA.names()) <= set(rows.columns)
