"""`self.p = self.p + 1` on a Parameter inside `construct` (issue 30, item 1).

MindSpore assigns the Parameter, in both modes and under GradOperation: the
statement is an `ops.Assign`, so later reads in the call see the new value,
the Parameter holds it after the call, and (as for `ops.assign`) no
gradient flows through the assignment: each read of the Parameter is a read
of the variable, whose gradient sums over its reads. Oracle: the same
arithmetic in JAX, with the assigned values read through
`lax.stop_gradient`, and the Parameter's gradient summed over the reads.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

P0 = np.array([1.0, 2.0], np.float32)
X = jnp.array([0.5, -1.0])


class Rebinds(kt.Cell):
    def __init__(self):
        super().__init__()
        self.p = kt.Parameter(jnp.asarray(P0), name="p")

    def construct(self, x):
        self.p = self.p + 1.0
        y = x * self.p
        if jnp.sum(x) < 0:
            self.p += x
        return jnp.sum(y * self.p)


def oracle(p, x):
    """(loss, new p) with each assigned value read as a constant."""
    p1 = jax.lax.stop_gradient(p + 1.0)
    y = x * p1
    p2 = jax.lax.stop_gradient(jnp.where(jnp.sum(x) < 0, p1 + x, p1))
    return jnp.sum(y * p2), p2


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_rebinding_a_parameter_assigns_it_under_grad_operation(mode):
    kt.set_mode(mode)
    try:
        net = Rebinds()
        p = net.p.data
        grads = kt.GradOperation(get_all=True)(net)(X)
        want = jax.grad(lambda x: oracle(p, x)[0])(X)
        np.testing.assert_allclose(grads[0], want, rtol=1e-6)
        np.testing.assert_allclose(net.p.data, oracle(p, X)[1], rtol=1e-6)
        p = net.p.data  # a second call starts from the assigned value
        kt.GradOperation(get_all=True)(net)(X)
        np.testing.assert_allclose(net.p.data, oracle(p, X)[1], rtol=1e-6)
    finally:
        kt.set_mode("graph")


def test_rebinding_a_parameter_in_a_plain_call_and_under_jit():
    for run in (lambda net: net(X), lambda net: kt.jit(net)(X)):
        net = Rebinds()
        out = run(net)
        want, p = oracle(jnp.asarray(P0), X)
        np.testing.assert_allclose(out, want, rtol=1e-6)
        assert isinstance(net.p, kt.Parameter)  # still the Parameter, holding the value
        np.testing.assert_allclose(net.p.data, p, rtol=1e-6)


def test_rebinding_a_parameter_keeps_its_gradient_by_list():
    """The Parameter's gradient sums over its reads: `x * self.p` and
    `y * self.p` read the assigned values; the reads that feed an assignment
    give none."""
    net = Rebinds()
    p = net.p.data
    (dp,) = kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple(net.trainable_params()))(X)
    _, p2 = oracle(p, X)
    p1 = p + 1.0

    def by_reads(r2, r4):
        return jnp.sum((X * r2) * r4)

    d2, d4 = jax.grad(by_reads, argnums=(0, 1))(p1, p2)
    np.testing.assert_allclose(dp, d2 + d4, rtol=1e-6)


def test_a_parameter_in_a_tuple_target_is_refused():
    class Tuple(kt.Cell):
        def __init__(self):
            super().__init__()
            self.p = kt.Parameter(jnp.asarray(P0), name="p")

        def construct(self, x):
            self.p, y = x, x * 2.0
            return jnp.sum(y)

    with pytest.raises(kt.KTransformError, match="self.p") as err:
        kt.GradOperation()(Tuple())(X)
    assert "self.p, y = x, x * 2.0" in str(err.value)
