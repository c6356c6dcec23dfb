"""Writes the documentation site's reference pages from the code, so that they cannot drift:
the command line from the argparse parsers, the metrics from the exporters' metric tables, the
import formats from the importer registry, the OpenTelemetry attributes from the OTLP sink's
table, and the architecture's floors from ``specscope.layers``. ``make docs`` runs it before
``mkdocs build``; the pages land in ``docs/reference/`` (not kept in git)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "reference"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def cli_page() -> str:
    from specscope.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    out = ["# Command line", "", "Every command, as `specscope COMMAND --help` prints it "
           "(generated from the parsers).", ""]
    out += [f"- [`{name}`](#{name}): {_cell(helps.get(name) or '')}" for name in sub.choices]
    for name, p in sub.choices.items():
        p.prog = f"specscope {name}"
        out += ["", f"## {name}", "", "```text", p.format_help().rstrip(), "```"]
    return "\n".join(out) + "\n"


def metrics_page() -> str:
    from specscope.collector.service import LABELS
    from specscope.exporters.prometheus import METRICS
    from specscope.probe.exporter import SERIES

    out = ["# Metrics", "", "What `specscope serve`, `record --metrics-port`, `replay "
           "--metrics-port` and `scrape --metrics-port` export (generated from "
           "`specscope.exporters.prometheus.METRICS`). Every series carries the configuration "
           f"labels ({', '.join(f'`{x}`' for x in LABELS)}); the label column names the one "
           "more a metric has.", "", "| name | type | label | help |", "| --- | --- | --- | --- |"]
    out += [f"| `{name}` | {m.kind} | {f'`{m.label}`' if m.label else ''} | {_cell(m.help)} |"
            for name, m in METRICS.items()]
    out += ["", "## specscope probe", "", "What `specscope probe --every S --metrics-port P` "
            "exports (generated from `specscope.probe.exporter.SERIES`); every series carries "
            "`target`, the per-check ones `check`.", "", "| name | type | help |",
            "| --- | --- | --- |"]
    out += [f"| `{name}` | {kind} | {_cell(help_text)} |" for name, (kind, help_text) in SERIES.items()]
    return "\n".join(out) + "\n"


def formats_page() -> str:
    from specscope.importers import FORMATS

    out = ["# Import formats", "", "What `specscope import` reads (generated from "
           "`specscope.importers.FORMATS`). The format is detected from the content; `--format` "
           "forces one. A figure a format cannot know stays null in the trace, never 0.", "",
           "| format | reads | gives | cannot know |", "| --- | --- | --- | --- |"]
    out += [f"| `{name}` | {_cell(r)} | {_cell(g)} | {_cell(c)} |"
            for name, (r, g, c) in FORMATS.items()]
    return "\n".join(out) + "\n"


def otlp_page() -> str:
    from specscope.io.otlp import ATTRIBUTES

    out = ["# OpenTelemetry attributes", "", "The attributes of each `specscope.request` span "
           "(generated from `specscope.io.otlp.ATTRIBUTES`). An unknown figure is left out, "
           "never sent as 0.", "", "| attribute | unit | meaning |", "| --- | --- | --- |"]
    out += [f"| `{key}` | {unit or '—'} | {_cell(meaning)} |"
            for key, (unit, meaning) in ATTRIBUTES.items()]
    return "\n".join(out) + "\n"


def floors_page() -> str:
    from specscope.layers import FLOORS

    by_floor: dict[int, list[str]] = {}
    for part, floor in FLOORS.items():
        by_floor.setdefault(floor, []).append(part)
    out = ["# Floors", "", "Which part of the package sits on which floor (generated from "
           "`specscope.layers.FLOORS`): a module imports only from its own part or a lower "
           "floor, and a test reads every import to hold the code to it.", "",
           "| floor | parts |", "| --- | --- |"]
    out += [f"| {floor} | {', '.join(f'`{p}`' for p in parts)} |" for floor, parts in sorted(by_floor.items())]
    return "\n".join(out) + "\n"


PAGES = {"cli.md": cli_page, "metrics.md": metrics_page, "import-formats.md": formats_page,
         "otlp.md": otlp_page, "floors.md": floors_page}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, make in PAGES.items():
        (OUT / name).write_text(make(), encoding="utf-8")
    print(f"wrote {len(PAGES)} reference pages into {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
