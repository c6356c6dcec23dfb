"""The dashboard in real headless Chromium (Debian's chromium and chromium-driver): every page
loads without console errors, the run selector changes the figures, the anomaly banner
appears for the faulted run. Each test saves screenshots under test-artifacts/dashboard/."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.browser import chromium, paths, select_runs, wait_settled
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


def _wait_for(driver, element_id: str, timeout: float = 10.0) -> None:
    """Until the element is on the page (callbacks land after the first render)."""
    from selenium.webdriver.common.by import By

    deadline = time.time() + timeout
    while not driver.find_elements(By.ID, element_id) and time.time() < deadline:
        time.sleep(0.1)


def _source_info(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, "source-info").text


def _live_lengths(driver) -> list:
    """The y values of the Live page's acceptance panels (length and rate, not depth k)."""
    return driver.execute_script(
        "var g = document.querySelector('#live-acceptance .js-plotly-plot');"
        " return g && g.data ? g.data.filter(t => t.yaxis !== 'y3')"
        ".map(t => t.y).flat().filter(y => y !== null) : []")


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
    # a sentence, and the evidence folded into a table (not a raw [key value, ...] dump)
    assert "evidence" in banner and "[mode_requested" not in banner
    select_runs(browser, ["clean-s3"])
    # no anomaly; its gate passes, or says what its 16 requests are too few to show
    assert browser.find_elements(By.ID, "banner-ok") or browser.find_elements(By.ID, "banner-inconclusive")
    assert not browser.find_elements(By.ID, "banner-anomalies")


def test_a_link_with_a_run_selection_opens_that_view_in_a_fresh_browser(server, browser):
    from urllib.parse import parse_qs, urlparse

    from selenium.webdriver.common.by import By

    browser.get(server + "/")
    _settle(browser)
    select_runs(browser, ["faulted-s2"])
    deadline = time.time() + 10
    while "run=" not in browser.current_url and time.time() < deadline:
        time.sleep(0.1)
    shared = urlparse(browser.current_url)
    (run,) = parse_qs(shared.query)["run"]
    assert run.startswith("faulted-s2")
    browser.find_element(By.ID, "nav-truth").click()  # moving between pages keeps it
    deadline = time.time() + 10
    while not ("/truth" in browser.current_url and "run=" in browser.current_url) \
            and time.time() < deadline:
        time.sleep(0.1)
    assert parse_qs(urlparse(browser.current_url).query)["run"] == [run]
    fresh = chromium()
    try:
        fresh.get(f"{server}/compare?{shared.query}")
        _settle(fresh)
        _wait_for(fresh, "banner-anomalies")
        fresh.save_screenshot(str(ARTIFACTS / "shared-link.png"))
        chips = fresh.find_element(By.ID, "runs").text
        assert "faulted-s2" in chips and "clean-s3" not in chips  # the shared selection only
        assert "silent_greedy" in fresh.find_element(By.ID, "banner-anomalies").text
        assert urlparse(fresh.current_url).path == "/compare"
    finally:
        fresh.quit()


def test_the_banner_says_inconclusive_where_a_run_is_too_small_to_pass(tmp_path_factory, browser):
    """A clean two-request run has too few positions for its sampling-truth check to rule the
    fault out: the banner says INCONCLUSIVE with its lean and what it needs, neither PASS nor
    an anomaly."""
    from selenium.webdriver.common.by import By

    from specscope.dashboard import TraceSource, create_app
    from specscope.dashboard.app import serve
    from specscope.engine.decoder import SpecConfig
    from specscope.engine.models import tiny_pair
    from specscope.engine.workload import WorkloadSpec, run_workload

    folder = tmp_path_factory.mktemp("small-trace")
    run_workload(tiny_pair(), SpecConfig(num_steps=3),
                 WorkloadSpec(requests=2, concurrency=2, max_new_tokens=4, temperature=0.8),
                 folder / "small.jsonl", progress=False, run_id="small-s3")
    srv = serve(create_app(TraceSource([folder]), n_boot=100), "127.0.0.1", free_port())
    try:
        browser.get(f"http://127.0.0.1:{srv.server_port}/")
        _settle(browser)
        _wait_for(browser, "banner-inconclusive", 15.0)
        browser.save_screenshot(str(ARTIFACTS / "banner-inconclusive.png"))
        text = browser.find_element(By.ID, "banner-inconclusive").text
        assert "INCONCLUSIVE (lean" in text and "need ~" in text and "more positions" in text
        assert "small-s3" in text
        assert not browser.find_elements(By.ID, "banner-ok")
    finally:
        srv.shutdown()


def test_requests_page_shows_the_distribution_and_one_requests_steps(server, browser):
    browser.get(server + "/requests")
    _settle(browser)
    deadline = time.time() + 20
    while time.time() < deadline and not (_names(browser, "requests-timeline") or [None])[0]:
        time.sleep(0.2)
    assert _names(browser, "requests-timeline") == ["accepted drafts", "k (drafted)"]
    assert _names(browser, "requests-distribution")[0] == "requests"
    # 16 requests per run, two runs; the table lists every one, flagged first
    rows = browser.execute_script("return document.querySelectorAll('#requests-table tbody tr').length")
    assert rows == 32
    browser.save_screenshot(str(ARTIFACTS / "requests.png"))


def test_live_page_draws_k_over_time_under_acceptance(tmp_path_factory, browser):
    """A run whose policy moves k with the running batch (k 0 at 5 rows or more, 3 below; 16
    requests in batches of 6, 6 and 4): the Live page's acceptance figure gains a draft-depth
    panel whose line moves."""
    from specscope.dashboard import TraceSource, create_app
    from specscope.dashboard.app import serve
    from specscope.engine.decoder import SpecConfig
    from specscope.engine.models import tiny_pair
    from specscope.engine.workload import WorkloadSpec, run_workload

    folder = tmp_path_factory.mktemp("policy-trace")
    run_workload(tiny_pair(), SpecConfig(num_steps=3, policy="batch:1=3,5=0"),
                 WorkloadSpec(requests=16, concurrency=6, max_new_tokens=32, reference=False),
                 folder / "policy.jsonl", progress=False, run_id="policy-s3")
    srv = serve(create_app(TraceSource([folder]), n_boot=100), "127.0.0.1", free_port())
    try:
        browser.get(f"http://127.0.0.1:{srv.server_port}/")
        _settle(browser)
        script = ("var g = document.querySelector('#live-acceptance .js-plotly-plot');"
                  " if (!g || !g.data) return null;"
                  " return [g.data.filter(t => t.yaxis === 'y3').map(t => t.y),"
                  " (g.layout.annotations || []).map(a => a.text)]")
        deadline, got = time.time() + 20, None
        while time.time() < deadline and not (got and got[0]):
            got = browser.execute_script(script)
            time.sleep(0.2)
        browser.save_screenshot(str(ARTIFACTS / "live-draft-depth.png"))
        depth_lines, titles = got
        assert any(t.startswith("draft depth k") for t in titles)
        ys = [y for line in depth_lines for y in line if y is not None]
        assert min(ys) < max(ys) and min(ys) >= 0 and max(ys) <= 3
    finally:
        srv.shutdown()


def test_compare_page_shows_the_category_matrix(server, browser):
    """Two runs of the same prompts: a heatmap with one row per workload category, the second
    run's speedup over the first in each cell and its interval on hover."""
    browser.get(server + "/compare")
    _settle(browser)
    script = ("var g = document.querySelector('#compare-categories .js-plotly-plot');"
              " return g && g.data && g.data.length && g.data[0].type === 'heatmap'"
              " ? [g.data[0].y, g.data[0].x, g.data[0].hovertext] : null")
    deadline, got = time.time() + 20, None
    while time.time() < deadline and not got:
        got = browser.execute_script(script)
        time.sleep(0.2)
    browser.save_screenshot(str(ARTIFACTS / "compare-categories.png"))
    categories, runs, hover = got
    assert len(categories) >= 2 and len(runs) == 1
    cells = [h for row in hover for h in row]
    assert any("speedup" in h and "matched" in h for h in cells)


def test_dashboard_over_a_vllm_server_through_a_real_prometheus(tmp_path, browser):
    """Prometheus scrapes a vLLM server (the real page in shared/samples with a second
    data-parallel engine beside it, counters advancing per scrape); the dashboard reads it
    through Prometheus: the Live page draws vLLM's acceptance length and its latency
    percentiles from the engine's histograms, and the header's rank selector turns two runs
    (engine 0 and 1) into one per model."""
    import re
    from pathlib import Path as P

    from selenium.webdriver.common.by import By

    from specscope.dashboard import MetricsSource, create_app
    from specscope.dashboard.app import serve
    from tests.metrics_pages import PROMETHEUS, advanced, prometheus_scraping, serving

    prometheus = PROMETHEUS
    sample = P(__file__).resolve().parents[2].parent / "shared" / "samples" / "vllm_metrics_scrape_specdecode_1.txt"
    if prometheus is None or not sample.exists():
        pytest.skip("needs Debian's prometheus and ../shared/samples")
    page = sample.read_text()
    spec = "\n".join(x.replace('engine="0"', 'engine="1"') for x in page.splitlines()
                     if x.startswith("vllm:spec_decode_") and "_created" not in x)
    page = page + "\n" + spec + "\n"
    with serving(lambda n: advanced(page, n + 1)) as url, \
            prometheus_scraping(tmp_path, [url], samples_each=5, job="vllm") as prom_port:
        srv = None
        try:
            source = MetricsSource(f"http://127.0.0.1:{prom_port}", prometheus=True, minutes=1)
            srv = serve(create_app(source, n_boot=50), "127.0.0.1", free_port())
            browser.get(f"http://127.0.0.1:{srv.server_port}/")
            _settle(browser)
            info, lengths = (lambda: _source_info(browser)), (lambda: _live_lengths(browser))

            deadline = time.time() + 20
            while time.time() < deadline and not (info().startswith("2 run") and lengths()):
                time.sleep(0.3)
            browser.save_screenshot(str(ARTIFACTS / "live-vllm-prometheus.png"))
            assert info().startswith("2 run"), info()
            expected = 1 + 58695 / 43680  # the page's drafts and accepted tokens, bonus included
            assert any(abs(y - expected) < 1e-6 for y in lengths()), lengths()
            # vLLM's TTFT histogram as the latency table's p50 for engine 0
            from specscope.dashboard.figures.live import latency_rows

            (row,) = [r for r in latency_rows(source.runs()) if "rank=0" in r["run"]]
            assert row["TTFT p50"] and row["TPOT p50"] and row["ITL/chunk p50"]
            assert str(row["TTFT p50"]) in browser.find_element(By.ID, "live-latency").text
            browser.find_element(By.XPATH, "//label[contains(., 'summed per model')]").click()
            deadline = time.time() + 20
            while time.time() < deadline and not info().startswith("1 run"):
                time.sleep(0.3)
            assert re.match(r"1 run", info()), info()
        finally:
            if srv is not None:
                srv.shutdown()


def test_dashboard_live_on_an_sglang_server_with_data_parallel_ranks(browser):
    """``dashboard --live`` pointed straight at an SGLang server's /metrics (the real scrape in
    shared/samples for its latency histograms, SGLang's spec-decode families with two
    data-parallel ranks; counters advancing per poll): the Live page draws the server's
    acceptance length from its verify-call counter, each rank's gauges are runs of their own
    drawn as reported,
    the latency table shows TTFT from SGLang's histogram, and summing ranks leaves one run."""
    from pathlib import Path as P

    from selenium.webdriver.common.by import By

    from specscope.dashboard import MetricsSource, create_app
    from specscope.dashboard.app import serve
    from specscope.dashboard.figures.live import latency_rows
    from tests.metrics_pages import advanced, serving, sglang_spec

    sample = P(__file__).resolve().parents[2].parent / "shared" / "samples" / "sglang_metrics_scrape_2.txt"
    if not sample.exists():
        pytest.skip("needs ../shared/samples (a user's clone has none)")
    # the sample's own generated-token counter gives way to the spec families' (one family
    # per page, as a server has)
    real = "\n".join(x for x in sample.read_text().splitlines() if "generation_tokens_total" not in x)
    page = real + "\n" + sglang_spec(1000, 2000, 800, None, 0.6, dp_lengths=(3.3, 2.5))
    with serving(lambda n: advanced(page, n + 1)) as url:
        srv = None
        try:
            source = MetricsSource(url)
            srv = serve(create_app(source, n_boot=50), "127.0.0.1", free_port())
            browser.get(f"http://127.0.0.1:{srv.server_port}/")
            _settle(browser)
            info, lengths = (lambda: _source_info(browser)), (lambda: _live_lengths(browser))

            deadline = time.time() + 30
            while time.time() < deadline and not (info().startswith("3 run")
                                                  and any(abs(y - 2.8) < 1e-9 for y in lengths())):
                time.sleep(0.3)
            browser.save_screenshot(str(ARTIFACTS / "live-sglang.png"))
            assert info().startswith("3 run"), info()
            # 2800 generated tokens per 1000 verify calls each poll (SGLang's own definition)
            assert any(abs(y - 2.8) < 1e-9 for y in lengths()), lengths()
            # each rank's gauge drawn as the engine reports it (dashed), never averaged
            assert {3.3, 2.5} <= set(lengths()) and (3.3 + 2.5) / 2 not in lengths()
            (row,) = [r for r in latency_rows(source.runs()) if "rank=" not in r["run"]]
            assert row["TTFT p50"] and row["ITL/token p50"] and row["ITL/chunk p50"] is None
            assert str(row["TTFT p50"]) in browser.find_element(By.ID, "live-latency").text
            browser.find_element(By.XPATH, "//label[contains(., 'summed per model')]").click()
            deadline = time.time() + 20
            while time.time() < deadline and not info().startswith("1 run"):
                time.sleep(0.3)
            assert info().startswith("1 run"), info()
        finally:
            if srv is not None:
                srv.shutdown()
