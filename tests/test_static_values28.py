"""Values known while tracing: a JAX computation of constants and static
values (`int(jnp.ceil(alpha * x.shape[0]))`, `float(jnp.sqrt(2.0))`,
`jnp.arange(3).tolist()`, a slice bound `jnp.argmax(const)`) is concrete where
the program runs, also under the jit of graph mode, as `jax.grad` (no jit)
computes it; the gradient of a `*args` function called from transformed
code (`kt.grad(inner)(*a)` under kt.jit). Oracle: jax.grad of the same
functions, or closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([0.3, -0.1, 0.5, 0.2, 0.9, -0.4, 0.0, 0.7, 0.1, 0.6])


def cvar(losses, alpha=0.8):  # `alpha` left to its default: no jit traces it
    sorted_l = jnp.sort(losses)
    k = int(jnp.ceil(alpha * losses.shape[0]))
    return jnp.mean(sorted_l[k:])


def half_zeros(x):
    half = int(jnp.ceil(x.shape[0] / 2))
    return jnp.sum(jnp.zeros((half,)) + x[:half] ** 2)


def argmax_slice(x):
    idx = jnp.argmax(jnp.array([1.0, 5.0, 2.0]))
    return x[int(idx)] * 2.0 + x[idx:].sum()


def float_of_constant(x):
    return jnp.sum(x) * float(jnp.sqrt(2.0))


def tolist_of_constant(x):
    return sum(x[k] * (k + 1) for k in jnp.arange(3).tolist())


def item_of_constant(x):
    return jnp.sum(x) * jnp.array([1.0, 2.0, 3.0]).max().item()


@pytest.mark.parametrize(
    "fn",
    [cvar, half_zeros, argmax_slice, float_of_constant, tolist_of_constant, item_of_constant],
)
def test_values_computed_from_constants_are_concrete(mode, fn):
    np.testing.assert_allclose(kt.grad(fn)(X), jax.grad(fn)(X), rtol=1e-6)


def float_of_argument(x):
    return float(jnp.sqrt(x[0])) * jnp.sum(x)


def item_of_argument(x):
    return x.max().item() * jnp.sum(x)


class ScaledByOwnNorm(kt.Cell):
    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(jnp.array([2.0, 3.0]), name="w")

    def construct(self, x):
        return jnp.sum(self.w * x) * float(self.w.sum())


@pytest.mark.parametrize("fn", [float_of_argument, item_of_argument])
def test_a_python_value_of_a_differentiated_value_is_still_refused(fn):
    """Its value would be differentiated (jax.grad refuses it): never a Python
    number with no gradient (an argument's, a Parameter's)."""
    with pytest.raises((kt.KTransformError, jax.errors.ConcretizationTypeError)):
        kt.grad(fn)(jnp.array([4.0, 1.0]))
    net = ScaledByOwnNorm()
    with pytest.raises(kt.KTransformError, match="float"):
        kt.GradOperation(get_by_list=True)(net, net.trainable_params())(jnp.ones(2))


def cube(x):
    return jnp.sum(x**3)


def star_inner(*a):
    return jnp.sum(kt.grad(cube)(*a))


def star_outer(*a):
    return kt.grad(star_inner)(*a)


def nested_star(x):
    def inner(*a):
        return jnp.sum(a[0] ** 2)

    return kt.grad(inner)(x)


def test_gradient_of_a_star_args_function_called_in_transformed_code():
    """The graph of `inner(*a)` takes the `*a` tuple as one parameter: its
    gradient took the first argument for that tuple (a TypeError spreading
    the array, or a wrong value with no error)."""
    x = jnp.array([0.3, 1.2, 2.5])
    want = jax.grad(lambda x: jnp.sum(jax.grad(cube)(x)))(x)
    np.testing.assert_allclose(kt.jit(star_outer)(x), want, rtol=1e-6)
    np.testing.assert_allclose(kt.jit(nested_star)(x), 2 * x, rtol=1e-6)

    def total(x):
        return jnp.sum(nested_star(x))

    np.testing.assert_allclose(kt.grad(total)(x), 2 * jnp.ones(3), rtol=1e-6)


def hess_target(x):
    s = jnp.prod(x)

    def inner(y):  # a closure over `s`: `f` runs as Python
        return jnp.sum(y * y) * s

    return jnp.sum(kt.grad(inner)(x))


def test_jit_of_a_derivative_rerunning_python_code_names_the_line():
    with pytest.raises(kt.KTransformError) as info:
        kt.jit(kt.hessian(hess_target))(jnp.array([0.3, 1.2, 2.5]))
    message = str(info.value)
    assert "runs hess_target as Python" in message
    assert "return jnp.sum(kt.grad(inner)(x))" in message and "<unknown>" not in message


def piecewise_tax(x):
    a = jnp.piecewise(x, [x < 1.0, x >= 1.0], [lambda x: x**3, lambda x: x**2])
    b = jnp.piecewise(x, [x < 1.0, x >= 1.0], [lambda x: jnp.sin(x), lambda x: 5.0 * x])
    return jnp.sum(a * b)


def piecewise_closure(x, c):
    return jnp.sum(jnp.piecewise(x, [x < 1.0, x >= 1.0], [lambda x: c * x, lambda x: x]))


def test_library_call_given_lambdas_reading_no_values(mode):
    """A lambda reading none of the program's values is given to the library
    as the function itself: JAX's trace of the call differentiates it."""
    x = jnp.array([0.5, 2.0, 3.0])
    np.testing.assert_allclose(kt.grad(piecewise_tax)(x), jax.grad(piecewise_tax)(x), rtol=1e-6)
    with pytest.raises(kt.KTransformError, match="values a closure reads"):
        kt.grad(piecewise_closure, argnums=1)(x, 2.0)  # `c` would get no gradient


class PiecewiseWeight(kt.Cell):
    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(jnp.array(2.0), name="w")

    def construct(self, x):
        return jnp.sum(jnp.piecewise(x, [x < 1.0, x >= 1.0], [lambda x: self.w * x, jnp.sin]))


def test_library_call_given_a_lambda_reading_a_parameter_is_refused():
    """`self.w` read by the lambda: the library's trace would hold it as a
    constant, its gradient lost."""
    net = PiecewiseWeight()
    with pytest.raises(kt.KTransformError, match="values a closure reads"):
        kt.GradOperation(get_by_list=True)(net, net.trainable_params())(jnp.array([0.5, 2.0]))


def test_library_call_given_lambdas_second_order():
    x = jnp.array([0.5, 2.0, 3.0])
    np.testing.assert_allclose(
        kt.hessian(piecewise_tax)(x), jax.hessian(piecewise_tax)(x), rtol=1e-5, atol=1e-6
    )


MEMO_CALLS = []


def dft_matrix(n, _cache={}):  # noqa: B006 - a memo, as users write one
    MEMO_CALLS.append(n)
    if n not in _cache:
        k = np.arange(n)
        _cache[n] = np.cos(2 * np.pi * np.outer(k, k) / n)
    return _cache[n]


def dft_energy(x):
    return jnp.sum((dft_matrix(x.shape[0]) @ x) ** 2)


def test_a_memo_in_a_mutable_default_runs_as_python(mode):
    """`_cache[n] = ...` changes the default dict each call shares: the
    helper runs as Python (once per call, as Python runs it), not refused as
    a change of an argument "the caller also holds"."""
    x = jnp.array([0.1, 0.4, 0.3, 1.0])
    MEMO_CALLS.clear()
    np.testing.assert_allclose(kt.grad(dft_energy)(x), jax.grad(dft_energy)(x), rtol=1e-5)
    np.testing.assert_allclose(kt.grad(dft_energy)(x), jax.grad(dft_energy)(x), rtol=1e-5)
    assert MEMO_CALLS == [4] * 4  # two calls each of ours and JAX's


def cvar_given_alpha(losses, alpha):
    k = int(jnp.ceil(alpha * losses.shape[0]))
    return jnp.mean(jnp.sort(losses)[k:])


def test_a_traced_slice_bound_names_the_line():
    """`alpha` passed is traced by the jit, as jax.jit traces it: JAX's bare
    IndexError before, now a KTransformError naming the user's line."""
    with pytest.raises(kt.KTransformError, match="slice bound") as info:
        kt.grad(cvar_given_alpha)(X, 0.8)
    assert "return jnp.mean(jnp.sort(losses)[k:])" in str(info.value)
