"""The documentation site's reference pages, written from the code during every ``mkdocs build``
and ``mkdocs serve`` (mkdocs-gen-files runs this file), so that they cannot drift and never sit
in the source tree: the command line from the parsers' own ``--help``, the metrics from the
exporters' metric tables, the import formats from the importer registry, the OpenTelemetry
attributes from the OTLP sink's table, and the architecture's floors from ``specscope.layers``
(also filled into the architecture page in place of its ``<!-- floors -->`` line)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# the checkout being documented, ahead of any installed specscope (`mkdocs serve` runs from a
# console script, which puts no working directory on sys.path)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def commands() -> dict:
    """Each command's parser by name, in the order ``specscope --help`` lists them."""
    from specscope.cli import build_parser

    parser = build_parser()
    # argparse names its subcommands nowhere public but in the subparsers action's choices
    return next(dict(a.choices) for a in parser._actions if isinstance(a.choices, dict))


def cli_page(columns: int = 100) -> str:
    """Each ``--help`` at ``columns`` wide (argparse wraps to ``COLUMNS``), whatever terminal
    builds the site."""
    from specscope.cli import build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        top = build_parser().format_help()
        cmds = {name: p.format_help() for name, p in commands().items()}
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    out = ["# Command line", "", "Every command, as `specscope COMMAND --help` prints it "
           "(generated from the parsers).", "", "```text", top.rstrip(), "```", ""]
    out += [f"- [`{name}`](#{name})" for name in cmds]
    for name, text in cmds.items():
        out += ["", f"## {name}", "", "```text", text.rstrip(), "```"]
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

#: the line of docs/architecture.md that the floors table replaces on the site
FLOORS_MARK = "<!-- floors -->"


def architecture_page(text: str) -> str:
    """The architecture page with the floors table (its rows, without the heading and
    sentence ``floors_page`` starts with) in place of its ``FLOORS_MARK`` line."""
    table = floors_page().split("\n\n", 2)[2]
    if FLOORS_MARK not in text:
        raise ValueError(f"architecture.md has no {FLOORS_MARK} line for the floors table")
    return text.replace(FLOORS_MARK, table.rstrip())


def _write_pages() -> None:
    import mkdocs_gen_files

    for name, make in PAGES.items():
        with mkdocs_gen_files.open(f"reference/{name}", "w") as f:
            f.write(make())
    with mkdocs_gen_files.open("architecture.md", "r") as f:
        text = f.read()
    with mkdocs_gen_files.open("architecture.md", "w") as f:
        f.write(architecture_page(text))


if __name__ == "<run_path>":  # how mkdocs-gen-files runs this file, once per build
    _write_pages()
