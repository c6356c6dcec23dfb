"""The README's code keeps up with the package: every import in its Python examples works."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_import_in_the_readme_examples_resolves():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    imports = [line for b in blocks for line in b.splitlines()
               if re.match(r"from specscope[\w.]* import ", line)]
    assert imports, "the README shows how to import the hooks"
    for line in imports:
        module, names = re.match(r"from (\S+) import (.+)", line).groups()
        mod = importlib.import_module(module)
        for name in (n.strip() for n in names.split("#")[0].split(",")):
            if not hasattr(mod, name):  # a submodule, as ``from specscope.hooks import hf``
                importlib.import_module(f"{module}.{name}")


def test_the_otlp_attribute_table_is_the_one_the_sink_sends():
    """README's OpenTelemetry table: one row per attribute the OTLP sink documents, its unit
    and meaning as the code says them."""
    from specscope.io.otlp import ATTRIBUTES

    rows = dict((m.group(1), (m.group(2), m.group(3))) for m in re.finditer(
        r"^\| `((?:gen_ai|specscope)\.[\w.]+)` \| ([^|]*) \| (.*) \|$", README.read_text(encoding="utf-8"), re.M))
    assert set(rows) == set(ATTRIBUTES)
    for key, (unit, meaning) in ATTRIBUTES.items():
        assert rows[key] == (unit or "—", meaning), key
