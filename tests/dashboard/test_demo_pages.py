"""What a newcomer sees after `make demo`: the real demo (the tiny model, its background sweep
and the live dashboard), every page in headless Chromium, each component holding data for every
selected run it applies to (the pages' own SHOWS lists), no placeholder where data exists, and
no traceback in the demo's output."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

from tests.browser import chromium, paths, wait_settled
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not all(paths()),
                                reason="needs Debian's chromium and chromium-driver "
                                "(apt-get install chromium chromium-driver; .ci/run does)")

#: placeholders a component shows (as its whole content) when it has nothing; none may stand
#: where data exists
PLACEHOLDER = re.compile(r"\s*(nothing to show|no verify steps|no [^\n]{0,40} recorded|its records "
                         r"were not kept|no runs yet|pick a request)", re.IGNORECASE)

#: per graph: every trace's name, its non-null points, and the text of its axes' values
GRAPH_JS = """
var out = {};
document.querySelectorAll('#page .dash-graph').forEach(function (g) {
  var p = g.querySelector('.js-plotly-plot');
  if (!p || !p.data) { out[g.id] = null; return; }
  var ann = (p.layout && p.layout.annotations || []).map(a => a.text).join(' | ');
  out[g.id] = {ann: ann, traces: p.data.map(function (t) {
    var vals = [].concat(t.y || [], t.x || [], t.z || [], t.values || []);
    var n = vals.flat(2).filter(v => v !== null && v !== undefined && v === v && v !== 0).length;
    var labels = [].concat(t.x || [], t.y || [], t.text || [], t.customdata || []).flat(2)
      .filter(v => typeof v === 'string').join(' ');
    return {name: t.name || '', n: n, labels: labels};
  })};
});
document.querySelectorAll('#page .table-wrap').forEach(function (t) { out[t.id] = t.innerText; });
return out;
"""


def _names_run(text: str, run_id: str, label: str) -> bool:
    """The run's id or label, whole or as the figures shorten them (in the middle)."""
    from specscope.dashboard.figures import short

    return any(s and s in text for s in (run_id, label, short(label), short(run_id, 28),
                                         short(run_id, 36)))


def _has_data_for(graph: dict, run_id: str, label: str) -> bool:
    for t in graph["traces"]:
        if t["n"] and (_names_run(t["name"], run_id, label) or _names_run(t["labels"], run_id, label)):
            return True
    return False


def _pump(proc, lines: list[str]) -> None:
    for line in proc.stdout:
        lines.append(line)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from specscope.serving.harness import free_port

    out = tmp_path_factory.mktemp("demo") / "demo"
    port, metrics_port = free_port(), free_port()
    # SPECSCOPE_DEMO_TEST_MODEL=smollm2 runs it over the demo's own model (minutes longer)
    model = os.environ.get("SPECSCOPE_DEMO_TEST_MODEL", "tiny")
    proc = subprocess.Popen([sys.executable, "-m", "specscope", "demo", "--model", model,
                             "--duration", "1800", "--waves", "2", "--trace-refresh", "2", "--no-prometheus",
                             "--port", str(port),
                             "--metrics-port", str(metrics_port), "-o", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    pump = threading.Thread(target=_pump, args=(proc, lines), daemon=True)
    pump.start()
    try:
        yield f"http://127.0.0.1:{port}", out, lines, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        pump.join(timeout=10)
        proc.stdout.close()


def _wait_for_data(out, lines, deadline_s: float = 900.0) -> None:
    """Until the demo has decoded its two waves and the sweep has finished, and the dashboard's
    trace refresh (every 2 s here) has read them."""
    t0 = time.time()
    while time.time() - t0 < deadline_s:
        if (out / "sweep" / "sweep.json").exists() and any(x.startswith("decoded 2 waves") for x in lines):
            time.sleep(3)
            return
        time.sleep(1)
    raise AssertionError("the demo did not decode two waves and finish its sweep within "
                         f"{deadline_s:.0f} s:\n" + "".join(lines))


def test_every_page_shows_each_figure_for_every_run_it_applies_to(demo):
    from specscope.dashboard.pages import PAGES
    from specscope.io.trace import read_trace
    from specscope import schema

    url, out, lines, proc = demo
    _wait_for_data(out, lines)
    sweep_runs = [r.run_id for r in read_trace(sorted((out / "sweep").glob("*.jsonl"))).of(schema.RunRecord)
                  if r.labels.get("role") != "reference"]
    driver = chromium()
    problems = []
    try:
        driver.get(url + "/")
        wait_settled(driver, timeout=60)
        time.sleep(2)
        selected = urllib.parse.parse_qs(urllib.parse.urlparse(driver.current_url).query)["run"]
        assert len(selected) == 4, selected  # the demo's four live configurations
        labels = _labels(out, selected)
        kinds = {"all": selected, "speculative": [r for r in selected if "no-spec" not in r],
                 "sweep": sweep_runs, "any": []}
        for page in PAGES:
            driver.get(url + page.PATH + "?" + urllib.parse.urlencode([("run", r) for r in selected]))
            wait_settled(driver, timeout=60)
            time.sleep(1.5)  # the refresh tick lands once more
            wait_settled(driver, timeout=60)
            shown = driver.execute_script(GRAPH_JS)
            for comp, kind in page.SHOWS.items():
                got = shown.get(comp)
                where = f"{page.PATH} #{comp}"
                if got is None:
                    problems.append(f"{where}: not drawn")
                    continue
                text = got if isinstance(got, str) else got["ann"]
                if PLACEHOLDER.match(text or ""):
                    problems.append(f"{where}: placeholder {text[:120]!r}")
                if isinstance(got, dict) and not any(t["n"] for t in got["traces"]):
                    problems.append(f"{where}: no data at all")
                for run in kinds[kind]:
                    label = labels.get(run, run)
                    ok = (_names_run(got, run, label) if isinstance(got, str)
                          else _has_data_for(got, run, label))
                    if not ok:
                        problems.append(f"{where}: nothing for {run} ({kind})")
    finally:
        driver.quit()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    time.sleep(0.5)
    output = "".join(lines)
    assert not problems, "\n".join(problems)
    assert proc.returncode == 0 and "stopped after" in output, output
    assert "Traceback" not in output, output


def _labels(out, runs: list[str]) -> dict[str, str]:
    """run id -> its label as the dashboard names it (its own RunView over the demo's traces)."""
    from specscope.dashboard import TraceSource

    return {v.run_id: v.label for v in TraceSource([out]).runs() if v.run_id in runs}
