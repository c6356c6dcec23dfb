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
