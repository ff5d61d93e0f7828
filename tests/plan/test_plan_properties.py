"""`toranalyze plan` on any rates file and any options: exit 0 or 2, never a traceback."""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toranalyze.cli import main
from toranalyze.fleet.rates import build_rates, dumps
from toranalyze.simulate.fleet_truth import FleetSpec, generate_fleet

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def rates() -> dict:
    fr, _ = generate_fleet(replace(FleetSpec(), jobs=12), 5)
    return json.loads(dumps(build_rates(fr["jobs"], fr["attempts"], fr["incidents"], fr["exposure"])))


def _paths(doc: Any, at: tuple = ()) -> list[tuple]:
    """Every path to a number in the document."""
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _paths(v, (*at, k))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _paths(v, (*at, i))]
    return [at] if isinstance(doc, (int, float)) and not isinstance(doc, bool) else []


def _set(doc: Any, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


ODD = st.sampled_from([0, 0.0, -1, 1e-300, 1e300, 2**62, 0.5, 3, None, "1", [], {}, True])
DURATIONS = st.sampled_from(["0s", "1s", "5m", "1h", "3d", "1e3h", "-1m", "soon", "8766h", "9000h"])
OPTS = st.fixed_dictionaries({}, optional={
    "--gpus": st.sampled_from(["1", "8", "1000", "100000", "10000000", "0", "1e9", "-3"]),
    "--ckpt-interval": DURATIONS, "--ckpt-save": DURATIONS, "--restart": DURATIONS, "--startup": DURATIONS,
    "--detect": DURATIONS, "--snapshot": DURATIONS, "--mem-load": DURATIONS,
    "--strategy": st.sampled_from(["blocking", "async", "memory", "multitier", "nope"]),
    "--every": st.sampled_from(["1", "2", "10", "0", "1000000"]),
    "--survival": st.sampled_from(["0", "0.5", "1", "2"]),
    "--ideal-days": st.sampled_from(["0.01", "1", "30", "0", "100000"]),
    "--slow": st.sampled_from(["0.1,2", "1,inf", "0.5,0.5", "x"]),
    "--rate": st.sampled_from(["hw=6.5/1000-node-days", "sw=1/job-day", "x=1e300/gpu-hour", "bad"]),
    "--gpus-per-node": st.sampled_from(["1", "8", "0", "4096"]),
})


def _plan(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["toranalyze", "plan", "--runs", "4", "--json", *argv])
    code = 0
    try:
        main()
    except SystemExit as e:
        code = int(e.code or 0)
    return code, capsys.readouterr().err


def _argv(opts: dict[str, str]) -> list[str]:
    argv = [x for k, v in opts.items() for x in (k, v)]
    return argv if "--gpus" in opts else [*argv, "--gpus", "64"]


@SETTINGS
@given(data=st.data(), opts=OPTS)
def test_any_document_and_options_exit_0_or_2(rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture, data: st.DataObject,
                                              opts: dict[str, str]) -> None:
    doc = copy.deepcopy(rates)
    paths = _paths(doc)
    for path in data.draw(st.lists(st.sampled_from(paths), max_size=3)):
        _set(doc, path, data.draw(ODD))
    f = tmp_path / "rates.json"
    f.write_text(json.dumps(doc))
    code, err = _plan(["--rates", str(f), *_argv(opts)], monkeypatch, capsys)
    assert code in (0, 2) and "Traceback" not in err, (code, err)


@SETTINGS
@given(cut=st.integers(0, 10_000), junk=st.binary(max_size=64), how=st.sampled_from(
    ["truncate", "splice", "utf-16", "latin-1", "huge", "binary"]))
def test_any_bytes_exit_0_or_2(rates: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture, cut: int, junk: bytes, how: str) -> None:
    text = dumps(rates)
    raw = text.encode()
    cut %= len(raw)
    data = {"truncate": raw[:cut], "splice": raw[:cut] + junk + raw[cut:], "utf-16": text.encode("utf-16"),
            "latin-1": text.replace('"generator": "', '"generator": "\u00e9').encode("latin-1"),
            "huge": raw[:cut] + b"9" * 500 + raw[cut:], "binary": junk}[how]
    f = tmp_path / "rates.json"
    f.write_bytes(data)
    code, err = _plan(["--rates", str(f), "--gpus", "64"], monkeypatch, capsys)
    assert code in (0, 2) and "Traceback" not in err, (code, err)
