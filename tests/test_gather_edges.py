"""`jnp.take_along_axis` whose index broadcasts against the array off the
axis (an index of shape (T, B, 1) picking from (T, B, H), or an array with one
element on an axis the index spans): the gradient rule spread the output
gradient over the index's own grid and failed to broadcast. Oracle:
`jax.grad` of the same function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt


def picked(x, idx):
    return jnp.sum(jnp.take_along_axis(x, idx, axis=0) ** 2 * jnp.cos(x[:1]))


X = jnp.arange(24.0).reshape(4, 2, 3) / 10
CASES = {
    "index (2, 2, 1) against (4, 2, 3)": (X, np.array([[[1], [3]], [[0], [2]]])),
    "index (1, 1, 3)": (X, np.array([[[1, 0, 2]]])),
    "array (4, 1, 1) against index (1, 2, 3)": (
        X[:, :1, :1],
        np.array([[[1, 0, 2], [3, 3, 0]]]),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_take_along_axis_gradient_with_a_broadcast_index(case):
    x, idx = CASES[case]
    np.testing.assert_allclose(kt.grad(picked)(x, idx), jax.grad(picked)(x, idx), rtol=1e-6)
