"""The Dash dashboard: live runs, sampling truth, comparisons with confidence intervals,
sweeps with eval gates and Pareto fronts, regressions, profiles and accuracy tables.

``create_app(source)`` builds it over a ``TraceSource`` (trace files and directories), a
``LiveSource`` (a collector in this process) or a ``MetricsSource`` (a specscope ``/metrics``
endpoint, or a Prometheus server's HTTP API).
"""

from .app import create_app, run_dashboard
from .data import LiveSource, TraceSource
from .promsource import MetricsSource

__all__ = ["create_app", "run_dashboard", "LiveSource", "MetricsSource", "TraceSource"]
