"""State updates with `ops.Assign`: program order, exactly once, under jit,
only on the taken branch, and never a gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import ops

ASSIGN = ops.Assign()


class RunningMean(kt.Cell):
    """Tracks a moving mean of its inputs while computing a loss."""

    def __init__(self, momentum=0.9):
        super().__init__()
        self.weight = kt.Parameter(np.ones(3, np.float32))
        self.moving_mean = kt.Parameter(np.zeros(3, np.float32), requires_grad=False)
        self.momentum = momentum

    def construct(self, x):
        mean = jnp.mean(x, axis=0)
        new = self.moving_mean * self.momentum + mean * (1.0 - self.momentum)
        ASSIGN(self.moving_mean, new)
        return jnp.sum((x - mean) * self.weight)


def test_assign_in_jitted_gradient_steps_matches_reference():
    net = RunningMean()
    grad_fn = kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple([net.weight]))
    rng = np.random.RandomState(0)
    batches = [jnp.asarray(rng.randn(4, 3).astype(np.float32)) for _ in range(5)]
    ref = np.zeros(3, np.float32)
    for x in batches:
        g = grad_fn(x)
        ref = ref * 0.9 + np.asarray(jnp.mean(x, axis=0)) * 0.1
        expected = jnp.sum(x - jnp.mean(x, 0), 0)
        np.testing.assert_allclose(np.asarray(g[0]), np.asarray(expected), atol=1e-5)
    np.testing.assert_allclose(np.asarray(net.moving_mean.data), ref, rtol=1e-5, atol=1e-6)
    assert len(grad_fn._jitted) == 1  # the state is an output, not a retrace


def test_assign_runs_eagerly_when_the_cell_is_called():
    net = RunningMean()
    x = jnp.ones((2, 3))
    net(x)
    np.testing.assert_allclose(np.asarray(net.moving_mean.data), np.full(3, 0.1), rtol=1e-6)


class Counter(kt.Cell):
    def __init__(self):
        super().__init__()
        self.hits = kt.Parameter(np.zeros((), np.float32), requires_grad=False)

    def construct(self, x):
        if jnp.sum(x) > 0:
            ASSIGN(self.hits, self.hits + 1.0)
            y = x * 2.0
        else:
            y = x * 3.0
        return jnp.sum(y)


def test_assign_inside_if_runs_only_on_the_taken_branch():
    for mode in ("graph", "eager"):
        kt.set_mode(mode)
        try:
            net = Counter()
            grad_fn = kt.GradOperation()(net)
            for x in (jnp.ones(2), -jnp.ones(2), jnp.ones(2), jnp.ones(2)):
                np.testing.assert_allclose(
                    np.asarray(grad_fn(x)), np.full(2, 2.0 if x[0] > 0 else 3.0)
                )
            assert float(net.hits.data) == 3.0, mode
        finally:
            kt.set_mode("graph")


def test_assign_under_users_jit_of_compiled_program():
    net = Counter()
    step = kt.compile(net)
    jax.block_until_ready(step(jnp.ones(2)))
    assert float(net.hits.data) == 1.0


class AssignInLoop(kt.Cell):
    def __init__(self):
        super().__init__()
        self.total = kt.Parameter(np.zeros(3, np.float32), requires_grad=False)

    def construct(self, m):
        for row in m:
            ASSIGN(self.total, self.total + row)
        return jnp.sum(m)


def test_assign_inside_a_traced_loop_is_a_clear_error():
    m = jnp.ones((12, 3))  # more rows than the unroll limit: lax.scan
    with pytest.raises(kt.KTransformError, match="Assign inside a traced loop"):
        kt.GradOperation()(AssignInLoop())(m)


class AssignsInAStaticLoop(kt.Cell):
    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(np.full(3, 0.9, np.float32))
        self.total = kt.Parameter(np.zeros(3, np.float32), requires_grad=False)

    def construct(self, x, n):
        y = x
        for _ in range(n):
            y = jnp.sin(y) * self.w
            ASSIGN(self.total, self.total + y)
        return jnp.sum(y)


def test_assign_in_a_static_loop_the_unroll_budget_unrolls():
    """20 trips fit the unroll budget: the loop unrolls, and its Assigns run
    once per iteration (deciding that traces the body on abstract values,
    which must not leave its Assign's values in the state)."""
    net = AssignsInAStaticLoop()
    grad_fn = kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple([net.w]))
    x = jnp.asarray([0.3, -0.5, 1.0])
    got = grad_fn(x, 20)

    def ref(w):
        y, total = x, jnp.zeros(3)
        for _ in range(20):
            y = jnp.sin(y) * w
            total = total + y
        return jnp.sum(y), total

    np.testing.assert_allclose(got[0], jax.grad(lambda w: ref(w)[0])(jnp.full(3, 0.9)), rtol=1e-5)
    np.testing.assert_allclose(net.total.data, ref(jnp.full(3, 0.9))[1], rtol=1e-5)


class ReadAfterAssign(kt.Cell):
    """Reads a Parameter after assigning it, in straight code and in a loop."""

    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(np.full(3, 0.5, np.float32))
        self.count = kt.Parameter(np.zeros((), np.float32), requires_grad=False)

    def construct(self, x, n):
        ASSIGN(self.count, self.count + 1.0)
        for _ in range(n):  # a run-time loop: its reverse must not assign again
            ASSIGN(self.count, self.count + 1.0)
            x = jnp.sin(x * self.w) * self.count
        return jnp.sum(x) * self.count


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_a_parameter_read_after_an_assign_sees_the_new_value(mode):
    """The gradient reads each Parameter once per function, unless an Assign
    comes between: it read `count` before its Assigns and gave wrong numbers
    (the forward alone was right). The loop runs in Python (eagerly, or
    unrolled under jit): its reverse applies each iteration's kept bprop and
    does not run the body, and its Assign, again."""

    def ref(w, x):
        count = 1.0
        for _ in range(3):
            count = count + 1.0
            x = jnp.sin(x * w) * count
        return jnp.sum(x) * count

    kt.set_mode(mode)
    try:
        net = ReadAfterAssign()
        x = jnp.asarray([0.3, -0.5, 1.0])
        got = kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple([net.w]))(x, 3)
    finally:
        kt.set_mode("graph")
    np.testing.assert_allclose(got[0], jax.grad(ref)(jnp.full(3, 0.5), x), rtol=1e-5)
    assert float(net.count.data) == 4.0
