"""Host code and everyday Python objects in plain `kt.jit` and gradients (session 30).

- `kt.jit(f)` (no gradient) of a function whose `lax.scan` / `fori_loop` /
  `jax.vmap` body is (or calls) Python that k_transform runs as Python (a
  global counter): JAX traces the body once, so its Python runs once per
  call of the construct. The plain program ran it per step (a function value
  called at run time was called as it was) or refused a call given the
  step's values; now a call of the user's Python known only at run time is
  host code (`runtime.host_log.called`), and in a body JAX traces once it is
  traced as JAX traces it (`host_log._traced_abstractly`). Oracle: `jax.jit`
  of the same code, its value and how often the Python ran.
- A property of a NamedTuple the function makes (`P(a, b).area`) is its
  getter's code, differentiated; of one it is given, a KTransformError at
  the user's line (it was a bare ValueError). Oracle: `jax.grad`, `jax.jvp`.
- A helper run as Python that returns an iterator given arrays: a
  KTransformError naming it (it was JAX's "not a valid JAX type").
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import k_transform as kt

X = jnp.array([0.3, -0.7, 1.1])
STEPS = 0


def close(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=2e-5, atol=1e-6)


def made(kind: str):
    """A new loss (JAX caches a body's trace by the function: a fresh one
    traces again) whose body counts its runs in STEPS, run as Python."""

    def counting_step(c, xi):
        global STEPS
        STEPS += 1
        return c + jnp.sin(xi) * STEPS, None

    if kind == "scan of it":
        return lambda x: lax.scan(counting_step, 0.0, x)[0]
    if kind == "scan of a lambda calling it":
        return lambda x: lax.scan(lambda c, xi: counting_step(c, xi), 0.0, x)[0]
    if kind == "fori_loop":
        return lambda x: lax.fori_loop(0, 3, lambda i, c: counting_step(c, x[i])[0], 0.0)
    return lambda x: jnp.sum(jax.vmap(lambda v: counting_step(v, v)[0])(x))


def counted(run, f):
    global STEPS
    STEPS = 0
    value = run(f)(X)
    return value, STEPS


@pytest.mark.parametrize("kind", ["scan of it", "scan of a lambda calling it", "fori_loop", "vmap"])
def test_plain_jit_runs_a_traced_once_body_once(kind):
    """Before: `scan of it` gave 1.68 with 3 runs (JAX: 0.54, 1 run); the
    others refused the call given the step's values."""
    want, want_steps = counted(jax.jit, made(kind))
    got, got_steps = counted(kt.jit, made(kind))
    assert got_steps == want_steps == 1
    close(got, want)


class Stepper:
    made = []

    def __init__(self):
        self.n = 0
        Stepper.made.append(self)

    def step(self, c, xi):
        self.n += 1
        return c * 0.5 + jnp.sin(xi) * self.n


def new_stepper():
    try:  # runs as Python: the object is known only when the program runs
        return Stepper()
    finally:
        pass


def stepped(x):
    s = new_stepper()
    return lax.scan(lambda c, xi: (s.step(c, xi), None), 0.0, x)[0]


def test_plain_jit_runs_a_method_in_a_traced_once_body_once():
    """Before: 2.10 with 3 runs of `step` (JAX: 0.64, 1 run)."""
    runs = []
    for jit in (jax.jit, kt.jit):
        Stepper.made.clear()
        runs.append((jit(stepped)(X), [s.n for s in Stepper.made]))
    close(runs[1][0], runs[0][0])
    assert runs[1][1] == runs[0][1] == [1]


# -- NamedTuple properties ---------------------------------------------------------------
class P(NamedTuple):
    a: jax.Array
    b: jax.Array

    @property
    def s(self):
        return self.a * self.b + jnp.sin(self.a)

    def scaled(self, k):
        return P(self.a * k, self.b)


def made_here(x):
    p = P(x, 2.0 * x)
    q = p._replace(b=jnp.cos(x))
    return jnp.sum(p.s) * len(p._fields) + jnp.sum(q.s)


def test_property_of_a_namedtuple_made_here():
    close(kt.value_and_grad(made_here)(X), jax.value_and_grad(made_here)(X))
    close(kt.jvp(made_here, (X,), (X * 0.5,)), jax.jvp(made_here, (X,), (X * 0.5,)))


def given(p):
    return jnp.sum(p.s)


def test_property_of_a_namedtuple_given_is_refused_at_its_line():
    with pytest.raises(kt.KTransformError, match="property of P") as e:
        kt.grad(given)(P(X, X))
    assert any("return jnp.sum(p.s)" in n for n in getattr(e.value, "__notes__", ()))


# -- a helper run as Python returning an iterator -----------------------------------------
def doubled(v):
    try:  # runs as Python
        items = [v, 2.0 * v]
    finally:
        pass
    return map(jnp.sin, items)


def summed(x):
    return jnp.sum(sum(doubled(x)))


def test_helper_returning_an_iterator_is_named():
    close(kt.jit(summed)(X), jax.jit(summed)(X))
    with pytest.raises(kt.KTransformError, match=r"doubled\(\.\.\.\): it returns an iterator"):
        kt.grad(summed)(X)


def unpacked(x):
    a, b = doubled(x)  # Python takes the map's items
    return jnp.sum(a * b)


def tripled(v):
    try:  # runs as Python
        items = [v, 2.0 * v, 3.0 * v]
    finally:
        pass
    return map(jnp.sin, items)


def too_many(x):
    a, b = tripled(x)
    return jnp.sum(a * b)


def dict_keys(x):
    d = {"u": x, "v": 3.0 * x}
    a, b = d  # its keys
    return jnp.sum(d[a] * d[b])


def test_unpacking_an_iterator_or_a_dict():
    """Before: TypeError 'map' object is not subscriptable; KeyError 0."""
    close(kt.jit(unpacked)(X), jax.jit(unpacked)(X))
    close(kt.value_and_grad(dict_keys)(X), jax.value_and_grad(dict_keys)(X))
    with pytest.raises(ValueError, match="too many values to unpack"):
        jax.jit(too_many)(X)
    with pytest.raises(ValueError, match="too many values to unpack"):
        kt.jit(too_many)(X)
