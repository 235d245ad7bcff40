"""MindSpore drop-in behaviours (issue 30): integer inputs to `kt.grad`.

Each structure asserted here is the one MindSpore 2.10 (CPU) returned in a
probe run in PYNATIVE_MODE and GRAPH_MODE (the same in both); each value is
checked against JAX's gradient of the same function (on float inputs, cast
to the integer dtype where MindSpore casts) or a closed form.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

T = jnp.array([1.0, 2.0])
N_INT = jnp.array([3, 4], jnp.int32)


def close(got, want, tol=1e-6):
    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert jnp.result_type(g) == jnp.result_type(w)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


def f(x, y):
    return x * x * y


def f3(x, n, y):
    return x * y * n


def f_aux(x, n):
    return x * n, x + 1.0


W = kt.Parameter(jnp.array([3.0, 5.0]), name="w_int_inputs")


def f_w(x, n):
    return x * W * n


def sum_f(x, y):
    return jnp.sum(f(x, y))


def vector_grad(fn, argnums, *args):
    """JAX's gradient of `fn`'s output against ones (what `grad` seeds)."""
    out, back = jax.vjp(lambda *a: fn(*a), *args)
    grads = back(jnp.ones_like(out))
    return grads[argnums] if isinstance(argnums, int) else tuple(grads[k] for k in argnums)


# -- integer arrays: their gradient, in their dtype --------------------------------------
def test_int_array_input_gets_its_gradient_in_its_dtype(mode):
    want_x = vector_grad(f, 0, N_INT.astype(jnp.float32), T).astype(jnp.int32)  # [6, 16]
    want_y = vector_grad(f, 1, N_INT.astype(jnp.float32), T)
    close(kt.grad(f)(N_INT, T), want_x)
    close(kt.grad(f, grad_position=(0, 1))(N_INT, T), (want_x, want_y))
    value, grads = kt.value_and_grad(f, grad_position=(0, 1))(N_INT, T)
    close(value, f(N_INT, T))
    close(grads, (want_x, want_y))


# -- Python ints: left out of the gradients -----------------------------------------------
def test_python_int_at_the_only_position_gives_empty_tuple(mode):
    assert kt.grad(f)(3, T) == ()
    assert kt.grad(f3, grad_position=1)(T, 2, T) == ()
    value, grads = kt.value_and_grad(f)(3, T)
    close(value, f(3.0, T))
    assert grads == ()


def test_python_int_left_out_one_left_is_bare(mode):
    # MindSpore: grad(f, (0, 1))(3, t) is the bare gradient of y
    close(kt.grad(f, grad_position=(0, 1))(3, T), vector_grad(f, 1, 3.0, T))
    close(kt.grad(f, grad_position=(0, 1))(T, 3), vector_grad(f, 0, T, 3.0))
    value, grads = kt.value_and_grad(f, grad_position=(0, 1))(3, T)
    close(value, f(3.0, T))
    close(grads, vector_grad(f, 1, 3.0, T))


def test_python_int_left_out_of_a_longer_tuple(mode):
    want = vector_grad(f3, (0, 2), T, 2.0, T)
    close(kt.grad(f3, grad_position=(0, 1, 2))(T, 2, T), want)
    close(kt.grad(f3, grad_position=-2)(T, 2, T), ())  # negative positions count from the end


def test_python_ints_only(mode):
    value, grads = kt.value_and_grad(f, grad_position=(0, 1))(3, 4)
    assert int(value) == 36 and grads == ()
    assert kt.grad(f, grad_position=(0, 1))(True, 4) == ()  # a bool is an int


def test_python_int_with_has_aux(mode):
    want_x = vector_grad(lambda x: f_aux(x, 2.0)[0], 0, T)
    grads, aux = kt.grad(f_aux, grad_position=(0, 1), has_aux=True)(T, 2)
    close(grads, want_x)
    close(aux, (T + 1.0,))
    grads, aux = kt.grad(f_aux, grad_position=1, has_aux=True)(T, 2)
    assert grads == ()
    close(aux, (T + 1.0,))


def test_python_int_with_weights(mode):
    want_w = T * 2.0  # d(x * w * n)/dw, closed form
    inputs, weights = kt.grad(f_w, grad_position=(0, 1), weights=[W])(T, 2)
    close(inputs, W.value() * 2.0)
    close(weights, (want_w,))
    inputs, weight = kt.grad(f_w, grad_position=1, weights=W)(T, 2)
    assert inputs == ()
    close(weight, want_w)


def test_python_int_with_return_ids(mode):
    # MindSpore 2.10 raises IndexError here (its ids assume no input was left
    # out); ours keeps each gradient's own position.
    got = kt.grad(f3, grad_position=(0, 1, 2), return_ids=True)(T, 2, T)
    want = vector_grad(f3, (0, 2), T, 2.0, T)
    assert [k for k, _ in got] == [0, 2]
    close(tuple(g for _, g in got), want)


def test_python_float_is_still_differentiated(mode):
    # kept on purpose (MindSpore leaves Python floats out too)
    close(kt.grad(sum_f)(3.0, T), jax.grad(sum_f)(3.0, T))


@pytest.mark.parametrize("api", [kt.jacfwd, kt.jacrev, kt.hessian])
def test_jax_style_api_still_refuses_integers(api):
    with pytest.raises(TypeError, match="real- or complex-valued inputs"):
        api(sum_f)(N_INT, T)


# -- inside code being transformed (kt.jit, a gradient of a gradient) ---------------------
def jitted_grad(x):
    return kt.grad(f3, grad_position=(0, 1))(x, 2, x)


def jitted_value_and_grad(x):
    return kt.value_and_grad(f3, grad_position=1)(x, 2, x)


def grad_inside(x):
    return jnp.sum(kt.grad(f3, grad_position=(0, 1, 2))(x, 3, x)[1])


def test_python_int_left_out_inside_jit():
    close(kt.jit(jitted_grad)(T), vector_grad(f3, 0, T, 2.0, T))
    value, grads = kt.jit(jitted_value_and_grad)(T)
    close(value, f3(T, 2, T))
    assert grads == ()


def test_python_int_left_out_inside_a_gradient():
    # d/dx sum(d f3/dy at (x, 3, x)) = d/dx sum(3 x) = 3, closed form
    close(kt.grad(grad_inside)(T), jnp.full(2, 3.0))


def _with_a_slice_output(x, w, b):
    return w * x + b, "a", None, slice(x, 1, 2)


def _indexes_with_a_slice(x):
    return jnp.sum(x[slice(1, jnp.int32(3))] * 2.0)


def test_a_slice_object_has_no_gradient_and_is_no_error():
    """MindSpore's test_grad_operation_with_invalid_ones_like_output: outputs
    beside the tensor (a string, None, `slice(x, 1, 2)`) take no gradient; a
    slice object is positions to index with (`slice(...)` was 'cannot
    differentiate the call slice'). Closed forms: d(w x + b) = (w, x, 1)."""
    args = (jnp.float32(2.0), jnp.float32(3.0), jnp.float32(1.0))
    got = kt.GradOperation(get_all=True)(_with_a_slice_output)(*args)
    close(got, (3.0, 2.0, 1.0))
    close(kt.grad(_indexes_with_a_slice)(jnp.arange(5.0)), jnp.array([0.0, 2.0, 2.0, 0.0, 0.0]))
