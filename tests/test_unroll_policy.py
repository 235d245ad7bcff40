"""Which static loops unroll (k_transform/control/policy.py).

A `for` with a static trip count unrolls at run time when trip count x body
equations is at most `UNROLL_BUDGET`, as `jax.grad` of the same Python
unrolls it (XLA then fuses across iterations); longer loops stay a
`lax.scan`. Each program's gradient is also checked against `jax.grad`.
"""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

import k_transform as kt
from k_transform.control import policy
from k_transform.runtime import stack as rs


def chain40(x):
    y = x
    for _ in range(40):
        y = jnp.sin(y) * 1.01 + jnp.cos(y * 0.5)
    return jnp.sum(y)


def rnn(w, xs):
    h = jnp.zeros(w.shape[0])
    for t in range(xs.shape[0]):  # the trip count is known when the loop runs
        h = jnp.tanh(w @ h + xs[t])
    return jnp.sum(h * h)


def long_update(x):
    y = x
    for _ in range(3000):
        y = y + 0.001 * jnp.sin(y) * x
    return jnp.sum(y * y)


def _primitives(jaxpr) -> set[str]:
    """Names of the primitives in `jaxpr` and every jaxpr nested in it."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names |= _primitives(sub)
    return names


def _loops_in_gradient(fn, *args) -> set[str]:
    jaxpr = jax.make_jaxpr(kt.grad(fn))(*args).jaxpr
    return _primitives(jaxpr) & {"scan", "while"}


# A loop that stays a loop: its forward is a scan storing each carry, its
# reverse a `while` popping them (control/k_loops.py), which the run time
# runs as a reverse scan reading them as its xs (control/runtime._slot_scan).
LOOPS = {"scan"}


X = jnp.linspace(-1.0, 1.0, 6)
W = 0.3 * jnp.reshape(jnp.sin(jnp.arange(16.0)), (4, 4))
XS = jnp.reshape(jnp.cos(jnp.arange(48.0)), (12, 4))


def test_a_small_static_loop_unrolls_under_jit():
    assert _loops_in_gradient(chain40, X) == set()
    got = jax.jit(kt.grad(chain40))(X)
    np.testing.assert_allclose(got, jax.grad(chain40)(X), rtol=1e-5, atol=1e-6)


def test_a_loop_indexing_with_its_counter_stays_a_scan():
    """`xs[t]`: unrolled, each step's gradient of the read is a full-size
    array added into d_xs (quadratic), which a scan stacks instead (on the
    CPU, where this suite runs)."""
    assert _loops_in_gradient(rnn, W, XS) == LOOPS
    got = jax.jit(kt.grad(rnn))(W, XS)
    np.testing.assert_allclose(got, jax.grad(rnn)(W, XS), rtol=1e-5, atol=1e-6)


def long_rnn(w, xs):  # `rnn` again, for a trace of its own
    h = jnp.zeros(w.shape[0])
    for t in range(xs.shape[0]):
        h = jnp.tanh(w @ h + xs[t])
    return jnp.sum(h * h)


def test_on_an_accelerator_a_short_loop_indexing_with_its_counter_unrolls(monkeypatch):
    """On a GPU a loop launches its body's kernels every iteration (the
    32-step RNN as a scan: 3.7x JAX's unrolled time on an H100), so there a
    body reading `xs[t]` unrolls within the budget, each read counted as
    `trips` equations (the full-size gradient it adds per iteration): 12
    steps unroll, 300 stay a scan. The backend is faked (a program traced for
    the CPU keeps its trace, hence `long_rnn`); the gradients are
    computed on the CPU against jax.grad."""
    monkeypatch.setattr(policy, "on_accelerator", lambda: True)
    assert _loops_in_gradient(long_rnn, W, XS) == set()
    got = jax.jit(kt.grad(long_rnn))(W, XS)
    np.testing.assert_allclose(got, jax.grad(long_rnn)(W, XS), rtol=1e-5, atol=1e-6)
    long_xs = jnp.reshape(jnp.cos(jnp.arange(1200.0)), (300, 4))
    assert _loops_in_gradient(long_rnn, W, long_xs) == LOOPS
    got = jax.jit(kt.grad(long_rnn))(W, long_xs)
    np.testing.assert_allclose(got, jax.grad(long_rnn)(W, long_xs), rtol=1e-4, atol=1e-6)


def test_a_loop_over_the_budget_stays_a_scan():
    assert _loops_in_gradient(long_update, X) == LOOPS
    got = jax.jit(kt.grad(long_update))(X)
    np.testing.assert_allclose(got, jax.grad(long_update)(X), rtol=1e-4, atol=1e-6)


def test_budget_zero_makes_every_long_loop_a_scan():
    old = kt.set_unroll_budget(0)
    try:
        assert _loops_in_gradient(chain40, X) == LOOPS
        got = jax.jit(kt.grad(chain40))(X)
    finally:
        kt.set_unroll_budget(old)
    np.testing.assert_allclose(got, jax.grad(chain40)(X), rtol=1e-5, atol=1e-6)
    assert policy.UNROLL_BUDGET == old


def test_body_size_counts_one_iteration():
    step = lambda i, cr: (jnp.sin(cr[0]) * 2.0 + cr[0],)  # noqa: E731
    assert policy.body_size(step, range(100), (X,)) == 3
    assert policy.unrolls(step, range(600), (X,))
    assert not policy.unrolls(step, range(700), (X,))
    reads = lambda i, cr: (cr[0] + XS[i],)  # noqa: E731
    assert policy.body_size(reads, range(12), (XS[0],)) > policy.UNROLL_BUDGET


def test_a_loop_of_a_derivative_keeps_the_short_limit():
    """A carry holding a stack (K of a loop written as IR, at second order and
    above) unrolls only up to `UNROLL_LIMIT`: each unrolled iteration would
    carry its K-body and a reverse to every further order."""
    step = lambda i, cr: (jnp.sin(cr[0]), *cr[1:])  # noqa: E731
    stack = rs.stack_push(rs.stack_new(), X)
    assert policy.unrolls(step, range(40), (X,))
    assert not policy.unrolls(step, range(40), (X, stack))
    assert policy.unrolls(step, range(policy.UNROLL_LIMIT), (X, stack))


def test_a_short_loop_of_a_first_derivative_unrolls():
    """Up to `DERIVATIVE_TRIPS` trips, a loop whose stack holds plain values
    (the recording loop of a jvp) unrolls within the budget; one whose stack
    holds stacks (a derivative of a derivative) does not."""
    push = lambda i, cr: (jnp.sin(cr[0]), rs.stack_push(cr[1], cr[0]))  # noqa: E731
    empty = rs.stack_new()
    assert policy.unrolls(push, range(policy.DERIVATIVE_TRIPS), (X, empty))
    assert not policy.unrolls(push, range(policy.DERIVATIVE_TRIPS + 1), (X, empty))
    nested = lambda i, cr: (cr[0], rs.stack_push(cr[1], (cr[0], rs.stack_push(empty, X))))  # noqa: E731
    assert not policy.unrolls(nested, range(policy.DERIVATIVE_TRIPS), (X, empty))
    # an empty stack in the item is a stack's zero gradient, no nesting
    zero = lambda i, cr: (jnp.sin(cr[0]), rs.stack_push(cr[1], (cr[0], empty)))  # noqa: E731
    assert policy.unrolls(zero, range(policy.DERIVATIVE_TRIPS), (X, empty))


def chain10(x):
    for _ in range(10):
        x = jnp.sin(x) * 0.9 + jnp.cos(x * 0.5)
    return x


def test_jvp_through_a_short_loop_is_straight_code():
    """bench/jvp's `for` case: jvp by double reverse through a 10-step loop
    has no loop left under jit (it ran 2.3x JAX's time as scans), and equals
    JAX's jvp."""
    v = jnp.cos(X)
    jvp = lambda x, v: kt.jvp(chain10, (x,), (v,))  # noqa: E731
    assert not _primitives(jax.make_jaxpr(jvp)(X, v).jaxpr) & {"scan", "while"}
    got = jax.jit(jvp)(X, v)
    want = jax.jvp(chain10, (X,), (v,))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


def loss10(x):
    return jnp.sum(chain10(x) ** 2)


def test_hvp_through_a_short_loop_is_straight_code():
    """bench/jvp's `hvp` case: jvp of a gradient through a 10-step loop has
    no loop left under jit (as five `while`s and a `scan` it ran 10x JAX's
    time on a GPU), and equals JAX's Hessian-vector product."""
    v = jnp.cos(X)
    grad = kt.grad(loss10)
    hvp = lambda x, v: kt.jvp(grad, (x,), (v,))  # noqa: E731
    assert not _primitives(jax.make_jaxpr(hvp)(X, v).jaxpr) & {"scan", "while"}
    got = jax.jit(hvp)(X, v)
    want = jax.jvp(jax.grad(loss10), (X,), (v,))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_jvp_and_hessian_through_an_unrolled_loop():
    v = jnp.cos(X)
    _, tangent = kt.jvp(chain40, (X,), (v,))
    np.testing.assert_allclose(tangent, jax.jvp(chain40, (X,), (v,))[1], rtol=1e-5, atol=1e-6)
    hv = kt.hvp(chain40, (X,), v)
    want = jax.jvp(jax.grad(chain40), (X,), (v,))[1]
    np.testing.assert_allclose(hv, want, rtol=1e-4, atol=1e-5)


def tuple_reads(x):
    t = tuple(x * k for k in range(12))
    s = 0.0
    for i in range(len(t)):  # indexes a tuple with the counter: a Python int
        s = s + jnp.sin(t[i]) * i
    return s


def tuple_grows(x):
    out = ()
    for i in range(12):  # the carry changes structure: a tuple that grows
        out = out + (x * i,)
    return out[3] * out[11]


def inner_range(x):
    y = x
    for i in range(10):
        for _ in range(i):  # range of the counter
            y = jnp.sin(y)
    return y


def test_a_body_needing_its_counter_as_an_int_unrolls():
    """More than `UNROLL_LIMIT` trips of a body that indexes a tuple with the
    counter, grows a tuple or takes `range(i)`: run as Python runs them (a
    scan failed with JAX's bare TracerIntegerConversionError)."""
    for fn in (tuple_reads, tuple_grows, inner_range):
        np.testing.assert_allclose(kt.grad(fn)(0.7), jax.grad(fn)(0.7), rtol=1e-5)
    assert policy.unrolls(lambda i, c: (c[0] + tuple(range(40))[i],), range(2, 40), (X,))


def _sines(c):
    for _ in range(60):
        c = jnp.sin(c)
    return c


def test_branches_count_and_a_loop_of_a_derivative_has_a_smaller_budget():
    """A `cond`'s branches count toward the body's size (60 equations each,
    not one for the `cond`). A loop of a first derivative (its carry holds a
    stack) unrolls within `DERIVATIVE_BUDGET`, as its jaxpr grows many times
    when unrolled at the next order (helpers with nested traced `if`s over 10
    trips: 77,000 jaxpr lines); the same body in a plain loop keeps
    `UNROLL_BUDGET`."""
    branchy = lambda i, cr: (jax.lax.cond(cr[0][0] > 0, _sines, _sines, cr[0]), *cr[1:])  # noqa: E731
    assert policy.body_size(branchy, range(10), (X,)) > 120
    assert policy.unrolls(branchy, range(10), (X,))  # 10 x 120 within UNROLL_BUDGET
    empty = rs.stack_new()
    recording = lambda i, cr: (branchy(i, cr)[0], rs.stack_push(cr[1], cr[0]))  # noqa: E731
    assert not policy.unrolls(recording, range(10), (X, empty))
    short = lambda i, cr: (jnp.sin(cr[0]), rs.stack_push(cr[1], cr[0]))  # noqa: E731
    assert policy.unrolls(short, range(10), (X, empty))
