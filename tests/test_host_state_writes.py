"""Calls that change a host object (a global list, a class, a global
instance's attribute) must run when Python runs them, and later reads must
see the change (frontend/effects.py: `library_write`).

Before, each of these gave a silently wrong value: the parser read the host
object while it transformed (`len(H)`, `O.n`), the call ran after, or was
dropped (`operator.setitem`, whose result is unused). Now each is refused to
the parser, and the function runs as Python, at every call. Oracle: JAX on
the same Python, called as many times from the same state.
"""

from __future__ import annotations

import bisect
import heapq
import operator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([0.3, -0.2, 0.5])
HEAP, SORTED, LOG = [], [], {"hist": []}


class Layer:
    calls = []  # a class attribute, shared by every instance

    def __init__(self, w):
        self.w = w
        self.items = []

    def __call__(self, v):
        Layer.calls.append(1)
        self.items.extend([1, 2])
        return self.w * v * len(Layer.calls) + len(self.items)


class Counter:
    n = 0


LAYER = Layer(2.0)


def class_attribute_append(x):
    return jnp.sum(LAYER(x))


def global_dict_item_append(x):
    LOG["hist"].append(1)
    return jnp.sum(x) * len(LOG["hist"])


def heap_push(x):
    heapq.heappush(HEAP, 1.0)
    return jnp.sum(x) * len(HEAP)


def insort(x):
    bisect.insort(SORTED, 2.0)
    return jnp.sum(x**2) * len(SORTED)


def setattr_on_a_class(x):
    setattr(Counter, "n", Counter.n + 1)  # noqa: B010 - the builtin call is the case
    return jnp.sum(x) * Counter.n


def operator_setitem(x):
    d = {"a": 1.0}
    operator.setitem(d, "a", 4.0)  # the result is unused: it acts by writing
    return jnp.sum(x) * d["a"]


def operator_iadd(x):
    lst = [1.0]
    operator.iadd(lst, [2.0])
    return jnp.sum(x) * len(lst)


def reset():
    HEAP.clear()
    SORTED.clear()
    LOG["hist"].clear()
    Layer.calls.clear()
    LAYER.items.clear()
    Counter.n = 0


CASES = [
    class_attribute_append,
    global_dict_item_append,
    heap_push,
    insort,
    setattr_on_a_class,
    operator_setitem,
    operator_iadd,
]


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_each_call_sees_the_change_as_python_does(fn, mode):
    kt.set_mode(mode)
    reset()
    try:
        ours = [kt.value_and_grad(fn)(X) for _ in range(3)]
    finally:
        kt.set_mode("graph")
    reset()
    theirs = [jax.value_and_grad(fn)(X) for _ in range(3)]
    for (value, grad), (ref_value, ref_grad) in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(value, ref_value, rtol=1e-6)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-6)
    reset()
