"""Recording rules, alerts and a Grafana board over an engine's own series
(``specscope rules --engine E`` / ``specscope grafana --engine E``), written from the engine's
mapping in ``importers/metrics`` so that the rules, the scraper and the dashboard read the same
families the same way.

Per engine, as far as its families allow (a figure an engine does not export gets no rule):
acceptance rate (accepted / drafted tokens) and acceptance length (bonus token included: from a
drafts or verification-step counter, SGLang's verify calls, or TensorRT-LLM's per-position
counters of finished requests) over 5 minutes and an hour; per-position acceptance; alerts on an
acceptance drop against the last hour, a per-position collapse, acceptance length pinned near 1
(a broken draft, garbled output) or near k + 1 (nearly every draft token accepted: a known sign
of degenerate repetition), and a scrape target down that exported the engine's series in the
last hour. Stdlib only: YAML and JSON are written as text.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import registry
from ..importers import metrics as M
from ..importers.metrics import EngineMetrics
from .decay_rules import decay_rules

TITLE = {e.name: e.title for e in registry.ENGINES}


@dataclass(frozen=True)
class _Exprs:
    by: str  #: the labels a run is told apart by
    rate: str | None  #: accepted / drafted over a window (``__W__`` the window)
    length: str | None  #: acceptance length over a window (``__W__`` the window)
    per_pos: str | None  #: per-position acceptance over a window (``__W__`` the window)
    drafts: str | None  #: drafts (request-steps) in a window
    k: str | None  #: the draft depth k
    pos: str  #: the position label


def _family(m: EngineMetrics, role: str) -> str | None:
    return next((f for f, r in m.counters.items() if r == role), None)


def exprs(m: EngineMetrics) -> _Exprs:
    """The PromQL of each figure over the engine's own families (the window as ``__W__``)."""
    by = ", ".join(x for x in (m.model_label, m.rank_label if m.counters_by_rank else "",
                               "instance" if m.by_target else "") if x)

    def s(expr: str, extra: str = "") -> str:
        return f"sum by ({by}{extra}) ({expr})"

    acc, drafted = _family(m, M.ACCEPTED), _family(m, M.DRAFT_TOKENS)
    drafts, verify, gen = _family(m, M.DRAFTS), _family(m, M.VERIFY_CALLS), _family(m, M.GENERATED)
    rate = f"{s(f'rate({acc}[__W__])')} / {s(f'rate({drafted}[__W__])')}" if acc and drafted else None
    length = per_pos = n_drafts = k = None
    if m.drafted_per_pos and not drafts:  # finished requests' per-position counters (TensorRT-LLM)
        pos0 = f'{m.drafted_per_pos}{{{m.pos_label}="0"}}'
        length = f"1 + {s(f'rate({m.per_pos}[__W__])')} / {s(f'rate({pos0}[__W__])')}"
        per_pos = (f"{s(f'rate({m.per_pos}[__W__])', ', ' + m.pos_label)} / on ({by}) group_left "
                   f"{s(f'rate({pos0}[__W__])')}")
        n_drafts = s(f"increase({pos0}[5m])")
    elif drafts and acc:
        length = f"1 + {s(f'rate({acc}[__W__])')} / {s(f'rate({drafts}[__W__])')}"
        n_drafts = s(f"increase({drafts}[5m])")
        if m.per_pos:
            per_pos = (f"{s(f'rate({m.per_pos}[__W__])', ', ' + m.pos_label)} / on ({by}) group_left "
                       f"{s(f'rate({drafts}[__W__])')}")
    elif verify and gen:  # SGLang: generated tokens per verify call
        length = f"{s(f'rate({gen}[__W__])')} / {s(f'rate({verify}[__W__])')}"
        n_drafts = s(f"increase({verify}[5m])")
    if m.per_pos:  # k = the positions one server exports
        k = f"max by ({by}) (count by ({by}, instance) ({m.per_pos}))"
    elif steps := next((f for f, r in m.gauges.items() if r == M.STEPS), None):
        k = f"max by ({by}) ({steps})"  # the configured depth (SGLang)
    return _Exprs(by, rate, length, per_pos, n_drafts, k, m.pos_label)


def _labels_text(by: str) -> str:
    return ", ".join(f"{x} {{{{ $labels.{x} }}}}" for x in by.split(", "))


def rules(engine: str) -> str:
    """The rules file over ``engine``'s own series (YAML)."""
    m = M.BY_NAME[engine]
    e, name, title = exprs(m), f"specscope_{engine}", TITLE[engine]
    rec, alerts = [], []

    def record(metric: str, expr: str, comment: str = "") -> None:
        rec.append(f"      - record: {metric}\n" + (f"        # {comment}\n" if comment else "")
                   + f"        expr: |\n          {expr}\n")

    def alert(alert_name: str, expr: str, summary: str, description: str, severity="warning",
              for_="10m") -> None:
        alerts.append(f"      - alert: {alert_name}\n        expr: |\n          {expr}\n"
                      f"        for: {for_}\n        labels:\n          severity: {severity}\n"
                      f"        annotations:\n          summary: \"{summary}\"\n"
                      f"          description: \"{description}\"\n")

    where = _labels_text("instance" if m.by_target else e.by)  # a label always there
    camel = "Specscope" + engine.capitalize()
    if e.rate:
        for w in ("5m", "1h"):
            record(f"{name}_acceptance_rate_{w}", e.rate.replace("__W__", w))
        alert(f"{camel}AcceptanceDrop", f"{name}_acceptance_rate_5m < 0.8 * {name}_acceptance_rate_1h",
              f"{title} acceptance rate dropped by more than 20% against the last hour",
              f"Acceptance rate (5m) on {where} is under 0.8 of its last hour.")
        record_text, alert_text = decay_rules(name, e.by, _family(m, M.ACCEPTED) or "",
                                              _family(m, M.DRAFT_TOKENS) or "",
                                              "instance" if m.by_target else e.by)
        rec.append(record_text)
        alerts.append(f"      - alert: {camel}AcceptanceDecay\n{alert_text}")
    if e.length:
        for w in ("5m", "1h"):
            record(f"{name}_mean_acceptance_length_{w}", e.length.replace("__W__", w),
                   "tokens committed per draft, bonus token included")
        if not e.rate:  # accepted tokens per draft (length - 1) stands in for the rate
            alert(f"{camel}AcceptanceDrop",
                  f"({name}_mean_acceptance_length_5m - 1) < 0.8 * ({name}_mean_acceptance_length_1h - 1)",
                  f"{title} accepted tokens per draft dropped by more than 20% against the last hour",
                  f"Acceptance length - 1 (5m) on {where} is under 0.8 of its last hour.")
        enough = f" and on ({e.by}) {e.drafts} >= 200" if e.drafts else ""
        alert(f"{camel}AcceptanceLengthNearOne", f"{name}_mean_acceptance_length_5m < 1.05{enough}",
              f"{title} speculation commits almost nothing beyond the bonus token",
              f"Acceptance length under 1.05 (bonus included) on {where}: the draft agrees with "
              "almost nothing (a broken draft, or garbled output).")
        if e.k:
            alert(f"{camel}AcceptanceLengthNearMax",
                  f"{name}_mean_acceptance_length_5m > on ({e.by}) 0.97 * ({e.k} + 1){enough}",
                  f"{title} accepts nearly every draft token",
                  f"Acceptance length within 3% of k + 1 on {where}: a known sign of degenerate "
                  "repetition (outputs looping).")
    if e.per_pos:
        for w in ("5m", "1h"):
            record(f"{name}_per_position_acceptance_{w}", e.per_pos.replace("__W__", w))
        alert(f"{camel}PerPositionCollapse",
              f"{name}_per_position_acceptance_5m < 0.5 * {name}_per_position_acceptance_1h\n"
              f"          and {name}_per_position_acceptance_1h > 0.1",
              f"{title} acceptance at one draft position fell below half its last hour",
              f"Position {{{{ $labels.{e.pos} }}}} on {where}.")
    family = next(iter(m.counters))
    alert(f"{camel}TargetDown",
          f"up == 0 and on (instance, job) count by (instance, job) (count_over_time({family}[1h]))",
          f"A {title} target that exported spec-decode series in the last hour is down",
          "{{ $labels.instance }} (job {{ $labels.job }}) does not answer its scrape.",
          severity="critical", for_="2m")
    return (f"# specscope rules over {title}'s own series ({m.derivation})\n"
            f"groups:\n  - name: specscope-{engine}-recording\n    rules:\n" + "".join(rec)
            + f"  - name: specscope-{engine}-alerts\n    rules:\n" + "".join(alerts))


def panels(engine: str) -> list[tuple[str, str]]:
    """(title, PromQL) of the board over ``engine``'s own series."""
    m = M.BY_NAME[engine]
    e = exprs(m)
    out = []
    if e.length:
        out.append(("Mean acceptance length (bonus token included)", e.length.replace("__W__", "5m")))
    # the engine's gauge, one line per label set (ranks, replicas): never averaged
    out += [(f"Acceptance length reported by {TITLE[engine]}", g)
            for g, role in m.gauges.items() if role == M.LENGTH]
    if e.rate:
        out.append(("Acceptance rate (accepted / drafted)", e.rate.replace("__W__", "5m")))
    if e.per_pos:
        out.append(("Per-position acceptance", e.per_pos.replace("__W__", "5m")))
    for fam, hist in m.latency.items():
        label = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_token_s": "ITL per token",
                 "itl_chunk_s": "ITL per streamed chunk", "e2e_s": "E2E latency"}[hist]
        out.append((f"{label} p50 (s)",
                    f"histogram_quantile(0.5, sum by ({e.by}, le) (rate({fam}_bucket[5m])))"))
    return out
