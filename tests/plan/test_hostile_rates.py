"""`plan --rates` on hostile files: each is refused with exit 2 and a message naming the path and
the next step (no traceback), and devices or FIFOs can neither hang the command nor fill memory."""

from __future__ import annotations

import copy
import gzip
import json
import os
import random
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from toranalyze.cli import main
from toranalyze.fleet.rates import MAX_RATES_BYTES, build_rates, dumps
from toranalyze.plan.montecarlo import Config, simulate
from toranalyze.plan.strategy import Phase, Recovery, Strategy, Tier
from toranalyze.simulate.fleet_truth import FleetSpec, generate_fleet


@pytest.fixture(scope="module")
def rates() -> dict:
    fr, _ = generate_fleet(replace(FleetSpec(), jobs=12), 5)
    doc = json.loads(dumps(build_rates(fr["jobs"], fr["attempts"], fr["incidents"], fr["exposure"])))
    assert any(c["weibull"] for c in doc["classes"].values())  # the shape cases below need one
    return doc


def _plan(path: Path | str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """Exit code and stderr of `toranalyze plan --rates path`, whitespace removed (the console
    wraps long paths at its width)."""
    monkeypatch.setattr(sys, "argv", ["toranalyze", "plan", "--rates", str(path), "--gpus", "64", "--runs", "20",
                                      "--json"])
    code = 0
    try:
        main()
    except SystemExit as e:
        code = int(e.code or 0)
    return code, "".join(capsys.readouterr().err.split())


def _refused(path: Path | str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *words: str) -> str:
    code, err = _plan(path, monkeypatch, capsys)
    assert code == 2, err
    assert "".join(str(path).split()) in err and "next:" in err and "Traceback" not in err, err
    for w in words:
        assert w.replace(" ", "") in err, err
    return err


def _first_weibull(doc: dict) -> dict:
    return next(c["weibull"] for c in doc["classes"].values() if c["weibull"])


def _one_bad_byte(text: str) -> bytes:
    data = bytearray(text.encode())
    data[len(data) // 2] = 0xFF
    return bytes(data)


def _latin1_store_file(doc: dict) -> bytes:
    d = copy.deepcopy(doc)
    d["generator"] = "toranalyze \u00e9t\u00e9"  # written by a tool that saved it as Latin-1
    return json.dumps(d, ensure_ascii=False).encode("latin-1")


ENCODINGS: dict[str, Callable[[dict], bytes]] = {
    "random_bytes": lambda d: random.Random(3).randbytes(4096),
    "gzipped": lambda d: gzip.compress(dumps(d).encode()),
    "utf16": lambda d: dumps(d).encode("utf-16"),
    "one_bad_byte": lambda d: _one_bad_byte(dumps(d)),
    "latin1_store_file": _latin1_store_file,
}


@pytest.mark.parametrize("case", sorted(ENCODINGS))
def test_not_utf8_is_refused(case: str, rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "rates.json"
    path.write_bytes(ENCODINGS[case](rates))
    _refused(path, monkeypatch, capsys, "UTF-8")


def test_gzip_and_utf16_are_named(rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "gz.json").write_bytes(gzip.compress(dumps(rates).encode()))
    _refused(tmp_path / "gz.json", monkeypatch, capsys, "gzip")
    (tmp_path / "u16.json").write_bytes(dumps(rates).encode("utf-16"))
    _refused(tmp_path / "u16.json", monkeypatch, capsys, "UTF-16")


def test_a_bad_byte_names_its_line(rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture) -> None:
    data = _one_bad_byte(dumps(rates))
    path = tmp_path / "rates.json"
    path.write_bytes(data)
    line = data.count(b"\n", 0, data.index(b"\xff")) + 1
    _refused(path, monkeypatch, capsys, f"rates.json:{line}:")


def test_deep_nesting_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "rates.json"
    path.write_text('{"schema_version": 1, "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    _refused(path, monkeypatch, capsys, "nested")


@pytest.mark.parametrize("literal", ["1" * 401, "-" + "9" * 5000, "1e999", "NaN", "-Infinity"])
def test_absurd_and_non_finite_numbers_are_refused(literal: str, rates: dict, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    doc = copy.deepcopy(rates)
    doc["exposure"]["jobs"] = "@"
    path = tmp_path / "rates.json"
    path.write_text(dumps(doc).replace('"@"', literal))
    line = dumps(doc)[: dumps(doc).index('"@"')].count("\n") + 1
    _refused(path, monkeypatch, capsys, f"rates.json:{line}:")


def test_weibull_shape_zero_is_refused(rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture) -> None:
    doc = copy.deepcopy(rates)
    _first_weibull(doc).update(shape=0.0, constant_rate_rejected=True)
    path = tmp_path / "rates.json"
    path.write_text(dumps(doc))
    _refused(path, monkeypatch, capsys, "weibull.shape")


def test_tiny_weibull_shapes_simulate_without_overflow() -> None:
    # the fitter's lowest shape bound (0.001): gamma(1 + 1/shape) overflows a float
    rec = Recovery(Phase(0.0), Phase(0.0), Phase(0.2))
    r = simulate([Config(Strategy("blocking", Tier(1 / 60)), 0.5, 48.0, rec, (3.0,))], (0.001,), 20, seed=1,
                 max_failures=200)[0]
    assert np.isfinite(r.tor) and 0 <= r.tor <= 1 and 0 <= r.p10 <= r.p90 <= 1


@pytest.mark.timeout(20)
def test_a_fifo_without_writer_does_not_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture) -> None:
    fifo = tmp_path / "rates.fifo"
    os.mkfifo(fifo)
    _refused(fifo, monkeypatch, capsys)


@pytest.mark.timeout(20)
def test_a_pipe_with_a_writer_is_read(rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture) -> None:
    fifo = tmp_path / "rates.fifo"  # as `--rates <(cat rates.json)` gives
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as f:
            f.write(dumps(rates))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    code, err = _plan(fifo, monkeypatch, capsys)
    writer.join(5)
    assert code == 0, err


@pytest.mark.timeout(20)
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_an_endless_device_is_bounded(device: str, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture) -> None:
    _refused(device, monkeypatch, capsys, f"{MAX_RATES_BYTES // 2**20} MB")


def test_an_oversized_file_is_refused_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "rates.json"
    with open(path, "wb") as f:
        f.truncate(MAX_RATES_BYTES + 1)  # sparse: no disk used
    _refused(path, monkeypatch, capsys, f"{MAX_RATES_BYTES // 2**20} MB")
