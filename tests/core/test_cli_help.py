"""The command line's help: fast to show (nothing heavy imported), whole in the listings, every
option explained with a metavar that says what it expects, no internal module names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from toranalyze.cli import LAZY_COMMANDS, cli
from toranalyze.cli import main as cli_main
from toranalyze.docgen import doc_names

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("polars", "numpy", "scipy", "plotly", "pyarrow", "deltalake", "rich.table")
UNCHECKED: set[str] = set()
VAGUE_METAVARS = {"TEXT", "INTEGER", "FLOAT"}
MODULE_NAME = re.compile(r"\btoranalyze(_parsers)?\.[a-z_]+")


def loaded_after(*argv: str) -> set[str]:
    """The heavy modules in sys.modules after ``toranalyze ARGV`` ran in a fresh interpreter."""
    code = (
        "import sys\n"
        f"sys.argv = ['toranalyze', *{list(argv)!r}]\n"
        "from toranalyze.launch import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print('LOADED', *[m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.splitlines()[-1].split()[1:])


@pytest.mark.parametrize("argv", [["--help"], ["fleet", "--help"], ["ingest", "--help"], ["docs", "--help"],
                                  ["plan", "--help"]])
def test_help_loads_no_heavy_library(argv: list[str]) -> None:
    assert loaded_after(*argv) == set()


def run_main(*argv: str) -> None:
    old = sys.argv
    sys.argv = ["toranalyze", *argv]
    try:
        cli_main()
    finally:
        sys.argv = old


def commands() -> dict[str, click.Command]:
    ctx = click.Context(cli)
    found = {name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)}
    return {name: c for name, c in found.items() if c is not None}


def test_the_listing_shows_every_line_whole() -> None:
    res = CliRunner().invoke(cli, ["--help"], terminal_width=80)
    assert res.exit_code == 0, res.output
    listing = res.output[res.output.index("Commands:"):]
    rows = re.findall(r"^  (\S+) +(.+)$", listing, flags=re.M)
    assert {name for name, _ in rows} == set(commands())
    for name, line in rows:
        assert not line.endswith("..."), f"{name}: {line}"


def test_a_lazy_commands_line_is_its_own_short_help() -> None:
    found = commands()
    for name, (_, short) in LAZY_COMMANDS.items():
        assert found[name].get_short_help_str(200) == short, name


@pytest.mark.parametrize("name", sorted(set(commands()) - UNCHECKED))
def test_help_names_no_module(name: str) -> None:
    command = commands()[name]
    texts = [command.help or "", command.get_short_help_str(200)]
    texts += [p.help or "" for p in command.params if isinstance(p, click.Option)]
    for text in texts:
        assert not MODULE_NAME.search(text), f"{name}: {text}"


@pytest.mark.parametrize("name", sorted(set(commands()) - UNCHECKED))
def test_every_option_has_help(name: str) -> None:
    missing = [p.name for p in commands()[name].params if isinstance(p, click.Option) and not p.help]
    assert not missing, f"{name}: {missing}"


@pytest.mark.parametrize("name", sorted(set(commands()) - UNCHECKED))
def test_metavars_say_what_is_expected(name: str) -> None:
    command = commands()[name]
    ctx = click.Context(command, info_name=name)
    vague = {}
    for p in command.params:
        if isinstance(p, click.Option) and not p.is_flag and not isinstance(p.type, click.Choice):
            metavar = p.make_metavar(ctx) if "ctx" in p.make_metavar.__code__.co_varnames else p.make_metavar()
            if metavar.split("...")[0] in VAGUE_METAVARS:
                vague[p.name] = metavar
    assert not vague, f"{name}: {vague}"


def test_the_pages_help_points_at_are_there() -> None:
    """What a --help text points at (docs/NAME.md or ``toranalyze docs NAME``) is a shipped page
    (tests/packaging checks the installed wheel)."""
    helps = "".join(CliRunner().invoke(cli, [*c, "--help"]).output for c in [[], *([n] for n in commands())])
    named = set(re.findall(r"docs/([a-z_]+)\.md", helps)) | set(re.findall(r"toranalyze docs ([a-z_]+)", helps))
    assert named and named <= set(doc_names()), named - set(doc_names())
    assert doc_names() == sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    for name in named:
        res = CliRunner().invoke(cli, ["docs", name])
        assert res.exit_code == 0 and res.output == (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8")


def test_an_unknown_page_is_one_line_naming_the_pages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_main("docs", "nope")
    assert exit_.value.code == 2
    message = capsys.readouterr().err
    assert "no reference page 'nope'" in message and "storage" in message and "Traceback" not in message
