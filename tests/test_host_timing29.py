"""When user Python runs, for code behind a cache or a trace cache (session 29).

DESIGN.md: user Python runs when Python (or JAX) would run it. Oracles: JAX on
the same code (its gradients, and how often its host code ran: prints, draws,
cache statistics), and Python's own counts.

- A program compiled with host code in it (`kt.jit(kt.grad(f))`) keeps the
  host values of its trace, as a `jax.jit` does; a NEW such object traces
  again, as a fresh `jax.jit(jax.grad(f))` does (programs are shared by
  gradient objects, their traces are not).
- `functools.lru_cache`/`functools.cache` helpers run through their cache.
- `jax.jit` / `partial(jax.jit, static_argnums=...)` / `jax.checkpoint`
  helpers: their Python runs when JAX traces them (once per signature).
- A `functools.cached_property` getter runs at the first call, not when the
  gradient function is made.
"""

import contextlib
import functools
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([0.3, -0.7, 1.1])


@pytest.fixture(autouse=True)
def graph_mode():
    yield
    kt.set_mode("graph")


def printed(fn, *args, calls: int = 1) -> tuple[int, list]:
    """The lines `fn(*args)` prints over `calls` calls, and the results."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        results = [np.asarray(fn(*args)) for _ in range(calls)]
    return buf.getvalue().count("\n"), results


# -- a new kt.jit of a gradient traces again --------------------------------------
SCALE = 1.0


def scaled(x):
    try:  # (run as Python: it reads SCALE when it runs)
        print("scaled runs")
        return SCALE * jnp.sin(x)
    finally:
        pass


def global_loss(x):
    return jnp.sum(scaled(x))


class Scaler:
    def __init__(self):
        self.s = 1.0

    def f(self, x):
        try:
            return self.s * jnp.sin(x)
        finally:
            pass


SCALER = Scaler()


def attribute_loss(x):
    return jnp.sum(SCALER.f(x))


def set_scale(value):
    global SCALE
    SCALE = value


@pytest.mark.parametrize(
    ("loss", "setter"),
    [(global_loss, set_scale), (attribute_loss, lambda v: setattr(SCALER, "s", v))],
)
def test_new_jit_of_grad_reads_host_values_again(loss, setter):
    setter(1.0)
    try:
        kept_kt, kept_jax = kt.jit(kt.grad(loss)), jax.jit(jax.grad(loss))
        before = jax.grad(loss)(X)
        np.testing.assert_allclose(kept_kt(X), before, rtol=1e-6)
        kept_jax(X)
        setter(3.0)
        after = jax.jit(jax.grad(loss))(X)  # a fresh jax.jit traces again
        np.testing.assert_allclose(kt.jit(kt.grad(loss))(X), after, rtol=1e-6)
        np.testing.assert_allclose(kt.grad(loss)(X), after, rtol=1e-6)
        # the same jitted object keeps its trace's value, as JAX's does
        np.testing.assert_allclose(kept_jax(X), before, rtol=1e-6)
        np.testing.assert_allclose(kept_kt(X), before, rtol=1e-6)
    finally:
        setter(1.0)


def test_new_jit_of_grad_runs_its_host_code_at_its_trace():
    """Each new `kt.jit(kt.grad(f))` prints at its first call (its trace), as
    each new `jax.jit(jax.grad(f))` does; later calls print nothing."""
    for make in (lambda: jax.jit(jax.grad(global_loss)), lambda: kt.jit(kt.grad(global_loss))):
        counts = [printed(make(), X, calls=2)[0] for _ in range(2)]
        assert counts == [1, 1]


# -- functools caches --------------------------------------------------------------
rng = np.random.default_rng(0)


@functools.lru_cache(maxsize=4)
def fixed_mask(n):
    print("drawing mask")  # Python: at the first call only
    return tuple(float(v) for v in (rng.random(n) > 0.5))


def masked_loss(x):
    return jnp.sum(jnp.array(fixed_mask(3)) * x**2)


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_lru_cache_helper_runs_through_its_cache(mode):
    global rng
    kt.set_mode(mode)
    seen = {}
    for name, g in [("jax", jax.grad(masked_loss)), ("kt", kt.grad(masked_loss))]:
        rng = np.random.default_rng(0)
        fixed_mask.cache_clear()
        count, results = printed(g, X, calls=3)
        seen[name] = (count, fixed_mask.cache_info(), results)
    assert seen["kt"][:2] == seen["jax"][:2]  # one print, hits=2, misses=1
    assert seen["kt"][0] == 1
    for got, want in zip(seen["kt"][2], seen["jax"][2], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@functools.cache
def cached_scale(x):
    return 2.0 * x


def test_lru_cache_given_an_array_raises_as_under_jax():
    def loss(x):
        return jnp.sum(cached_scale(x))

    with pytest.raises(TypeError, match="unhashable"):
        jax.grad(loss)(X)
    with pytest.raises((TypeError, kt.KTransformError), match="unhashable"):
        kt.grad(loss)(X)


class Poly:
    calls = 0

    @functools.lru_cache(maxsize=8)  # noqa: B019 -- the case tested
    def coefs(self, n):
        Poly.calls += 1
        return tuple(1.0 / (k + 1) for k in range(n))

    def __call__(self, x):
        c = self.coefs(3)
        return sum(ci * x**i for i, ci in enumerate(c))


def test_lru_cache_method_keeps_self():
    p = Poly()

    def loss(x):
        return jnp.sum(p(x))

    want = jax.grad(loss)(X)
    Poly.calls = 0
    g = kt.grad(loss)
    for _ in range(2):
        np.testing.assert_allclose(g(X), want, rtol=1e-6)
    assert Poly.calls == 0  # cached by the oracle's calls: Python runs it no more


# -- helpers JAX traces once -----------------------------------------------------------
def traced_once_helpers(rs):
    """New helpers (their trace caches empty) drawing from `rs`."""

    @jax.jit
    def noisy(x):
        print("tracing noisy")  # JAX: at the first trace only
        return x + rs.randn(3).astype(np.float32)  # drawn once, frozen into the program

    @functools.partial(jax.jit, static_argnums=1)
    def noisy_power(x, n):
        print("tracing noisy_power")  # once per value of n
        return x**n * rs.randn()

    def remat_body(x):
        print("tracing remat")
        return jnp.sin(x) * rs.randn()

    noisy_remat = jax.checkpoint(remat_body)
    return {
        "jit": lambda x: jnp.sum(noisy(x) ** 2),
        "static_argnums": lambda x: jnp.sum(
            noisy_power(x, 2) + noisy_power(x, 2) + noisy_power(x, 3)
        ),
        "checkpoint": lambda x: jnp.sum(noisy_remat(x) ** 2),
    }


@pytest.mark.parametrize("mode", ["graph", "eager"])
@pytest.mark.parametrize("kind", ["jit", "static_argnums", "checkpoint"])
def test_helper_traced_once_runs_its_python_at_trace(mode, kind):
    """Prints and draws of a `jax.jit`, `partial(jax.jit, static_argnums=1)`
    or `jax.checkpoint` helper happen when JAX traces it (once per input
    signature), and the draws are frozen: every call has JAX's gradient."""
    kt.set_mode(mode)
    seen = {}
    for name, make in [("jax", jax.grad), ("kt", kt.grad)]:
        loss = traced_once_helpers(np.random.RandomState(0))[kind]
        seen[name] = printed(make(loss), X, calls=3)
    assert seen["kt"][0] == seen["jax"][0]
    for got, want in zip(seen["kt"][1], seen["jax"][1], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5)


# -- functools.cached_property -----------------------------------------------------------
class Basis:
    runs = 0

    @functools.cached_property
    def weights(self):
        Basis.runs += 1
        return np.linspace(0.5, 1.5, 3).astype(np.float32)


@pytest.mark.parametrize("jit", [False, True])
def test_cached_property_getter_runs_at_the_first_call(jit):
    basis = Basis()

    def loss(x):
        return jnp.sum(basis.weights * jnp.sin(x))

    want = jax.grad(loss)(X)
    basis.__dict__.pop("weights")
    Basis.runs = 0
    g = kt.jit(kt.grad(loss)) if jit else kt.grad(loss)
    assert Basis.runs == 0  # making the gradient function runs nothing
    for _ in range(2):
        np.testing.assert_allclose(g(X), want, rtol=1e-6)
    assert Basis.runs == 1  # at the first call, as in Python


W = kt.Parameter(jnp.array([1.0, 2.0, 3.0]), name="w")


@jax.jit
def weighted(x):
    return jnp.sum(W * jnp.sin(x))


def test_jitted_helper_reading_a_parameter_keeps_its_gradient():
    """A Parameter read inside a `jax.jit` helper would be a constant of
    JAX's trace: such a helper is parsed, and the Parameter has its gradient
    (closed form: d/dW sum(W sin x) = sin x)."""

    def loss(x):
        return weighted(x)

    d_x, (d_w,) = kt.grad(loss, weights=[W])(X)
    np.testing.assert_allclose(d_x, jnp.cos(X) * W.data, rtol=1e-6)
    np.testing.assert_allclose(d_w, jnp.sin(X), rtol=1e-6)


def test_cached_function_as_the_target_raises_as_under_jax():
    with pytest.raises(TypeError, match="unhashable"):
        jax.grad(cached_scale)(1.0)
    with pytest.raises((TypeError, kt.KTransformError), match="unhashable"):
        kt.grad(cached_scale)(1.0)
