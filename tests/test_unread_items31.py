"""A loop's carry, a scan's output or a list item no one reads sends no
cotangent (oracle: JAX on the same code, at the point and at a generic one;
a traced `while`, which JAX cannot reverse: its closed form).

A zero times an infinite slope (`sqrt` at 0) is NaN, where JAX, whose zeros
are symbolic, has numbers. Each case gave NaN for the gradient and the
second derivative before session 31:
- a Python `while` or `for` carrying a diagnostic the result never reads
  (`reads.loop_carries`: the body is K'd for the carries read, to a
  fixed point, so a carry the read ones depend on keeps its gradient);
- `lax.scan` whose ys hold an item no one reads (a stack is masked item by
  item; at second order the bprop of a loop reads only the final carries
  its reverse loop reads: `reads._closure_reads`);
- `lst.pop()`, and a comprehension's list of tuples read in part
  (`liveness`: `list_delete`, `a + b` of tuples of fixed lengths).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64_eager")


# -- loops carrying a diagnostic: `diag` feeds on `a`, `a` on `b`; only `a` is read ------
def while_diagnostic(x, d0):
    c = (x, x * 0.5, d0)
    i = 0
    while i < 3:
        a, b, diag = c
        c = (a * b + jnp.sin(a), b * 1.5, jnp.sqrt(diag) + a)
        i += 1
    return c[0]


def for_diagnostic(x, d0):
    a, b, diag = x, x * 0.5, d0
    for w in [1.0, 2.0, 3.0]:
        a, b, diag = a * b + jnp.sin(a) * w, b * 1.5, jnp.sqrt(diag) + a
    return a


def scan_body(c, d):
    return c * 1.5 + jnp.sin(c), (c * 2.0, jnp.sqrt(d * c - d * c))


def scan_unread_output(x, d0):
    c, (ys, _) = jax.lax.scan(scan_body, x, jnp.full(2, d0))
    return c + jnp.sum(ys)


def list_pop(x, d0):
    lst = [x * 2.0 + jnp.sin(x), jnp.sqrt(d0 * x)]
    lst.pop()
    return lst[0] * lst[0]


def pair(v, d0):
    return v * 2.0 + jnp.sin(v), jnp.sqrt(d0 * v)


def comprehension_of_tuples(x, d0):
    rs = [pair(v, d0) for v in [x, x * 2.0]]
    return rs[0][0] * rs[1][0]


CASES = [while_diagnostic, for_diagnostic, scan_unread_output, list_pop, comprehension_of_tuples]


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_an_unread_carry_output_or_item_sends_no_cotangent(f):
    # d0 = 0: `sqrt` at 0 in what no one reads (NaN before); 0.3: a generic point
    grad, second = kt.grad(f), kt.grad(kt.grad(f))
    for x, d0 in [(0.0, 0.0), (0.7, 0.3)]:
        want = jax.grad(f)(x, d0)
        want2 = jax.grad(jax.grad(f))(x, d0)
        assert np.isfinite(want) and np.isfinite(want2)
        np.testing.assert_allclose(grad(x, d0), want, rtol=1e-12)
        np.testing.assert_allclose(second(x, d0), want2, rtol=1e-12, atol=1e-12)


def traced_while_diagnostic(x):
    c = (x, x - x)
    while c[0] < 5.0:  # traced under jit: a `lax` loop, its carries stored in a buffer
        c = (c[0] * 2.0 + 1.0, jnp.sqrt(c[1]))
    return c[0]


def test_a_traced_while_with_an_unread_carry_has_the_closed_form_slope():
    # x = 0.5 takes 2 steps (4x + 3), x = 0.3 three (8x + 7); the unread carry is sqrt(0)
    grad, second = (
        jax.jit(kt.grad(traced_while_diagnostic)),
        jax.jit(kt.grad(kt.grad(traced_while_diagnostic))),
    )
    for x, slope in [(0.5, 4.0), (0.3, 8.0)]:
        assert grad(x) == slope
        assert second(x) == 0.0
