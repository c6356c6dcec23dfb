"""``specscope scrape``: poll running engines' Prometheus pages and record what they say.

Every ``interval_s`` all endpoints are fetched concurrently (one thread each, a timeout and a
size cap per page, optional headers for auth, TLS verification on unless told otherwise). Each
endpoint x label set (vLLM's ``engine`` ranks, SGLang's ``dp_rank``, models) is its own run,
named ``HOST:PORT[/labels]`` (``HOST:PORT/model=ID`` for a llama.cpp router's ``?model=``
page). Consecutive scrapes become counter windows: the first scrape of a label set is the
baseline (totals are the increase seen while recording), a counter that goes down is
a restart (the new value is the increase), SGLang's gauges are kept as reported. Records are
written to the trace as each round completes (JSONL, one flushed line per record: a killed
scrape leaves every finished round readable), and handed to ``on_records`` (a collector: live
detectors and ``/metrics`` under specscope's names). An endpoint that fails is counted and named
on its round; the others go on.

What is read is each engine's spec-decode families as ``importers/metrics`` maps them (vLLM,
SGLang, TensorRT-LLM's ``/prometheus/metrics``, llama.cpp builds that count drafts); a page
with none of them records nothing, said once per endpoint. TensorRT-LLM's iteration-stats JSON
at ``/metrics`` drains on every read (other readers would lose those stats) and is not polled.
"""

from __future__ import annotations

import dataclasses
import json
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence
from urllib.parse import parse_qs, urlsplit

from .importers._common import run_record
from .importers import metrics as engines
from .importers.promtext import Series, run_names
from .io import fetch, promtext
from .io.trace import open_writer


@dataclass
class Endpoint:
    url: str
    labels: dict[str, str] = field(default_factory=dict)  #: from a targets file
    name: str = ""  #: HOST:PORT (the run id's stem)
    series: Series | None = None
    runs: dict[tuple, str] = field(default_factory=dict)  #: label set -> run id written
    scrapes: int = 0
    failures: int = 0
    last_error: str = ""
    mapped: bool = False  #: a page gave a family we read
    families: tuple[str, ...] = ()  #: the families of the engines this endpoint serves
    #: the engine's start, ns since the epoch: its ``process_start_time_seconds``, else the
    #: scrape that saw its counters reset; 0 until known
    start_ns: int = 0
    restarts_seen: int = 0  #: the series' restarts already written as new run records
    run_records: dict[tuple, Any] = field(default_factory=dict)  #: label set -> its run record


@dataclass
class ScrapeResult:
    endpoints: list[Endpoint]
    rounds: int
    records: int


def targets_from_file(path: str | Path) -> list[Endpoint]:
    """Endpoints of a Prometheus file-discovery targets file (JSON or YAML: a list of
    ``{"targets": ["host:port", ...], "labels": {...}}``); ``__metrics_path__`` and
    ``__scheme__`` labels are honoured as Prometheus does."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        groups = json.loads(text)
    except json.JSONDecodeError:
        import yaml

        groups = yaml.safe_load(text)
    if not isinstance(groups, list):
        raise ValueError(f"{path}: a targets file is a list of {{targets, labels}} groups")
    out = []
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or not isinstance(g.get("targets"), list):
            raise ValueError(f"{path}: group {i + 1} has no list of targets")
        labels = {str(k): str(v) for k, v in (g.get("labels") or {}).items()}
        scheme = labels.pop("__scheme__", "http")
        metrics_path = labels.pop("__metrics_path__", "/metrics")
        for t in g["targets"]:
            out.append(Endpoint(f"{scheme}://{t}{metrics_path}", labels))
    return out


def baseline_stats(path: str | Path, run: str | None = None) -> tuple[str, Any]:
    """(run id, pooled SpecStats) of the baseline run in the trace ``path``: ``run``, or the
    trace's only run with acceptance counts. Raises ValueError naming the runs to choose from."""
    from .collector.stats import SpecStats
    from .io.trace import read_trace
    from .schema import SpecCountsRecord, VerifyStepRecord

    records = read_trace(path).records
    counted = (SpecCountsRecord, VerifyStepRecord)
    runs = sorted({r.run_id for r in records if isinstance(r, counted)})
    if run is None and len(runs) == 1:
        run = runs[0]
    if run is None or run not in runs:
        listed = ", ".join(runs) or "none"
        raise ValueError(f"{path}: {len(runs)} run(s) with acceptance counts ({listed}); "
                         "name the baseline with --baseline-run")
    return run, SpecStats(keep_samples=False).observe_all(
        r for r in records if isinstance(r, counted) and r.run_id == run)


def _url_model(url: str) -> str:
    """The model a URL selects (``?model=ID``, a llama.cpp router's per-model page), or ""."""
    return parse_qs(urlsplit(url).query).get("model", [""])[0]


def endpoint_names(urls: Sequence[str]) -> list[str]:
    """Each endpoint's run-id stem: ``HOST:PORT``, with ``/model=ID`` where the URL selects a
    model (llama.cpp's router mode serves one page per ``?model=``); endpoints that would still
    share a name are numbered in the order given (``HOST:PORT#2``)."""
    names = []
    for url in urls:
        model = _url_model(url)
        names.append(urlsplit(url).netloc + (f"/model={model}" if model else ""))
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def scrape(urls: Sequence[str | Endpoint], out: str | Path, *, interval_s: float = 5.0,
           duration_s: float | None = None, rounds: int | None = None, timeout_s: float = 3.0,
           max_bytes: int = 8 << 20, headers: dict[str, str] | None = None,
           verify_tls: bool = True, ca_file: str | None = None,
           on_records: Callable[[list], None] | None = None,
           stop: threading.Event | None = None, log=sys.stderr) -> ScrapeResult:
    """Poll ``urls`` until ``duration_s`` or ``rounds`` pass (or ``stop`` is set); write the
    trace ``out``. Never raises for an endpoint's failure."""
    endpoints = [u if isinstance(u, Endpoint) else Endpoint(u) for u in urls]
    if not endpoints:
        raise ValueError("no endpoints to scrape: give URLs or --targets")
    for ep in endpoints:
        parts = urlsplit(ep.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{ep.url}: not an http(s) URL")
    for ep, name in zip(endpoints, endpoint_names([ep.url for ep in endpoints])):
        ep.name = ep.name or name  # a name given by the caller is kept
        ep.series = Series(ep.name, baseline=True)
    context = None
    if any(urlsplit(ep.url).scheme == "https" for ep in endpoints):
        context = ssl.create_default_context(cafile=ca_file)
        if not verify_tls:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    stop = stop or threading.Event()
    http = fetch.client(verify=context if context is not None else True, timeout_s=timeout_s)
    writer = open_writer(out)
    start, n_round, n_records = time.monotonic(), 0, 0
    try:
        with ThreadPoolExecutor(max_workers=min(32, len(endpoints))) as pool:
            while not stop.is_set():
                t_round = time.monotonic()
                t_ns = time.time_ns()
                pages = list(pool.map(lambda ep: _one(ep, timeout_s, max_bytes, headers or {},
                                                      http), endpoints))
                batch: list[Any] = []
                for ep, page in zip(endpoints, pages):
                    if page is None:
                        print(f"scrape {ep.url}: {ep.last_error}", file=log)
                        continue
                    batch += _records(ep, page, t_ns, log)
                if batch:
                    writer.write(batch)
                    if on_records is not None:
                        on_records(batch)
                n_round += 1
                n_records += len(batch)
                if (rounds is not None and n_round >= rounds) or \
                        (duration_s is not None and time.monotonic() - start >= duration_s):
                    break
                stop.wait(max(0.0, interval_s - (time.monotonic() - t_round)))
    finally:
        writer.close()
        http.close()
    return ScrapeResult(endpoints, n_round, n_records)


def _one(ep: Endpoint, timeout_s: float, max_bytes: int, headers: dict[str, str],
         http: Any) -> str | None:
    ep.scrapes += 1
    try:
        return fetch.get_text(ep.url, timeout_s=timeout_s, max_bytes=max_bytes,
                              headers={"Accept": "text/plain", "Accept-Encoding": "identity",
                                       **headers}, client=http)
    except Exception as exc:  # one endpoint's failure never stops the others
        ep.failures += 1
        ep.last_error = (exc.why + (" (--max-bytes)" if "larger than the cap" in exc.why else "")
                         if isinstance(exc, fetch.FetchError) else f"{type(exc).__name__}: {exc}")
        return None


def _records(ep: Endpoint, page: str, t_ns: int, log) -> list[Any]:
    # once an endpoint's engine is known its page is searched for that engine's families
    # alone (a scan per engine costs ~0.1 ms on a 200 kB page); every 12th scrape looks for all
    full = not ep.families or ep.scrapes % 12 == 0
    samples = promtext.parse_families(page, engines.FAMILIES if full else ep.families).samples
    if full:
        seen = {engines.BY_FAMILY[x.name].engine for x in samples}
        ep.families = tuple(f for f in engines.FAMILIES if engines.BY_FAMILY[f].engine in seen)
    series = ep.series
    assert series is not None  # made at the endpoint's first scrape
    found: list[tuple[tuple, Any]] = series.feed([(x.name, x.labels, x.value) for x in samples],
                                                 t_ns)
    found += series.drain_samples()  # engine gauges, beside their label set's counters
    out: list[Any] = []
    if series.engine != "prometheus":
        ep.mapped = True
    elif ep.scrapes == 1:
        print(f"scrape {ep.url}: no spec-decode family this version reads (vllm:spec_decode_*, "
              "sglang:spec_*, trtllm_spec_decode_*, llamacpp:spec_decode_*); for TensorRT-LLM "
              "point at /prometheus/metrics", file=log)
    out += _restarted(ep, _process_start(page), series.restarts, t_ns)
    keys = set(ep.runs) | {k for k, _ in found}
    names = run_names(keys, ep.name)
    for key, rec in found:
        rid = names[key]
        if key not in ep.runs:
            ep.runs[key] = rid
            labels = {"endpoint": ep.url, **series.config, **ep.labels}
            if rid != ep.name:
                labels["label_set"] = rid[len(ep.name) + 1:]
            run = run_record(rid, series.engine, "prometheus-scrape", ep.url,
                             num_steps=series.k_seen, labels=labels,
                             model=engines.where(engines.BY_NAME[series.engine],
                                                 dict(key))[0] or _url_model(ep.url))
            ep.run_records[key] = run = dataclasses.replace(run, started_ns=ep.start_ns)
            out.append(run)
        out.append(dataclasses.replace(rec, run_id=ep.runs[key]))
    return out


def _process_start(page: str) -> int:
    """The page's ``process_start_time_seconds`` (prometheus_client's process collector: vLLM's
    API server), ns since the epoch; 0 where the page has none."""
    found = promtext.parse_families(page, ("process_start_time_seconds",)).samples
    return int(found[0].value * 1e9) if found and found[0].value > 0 else 0


def _restarted(ep: Endpoint, start_ns: int, restarts: int, t_ns: int) -> list[Any]:
    """An engine start that moved (its process start where the page gives it, else counters that
    went down: the start is then this scrape's time, the restart having come since the last
    one) is written as each run's record again with the new start; the drift test reads each
    start as a new segment."""
    reset = restarts > ep.restarts_seen
    ep.restarts_seen = restarts
    if start_ns:  # the page says when its process started: that alone decides
        moved, ep.start_ns = bool(ep.start_ns) and start_ns != ep.start_ns, start_ns
        if not moved:
            return []
    elif reset:
        ep.start_ns = t_ns
    else:
        return []
    ep.run_records = {k: dataclasses.replace(r, started_ns=ep.start_ns)
                      for k, r in ep.run_records.items()}
    return list(ep.run_records.values())
