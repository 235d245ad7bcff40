"""The reverse sweep's schedule of checkpointed loops (issue 29, session 20).

`checkpoint.reverse` recomputes the carries between two stored checkpoints
by one run over the gap, storing them all, when the free slots hold them
(one recomputed iteration per trip), else evenly spaced ones and recursively
(`_spacing`), bisecting within STACK_ROOM at worst. Oracles: closed forms,
the forward's own carries, and jax.grad of the same loop as a fori_loop
(storing every carry) in float64.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.control import checkpoint
from k_transform.runtime import bounds
from tests.test_loop_checkpoint import damped, damped_static


def _sweep(trips: int, slots: int):
    """x <- sin(x) `trips` times, checkpointed in `slots`: the final carry,
    d x_n / d x_0, the carry each gradient step saw (by iteration), how many
    steps saw each iteration, and the iterations recomputed."""

    def step(i, c):
        return jnp.sin(c)

    def run(x0):
        n, final, saved = checkpoint.record(step, lambda i, c: i < trips, x0, slots)

        def grad_step(i, c, d):
            one = jnp.zeros(trips, jnp.int32).at[i].set(1)
            return d * jnp.cos(c), (one, jnp.zeros((trips, 2), c.dtype).at[i].set(c))

        start = (jnp.zeros(trips, jnp.int32), jnp.zeros((trips, 2), x0.dtype))
        add = lambda a, b: (a[0] + b[0], a[1] + b[1])  # noqa: E731
        d, (seen, carries), rec = checkpoint.reverse(
            step, grad_step, n, saved, jnp.ones_like(x0), start, add
        )
        return final, d, carries, seen, rec

    return jax.jit(run)(jnp.asarray([0.3, -0.7], jnp.float32))


def _forward(trips: int) -> np.ndarray:
    xs = [np.asarray([0.3, -0.7], np.float32)]
    for _ in range(trips - 1):
        xs.append(np.sin(xs[-1]))
    return np.stack(xs)


@pytest.mark.parametrize(
    ("trips", "slots"),
    [
        (3000, 1024),  # gaps of 4 carries, room for them all: one run per gap
        (3000, 64),  # gaps of 64, room 88 beyond STACK_ROOM 64: evenly spaced, then again
        (3000, 4),  # gaps of 1,024, no room beyond STACK_ROOM: bisection
    ],
)
def test_every_step_sees_its_own_carry_once(trips, slots):
    final, d, carries, seen, rec = _sweep(trips, slots)
    xs = _forward(trips)
    np.testing.assert_array_equal(seen, np.ones(trips, np.int32))
    np.testing.assert_allclose(carries, xs, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(final, np.sin(xs[-1]), rtol=1e-6)
    np.testing.assert_allclose(d, np.prod(np.cos(xs.astype(np.float64)), axis=0), rtol=1e-4)
    if slots == 1024:  # room for every gap: each iteration recomputed at most once
        assert 0 < int(rec) < trips
    else:
        assert trips < int(rec) <= trips * np.log2(trips)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize(("bound", "trips"), [(1024, 2500), (16, 2500), (2, 300)])
def test_user_jit_of_a_while_with_few_slots(bound, trips):
    """The user's jax.jit of kt.grad of a traced `while`, with the loop bound
    (so the checkpoint slots) set low: the schedule's three regimes, float64,
    against jax.grad of the same loop as a fori_loop. The bound is read when
    the program is made: gradient objects share one program per function, so
    the caches are cleared for a new one."""
    old = bounds.DEFAULT_LOOP_BOUND
    kt.set_loop_bound(bound)
    kt.clear_caches()
    try:
        x = jnp.asarray([0.3, -0.7, 1.1], jnp.float64)
        with bounds.tracking_recompute():
            bounds.recompute_stats.clear()
            got = jax.jit(kt.grad(damped))(x, jnp.asarray(trips))
            jax.effects_barrier()
    finally:
        kt.set_loop_bound(old)
    want = jax.jit(jax.grad(damped_static), static_argnums=1)(x, trips)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    ((n, recomputed),) = bounds.recompute_stats.values()
    assert n == trips and 0 < recomputed <= trips * np.log2(trips)
    assert (recomputed < trips) == (bound == 1024)  # one run per gap where they fit


@pytest.mark.usefixtures("x64")
def test_vmap_of_rows_with_their_own_trip_counts():
    """jax.vmap of the user's jit: each row runs its own number of trips
    (its pushes and segments differ; vmap turns them into masked loops)."""
    old = bounds.DEFAULT_LOOP_BOUND
    kt.set_loop_bound(16)
    kt.clear_caches()
    try:
        xs = jnp.asarray([[0.3, -0.7], [1.1, 0.2], [0.5, 0.5]], jnp.float64)
        ns = jnp.asarray([5, 300, 2000])
        got = jax.vmap(jax.jit(kt.grad(damped)))(xs, ns)
    finally:
        kt.set_loop_bound(old)
    oracle = jax.jit(jax.grad(damped_static), static_argnums=1)
    want = [oracle(x, int(n)) for x, n in zip(xs, ns, strict=True)]
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-12, atol=1e-14)
