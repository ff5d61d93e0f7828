"""No secret reaches any output: a run whose logs hold tokens, keys and passwords, analysed by
``analyze`` and by ``fleet`` with redaction on (the default), leaves none of them in any file
written (every Parquet table read back, report.html, rates.json, summary.json, every file of the
fleet store) nor on the terminal; with ``--no-redact`` they are there (so the scan can fail)."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from toranalyze.cli import cli

SAMPLE = Path(__file__).parents[2] / "sample_logs" / "gpt-small"

# Shapes of report/assets/secrets.toml, assembled here so no scanner mistakes them for real ones.
HF = "hf_" + "Q7rT2mX9vL4kP8sW3nB6yZ1c"
AWS_ID = "AKIA" + "Z3XQ7RT2MX9VL4KP"
AWS_SECRET = "wJalrXUtnFEMI" + "/K7MDENG/bPxRfiCYz9kq"
PASSWORD = "Sup3r" + "S3cret!x"
BEARER = "eyJhbGciOiJIUzI1NiJ9" + ".q9Xk2LmZ"
SECRETS = (HF, AWS_ID, AWS_SECRET, PASSWORD, BEARER)
EVIDENCE = (HF, AWS_ID, PASSWORD)  # on evidence lines: shown in the run's report, in a fleet too


def _edit(path: Path, lines: dict[int, str]) -> None:
    """Append text to lines (1-based)."""
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        out.append(line + lines.get(i, ""))
    path.write_text("\n".join(out) + "\n")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("secrets") / "gpt-secret"
    shutil.copytree(SAMPLE, root, ignore=shutil.ignore_patterns("truth.json"))
    # The Xid and "fallen off the bus" lines are an incident's evidence: the report quotes them;
    # the others are events (events.parquet) only.
    _edit(root / "nodes" / "gpu-004" / "kern.log", {
        1: f" aws_secret_access_key={AWS_SECRET}", 5: f" Authorization: Bearer {BEARER}",
        7: f" HF_TOKEN {HF} key {AWS_ID}", 8: f" password={PASSWORD}",
    })
    return root


def _texts(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` as text: Parquet tables read back (every row), others as written."""
    found = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name.endswith(".js"):
            continue
        rel = str(p.relative_to(folder))
        found[rel] = repr(pl.read_parquet(p).rows()) if p.suffix == ".parquet" else p.read_text(errors="replace")
    return found


def _leaks(texts: dict[str, str], secrets: tuple[str, ...]) -> dict[str, list[str]]:
    return {name: [s for s in secrets if s in text] for name, text in texts.items() if any(s in text for s in secrets)}


def _invoke(args: list[str]) -> str:
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def test_analyze_writes_no_secret(run: Path, tmp_path: Path) -> None:
    terminal = _invoke(["analyze", str(run), "-o", str(tmp_path / "out"), "-j", "1"])
    texts = _texts(tmp_path / "out")
    assert {"events.parquet", "incidents.parquet", "report.html", "rates.json", "summary.json"} <= texts.keys()
    assert _leaks({**texts, "terminal": terminal}, SECRETS) == {}
    assert "[REDACTED]" in texts["report.html"] and "[REDACTED]" in texts["events.parquet"]


def test_analyze_no_redact_keeps_them(run: Path, tmp_path: Path) -> None:
    _invoke(["analyze", str(run), "-o", str(tmp_path / "out"), "-j", "1", "--no-redact"])
    leaks = _leaks(_texts(tmp_path / "out"), SECRETS)
    assert set(leaks.get("events.parquet", [])) == set(SECRETS)
    assert set(EVIDENCE) <= set(leaks.get("report.html", []))


def test_ingest_streams_a_redacted_table(run: Path, tmp_path: Path) -> None:
    terminal = _invoke(["ingest", str(run), "-o", str(tmp_path / "on"), "-j", "1"])
    texts = _texts(tmp_path / "on")
    assert {"events.parquet", "summary.json"} == texts.keys()
    assert _leaks({**texts, "terminal": terminal}, SECRETS) == {}
    _invoke(["ingest", str(run), "-o", str(tmp_path / "off"), "-j", "1", "--no-redact"])
    assert set(_leaks(_texts(tmp_path / "off"), SECRETS)["events.parquet"]) == set(SECRETS)


def test_fleet_store_holds_no_secret(run: Path, tmp_path: Path) -> None:
    terminal = _invoke(["fleet", str(run), "-o", str(tmp_path / "store"), "-j", "1"])
    texts = _texts(tmp_path / "store")
    assert any(name.endswith("report.html") and name.startswith("reports/") for name in texts)
    assert _leaks({**texts, "terminal": terminal}, SECRETS) == {}


def test_fleet_no_redact_keeps_them(run: Path, tmp_path: Path) -> None:
    _invoke(["fleet", str(run), "-o", str(tmp_path / "store"), "-j", "1", "--no-redact"])
    leaks = _leaks(_texts(tmp_path / "store"), SECRETS)
    run_report = [found for name, found in leaks.items() if name.startswith("reports/") and name.endswith("report.html")]
    assert run_report and set(EVIDENCE) <= set(run_report[0])
