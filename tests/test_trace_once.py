"""Work done once at trace time (issue 29): a traced `if` traces each branch
once, not once per probe of the `if` around it (`control/runtime._Branch`);
its bprop is made from the arrays the branch kept, not by running the branch
again; and a `lax.scan`'s reverse loop applies the bprops its iterations
kept (`runtime/residuals`, `runtime/stack.Memos`) rather than running the
body again. Oracles: JAX on the same programs with `lax.cond`, and JAX's own
count of branch traces."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.control import runtime as ctl_runtime
from tests.nested_ifs import TRACES, h1, h3, j1, j3


def f(x, y):
    x = h1(x, y)
    y = h3(y, x)
    return jnp.sum(x * y)


def g(x, y):
    x = j1(x, y)
    y = j3(y, x)
    return jnp.sum(x * y)


POINTS = {
    "first": (np.linspace(-1.0, 1.0, 6), np.linspace(0.5, -0.3, 6)),
    "other": (np.linspace(0.3, 1.2, 6), np.linspace(-0.4, 0.2, 6)),
}


@pytest.mark.parametrize("point", POINTS)
def test_nested_traced_ifs_match_jax_at_first_and_second_order(point):
    x, y = (jnp.asarray(a, jnp.float32) for a in POINTS[point])
    v = jnp.linspace(1.0, -0.5, 6)
    np.testing.assert_allclose(jax.jit(kt.grad(f))(x, y), jax.grad(g)(x, y), rtol=2e-5, atol=1e-6)
    if point != "first":  # second order at one point: CI time
        return
    ours = jax.jit(lambda a: kt.jvp(lambda b: kt.grad(f)(b, y), a, v)[1])(x)
    theirs = jax.jvp(lambda b: jax.grad(g)(b, y), (x,), (v,))[1]
    np.testing.assert_allclose(ours, theirs, rtol=2e-4, atol=1e-5)


def one_call(x, y):
    return jnp.sum(h1(x, y))


def one_call_jax(x, y):
    return jnp.sum(j1(x, y))


def test_a_nested_traced_if_traces_each_branch_as_often_as_jax(monkeypatch):
    """Three `if`s nested (each branch of h1 calls h2, each of h2 calls h3):
    14 branch functions. JAX traces each once for the value and once more
    for its gradient; k_transform traced each branch four times per trace
    of the `if` around it (twice to probe shapes, twice in `lax.cond`) and
    ran it again in its bprop: hundreds of traces for these 14."""
    built = []
    original = ctl_runtime._Branch.__init__

    def counting(self, thunk):
        built.append(thunk)
        original(self, thunk)

    monkeypatch.setattr(ctl_runtime._Branch, "__init__", counting)
    x, y = jnp.linspace(-1.0, 1.0, 6), jnp.linspace(0.5, -0.3, 6)
    TRACES["jax"] = 0
    expected = jax.jit(jax.grad(one_call_jax))(x, y)
    jax_traces = TRACES["jax"]
    np.testing.assert_allclose(jax.jit(kt.grad(one_call))(x, y), expected, rtol=2e-5, atol=1e-6)
    assert jax_traces == 14
    # each branch once for the value, and each bprop's branch once: as JAX
    assert len(built) <= 2 * jax_traces


def _count(jaxpr, name: str) -> int:
    """Equations of primitive `name` in `jaxpr` and every jaxpr inside it."""
    total = 0
    for eqn in jaxpr.eqns:
        total += eqn.primitive.name == name
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    total += _count(inner, name)
    return total


def rnn(w, xs):
    h = jnp.zeros(w.shape[0])
    for x in xs:
        h = jnp.sin(h @ w + x)
    return jnp.sum(h)


def test_a_scans_reverse_loop_applies_the_bprops_its_iterations_kept():
    """At first order the reverse loop of a loop run as `lax.scan` makes each
    iteration's bprop from the arrays the scan stored (no `sin` in it: the
    body is not run again; its derivative `cos` is); the gradient is JAX's.
    (Second order differentiates the twin that recomputes: the loop tests of
    tests/test_higher_order_control.py.)"""
    rng = np.random.RandomState(0)
    w = jnp.asarray(rng.randn(8, 8) * 0.3, jnp.float32)
    xs = jnp.asarray(rng.randn(16, 8), jnp.float32)
    grad = kt.grad(rnn, grad_position=(0, 1))
    jaxpr = jax.make_jaxpr(grad)(w, xs).jaxpr
    assert _count(jaxpr, "scan") == 2  # forward, and reverse reading the stored arrays
    assert _count(jaxpr, "while") == 0
    assert _count(jaxpr, "sin") == 1  # the forward scan's
    assert _count(jaxpr, "cos") == 1  # the reverse loop's
    ours = jax.jit(grad)(w, xs)
    theirs = jax.grad(rnn, argnums=(0, 1))(w, xs)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def calls(x, y, trips):
    for _ in range(trips):  # static: unrolled, each trip calls the helpers again
        x = h1(x, y)
        y = h3(y, x)
    return jnp.sum(x * y)


def calls_jax(x, y, trips):
    for _ in range(trips):
        x = j1(x, y)
        y = j3(y, x)
    return jnp.sum(x * y)


def test_second_order_grows_linearly_with_the_calls_before():
    """A Hessian-vector product through helpers with traced `if`s called in
    an unrolled loop: its program grows linearly with the trips. The gradient
    of a sum of envs gave each operand the whole sum, so the env of every
    call's bprop held those of all the calls before it, nested: one trip
    3,270 jaxpr lines, two 43,893, three over 300 s to trace; now 2,650 and
    5,258. Values against JAX with `lax.cond`."""
    x, y = (jnp.asarray(a, jnp.float32) for a in POINTS["first"])
    v = jnp.linspace(1.0, -0.5, 6)

    def hvp(trips):
        return lambda a: kt.jvp(lambda b: kt.grad(calls)(b, y, trips), a, v)[1]

    traced = [jax.jit(hvp(trips)).trace(x) for trips in (1, 2)]
    sizes = [len(str(t.jaxpr).splitlines()) for t in traced]
    assert sizes[1] <= 2.2 * sizes[0], sizes
    theirs = jax.jvp(lambda b: jax.grad(calls_jax)(b, y, 2), (x,), (v,))[1]
    np.testing.assert_allclose(traced[1].lower().compile()(x), theirs, rtol=2e-4, atol=1e-5)
