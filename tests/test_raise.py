"""`raise` and `assert` (issue 30, item 4): the user's exception is raised
where Python raises it, also when the test that reaches it is traced (under
a jit): a host callback raises it at run time, and `kt.jit`, gradients and
Cells in graph mode raise the user's exception itself, as MindSpore's graph
mode does. Oracles: `jax.grad` and `jax.jvp` of the same program without the
`raise`, and Python's own exception (type and message)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms
from k_transform.mindspore import nn

X = jnp.array([1.0, 2.0, 3.0])
BIG = 100.0 * X


class TooBig(ValueError):
    """A user's exception class (no `__init__` of its own)."""


def loss(x):
    return jnp.sum(jnp.sin(x) * x)


def raises_in_branch(x):
    if jnp.sum(x) > 50.0:
        raise ValueError("too big")
    return jnp.sum(jnp.sin(x) * x)


def raises_with_value(x):
    if jnp.sum(x) > 50.0:
        raise TooBig(f"sum {jnp.sum(x)} over 50")
    return jnp.sum(jnp.sin(x) * x)


def returns_or_raises(x):
    if jnp.sum(x) < 50.0:
        return jnp.sum(jnp.sin(x) * x)
    else:
        raise ValueError("too big") from KeyError("cause")


def asserts(x):
    assert jnp.sum(x) < 50.0, "sum too big"
    return jnp.sum(jnp.sin(x) * x)


def raises_in_loop(x):
    i = jnp.sum(x) * 0.0
    while i < 3.0:
        if jnp.max(x) > 500.0:
            raise RuntimeError("diverged")
        x = x * 2.0
        i = i + 1.0
    return jnp.sum(x * x)


def loop_loss(x):
    return jnp.sum((8.0 * x) ** 2)


CASES = {
    "branch": (raises_in_branch, loss, ValueError, "too big"),
    "f-string": (raises_with_value, loss, TooBig, "sum 600.0 over 50"),
    "tail": (returns_or_raises, loss, ValueError, "too big"),
    "assert": (asserts, loss, AssertionError, "sum too big"),
    "loop": (raises_in_loop, loop_loss, RuntimeError, "diverged"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_gradient_is_jaxs_and_the_exception_pythons(name):
    f, plain, error, message = CASES[name]
    grad = kt.grad(f)
    np.testing.assert_allclose(grad(X), jax.grad(plain)(X), rtol=1e-6)
    big = BIG * (10.0 if name == "loop" else 1.0)
    with pytest.raises(error, match=message):  # compiled: raised at run time
        grad(big)
    with pytest.raises(error, match=message):  # the forward under kt.jit
        kt.jit(f)(big)


def test_eager_mode_raises_where_python_does():
    kt.set_mode("eager")
    try:
        np.testing.assert_allclose(kt.grad(returns_or_raises)(X), jax.grad(loss)(X), rtol=1e-6)
        with pytest.raises(ValueError, match="too big") as info:
            kt.grad(returns_or_raises)(BIG)
        assert isinstance(info.value.__cause__, KeyError)
    finally:
        kt.set_mode("graph")


def test_under_the_users_jit_jaxs_error_names_the_exception():
    users = jax.jit(kt.grad(raises_in_branch))
    np.testing.assert_allclose(users(X), jax.grad(loss)(X), rtol=1e-6)
    with pytest.raises(Exception, match="ValueError: too big"):
        jax.block_until_ready(users(BIG))


def test_under_vmap_only_the_rows_that_reach_it_raise():
    batched = jax.vmap(kt.grad(raises_in_branch))
    rows = jnp.stack([X, -X])
    np.testing.assert_allclose(batched(rows), jax.vmap(jax.grad(loss))(rows), rtol=1e-6)
    with pytest.raises(ValueError, match="too big"):
        batched(jnp.stack([X, BIG]))


def test_second_order_matches_jax_and_still_raises():
    v = jnp.array([0.5, -1.0, 0.25])

    def hvp(x):
        return kt.jvp(kt.grad(raises_in_branch), (x,), (v,))[1]

    np.testing.assert_allclose(hvp(X), jax.jvp(jax.grad(loss), (X,), (v,))[1], rtol=1e-5)
    with pytest.raises(ValueError, match="too big"):
        hvp(BIG)


class Guarded(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.array([0.5, -1.0, 2.0], np.float32)), name="w")

    def construct(self, x):
        if x.sum() > 50.0:
            raise ValueError("input too big")
        return (self.w * x * x).sum()


def test_a_cell_in_graph_mode_raises_at_run_time():
    net = Guarded()
    grad = ms.grad(net)
    np.testing.assert_allclose(grad(X), 2.0 * np.array([0.5, -1.0, 2.0]) * X, rtol=1e-6)
    with pytest.raises(ValueError, match="input too big"):
        grad(BIG)
    with pytest.raises(ValueError, match="input too big"):
        ms.jit(net.construct)(BIG)
