"""Traced `while` loops run several guarded iterations a trip (`control.guarded`).

The GPU's default (four a trip) is forced here on the CPU with
`policy.set_while_steps`; gradients are checked against `jax.grad` of the same
loop written as `lax.fori_loop`/`lax.while_loop` (float64), at every trip
count around a trip's steps and around a buffer's end (where a stepped loop
pushing on its stack writes a spare slot).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.control import guarded, policy
from k_transform.runtime import bounds

pytestmark = pytest.mark.usefixtures("x64")


@pytest.fixture
def stepped(monkeypatch):
    """Three iterations a trip (not a divisor of most trip counts below), and
    a record of which loops were stepped."""
    old = policy.set_while_steps(3)
    seen = []
    loop_body = guarded.loop_body

    def spy(test, body, carry, pushed=None, popped=None):
        out = loop_body(test, body, carry, pushed, popped)
        seen.append((pushed, popped, out is not body))
        return out

    monkeypatch.setattr(guarded, "loop_body", spy)
    yield seen
    policy.set_while_steps(old)


def decay(x, stop):
    y = x
    t = stop * 0.0
    while t < stop:
        y = y + 0.1 * jnp.sin(y) * x
        t = t + 1.0
    return jnp.sum(y * y)


def decay_fori(x, n):
    y = jax.lax.fori_loop(0, n, lambda i, y: y + 0.1 * jnp.sin(y) * x, x)
    return jnp.sum(y * y)


def test_a_stepped_while_differentiates_at_every_trip_count(stepped):
    x = jnp.array([0.3, -0.7, 1.1])
    g = kt.jit(kt.grad(decay))
    for n in [0, 1, 2, 3, 4, 5, 6, 7, 10]:
        np.testing.assert_allclose(g(x, float(n)), jax.grad(decay_fori)(x, n), rtol=1e-12)
    assert (2, None, True) in stepped  # the recording loop
    assert any(popped is not None and done for _, popped, done in stepped)  # its reverse


def test_a_stepped_while_fills_its_buffer_and_grows_it():
    """Around the first buffer's end: a stepped loop that fills its bound
    writes the spare slot in its dropped steps, and one past it retraces."""
    old = policy.set_while_steps(3)  # the buffer's 64 slots fill mid-trip
    try:
        x = jnp.array([0.2, 0.5])
        g = kt.jit(kt.grad(decay))
        first = bounds.FIRST_BUFFER
        for n in [first - 1, first, first + 1, first + 3, 2 * first + 1]:
            np.testing.assert_allclose(g(x, float(n)), jax.grad(decay_fori)(x, n), rtol=1e-11)
    finally:
        policy.set_while_steps(old)


def newton_sqrt(a):
    """Newton's iteration for sqrt(a) to a tolerance: a data-dependent count."""
    y = a
    while jnp.abs(y * y - a) > 1e-10:
        y = 0.5 * (y + a / y)
    return y


def test_a_stepped_while_whose_test_reads_the_carry(stepped):
    """The loop stops on its carry, mid-trip: the dropped steps must not move it."""
    for a in [2.0, 9.0, 0.25]:
        got = kt.jit(kt.grad(newton_sqrt))(a)
        np.testing.assert_allclose(got, 0.5 / np.sqrt(a), rtol=1e-8)  # d sqrt(a)/da
    assert any(done for _, _, done in stepped)


def counted(x, stop):
    y, t, k = x, stop * 0.0, 0
    while t < stop:
        y = jnp.cos(y) * x
        t = t + 1.0
        k = k + 1
    return jnp.sum(y) + 0.0 * k


def counted_ref(x, n):
    return jnp.sum(jax.lax.fori_loop(0, n, lambda i, y: jnp.cos(y) * x, x))


def test_a_stepped_while_with_an_int_carry_and_second_order(stepped):
    x = jnp.array([0.4, 0.9])
    g = kt.jit(kt.grad(counted))
    for n in [1, 5, 8]:
        np.testing.assert_allclose(g(x, float(n)), jax.grad(counted_ref)(x, n), rtol=1e-12)
    hvp = kt.jit(kt.grad(lambda x, n: jnp.sum(kt.grad(counted)(x, n) ** 2)))
    want = jax.grad(lambda x: jnp.sum(jax.grad(counted_ref)(x, 4) ** 2))(x)
    np.testing.assert_allclose(hvp(x, 4.0), want, rtol=1e-10)


def test_a_loop_body_with_an_effect_runs_one_iteration_a_trip(stepped, capfd):
    """A body whose jaxpr has an effect (a `jax.debug.print`; user code with
    host calls is refused earlier, under a traced `while`) would run it in
    the dropped steps: it is not stepped, and prints once per iteration."""

    def test(c):
        return c[0] < 5

    def body(c):
        jax.debug.print("step {t}", t=c[0])
        return c[0] + 1, c[1] * 1.5

    def run(y):
        carry = (jnp.asarray(0), y)
        return jax.lax.while_loop(test, guarded.loop_body(test, body, carry), carry)

    t, y = jax.jit(run)(jnp.ones(2))
    jax.effects_barrier()
    np.testing.assert_allclose(y, 1.5**5)
    assert capfd.readouterr().out.count("step ") == 5


def test_a_pure_loop_body_is_stepped(stepped):
    def test(c):
        return c[0] < 7

    def body(c):
        return c[0] + 1, c[1] * 1.5

    carry = (jnp.asarray(0), jnp.ones(2))
    assert guarded.loop_body(test, body, carry) is not body
    t, y = jax.jit(lambda c: jax.lax.while_loop(test, guarded.loop_body(test, body, c), c))(carry)
    assert int(t) == 7
    np.testing.assert_allclose(y, 1.5**7)


def test_steps_are_one_a_trip_on_a_cpu_by_default():
    old = policy.set_while_steps(None)
    try:
        assert policy.while_steps(0) == (4 if jax.default_backend() == "gpu" else 1)
        assert policy.while_steps(policy.GUARDED_BYTES + 1) == 1
    finally:
        policy.set_while_steps(old)


def ranged(x, n):
    y = x
    for i in range(n):
        y = jnp.sin(y) * x + i
    return jnp.sum(y)


def ranged_ref(x, n):
    return jnp.sum(jax.lax.fori_loop(0, n, lambda i, y: jnp.sin(y) * x + i, x))


def broken(x, n):
    y = x
    for i in range(n):
        y = jnp.sin(y) * x + 0.5 * i
        if jnp.sum(y) > 5.0:
            break
    return jnp.sum(y)


def test_a_stepped_for_over_a_traced_range_and_one_with_a_traced_break(stepped):
    x = jnp.array([0.3, 0.5])
    g = kt.jit(kt.grad(ranged))
    for n in [0, 1, 2, 4, 65]:
        np.testing.assert_allclose(g(x, jnp.asarray(n)), jax.grad(ranged_ref)(x, n), rtol=1e-11)
    assert (2, None, True) in stepped
    g = kt.jit(kt.grad(broken), static_argnums=1)
    for n in [3, 20]:  # the break is taken in the second case, mid-trip
        eps, e = 1e-6, np.eye(2)
        fd = [(broken(x + eps * e[i], n) - broken(x - eps * e[i], n)) / (2 * eps) for i in range(2)]
        np.testing.assert_allclose(g(x, n), fd, rtol=1e-6)


def test_a_loop_carrying_a_full_stack_at_third_order(stepped, scan_loops):
    """Third order: a loop whose carry holds a stack that another loop
    filled to its end, beside the one it pushes on (only that one has a
    spare slot; checking the full one against one slot less overflowed)."""

    def f(x):
        for k in range(16):  # a lax.scan under jit (`scan_loops`)
            x = jnp.sin(x) * 1.02 + 0.01 * k
        return jnp.sum(x * x)

    def third(grad, f, v):
        d2 = lambda x: jnp.sum(grad(f)(x) * v)  # noqa: E731
        return grad(lambda y: jnp.sum(grad(d2)(y) * v))

    x, v = jnp.array([0.3, -0.8]), jnp.array([1.0, -0.5])
    got = jax.jit(third(kt.grad, f, v))(x)
    np.testing.assert_allclose(got, third(jax.grad, f, v)(x), rtol=1e-10)


def decay_checkpointed(x, stop):  # `decay` at a line of its own: a bound of its own
    y = x
    t = stop * 0.0
    while t < stop:
        y = y + 0.1 * jnp.sin(y) * x
        t = t + 1.0
    return jnp.sum(y * y)


def test_a_checkpointed_while_steps_between_its_stores(stepped):
    """Under the user's jit the loop keeps at most a few checkpoints; between
    two stores its iterations run in an inner loop, stepped."""
    old = bounds.DEFAULT_LOOP_BOUND
    kt.set_loop_bound(8)
    try:
        g = jax.jit(kt.grad(decay_checkpointed))
        x = jnp.array([0.3, -0.7])
        for n in [2, 7, 30]:
            np.testing.assert_allclose(g(x, float(n)), jax.grad(decay_fori)(x, n), rtol=1e-11)
    finally:
        kt.set_loop_bound(old)
    assert (None, None, True) in stepped
