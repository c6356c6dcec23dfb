"""The ``specscope`` command line: the parser and ``main``. Each command is a thin shell over a
library call; each module here registers its own with ``register(sub)``.

Imports its subsystems lazily; a missing optional extra prints a one-line hint and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from . import analysis, collect, dashboard, probe, scrape, serving, traces
from .examples import add_examples

EXTRA_OF = {"torch": "engine", "transformers": "engine", "pyarrow": "parquet", "tqdm": "engine",
            "gguf": "engine", "zmq": "collector", "prometheus_client": "prometheus",
            "fastapi": "serve", "uvicorn": "serve", "httpx": "probe",
            "dash": "dashboard", "plotly": "dashboard",
            "opentelemetry": "otlp", "google": "otlp", "grpc": "otlp"}

#: the modules whose commands `specscope --help` lists, in its order
COMMANDS = (collect, traces, serving, scrape, analysis, dashboard, probe)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specscope", description="Observability and profiling for "
                                "speculative decoding (EAGLE / MTP draft-then-verify).")
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    add_examples(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"specscope {args.command} needs {exc.name}: pip install 'specscope[{extra}]'",
              file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as exc:
        print(f"specscope {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head and the like
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
