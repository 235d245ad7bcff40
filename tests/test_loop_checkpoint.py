"""Reverse mode for loops in fixed memory (issue 15, item 1).

A traced `while` under a user's own `jax.jit` cannot be retraced with a
larger buffer, so its gradient keeps at most `loop_bound` checkpoints and
recomputes the rest (`k_transform/control/checkpoint.py`); a `for` over a
long range does the same when `kt.set_for_checkpoints(k)` asks for it.
Oracles: the same loop written with a static trip count and differentiated
by JAX (storing every carry), a Python loop run eagerly, or a closed form.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.control import checkpoint
from k_transform.runtime import bounds


# -- the schedule itself, with a closed-form derivative ------------------------------
@pytest.mark.parametrize(("trips", "slots"), [(0, 4), (1, 4), (5, 4), (37, 4), (100, 8), (999, 16)])
def test_schedule_gives_every_carry_to_the_reverse_sweep_once(trips, slots):
    """x <- sin(x) `trips` times: d x_n / d x_0 = prod cos(x_i); every
    iteration's gradient step sees its own carry, in reverse order."""

    def step(i, c):
        return jnp.sin(c)

    def run(x0):
        n, final, saved = checkpoint.record(step, lambda i, c: i < trips, x0, slots)

        def grad_step(i, c, d):
            return d * jnp.cos(c), jnp.zeros(trips + 1, jnp.int32).at[i].set(1) * (i + 1)

        return final, checkpoint.reverse(
            step,
            grad_step,
            n,
            saved,
            jnp.ones_like(x0),
            jnp.zeros(trips + 1, jnp.int32),
            lambda a, b: a + b,
        )

    x0 = jnp.asarray([0.3, -0.7])
    final, (d, seen, recomputed) = jax.jit(run)(x0)
    xs = [np.asarray(x0, np.float64)]
    for _ in range(trips):
        xs.append(np.sin(xs[-1]))
    np.testing.assert_allclose(final, xs[-1], rtol=1e-5)
    np.testing.assert_allclose(d, np.prod([np.cos(x) for x in xs[:-1]], axis=0), rtol=1e-4)
    np.testing.assert_array_equal(seen[:trips], np.arange(1, trips + 1))  # each i once
    assert (int(recomputed) == 0) == (trips <= slots)
    if trips > slots:  # O(log) recomputation: at most log2(trips) per iteration
        assert int(recomputed) <= trips * np.log2(trips)


# -- a traced while under the user's jax.jit -------------------------------------------
def damped(x, n):
    k = 0
    while k < n:
        x = jnp.sin(x) * 1.0001 + 0.001 * x
        k = k + 1
    return jnp.sum(x)


def damped_static(x, n: int):
    body = lambda k, x: jnp.sin(x) * 1.0001 + 0.001 * x  # noqa: E731
    return jnp.sum(jax.lax.fori_loop(0, n, body, x))


GRAD_UNDER_USER_JIT = jax.jit(kt.grad(damped))


@pytest.mark.parametrize("trips", [10, 5000, 1_000_000])
def test_user_jit_of_grad_of_a_long_while(trips):
    """More trips than the 1,024 stored carries: no LoopBoundExceeded, JAX's
    gradient (of the same loop with a static count, storing everything)."""
    x = jnp.asarray([0.3, -0.7, 1.1], jnp.float32)
    with bounds.tracking_recompute():
        got = GRAD_UNDER_USER_JIT(x, jnp.asarray(trips))
    want = jax.jit(jax.grad(damped_static), static_argnums=1)(x, trips)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)
    line = damped.__code__.co_firstlineno + 2  # the `while`
    where = next(w for w in bounds.recompute_stats if w.endswith(f":{line}"))
    n, recomputed = bounds.recompute_stats[where]
    assert n == trips
    assert (recomputed == 0) == (trips <= bounds.checkpoint_slots(where, x.nbytes))
    assert recomputed <= trips * np.log2(trips)


def grows_until(x):
    while jnp.sum(x * x) < 1e6:
        x = x * 1.002 + 0.01
    return jnp.sum(x)


def test_data_dependent_while_under_user_jit_matches_an_eager_python_loop():
    x = jnp.asarray([0.5, 1.5], jnp.float32)
    trips = 0
    y = np.asarray(x)
    while np.sum(y * y) < 1e6:
        y, trips = y * np.float32(1.002) + np.float32(0.01), trips + 1
    assert trips > 2000  # longer than the buffer

    def unrolled(x):
        for _ in range(trips):
            x = x * 1.002 + 0.01
        return jnp.sum(x)

    got = jax.jit(kt.grad(grows_until))(x)
    np.testing.assert_allclose(got, jax.grad(unrolled)(x), rtol=1e-4)
    np.testing.assert_allclose(got, 1.002**trips * np.ones(2), rtol=1e-3)  # closed form


WIDE = 256


def wide_while(x, n):
    k = 0
    while k < n:
        x = jnp.tanh(x) + 0.01
        k = k + 1
    return jnp.sum(x)


def test_memory_is_bounded_by_the_checkpoints_not_the_trips():
    """One compiled program serves every trip count; its scratch memory holds
    a few times checkpoint_slots + 64 carries of the loop (the forward's and the
    reverse sweep's buffers), far fewer than a run of 20,000 trips would need
    to store every carry."""
    x = jnp.zeros(WIDE, jnp.float32)
    compiled = jax.jit(kt.grad(wide_while)).lower(x, jnp.asarray(5)).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    carry_bytes = WIDE * 4
    assert temp < (bounds.checkpoint_slots("", carry_bytes) + 64) * carry_bytes * 3
    assert temp < 20_000 * carry_bytes / 5
    got = compiled(x + 0.1, jnp.asarray(20_000))
    step = lambda k, x: jnp.tanh(x) + 0.01  # noqa: E731
    want = jax.jit(jax.grad(lambda x: jnp.sum(jax.lax.fori_loop(0, 20_000, step, x))))(x + 0.1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)


def test_gradient_functions_still_retrace_and_store_every_carry():
    """kt's own gradient functions keep the fast path: a loop longer than its
    bound is retraced with a larger buffer, not checkpointed."""
    x = jnp.asarray([0.3, -0.7, 1.1], jnp.float32)
    bounds.recompute_stats.clear()
    learned = dict(bounds._bounds)
    try:
        with bounds.tracking_recompute():
            got = kt.grad(damped)(x, jnp.asarray(3000))
    finally:  # the buffer size measured here would set the user-jit test's checkpoints
        bounds._bounds.clear()
        bounds._bounds.update(learned)
    want = jax.jit(jax.grad(damped_static), static_argnums=1)(x, 3000)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)
    assert not bounds.recompute_stats


# -- a long for, when asked ------------------------------------------------------------
def long_for(x):
    for k in range(3000):
        x = jnp.sin(x) * 1.0001 + 0.001 * x * k / 3000
    return jnp.sum(x)


def test_for_checkpoints_option():
    x = jnp.asarray([0.3, -0.7, 1.1], jnp.float32)
    step = lambda k, x: jnp.sin(x) * 1.0001 + 0.001 * x * k / 3000  # noqa: E731
    want = jax.jit(jax.grad(lambda x: jnp.sum(jax.lax.fori_loop(0, 3000, step, x))))(x)
    old = kt.set_for_checkpoints(64)
    try:
        bounds.recompute_stats.clear()
        with bounds.tracking_recompute():
            got = jax.jit(kt.grad(long_for))(x)
        stats = dict(bounds.recompute_stats)
    finally:
        kt.set_for_checkpoints(old)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    ((n, recomputed),) = stats.values()
    assert n == 3000 and 0 < recomputed <= 3000 * np.log2(3000)
    with pytest.raises(kt.KTransformError, match="even number"):
        kt.set_for_checkpoints(3)


# -- a for over a range whose bound is traced ---------------------------------------------
def damped_range(x, n):
    for k in range(n):  # `n` traced: a lax.while_loop over the range
        x = jnp.sin(x) * 1.0001 + 0.001 * x * k / 5000
    return jnp.sum(x)


@pytest.mark.parametrize("trips", [7, 5000])
def test_user_jit_of_grad_of_a_for_over_a_traced_range(trips):
    """Its gradient was refused (write it as a `while`); now it is K of the
    loop like any other, and under the user's jit it keeps checkpoints."""
    x = jnp.asarray([0.3, -0.7, 1.1], jnp.float32)
    with bounds.tracking_recompute():
        got = jax.jit(kt.grad(damped_range))(x, jnp.asarray(trips))
    step = lambda k, x: jnp.sin(x) * 1.0001 + 0.001 * x * k / 5000  # noqa: E731
    want = jax.grad(lambda x: jnp.sum(jax.lax.fori_loop(0, trips, step, x)))(x)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)
    line = damped_range.__code__.co_firstlineno + 1  # the `for`
    ((where, (n, recomputed)),) = [
        (w, s) for w, s in bounds.recompute_stats.items() if w.endswith(f":{line}")
    ]
    assert n == trips and (recomputed > 0) == (trips > bounds.checkpoint_slots(where, x.nbytes))


def _grow_to_100(x):
    while jnp.sum(x) < 100.0:
        x = x * 1.5 + 0.1
    return jnp.sum(x * x)


def test_set_loop_bound_reaches_a_function_already_transformed():
    """Gradient objects of one function share one program: a bound set after
    its first trace was ignored by every later `jax.jit(kt.grad(f))` (its
    checkpoints kept the old count: the advice of the loop-bound error did
    nothing). The checkpoint buffer's rows follow the bound; the gradient
    is `jax.grad`'s of the same loop
    as a `fori_loop` of its trip count."""
    x = jnp.ones(3)
    rows = lambda: {  # noqa: E731 -- the row counts of (rows, 3) buffers in the jaxpr
        int(n) for n in re.findall(r"f32\[(\d+),3\]", str(jax.make_jaxpr(kt.grad(_grow_to_100))(x)))
    }
    old = bounds.DEFAULT_LOOP_BOUND
    before = rows()
    try:
        kt.set_loop_bound(48)
        after = rows()
        got = jax.jit(kt.grad(_grow_to_100))(x)
    finally:
        kt.set_loop_bound(old)
    assert max(before) > max(after) >= 48
    trips = 9  # each element: x_k = 1.5 x_{k-1} + 0.1 from 1; 3 x_k >= 100 first at k = 9
    want = jax.grad(
        lambda v: jnp.sum(jax.lax.fori_loop(0, trips, lambda i, c: c * 1.5 + 0.1, v) ** 2)
    )(x)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_traced_while_gradient_has_no_effect_and_still_grows_its_bound():
    """The loop-bound check is a pure callback whose result the program uses:
    a debug callback is an effect, and a program with one leaves JAX's C++
    dispatch for its Python path (0.1 ms a call: a 10-trip while took twice
    a fori_loop's time). The check still fires: 300 trips outgrow the first
    buffer, the gradient function grows it and retraces; values against
    jax.grad of the same loop as a fori_loop."""
    x = jnp.linspace(0.1, 1.0, 4)
    grad = kt.grad(_grow_to_100)
    assert not jax.make_jaxpr(grad)(x).effects
    got = kt.grad(_sin_steps)(x, jnp.float32(300.0))
    np.testing.assert_allclose(got, jax.grad(_fori_sin_steps)(x, 300), rtol=1e-4)


def _sin_steps(v, stop):
    t = stop * 0.0
    while t < stop:
        v = v + 0.01 * jnp.sin(v)
        t = t + 1.0
    return jnp.sum(v * v)


def _fori_sin_steps(v, n):
    return jnp.sum(jax.lax.fori_loop(0, n, lambda i, c: c + 0.01 * jnp.sin(c), v) ** 2)


def test_a_later_call_that_outgrows_the_bound_grows_it():
    """A call with arrays only takes the short path to the program compiled
    before (`CompiledGraph.__call__`); when that program's loop outgrows its
    buffer (5 trips first, then 3,000 against the bound of 1,024), the call
    goes the general way, which grows the bound and retraces."""
    x = jnp.linspace(0.1, 1.0, 4)
    for grad in (kt.grad(_sin_steps), kt.jit(kt.grad(_sin_steps))):
        for n in (5, 3000, 7):
            got = grad(x, jnp.float32(n))
            want = jax.grad(_fori_sin_steps)(x, n)
            np.testing.assert_allclose(got, want, rtol=1e-4)


FIRST_CALL_UNDER_JIT = """
import json
import jax, jax.numpy as jnp, numpy as np
import k_transform as kt

def f(x, n):
    k = 0
    while k < n:
        x = jnp.sin(x) + 0.01
        k = k + 1
    return jnp.sum(x)

x = jnp.asarray([0.3, -0.7], jnp.float32)
under_jit = jax.jit(kt.grad(f))(x, jnp.asarray(3000))  # the process's first call
plain = kt.grad(f)(x, jnp.asarray(3000))
print(json.dumps([np.asarray(under_jit).tolist(), np.asarray(plain).tolist()]))
"""


def test_a_first_call_under_the_users_jit_still_checkpoints(tmp_path):
    """The first gradient a process computes runs under the user's jax.jit:
    what tells a concrete call from a traced one was found at that first
    use, under the trace, and took tracers for concrete arrays, so the loop
    got a retracing buffer of 64 slots and overflowed at 3,000 trips."""
    import json
    import subprocess
    import sys

    script = tmp_path / "first_call.py"  # a file: kt reads the function's source
    script.write_text(FIRST_CALL_UNDER_JIT)
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    under_jit, plain = json.loads(done.stdout.splitlines()[-1])
    x = jnp.asarray([0.3, -0.7], jnp.float32)
    step = lambda k, x: jnp.sin(x) + 0.01  # noqa: E731
    want = jax.grad(lambda x: jnp.sum(jax.lax.fori_loop(0, 3000, step, x)))(x)
    np.testing.assert_allclose(under_jit, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(plain, want, rtol=1e-4, atol=1e-6)
