"""Exporters: Prometheus text, alert rules, Grafana boards, Chrome/Perfetto traces and replay.

Trace files and the wire live one floor down, in ``specscope.io``.
"""
