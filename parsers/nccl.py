"""nccl parser (placeholder until the family's rules land)."""

from toranalyze.plugins import Parser


class _Placeholder(Parser):
    name = "nccl"
    source = "nccl"


parser = _Placeholder()
