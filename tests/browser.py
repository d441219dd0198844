"""Headless Chromium (Debian's chromium + chromium-driver) through Selenium, for
tests that open a page from disk the way a reader would."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# As root in a container Chromium needs --no-sandbox; the network flags keep it
# from calling home (this machine's network is closed, and the page must not need it).
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--disable-quic", "--window-size=1300,1000"]


def chromium(tmp_path: Path):
    """A Selenium driver for headless Chromium, or a skip saying what is missing.
    With FWCOMPARE_REQUIRE_BROWSER=1 (set by .ci/run) a missing browser fails."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        msg = (f"needs {', '.join(missing)}: Debian packages chromium and chromium-driver "
               f"(`make browser` installs them)")
        if os.environ.get("FWCOMPARE_REQUIRE_BROWSER") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def local_path(url: str) -> Path | None:
    """The file a file:// URL points at (fragment and query dropped), else None."""
    u = urlparse(url)
    return Path(unquote(u.path)) if u.scheme == "file" else None
