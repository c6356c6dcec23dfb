"""The dashboard in real headless Chromium (Debian's chromium and chromium-driver): every page
loads without console errors, the run selector changes the figures, the anomaly banner
appears for the faulted run. Each test saves screenshots under test-artifacts/dashboard/."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

CHROMIUM, DRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"

pytestmark = pytest.mark.skipif(not (Path(CHROMIUM).exists() and DRIVER),
                                reason="needs Debian's chromium and chromium-driver "
                                "(apt-get install chromium chromium-driver; .ci/run does)")


@pytest.fixture(scope="module")
def server(dash_traces, free_port_module):
    from specscope.dashboard import TraceSource, create_app
    from specscope.dashboard.app import serve

    app = create_app(TraceSource([dash_traces]), n_boot=200)
    srv = serve(app, "127.0.0.1", free_port_module)
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()


@pytest.fixture(scope="module")
def free_port_module():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-dev-shm-usage", "--window-size=1400,1700"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def _settle(driver, timeout=30.0):
    """Wait until Dash has no callback in flight and the page's cards and figures are drawn."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = driver.execute_script(
            "return document.querySelector('[data-dash-is-loading=\"true\"]') !== null"
            " || document.querySelector('#page .card') === null"
            " || document.querySelectorAll('#page .dash-graph').length !=="
            " document.querySelectorAll('#page .dash-graph .js-plotly-plot').length")
        if not busy:
            time.sleep(0.5)
            return
        time.sleep(0.2)
    raise AssertionError("the page did not settle")


def _names(driver, graph_id):
    return driver.execute_script(
        f"var g = document.querySelector('#{graph_id} .js-plotly-plot');"
        " return g && g.data ? g.data.map(t => t.name) : null")


def _select(driver, labels_containing):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.find_element(By.CSS_SELECTOR, "#runs .dash-dropdown-clear").click()
    driver.find_element(By.ID, "runs").click()
    time.sleep(0.3)
    for opt in driver.find_elements(By.CSS_SELECTOR, "[role=option]"):
        if any(s in opt.text for s in labels_containing):
            opt.click()
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    time.sleep(0.5)
    _settle(driver)


def test_every_page_loads_without_console_errors(server, browser):
    from specscope.dashboard.pages import PAGES

    for page in PAGES:
        browser.get(server + page.PATH)
        _settle(browser)
        name = page.PATH.strip("/") or "live"
        browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))
        severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not severe, (page.PATH, severe)
        assert page.TITLE in browser.page_source


def test_run_selector_changes_the_figures(server, browser):
    browser.get(server + "/")
    _settle(browser)
    both = _names(browser, "live-per-position")
    assert len(both) == 2
    _select(browser, ["clean-s3"])
    one = _names(browser, "live-per-position")
    browser.save_screenshot(str(ARTIFACTS / "live-one-run.png"))
    assert len(one) == 1 and one[0].startswith("clean-s3")
    browser.get(server + "/compare")
    _settle(browser)
    table = browser.find_element("id", "compare-table").text
    assert "acceptance length" in table and "%" in table  # Δ% with its interval


def test_anomaly_banner_appears_for_the_faulted_run(server, browser):
    from selenium.webdriver.common.by import By

    browser.get(server + "/truth")
    _settle(browser)
    _select(browser, ["faulted-s2"])
    banner = browser.find_element(By.ID, "banner-anomalies").text
    browser.save_screenshot(str(ARTIFACTS / "banner-faulted.png"))
    assert "silent_greedy" in banner and "faulted-s2" in banner
    _select(browser, ["clean-s3"])
    assert browser.find_elements(By.ID, "banner-ok")
