"""A picture of a report's first page (the scorecard), taken by the Chromium the
browser test drives (tests/browser.py: Debian's chromium through Selenium, the
same flags), for README: ``docs/report-first-page.png``.

    .venv/bin/python tools/report_screenshot.py outputs/quick/index.html [OUT.png]

The window is 1300 pixels wide (the browser test's) and ``--height`` tall
(default 1000): what a reader sees on opening the page.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from browser import chromium  # noqa: E402  (the browser test's Chromium)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("index", type=Path, help="a report's index.html")
    ap.add_argument("out", type=Path, nargs="?", default=ROOT / "docs" / "report-first-page.png")
    ap.add_argument("--height", type=int, default=1000)
    args = ap.parse_args(argv)
    if not args.index.is_file():
        print(f"{args.index}: no such file (make report writes outputs/PROFILE/index.html)",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        driver = chromium(Path(tmp))
        try:
            driver.set_window_size(1300, args.height)
            driver.get(args.index.resolve().as_uri())
            args.out.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(args.out))
        finally:
            driver.quit()
    print(f"{args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
