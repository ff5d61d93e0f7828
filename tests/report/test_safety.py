"""Escaping of log-derived text and redaction of secrets in the report, terminal and JSON summaries."""

from __future__ import annotations

import io
import json
import re

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from toranalyze.report.job import JobReportInput, render_job_report
from toranalyze.report.redact import MASK, redact_json, redact_strings, redact_text
from toranalyze.report.text import print_summary

from .conftest import HOSTILE_FILE_PART, HOSTILE_JOB, HOSTILE_NODE, IMG, SCRIPT, SECRETS, SVG, Run, redacted_input


@pytest.mark.parametrize("secret", list(SECRETS))
def test_each_secret_shape_is_redacted(secret: str) -> None:
    out = redact_text(f"before {secret} after")
    assert MASK in out and out.startswith("before ") and out.endswith(" after")
    # the secret's value is gone (the Bearer/password keyword may stay)
    value = secret.split("=")[-1].split(" ")[-1]
    assert value not in out


@pytest.mark.parametrize("text", [
    "step 100 loss 2.31 tokens_per_sec=12000",  # 'token' alone is no secret
    "NCCL INFO comm 0x55d rank 3 nranks 32 cudaDev 3 busId 1b000",
    "Xid 79, pid=1234, GPU has fallen off the bus.",
    "https://huggingface.co/meta-llama/Llama-2-7b",
])
def test_ordinary_log_lines_are_untouched(text: str) -> None:
    assert redact_text(text) == text


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60),
       st.sampled_from(list(SECRETS)))
def test_a_secret_never_survives_whatever_surrounds_it(noise: str, secret: str) -> None:
    value = secret.split("=")[-1].split(" ")[-1]
    assert value not in redact_text(f"{noise} {secret} {noise}")


def test_redact_strings_and_json() -> None:
    df = pl.DataFrame({"message": ["x hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"], "evidence": [["password=abc123xyz"]]})
    out = redact_strings(df)
    assert out["message"][0] == f"x {MASK}" and out["evidence"][0].to_list() == [f"password={MASK}"]
    doc = redact_json({"a": [{"w": "Bearer abcdefghijklmnop"}], "n": 3})
    assert doc == {"a": [{"w": f"Bearer {MASK}"}], "n": 3}


@pytest.fixture(scope="module")
def hostile_html(hostile_run: Run) -> str:
    """The page as ``analyze`` renders it: secrets taken out of its inputs at the one point where a
    run's outputs are made (redaction on by default), the page labelled so."""
    return render_job_report(redacted_input(hostile_run), redacted=True)


def _script_bodies(page: str) -> list[str]:
    return re.findall(r"<script[^>]*>(.*?)</script>", page, re.S)


def test_hostile_text_is_escaped_everywhere(hostile_html: str) -> None:
    for bad in (SCRIPT, IMG, SVG, HOSTILE_NODE, HOSTILE_FILE_PART, HOSTILE_JOB):
        assert bad not in hostile_html
    # shown as text in HTML: the node, the file (in the evidence) and the job's name
    assert "gpu-004&lt;img src=x onerror=&quot;window.__pwned=&#x27;img&#x27;&quot;&gt;" in hostile_html
    assert "slurm-731400&lt;script&gt;window.__pwned=&quot;script&quot;&lt;/script&gt;.out" in hostile_html
    assert "<h1>gpt&lt;svg onload=" in hostile_html
    # the only scripts are ours: plotly.js, the figure data (JSON, no raw '<') and the loader
    bodies = _script_bodies(hostile_html)
    assert len(re.findall(r"<script\b", hostile_html)) == len(bodies)
    assert all("<" not in b for b in bodies if b.lstrip().startswith("{"))
    assert hostile_html.count("__pwned") >= 3  # present as inert text only


def test_figure_json_carries_escaped_text(hostile_html: str) -> None:
    blobs = [json.loads(b) for b in _script_bodies(hostile_html) if b.lstrip().startswith("{")]
    texts = json.dumps(blobs)
    assert "gpu-004&lt;img" in texts or "gpu-004\\u0026lt;img" in texts
    assert "<img" not in texts and "<script" not in texts


def test_secrets_are_redacted_by_default_and_kept_on_request(hostile_run: Run, hostile_html: str) -> None:
    for secret in SECRETS:
        assert secret.split("=")[-1].split(" ")[-1] not in hostile_html
    assert MASK in hostile_html
    raw = render_job_report(JobReportInput(hostile_run.analysis, hostile_run.events, hostile_run.summary))
    assert "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345" in raw and "hunter2secret" in raw
    assert SCRIPT not in raw  # opting out of redaction never opts out of escaping


def test_terminal_summary_shows_markup_as_text(hostile_run: Run) -> None:
    buf = io.StringIO()
    print_summary(hostile_run.analysis, Console(file=buf, width=400, color_system=None))
    text = buf.getvalue()
    assert "gpu-004<img src=x" in text  # rich markup is escaped, the text shown as is
    assert "gpt<svg onload" in text
