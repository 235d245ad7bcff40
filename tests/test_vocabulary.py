"""One primitive vocabulary: every derivative written once, every reachable
lax primitive mapped to a primitive class of ours.

An imported jaxpr's equations become `ops` primitives
(`k_transform/ops/lax_map.py`): the `ops` twin where one exists (`sin` ->
`ops.Sin`, whose rule is the only derivative of sine), else the lax
primitive's own class (`k_transform/ops/lax.py`, rules in
`ops/lax_rules.py` and `ops/lax_shape_rules.py`), or `IndexArithmetic` (no
gradient) for results that are all integers or booleans.

- `test_no_derivative_twice`: a lax primitive with an `ops` twin has no rule
  of its own (except the `PARTIAL` twins, for the parameters the twin does
  not take), one class per lax name, and rules may not build a twinned lax
  primitive (`lax_op`).
- `test_reachable_lax_primitives_map_to_classes`: every lax primitive in the
  jaxprs of the API sweep's cases (`tests/test_api_sweep.py`: every public
  differentiable callable of `jax.numpy`, `jax.nn`, `jax.scipy.special`)
  with a float result maps to a twin with a rule or to a lax class with a
  rule of its own (a derivative, no gradient, or a refusal naming it).
- `test_refused_names_the_primitive`: those refusals are KTransformErrors
  naming the lax primitive.

Cost: a few seconds (tracing only, nothing compiled).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex_core

import k_transform as kt
from k_transform.errors import KTransformError
from k_transform.frontend.jaxpr import CONTROL, INLINED
from k_transform.frontend.parser import parse
from k_transform.ops import lax_rules
from k_transform.ops.lax import TWINNED, LaxPrimitive, jax_primitive, lax_class, lax_op
from k_transform.ops.lax_map import PARTIAL, TWINS
from tests import test_api_sweep as sweep

STRUCTURAL = {"dce_sink", *CONTROL, *INLINED}  # imported by the importer itself


def _own_rule(cls) -> bool:
    return cls in kt.bprop_getters.registered()


def _registered_lax_classes() -> list[type]:
    return [c for c in kt.bprop_getters.registered() if issubclass(c, LaxPrimitive) and c.lax_name]


def test_no_derivative_twice():
    lax_named = _registered_lax_classes()
    names = [c.lax_name for c in lax_named if c is lax_class(c.lax_name)]
    assert len(names) == len(set(names)), "two classes with rules for one lax primitive"
    twice = sorted(n for n in names if n in TWINS and n not in PARTIAL)
    assert not twice, f"lax primitives with an ops twin and a rule of their own: {twice}"
    assert TWINNED == set(TWINS) - set(PARTIAL)
    for name in sorted(TWINNED)[:5]:
        with pytest.raises(KTransformError, match="ops twin"):
            lax_op(name, [((2,), np.dtype(np.float32))])


def _twin_classes(name: str, avals) -> set[type]:
    """The primitive classes the twin of `name` applies, on a small equation."""
    from k_transform.ir.nodes import Apply, Constant, FuncGraph
    from k_transform.ops.lax_map import import_equation

    graph = FuncGraph("probe")
    args = [graph.add_parameter(f"a{k}") for k in range(len(avals))]
    eqn = examples()[name]
    outs = import_equation(
        graph, eqn.primitive, dict(eqn.params), avals, _avals(eqn.outvars), args, False
    )
    graph.output = outs[0]
    return {
        type(n.fn.value)
        for n in graph.nodes
        if isinstance(n, Apply) and isinstance(n.fn, Constant) and hasattr(n.fn.value, "impl")
    }


def _avals(variables) -> tuple:
    return tuple((tuple(v.aval.shape), np.dtype(v.aval.dtype)) for v in variables)


def _equations(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for body in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(body, jex_core.ClosedJaxpr):
                    body = body.jaxpr
                if isinstance(body, jex_core.Jaxpr):
                    yield from _equations(body)


def _reachable() -> dict:
    """lax name -> an equation of it with a float result, over the API sweep."""
    found = {}
    with jax.enable_x64(True):
        for name, (kind, fn) in sorted(sweep.CASES.items()):
            f = sweep.program(sweep._library(name) if fn is None else fn, len(sweep.INPUTS[kind]))
            try:
                closed = jax.make_jaxpr(f)(*sweep.INPUTS[kind])
            except Exception:  # noqa: BLE001 - the sweep reports cases JAX cannot trace
                continue
            for eqn in _equations(closed.jaxpr):
                floats = any(jnp.issubdtype(v.aval.dtype, jnp.inexact) for v in eqn.outvars)
                if floats and eqn.primitive.name not in STRUCTURAL:
                    found.setdefault(eqn.primitive.name, eqn)
    return found


@functools.cache
def examples() -> dict:
    return _reachable()


def test_reachable_lax_primitives_map_to_classes():
    assert len(examples()) > 40, "the sweep reached too few lax primitives"
    unmapped, no_rule = [], []
    for name, eqn in sorted(examples().items()):
        if name in TWINS:
            for cls in _twin_classes(name, _avals(eqn.invars)):
                if not kt.bprop_getters.has_rule(cls.__new__(cls)):
                    no_rule.append(f"{name} -> {cls.__name__}")
        elif not _own_rule(lax_class(name)):
            unmapped.append(name)
    assert not unmapped, f"lax primitives with no twin and no class rule: {unmapped}"
    assert not no_rule, f"twins with no rule: {no_rule}"


def test_twins_cover_the_common_primitives():
    """The unary math, arithmetic, reductions, matmul and shapes are twins."""
    common = "sin cos exp log tanh logistic add mul div reduce_sum dot_general transpose"
    assert set(common.split()) <= set(TWINS)
    assert not set(common.split()) & {c.lax_name for c in _registered_lax_classes()} - set(PARTIAL)


@pytest.mark.parametrize("name", ["scatter-mul", "fft", "select_and_gather_add", "approx_top_k"])
def test_refused_names_the_primitive(name):
    prim = lax_class(name)(jax_primitive(name), {}, (((3,), np.dtype(np.float32)),))
    with pytest.raises(KTransformError, match=f"the lax primitive `{name}`"):
        kt.bprop_getters.bprop_graph(prim, 1, parse)
    assert name in lax_rules.REFUSED
