"""Open a report in headless Chromium (the distribution's, through Playwright) and wait for its figures.

Used by the browser tests and the report benchmark; never downloads a browser. Needs the
``playwright`` package (the ``test`` extra) and a ``chromium`` executable.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Opened:
    seconds_to_last_figure: float
    figures: int
    figures_total: int
    rendered: int  # figure divs holding an svg or a canvas
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    injected: Any = None  # window.__pwned, set by a hostile test string if it ever ran


def open_report(path: Path, screenshot: Path | None = None, timeout_s: float = 60.0,
                check: Any = None, viewport: tuple[int, int] = (1300, 900), full_page: bool = True,
                ) -> tuple[Opened, Any]:
    """Load ``path`` from file://, wait until every figure is drawn; ``check(page)`` runs before closing.
    The screenshot is of the whole page, or with ``full_page=False`` of the viewport alone."""
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    if exe is None:
        raise RuntimeError("no chromium executable on PATH")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            errors: list[str] = []
            page_errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            t0 = time.perf_counter()
            page.goto(path.resolve().as_uri(), wait_until="load", timeout=timeout_s * 1000)
            page.wait_for_function("document.body.dataset.figures !== undefined", timeout=timeout_s * 1000)
            elapsed = time.perf_counter() - t0
            state = page.evaluate("""() => ({
                figures: Number(document.body.dataset.figures),
                total: Number(document.body.dataset.figuresTotal),
                rendered: Array.from(document.querySelectorAll('div.fig')).filter(
                    d => d.querySelector('svg.main-svg, canvas')).length,
                injected: window.__pwned === undefined ? null : window.__pwned,
            })""")
            extra = check(page) if check else None
            if screenshot is not None:
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshot), full_page=full_page)
        finally:
            browser.close()
    return Opened(elapsed, state["figures"], state["total"], state["rendered"], errors, page_errors,
                  state["injected"]), extra


def main(argv: list[str] | None = None) -> int:
    """``python -m toranalyze.report.browser REPORT.html OUT.png``: what a reader sees on opening a
    report (a 1366×768 viewport, or ``--full`` the whole page), as a PNG."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m toranalyze.report.browser", description=main.__doc__)
    ap.add_argument("report", type=Path)
    ap.add_argument("png", type=Path)
    ap.add_argument("--size", default="1366x768", help="viewport WIDTHxHEIGHT in CSS pixels (default 1366x768)")
    ap.add_argument("--full", action="store_true", help="the whole page, not only the viewport")
    args = ap.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    opened, _ = open_report(args.report, args.png, viewport=(width, height), full_page=args.full)
    print(f"{args.png}: {opened.figures} of {opened.figures_total} figures drawn")
    return 0 if opened.figures == opened.figures_total and not opened.page_errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
