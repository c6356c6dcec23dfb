"""Screenshots of a running dashboard for the README, in Debian's headless Chromium.

    python docs/make_screenshots.py URL PAGE OUT.png [RUN-SUBSTRING ...]

PAGE is a page path (/, /truth, /compare, /sweep, /regression, /profile, /accuracy); run
substrings, when given, replace the run selection with the runs whose label contains one.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.browser

from tests.browser import chromium, select_runs, wait_settled


def main(url: str, page: str, out: str, *runs: str) -> None:
    driver = chromium(1300, 1500)
    try:
        driver.get(url.rstrip("/") + page)
        wait_settled(driver)
        if runs:
            select_runs(driver, runs)
        time.sleep(1.0)
        height = driver.execute_script(
            "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight,"
            " document.querySelector('#page').getBoundingClientRect().bottom + 20)")
        driver.set_window_size(1300, min(max(height + 40, 800), 2400))
        time.sleep(0.5)
        driver.save_screenshot(out)
    finally:
        driver.quit()


if __name__ == "__main__":
    main(*sys.argv[1:])
