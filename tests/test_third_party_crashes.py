"""Internal crashes found in third-party code (optax, numpyro, jax-md,
jax-cosmo patterns), each checked against jax.grad / jax.jvp of the same
program."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.tree_util import register_pytree_node_class

import k_transform as kt


@pytest.fixture(autouse=True)
def x64():
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)


X = np.array([0.6, -0.3, 0.4, 0.2])  # float64; JAX's arrays of them are, under x64
V = np.array([1.0, 2.0, -0.5, 0.25])


def _check(f, *args, argnums=0):
    want = jax.grad(f, argnums=argnums)(*args)
    got = kt.grad(f, argnums=argnums)(*args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12)


def _check_jvp(f, x, v):
    want_out, want_t = jax.jvp(f, (x,), (v,))
    got_out, got_t = kt.jvp(f, (x,), (v,))
    np.testing.assert_allclose(np.asarray(got_out), np.asarray(want_out), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(got_t), np.asarray(want_t), rtol=1e-10, atol=1e-12)


# -- a library reduction passed as a value (repro_6) ------------------------------------
def _apply(a, reduce_fn):
    return reduce_fn(a)


def reduce_by_value(x):
    return _apply(jnp.sin(x), jnp.sum) + _apply(x, jnp.max) * _apply(x**2, jnp.mean)


def test_reduction_passed_as_value():
    """A primitive as a value, called with its trailing inputs left out: its
    fprop keeps the primitive's defaults (`jnp.sum(a)`, no axis)."""
    _check(reduce_by_value, X)


# -- kt.jvp of a function with a parameter left to its default (repro_7) ---------------
def scaled(x, scale=2.0, mode="sin", *, power=2, **unused):
    return (jnp.sin(x) if mode == "sin" else x) * scale**power


def test_jvp_leaves_defaults():
    _check_jvp(scaled, X, V)
    _check_jvp(lambda x: scaled(x, 3.0), X, V)


# -- isinstance against array types; .real/.imag of real arrays (repro_15) -------------
def abs_sq(x):
    if not isinstance(x, (np.ndarray, jnp.ndarray)):
        raise ValueError("NDarrays only")
    return jnp.sum(x * x)


def real_imag(x):
    return jnp.sum((x * x).real * x + (x * 3.0).imag + jnp.sin(x).conj() * x)


@pytest.mark.parametrize("f", [abs_sq, real_imag])
def test_array_type_checks_and_real_parts(f):
    _check(f, X)
    _check_jvp(f, X, V)


# -- x.at[i].get/min/max (repro_17) -------------------------------------------------------
def at_get(x):
    return jnp.sum(x.reshape(2, 2).at[:, 1].get() ** 3)


def at_min_ties(x):  # x[1] == x[2]: a tie shared with the kept entry; repeated index
    y = x.at[1].set(x[2])
    return jnp.sum(y.at[jnp.array([0, 0, 2])].min(y[1]) * jnp.arange(1.0, 5.0))


def at_max(x):
    return jnp.sum(jnp.sin(x.at[jnp.array([1, 2, 1])].max(x[:3] * 2.0)))


@pytest.mark.parametrize("f", [at_get, at_min_ties, at_max])
def test_at_helpers(f):
    _check(f, X)
    _check_jvp(f, X, V)


def at_divide(x):
    return jnp.sum(x.at[1].divide(2.0))


def test_at_helper_refused_by_name():
    with pytest.raises(kt.KTransformError, match=r"at\[index\]\.divide.*\n.*test_third_party"):
        kt.grad(at_divide)(X)


# -- **kwargs functions called as values (repro_8, repro_4, repro_3) -------------------
def shift_fn(R, dR, **unused_kwargs):
    return R + dR


def _position_step(R, P, shift, dt):
    return shift(R, dt * P)


def md_loss(R):
    return jnp.sum(jnp.sin(_position_step(R, R**2, shift_fn, 0.1)))


def test_kwargs_function_passed_as_value():
    _check(md_loss, X)
    np.testing.assert_allclose(kt.jit(md_loss)(X), md_loss(X), rtol=1e-12)


def _metric(displacement):
    return lambda Ra, Rb, **kwargs: jnp.sum(displacement(Ra, Rb) ** 2)


def _map_product(fn):
    def mapped(Ra, Rb):
        return jax.vmap(lambda a: fn(a, Rb))(Ra)

    return mapped


def _sub(a, b):
    return a - b


_M = _metric(_sub)
_M3 = lambda Ra, Rb, **kwargs: jnp.sum((Ra - Rb) ** 2)  # noqa: E731


def metric_energy(R):
    return jnp.sum(_map_product(_M)(R, R[0]) ** 1.5)


def vmapped_kwargs_lambda(R):
    return jnp.sum(jax.vmap(_M3, (0, None))(R, R[0]) ** 1.5)


@pytest.mark.parametrize("f", [metric_energy, vmapped_kwargs_lambda])
def test_kwargs_lambda_under_vmap(f):
    _check(f, jnp.arange(6.0).reshape(3, 2) ** 1.3)


# -- math.* and round() on shapes are Python's (repro_12) -------------------------------
def vec_to_tril(t):
    n = round((math.sqrt(1 + 8 * t.shape[-1]) - 1) / 2)
    tril = jnp.zeros((n, n)).at[jnp.tril_indices(n)].set(t)
    return jnp.sum(tril * jnp.arange(n * n).reshape(n, n)) * math.floor(math.sqrt(t.shape[0]))


def test_math_on_shapes():
    _check(vec_to_tril, jnp.arange(6.0))


def test_math_on_traced_float_still_differentiated():
    def f(x, s):
        return math.sqrt(s) * jnp.sum(x) + abs(x.shape[0] - 6) * jnp.sum(x)

    got = kt.grad(f, argnums=1)(jnp.arange(4.0), 2.0)
    np.testing.assert_allclose(got, 6.0 / (2 * math.sqrt(2.0)), rtol=1e-12)


# -- a registered pytree class through a jaxpr import (repro_10) ------------------------
@register_pytree_node_class
class Cosmo:
    def __init__(self, Om, h):
        self._Om = Om
        self._h = h
        self._workspace = {}

    def tree_flatten(self):
        return (self._Om, self._h), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


def _chi(cosmo, a):
    if "chi" not in cosmo._workspace:

        def step(y, x):
            y = y + cosmo._h / jnp.sqrt(cosmo._Om * jnp.exp(-3 * x) + 1.0 - cosmo._Om)
            return y, y

        _, tab = jax.lax.scan(step, 0.0, jnp.linspace(-1.0, 0.0, 8))
        cosmo._workspace["chi"] = tab
    return jnp.sum(cosmo._workspace["chi"]) * a


def cosmo_loss(c):
    return _chi(c, 2.0)


def test_pytree_class_through_jaxpr_import():
    c = Cosmo(jnp.array(0.3), jnp.array(0.7))
    want, got = jax.grad(cosmo_loss)(c), kt.grad(cosmo_loss)(c)
    assert isinstance(got, Cosmo)
    np.testing.assert_allclose(got._Om, want._Om, rtol=1e-10)
    np.testing.assert_allclose(got._h, want._h, rtol=1e-10)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class _Weights:
    w: jax.Array
    power: float = dataclasses.field(metadata={"static": True}, default=2.0)


class _Box:
    pass


def _boxed(q):  # an attribute assignment: runs as Python, through a jaxpr import
    box = _Box()
    box.v = q.w**q.power
    return jnp.sum(box.v * jnp.sin(q.w))


def test_dataclass_through_jaxpr_import():
    q = _Weights(jnp.array([1.5, -0.5]))
    np.testing.assert_allclose(kt.grad(_boxed)(q).w, jax.grad(_boxed)(q).w, rtol=1e-10)


# -- an f-string computing an einsum spec (repro_1 of jax-md's raw_transform) ---------
def _scale(box, r):
    idx = "".join([chr(ord("a") + i) for i in range(r.ndim - 1)]) + "i"
    return jnp.einsum(f"i,{idx}->{idx}", box, r)


def _displacement(ra, rb, perturbation=None):
    dr = ra - rb
    if perturbation is not None:
        dr = _scale(perturbation, dr)
    return dr


def test_an_f_string_is_a_python_value():
    """An f-string's value is a str with no gradient: it was a library call
    k_transform tried to differentiate, refused even in a branch not taken."""
    _check(lambda r: jnp.sum(_displacement(r, 2.0 * r) ** 2), X[:3])
    _check(lambda r: jnp.sum(_displacement(r, 0.5 * r, 1.0 + r) ** 2), X[:3])


# -- `**kwargs` forwarded into a function taking `**kwargs` (jax-md's energies) ---------
def _lennard_jones(dr, sigma=1.0, epsilon=1.0, **unused):
    return epsilon * (sigma / dr) ** 6


def _with_cutoff(dr, **kwargs):
    return _lennard_jones(dr, **kwargs)


def _energy_of(dr, epsilon):
    kw = {k: v for k, v in {"sigma": 0.5, "epsilon": epsilon}.items()}
    return jnp.sum(_with_cutoff(dr) + _with_cutoff(dr, **kw))


def test_kwargs_forwarded_into_a_kwargs_function():
    """The keywords a `**kwargs` parameter collects were picked by iterating
    the dict, which parsed code refuses: "iterating a dict here is not
    supported", with no line. They are picked from its keys."""
    dr = np.array([1.0, 2.0, 3.0])
    _check(_energy_of, dr, 2.0, argnums=0)
    _check(_energy_of, dr, 2.0, argnums=1)


# -- `jax.vmap(f)` returned from a helper (jax-md's `space.map_product`) -----------------
def _pair_displacement(ra, rb):
    return ra - rb


def _map_product(fn):
    return jax.vmap(jax.vmap(fn, (0, None), 0), (None, 0), 0)


def _map_rows(fn):
    return jax.vmap(fn, (0, None), 0)


def _pair_energy(r):
    dr = _map_product(_pair_displacement)(r, 0.5 * r) + 1.0
    return jnp.sum(jnp.sum(dr**2, axis=-1) ** 1.5) + jnp.sum(_map_rows(_pair_displacement)(r, r[0]))


def test_a_vmapped_function_returned_from_a_helper():
    """A vmapped function passed on or returned was a value with no rule
    ("no bprop is registered for Vmapped"); it is now the function
    `lambda *a: jax.vmap(f, ...)(*a)`, which the caller's call parses."""
    r = np.arange(6.0).reshape(3, 2) ** 1.3
    _check(_pair_energy, r)
    close_jvp = jax.jvp(_pair_energy, (r,), (r,))
    got = kt.jvp(_pair_energy, (r,), (r,))
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(close_jvp[1]), rtol=1e-10)


# -- a pytree class made by code run as Python (jax-cosmo's Cosmology, jax-md's state) ---
@register_pytree_node_class
class _Cosmo:
    def __init__(self, omega_c, h):
        self._omega_c = omega_c
        self._h = h

    def tree_flatten(self):
        return (self._omega_c, self._h), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


def _make_cosmo(p):
    return _Cosmo(p[0], p[1])


def _hubble(c, a):
    return c._h * jnp.sqrt(c._omega_c / a**3 + 1.0 - c._omega_c)


def _hubble_loss(p):
    return jnp.sum(_hubble(_make_cosmo(p), jnp.array([0.5, 0.8])))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _State:
    position: jax.Array
    momentum: jax.Array

    def set(self, **kwargs):
        return dataclasses.replace(self, **kwargs)


def _kick(r):
    s = _State(r, 2.0 * r)
    s = s.set(momentum=s.momentum + 0.1 * jnp.sin(s.position))
    return jnp.sum(s.momentum**2)


@pytest.mark.parametrize("f", [_hubble_loss, _kick], ids=["class", "dataclass_set"])
def test_a_pytree_node_returned_by_code_run_as_python(f):
    """A call imported from its jaxpr returning a registered class or a
    dataclass was refused ("it returns a Cosmo, not arrays in tuples");
    its result is now rebuilt from its leaves (`Unflatten`), and kt.jvp
    gave a zero tangent where grad refused."""
    p = np.array([0.3, 0.7])
    _check(f, p)
    _check_jvp(f, p, np.array([1.0, -0.5]))
    np.testing.assert_allclose(kt.hessian(f)(p), jax.hessian(f)(p), rtol=1e-10, atol=1e-12)


# -- small things of real code ----------------------------------------------------------
class _AttrDict(dict):
    """A config read by attribute: `__getattr__` raises KeyError, not AttributeError."""

    __getattr__ = dict.__getitem__


_CFG = _AttrDict(scale=2.0)


def _scaled(x):
    return jnp.sum(_CFG.scale * x**2)


def _scalar_tensordot(x):
    return jnp.sum(jnp.tensordot(x[0], x, 0))


def _inner_grad_of_a_broadcast(x):
    return jax.grad(lambda m: jnp.sum(m * jnp.ones(2)))(x[0]) ** 2 + jnp.sum(x)


@pytest.mark.parametrize("f", [_scaled, _scalar_tensordot, _inner_grad_of_a_broadcast])
def test_crashes_of_small_things(f):
    """A global whose `__getattr__` raises KeyError crashed the parser's
    `__kt_*__` probes; a `dot_general` with a scalar operand raised an
    IndexError; `jax.grad` inside the code gives a `convert_element_type`
    a trivial `sharding` the importer refused."""
    _check(f, X[:3])
