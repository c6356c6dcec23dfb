"""The reliability suite writes its figures (faults survived, inputs fuzzed, records lost) to
test-artifacts/reliability/figures.json; ``make bench`` runs the suite and tabulates them."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

FIGURES = Path(__file__).resolve().parents[2] / "test-artifacts" / "reliability" / "figures.json"
_LOCK = threading.Lock()

#: examples per fuzz target: small in `make test`, large when `make bench` runs the suite
FUZZ_EXAMPLES = int(os.environ.get("SPECSCOPE_FUZZ_EXAMPLES", "300"))


@pytest.fixture
def figure():
    """figure(name, **values): record one reliability figure."""
    def put(name: str, **values):
        with _LOCK:
            FIGURES.parent.mkdir(parents=True, exist_ok=True)
            data = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
            data[name] = values
            FIGURES.write_text(json.dumps(data, indent=1, sort_keys=True))
    return put
