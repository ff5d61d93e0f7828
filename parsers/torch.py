"""torch parser (placeholder until the family's rules land)."""

from toranalyze.plugins import Parser


class _Placeholder(Parser):
    name = "torch"
    source = "trainer"


parser = _Placeholder()
