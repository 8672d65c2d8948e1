"""Check a report page in a real headless Chromium: every image loads, no console errors.

``python -m tools.browser reports/index.html --screenshot reports/screenshot.png``
exits 1 with one line per problem. Chromium comes from the system (Debian package
``chromium``); Playwright drives it, so no browser is downloaded.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class PageCheck:
    images: int = 0
    drawn: int = 0  # Vega views rendered (an svg or canvas of class "marks")
    broken_images: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return (
            [f"image did not load: {s}" for s in self.broken_images]
            + [f"console error: {m}" for m in self.console_errors]
            + [f"request failed: {u}" for u in self.failed_requests]
        )


def find_chromium() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@contextmanager
def chromium_page(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A Playwright page in the system's headless Chromium; the browser closes on exit."""
    from playwright.sync_api import sync_playwright

    executable = find_chromium()
    if executable is None:
        raise FileNotFoundError("no Chromium found (apt-get install chromium; make browser)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()


def check_page(page_path: Path, screenshot: Path | None = None) -> PageCheck:
    """Load ``page_path`` in headless Chromium and report what did not work."""
    result = PageCheck()
    with chromium_page() as page:
        page.on("console", lambda m: m.type == "error" and result.console_errors.append(m.text))
        page.on("pageerror", lambda e: result.console_errors.append(str(e)))
        page.on("requestfailed", lambda r: result.failed_requests.append(r.url))
        page.goto(Path(page_path).resolve().as_uri(), wait_until="load")
        images = page.eval_on_selector_all(
            "img",
            "els => els.map(e => [e.getAttribute('src'), e.complete && e.naturalWidth > 0])",
        )
        result.images = len(images)
        result.drawn = page.eval_on_selector_all(".marks", "els => els.length")
        result.broken_images = [src for src, ok in images if not ok]
        if screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=True)
    return result


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("page", type=Path)
    cli.add_argument("--screenshot", type=Path, default=None)
    args = cli.parse_args()
    if not args.page.is_file():
        print(f"error: {args.page}: not found", file=sys.stderr)
        sys.exit(1)
    result = check_page(args.page, args.screenshot)
    for problem in result.problems:
        print(f"error: {args.page}: {problem}", file=sys.stderr)
    print(f"{args.page}: {result.images} images, {len(result.problems)} problems")
    sys.exit(1 if result.problems else 0)


if __name__ == "__main__":
    main()
