"""kubernetes parser (placeholder until the family's rules land)."""

from toranalyze.plugins import Parser


class _Placeholder(Parser):
    name = "kubernetes"
    source = "kubernetes"


parser = _Placeholder()
