"""slurm parser (placeholder until the family's rules land)."""

from toranalyze.plugins import Parser


class _Placeholder(Parser):
    name = "slurm"
    source = "slurm"


parser = _Placeholder()
