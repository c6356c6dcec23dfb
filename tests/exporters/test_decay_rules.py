"""The drift alert in Prometheus' own rule evaluation (``promtool test rules``): a fall of 10% an
hour alerts a little after the first hour of uptime and again after a restart's new hour, never
across the restart; 24 clean hours of noisy, clumped counters with restarts never alert."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess

import pytest
import yaml

from specscope.exporters.rules import alert_rules
from tests.exporters.promtool_tests import HEAD

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="needs promtool (Debian prometheus)")
LABELS = ('algorithm="eagle",num_steps="3",topk="1",num_draft_tokens="4",backend="cuda",'
          'model="m",rank="0"')
PER_MIN = 2000  #: draft tokens a minute
ANNOTATIONS = next(r["annotations"] for g in yaml.safe_load(alert_rules())["groups"]
                   for r in g["rules"] if r.get("alert") == "SpecscopeAcceptanceDecay")


def _counters(minutes: int, rate_at, restart_every: int, rng: random.Random, clump: float
              ) -> tuple[list[int], list[int]]:
    """Cumulative drafted and accepted tokens a minute; both reset to 0 at each restart.
    ``clump``: each minute's rate moves by a normal draw of that sd (tokens not independent)."""
    drafted, accepted, d, a = [], [], 0, 0
    for t in range(minutes + 1):
        if t and t % restart_every == 0:
            d = a = 0
        up = (t % restart_every) / 60
        p = min(1.0, max(0.0, rate_at(up) + rng.gauss(0, clump)))
        d += PER_MIN
        a += sum(rng.random() < p for _ in range(PER_MIN)) if clump else round(PER_MIN * p)
        drafted.append(d)
        accepted.append(a)
    return drafted, accepted


def _tests(rules: str, drafted: list[int], accepted: list[int], checks: list[tuple[int, bool]],
           started: list[int] | None = None) -> str:
    lines = [HEAD.format(rules=rules).rstrip("\n")]
    series = [("specscope_draft_tokens_total", drafted), ("specscope_accepted_tokens_total", accepted)]
    if started is not None:
        series.append(("specscope_engine_start_time_seconds", started))
    for fam, values in series:
        lines += [f"      - series: '{fam}{{{LABELS}}}'",
                  f"        values: '{' '.join(map(str, values))}'"]
    lines.append("    alert_rule_test:")
    for minute, fires in checks:
        lines += [f"      - eval_time: {minute}m", "        alertname: SpecscopeAcceptanceDecay"]
        if fires:
            labels = {"severity": "warning", **dict(x.replace('"', "").split("=")
                                                    for x in LABELS.split(",") if "rank" not in x)}
            ann = {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m, got=labels: got[m[1]], v)
                   for k, v in ANNOTATIONS.items()}
            lines += ["        exp_alerts:", f"          - exp_labels: {json.dumps(labels)}",
                      f"            exp_annotations: {json.dumps(ann)}"]
    return "\n".join(lines) + "\n"


def _promtool(tmp_path, text: str) -> subprocess.CompletedProcess:
    rules = tmp_path / "rules.yml"
    rules.write_text(alert_rules())
    tests = tmp_path / "tests.yml"
    tests.write_text(text.replace("{rules}", str(rules)))
    return subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True,
                          text=True, timeout=300)


def test_a_tenth_an_hour_alerts_after_the_first_hour_and_never_across_a_restart(tmp_path):
    # 0.6 falling 10% an hour, restarted at 150 minutes (back to 0.6)
    drafted, accepted = _counters(240, lambda up: 0.6 * (1 - 0.1 * up), 150, random.Random(0), 0)
    checks = [(50, False), (85, True), (145, True), (160, False), (200, False), (235, True)]
    out = _promtool(tmp_path, _tests("{rules}", drafted, accepted, checks))
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_same_rules_stay_quiet_over_24_clean_hours_with_restarts(tmp_path):
    # clumped, noisy counters: each minute's rate drawn about 0.6 (sd 0.01), restarts every 6 h
    # at another level (0.6, 0.55, ...): each hour checked
    levels = iter([0.6, 0.55, 0.62, 0.5])
    level = {"now": next(levels)}

    def rate_at(up: float) -> float:
        if up == 0:
            level["now"] = next(levels, level["now"])
        return level["now"]

    drafted, accepted = _counters(24 * 60, rate_at, 6 * 60, random.Random(1), 0.01)
    checks = [(60 * h + 30, False) for h in range(24)]
    out = _promtool(tmp_path, _tests("{rules}", drafted, accepted, checks))
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_restart_the_counters_outlive_is_read_from_the_start_gauge(tmp_path):
    # a collector's counters do not reset when its engine restarts: the engine at 0.6, restarted
    # at minute 150 onto 0.5 (a new level, not a decay); the start gauge moves with it
    drafted, accepted = _counters(150, lambda up: 0.6, 10_000, random.Random(0), 0)
    more_d, more_a = _counters(120, lambda up: 0.5, 10_000, random.Random(0), 0)
    drafted += [drafted[-1] + d for d in more_d[1:]]
    accepted += [accepted[-1] + a for a in more_a[1:]]
    started = [0] * 151 + [150 * 60] * 120
    checks = [(165, False), (180, False), (205, False), (260, False)]
    out = _promtool(tmp_path, _tests("{rules}", drafted, accepted, checks, started))
    assert out.returncode == 0, out.stdout + out.stderr
    # without the gauge the same counters read as a fall (what the gauge is for)
    out = _promtool(tmp_path, _tests("{rules}", drafted, accepted, [(180, True)]))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus package")
def test_a_real_prometheus_over_two_backfilled_hours_raises_the_alert_for_the_decay_only(tmp_path):
    """Two hours of two engines' counters (one decaying 10% an hour, one clean; clumped, noisy,
    a sample a minute, the last half a minute ago) backfilled with ``promtool tsdb
    create-blocks-from openmetrics`` into the store of a real Prometheus that loads the generated
    rules: its first evaluations raise the alert for the decaying engine alone. The alert is
    pending: ``for: 10m`` is ten minutes of the server's own clock, which the promtool tests
    above step through."""
    import time

    from tests.metrics_pages import free_port, query, stop

    minutes, now = 120, int(time.time()) - 30
    engines = {"decay": _counters(minutes, lambda up: 0.6 * (1 - 0.1 * up), 10_000,
                                  random.Random(2), 0.01),
               "clean": _counters(minutes, lambda up: 0.6, 10_000, random.Random(3), 0.01)}
    labels = {name: LABELS.replace('model="m"', f'model="{name}"') for name in engines}
    om = []
    for fam, i in (("specscope_draft_tokens", 0), ("specscope_accepted_tokens", 1)):
        om.append(f"# TYPE {fam} counter")
        for name, series in engines.items():
            om += [f"{fam}_total{{{labels[name]}}} {v} {now - 60 * (minutes - t)}"
                   for t, v in enumerate(series[i])]
    om.append("# TYPE specscope_engine_start_time_seconds gauge")
    for name in engines:  # both engines started before the two hours
        om += [f"specscope_engine_start_time_seconds{{{labels[name]}}} {now - 60 * minutes - 600} "
               f"{now - 60 * (minutes - t)}" for t in range(minutes + 1)]
    (tmp_path / "history.om").write_text("\n".join(om + ["# EOF"]) + "\n")
    out = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                          str(tmp_path / "history.om"), str(tmp_path / "tsdb")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    (tmp_path / "rules.yml").write_text(alert_rules())
    (tmp_path / "prometheus.yml").write_text(
        f"global:\n  evaluation_interval: 1s\nrule_files: ['{tmp_path / 'rules.yml'}']\n")
    port = free_port()
    proc = subprocess.Popen([shutil.which("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        alerts: list = []
        deadline = time.time() + 60
        while time.time() < deadline and not alerts:
            try:
                alerts = query(port, 'ALERTS{alertname="SpecscopeAcceptanceDecay"}')
            except OSError:
                pass
            time.sleep(0.5)
        time.sleep(3)  # a few more evaluations: the clean engine must stay quiet
        alerts = query(port, 'ALERTS{alertname="SpecscopeAcceptanceDecay"}')
        z = {r["metric"]["model"]: float(r["value"][1])
             for r in query(port, "specscope_acceptance_decay_z_30m")}
    finally:
        stop(proc)
    print("z of the last half hour against the one before:", z, "alerts:",
          [(a["metric"]["model"], a["metric"]["alertstate"]) for a in alerts])
    assert [(a["metric"]["model"], a["metric"]["alertstate"]) for a in alerts] == [("decay", "pending")]
    assert z["decay"] < -5 < z["clean"]
