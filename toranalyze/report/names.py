"""Short job names: now computed in :mod:`toranalyze.reconstruct.job_names`, re-exported here for
the callers that still import them from report."""

from toranalyze.reconstruct.job_names import input_root, job_keys, rename_in_text, rename_jobs, short_job_names

__all__ = ["input_root", "job_keys", "rename_in_text", "rename_jobs", "short_job_names"]
