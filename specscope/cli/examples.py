"""A few example invocations per command (one at least), set as each command's ``--help``
epilog (and read by the generated CLI reference); ``import --help`` also lists the formats it
knows. Every command's examples live here, in one table."""

from __future__ import annotations

import argparse

EXAMPLES: dict[str, tuple[str, ...]] = {
    "record": ("specscope record --model smollm2 --requests 16 -o run.jsonl",
               "specscope record --fault silent_greedy --metrics-port 9400"),
    "serve": ("specscope serve --listen tcp://127.0.0.1:5557 --metrics-port 9400 --trace traces/",),
    "rules": ("specscope rules -o specscope-rules.yml",
              "specscope rules --engine vllm -o vllm-rules.yml",
              "specscope rules --engine fleet -o fleet-rules.yml"),
    "grafana": ("specscope grafana -o specscope-board.json",
                "specscope grafana --engine probe -o probe-board.json"),
    "profile": ("specscope profile --model smollm2 --requests 4 -o profile.json",),
    "wrap": ("specscope wrap --trace-dir traces/ -- python -m sglang.launch_server --model-path M",),
    "report": ("specscope report run.jsonl",
               "specscope report nightly.jsonl --baseline last-good.jsonl --json",
               "specscope report s3://traces/fleet --by node --since 2026-12-01 --config eagle-s3"),
    "import": ("specscope import server.log metrics.txt -o imported.jsonl",
               "specscope import responses.json --format vllm-responses -o responses.jsonl"),
    "replay": ("specscope replay run.jsonl --speed 10 --metrics-port 9400",),
    "compare": ("specscope compare baseline.jsonl candidate.jsonl",
                "specscope compare 'fleet/#node=gpu-01' 'fleet/#node=gpu-07'"),
    "regress": ("specscope regress nightly-*.jsonl --sort time",),
    "compact": ("specscope compact traces/*.jsonl -o traces.parquet",
                "specscope compact fleet/ --since 2026-12-01"),
    "fleet": ("specscope fleet fleet/ --by config,node --since 2026-12-01",
              "specscope fleet s3a://traces/fleet --engine spark --master spark://head:7077 --json"),
    "serve-engine": ("specscope serve-engine --model smollm2 --port 8000 --trace serve.jsonl",),
    "client-check": ("specscope client-check",),
    "sweep": ("specscope sweep --model tiny --spec 0 1 2 3 --concurrency 1 4 -o sweep/",),
    "scrape": ("specscope scrape http://vllm-0:8000/metrics --interval 5 -o prod.jsonl",
               "specscope scrape http://sglang-0:30000/metrics --metrics-port 9400"),
    "explain": ("specscope explain run.jsonl",
                "specscope explain sweep/*.jsonl --json"),
    "check": ("specscope check server.log responses.json",),
    "diverge": ("specscope diverge run.jsonl",
                "specscope diverge speculative.json --reference target-only.json --dtype bfloat16"),
    "dashboard": ("specscope dashboard --trace-root traces/",
                  "specscope dashboard --prometheus http://prometheus:9090"),
    "demo": ("specscope demo --duration 120",
             "specscope demo --engine vllm"),
    "probe": ("specscope probe http://127.0.0.1:8000",
              "specscope probe http://127.0.0.1:8000 --every 600 --metrics-port 9410"
              "   # an exporter",
              "specscope probe http://127.0.0.1:8080 --classes greedy,temperature,top-p --json "
              "-o probe.jsonl",
              "specscope probe http://127.0.0.1:8000 --ngram 4:2:5     # vLLM with prompt lookup"),
}


def import_formats() -> str:
    """The formats ``import`` knows, one line each (from ``importers.FORMATS``)."""
    from ..importers import FORMATS

    width = max(map(len, FORMATS))
    return "\n".join(f"  {name:<{width}}  {reads}" for name, (reads, _, _) in FORMATS.items())


class Formatter(argparse.HelpFormatter):
    """Paragraphs written as one line are wrapped; text with line breaks of its own (examples,
    format lists, a hand-laid description) is kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text.strip("\n"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def add_examples(sub: argparse._SubParsersAction) -> None:
    """Every command's help ends with its examples (a command without any is a defect: the
    tests hold each command to one)."""
    for name, parser in sub.choices.items():
        lines = [f"  {e}" for e in EXAMPLES.get(name, ())]
        extra = ""
        if name == "import":
            extra = "formats (detected from the content; --format forces one):\n" + \
                import_formats() + "\n\n"
        if lines or extra:
            parser.formatter_class = Formatter
            parser.epilog = extra + "examples:\n" + "\n".join(lines)
