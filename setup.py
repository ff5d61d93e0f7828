"""Package discovery. Everything else is in pyproject.toml.

The built-in parsers live in ``parsers/`` but install as ``toranalyze_parsers`` (a bare
``parsers`` package would collide with other distributions). setuptools' own discovery cannot
rename a folder, so the packages are found here: a new module or subpackage under either folder
is in the wheel without anyone listing it.
"""

from setuptools import find_packages, setup

core = find_packages(include=["toranalyze", "toranalyze.*"])
builtin_parsers = [
    f"toranalyze_parsers{name[len('parsers') :]}" for name in find_packages(include=["parsers", "parsers.*"])
]

setup(packages=core + builtin_parsers, package_dir={"toranalyze_parsers": "parsers"})
