"""How many tokens to draft at each step: the reference decoder's speculation policies.

- ``fixed``: the configured depth on every step (today's behaviour).
- ``batch:B1=K1,B2=K2,...``: k by running batch size, as vLLM's per-batch-size speculative token
  counts and SGLang's step tiers choose it: the K of the largest B not above the batch size.
- ``adaptive``: k chosen from what the run measures. Per-position acceptance (conditional on the
  position before being accepted) gives the tokens a step commits at each depth,
  E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j (bonus included); the step's wall time per depth is
  measured (a target-only probe gives k = 0), leaving out the first step after a change, which
  carries the draft's catch-up on tokens committed meanwhile. It starts with ``probe`` steps at
  the configured k and ``probe`` steps target-only, then every ``window`` steps moves to the
  measured k with the most tokens per second per row, E(k) / t(k), switching only for a
  predicted gain of ``hysteresis`` or more; k = 0 turns speculation off. While speculating it
  tries one depth down when the deepest position accepts under ``low`` and one up when it
  accepts over ``high`` (depths not yet run are tried, never guessed).
  While off, acceptance is not measured, so after ``reprobe`` steps off it speculates for
  ``probe`` steps at the last speculative depth to measure again; each re-probe that finds
  speculation still losing doubles the wait (up to 16x), so a run where it never pays spends
  a shrinking share of its steps finding that out.

Each change carries its reason, recorded on the step that runs with the new k; so does the
decision that ends a probe, also when it keeps k (why speculation stays off).
"""

from __future__ import annotations

from typing import Sequence


class FixedPolicy:
    name = "fixed"

    def __init__(self, k: int) -> None:
        self.k = k

    def choose(self, batch_size: int) -> tuple[int, str]:
        """(k for the next step, why it changed or "")."""
        return self.k, ""

    def observe(self, k: int, batch_size: int, seconds: float, accepted: Sequence[int]) -> None:
        """One finished step: its depth, batch size, wall time and accepted drafts per row."""


class BatchPolicy(FixedPolicy):
    def __init__(self, table: dict[int, int], default_k: int) -> None:
        super().__init__(default_k)
        self.table = sorted(table.items())
        self.name = "batch:" + ",".join(f"{b}={k}" for b, k in self.table)
        self._last: int | None = None

    def choose(self, batch_size: int) -> tuple[int, str]:
        k = self.table[0][1]
        for b, kb in self.table:
            if batch_size >= b:
                k = kb
        reason = ""
        if k != self._last:
            was = "start" if self._last is None else f"k {self._last}"
            reason = f"batch size {batch_size}: {was} -> k {k} ({self.name})"
        self._last = k
        return k, reason


class AdaptivePolicy(FixedPolicy):
    name = "adaptive"

    def __init__(self, k_max: int, *, window: int = 8, probe: int = 3, reprobe: int = 256,
                 hysteresis: float = 0.05, time_decay: float = 0.8,
                 accept_decay: float = 0.95, low: float = 0.3, high: float = 0.7) -> None:
        super().__init__(k_max)
        self.low, self.high = low, high
        self._changed = False  #: the step about to run is the first at a new k
        self.k_max, self.window, self.probe, self.reprobe = k_max, window, probe, reprobe
        self._wait = reprobe  #: steps off before the next re-probe
        self.hysteresis, self.time_decay, self.accept_decay = hysteresis, time_decay, accept_decay
        self.drafted = [0.0] * k_max  #: decayed counts per position (conditional acceptance)
        self.accepted = [0.0] * k_max
        #: (batch size class, k) -> decayed mean seconds per step per row
        self.step_s: dict[tuple[int, int], float] = {}
        self._b = 1  #: batch size class of the step about to run
        self._plan: list[tuple[int, str]] = [(k_max, f"start at the configured k {k_max}"),
                                              (0, "probe: target-only step time")]
        self._left = window  #: steps left at the current k before the next decision
        self._k: int | None = None  #: None until the first choice
        self._off_steps = 0
        self._last_spec_k = k_max
        self._probing = False  #: a re-probe (while off) is running
        self._in_probe = False  #: a window run to measure (start, probe, re-probe, a try) is running

    # ------------------------------------------------------------------ measure
    def observe(self, k: int, batch_size: int, seconds: float, accepted: Sequence[int]) -> None:
        per_row = seconds / max(1, batch_size)
        key = (_size_class(batch_size), k)
        old, w = self.step_s.get(key), self.time_decay
        if not self._changed:  # the first step at a new k carries the draft's catch-up
            self.step_s[key] = per_row if old is None else w * old + (1 - w) * per_row
        self._changed = False
        if k:
            for p in range(self.k_max):  # older steps weigh less: acceptance drifts with the text
                self.drafted[p] *= self.accept_decay
                self.accepted[p] *= self.accept_decay
            for a in accepted:
                for p in range(k):
                    self.drafted[p] += 1
                    if p < a:
                        self.accepted[p] += 1
                    else:
                        break  # a chain: nothing past the first rejection is verified

    def tokens_per_step(self, k: int) -> float | None:
        """E(k): tokens committed per row per step at depth k, bonus included."""
        rates = [a / d if d else None for a, d in zip(self.accepted, self.drafted)]
        known = [r for r in rates if r is not None]
        if k and not known:
            return None
        total, reach = 1.0, 1.0
        for p in range(k):
            rate = rates[p]
            reach *= rate if rate is not None else known[-1]
            total += reach
        return total

    def seconds_per_step(self, k: int) -> float | None:
        """t(k) per row at the current batch size class: as measured there, else (once the
        target-only step is measured there) carried over from the nearest class where both k
        and target-only ran, as the same multiple of the target-only step; None otherwise."""
        b = self._b
        if (b, k) in self.step_s:
            return self.step_s[(b, k)]
        if (b, 0) not in self.step_s:
            return None
        other = sorted((abs(c.bit_length() - b.bit_length()), c) for c, j in self.step_s
                       if j == k and (c, 0) in self.step_s)
        if not other:
            return None
        c = other[0][1]
        return self.step_s[(b, 0)] * self.step_s[(c, k)] / self.step_s[(c, 0)]

    def speed(self, k: int) -> float | None:
        e, t = self.tokens_per_step(k), self.seconds_per_step(k)
        return e / t if e is not None and t else None

    # ------------------------------------------------------------------ decide
    def choose(self, batch_size: int) -> tuple[int, str]:
        reason = ""
        b = _size_class(batch_size)
        if b != self._b and self._k is not None:
            self._b = b
            if (b, self._k) not in self.step_s or (self._k and (b, 0) not in self.step_s):
                self._left = min(self._left, 2)  # a batch size not measured yet: decide soon
                self._in_probe = True  # and say what the decision rests on
        self._b = b
        if self._k is None or self._left <= 0:
            was_probing = self._probing
            k, reason = self._next()
            self._probing = reason.startswith("re-probe")
            if was_probing:  # a re-probe that finds speculation still losing: wait longer
                self._wait = min(self._wait * 2, self.reprobe * 16) if k == 0 else self.reprobe
            self._in_probe = reason.startswith(PROBES)
            self._left = self.probe if self._in_probe else self.window
            self._changed = k != self._k
            self._k = k
        assert self._k is not None  # the plan's first entry set it
        self._left -= 1
        if self._k == 0:
            self._off_steps += 1
        else:
            self._last_spec_k = self._k
            self._off_steps = 0
        return self._k, reason

    def _next(self) -> tuple[int, str]:
        if self._plan:
            return self._plan.pop(0)
        assert self._k is not None  # the plan's first entry set it
        if self._k and self.seconds_per_step(0) is None:
            return 0, f"probe: target-only step time at batch size class {self._b}"
        if self._k == 0 and self._off_steps >= self._wait:
            return self._last_spec_k, (f"re-probe after {self._off_steps} steps off: k "
                                       f"{self._last_spec_k} for {self.probe} steps")
        if self._k:
            # the deepest position that drafts reached (a chain stops at the first rejection)
            reached = [p for p in range(self._k) if self.drafted[p] >= 1]
            rate = self.accepted[reached[-1]] / self.drafted[reached[-1]] if reached else None
            if rate is not None and rate < self.low and self._k > 1 and self.seconds_per_step(self._k - 1) is None:
                return self._k - 1, f"the deepest position accepts {rate:.0%} (< {self.low:.0%}): try k {self._k - 1}"
            if rate is not None and rate > self.high and self._k < self.k_max and self.seconds_per_step(self._k + 1) is None:
                return self._k + 1, f"the deepest position accepts {rate:.0%} (> {self.high:.0%}): try k {self._k + 1}"
        speeds = {k: self.speed(k) for k in range(self.k_max + 1)}
        known = {k: s for k, s in speeds.items() if s is not None}
        if not known or self._k not in known:
            return self._k, ""
        best = max(known, key=known.__getitem__)
        if best != self._k and known[best] < known[self._k] * (1 + self.hysteresis):
            best = self._k  # not worth a switch
        rivals = [k for k in known if k != best]
        if not rivals or (best == self._k and not self._in_probe):
            return self._k, ""  # nothing to say: no switch, no probe just ended
        rival = max(rivals, key=known.__getitem__)
        e, t, e1, t1 = (self.tokens_per_step(best), self.seconds_per_step(best),
                        self.tokens_per_step(rival), self.seconds_per_step(rival))
        assert e is not None and t is not None and e1 is not None and t1 is not None  # both known
        verdict = ("speculation off" if best == 0 else f"k {best}") + (
            " (kept)" if best == self._k else "")
        return best, (f"k {best}: {e:.2f} tokens/step in {t * 1e3:.1f} ms/row vs k {rival}: {e1:.2f} in "
                      f"{t1 * 1e3:.1f} ms ({known[best] / known[rival]:.2f}x) at batch size class "
                      f"{self._b}: {verdict}")


PROBES = ("start", "probe", "re-probe", "the deepest")


def _size_class(batch_size: int) -> int:
    """1, 2, 4, 8, ...: the power of two at or below the batch size."""
    return 1 << (max(1, batch_size).bit_length() - 1)


def parse_policy(text: str, k: int) -> FixedPolicy:
    """``fixed``, ``adaptive`` or ``batch:B1=K1,B2=K2,...``; ``k`` is the configured depth."""
    text = (text or "fixed").strip()
    if text == "fixed":
        return FixedPolicy(k)
    if text == "adaptive":
        if k < 1:
            raise ValueError("--spec-policy adaptive needs a draft depth (--spec-steps) of at least 1")
        return AdaptivePolicy(k)
    if text.startswith("batch:"):
        table = {}
        for part in text[len("batch:"):].split(","):
            b, sep, kb = part.partition("=")
            try:
                if not sep or int(b) < 1 or int(kb) < 0:
                    raise ValueError
                table[int(b)] = int(kb)
            except ValueError:
                raise ValueError(f"--spec-policy {text!r}: each entry is BATCH=K with BATCH >= 1 "
                                 f"and K >= 0, e.g. batch:1=3,4=2,16=0") from None
        if max(table.values()) > k:
            raise ValueError(f"--spec-policy {text!r}: k above the drafted depth {k} (--spec-steps)")
        return BatchPolicy(table, k)
    raise ValueError(f"--spec-policy {text!r}: one of fixed, adaptive, batch:B1=K1,B2=K2,...")
