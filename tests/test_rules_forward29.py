"""Forward mode through users' gradient rules (linear ones only), clamped
`.at[]` updates, `kt.jit(f)(x)` inside differentiated code (session 29)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64")

X = np.array([0.2, 0.7, -1.3])
V = np.array([1.0, -2.0, 0.5])


# -- forward mode transposes a user's rule: refused unless linear in dout -------------
@jax.custom_vjp
def clip_gradient(x):
    return x


clip_gradient.defvjp(lambda x: (x, None), lambda r, g: (jnp.clip(g, -0.1, 0.1),))


def clipped_loss(x):
    return jnp.sum(clip_gradient(jnp.sin(x)) ** 2)


@pytest.mark.parametrize(
    "forward",
    [lambda f: kt.jvp(f, X, V), lambda f: kt.jacfwd(f)(X)],
    ids=["jvp", "jacfwd"],
)
def test_nonlinear_custom_vjp_rule_refuses_forward_mode(forward):
    # was: the plain function's derivative, silently not grad's clipped one
    # (JAX refuses jvp of any custom_vjp)
    with pytest.raises(kt.KTransformError) as info:
        forward(clipped_loss)
    text = str(info.value)
    assert "clip_gradient" in text and "linear" in text
    assert "jnp.clip(g, -0.1, 0.1)" in text  # the rule's line
    assert "clip_gradient(jnp.sin(x))" in text  # the call's line


def test_nonlinear_custom_vjp_reverse_and_forward_over_reverse_as_jax():
    np.testing.assert_allclose(kt.grad(clipped_loss)(X), jax.grad(clipped_loss)(X))
    hess = jax.hessian(clipped_loss)(X)  # JAX differentiates bwd as code here
    np.testing.assert_allclose(kt.hessian(clipped_loss)(X), hess, atol=1e-12)
    np.testing.assert_allclose(kt.jacfwd(kt.jacrev(clipped_loss))(X), hess, atol=1e-12)


@jax.custom_vjp
def relu_gate(x):
    return x


relu_gate.defvjp(lambda x: (x, x), lambda r, g: (jnp.where(r > 0, 2.0 * g, 0.0),))


def test_linear_custom_vjp_rule_keeps_forward_mode():
    def f(x):
        return jnp.sum(relu_gate(jnp.sin(x)) ** 2)

    want = jax.grad(f)(X)  # the rule's gradient; jvp must be its J v
    np.testing.assert_allclose(kt.jvp(f, X, V)[1], want @ V)
    np.testing.assert_allclose(kt.jacfwd(f)(X), want)


class ClipGrad(kt.Primitive):
    def impl(self, x):
        return x


@kt.bprop_getters.register(ClipGrad)
def _get_bprop_clip(self):
    def bprop(x, out, dout):
        return (jnp.clip(dout, -0.1, 0.1),)

    return bprop


class Triple(kt.Primitive):
    def impl(self, x):
        return x


@kt.bprop_getters.register(Triple)
def _get_bprop_triple(self):
    def bprop(x, out, dout):
        scaled = jnp.reshape(dout * 3.0, jnp.shape(x))
        return (jnp.zeros_like(x) + scaled,)

    return bprop


class Shifted(kt.Primitive):
    def impl(self, x):
        return x


@kt.bprop_getters.register(Shifted)
def _get_bprop_shifted(self):
    def bprop(x, out, dout):
        return (dout + 1.0,)  # affine: jacrev's rows are bprop(e_i), not a linear map

    return bprop


def test_registered_rules_forward_mode():
    clip, triple, shifted = ClipGrad(), Triple(), Shifted()
    with pytest.raises(kt.KTransformError, match="bprop of ClipGrad"):
        kt.jacfwd(lambda x: jnp.sum(clip(jnp.sin(x)) ** 2))(X)
    with pytest.raises(kt.KTransformError, match="does not depend on it"):
        kt.jvp(lambda x: jnp.sum(shifted(x) ** 2), X, V)
    # no tangent goes through the rule (a constant input): forward mode as before
    c = np.array([1.0, 2.0, 3.0])

    def scaled(x):
        return jnp.sum(x * clip(c))

    np.testing.assert_allclose(kt.jvp(scaled, X, V)[1], V @ c)
    # a linear rule: J v is the rule's (closed form: 3 * 2 sin(x) cos(x))
    jac = kt.jacfwd(lambda x: jnp.sum(triple(jnp.sin(x)) ** 2))(X)
    np.testing.assert_allclose(jac, 6 * jnp.sin(X) * jnp.cos(X))


class ClipCell(kt.nn.Cell):
    def construct(self, x):
        return x * 1.0

    def bprop(self, x, out, dout):
        return (jnp.maximum(jnp.minimum(dout, 0.1), -0.1),)


class ScaleCell(kt.nn.Cell):
    def construct(self, x):
        return x * 1.0

    def bprop(self, x, out, dout):
        return (3.0 * dout,)


def test_cell_bprop_forward_mode():
    # MindSpore 2.x: ops.jvp uses a linear Cell bprop (3 dout here: its J v is
    # grad @ v) and gives zeros for this clipping one (checked with its venv)
    lin, clip = ScaleCell(), ClipCell()
    np.testing.assert_allclose(
        kt.jvp(lambda x: jnp.sum(lin(jnp.sin(x)) ** 2), X, V)[1],
        (6 * jnp.sin(X) * jnp.cos(X)) @ V,
    )
    with pytest.raises(kt.KTransformError, match="ClipCell"):
        kt.jvp(lambda x: jnp.sum(clip(jnp.sin(x)) ** 2), X, V)


# -- `.at[i].<update>(v, mode="clip")` -----------------------------------------------
XS = np.array([0.1, -0.4, 0.9, 1.3, 0.5])
M = np.arange(12.0).reshape(3, 4) / 7 - 0.5

CLIPPED = {
    "set": lambda x, m: jnp.sum(x.at[jnp.array([7, -1])].set(x[:2] * 3, mode="clip") ** 3),
    "set_int": lambda x, m: jnp.sum(x.at[-9].set(x[1] * 2, mode="clip") ** 3),
    "add": lambda x, m: jnp.sum(x.at[jnp.array([5, 2, -8])].add(x[:3] ** 2, mode="clip") ** 2),
    "2d": lambda x, m: jnp.sum(m.at[5, jnp.array([-1, 9])].set(x[:2], mode="clip") ** 2 * m),
    "ellipsis": lambda x, m: jnp.sum(m.at[..., 7].add(x[:3], mode="clip") ** 2 * m),
    "add_drop": lambda x, m: jnp.sum(x.at[jnp.array([7, 1])].add(x[:2] * 3, mode="drop") ** 3),
    "get_fill": lambda x, m: jnp.sum(x.at[jnp.array([7, 1])].get(mode="fill", fill_value=2.0)),
}


@pytest.mark.parametrize("name", list(CLIPPED))
def test_clipped_updates_as_jax(name):
    f = CLIPPED[name]
    want = jax.grad(f, argnums=(0, 1))(XS, M)
    got = kt.grad(f, grad_position=(0, 1))(XS, M)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-12)


CLAMPED = {  # (as written, the same update at the index clamped by hand)
    "multiply": (
        lambda x: x.at[jnp.array([6, -9])].multiply(x[2:4] - 0.5, mode="clip"),
        lambda x: x.at[jnp.array([4, 0])].multiply(x[2:4] - 0.5, unique_indices=True),
    ),
    "min": (
        lambda x: x.at[jnp.array([6, -9])].min(x[2:4] - 0.5, mode="clip"),
        lambda x: x.at[jnp.array([4, 0])].min(x[2:4] - 0.5),
    ),
    "max": (
        lambda x: x.at[jnp.array([6, -9])].max(x[2:4] + 0.5, mode="clip"),
        lambda x: x.at[jnp.array([4, 0])].max(x[2:4] + 0.5),
    ),
}


@pytest.mark.parametrize("op", list(CLAMPED))
def test_clipped_multiply_min_max(op):
    # JAX's own gradient of these clipped scatters is refused (multiply) or
    # infinite (min, max): the oracle is the same update at the clamped index
    ours, clamped = CLAMPED[op]
    np.testing.assert_allclose(
        kt.grad(lambda x: jnp.sum(ours(x) ** 2))(XS),
        jax.grad(lambda x: jnp.sum(clamped(x) ** 2))(XS),
    )
    np.testing.assert_allclose(ours(jnp.asarray(XS)), clamped(jnp.asarray(XS)))


# -- kt.jit(f)(x) inside differentiated code: f, as jax.jit(f)(x) is there ---------
def test_inline_kt_jit_is_its_function():
    def loss(x):
        return jnp.sum(kt.jit(lambda y: jnp.sin(y) * jnp.sum(y**2))(x))

    def loss_jax(x):
        return jnp.sum(jax.jit(lambda y: jnp.sin(y) * jnp.sum(y**2))(x))

    np.testing.assert_allclose(kt.grad(loss)(X), jax.grad(loss_jax)(X))


class MyRelu(kt.Primitive):
    def impl(self, x):
        return jnp.maximum(x, 0.0)


@kt.bprop_getters.register(MyRelu)
def _get_bprop_my_relu(self):
    def bprop(x, out, dout):
        return (jnp.where(x > 0, dout, 0.0),)  # linear in dout; the impl is not

    return bprop


class ReluGate(kt.Primitive):
    def impl(self, x):
        return x


RELU = MyRelu()


@kt.bprop_getters.register(ReluGate)
def _get_bprop_relu_gate(self):
    def bprop(x, out, dout):
        return (RELU(dout),)  # not linear in dout (jvp gave 0, grad @ v 1.25)

    return bprop


def test_another_users_primitive_on_dout_is_not_taken_as_linear():
    gate = ReluGate()

    def f(x):
        return jnp.sum(gate(jnp.sin(x)) * jnp.array([1.0, -1.0, 2.0]))

    with pytest.raises(kt.KTransformError, match="bprop of ReluGate"):
        kt.jvp(f, X, V)
