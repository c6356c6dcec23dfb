"""``specscope probe --every S --metrics-port P``: the probe run periodically, its last verdict
served as Prometheus metrics, in the spirit of Prometheus' blackbox_exporter. The exposition is
prometheus_client's (the ``prometheus`` extra), imported when a page is rendered.

Series (label ``target``: the probed URL; ``check``: the check's name):

- ``specscope_probe_success``: 1 where the last round neither FAILed nor ended in ERROR (PASS
  or INCONCLUSIVE), 0 where it did (gauge);
- ``specscope_probe_passed``: 1 where the last round PASSed (every check ruled its fault out),
  0 where it did not: what the exit status 0 of a gate means (gauge);
- ``specscope_probe_check_state{check, state}``: 1 for the state the check is in, 0 for the others
  (``pass``, ``fail``, ``inconclusive``);
- ``specscope_probe_positions{check}``: positions the last round's check had;
- ``specscope_probe_observed_top1_rate{check}`` and ``specscope_probe_expected_top1_rate{check}``
  (an upper bound of it for sampled classes, 1 for greedy);
- ``specscope_probe_class_supported{class}``: 1 where the server took the class's requests, 0
  where it refused every one as a bad request (HTTP 400: a parameter it does not support);
- ``specscope_probe_engine_acceptance_rate``: the engine's own accepted / drafted over the
  round's requests (absent where the engine gives no per-request counts);
- ``specscope_probe_duration_seconds``, ``specscope_probe_output_tokens``,
  ``specscope_probe_last_round_timestamp_seconds``;
- counters: ``specscope_probe_rounds_total``, ``specscope_probe_failures_total`` (rounds whose
  verdict was FAIL), ``specscope_probe_inconclusive_total`` (rounds that could not tell:
  the gate's exit status 4), ``specscope_probe_errors_total`` (rounds that could not probe),
  ``specscope_probe_engine_errors_total`` (rounds in which the engine failed under the probe's
  requests after answering earlier ones: verdict ERROR).

PromQL: a verify fault in the last hour: ``increase(specscope_probe_failures_total[1h]) > 0``;
an engine the probe brought down: ``increase(specscope_probe_engine_errors_total[1h]) > 0``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from ..collector.verdict import FAIL, INCONCLUSIVE, PASS, STATES
from .result import ERROR

#: name -> (type, help)
SERIES = {
    "specscope_probe_success": ("gauge", "1 where the last probe round neither failed nor ended in "
                                "ERROR (the engine failing under it), 0 where it did"),
    "specscope_probe_passed": ("gauge", "1 where the last probe round passed (every check ruled "
                               "its fault out), 0 where it did not (FAIL, INCONCLUSIVE, ERROR)"),
    "specscope_probe_check_state": ("gauge", "1 for the state each check of the last round is in"),
    "specscope_probe_positions": ("gauge", "positions the last round's check had (committed tokens "
                                  "with log-probabilities)"),
    "specscope_probe_observed_top1_rate": ("gauge", "share of the check's committed tokens that are "
                                           "their position's top-1"),
    "specscope_probe_expected_top1_rate": ("gauge", "what honest sampling allows of that share (an "
                                           "upper bound for sampled classes; 1 for greedy)"),
    "specscope_probe_engine_acceptance_rate": ("gauge", "the engine's own accepted / drafted draft "
                                               "tokens over the last round's requests"),
    "specscope_probe_duration_seconds": ("gauge", "wall time of the last round"),
    "specscope_probe_output_tokens": ("gauge", "output tokens the last round received"),
    "specscope_probe_last_round_timestamp_seconds": ("gauge", "when the last round ended (Unix time)"),
    "specscope_probe_rounds_total": ("counter", "probe rounds run"),
    "specscope_probe_failures_total": ("counter", "probe rounds whose verdict was FAIL"),
    "specscope_probe_inconclusive_total": ("counter", "probe rounds whose verdict was "
                                           "INCONCLUSIVE (a check could not tell)"),
    "specscope_probe_class_supported": ("gauge", "1 where the server took the class's requests, "
                                        "0 where it refused every one (HTTP 400: a parameter "
                                        "it does not support)"),
    "specscope_probe_errors_total": ("counter", "probe rounds that could not probe (unreachable, "
                                     "no log-probabilities)"),
    "specscope_probe_engine_errors_total": ("counter", "probe rounds in which the engine failed "
                                            "under the probe's requests (verdict ERROR)"),
}


class ProbeLoop:
    """Runs ``run_once()`` (one probe round, returning a ProbeResult) every ``every_s`` seconds in
    a thread of its own, keeping the last result and the counters."""

    def __init__(self, target: str, run_once: Callable[[], Any], every_s: float,
                 on_round: Callable[[Any, str], None] | None = None) -> None:
        self.target = target
        self.run_once = run_once
        self.every_s = every_s
        self.on_round = on_round
        self.last: Any = None
        self.last_error = ""
        self.rounds = self.failures = self.errors = self.engine_errors = self.inconclusive = 0
        self.last_ns = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def round(self) -> None:
        """One probe round, counted (an error is counted and kept, never raised)."""
        from .client import ProbeError

        try:
            result, error = self.run_once(), ""
        except (ProbeError, OSError, ValueError) as exc:
            result, error = None, str(exc)
        with self._lock:
            self.rounds += 1
            self.last_ns = time.time_ns()
            if result is None:
                self.errors += 1
                self.last_error = error
            else:
                self.last, self.last_error = result, ""
                self.failures += result.verdict == FAIL
                self.engine_errors += result.verdict == ERROR
                self.inconclusive += result.verdict == INCONCLUSIVE
        if self.on_round is not None:
            self.on_round(result, error)

    def start(self) -> "ProbeLoop":
        def loop() -> None:
            while not self._stop.is_set():
                t0 = time.monotonic()
                self.round()
                self._stop.wait(max(0.0, self.every_s - (time.monotonic() - t0)))
        self._thread = threading.Thread(target=loop, name="specscope-probe", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)

    def snapshot(self) -> "ProbeLoop":
        return self  # what MetricsServer asks for: render() reads it under the lock

    def collect(self) -> list[Any]:
        """prometheus_client's collector protocol: the families of the last round and the
        counters, built at scrape time (``registry.register(loop)`` serves them)."""
        with self._lock:
            return probe_families(self.target, self.last, self.rounds, self.failures, self.errors,
                                  self.last_ns, self.engine_errors, self.inconclusive)

    def render(self) -> str:
        """The exposition text of the last round and the counters."""
        return _text(self)


def probe_families(target: str, result: Any, rounds: int, failures: int, errors: int,
                   last_ns: int, engine_errors: int = 0, inconclusive: int = 0) -> list[Any]:
    """The prometheus_client families of one probed target, in ``SERIES`` order; a figure the
    round did not have is absent (pure)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    fam = {name: (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(
        name, help_text, labels=("target", "check", "state") if name == "specscope_probe_check_state"
        else ("target", "check") if name in _PER_CHECK
        else ("target", "class") if name == "specscope_probe_class_supported" else ("target",))
        for name, (kind, help_text) in SERIES.items()}
    t = [target]
    fam["specscope_probe_rounds_total"].add_metric(t, rounds)
    fam["specscope_probe_failures_total"].add_metric(t, failures)
    fam["specscope_probe_inconclusive_total"].add_metric(t, inconclusive)
    fam["specscope_probe_errors_total"].add_metric(t, errors)
    fam["specscope_probe_engine_errors_total"].add_metric(t, engine_errors)
    if last_ns:
        fam["specscope_probe_last_round_timestamp_seconds"].add_metric(t, round(last_ns / 1e9, 3))
    if result is not None:
        fam["specscope_probe_success"].add_metric(t, 0 if result.verdict in (FAIL, ERROR) else 1)
        fam["specscope_probe_passed"].add_metric(t, int(result.verdict == PASS))
        fam["specscope_probe_duration_seconds"].add_metric(t, round(result.seconds, 3))
        fam["specscope_probe_output_tokens"].add_metric(t, result.tokens)
        rate = result.acceptance["acceptance_rate"]
        if rate is not None:
            fam["specscope_probe_engine_acceptance_rate"].add_metric(t, _g6(rate))
        for cls, said in (getattr(result, "classes", None) or {}).items():
            if said["state"] in ("checked", "not supported"):
                fam["specscope_probe_class_supported"].add_metric(
                    [target, cls], int(said["state"] == "checked"))
        for c in result.checks:
            tc = [target, c.check]
            for state in STATES:
                fam["specscope_probe_check_state"].add_metric(tc + [state], int(c.state == state))
            ev = c.evidence
            fam["specscope_probe_positions"].add_metric(tc, ev.get("num_positions", 0))
            obs = ev.get("observed_top1_rate")
            exp = ev.get("expected_top1_rate_bound", ev.get("expected_top1_rate"))
            if obs is not None:
                fam["specscope_probe_observed_top1_rate"].add_metric(tc, _g6(obs))
            if exp is not None:
                fam["specscope_probe_expected_top1_rate"].add_metric(tc, _g6(exp))
    return [f for f in fam.values() if f.samples]


#: series labelled by check as well as target
_PER_CHECK = {"specscope_probe_positions", "specscope_probe_observed_top1_rate",
              "specscope_probe_expected_top1_rate"}


def _g6(v: float) -> float:
    """Six significant digits, as the page has always carried them."""
    return float(f"{v:.6g}")


class _Families:
    """A collector over families already built (one page's worth)."""

    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> list[Any]:
        return self.families


def _text(collector: Any) -> str:
    """Prometheus text (format 0.0.4) of one collector, on a registry of its own."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def render_probe(target: str, result: Any, rounds: int, failures: int, errors: int,
                 last_ns: int, engine_errors: int = 0, inconclusive: int = 0) -> str:
    """Prometheus text for one probed target, written by prometheus_client from
    :func:`probe_families` (pure)."""
    return _text(_Families(probe_families(target, result, rounds, failures, errors, last_ns,
                                          engine_errors, inconclusive)))
