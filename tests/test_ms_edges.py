"""MindSpore edge cases that used to give a silent wrong result (issue 26).

Each test is named after what it checks; every gradient is compared with
JAX's gradient of an equivalent program (float64 where it matters) or a
closed form, never with k_transform's own output.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import ops


def close(got, want, tol=1e-6):
    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


# -- 5: Assign cannot change a Parameter's shape ---------------------------------------
ASSIGN = ops.Assign()


class Reshaper(kt.Cell):
    """Assigns a (1,)-shaped value to a ()-shaped Parameter: MindSpore raises."""

    def __init__(self):
        super().__init__()
        self.p = kt.Parameter(np.array(1.0, np.float32), name="p")

    def construct(self, x):
        ASSIGN(self.p, jnp.reshape(x, (1,)))  # the line the error shows
        return self.p * x


class Mover(kt.Cell):
    """A same-shape assign of a float64 value to a float32 Parameter."""

    def __init__(self):
        super().__init__()
        self.p = kt.Parameter(np.zeros(2, np.float32), name="p")

    def construct(self, x):
        ASSIGN(self.p, x * 2.0)
        return jnp.sum(self.p * x)


def test_assign_that_changes_a_parameter_shape_raises_eagerly_jitted_and_in_gradients():
    runs = {
        "eager": lambda net, x: net(x),
        "kt.jit": lambda net, x: kt.jit(net)(x),
        "GradOperation": lambda net, x: kt.GradOperation()(net)(x),
    }
    for how, run in runs.items():
        net = Reshaper()
        with pytest.raises(kt.KTransformError) as info:
            run(net, jnp.array(3.0))
        message = str(info.value)
        assert "Assign" in message and "'p'" in message, how
        assert "(1,)" in message and "()" in message, how
        assert "test_ms_edges.py" in message, how
        assert "ASSIGN(self.p, jnp.reshape(x, (1,)))" in message, how
        assert net.p.data.shape == (), how  # the Parameter kept its shape
    # A same-shape assign still works, cast to the Parameter's dtype.
    with jax.enable_x64(True):
        x = jnp.array([1.5, -2.0], jnp.float64)
        for how in ("eager", "kt.jit", "GradOperation"):
            net = Mover()
            out = runs[how](net, x)
            assert net.p.data.shape == (2,) and net.p.data.dtype == jnp.float32, how
            close(net.p.data, np.array([3.0, -4.0]))
            if how == "GradOperation":  # d/dx sum(p * x) with p fixed by the assign: p
                close(out, np.array([3.0, -4.0]))
            else:
                close(out, np.sum(np.array([3.0, -4.0]) * np.asarray(x)))


# -- 6: GradOperation of a network without inputs --------------------------------------
class NoInputs(kt.Cell):
    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(np.array([1.0, 2.0], np.float32), name="w")

    def construct(self):
        return jnp.sum(self.w * self.w)


def test_grad_operation_of_a_network_without_inputs_returns_an_empty_tuple(mode):
    net = NoInputs()
    d_w = 2.0 * np.array([1.0, 2.0])  # closed form of d sum(w * w) / dw
    assert kt.GradOperation()(net)() == ()
    assert kt.GradOperation(get_all=True)(net)() == ()
    by_list = kt.GradOperation(get_by_list=True)(net, net.trainable_params())()
    assert isinstance(by_list, tuple) and len(by_list) == 1
    close(by_list, (d_w,))
    both = kt.GradOperation(get_all=True, get_by_list=True)(net, net.trainable_params())()
    assert isinstance(both, tuple) and both[0] == () and len(both[1]) == 1
    close(both[1], (d_w,))
    sens = kt.GradOperation(sens_param=True)(net)(jnp.array(3.0))
    assert sens == ()
