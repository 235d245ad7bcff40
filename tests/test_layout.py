"""The package layout: imports run one way, down the layers, with no cycles.

Every `import` statement counts, including ones inside functions (an import
moved into a function to dodge a cycle is still a cycle). The layers, bottom
first, are the table in docs/architecture.md; a unit may import its own
modules and any unit of a lower layer, never one of its own layer or above.
"""

from __future__ import annotations

import ast
import graphlib
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "k_transform"

# Bottom first; units of one row do not import each other.
LAYERS = [
    ["errors"],
    ["runtime"],
    ["ir"],
    ["bprop_registry", "codegen", "cell", "common"],
    ["ops", "dataset"],
    ["control"],
    ["frontend"],
    ["dfunctor"],
    ["transforms"],
    ["api"],
    ["lowering"],
    ["grad"],
    ["nn"],
    ["train"],
    ["__init__"],  # the public API, `import k_transform as kt`
    ["__main__"],  # programs written against the public API
    ["demo"],
]
RANK = {unit: k for k, row in enumerate(LAYERS) for unit in row}


def module_name(path: pathlib.Path) -> str:
    parts = ("k_transform", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts).removesuffix(".__init__")


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(name: str, path: pathlib.Path) -> set[str]:
    """The k_transform modules `name` imports (a `from pkg import mod` names the module)."""
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("k_transform")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            if not base.startswith("k_transform"):
                continue
            subs = {f"{base}.{a.name}" for a in node.names} & MODULES.keys()
            found |= subs or {base}
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imported(name, path) for name, path in MODULES.items()}


def unit(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_unit_has_a_layer():
    assert {unit(m) for m in MODULES} <= RANK.keys()


def test_no_import_cycle_between_modules():
    graphlib.TopologicalSorter(GRAPH).prepare()  # raises CycleError naming the cycle


def test_no_import_cycle_between_packages():
    units: dict[str, set[str]] = {}
    for name, deps in GRAPH.items():
        units.setdefault(unit(name), set()).update(unit(d) for d in deps if unit(d) != unit(name))
    graphlib.TopologicalSorter(units).prepare()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_run_down_the_layers(name):
    upward = [d for d in GRAPH[name] if unit(d) != unit(name) and RANK[unit(d)] >= RANK[unit(name)]]
    assert not upward, f"{name} imports {upward}, which are not below it (see LAYERS)"


def test_a_cycle_is_found():
    """The check itself: a made-up cycle is reported."""
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter({"a": {"b"}, "b": {"a"}}).prepare()
