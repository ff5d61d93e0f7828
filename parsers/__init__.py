"""Built-in parser plugins of toranalyze (installed as ``toranalyze_parsers``).

One module per log family; each exposes ``parser``, registered in pyproject.toml
under the ``toranalyze.parsers`` entry-point group like any third-party plugin.
"""
