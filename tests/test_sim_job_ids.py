"""Other users' jobs in slurmctld.log never reuse one of the simulated job's ids (Slurm gives
every job its own id): a reused id reads as a restart of the job in the middle of an attempt."""

from __future__ import annotations

import re
import tomllib
from importlib import resources

import numpy as np

from toranalyze.simulate.command import job_configs
from toranalyze.simulate.timeline import simulate_timeline
from toranalyze.simulate.writer import RunWriter

ID = re.compile(r"JobId=(\d+)")


def test_noise_jobs_never_take_an_id_of_the_job() -> None:
    data = tomllib.loads(resources.files("toranalyze.presets").joinpath("llama3-like.toml").read_text())
    later_ids_in_range = 0
    for seed in (9200, 9201, 9202):  # seed 9200 collided before: noise reused the 6th attempt's id
        cfg = job_configs(data, seed)[0]
        tl = simulate_timeline(cfg, rng=np.random.default_rng([seed, 0]), keep_steps=False)
        ours = {a.job_id for a in tl.attempts}
        lines = [text for _, text in RunWriter(tl, seed).ctld_noise()]
        noise_ids = {int(m.group(1)) for text in lines for m in ID.finditer(text)}
        assert lines and not ours & noise_ids, sorted(ours & noise_ids)
        later_ids_in_range += sum(min(noise_ids) < a.job_id < max(noise_ids) for a in tl.attempts[1:])
    assert later_ids_in_range > 0  # the noise's id range does cover later attempts' ids
