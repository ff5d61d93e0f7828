"""The installed wheel, not the checkout: what a user gets from a plain ``pip install .``.

The rest of the suite runs against an editable install, which imports from the source tree and so
cannot see a module or data file the wheel leaves out. Here the wheel is built, installed into a new
virtual environment, and every command the README documents is run from a folder outside the
checkout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

# Source folder -> the package name it installs as.
PACKAGES = {"toranalyze": "toranalyze", "parsers": "toranalyze_parsers"}
DATA_PATTERNS = ("*.toml", "*.json", "*.js", "*.css", "*.html")


def readme_commands() -> list[str]:
    """The sub-commands named in the README's command table (`toranalyze NAME ...` rows)."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Commands"):]
    table = table[: table.index("\n## ", 3)]
    names = re.findall(r"^\| `toranalyze ([a-z-]+)", table, flags=re.M)
    assert names, "the README's command table lists no command"
    return sorted(set(names))


def expected_files() -> set[str]:
    """Every module and data file under the source packages, as wheel paths."""
    want = set()
    for src, dst in PACKAGES.items():
        for p in (ROOT / src).rglob("*"):
            if "__pycache__" in p.parts or not p.is_file():
                continue
            if p.suffix == ".py" or any(p.match(pat) for pat in DATA_PATTERNS):
                want.add(f"{dst}/{p.relative_to(ROOT / src).as_posix()}")
    want |= {f"toranalyze/docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}  # the reference pages
    return want


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                   check=True, cwd=out)
    (whl,) = out.glob("toranalyze-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with the wheel installed (not editable); returns its bin folder."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)], check=True,
                   cwd=env_dir, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return bin_dir


def run(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_wheel_holds_every_module_and_data_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(expected_files() - names)
    assert not missing, f"the wheel leaves out {len(missing)} files: {missing[:20]}"


def test_installed_wheel_imports_from_site_packages(installed: Path, tmp_path: Path) -> None:
    code = "import toranalyze, toranalyze_parsers; print(toranalyze.__file__); print(toranalyze_parsers.__file__)"
    res = run(installed, str(installed / "python"), "-c", code, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for line in res.stdout.split():
        assert "site-packages" in line and not line.startswith(str(ROOT)), line


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_help_from_the_wheel(installed: Path, tmp_path: Path, command: str) -> None:
    res = run(installed, str(installed / "toranalyze"), command, "--help", cwd=tmp_path)
    assert res.returncode == 0, f"toranalyze {command} --help failed:\n{res.stdout}\n{res.stderr}"
    assert "Usage: toranalyze" in res.stdout


def test_simulate_then_analyze_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    exe = str(installed / "toranalyze")
    sim = run(installed, exe, "simulate", "--seed", "5", "--out", "run", "--duration", "40m", cwd=tmp_path)
    assert sim.returncode == 0, sim.stderr
    assert (tmp_path / "run" / "truth.json").is_file()
    res = run(installed, exe, "analyze", "run", "-o", "out", "-q", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for table in ("events", "attempts", "incidents", "tor"):
        assert (tmp_path / "out" / f"{table}.parquet").is_file(), table
    # the report's stylesheet and secret patterns ship in the wheel, plotly.js is copied beside it
    assert res.stdout.strip() == "report: out/report.html", res.stdout
    assert (tmp_path / "out" / "plotly.min.js").stat().st_size > 1_000_000
    # the run's rates.json feeds the planner (its JSON Schema ships as package data)
    plan = run(installed, exe, "plan", "--rates", "out/rates.json", "--gpus", "1024", "--json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert 0 < json.loads(plan.stdout)["closed_form"]["tor"] <= 1


def test_the_pages_help_points_at_ship_with_the_wheel(installed: Path, tmp_path: Path) -> None:
    exe = str(installed / "toranalyze")
    helps = "".join(run(installed, exe, *c, "--help", cwd=tmp_path).stdout for c in [[], *([n] for n in readme_commands())])
    named = set(re.findall(r"docs/([a-z_]+)\.md", helps)) | set(re.findall(r"toranalyze docs ([a-z_]+)", helps))
    assert named, "no --help text points at a reference page"
    listed = run(installed, exe, "docs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.split()) == sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    for name in sorted(named):
        page = run(installed, exe, "docs", name, cwd=tmp_path)
        assert page.returncode == 0, f"toranalyze docs {name}: {page.stderr}"
        assert page.stdout == (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8"), name
