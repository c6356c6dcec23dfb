"""The dashboard in real headless Chromium (Debian's chromium and chromium-driver): every page
loads without console errors, the run selector changes the figures, the anomaly banner
appears for the faulted run. Each test saves screenshots under test-artifacts/dashboard/."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specscope.dashboard.browser import chromium, paths, select_runs, wait_settled
from specscope.serving.harness import free_port

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"

pytestmark = pytest.mark.skipif(not all(paths()),
                                reason="needs Debian's chromium and chromium-driver "
                                "(apt-get install chromium chromium-driver; .ci/run does)")


@pytest.fixture(scope="module")
def server(dash_traces):
    from specscope.dashboard import TraceSource, create_app
    from specscope.dashboard.app import serve

    app = create_app(TraceSource([dash_traces]), n_boot=200)
    srv = serve(app, "127.0.0.1", free_port())
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()


@pytest.fixture(scope="module")
def browser():
    driver = chromium(console_log=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def _settle(driver):
    wait_settled(driver, timeout=30.0)
    time.sleep(0.5)


def _names(driver, graph_id):
    return driver.execute_script(
        f"var g = document.querySelector('#{graph_id} .js-plotly-plot');"
        " return g && g.data ? g.data.map(t => t.name) : null")


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
    select_runs(browser, ["clean-s3"])
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
    select_runs(browser, ["faulted-s2"])
    banner = browser.find_element(By.ID, "banner-anomalies").text
    browser.save_screenshot(str(ARTIFACTS / "banner-faulted.png"))
    assert "silent_greedy" in banner and "faulted-s2" in banner
    select_runs(browser, ["clean-s3"])
    assert browser.find_elements(By.ID, "banner-ok")
