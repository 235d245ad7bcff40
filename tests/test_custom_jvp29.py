"""A user's `jax.custom_jvp` function is differentiated by its own rule
(session 29; before, differentiating it was refused): K transposes the rule,
linear in the tangents, by our reverse mode of the parsed rule w.r.t. the
tangents alone (`dfunctor.own_fprop`), never JAX's. Oracle: `jax.grad`,
`jax.jvp`, `jax.hessian` of the same decorated functions (JAX uses the rules);
rules that differ from the steps' derivative (straight-through, scaled,
safe at 0) show which one is used."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.errors import KTransformError

X = jnp.array([0.5, -1.0, 2.0])
ONES = jnp.ones(3)


def close(a, b, tol=1e-5):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for u, v in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


# -- the rules ----------------------------------------------------------------------
@jax.custom_jvp
def softplus(x):
    return jnp.log1p(jnp.exp(x))


@softplus.defjvp
def softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus(x), t * jax.nn.sigmoid(x)  # the rule calls the function itself


@jax.custom_jvp
def round_ste(x):  # straight-through: the steps' derivative is 0, the rule's 1
    return jnp.round(x)


@round_ste.defjvp
def round_ste_jvp(primals, tangents):
    return round_ste(primals[0]), tangents[0]


@jax.custom_jvp
def safe_log(x):
    return jnp.log(jnp.where(x > 0, x, 1.0))


@safe_log.defjvp
def safe_log_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    safe = jnp.where(x > 0, x, 1.0)
    return safe_log(x), jnp.where(x > 0, t / safe, 0.0)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def scale_grad(x, s):
    return x


@scale_grad.defjvp
def scale_grad_jvp(s, primals, tangents):
    return primals[0], tangents[0] * s


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def apply_fn(f, x):
    return f(x)


@apply_fn.defjvp
def apply_fn_jvp(f, primals, tangents):
    (x,), (t,) = primals, tangents
    return apply_fn(f, x), 2.0 * f(x) * t  # not f's derivative: the rule's


def square(v):
    return v * v


@jax.custom_jvp
def sin_times(x, y):
    return jnp.sin(x) * y


sin_times.defjvps(lambda xd, ans, x, y: 3.0 * jnp.cos(x) * xd * y, None)  # y: no tangent


@jax.custom_jvp
def pair(x, y):
    return x * y, jnp.sin(x)


@pair.defjvp
def pair_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return pair(x, y), (tx * y + x * ty, 3.0 * jnp.cos(x) * tx)


@jax.custom_jvp
def tree_out(p):
    return {"a": p["w"] * 2.0, "b": (jnp.exp(p["w"]),)}


@tree_out.defjvp
def tree_out_jvp(primals, tangents):
    (p,), (t,) = primals, tangents
    out = tree_out(p)
    return out, {"a": 5.0 * t["w"], "b": (out["b"][0] * t["w"],)}


def l_softplus(x):
    return jnp.sum(softplus(x) * x)


def l_round(x):
    return jnp.sum(round_ste(x) * x)


def l_scaled(x):
    return jnp.sum(jnp.sin(scale_grad(x, 0.5)) * x)


def l_apply(x):
    return jnp.sum(apply_fn(square, x) * x)


def l_defjvps(x):
    return jnp.sum(sin_times(x, x * 2.0) * x)


def l_pair(x):
    a, b = pair(x, x + 1.0)
    return jnp.sum(a * b)


def l_tree(x):
    o = tree_out({"w": x})
    return jnp.sum(o["a"] * o["b"][0])


LOSSES = [l_softplus, l_round, l_scaled, l_apply, l_defjvps, l_pair, l_tree]


# -- tests ------------------------------------------------------------------------
@pytest.mark.parametrize("loss", LOSSES, ids=lambda f: f.__name__)
def test_gradient_is_the_rules(loss):
    close(kt.grad(loss)(X), jax.grad(loss)(X))


def test_the_rule_not_the_steps():
    """Straight-through: the steps' gradient of round is 0; the rule's is 1."""
    got = kt.grad(lambda x: jnp.sum(round_ste(x)))(X)
    close(got, ONES)
    close(got, jax.grad(lambda x: jnp.sum(round_ste(x)))(X))
    # log1p(exp(100.)) has an infinite step; the rule's gradient is 1
    close(kt.grad(lambda x: softplus(x))(100.0), 1.0)


def test_a_safe_rule_stays_finite_at_zero():
    def loss(x):
        return jnp.sum(safe_log(x) * 2.0)

    z = jnp.array([0.0, 2.0])
    got = kt.grad(loss)(z)
    assert np.all(np.isfinite(got))
    close(got, jax.grad(loss)(z))


@pytest.mark.parametrize("loss", [l_softplus, l_round, l_apply], ids=lambda f: f.__name__)
def test_second_order_is_jaxs(loss):
    """At second order the rule's steps are differentiated (the rule of
    `round_ste` calls it again: its rule, 1, not round's 0)."""
    close(kt.hessian(loss)(X), jax.hessian(loss)(X))


def test_forward_mode():
    for loss in (l_round, l_defjvps, l_tree):
        close(kt.jvp(loss, (X,), (ONES,)), jax.jvp(loss, (X,), (ONES,)))
    close(kt.jacfwd(lambda x: pair(x, x)[1])(X), jax.jacfwd(lambda x: pair(x, x)[1])(X))


def test_under_jit_and_in_loops():
    close(kt.jit(kt.grad(l_softplus))(X), jax.grad(l_softplus)(X))

    def looped(x):
        def body(c, v):
            return c + softplus(v) * c, None

        c, _ = jax.lax.scan(body, 1.0, x)
        return c + jnp.sum(round_ste(x) * x)

    close(kt.grad(looped)(X), jax.grad(looped)(X))


def test_grad_operation_of_a_cell():
    class Net(kt.Cell):
        def __init__(self):
            super().__init__()
            self.w = kt.Parameter(jnp.array([1.0, 2.0, 3.0]), name="w")

        def construct(self, x):
            return jnp.sum(round_ste(self.w * x) * x) + jnp.sum(softplus(self.w))

    def ref(w, x):
        return jnp.sum(round_ste(w * x) * x) + jnp.sum(softplus(w))

    net = Net()
    grads = kt.GradOperation(get_all=True, get_by_list=True)(net, net.trainable_params())(X)
    w = jnp.array([1.0, 2.0, 3.0])
    close(grads, ((jax.grad(ref, 1)(w, X),), (jax.grad(ref, 0)(w, X),)))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def clip_tangent(lo, hi, x):
    return x


@clip_tangent.defjvp
def clip_tangent_jvp(lo, hi, primals, tangents):
    return primals[0], jnp.clip(tangents[0], lo, hi)


def test_a_rule_not_linear_in_the_tangents_is_refused():
    """JAX's reverse mode refuses it (no transpose of `min`); so does ours,
    naming the step, rather than the derivative of the rule at zero tangents."""

    def loss(x):
        return jnp.sum(clip_tangent(-0.1, 0.2, x) ** 2)

    with pytest.raises(KTransformError, match="not linear in the tangents") as info:
        kt.grad(loss)(X)
    assert "jnp.clip(tangents[0], lo, hi)" in str(info.value)
    close(kt.jit(loss)(X), loss(X))  # not differentiated: it runs


def test_symbolic_zeros_is_refused():
    @jax.custom_jvp
    def double(x):
        return x * 2.0

    double.defjvp(lambda p, t: (double(p[0]), t[0] * 2.0), symbolic_zeros=True)
    with pytest.raises(KTransformError, match="double"):
        kt.grad(lambda x: jnp.sum(double(x)))(X)


# -- a neighbour: a user's function given to a custom_vjp's nondiff input ----------
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def apply_vjp(f, x):
    return f(x)


def apply_vjp_fwd(f, x):
    return f(x), x


def apply_vjp_bwd(f, x, g):
    return (2.0 * g * x,)


apply_vjp.defvjp(apply_vjp_fwd, apply_vjp_bwd)


def test_custom_vjp_second_order_with_a_users_function_argument():
    """fwd calls the user's function, which its second order differentiates
    (a ValueError before: the function was called as if it were its fprop)."""

    def loss(x):
        return jnp.sum(apply_vjp(square, x) * x)

    close(kt.hessian(loss)(X), jax.hessian(loss)(X))


W = kt.Parameter(jnp.array(2.0), name="W")


@jax.custom_jvp
def times_w(x):
    return x * W


@times_w.defjvp
def times_w_jvp(primals, tangents):
    return times_w(primals[0]), tangents[0] * W


def test_a_parameter_read_inside_is_refused_not_given_no_gradient():
    """Its rule gives what the function reads no gradient: W's would be 0
    with no error (so for a custom_vjp, before; JAX refuses that closure)."""

    class Net(kt.Cell):
        def construct(self, x):
            return jnp.sum(times_w(x))

    net = Net()
    with pytest.raises(KTransformError, match="reads the Parameter W"):
        kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple([W]))(X)


@jax.custom_vjp
def times_w_vjp(x):
    return x * W


times_w_vjp.defvjp(lambda x: (times_w_vjp(x), None), lambda r, g: (g * W,))


def test_so_is_one_in_a_custom_vjp():
    class Net(kt.Cell):
        def construct(self, x):
            return jnp.sum(times_w_vjp(x))

    net = Net()
    with pytest.raises(KTransformError, match="custom_vjp function times_w_vjp: it reads"):
        kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple([W]))(X)


# -- a rule is read again when it changes ---------------------------------------------
SCALE = 2.0


@jax.custom_jvp
def scaled_rule(x):
    return x * 1.0


@scaled_rule.defjvp
def scaled_rule_jvp(primals, tangents):
    return scaled_rule(primals[0]), tangents[0] * SCALE


@jax.custom_vjp
def scaled_vjp(x):
    return x * 1.0


scaled_vjp.defvjp(lambda x: (scaled_vjp(x), None), lambda r, g: (SCALE * g,))


@pytest.mark.parametrize("fn", [scaled_rule, scaled_vjp], ids=["custom_jvp", "custom_vjp"])
def test_a_changed_rule_is_read_again(fn, monkeypatch):
    """The gradient function is transformed again, as Python would read the
    rule again: a global the rule reads, and the rule replaced (before: the
    first rule's numbers, with no error)."""
    grad = kt.grad(fn)
    close(grad(1.0), 2.0)
    monkeypatch.setitem(globals(), "SCALE", 5.0)
    close(grad(1.0), jax.grad(fn)(1.0))  # 5
    if fn is scaled_rule:
        monkeypatch.setattr(fn, "jvp", None)  # restored after the test
        fn.defjvp(lambda p, t: (fn(p[0]), 3.0 * t[0]))
    else:
        monkeypatch.setattr(fn, "bwd", None)
        fn.defvjp(lambda x: (fn(x), None), lambda r, g: (3.0 * g,))
    close(grad(1.0), 3.0)
    close(grad(1.0), jax.grad(fn)(1.0))
