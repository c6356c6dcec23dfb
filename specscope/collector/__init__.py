"""The collector: aggregation, detectors, the eval gate and the report. Never imports torch or dash."""

from .detectors import (DraftHealthDetector, FallbackDetector, SamplingTruthDetector,
                        run_detectors)
from .evalgate import eval_gate
from .report import build_report
from .text import format_report
from .stats import SpecStats, TruthStats

__all__ = ["DraftHealthDetector", "FallbackDetector", "SamplingTruthDetector", "SpecStats",
           "TruthStats", "build_report", "eval_gate", "format_report", "run_detectors"]
