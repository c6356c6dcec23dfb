"""What the hooks did not see, against the engine's own counts: only over the steps read up to
those counts."""

from __future__ import annotations

import dataclasses
import random

from specscope import schema
from tests.collector.test_drift import T0, _steps


def test_engine_counts_older_than_every_step_read_are_not_compared():
    """A window read just after it opens: the engine's latest counts (written with the hooks'
    health, every few seconds) predate every step in it; the report says nothing of what the
    hooks did not see, where it used to fail on the missing counts."""
    from specscope.collector.views import seen_by_hooks

    counts = schema.EngineCountsRecord(run_id="r", engine="vllm", t_ns=T0, num_drafts=10,
                                       num_draft_tokens=30, num_accepted=12)
    steps = _steps(random.Random(0), T0, 0.01, lambda up: 0.7)
    assert seen_by_hooks([counts] + steps) is None
    later = dataclasses.replace(counts, t_ns=steps[-1].t_ns)
    assert seen_by_hooks([later] + steps)["hook_counts"]["num_drafts"] == 8 * len(steps)
