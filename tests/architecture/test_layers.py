"""The floors of specscope.layers hold in the code: every import, at module level or inside a
function, goes to the module's own part or a lower floor, and no two modules import each
other through any chain."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specscope import layers

ROOT = Path(__file__).resolve().parents[2] / "specscope"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every specscope import in the file, lazy ones included."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "specscope"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "specscope":
                continue
            if node.module is None or target in _PACKAGES:  # `from . import x`: x may be a module
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    out.append((node.lineno, sub if sub in _ALL else target))
            else:
                out.append((node.lineno, target))
    return out


_FILES = sorted(ROOT.rglob("*.py"))
_ALL = {_module_name(p) for p in _FILES}
_PACKAGES = {_module_name(p) for p in _FILES if p.name == "__init__.py"}


def test_every_part_has_a_floor():
    parts = {layers.part_of(m) for m in _ALL}
    assert parts <= set(layers.FLOORS), f"parts without a floor: {parts - set(layers.FLOORS)}"


def test_no_import_crosses_a_floor_upwards():
    bad = []
    for path in _FILES:
        me = _module_name(path)
        for line, target in _imports(path):
            if not layers.allowed(me, target):
                bad.append(f"{path.relative_to(ROOT.parent)}:{line}: {me} "
                           f"(floor {layers.FLOORS[layers.part_of(me)]}) imports {target} "
                           f"(floor {layers.FLOORS[layers.part_of(target)]})")
    assert not bad, "imports that cross the layers:\n" + "\n".join(bad)


def test_hooks_import_only_schema_exact_sampling_io_and_themselves():
    for path in (ROOT / "hooks").rglob("*.py"):
        for line, target in _imports(path):
            assert layers.part_of(target) in ("schema", "exact", "pit", "sharp", "sampling", "io",
                                              "hooks"), \
                f"{path}:{line}: {target}"


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in _ALL}
    for path in _FILES:
        me = _module_name(path)
        for _, target in _imports(path):
            while target not in _ALL and "." in target:  # `specscope.x.y.attr` -> its module
                target = target.rsplit(".", 1)[0]
            if target != me and target in _ALL:
                graph[me].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    # a package's __init__ re-exporting its own modules is not a cycle between concepts
    graph = {m: {t for t in deps if not (m in _PACKAGES and t.startswith(m + "."))}
             for m, deps in _graph().items()}
    assert _cycles(graph) == []


def test_the_checker_catches_an_upward_import(tmp_path):
    assert not layers.allowed("specscope.hooks.recorder", "specscope.collector.service")
    assert not layers.allowed("specscope.io.trace", "specscope.exporters.replay")
    assert not layers.allowed("specscope.serving.sweep", "specscope.dashboard.data")
    assert layers.allowed("specscope.collector.service", "specscope.io.columns")
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    with pytest.raises(ValueError):
        layers.part_of("numpy")
