"""Inputs and outputs at object-store URLs give what the same files give locally (docs/storage.md).

A local S3 mock (moto's server, on a free loopback port) holds a simulated run, the sample runs
and a small fleet; ``ingest``, ``analyze`` and ``fleet`` read them from ``s3://`` and write to
``s3://``, and every table must equal the local one once the ``file`` column (and the evidence
that quotes it) is taken relative to the input root: a URL is recorded as the URL itself.
"""

from __future__ import annotations

import bz2
import gzip
import importlib.util
import io
import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner, Result
from polars.testing import assert_frame_equal

from toranalyze import storage
from toranalyze.cli import cli
from toranalyze.fleet.store import Store
from toranalyze.ingest.discover import discover

SAMPLES = Path(__file__).parents[2] / "sample_logs"
HAS_MOTO = importlib.util.find_spec("moto") is not None and importlib.util.find_spec("flask") is not None
HAS_RAY = importlib.util.find_spec("ray") is not None
BUCKET = "runs"
ANALYSIS_TABLES = ("events", "attempts", "incidents", "slow_periods", "tor")

needs_moto = pytest.mark.skipif(not HAS_MOTO, reason="moto[server] is not installed (pip install -e '.[test]')")


def _invoke(*args: str) -> Result:
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res


def _compressed_run(src: Path, dst: Path) -> Path:
    """A copy of a run with one file each gzip-, bzip2- and zstd-compressed (read as locally)."""
    shutil.copytree(src, dst)
    outs = sorted(dst.glob("slurm-*.out"))
    kern = sorted(dst.glob("nodes/*/kern.log"))
    for path, suffix, pack in ((outs[0], ".gz", gzip.compress), (outs[1], ".bz2", bz2.compress),
                               (kern[0], ".zst", _zstd)):
        path.with_name(path.name + suffix).write_bytes(pack(path.read_bytes()))
        path.unlink()
    return dst


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


@pytest.fixture(scope="module")
def local_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runs/sim (a simulated run, partly compressed), runs/gpt-small, runs/gpt-small-k8s, and
    fleet/ (three short runs)."""
    root = tmp_path_factory.mktemp("tree")
    sim = root / "sim-src"
    _invoke("simulate", "--out", str(sim), "--seed", "5", "--preset", "small")
    _compressed_run(sim, root / "runs" / "sim")
    shutil.rmtree(sim)
    for name in ("gpt-small", "gpt-small-k8s"):
        shutil.copytree(SAMPLES / name, root / "runs" / name)
    _invoke("simulate", "--seed", "7", "--out", str(root / "fleet"), "--preset", "fleet", "--jobs", "3",
            "--duration", "40m", "--nodes", "1")
    return root


@pytest.fixture(scope="module")
def s3(local_tree: Path) -> Iterator[str]:
    """A moto S3 server holding ``local_tree`` under s3://runs/; credentials and endpoint only in
    the environment, as a user would set them. Yields the bucket's URL."""
    if not HAS_MOTO:
        pytest.skip("moto[server] is not installed (pip install -e '.[test]')")
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    storage._filesystem.cache_clear()  # filesystems made before read another endpoint
    try:
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        for path in sorted(p for p in local_tree.rglob("*") if p.is_file()):
            client.upload_file(str(path), BUCKET, path.relative_to(local_tree).as_posix())
        yield f"s3://{BUCKET}"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        storage._filesystem.cache_clear()


def _read(url_or_path: str | Path, name: str) -> bytes:
    with storage.open_input(storage.join(str(url_or_path), name)) as fh:
        return fh.read()


def _table(where: str | Path, name: str, root: str) -> pl.DataFrame:
    """A written table with paths under ``root`` made relative (the file column, evidence)."""
    df = pl.read_parquet(io.BytesIO(_read(where, f"{name}.parquet")))
    prefix = root.rstrip("/") + "/"
    for col in ("file", "path"):  # event files; the run's folder
        if col in df.columns:
            df = df.with_columns(pl.col(col).str.strip_prefix(prefix).replace(root, "."))
    if "evidence" in df.columns and df.schema["evidence"] == pl.List(pl.String):
        df = df.with_columns(pl.col("evidence").list.eval(pl.element().str.strip_prefix(prefix)))
    return df


def _same_fleet(got: str, want: Path, copy: Path) -> Store:
    """The fleet store at URL ``got`` (copied to ``copy``) holds the tables of the one at ``want``."""
    for e in storage.list_files(got):
        storage.download(e.path, copy / e.path[len(got) + 1:])
    remote = Store(copy)
    for name, frame in Store(want).read_tables().items():
        assert frame.height > 0 or name == "incidents", name
        assert_frame_equal(remote.read(name), frame, check_exact=True)
    return remote


def _same_tables(got: str | Path, got_root: str, want: Path, want_root: str,
                 names: tuple[str, ...] = ANALYSIS_TABLES) -> None:
    for name in names:
        expected = _table(want, name, want_root)
        assert expected.height > 0 or name in ("incidents", "slow_periods"), name
        assert_frame_equal(_table(got, name, got_root), expected, check_exact=True)


# --- local engine ------------------------------------------------------------------------------

@needs_moto
def test_discovery_of_a_prefix_follows_the_local_rules(s3: str, local_tree: Path) -> None:
    for run in ("sim", "gpt-small-k8s"):
        remote, problems = discover([f"{s3}/runs/{run}/"])
        local, _ = discover([str(local_tree / "runs" / run)])
        assert not problems
        assert [f.path.removeprefix(f"{s3}/runs/{run}/") for f in remote] == \
               [os.path.relpath(f.path, local_tree / "runs" / run) for f in local]
        assert [f.size for f in remote] == [f.size for f in local]


@needs_moto
def test_ingest_from_s3_to_s3_equals_local(s3: str, local_tree: Path, tmp_path: Path) -> None:
    src = str(local_tree / "runs" / "sim")
    _invoke("ingest", src, "-o", str(tmp_path / "local"), "-q", "-j", "1")
    res = _invoke("ingest", f"{s3}/runs/sim/", "-o", f"{s3}/out/sim", "-q", "-j", "1")
    assert f"-> {s3}/out/sim" in res.output
    _same_tables(f"{s3}/out/sim", f"{s3}/runs/sim", tmp_path / "local", src, ("events",))
    events = pl.read_parquet(io.BytesIO(_read(f"{s3}/out/sim", "events.parquet")))
    assert events["file"].str.starts_with(f"{s3}/runs/sim/").all()  # the URL, as given
    assert events["file"].str.ends_with(".gz").any() and events["file"].str.ends_with(".zst").any()
    remote = json.loads(_read(f"{s3}/out/sim", "summary.json"))
    local = json.loads((tmp_path / "local" / "summary.json").read_text())
    assert [f["path"].removeprefix(f"{s3}/runs/sim/") for f in remote["per_file"]] == \
           [os.path.relpath(f["path"], src) for f in local["per_file"]]
    assert {k: v for k, v in remote.items() if k != "per_file"} == {k: v for k, v in local.items() if k != "per_file"}


@needs_moto
@pytest.mark.parametrize("run", ["gpt-small", "gpt-small-k8s"])
def test_analyze_from_s3_to_s3_equals_local(s3: str, local_tree: Path, tmp_path: Path, run: str) -> None:
    src = str(local_tree / "runs" / run)
    _invoke("analyze", src, "-o", str(tmp_path / "local"), "-q", "-j", "1", "--no-report")
    res = _invoke("analyze", f"{s3}/runs/{run}", "-o", f"{s3}/out/analyze-{run}", "-q", "-j", "1")
    assert f"report: {s3}/out/analyze-{run}/report.html" in res.output
    _same_tables(f"{s3}/out/analyze-{run}", f"{s3}/runs/{run}", tmp_path / "local", src)
    assert json.loads(_read(f"{s3}/out/analyze-{run}", "rates.json")) == \
           json.loads((tmp_path / "local" / "rates.json").read_text())
    page = _read(f"{s3}/out/analyze-{run}", "report.html").decode()
    assert "plotly.min.js" in page and _read(f"{s3}/out/analyze-{run}", "plotly.min.js")


@needs_moto
def test_fleet_from_s3_to_s3_equals_local_and_is_incremental(s3: str, local_tree: Path, tmp_path: Path) -> None:
    _invoke("fleet", str(local_tree / "fleet"), "-o", str(tmp_path / "local"), "-q", "-j", "1", "--no-report")
    _invoke("fleet", f"{s3}/fleet", "-o", f"{s3}/store", "-q", "-j", "1", "--no-report")
    remote = _same_fleet(f"{s3}/store", tmp_path / "local", tmp_path / "copy")
    assert sorted(r.path for r in remote.runs().values()) == [f"{s3}/fleet/fleet-00{i}" for i in (0, 1, 2)]
    again = _invoke("fleet", f"{s3}/fleet", "-o", f"{s3}/store", "-j", "1", "--no-report")
    assert "0 analysed, 3 unchanged" in again.output and "nothing changed" in again.output


@needs_moto
def test_missing_bucket_and_key_name_the_url_and_next_step(s3: str, tmp_path: Path) -> None:
    for url, hint in (("s3://no-such-bucket/run/", "check the bucket name"),
                      (f"{s3}/runs/no-such-run/", "check the bucket and key")):
        for command in ("ingest", "fleet"):
            res = CliRunner().invoke(cli, [command, url, "-o", str(tmp_path / "out"), "-q"])
            assert res.exit_code != 0
            text = " ".join(res.output.split()) + " " + " ".join(str(getattr(res.exception, a, "")) for a in
                                                                  ("path", "message", "hint"))
            assert url in text and hint in text, text


def test_store_errors_say_what_to_do() -> None:
    denied = storage._error(OSError("AWS Error ACCESS_DENIED during HeadObject: No credentials"), "s3://b/k")
    assert denied.path == "s3://b/k" and "AWS_ACCESS_KEY_ID" in (denied.hint or "")
    missing = storage._error(FileNotFoundError("Path does not exist 'b/k'"), "s3://b/k")
    assert "bucket and key" in (missing.hint or "")


# --- file:// (no mock) ---------------------------------------------------------------------------

def test_file_urls_equal_local_paths(tmp_path: Path) -> None:
    src = _compressed_run(SAMPLES / "gpt-small", tmp_path / "run")
    url = f"file://{src}/"
    _invoke("analyze", str(src), "-o", str(tmp_path / "local"), "-q", "-j", "1", "--no-report")
    _invoke("analyze", url, "-o", f"file://{tmp_path}/url", "-q", "-j", "1", "--no-report")
    _same_tables(tmp_path / "url", f"file://{src}", tmp_path / "local", str(src))
    events = pl.read_parquet(tmp_path / "url" / "events.parquet")
    assert events["file"].str.starts_with(f"file://{src}/").all()
    assert events.filter(pl.col("file").str.contains("/nodes/"))["node"].null_count() == 0  # node from the key


# --- Ray ----------------------------------------------------------------------------------------

@needs_moto  # a Ray start-up, then ingest and a fleet through Ray tasks that read s3:// themselves (12 s)
@pytest.mark.slow  # a Ray start-up; CI's slow pass installs the ray extra
@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'toranalyze[ray]')")
def test_ray_tasks_read_urls_themselves(s3: str, local_tree: Path, tmp_path: Path) -> None:
    import ray

    src = str(local_tree / "runs" / "sim")
    _invoke("ingest", src, "-o", str(tmp_path / "local"), "-q", "-j", "1")
    _invoke("fleet", str(local_tree / "fleet"), "-o", str(tmp_path / "fleet"), "-q", "-j", "1", "--no-report")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # workers inherit the AWS_* env
        _invoke("ingest", f"{s3}/runs/sim", "-o", f"{s3}/ray/sim", "-q", "-j", "2", "--engine", "ray")
        _invoke("fleet", f"{s3}/fleet", "-o", f"{s3}/ray/store", "-q", "-j", "2", "--engine", "ray", "--no-report")
    finally:
        ray.shutdown()
    _same_tables(f"{s3}/ray/sim", f"{s3}/runs/sim", tmp_path / "local", src, ("events",))
    _same_fleet(f"{s3}/ray/store", tmp_path / "fleet", tmp_path / "copy")
