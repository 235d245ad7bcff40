"""How a call binds to what is differentiated or compiled, and Python's exceptions.

- `kt.jit` of a gradient function binds keywords and defaults as the gradient
  function does (it is made again for kt.jit: `CompiledGraph.under_jit`); it
  compiled the gradient's graph and bound the call to the gradient's own
  signature, so a partial's keywords or a Cell's default arrived as a tuple
  and a dict, and `grad_position=(0, 1)` of a function with keyword-only
  parameters gave one gradient (silently).
- A default the caller leaves is a constant of the program, as in Python and
  as `jax.jit` never traces defaults: a default object (`cfg=Config()`) is
  no refused argument under kt.jit, and code run as Python (a `with`, `try`
  or `match`) sees the default object itself, so such a function may have
  defaults and keyword-only parameters; a bound method or callable object
  runs as Python too (a Cell's method is refused, saying why).
- `zip(strict=True)`, tuple unpacking and code run as Python raise Python's
  exceptions (ValueError, StopIteration, KeyError) with Python's messages.

Oracles: JAX on the same functions, Python running them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms

X = jnp.array([-1.0, 0.5, 2.0])
Y = jnp.array([0.3, -0.2, 1.5])


def close(a, b):
    jax.tree_util.tree_map(lambda u, v: np.testing.assert_allclose(u, v, rtol=1e-5), a, b)


# -- kt.jit of a gradient function binds as the gradient function ----------------
def mse(pred, target, weight=1.0):
    return jnp.mean((pred - target) ** 2 * weight)


def test_jit_of_a_gradient_of_a_partial_passes_its_keywords():
    g = functools.partial(mse, target=Y, weight=0.5)
    close(kt.jit(kt.grad(g))(X), jax.jit(jax.grad(g))(X))
    close(kt.jit(kt.value_and_grad(g))(X), jax.jit(jax.value_and_grad(g))(X))
    close(kt.jit(kt.grad(g))(X, weight=2.0), jax.grad(g)(X, weight=2.0))


class Scaled(ms.nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.array([1.0, 2.0, 3.0], np.float32)), name="w")

    def construct(self, x, scale=2.0):
        return ms.ops.reduce_sum((x * self.w) ** 2) * scale


class Power:
    def __call__(self, x, *, power=2):
        return jnp.sum(x**power) * 2.0


def test_jit_of_a_gradient_of_a_callable_with_defaults():
    """A Cell's `construct(x, scale=2.0)`, a `__call__` with a keyword-only
    default: the defaults arrived shifted (x a tuple, the default a dict)."""
    w = jnp.array([1.0, 2.0, 3.0])
    want = jax.grad(lambda x: jnp.sum((x * w) ** 2) * 2.0)(X)
    close(kt.jit(kt.grad(Scaled()))(X), want)
    close(ms.jit(ms.ops.GradOperation()(Scaled()))(X), want)
    want = jax.grad(lambda x: jnp.sum(x**3) * 2.0)(X)
    close(kt.jit(kt.grad(Power()))(X, power=3), want)


def keyword_only(x, y, *, k=2.0):
    return jnp.sum(jnp.sin(x) * y) * k


def defaulted(x, y, k=2.0):
    return jnp.sum(jnp.sin(x) * y) * k


@pytest.mark.parametrize("f", [keyword_only, defaulted])
def test_jit_of_a_gradient_gives_every_gradient_asked_for(f):
    """`grad_position=(0, 1)` of a function with a keyword-only parameter gave
    the first gradient only, and `GradOperation(get_all=True)` of a function
    with a default gave one for the default too, under kt.jit (silently)."""
    want = jax.grad(f, argnums=(0, 1))(X, Y)
    close(kt.jit(kt.grad(f, grad_position=(0, 1)))(X, Y), want)
    close(kt.jit(kt.GradOperation(get_all=True)(f))(X, Y), want)
    close(kt.jit(kt.grad(f, grad_position=(0, 1)))(X, Y, k=3.0), jax.grad(f, (0, 1))(X, Y, k=3.0))


# -- a default left to itself is a constant of the program -------------------------
@dataclasses.dataclass(frozen=True)
class Config:
    l2: float = 0.01


class Norm(enum.Enum):
    L1 = 1
    L2 = 2


def regularised(w, x, cfg=Config(), norm=Norm.L2):
    penalty = jnp.sum(w**2) if norm is Norm.L2 else jnp.sum(jnp.abs(w))
    return jnp.sum((x * w) ** 2) + cfg.l2 * penalty


def test_a_default_object_is_no_argument_of_a_jit():
    """kt.jit refused it ("was given a Config") though the caller passed none;
    jax.jit runs it (defaults are not traced)."""
    close(kt.jit(regularised)(Y, X), jax.jit(regularised)(Y, X))
    close(kt.jit(kt.grad(regularised))(Y, X), jax.jit(jax.grad(regularised))(Y, X))
    close(kt.grad(regularised)(Y, X), jax.grad(regularised)(Y, X))
    with pytest.raises(kt.KTransformError, match="was given a Config"):  # passed: as jax.jit
        kt.jit(regularised)(Y, X, Config(0.5))


# -- code run as Python: defaults, keyword-only parameters, methods -------------------
SEEN = []
UNSET = object()


def with_defaults(x, scale=2.0, marker=UNSET, *, power=2):
    with contextlib.nullcontext():
        SEEN.append((type(scale), marker is UNSET))
        return jnp.sum(jnp.tanh(x) ** power) * scale


def matches_a_default(x, kind="l2"):
    match kind:
        case "l1":
            return jnp.sum(jnp.abs(x))
        case _:
            return jnp.sum(x**2)


def reference(x, scale=2.0, power=2):
    return jnp.sum(jnp.tanh(x) ** power) * scale


def test_python_code_with_defaults_sees_the_default_objects():
    """A function run as Python (`with`, `match`) with defaults was refused;
    it runs, and sees Python's default objects (a float, not an array)."""
    SEEN.clear()
    close(kt.grad(with_defaults)(X), jax.grad(reference)(X))
    close(kt.jit(kt.grad(with_defaults))(X, power=3), jax.grad(reference)(X, power=3))
    close(kt.vjp(with_defaults, X)[1](1.0), jax.vjp(reference, X)[1](1.0))
    assert SEEN and all(seen == (float, True) for seen in SEEN)
    close(kt.grad(matches_a_default)(X), jax.grad(matches_a_default)(X))
    close(kt.grad(matches_a_default)(X, "l1"), jax.grad(matches_a_default)(X, "l1"))


class Model:
    def __init__(self, scale):
        self.scale = scale

    def loss(self, x):
        with contextlib.nullcontext():
            return jnp.sum(jnp.sin(x)) * self.scale

    def __call__(self, x):
        try:
            return self.loss(x)
        finally:
            pass


class GuardedCell(kt.Cell):
    def construct(self, x):
        with contextlib.nullcontext():
            return jnp.sum(x)


def test_a_bound_method_or_callable_object_runs_as_python():
    m = Model(2.0)
    close(kt.grad(m.loss)(X), jax.grad(m.loss)(X))
    close(kt.grad(m)(X), jax.grad(m)(X))
    with pytest.raises(kt.KTransformError, match="a Cell's method is not run as Python"):
        kt.grad(GuardedCell())(X)


def test_vjp_of_a_function_with_defaults():
    """vjp passed the cotangent as the defaulted parameter (a TypeError), and
    a keyword-only one failed binding."""
    for f in (defaulted, keyword_only):
        out, pullback = kt.vjp(f, X, Y)
        want_out, want_pullback = jax.vjp(f, X, Y)
        close(out, want_out)
        close(pullback(jnp.float32(1.0)), want_pullback(jnp.float32(1.0)))


# -- Python's exceptions --------------------------------------------------------------
def python_error(f, *args):
    try:
        f(*args)
    except Exception as exc:  # noqa: BLE001 - the oracle: what Python raises
        return type(exc), str(exc)
    return None


def zipped(ws, xs):
    return sum(jnp.sum(w * x) for w, x in zip(ws, xs, strict=True))


def zipped_loop(ws, xs, zs):
    total = 0.0
    for w, x, z in zip(ws, xs, zs, strict=True):
        total = total + jnp.sum(w * x * z)
    return total


def zipped_constants(w):
    return sum(jnp.sum(w * a) for a, _ in zip([1.0, 2.0], [1, 2, 3], strict=True))


@pytest.mark.parametrize(
    "f, args",
    [
        (zipped, ([X, X], [X])),
        (zipped, ([X], [X, X])),
        (zipped_loop, ([X, X], [X, X], [X])),
        (zipped_loop, ([X], [X, X], [X, X])),
        (zipped_constants, (X,)),
    ],
)
def test_zip_strict_raises_pythons_value_error(f, args):
    """It raised a KTransformError (at the transform, for lengths known
    then): a caller's `except ValueError` missed it."""
    kind, message = python_error(f, *args)
    assert kind is ValueError
    for ours in (kt.grad(f), kt.jit(f)):
        with pytest.raises(ValueError) as err:
            ours(*args)
        assert str(err.value) == message


def unpacks_two(ws):
    a, b = ws
    return jnp.sum(a * b)


def unpacks_at_least_two(ws):
    a, b, *rest = ws
    return jnp.sum(a * b) + len(rest)


@pytest.mark.parametrize("f", [unpacks_two, unpacks_at_least_two])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_unpacking_checks_the_number_of_values(f, n):
    """`a, b = ws` of three arrays took the first two (a number where Python
    raises); of one, an IndexError; starred, a bare AssertionError."""
    ws = [X * (k + 1) for k in range(n)]
    error = python_error(f, ws)
    if error is None:
        close(kt.grad(f)(ws), jax.grad(f)(ws))
        return
    with pytest.raises(error[0]) as err:
        kt.grad(f)(ws)
    assert str(err.value) == error[1]


def takes_next(xs):
    it = iter(xs[1:])
    return jnp.sum(xs[0] * next(it))


def pops_a_key(xs):
    d = {}
    return jnp.sum(xs[0] * d.pop("k"))


@pytest.mark.parametrize("f, kind", [(takes_next, StopIteration), (pops_a_key, KeyError)])
def test_an_exception_of_code_run_as_python_is_the_users(f, kind):
    """A function run as Python that raises (StopIteration from `next`, a
    KeyError) raised a KTransformError "JAX could not trace it"."""
    assert python_error(f, [X])[0] is kind
    with pytest.raises(kind):
        kt.grad(f)([X])
