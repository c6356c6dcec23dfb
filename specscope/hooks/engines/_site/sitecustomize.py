"""Loaded by every Python process that `specscope wrap` starts: installs the engine adapters."""

import os

if os.environ.get("SPECSCOPE_WRAP") == "1":
    try:
        from specscope.hooks.engines import install

        install()
    except Exception as exc:  # never stop the engine from starting
        import sys

        print(f"specscope: adapters not installed: {exc}", file=sys.stderr)
