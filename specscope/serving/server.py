"""``specscope serve-engine``: load a model pair, start the scheduler and serve the API.

The hooks record server-side request timings and every verify step into an in-process
collector (served at ``/metrics`` beside the API) and, when asked, a JSONL trace.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.decoder import SpecConfig, SpeculativeDecoder
from ..engine.models import load_pair
from ..engine.prefix import PrefixCache
from ..engine.workload import run_record
from .api import Served, create_app
from .scheduler import Scheduler
from .text import Codec


@dataclass
class EngineOptions:
    model: str = "tiny"
    draft: str = "int:4"
    tokenizer: str | None = None
    config: SpecConfig = field(default_factory=SpecConfig)
    max_batch: int = 8
    max_queue: int = 1024
    #: the target's prefix cache (``engine/prefix.py``); off: every prompt prefilled whole
    prefix_cache: bool = False
    max_tokens_limit: int = 4096
    seed: int = 0
    stats_every: int = 8  #: sampling-truth statistics on one verify step in N
    hooks: bool = True  #: False serves with no recorder at all (the hooks-off baseline)
    trace: str | None = None  #: trace of everything recorded (Parquet for a .parquet name)
    trace_roll_s: float = 10.0  #: Parquet traces: seconds between closed part files
    #: send records to a running `specscope serve` (tcp://HOST:PORT) instead of aggregating
    #: them in this process; /metrics is then served by that collector
    collector_url: str | None = None
    run_id: str = ""
    labels: dict[str, str] = field(default_factory=dict)


class Engine:
    """A started engine: decoder, recorder, collector, scheduler; ``close()`` stops them."""

    def __init__(self, opts: EngineOptions) -> None:
        from ..collector.service import Collector
        from ..hooks import Recorder, every_n

        pair = load_pair(opts.model, opts.draft, seed=opts.seed, tokenizer=opts.tokenizer)
        cfg = opts.config
        self.run_id = opts.run_id or f"serve-{cfg.config_id}-{uuid.uuid4().hex[:8]}"
        self.collector = None if opts.collector_url else Collector().start()
        self.recorder = None
        self.writer = None
        if opts.hooks:
            if opts.collector_url:
                from ..io.transport import ZmqSink

                sinks: list[Any] = [ZmqSink(opts.collector_url)]
            else:
                sinks = [self.collector]
            if opts.trace:
                from ..io.trace import open_writer

                self.writer = open_writer(Path(opts.trace), roll_s=opts.trace_roll_s)
                sinks.append(self.writer)
            run = run_record(self.run_id, pair, cfg, "served", dict(opts.labels))
            self.recorder = Recorder(run, sinks=sinks,
                                     stats_policy=every_n(max(opts.stats_every, 1))).start()
        context = getattr(pair.target.config, "max_position_embeddings", None)
        decoder = SpeculativeDecoder(pair.target, pair.draft if cfg.num_steps else None, cfg,
                                     recorder=self.recorder, eos_ids=pair.eos_ids, seed=opts.seed,
                                     run_id=self.run_id, context=context,
                                     prefix_cache=PrefixCache() if opts.prefix_cache else None)
        self.scheduler = Scheduler(decoder, max_batch=opts.max_batch,
                                   max_queue=opts.max_queue).start()
        vocab = pair.target.config.vocab_size
        self.served = Served(self.scheduler, Codec(pair.tokenizer, vocab), pair.name,
                             opts.max_tokens_limit, self.collector if opts.hooks else None,
                             fault=cfg.fault,
                             max_model_len=context)

    def app(self):
        return create_app(self.served)

    def close(self) -> None:
        self.scheduler.close()
        if self.recorder is not None:
            self.recorder.close()
        if self.collector is not None:
            self.collector.close()


def serve_engine(opts: EngineOptions, *, host: str = "127.0.0.1", port: int = 8000) -> int:
    """Serve until SIGINT/SIGTERM; prints the URLs once listening."""
    import uvicorn

    engine = Engine(opts)
    config = uvicorn.Config(engine.app(), host=host, port=port, log_level="warning",
                            access_log=False)
    server = uvicorn.Server(config)
    original = server.startup

    async def startup(sockets=None):
        await original(sockets=sockets)
        url = f"http://{host}:{port}"
        print(f"serving {engine.served.model} ({opts.config.config_id}) at {url}/v1 ; "
              f"metrics at {url}/metrics ; run {engine.run_id}", flush=True)

    server.startup = startup  # type: ignore[method-assign]  # uvicorn's hook: no other seam
    try:
        server.run()
    finally:
        engine.close()
        print("engine stopped", flush=True)
    return 0
