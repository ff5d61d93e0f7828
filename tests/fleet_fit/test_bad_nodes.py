"""Planted bad nodes in the log simulator: recorded in the truth, failing far more often."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from toranalyze.model import config_from_dict, load_preset
from toranalyze.simulate.command import Overrides, job_configs
from toranalyze.simulate.timeline import simulate_timeline
from toranalyze.simulate.truth import job_truth


def _nodes_hit(bad: tuple[tuple[str, float], ...], seeds: range) -> Counter[str]:
    base = replace(config_from_dict(load_preset("fleet")), nodes=4, duration_s=24 * 3600.0, walltime_s=None,
                   bad_nodes=bad)
    hits: Counter[str] = Counter()
    for s in seeds:
        tl = simulate_timeline(base, rng=np.random.default_rng(s), keep_steps=False)
        hits.update(i.node for i in tl.incidents if i.node and not i.planned)
        if bad:
            assert job_truth(tl)["bad_nodes"] == dict(bad)
        else:
            assert "bad_nodes" not in job_truth(tl)
    return hits


def test_bad_node_fails_more_and_is_in_truth() -> None:
    hits = _nodes_hit((("gpu-002", 300.0),), range(6))
    # a failed node leaves the allocation for a spare, so the bad node fails once in nearly every job
    assert hits["gpu-002"] >= 5 and hits["gpu-002"] > 2 * max(hits[n] for n in hits if n != "gpu-002")
    plain = _nodes_hit((), range(6))
    assert plain["gpu-002"] <= 3


def test_bad_node_option_is_validated() -> None:
    data = load_preset("fleet") | {"bad_nodes": {"gpu-003": 0.5}}
    with pytest.raises(ValueError, match="multipliers"):
        config_from_dict(data)
    cfgs = job_configs(load_preset("fleet"), 1, Overrides(jobs=2, bad_nodes=(("gpu-001", 9.0),)))
    assert all(c.bad_nodes == (("gpu-001", 9.0),) for c in cfgs)
    assert "bad_nodes" not in job_configs(load_preset("fleet"), 1, Overrides(jobs=2))[0].to_params()
