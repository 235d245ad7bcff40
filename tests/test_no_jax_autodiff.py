"""JAX is our array library and compiler, never our differentiator.

Fails if any module under k_transform/ refers to JAX's own autodiff: a call
or a reference to `jax.grad`, `jax.vjp`, `jax.jvp`, `jax.linearize`,
`jax.linear_transpose`, `jax.custom_vjp`, `jax.custom_jvp`,
`jax.closure_convert` (also `value_and_grad`, `jacfwd`, `jacrev`, `hessian`),
however it is imported or aliased.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "k_transform"
FORBIDDEN = {
    "grad",
    "vjp",
    "jvp",
    "linearize",
    "linear_transpose",
    "custom_vjp",
    "custom_jvp",
    "closure_convert",
    "value_and_grad",
    "jacfwd",
    "jacrev",
    "hessian",
}
SOURCES = sorted(PACKAGE.rglob("*.py"))


def _jax_aliases(tree) -> set[str]:
    names = {"jax"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name for a in node.names if a.name == "jax"}
    return names


def forbidden_uses(source: str) -> list[str]:
    tree = ast.parse(source)
    jax_names = _jax_aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "jax":
            found += [
                f"from {node.module} import {a.name}" for a in node.names if a.name in FORBIDDEN
            ]
        if (
            isinstance(node, ast.Attribute)
            and node.attr in FORBIDDEN
            and isinstance(node.value, ast.Name)
            and node.value.id in jax_names
        ):
            found.append(f"{node.value.id}.{node.attr} (line {node.lineno})")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_does_not_use_jax_autodiff(path):
    assert not forbidden_uses(path.read_text()), path


def test_the_check_catches_each_spelling():
    assert forbidden_uses("import jax\njax.grad(f)")
    assert forbidden_uses("import jax as J\ny = J.vjp(f, x)")
    assert forbidden_uses("from jax import custom_vjp")
    assert forbidden_uses("from jax import jvp as forward")
    assert not forbidden_uses("import jax\njax.jit(f)\njax.lax.cond(c, a, b)")
