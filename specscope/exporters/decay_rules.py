"""The drift test as Prometheus rules: acceptance that falls with uptime (``collector/drift.py``
is the offline test; this is its live form over counters).

Each evaluation compares the acceptance rate of the last ``WINDOW`` with the ``WINDOW`` before it,
in standard errors: the binomial variance of both rates at the last two windows' pooled rate,
times ``DISPERSION`` because a step's tokens clump (a request keeps its context, acceptance
within a step is a prefix). It alerts where that z stays under ``-Z`` and the rate under
``RATIO`` of the window before, for ``FOR``, with no counter reset in the two windows and no engine
start within them where the counters outlive the engine (a restart starts a new level: never
compared across it). One-sided at z -5: 2.9e-7 per evaluation from token noise alone, where
tokens clump no more than ``DISPERSION`` times binomial. The error shrinks with traffic while a
change of workload does not: at 2,000 drafted tokens a minute a mix that moves the rate by 3% or
more between half hours fires it as a decay would (a step change for about half an hour), so
the alert says where to look and ``report --by uptime`` over the traces (a trend within each
prompt class) says whether it is one. A fall of 10% an hour moves the rate by
5% between the halves of an hour; at 2,000 drafted tokens a minute (rate 0.6) that is z -5.3, so
it alerts about ``FOR`` after the first hour of uptime; at a tenth of that traffic it needs a
steeper fall. Stdlib only: the YAML is written as text.
"""

from __future__ import annotations

WINDOW = "30m"
DISPERSION = 4
Z = 5
RATIO = 0.97
FOR = "10m"
#: the expected false-alarm rate, for the alert's annotations
FALSE_ALARMS = (f"from token noise, one-sided 2.9e-7 per evaluation (z < -{Z}) where tokens clump "
                f"no more than {DISPERSION} times binomial (none over 24 simulated clean hours with "
                f"restarts); a workload mix that moves the rate by {1 - RATIO:.0%} or more between "
                "half hours fires it too: check within a prompt class (specscope report --by uptime)")


def decay_rules(prefix: str, by: str, accepted: str, drafted: str, where: str = "",
                start: str = "") -> tuple[str, str]:
    """(recording rules, alert) YAML for the counters ``accepted`` / ``drafted`` summed by
    ``by``; the recorded series are ``{prefix}_acceptance_decay_z_30m`` and
    ``{prefix}_acceptance_ratio_30m``; ``where``: the labels the summary names (default ``by``);
    ``start``: a gauge of the engine's start time (seconds), where the counters outlive the
    engine (a collector's): no alert within the hour after it moves."""
    def inc(family: str, offset: str = "", window: str = WINDOW) -> str:
        return f"sum by ({by}) (increase({family}[{window}]{offset}))"

    now = f"{inc(accepted)} / {inc(drafted)}"
    before = f"{inc(accepted, ' offset ' + WINDOW)} / {inc(drafted, ' offset ' + WINDOW)}"
    pooled = f"{inc(accepted, window='1h')} / {inc(drafted, window='1h')}"
    z, ratio = f"{prefix}_acceptance_decay_z_{WINDOW}", f"{prefix}_acceptance_ratio_{WINDOW}"
    record = (
        f"      - record: {z}\n"
        f"        # the last {WINDOW}'s acceptance rate against the {WINDOW} before it, in standard\n"
        f"        # errors (binomial variance x {DISPERSION} for clumped tokens); < 0: falling\n"
        f"        expr: |\n"
        f"          ({now}\n            - {before})\n"
        f"          / sqrt({DISPERSION} * ({pooled}) * (1 - {pooled})\n"
        f"            * (1 / {inc(drafted)} + 1 / {inc(drafted, ' offset ' + WINDOW)}))\n"
        f"      - record: {ratio}\n"
        f"        # the last {WINDOW}'s acceptance rate over the {WINDOW} before it\n"
        f"        expr: |\n"
        f"          ({now})\n          / ({before})\n")
    labels = ", ".join(f"{x} {{{{ $labels.{x} }}}}" for x in (where or by).split(", "))
    alert = (
        f"        expr: |\n"
        f"          {z} < -{Z}\n"
        f"          and on ({by}) {ratio} < {RATIO}\n"
        f"          and on ({by}) sum by ({by}) (resets({drafted}[1h])) == 0\n"
        + (f"          unless on ({by}) (time() - max by ({by}) ({start}) < 3600)\n" if start else "")
        +         f"        for: {FOR}\n"
        f"        labels:\n          severity: warning\n"
        f"        annotations:\n"
        f"          summary: \"Acceptance is falling with uptime on {labels}\"\n"
        f"          description: \"The last {WINDOW}'s acceptance rate is over {Z} standard errors "
        f"and {1 - RATIO:.0%} under the {WINDOW} before it, with no restart between (acceptance that "
        f"ages: a restart restores it). Expected false alarms: {FALSE_ALARMS}.\"\n")
    return record, alert
