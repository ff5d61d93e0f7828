"""trainer parser (placeholder until the family's rules land)."""

from toranalyze.plugins import Parser


class _Placeholder(Parser):
    name = "trainer"
    source = "trainer"


parser = _Placeholder()
