"""The package layout: imports run one way, down the layers, with no cycles.

Every `import` statement counts, including ones inside functions (an import
moved into a function to dodge a cycle is still a cycle). The layers, bottom
first, are the table in docs/architecture.md; a unit may import its own
modules and any unit of a lower layer, never one of its own layer or above.

Three more rules keep the layers honest:
- the DFunctor is a graph-to-graph step: `dfunctor` imports neither
  `frontend` nor `codegen` (`FORBIDDEN`), though codegen is below it;
- a lower layer reaches a higher one only through the `__kt_*__` attributes
  listed in `k_transform/protocol.py`, set only by the modules listed there;
- no module keeps transform state in a global: a module-level dict, set,
  list or weak table is a constant table (an UPPER_CASE name) or listed in
  `MODULE_STATE` with its reason; caches are tables of `context.TRANSFORM`.
"""

from __future__ import annotations

import ast
import graphlib
import pathlib
import re
import subprocess
import sys

import pytest

from k_transform.protocol import CALLBACKS

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "k_transform"

# Bottom first; units of one row do not import each other.
LAYERS = [
    ["errors", "context", "protocol"],
    ["runtime"],
    ["ir"],
    ["bprop_registry", "codegen", "common"],
    ["ops", "dataset"],
    ["control", "eager"],  # eager: a Cell's construct run as Python with the Tensor methods
    ["cell"],  # Cell, Parameter: `net(x)` runs construct through `eager`
    ["frontend", "dfunctor"],  # the parser and the DFunctor do not know each other
    ["traced"],  # K at trace time: joins them (and codegen), installs the DFunctor's services
    ["transforms"],
    ["api"],
    ["lowering"],
    ["compiled"],  # CompiledGraph: a transform graph compiled and run; set_mode
    ["reverse", "forward_api", "jit_api"],  # one module per public family
    ["jacobians", "ode"],  # jacrev/jacfwd over reverse and forward; hessian, hvp; odeint
    ["nn"],
    ["train"],
    ["__init__", "mindspore"],  # the public API, `import k_transform as kt`; MindSpore's names
    ["__main__"],  # programs written against the public API
    ["demo"],
]
RANK = {unit: k for k, row in enumerate(LAYERS) for unit in row}

# Imports a unit may not make although the layers allow them.
FORBIDDEN = {"dfunctor": {"frontend", "codegen"}}


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


@pytest.mark.parametrize("name", sorted(m for m in MODULES if unit(m) in FORBIDDEN))
def test_forbidden_imports(name):
    bad = sorted(d for d in GRAPH[name] if unit(d) in FORBIDDEN[unit(name)])
    assert not bad, f"{name} imports {bad} (see FORBIDDEN)"


# -- callbacks up the layers: the `__kt_*__` protocol --------------------------------
PROTOCOL_NAME = re.compile(r"^__kt_\w+__$")


def _protocol_uses(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(attributes set, attributes read) of the `__kt_*__` protocol in a module."""
    sets: set[str] = set()
    reads: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sets |= {node.name} if PROTOCOL_NAME.match(node.name) else set()
        elif isinstance(node, ast.Name) and PROTOCOL_NAME.match(node.id):
            (sets if isinstance(node.ctx, ast.Store) else reads).add(node.id)
        elif isinstance(node, ast.Attribute) and PROTOCOL_NAME.match(node.attr):
            (sets if isinstance(node.ctx, ast.Store) else reads).add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if PROTOCOL_NAME.match(node.value):  # getattr(x, "__kt_lower__", None)
                reads.add(node.value)
    return sets, reads


USES = {name: _protocol_uses(ast.parse(path.read_text())) for name, path in MODULES.items()}


def test_callbacks_up_the_layers_are_the_protocol():
    """An attribute set in one unit and read in a lower unit (or one of its
    row) is a callback up the layers: it must be in `protocol.CALLBACKS`,
    set there by a listed module."""
    undeclared = []
    for setter, (sets, _) in USES.items():
        for reader, (_, reads) in USES.items():
            if reader == "k_transform.protocol":  # the table itself
                continue
            for attr in sets & reads:
                upward = unit(reader) != unit(setter) and RANK[unit(reader)] <= RANK[unit(setter)]
                if upward and setter not in CALLBACKS.get(attr, ("", ()))[1]:
                    undeclared.append(f"{reader} reads {attr}, set by {setter}")
    assert not undeclared, "callbacks not in k_transform/protocol.py: " + "; ".join(undeclared)


@pytest.mark.parametrize("attr", sorted(CALLBACKS))
def test_each_callback_is_set_only_where_listed(attr):
    setters = {name for name, (sets, _) in USES.items() if attr in sets}
    assert setters == set(CALLBACKS[attr][1]), f"{attr} is set by {sorted(setters)}"


# -- transform state: no module-level caches --------------------------------------------
# A module-level dict, set, list or weak table is state unless it is a constant
# table (a registry of rules, a mapping: an UPPER_CASE name, or `__all__`).
# These are the exceptions, with the reason each is not transform state.
MODULE_STATE = {
    "k_transform.runtime.bounds._bounds": "run-time setting: `kt.set_loop_bound` per loop",
    "k_transform.runtime.bounds._settings": "run-time count of `kt.set_loop_bound` calls",
    "k_transform.runtime.bounds._for_checkpoints": "run-time setting: `kt.set_for_checkpoints`",
    "k_transform.runtime.bounds._retrace": "run-time switch while a gradient function traces",
    "k_transform.runtime.bounds._track": "run-time switch: `tracking_recompute()`",
    "k_transform.runtime.bounds._bounded": "run-time switch: `bounded_loops()`",
    "k_transform.runtime.bounds.recompute_stats": "run-time report of checkpointed loops",
    "k_transform.runtime.state._param_scopes": "run-time stack of Parameter bindings",
    "k_transform.compiled._mode": "user setting: `kt.set_mode`",
    "k_transform.frontend.python_code._strict": "user setting: `kt.set_strict`",
    "k_transform.runtime.bounds._checks_traced": "trace-time count of loop-bound checks",
    "k_transform.runtime.state._refusing_reads": "run-time stack: Python code being traced",
    "k_transform.ops.python._method_caller": "a function per method name (functools.cache)",
    "k_transform.runtime.host_log._frames": "run-time stack of host-call logs recorded or replayed",
    "k_transform.compiled._array_type": "a constant: the concrete array type, found at first use",
    "k_transform.compiled._classic_emitters": "a constant: an XLA option if XLA has it",
}
CONTAINERS = {"dict", "set", "list", "WeakKeyDictionary", "WeakValueDictionary", "WeakSet"}
CONTAINERS |= {"defaultdict", "OrderedDict", "Counter", "deque", "cache", "weak_keys"}
CONTAINERS |= {"weak_values"}  # a table of `context.TRANSFORM` kept in a global
MEMOIZERS = {"cache", "lru_cache"}
LITERALS = (ast.Dict, ast.Set, ast.List, ast.DictComp, ast.SetComp, ast.ListComp)


def _called(node: ast.AST) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return getattr(target, "attr", getattr(target, "id", ""))


def module_state(path: pathlib.Path) -> list[str]:
    """Module-level names bound to a mutable container, and memoized functions."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_called(d) in MEMOIZERS for d in node.decorator_list):
                found.append(node.name)
            continue
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if isinstance(value, LITERALS) or (
            isinstance(value, ast.Call) and _called(value) in CONTAINERS
        ):
            found += [t.id for t in targets if isinstance(t, ast.Name)]
    return found


def _is_constant_name(name: str) -> bool:
    return name == "__all__" or name.lstrip("_").isupper()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_transform_state_in_module_globals(name):
    state = [
        n
        for n in module_state(MODULES[name])
        if not _is_constant_name(n) and f"{name}.{n}" not in MODULE_STATE
    ]
    assert not state, (
        f"{name} keeps {state} at module level: ask `context.TRANSFORM` for a cache, "
        "or list a setting in MODULE_STATE with its reason"
    )


def test_module_state_entries_exist():
    listed = {entry.rsplit(".", 1)[0] for entry in MODULE_STATE}
    for module in listed:
        names = module_state(MODULES[module])
        stale = [e for e in MODULE_STATE if e.rsplit(".", 1)[0] == module]
        stale = [e for e in stale if e.rsplit(".", 1)[1] not in names]
        assert not stale, f"MODULE_STATE lists {stale}, which are not module state"


def test_the_state_check_finds_a_cache(tmp_path):
    """The check itself: a module-level cache and a memoized function are found."""
    path = tmp_path / "m.py"
    path.write_text(
        "import functools\n_cache: dict = {}\nTABLE = {}\n"
        "@functools.cache\ndef f(n):\n    return n\n"
    )
    assert module_state(path) == ["_cache", "TABLE", "f"]


def test_clear_caches_forgets_and_transforms_again(tmp_path):
    """`kt.clear_caches()` empties the caches of `context.TRANSFORM`, and a
    function transformed again gives the same gradient (in a fresh process:
    this session's graphs keep their labels)."""
    program = """
import jax.numpy as jnp
import k_transform as kt
from k_transform.context import TRANSFORM

def f(x):
    s = 0.0
    for k in range(3):
        s = s + jnp.sin(x) * k
    return s

first = float(kt.grad(f)(0.5))
assert TRANSFORM.cache("parser.graphs") and TRANSFORM.cache("dfunctor.functors")
kt.clear_caches()
assert not TRANSFORM.cache("parser.graphs") and not TRANSFORM.cache("dfunctor.functors")
assert float(kt.grad(f)(0.5)) == first, first
"""
    script = tmp_path / "clear_caches.py"
    script.write_text(program)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=PACKAGE.parent
    )
    assert done.returncode == 0, done.stderr[-2000:]
