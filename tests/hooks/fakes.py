"""Fake engine modules for the adapter tests: modules put in ``sys.modules`` under their dotted
names, with every parent package made and linked, undone by ``monkeypatch`` afterwards."""

from __future__ import annotations

import sys
import types


def install_modules(monkeypatch, modules: dict[str, types.ModuleType]) -> None:
    """Make ``import a.b.c`` find each given module (parents made as empty packages)."""
    for dotted, module in modules.items():
        parts = dotted.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent not in modules and not isinstance(sys.modules.get(parent), _Fake):
                monkeypatch.setitem(sys.modules, parent, _Fake(parent))
        monkeypatch.setitem(sys.modules, dotted, module)
    for dotted, module in modules.items():
        parent, _, name = dotted.rpartition(".")
        if parent:
            setattr(sys.modules[parent], name, module)


class _Fake(types.ModuleType):
    """An empty parent package made by install_modules."""
