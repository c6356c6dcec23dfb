"""Importing the hooks in a fresh interpreter loads no dashboard, dataframe or exporter library."""

import subprocess
import sys

HEAVY = ["dash", "pandas", "pyarrow", "prometheus_client", "plotly", "transformers"]


def test_hooks_import_is_light():
    code = ("import sys, specscope.hooks; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_collector_never_imports_torch():
    code = ("import sys, specscope.collector, specscope.exporters; "
            "print(','.join(m for m in ['torch', 'dash'] if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_an_engine_process_loads_nothing_of_specscope_above_io():
    """What an engine process imports when it records to a collector: the hooks and the wire,
    nothing of the collector (report, detectors), exporters, importers or dashboard."""
    code = ("import sys, specscope.hooks, specscope.hooks.engines, specscope.io.wire; "
            "print(','.join(sorted(m for m in sys.modules if m.startswith('specscope.') and "
            "m.split('.')[1] not in ('hooks', 'io', 'schema'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
