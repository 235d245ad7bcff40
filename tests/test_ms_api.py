"""MindSpore parity of the differentiation API's options (issue 14).

Every return structure asserted here is the one MindSpore 2.10 (CPU) gave in
a probe run in PYNATIVE_MODE and GRAPH_MODE (the same structure in both
unless a comment says otherwise); every value is checked against JAX's
gradient of the same function or a closed form. Each case runs eagerly and
jitted.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import nn

X = jnp.array([1.0, 2.0])
Y = jnp.array([3.0, 4.0])
V = jnp.array([1.0, -1.0])


def close(got, want, tol=1e-5):
    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


def is_pair(x) -> bool:
    return isinstance(x, tuple) and len(x) == 2


def f(x, y):
    return jnp.sum(x * x * y)


def fv(x, y):
    return x * x * y


def fv_aux(x, y):
    return x * x * y, x + 1.0


def fv_aux2(x, y):
    return x * x * y, x + 1.0, y * 2.0


def f_aux(x, y):
    return jnp.sum(x * x * y), x * 2.0


def f_aux2(x, y):
    return jnp.sum(x * x * y), x * 2.0, y + 1.0


def ft2(xs, z):
    return jnp.sum(xs[0] * xs[1] * z)


class Net(kt.Cell):
    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(jnp.array([0.5, 1.5]), name="w")
        self.b = kt.Parameter(jnp.array([0.1, 0.2]), name="b")

    def construct(self, x, y):
        return self.w * x * y + self.b


class LossNet(kt.Cell):
    def __init__(self):
        super().__init__()
        self.net = Net()

    def construct(self, x, y):
        return jnp.sum(self.net(x, y))


def net_ref(w, b, x, y):
    return w * x * y + b


# -- 1. return_ids and sens_param --------------------------------------------------------
def test_return_ids_positions(mode):
    # probe: grad(f, 0, return_ids=True) -> (0, g); (0, 1) -> ((0, g0), (1, g1))
    got = kt.grad(f, 0, return_ids=True)(X, Y)
    assert is_pair(got) and got[0] == 0
    close(got[1], jax.grad(f)(X, Y))
    got = kt.grad(f, (0, 1), return_ids=True)(X, Y)
    assert [k for k, _ in got] == [0, 1]
    close(tuple(g for _, g in got), jax.grad(f, (0, 1))(X, Y))


def test_return_ids_weights(mode):
    # probe: grad(net, (0, 1), net.trainable_params(), return_ids=True)
    #   -> (((0, gx), (1, gy)), (('w', gw), ('b', gb)));
    # grad(net, 1, net.w, return_ids=True) -> ((1, gy), ('w', gw)) (GRAPH_MODE)
    net = LossNet()
    w, b = net.net.w, net.net.b
    grads = kt.grad(net, (0, 1), [w, b], return_ids=True)(X, Y)
    inputs, weights = grads
    # a sub-Cell's Parameters take its attribute as a prefix, explicit names too
    # (probe: this LossNet in MindSpore 2.10 gives ids 'net.w', 'net.b')
    assert [k for k, _ in inputs] == [0, 1] and [n for n, _ in weights] == ["net.w", "net.b"]

    def ref(w_, b_, x, y):
        return jnp.sum(net_ref(w_, b_, x, y))

    close(
        (tuple(g for _, g in inputs), tuple(g for _, g in weights)),
        (jax.grad(ref, (2, 3))(w.data, b.data, X, Y), jax.grad(ref, (0, 1))(w.data, b.data, X, Y)),
    )
    single = kt.grad(net, 1, w, return_ids=True)(X, Y)
    assert single[0][0] == 1 and single[1][0] == "net.w"
    close(single[1][1], jax.grad(ref)(w.data, b.data, X, Y))


def test_value_and_grad_return_ids(mode):
    # probe: value_and_grad(f, 0, return_ids=True) -> (value, (0, g))
    value, (k, g) = kt.value_and_grad(f, 0, return_ids=True)(X, Y)
    assert k == 0
    close((value, g), jax.value_and_grad(f)(X, Y))


def test_sens_param(mode):
    # probe: grad(fv, (0, 1), sens_param=True)(x, y, s) -> (g0, g1);
    # value_and_grad(fv, 0, sens_param=True)(x, y, s) -> (value, g0)
    out, pullback = jax.vjp(fv, X, Y)
    got = kt.grad(fv, (0, 1), sens_param=True)(X, Y, Y)
    assert isinstance(got, tuple) and len(got) == 2
    close(got, pullback(Y))
    close(kt.grad(fv, 0, sens_param=True)(X, Y, Y), pullback(Y)[0])
    value, g = kt.value_and_grad(fv, 0, sens_param=True)(X, Y, Y)
    close((value, g), (out, pullback(Y)[0]))


# -- 2. has_aux: (grads, (aux...)) -------------------------------------------------------
def test_grad_has_aux(mode):
    # probe: grad(f_aux, 0, has_aux=True) -> (g, (aux,)); two aux -> (g, (a1, a2));
    # (0, 1) -> ((g0, g1), (aux,))
    g, aux = kt.grad(f_aux, 0, has_aux=True)(X, Y)
    assert isinstance(aux, tuple) and len(aux) == 1
    close((g, aux[0]), (jax.grad(f)(X, Y), X * 2.0))
    g, aux = kt.grad(f_aux2, 0, has_aux=True)(X, Y)
    assert isinstance(aux, tuple) and len(aux) == 2
    close((g, aux), (jax.grad(f)(X, Y), (X * 2.0, Y + 1.0)))
    gs, aux = kt.grad(f_aux, (0, 1), has_aux=True)(X, Y)
    assert isinstance(gs, tuple) and len(gs) == 2 and len(aux) == 1
    close(gs, jax.grad(f, (0, 1))(X, Y))


def test_value_and_grad_has_aux(mode):
    # probe: value_and_grad(f_aux2, 0, has_aux=True) -> ((value, a1, a2), g)
    (value, a1, a2), g = kt.value_and_grad(f_aux2, 0, has_aux=True)(X, Y)
    close((value, a1, a2, g), (f(X, Y), X * 2.0, Y + 1.0, jax.grad(f)(X, Y)))


def test_has_aux_with_sens_and_ids(mode):
    # probe (PYNATIVE): grad(f_aux, 0, has_aux=True, sens_param=True)(x, y, 2.0) -> (2 g, (aux,))
    # (GRAPH_MODE raises there); return_ids with has_aux -> ((0, g), (aux,))
    g, aux = kt.grad(f_aux, 0, has_aux=True, sens_param=True)(X, Y, jnp.float32(2.0))
    close((g, aux), (2.0 * jax.grad(f)(X, Y), (X * 2.0,)))
    (k, g), aux = kt.grad(f_aux, 0, has_aux=True, return_ids=True)(X, Y)
    assert k == 0 and len(aux) == 1
    close(g, jax.grad(f)(X, Y))


def test_bad_options():
    # probe: grad(f, None) -> ValueError "grad_position and weight can not be None"
    with pytest.raises(kt.KTransformError, match="cannot both be None"):
        kt.grad(f, None)
    with pytest.raises(kt.KTransformError, match="grad_position"):
        kt.grad(f, "x")
    with pytest.raises(kt.KTransformError, match="grad_position"):
        kt.jacrev(fv, 1.5)
    with pytest.raises(kt.KTransformError, match="must return a tuple"):
        kt.vjp(fv, X, Y, has_aux=True)
    # probe: grad(f, 2)(x, y) -> "Position index 2 is exceed input size"
    with pytest.raises(kt.KTransformError, match="grad_position 2"):
        kt.grad(f, 2)(X, Y)
    with pytest.raises(kt.KTransformError, match="grad_position 3"):
        kt.jacfwd(fv, 3)(X, Y)
    with pytest.raises(kt.KTransformError, match="weights must be"):
        kt.vjp(fv, X, Y, weights=3)
    with pytest.raises(kt.KTransformError, match="give the inputs and v"):
        nn.Vjp(fv)(X)


# -- 3. vjp and jvp: weights, has_aux, library functions ----------------------------------
def test_vjp_structures(mode):
    # probe: vjp(fv1, x) -> (out, fn), fn(v) -> (g,); two inputs -> (g0, g1)
    out, fn = kt.vjp(fv, X, Y)
    ref_out, ref_fn = jax.vjp(fv, X, Y)
    grads = fn(V)
    assert isinstance(grads, tuple) and len(grads) == 2
    close((out, grads), (ref_out, ref_fn(V)))


def test_vjp_has_aux(mode):
    # probe: vjp(fv_aux, x, y, has_aux=True) -> (out, fn, aux) with aux bare;
    # two aux values -> (out, fn, (a1, a2))
    ref_out, ref_fn = jax.vjp(fv, X, Y)
    out, fn, aux = kt.vjp(fv_aux, X, Y, has_aux=True)
    close((out, fn(V), aux), (ref_out, ref_fn(V), X + 1.0))
    out, fn, aux = kt.vjp(fv_aux2, X, Y, has_aux=True)
    assert isinstance(aux, tuple) and len(aux) == 2
    close((out, fn(V), aux), (ref_out, ref_fn(V), (X + 1.0, Y * 2.0)))


def test_vjp_weights(mode):
    # probe: vjp(net, x, y, weights=params) -> fn(v) = ((gx, gy), (gw, gb));
    # weights=net.w -> ((gx, gy), gw)
    net = Net()
    w, b = net.w.data, net.b.data
    ref_out, ref_fn = jax.vjp(net_ref, w, b, X, Y)
    gw, gb, gx, gy = ref_fn(V)
    out, fn = kt.vjp(net, X, Y, weights=net.trainable_params())
    inputs, weights = fn(V)
    assert len(inputs) == 2 and len(weights) == 2
    close((out, inputs, weights), (ref_out, (gx, gy), (gw, gb)))
    _, fn = kt.vjp(net, X, Y, weights=net.w)
    inputs, weight = fn(V)
    assert len(inputs) == 2 and not isinstance(weight, tuple)
    close(weight, gw)


def test_jvp_has_aux(mode):
    # probe: jvp(fv_aux, (x, y), (v, v), has_aux=True) -> (out, jv, aux), aux bare;
    # two aux -> (out, jv, (a1, a2)); jvp(fv1, x, v) with bare input and tangent
    ref = jax.jvp(fv, (X, Y), (V, V))
    out, jv, aux = kt.jvp(fv_aux, (X, Y), (V, V), has_aux=True)
    close((out, jv, aux), (*ref, X + 1.0))
    out, jv, aux = kt.jvp(fv_aux2, (X, Y), (V, V), has_aux=True)
    close((out, jv, aux), (*ref, (X + 1.0, Y * 2.0)))


@pytest.mark.parametrize("lib", [jnp.sin, jnp.tanh, jax.nn.relu, np.exp])
def test_library_function_targets(mode, lib):
    # probe: vjp(ops.sin, x) -> (out, (g,)); jvp(ops.sin, x, v) -> (out, jv);
    # jacrev(ops.sin)(x) -> (2, 2); grad(ops.sin)(x) -> the gradient of sum(sin(x))
    fn = jnp.exp if lib is np.exp else lib
    x = X - 1.5
    out, pullback = kt.vjp(lib, x)
    ref_out, ref_pullback = jax.vjp(fn, x)
    assert len(pullback(V)) == 1
    close((out, pullback(V)), (ref_out, ref_pullback(V)))
    close(kt.jvp(lib, x, V), jax.jvp(fn, (x,), (V,)))
    close(kt.jacrev(lib)(x), jax.jacrev(fn)(x))
    close(kt.jacfwd(lib)(x), jax.jacfwd(fn)(x))
    close(kt.grad(lib)(x), jax.grad(lambda a: jnp.sum(fn(a)))(x))


def test_library_function_two_arguments(mode):
    out, pullback = kt.vjp(jnp.multiply, X, Y)
    close((out, pullback(V)), (X * Y, (V * Y, V * X)))


# -- 4. jacfwd / jacrev: grad_position and has_aux -----------------------------------------
@pytest.mark.parametrize("jac", ["jacfwd", "jacrev"])
def test_jacobian_options(mode, jac):
    # probe: jacfwd(fv, (0, 1)) -> (J0, J1); jacfwd(fv_aux, 0, has_aux=True) -> (J0, aux);
    # jacfwd(fv_aux2, (0, 1), has_aux=True) -> ((J0, J1), (a1, a2)); same for jacrev
    ours, ref = getattr(kt, jac), getattr(jax, jac)
    close(ours(fv, 1)(X, Y), ref(fv, 1)(X, Y))
    both = ours(fv, (0, 1))(X, Y)
    assert isinstance(both, tuple) and len(both) == 2
    close(both, ref(fv, (0, 1))(X, Y))
    j0, aux = ours(fv_aux, 0, has_aux=True)(X, Y)
    close((j0, aux), (ref(fv)(X, Y), X + 1.0))
    js, aux = ours(fv_aux2, (0, 1), has_aux=True)(X, Y)
    assert len(js) == 2 and len(aux) == 2
    close((js, aux), (ref(fv, (0, 1))(X, Y), (X + 1.0, Y * 2.0)))


# -- 5. nn.Jvp / nn.Vjp Cells ------------------------------------------------------------
def test_nn_jvp(mode):
    # probe: nn.Jvp(fv1)(x, v) -> (out, jv); nn.Jvp(fv)(x, y, (v, v)) -> (out, jv)
    assert isinstance(nn.Jvp(fv), kt.Cell)
    close(nn.Jvp(jnp.sin)(X, V), jax.jvp(jnp.sin, (X,), (V,)))
    close(nn.Jvp(fv)(X, Y, (V, V)), jax.jvp(fv, (X, Y), (V, V)))
    net = Net()
    ref = jax.jvp(lambda x, y: net_ref(net.w.data, net.b.data, x, y), (X, Y), (V, V))
    close(nn.Jvp(net)(X, Y, (V, V)), ref)


def test_nn_vjp(mode):
    # probe: nn.Vjp(fv1)(x, v) -> (out, g) with g bare; nn.Vjp(fv)(x, y, v) -> (out, (gx, gy));
    # nn.Vjp(net)(x, y, v) -> (out, (gx, gy)), no weight gradients
    out, g = nn.Vjp(jnp.sin)(X, V)
    assert not isinstance(g, tuple)
    close((out, g), (jnp.sin(X), jnp.cos(X) * V))
    ref_out, ref_fn = jax.vjp(fv, X, Y)
    out, grads = nn.Vjp(fv)(X, Y, V)
    assert len(grads) == 2
    close((out, grads), (ref_out, ref_fn(V)))
    net = Net()
    ref_out, ref_fn = jax.vjp(lambda x, y: net_ref(net.w.data, net.b.data, x, y), X, Y)
    out, grads = nn.Vjp(net)(X, Y, V)
    close((out, grads), (ref_out, ref_fn(V)))


# -- 6. GradOperation: tuple arguments, get_by_list without weights -------------------------
def test_get_all_tuple_argument(mode):
    # probe (PYNATIVE and GRAPH): GradOperation(get_all=True)(ft2)((x, y), z) -> (gz,);
    # GradOperation()(ft2)((x, y), z) -> (); with ms.mutable((x, y)) in GRAPH_MODE
    # -> ((gx, gy), gz) and with mutable([x, y]) -> ([gx, gy], gz)
    gxs, gz = jax.grad(ft2, (0, 1))((X, Y), V)
    got = kt.GradOperation(get_all=True)(ft2)((X, Y), V)
    assert isinstance(got, tuple) and len(got) == 1
    close(got, (gz,))
    assert kt.GradOperation()(ft2)((X, Y), V) == ()
    got = kt.GradOperation(get_all=True)(ft2)(kt.mutable((X, Y)), V)
    assert isinstance(got[0], tuple) and len(got[0]) == 2
    close(got, (gxs, gz))
    got = kt.GradOperation(get_all=True)(ft2)(kt.mutable([X, Y]), V)
    assert isinstance(got[0], list)
    close(got, (list(gxs), gz))


def test_get_by_list_without_weights(mode):
    # probe (PYNATIVE): GradOperation(get_by_list=True)(net)(x, y) -> (gw, gb) over
    # net.trainable_params(); with get_all -> ((gx, gy), (gw, gb))
    # (GRAPH_MODE: (,) at top level, an error inside a Cell)
    net = LossNet()
    w, b = net.net.w.data, net.net.b.data

    def ref(w_, b_, x, y):
        return jnp.sum(net_ref(w_, b_, x, y))

    got = kt.GradOperation(get_by_list=True)(net)(X, Y)
    assert isinstance(got, tuple) and len(got) == 2
    close(got, jax.grad(ref, (0, 1))(w, b, X, Y))
    inputs, weights = kt.GradOperation(get_all=True, get_by_list=True)(net)(X, Y)
    close((inputs, weights), (jax.grad(ref, (2, 3))(w, b, X, Y), jax.grad(ref, (0, 1))(w, b, X, Y)))
