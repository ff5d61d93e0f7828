"""Package discovery. Everything else is in pyproject.toml.

The built-in parsers live in ``parsers/`` but install as ``toranalyze_parsers`` (a bare
``parsers`` package would collide with other distributions). setuptools' own discovery cannot
rename a folder, so the packages are found here: a new module or subpackage under either folder
is in the wheel without anyone listing it. Namespace discovery also finds folders that hold only
data (rules, presets, report assets), so their files ship through the package-data patterns.
The reference pages in ``docs/`` install as ``toranalyze/docs/`` (``toranalyze docs NAME`` prints
one), so what a ``--help`` text points at is there after a plain ``pip install``.
"""

from setuptools import find_namespace_packages, setup

SKIP = ["*.__pycache__", "*.__pycache__.*"]
core = find_namespace_packages(include=["toranalyze", "toranalyze.*"], exclude=SKIP)
builtin_parsers = [
    f"toranalyze_parsers{name[len('parsers') :]}"
    for name in find_namespace_packages(include=["parsers", "parsers.*"], exclude=SKIP)
]

setup(packages=[*core, *builtin_parsers, "toranalyze.docs"],
      package_dir={"toranalyze_parsers": "parsers", "toranalyze.docs": "docs"})
