"""kernel parser (placeholder until the family's rules land)."""

from toranalyze.plugins import Parser


class _Placeholder(Parser):
    name = "kernel"
    source = "kernel"


parser = _Placeholder()
