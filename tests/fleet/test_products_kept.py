"""An unchanged re-run of `toranalyze fleet` keeps rates.json, the report and the summary it made
from the same tables, without reading every table again; anything that changes them makes them anew."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.fleet.conftest import simulated_fleet
from toranalyze.cli import cli
from toranalyze.fleet import store


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return simulated_fleet(tmp_path_factory, "kept", jobs=3, seed=5)


def _fleet(*args: str) -> str:
    res = CliRunner().invoke(cli, ["fleet", *args, "-j", "1"])
    assert res.exit_code == 0, res.output
    return res.output


def test_unchanged_rerun_keeps_the_products(fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "store"
    first = _fleet(str(fleet), "-o", str(out))
    rates = (out / "rates.json").read_bytes()

    def no_reading(self: store.Store) -> None:
        raise AssertionError("an unchanged re-run read every table again")

    with monkeypatch.context() as m:
        m.setattr(store.Store, "read_tables", no_reading)
        again = _fleet(str(fleet), "-o", str(out))
    assert (out / "rates.json").read_bytes() == rates
    summary = [ln for ln in first.splitlines() if "runs (" not in ln and "tables written" not in ln]
    assert [ln for ln in again.splitlines() if "runs (" not in ln and "nothing changed" not in ln] == summary
    assert "report:" in again


def test_products_are_made_anew_when_the_options_change(fleet: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    _fleet(str(fleet), "-o", str(out), "--no-report")
    assert not (out / "report.html").exists()
    text = _fleet(str(fleet), "-o", str(out))  # the same tables, now with a report asked for
    assert (out / "report.html").is_file() and "report:" in text
    (out / "rates.json").unlink()
    _fleet(str(fleet), "-o", str(out))
    assert (out / "rates.json").is_file()
