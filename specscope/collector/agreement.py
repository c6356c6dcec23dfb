"""Server-side timings against a benchmark client's, request by request.

The server times a request from the engine's own arrival stamp and ends its TTFT where the
engine's API process first holds the token (vLLM: ``arrival_time``, taken as the chat request is
rendered, to the output handler's timestamp of the first output, before detokenizing and
streaming it); the client from sending the request to receiving its first content chunk. So
the client's TTFT and E2E contain the server's: the difference is what the server never sees
(HTTP parsing and validation, time queued on the API server's event loop before and after the
engine, streaming the chunk out), small on an idle machine and growing with load
(``docs/serving.md``). Containment holds at any load and is what a test can hold; how close
the two medians are is a figure for a benchmark row. Requests are matched by id (the
client's ``X-Request-ID``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .. import schema

#: what each compared figure means, on each side
DEFINITIONS = {
    "ttft_ms": "time to first token: arrival (server) or send (client) to the first token",
    "e2e_ms": "end-to-end latency: arrival/send to the last token",
    "tpot_ms": "time per output token after the first: (E2E - TTFT) / (output tokens - 1)",
    "itl_chunk_ms": "gap between streamed chunks; one chunk carries every token a verify step "
                    "commits, so under speculation it is NOT a per-token ITL",
    "itl_token_ms": "server only: a chunk's gap divided by its tokens (per-token ITL)",
}


@dataclass
class Agreement:
    matched: int
    server_only: int
    client_only: int
    token_mismatches: list[tuple[str, int, int]]  #: (request id, server tokens, client tokens)
    chunk_mismatches: int  #: requests whose chunk counts differ (a chunk held back or merged)
    #: figure -> {server_median, client_median, diff_median, diff_p95_abs} (client - server, ms)
    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    tolerance: dict[str, str] = field(default_factory=dict)
    within: dict[str, bool] = field(default_factory=dict)
    #: figure -> requests whose client figure is below the server's by more than
    #: ``CONTAINMENT_SLACK_MS`` (TTFT and E2E only: the client's span contains the server's)
    not_contained: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.matched > 0 and not self.token_mismatches and all(self.within.values())


#: clock resolution and rounding allowed when holding a client's TTFT or E2E to contain the
#: server's (both are differences of one machine's clocks, each read to a microsecond or better)
CONTAINMENT_SLACK_MS = 1.0


def _timings(r: schema.RequestRecord) -> dict[str, float]:
    out = {name + "_ms": getattr(r, name + "_s") * 1e3 for name in ("ttft", "e2e", "tpot")
           if getattr(r, name + "_s") is not None}
    return out


def _p95(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(0.95 * len(values)))] if values else float("nan")


def client_agreement(server: Iterable[schema.RequestRecord],
                     client: Iterable[schema.RequestRecord], *,
                     abs_ms: dict[str, float] | None = None, rel: float = 0.10,
                     server_key: Callable[[str], str] | None = None) -> Agreement:
    """Match requests by id and compare TTFT, E2E and TPOT, token counts and chunk counts.

    A figure agrees when the median of (client - server) is within ``abs_ms[figure]`` plus
    ``rel`` of the server's median (transport and the client's own scheduling sit in the
    difference; defaults 25 ms for TTFT and E2E, 2 ms for TPOT). ``server_key`` maps a server
    request id to the client's (an engine that decorates the id it was sent, as vLLM does).
    """
    abs_ms = {"ttft_ms": 25.0, "e2e_ms": 25.0, "tpot_ms": 2.0, **(abs_ms or {})}
    key = server_key or (lambda rid: rid)
    s = {key(r.request_id): r for r in server}
    c = {r.request_id: r for r in client}
    both = sorted(set(s) & set(c))
    tokens = [(k, s[k].num_output_tokens, c[k].num_output_tokens) for k in both
              if s[k].num_output_tokens != c[k].num_output_tokens]
    chunks = sum(1 for k in both if c[k].chunk_times_ns
                 and len(c[k].chunk_times_ns) != len(s[k].chunk_times_ns))
    agreement = Agreement(len(both), len(set(s) - set(c)), len(set(c) - set(s)), tokens, chunks)
    pairs: dict[str, list[tuple[float, float]]] = {}
    for k in both:
        ts, tc = _timings(s[k]), _timings(c[k])
        for name in ts.keys() & tc.keys():
            pairs.setdefault(name, []).append((ts[name], tc[name]))
    for k in both:
        for side, rec in (("server", s[k]), ("client", c[k])):
            t = rec.chunk_times_ns
            gaps = [(t[i] - t[i - 1]) / 1e6 for i in range(1, len(t))]
            pairs.setdefault(f"itl_chunk_ms/{side}", []).extend((g, g) for g in gaps)
    for name in ("ttft_ms", "e2e_ms", "tpot_ms"):
        if not pairs.get(name):
            continue
        sv, cv = [a for a, _ in pairs[name]], [b for _, b in pairs[name]]
        diffs = [b - a for a, b in pairs[name]]
        agreement.figures[name] = {
            "server_median": statistics.median(sv), "client_median": statistics.median(cv),
            "diff_median": statistics.median(diffs), "diff_p95_abs": _p95([abs(d) for d in diffs])}
        limit = abs_ms[name] + rel * statistics.median(sv)
        agreement.tolerance[name] = f"|median(client - server)| <= {abs_ms[name]:g} ms + {rel:.0%} " \
                                    f"of the server median = {limit:.1f} ms"
        agreement.within[name] = abs(statistics.median(diffs)) <= limit
        if name != "tpot_ms":
            agreement.figures[name]["diff_min"] = min(diffs)
            agreement.not_contained[name] = sum(d < -CONTAINMENT_SLACK_MS for d in diffs)
    for side in ("server", "client"):
        gaps = [a for a, _ in pairs.get(f"itl_chunk_ms/{side}", [])]
        if gaps:
            agreement.figures.setdefault("itl_chunk_ms", {})[f"{side}_median"] = \
                statistics.median(gaps)
    return agreement


def format_agreement(a: Agreement) -> str:
    lines = [f"requests matched by id: {a.matched} (server only {a.server_only}, client only "
             f"{a.client_only})",
             f"output tokens: {'identical for every request' if not a.token_mismatches else f'{len(a.token_mismatches)} requests differ, e.g. {a.token_mismatches[0]}'}"]
    for name, fig in a.figures.items():
        if name == "itl_chunk_ms":
            lines.append(f"itl_chunk_ms  server median {fig.get('server_median', float('nan')):.2f}"
                         f"  client median {fig.get('client_median', float('nan')):.2f}  "
                         f"({a.chunk_mismatches} requests with different chunk counts)")
        else:
            verdict = "agrees" if a.within.get(name) else "DISAGREES"
            lines.append(f"{name:<13} server median {fig['server_median']:.2f}  client median "
                         f"{fig['client_median']:.2f}  client-server median "
                         f"{fig['diff_median']:+.2f} p95|.| {fig['diff_p95_abs']:.2f}  {verdict}"
                         f" ({a.tolerance[name]})")
    lines += [f"  {k}: {v}" for k, v in DEFINITIONS.items()]
    return "\n".join(lines)
