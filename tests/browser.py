"""Headless Chromium against the dashboard: one place for the browser tests, the dashboard
benchmark and the README screenshots. Debian's ``chromium`` and ``chromium-driver`` driven by
selenium (the ``test`` extra); never a browser download of a test tool's own.
"""

from __future__ import annotations

import shutil
import time
from typing import Any, Sequence

#: the flags a closed-network machine needs (no background connections, no first-run work)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")

#: true once Dash has no callback in flight and every figure on the page is drawn
SETTLED_JS = ("return document.querySelector('[data-dash-is-loading=\"true\"]') === null"
              " && document.querySelector('#page .card') !== null"
              " && document.querySelectorAll('#page .dash-graph').length ==="
              " document.querySelectorAll('#page .dash-graph .js-plotly-plot').length")


def paths() -> tuple[str | None, str | None]:
    """(chromium, chromedriver) found on PATH, or None each."""
    return shutil.which("chromium"), shutil.which("chromedriver")


def chromium(width: int = 1400, height: int = 1700, console_log: bool = False) -> Any:
    """A started headless Chromium (selenium WebDriver); quit() it when done."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = paths()
    if not (binary and driver):
        raise FileNotFoundError("needs Debian's chromium and chromium-driver "
                                "(apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in (*FLAGS, f"--window-size={width},{height}"):
        opts.add_argument(arg)
    if console_log:
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


def wait_settled(driver: Any, timeout: float = 60.0, poll: float = 0.01) -> float:
    """Block until the page has settled (SETTLED_JS); returns the seconds waited."""
    t0 = time.perf_counter()
    while not driver.execute_script(SETTLED_JS):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{driver.current_url} did not settle within {timeout:.0f} s")
        time.sleep(poll)
    return time.perf_counter() - t0


def select_runs(driver: Any, label_parts: Sequence[str]) -> None:
    """Replace the run selection with the runs whose label contains one of ``label_parts``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.find_element(By.CSS_SELECTOR, "#runs .dash-dropdown-clear").click()
    driver.find_element(By.ID, "runs").click()
    time.sleep(0.3)
    for opt in driver.find_elements(By.CSS_SELECTOR, "[role=option]"):
        if any(s in opt.text for s in label_parts):
            opt.click()
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    time.sleep(0.5)
    wait_settled(driver)
