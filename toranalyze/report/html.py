"""HTML building blocks shared by the job and fleet reports.

Every value that may come from a log goes through :func:`esc` (HTML) or :func:`esc_plot` (plotly
text, which plotly renders as a subset of HTML); figures travel as JSON in a non-executable
``<script type="application/json">`` block with every ``<`` written as ``\\u003c`` so no string can
close it. A Content-Security-Policy with a per-page nonce stops any script the escaping missed.
plotly.js is loaded from a file beside the report (:func:`write_plotly_js`), never from a CDN.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import shutil
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import plotly
import polars as pl

PLOTLY_JS = "plotly.min.js"

# Okabe & Ito's palette: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000", "#999999")
BUCKET_COLOURS = {
    "useful": "#009E73",
    "slowdown": "#F0E442",
    "rework": "#D55E00",
    "checkpoint": "#56B4E9",
    "detection": "#E69F00",
    "recovery": "#CC79A7",
    "other": "#999999",
}


def esc(value: Any) -> str:
    """Text for HTML (element content and quoted attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def esc_plot(values: Iterable[Any]) -> list[str]:
    """Texts for plotly (hover, labels, categories): plotly interprets a few tags, so escape all."""
    return [html.escape("" if v is None else str(v), quote=False) for v in values]


def css() -> str:
    return resources.files("toranalyze.report").joinpath("assets/report.css").read_text("utf-8")


def plotly_js_source() -> Path:
    return Path(plotly.__file__).parent / "package_data" / PLOTLY_JS


def write_plotly_js(directory: Path) -> Path:
    """Copy the installed plotly.js beside the reports (once; an up-to-date copy is kept)."""
    src, dst = plotly_js_source(), directory / PLOTLY_JS
    if not dst.exists() or dst.stat().st_size != src.stat().st_size:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return dst


class _Draw:
    """Marks where a figure is drawn: an inline script that needs the page's nonce."""

    def __init__(self, fid: str) -> None:
        self.fid = fid

    def html(self, nonce: str) -> str:
        return f'<script nonce="{nonce}">__drawFigure("{self.fid}")</script>'


class Page:
    """Collects sections and figures; :meth:`render` returns the whole document.

    Each figure is drawn by a one-line script right after its data, so the browser draws it as
    soon as it has parsed it: the tables below the figures (thousands of incident rows) are parsed
    and laid out after the figures, not before the first one."""

    def __init__(self, title: str, plotly_src: str = PLOTLY_JS) -> None:
        self.title = title
        self.plotly_src = plotly_src
        self.parts: list[str | _Draw] = []
        self.n_figs = 0

    def add(self, fragment: str) -> None:
        self.parts.append(fragment)

    def figure(self, fig: dict[str, Any], height: int = 360) -> None:
        """Add a plotly figure given as a plain ``{"data": [...], "layout": {...}}`` dict."""
        self.n_figs += 1
        fid = f"fig{self.n_figs}"
        layout = {"height": height, "colorway": list(PALETTE), "font": {"size": 12}, **fig.get("layout", {})}
        layout["margin"] = {"l": 60, "r": 20, "t": 36, "b": 40, **fig.get("layout", {}).get("margin", {})}
        blob = json.dumps({"data": fig["data"], "layout": layout}, separators=(",", ":"), default=str)
        blob = blob.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        self.parts.append(f'<div class="fig" id="{fid}" style="height:{height}px"></div>'
                          f'<script type="application/json" id="{fid}-data">{blob}</script>')
        self.parts.append(_Draw(fid))

    def render(self) -> str:
        # The nonce is a digest of the page: unguessable by a log line (its own text is part of
        # what is digested) and the same for the same content, so an unchanged input re-renders
        # byte-identical pages.
        digest = "\n".join(p if isinstance(p, str) else p.fid for p in self.parts)
        nonce = base64.urlsafe_b64encode(hashlib.blake2b(digest.encode(), digest_size=16).digest()).decode().rstrip("=")
        csp = (f"default-src 'none'; script-src 'nonce-{nonce}' 'unsafe-eval'; style-src 'unsafe-inline'; "
               "img-src data: blob:; font-src data:; worker-src blob:")
        return "\n".join([
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(self.title)}</title>",
            f"<style>{css()}</style>",
            f'<script nonce="{nonce}" src="{esc(self.plotly_src)}"></script>',
            f'<script nonce="{nonce}">{_LOADER}</script>',
            "</head><body>",
            *(p if isinstance(p, str) else p.html(nonce) for p in self.parts),
            "</body></html>",
        ])


# Draws each figure as the parser reaches it (``__drawFigure`` after its data). Once the page is
# parsed and every figure is on screen, body[data-figures] holds the number drawn (tests and
# benchmarks wait on it), data-drawn-ms when the last figure reached the screen, data-start-ms
# when the first began and data-complete-ms when the whole page was parsed; window.__figureMs each
# figure's time to the screen. Long tables stay unrendered (html.drawing) until the figures are
# drawn. A missing plotly.js is said in the page.
_LOADER = """
(function () {
  var shown = 0, drawn = 0, parsed = false, start = null, lastShown = 0;
  window.__figureMs = [];
  document.documentElement.classList.add('drawing');
  function finish() {
    var figs = document.querySelectorAll('div.fig');
    if (!parsed || shown < figs.length) { return; }
    document.documentElement.classList.remove('drawing');
    var b = document.body.dataset;
    b.figuresTotal = figs.length;
    b.startMs = Math.round(start === null ? performance.now() : start);
    b.drawnMs = Math.round(lastShown || performance.now());
    b.completeMs = Math.round(performance.now());
    b.figures = drawn;
  }
  // a figure counts as drawn once the frame after it is out: a WebGL canvas or a large SVG is
  // composited then, which can take longer than plotly's own work
  function settle(t, ok) {
    if (ok) { drawn++; }
    requestAnimationFrame(function () { setTimeout(function () {
      lastShown = Math.max(lastShown, performance.now());
      window.__figureMs.push(Math.round(performance.now() - t)); shown++; finish();
    }, 0); });
  }
  window.__drawFigure = function (id) {
    var d = document.getElementById(id), t = performance.now();
    if (start === null) { start = t; }
    if (typeof Plotly === 'undefined') {
      d.textContent = 'plotly.min.js was not found beside this report'; settle(t, false); return;
    }
    try {
      var spec = JSON.parse(document.getElementById(id + '-data').textContent);
      Plotly.newPlot(d, spec.data, spec.layout, {displaylogo: false, responsive: true})
        .then(function () { settle(t, true); }, function () { settle(t, false); });
    } catch (e) { settle(t, false); throw e; }  // counted as not drawn, and still reported
  };
  document.addEventListener('DOMContentLoaded', function () { parsed = true; finish(); });
})();
"""


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[bool] | None = None,
          cls: str = "t") -> str:
    """An HTML table. Cells are given already escaped (they may hold markup the caller built)."""
    num = list(numeric or [False] * len(headers))
    head = "".join(f'<th class="{"n" if n else ""}">{esc(h)}</th>' for h, n in zip(headers, num, strict=True))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"n" if n else ""}">{c}</td>' for c, n in zip(r, num, strict=True)) + "</tr>"
        for r in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def scroll_box(inner: str, rows: int) -> str:
    """A scrolling box for a table; long ones are laid out lazily (``content-visibility``)."""
    return f'<div class="scroll{" lazy" if rows > 40 else ""}">{inner}</div>'


def long_table(inner: str, rows: int) -> str:
    """A table shown whole (no scroll box: nothing hidden inside it), laid out lazily when long."""
    return f'<div class="whole{" lazy" if rows > 40 else ""}">{inner}</div>'


def cards(items: Sequence[tuple[str, str]]) -> str:
    """Header numbers: (label, value) pairs, escaped here."""
    inner = "".join(f'<div class="card"><div class="k">{esc(k)}</div><div class="v" data-key="{esc(k)}">{esc(v)}'
                    f"</div></div>" for k, v in items)
    return f'<div class="cards">{inner}</div>'


# Python's datetime holds years 1 to 9999; polars holds more, and a log may state year 0 or a
# time past 9999 (or an analysis add a duration to one). Pages show such times at the nearest edge.
_EDGE_US = (-62_135_596_800_000_000, 253_402_300_799_999_999)  # 0001-01-01, 9999-12-31T23:59:59.999999
_PER_US = {"ms": (1, 1000), "us": (1, 1), "ns": (1000, 1)}  # (multiply, divide) µs into the unit
_I64 = (-(2**63), 2**63 - 1)


def clip_times(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with every datetime column clipped to what Python's datetime holds (a no-op for the
    usual frame), so rows can be read as Python values."""
    exprs = []
    for name, dtype in df.schema.items():
        if isinstance(dtype, pl.Datetime):
            mul, div = _PER_US[dtype.time_unit or "us"]
            lo, hi = (min(max(e * mul // div, _I64[0]), _I64[1]) for e in _EDGE_US)
            exprs.append(pl.col(name).cast(pl.Int64).clip(lo, hi).cast(dtype))
    return df.with_columns(exprs) if exprs else df


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = int(round(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h:02d}h{m:02d}m"
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    return f"{m}m{s:02d}s"
