"""``specscope probe``: a black-box check of verify through any OpenAI-compatible endpoint.
Never imports torch; installs nothing in the engine.

It sends a designed workload (``workload.py``: greedy, temperature, temperature with top-p,
and with top-k where the engine takes it), each request asking for log-probabilities, and
checks from the engine's own figures (``checks.py``) that greedy requests committed their top-1,
that sampled ones are not the top-1 more often than their temperature allows, and that no
committed token lies outside its top-p or top-k. Where the engine gives per-step speculative
detail (vLLM), the temperature check is restricted to the tokens verify committed (accepted
drafts and the tokens drawn at a rejection). The verdict is FAIL / PASS / INCONCLUSIVE with
evidence, or ERROR where the engine failed under the probe (a request answered HTTP 5xx, a
dropped connection, no answer) after earlier ones were answered: a finding, never a pass. A
trace of it reads in ``report``.

The package face: ``run.py`` runs a probe, ``result.py`` says it (text, JSON, a trace),
``client.py`` is its side of the wire (httpx, with a ``transport=`` seam).
"""

from __future__ import annotations

from .client import ProbeError
from .result import ERROR, TESTED, ProbeResult, format_probe, probe_records, requests_json
from .run import (against_reference, engine_failure, incomplete, place_by_inference, probe,
                  run_checks)
from .workload import CLASSES, ProbePlan

__all__ = ["CLASSES", "ERROR", "TESTED", "ProbeError", "ProbePlan", "ProbeResult",
           "against_reference", "engine_failure", "format_probe", "incomplete",
           "place_by_inference", "probe", "probe_records", "requests_json", "run_checks"]
