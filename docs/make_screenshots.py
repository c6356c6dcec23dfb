"""Screenshots of a running dashboard for the README, in Debian's headless Chromium.

    python docs/make_screenshots.py URL PAGE OUT.png [RUN-SUBSTRING ...]

PAGE is a page path (/, /truth, /compare, /sweep, /regression, /profile, /accuracy); run
substrings, when given, replace the run selection with the runs whose label contains one.
"""

from __future__ import annotations

import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys


def settle(driver, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not driver.execute_script(
                "return document.querySelector('[data-dash-is-loading=\"true\"]') !== null"
                " || document.querySelector('#page .card') === null"
                " || document.querySelectorAll('#page .dash-graph').length !=="
                " document.querySelectorAll('#page .dash-graph .js-plotly-plot').length"):
            time.sleep(1.0)
            return
        time.sleep(0.3)


def main(url: str, page: str, out: str, *runs: str) -> None:
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1300,1500"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        driver.get(url.rstrip("/") + page)
        settle(driver)
        if runs:
            driver.find_element(By.CSS_SELECTOR, "#runs .dash-dropdown-clear").click()
            driver.find_element(By.ID, "runs").click()
            time.sleep(0.5)
            for opt in driver.find_elements(By.CSS_SELECTOR, "[role=option]"):
                if any(r in opt.text for r in runs):
                    opt.click()
            driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
            time.sleep(1.0)
            settle(driver)
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
