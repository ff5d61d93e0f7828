"""The plan as an HTML page: TOR against the checkpoint interval for each strategy, and against
job size, each with its Monte Carlo points beside the closed form, above the plan's numbers."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots


def figure(p: dict[str, Any]) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TOR against the checkpoint interval",
                                                        "TOR against job size (best interval each)"))
    for name, pts in p["curves"]["interval"].items():
        fig.add_trace(go.Scatter(x=[t * 60 for t, _ in pts], y=[y for _, y in pts], mode="lines",
                                 name=f"{name} (closed form)"), 1, 1)
    for r in p["compare"] or []:
        fig.add_trace(go.Scatter(x=[r["best_interval_h"] * 60], y=[r["tor_monte_carlo"]], mode="markers",
                                 error_y={"array": [1.96 * r["mc_se"]]}, name=f"{r['strategy']} (Monte Carlo)"), 1, 1)
    used = p["inputs"]["strategy"]["interval_h"] * 60
    fig.add_trace(go.Scatter(x=[used], y=[p["monte_carlo"]["tor"]], mode="markers", marker={"symbol": "diamond"},
                             error_y={"array": [1.96 * p["monte_carlo"]["se"]]}, name="this plan (Monte Carlo)"), 1, 1)
    fig.add_trace(go.Scatter(x=[g for g, _ in p["curves"]["size"]], y=[y for _, y in p["curves"]["size"]],
                             mode="lines", name="closed form by size"), 1, 2)
    fig.add_trace(go.Scatter(x=[r["gpus"] for r in p["what_if"]], y=[r["tor_monte_carlo"] for r in p["what_if"]],
                             error_y={"array": [1.96 * r["mc_se"] for r in p["what_if"]]}, mode="markers",
                             name="Monte Carlo by size"), 1, 2)
    largest = (p.get("extrapolation") or {}).get("largest_observed_gpus")
    if largest:
        fig.add_vline(x=largest, line_dash="dot", annotation_text="largest job observed", row=1, col=2)
    fig.update_xaxes(type="log", title_text="interval (minutes)", row=1, col=1)
    fig.update_xaxes(type="log", title_text="GPUs", tickformat=",d", row=1, col=2)
    fig.update_yaxes(title_text="TOR", rangemode="tozero")
    fig.update_layout(height=480, legend={"orientation": "h", "y": -0.2})
    return fig


def _table(title: str, cols: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<h2>{html.escape(title)}</h2><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def tables(p: dict[str, Any]) -> str:
    """The numbers behind the figures: job sizes, and the strategies when compared."""
    out = _table("What if (job size)", ["GPUs", "interval (min)", "TOR closed form", "TOR Monte Carlo"],
                 [[f"{r['gpus']:,}", f"{r['tau_h'] * 60:.3g}", f"{r['tor_closed_form']:.4f}",
                   f"{r['tor_monte_carlo']:.4f} ± {r['mc_se']:.4f}"] for r in p["what_if"]])
    if p["compare"]:
        out += _table("Strategies at their best interval", ["strategy", "what it does", "interval (min)",
                                                            "TOR closed form", "TOR Monte Carlo"],
                      [[r["strategy"], r["describe"], f"{r['best_interval_h'] * 60:.3g}",
                        f"{r['tor_closed_form']:.4f}", f"{r['tor_monte_carlo']:.4f} ± {r['mc_se']:.4f}"]
                       for r in p["compare"]])
    return out


def page(p: dict[str, Any]) -> str:
    i = p["inputs"]
    cautions = "".join(f"<li>{html.escape(c)}</li>" for c in p["cautions"])
    head = (f"<h1>Plan: {i['gpus']:,} GPUs, {i['ideal_days']:g} ideal days, {html.escape(i['strategy']['name'])}</h1>"
            f"<p>TOR closed form <b>{p['closed_form']['tor']:.4f}</b>, Monte Carlo <b>{p['monte_carlo']['tor']:.4f}</b>"
            f" &plusmn; {p['monte_carlo']['se']:.4f}; checkpoint every {i['strategy']['interval_h'] * 60:.3g} min.</p>"
            + (f"<ul class='cautions'>{cautions}</ul>" if cautions else ""))
    body = figure(p).to_html(full_html=False, include_plotlyjs=True, config={"displaylogo": False})
    data = html.escape(json.dumps(p, indent=1, sort_keys=True, default=str))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>toranalyze plan</title></head><body>"
            f"{head}{body}{tables(p)}<details><summary>the plan as JSON</summary><pre>{data}</pre></details>"
            "</body></html>")


def write_page(p: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(page(p), encoding="utf-8")
    tmp.replace(path)
