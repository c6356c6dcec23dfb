"""The README and the documentation site keep up with the code: a short README whose first
screen answers "watch my running vLLM"; every import in their Python examples resolves; every
command is named on a hand-written page and every exported metric on the generated reference;
the importing guide lists every format; and `mkdocs build --strict` passes on the source tree
as it is (a broken link, a page missing from the nav or an API entry that does not resolve fails
it), writing its reference pages itself."""

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
# the hand-written pages (an older checkout's `make docs` wrote generated ones into docs/reference)
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


def _gen_pages():
    sys.path.insert(0, str(DOCS))
    try:
        import gen_pages
    finally:
        sys.path.remove(str(DOCS))
    return gen_pages


def test_generated_references_name_every_metric_command_and_attribute():
    gen = _gen_pages()
    from specscope.exporters.prometheus import METRICS
    from specscope.io.otlp import ATTRIBUTES
    from specscope.probe.exporter import SERIES

    metrics = gen.metrics_page()
    assert all(f"`{name}`" in metrics for name in [*METRICS, *SERIES])
    cli = gen.cli_page()
    assert all(f"## {c}\n" in cli for c in _commands()) and "examples:" in cli
    otlp = gen.otlp_page()
    for key, (unit, _meaning) in ATTRIBUTES.items():
        assert f"| `{key}` | {unit or '—'} |" in otlp, key


def test_the_architecture_page_gets_the_floors_table_in_place_of_its_mark():
    from specscope.layers import FLOORS

    gen = _gen_pages()
    page = gen.architecture_page((DOCS / "architecture.md").read_text(encoding="utf-8"))
    assert gen.FLOORS_MARK not in page and "| floor | parts |" in page
    assert all(f"`{part}`" in page for part in FLOORS)
    with pytest.raises(ValueError, match="floors"):
        gen.architecture_page("# Architecture\n")


def test_the_site_builds_strict_from_the_source_tree_alone(tmp_path):
    try:
        import mkdocs  # noqa: F401
        import material  # noqa: F401
        import mkdocs_gen_files  # noqa: F401
        import mkdocstrings_handlers.python  # noqa: F401
    except ImportError:
        if os.environ.get("CI") or os.environ.get("SPECSCOPE_REQUIRE_ENGINES"):
            pytest.fail("the docs extra is missing (make test installs it)")
        pytest.skip("the docs extra is missing: pip install 'specscope[docs]'")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", DISABLE_MKDOCS_2_WARNING="true")
    stale = (DOCS / "reference").exists()  # left by an older checkout's `make docs`
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                          str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    site = tmp_path / "site"
    assert (site / "reference" / "metrics" / "index.html").exists()
    assert stale or not (DOCS / "reference").exists(), "the build wrote into the source tree"
    assert "reference decoder tok/s" in (site / "benchmarks" / "index.html").read_text()
    architecture = (site / "architecture" / "index.html").read_text()
    assert "<th>floor</th>" in architecture and "<!-- floors -->" not in architecture
    api = (site / "api" / "index.html").read_text()
    for name in ["specscope.hooks.Recorder", "record_verify", "specscope.notebook.open",
                 "specscope.collector.service.Collector", "specscope.probe.probe",
                 "specscope.fleet.fleet_figures"]:
        assert name in api, name


def test_no_line_of_prose_starts_like_a_heading():
    """A wrapped line that starts with ``#12345`` renders as a heading on the site."""
    bad = [f"{p.name}:{i}" for p in [README, *GUIDES]
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if re.match(r"#+[^#\s]", line)]
    assert not bad, bad
