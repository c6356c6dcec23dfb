"""The README and the documentation site keep up with the code: a short README whose first
screen answers "watch my running vLLM"; every import in their Python examples resolves; every
command is named on a hand-written page and every exported metric on the generated reference;
the importing guide lists every format; and `mkdocs build --strict` passes (a broken link or a
page missing from the nav fails it)."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
GUIDES = [p for p in DOCS.rglob("*.md") if "reference" not in p.parts]


def test_the_readme_is_short_and_its_first_screen_watches_a_running_vllm():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    first = "\n".join(lines[:40])
    assert "make demo" in first and "make test" in first
    assert "specscope dashboard --live" in first and "SPECSCOPE_VLLM=1" in first


def test_every_import_in_the_python_examples_resolves():
    blocks = [b for p in [README, *GUIDES]
              for b in re.findall(r"```python\n(.*?)```", p.read_text(encoding="utf-8"), re.S)]
    imports = [line for b in blocks for line in b.splitlines()
               if re.match(r"from specscope[\w.]* import ", line)]
    assert imports, "the docs show how to import the hooks"
    for line in imports:
        module, names = re.match(r"from (\S+) import (.+)", line).groups()
        mod = importlib.import_module(module)
        for name in (n.strip() for n in names.split("#")[0].split(",")):
            if not hasattr(mod, name):  # a submodule, as ``from specscope.hooks import hf``
                importlib.import_module(f"{module}.{name}")


def _commands() -> list[str]:
    from specscope.cli import build_parser

    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    return list(sub.choices)


def test_every_command_is_named_on_a_guide_page():
    text = "\n".join(p.read_text(encoding="utf-8") for p in [README, *GUIDES])
    missing = [c for c in _commands() if f"specscope {c}" not in text]
    assert not missing, f"commands no guide page names: {missing}"


def test_the_importing_guide_lists_every_format():
    from specscope.importers import FORMATS

    guide = (DOCS / "importing.md").read_text(encoding="utf-8")
    missing = [f for f in FORMATS if f"`{f}`" not in guide]
    assert not missing, missing


def test_generated_references_name_every_metric_command_and_attribute(tmp_path):
    sys.path.insert(0, str(DOCS))
    try:
        import gen_ref
    finally:
        sys.path.remove(str(DOCS))
    from specscope.exporters.prometheus import METRICS
    from specscope.io.otlp import ATTRIBUTES
    from specscope.probe.exporter import SERIES

    metrics = gen_ref.metrics_page()
    assert all(f"`{name}`" in metrics for name in [*METRICS, *SERIES])
    cli = gen_ref.cli_page()
    assert all(f"## {c}\n" in cli for c in _commands()) and "examples:" in cli
    otlp = gen_ref.otlp_page()
    for key, (unit, _meaning) in ATTRIBUTES.items():
        assert f"| `{key}` | {unit or '—'} |" in otlp, key


def test_the_site_builds_strict(tmp_path):
    try:
        import mkdocs  # noqa: F401
        import material  # noqa: F401
    except ImportError:
        if os.environ.get("CI") or os.environ.get("SPECSCOPE_REQUIRE_ENGINES"):
            pytest.fail("mkdocs and mkdocs-material are missing: the docs extra (make test installs it)")
        pytest.skip("mkdocs-material missing: pip install 'specscope[docs]'")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    gen = subprocess.run([sys.executable, str(DOCS / "gen_ref.py")], cwd=ROOT, capture_output=True,
                         text=True, env=env)
    assert gen.returncode == 0, gen.stderr
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                          str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "metrics" / "index.html").exists()
    assert "reference decoder tok/s" in (tmp_path / "site" / "benchmarks" / "index.html").read_text()


def test_no_line_of_prose_starts_like_a_heading():
    """A wrapped line that starts with ``#12345`` renders as a heading on the site."""
    bad = [f"{p.name}:{i}" for p in [README, *GUIDES]
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if re.match(r"#+[^#\s]", line)]
    assert not bad, bad
