"""Every public callable of `jax.numpy`, `jax.nn` and `jax.scipy.special`, classified.

Each public callable of the three namespaces is in exactly one of:

- `CASES`: differentiable in JAX, with a way to call it (`name -> (kind, fn)`;
  `kind` names the inputs in `INPUTS`, `fn` is None to call the library
  function itself on them, or a lambda giving the other arguments);
- `EXCLUDED` (`name -> reason`): not differentiable in JAX (integer or boolean
  results, comparisons, constructors, dtype and shape queries, I/O, ...) or
  needing arguments this generator does not make;
- a class (dtypes, scalar types, `ndarray`, `ufunc`): excluded by rule.

`test_every_public_callable_is_classified` fails when a new JAX version adds a
function, until it is classified here.

For each case, the program `f(x) = sum(sin(fn(x)))` (or of `fn(x, y)`) is
differentiated by k_transform and compared, in float64, with JAX as the
oracle: `kt.grad` against `jax.grad` (w.r.t. every input), `kt.jvp` against
`jax.jvp`, and a second derivative (the gradient of `<grad f, V>`) against
JAX's. Inputs stay away from ties, kinks and the edges of each domain. The
cases in `KNOWN_FAILING` (`name -> why`) are those k_transform refuses or
gets wrong; they are checked to still fail, so fixing one means moving it
out. `test_pass_rate` asserts that at least `MIN_PASS_RATE` of the cases pass.

Most of these functions have no primitive of ours: they are imported from
their jaxprs (`k_transform/frontend/jaxpr.py`, `k_transform/ops/lax_rules.py`).
The sweep runs in eager mode (the generated code op by op), which is the
faster of the two modes for programs run once.

Cost: about 280 s of CPU for the whole file (JAX 0.10.2, 2 busy cores), over
the ~90 s budget: per case, k_transform's transforms and code generation,
tracing, and one XLA compilation per side.
"""

from __future__ import annotations

import inspect

import jax
import jax.nn as jnn
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import k_transform as kt

NAMESPACES = {"jnp": jnp, "nn": jnn, "jsp": jsp}

# numpy float64 inputs (jnp arrays made at import would be float32 or leak the
# x64 switch); shapes are tiny to keep the sweep fast.
RNG = np.random.default_rng(0)
X = RNG.uniform(0.15, 0.85, (2, 3))  # distinct, in (0, 1)
Y = RNG.uniform(0.15, 0.85, (2, 3))
V = RNG.normal(size=(2, 3))
W = RNG.normal(size=(2, 3))
VEC = RNG.uniform(0.15, 0.85, 4)
VEC2 = RNG.uniform(0.15, 0.85, 4)
MAT = np.eye(3) * 2.0 + RNG.uniform(-0.3, 0.3, (3, 3))  # well conditioned
MAT2 = RNG.uniform(-0.5, 0.5, (3, 3))

# kind -> inputs. x: in (0, 1); sym: in (-0.35, 0.35); big: in (1.65, 2.35).
INPUTS = {
    "x": (X,),
    "sym": (X - 0.5,),
    "big": (X + 1.5,),
    "xy": (X, Y),
    "xy_sym": (X, Y - 0.5),  # y of both signs
    "big2": (X + 1.5, Y + 1.5),
    "vec": (VEC,),
    "vv": (VEC, VEC2),
    "mat": (MAT,),
    "mm": (MAT, MAT2),
}

IDX = np.array([2, 0, 1])
IDX2 = np.array([IDX, IDX[::-1]])
MASK = np.array([[True, False, True], [False, True, True]])

# fmt: off
CASES = {
    # -- jax.numpy: unary elementwise -------------------------------------------------
    "jnp.abs": ("sym", None),
    "jnp.absolute": ("sym", None),
    "jnp.acos": ("x", None),
    "jnp.acosh": ("big", None),
    "jnp.angle": ("x", None),
    "jnp.arccos": ("x", None),
    "jnp.arccosh": ("big", None),
    "jnp.arcsin": ("x", None),
    "jnp.arcsinh": ("sym", None),
    "jnp.arctan": ("sym", None),
    "jnp.arctanh": ("sym", None),
    "jnp.around": ("x", lambda x: jnp.around(3.0 * x)),
    "jnp.asin": ("x", None),
    "jnp.asinh": ("sym", None),
    "jnp.atan": ("sym", None),
    "jnp.atanh": ("sym", None),
    "jnp.cbrt": ("x", None),
    "jnp.ceil": ("x", lambda x: jnp.ceil(3.0 * x)),
    "jnp.conj": ("x", None),
    "jnp.conjugate": ("x", None),
    "jnp.cos": ("x", None),
    "jnp.cosh": ("x", None),
    "jnp.deg2rad": ("x", None),
    "jnp.degrees": ("x", None),
    "jnp.exp": ("x", None),
    "jnp.exp2": ("x", None),
    "jnp.expm1": ("x", None),
    "jnp.fabs": ("sym", None),
    "jnp.floor": ("x", lambda x: jnp.floor(3.0 * x)),
    "jnp.frexp": ("big", lambda x: jnp.frexp(x)[0]),
    "jnp.i0": ("x", None),
    "jnp.imag": ("x", None),
    "jnp.ldexp": ("x", lambda x: jnp.ldexp(x, 2)),
    "jnp.log": ("x", None),
    "jnp.log10": ("x", None),
    "jnp.log1p": ("x", None),
    "jnp.log2": ("x", None),
    "jnp.modf": ("x", lambda x: jnp.modf(3.0 * x)[0]),
    "jnp.nan_to_num": ("x", None),
    "jnp.negative": ("x", None),
    "jnp.positive": ("x", None),
    "jnp.rad2deg": ("x", None),
    "jnp.radians": ("x", None),
    "jnp.real": ("x", None),
    "jnp.reciprocal": ("x", None),
    "jnp.rint": ("x", lambda x: jnp.rint(3.0 * x)),
    "jnp.round": ("x", lambda x: jnp.round(3.0 * x)),
    "jnp.sign": ("sym", None),
    "jnp.sin": ("x", None),
    "jnp.sinc": ("x", None),
    "jnp.sinh": ("x", None),
    "jnp.sqrt": ("x", None),
    "jnp.square": ("x", None),
    "jnp.tan": ("x", None),
    "jnp.tanh": ("x", None),
    "jnp.trunc": ("x", lambda x: jnp.trunc(3.0 * x)),
    "jnp.unwrap": ("x", lambda x: jnp.unwrap(8.0 * x)),
    # -- jax.numpy: binary elementwise ------------------------------------------------
    "jnp.add": ("xy", None),
    "jnp.arctan2": ("xy_sym", None),
    "jnp.atan2": ("xy_sym", None),
    "jnp.copysign": ("xy_sym", None),
    "jnp.divide": ("xy", None),
    "jnp.divmod": ("xy", lambda a, b: jnp.divmod(3.0 * a, b)[1]),
    "jnp.float_power": ("xy", None),
    "jnp.floor_divide": ("xy", lambda a, b: jnp.floor_divide(3.0 * a, b)),
    "jnp.fmax": ("xy", None),
    "jnp.fmin": ("xy", None),
    "jnp.fmod": ("xy", lambda a, b: jnp.fmod(3.0 * a, b)),
    "jnp.heaviside": ("xy_sym", lambda a, b: jnp.heaviside(b, a)),
    "jnp.hypot": ("xy", None),
    "jnp.logaddexp": ("xy", None),
    "jnp.logaddexp2": ("xy", None),
    "jnp.maximum": ("xy", None),
    "jnp.minimum": ("xy", None),
    "jnp.mod": ("xy", lambda a, b: jnp.mod(3.0 * a, b)),
    "jnp.multiply": ("xy", None),
    "jnp.pow": ("xy", None),
    "jnp.power": ("xy", None),
    "jnp.remainder": ("xy", lambda a, b: jnp.remainder(3.0 * a, b)),
    "jnp.subtract": ("xy", None),
    "jnp.true_divide": ("xy", None),
    "jnp.where": ("xy", lambda a, b: jnp.where(a > 0.5, a, b)),
    # -- jax.numpy: reductions and statistics -----------------------------------------
    "jnp.amax": ("x", lambda x: jnp.amax(x, axis=1)),
    "jnp.amin": ("x", lambda x: jnp.amin(x, axis=0)),
    "jnp.average": ("xy", lambda a, b: jnp.average(a, axis=1, weights=b)),
    "jnp.corrcoef": ("x", None),
    "jnp.cov": ("x", None),
    "jnp.cumprod": ("x", lambda x: jnp.cumprod(x, axis=1)),
    "jnp.cumsum": ("x", lambda x: jnp.cumsum(x, axis=1)),
    "jnp.cumulative_prod": ("x", lambda x: jnp.cumulative_prod(x, axis=1)),
    "jnp.cumulative_sum": ("x", lambda x: jnp.cumulative_sum(x, axis=1)),
    "jnp.diff": ("x", None),
    "jnp.ediff1d": ("x", None),
    "jnp.gradient": ("x", lambda x: jnp.gradient(x, axis=1)),
    "jnp.max": ("x", lambda x: jnp.max(x, axis=1)),
    "jnp.mean": ("x", lambda x: jnp.mean(x, axis=0)),
    "jnp.median": ("x", lambda x: jnp.median(x, axis=1)),
    "jnp.min": ("x", None),
    "jnp.nancumprod": ("x", lambda x: jnp.nancumprod(x, axis=1)),
    "jnp.nancumsum": ("x", lambda x: jnp.nancumsum(x, axis=0)),
    "jnp.nanmax": ("x", None),
    "jnp.nanmean": ("x", None),
    "jnp.nanmedian": ("x", None),
    "jnp.nanmin": ("x", None),
    "jnp.nanpercentile": ("x", lambda x: jnp.nanpercentile(x, 30.0)),
    "jnp.nanprod": ("x", None),
    "jnp.nanquantile": ("x", lambda x: jnp.nanquantile(x, 0.3, axis=1)),
    "jnp.nanstd": ("x", None),
    "jnp.nansum": ("x", None),
    "jnp.nanvar": ("x", None),
    "jnp.percentile": ("x", lambda x: jnp.percentile(x, 30.0, axis=1)),
    "jnp.prod": ("x", None),
    "jnp.ptp": ("x", lambda x: jnp.ptp(x, axis=1)),
    "jnp.quantile": ("x", lambda x: jnp.quantile(x, 0.3)),
    "jnp.std": ("x", None),
    "jnp.sum": ("x", lambda x: jnp.sum(x, axis=1)),
    "jnp.trapezoid": ("x", None),
    "jnp.var": ("x", lambda x: jnp.var(x, axis=0)),
    # -- jax.numpy: products and linear algebra ---------------------------------------
    "jnp.convolve": ("vv", None),
    "jnp.correlate": ("vv", lambda a, b: jnp.correlate(a, b, mode="full")),
    "jnp.cross": ("xy", None),
    "jnp.dot": ("mm", None),
    "jnp.einsum": ("xy", lambda a, b: jnp.einsum("ij,kj->ik", a, b)),
    "jnp.inner": ("xy", None),
    "jnp.kron": ("xy", None),
    "jnp.matmul": ("mm", None),
    "jnp.matvec": ("xy", lambda a, b: jnp.matvec(a, b[0])),
    "jnp.outer": ("xy", None),
    "jnp.tensordot": ("xy", lambda a, b: jnp.tensordot(a, b, axes=((1,), (1,)))),
    "jnp.trace": ("mat", None),
    "jnp.vdot": ("xy", None),
    "jnp.vecdot": ("xy", None),
    "jnp.vecmat": ("xy", lambda a, b: jnp.vecmat(a[0], b.T)),
    # -- jax.numpy: shapes, joins, splits, indexing ------------------------------------
    "jnp.append": ("xy", None),
    "jnp.apply_along_axis": ("x", lambda x: jnp.apply_along_axis(jnp.cumsum, 1, x)),
    "jnp.apply_over_axes": ("x", lambda x: jnp.apply_over_axes(jnp.sum, x, [1])),
    "jnp.array": ("x", None),
    "jnp.array_split": ("x", lambda x: jnp.array_split(x, 2, axis=1)[0]),
    "jnp.asarray": ("x", None),
    "jnp.astype": ("x", lambda x: jnp.astype(x, jnp.float32)),
    "jnp.atleast_1d": ("x", None),
    "jnp.atleast_2d": ("x", None),
    "jnp.atleast_3d": ("x", None),
    "jnp.block": ("xy", lambda a, b: jnp.block([a, b])),
    "jnp.broadcast_arrays": ("xy", lambda a, b: jnp.broadcast_arrays(a, b[0])[1]),
    "jnp.broadcast_to": ("x", lambda x: jnp.broadcast_to(x, (2, 2, 3))),
    "jnp.choose": ("x", lambda x: jnp.choose(np.array([0, 1, 0]), x, mode="clip")),
    "jnp.clip": ("x", lambda x: jnp.clip(x, 0.3, 0.7)),
    "jnp.column_stack": ("xy", lambda a, b: jnp.column_stack([a, b])),
    "jnp.compress": ("x", lambda x: jnp.compress(np.array([True, False, True]), x, axis=1, size=2)),
    "jnp.concat": ("xy", lambda a, b: jnp.concat([a, b])),
    "jnp.concatenate": ("xy", lambda a, b: jnp.concatenate([a, b], axis=1)),
    "jnp.copy": ("x", None),
    "jnp.delete": ("x", lambda x: jnp.delete(x, 1, axis=1)),
    "jnp.diag": ("mat", None),
    "jnp.diagflat": ("vec", None),
    "jnp.diagonal": ("mat", None),
    "jnp.dsplit": ("x", lambda x: jnp.dsplit(x[None], 3)[1]),
    "jnp.dstack": ("xy", lambda a, b: jnp.dstack([a, b])),
    "jnp.expand_dims": ("x", lambda x: jnp.expand_dims(x, 1)),
    "jnp.extract": ("x", lambda x: jnp.extract(MASK, x, size=4)),
    "jnp.fill_diagonal": ("mat", lambda x: jnp.fill_diagonal(x, 0.5, inplace=False)),
    "jnp.flip": ("x", None),
    "jnp.fliplr": ("x", None),
    "jnp.flipud": ("x", None),
    "jnp.full": ("x", lambda x: jnp.full((2, 3), x[0, 1])),
    "jnp.full_like": ("x", lambda x: jnp.full_like(x, x[1, 2])),
    "jnp.geomspace": ("big", lambda x: jnp.geomspace(x[0, 0], x[1, 1] + 1.0, 4)),
    "jnp.hsplit": ("x", lambda x: jnp.hsplit(x, 3)[1]),
    "jnp.hstack": ("xy", lambda a, b: jnp.hstack([a, b])),
    "jnp.insert": ("xy", lambda a, b: jnp.insert(a, 1, b[:, 0], axis=1)),
    "jnp.interp": ("xy", lambda a, b: jnp.interp(b * 0.9, jnp.linspace(0.0, 1.0, 6), a.ravel())),
    "jnp.linspace": ("x", lambda x: jnp.linspace(x[0, 0], x[1, 1] + 1.0, 5)),
    "jnp.logspace": ("x", lambda x: jnp.logspace(x[0, 0], x[1, 1] + 1.0, 5)),
    "jnp.matrix_transpose": ("x", None),
    "jnp.meshgrid": ("xy", lambda a, b: jnp.meshgrid(a[0], b[1])[0] * jnp.meshgrid(a[0], b[1])[1]),
    "jnp.moveaxis": ("x", lambda x: jnp.moveaxis(x, 0, 1)),
    "jnp.pad": ("x", lambda x: jnp.pad(x, 1, mode="reflect")),
    "jnp.partition": ("x", lambda x: jnp.partition(x, 1, axis=1)),
    "jnp.permute_dims": ("x", lambda x: jnp.permute_dims(x, (1, 0))),
    "jnp.piecewise": ("x", lambda x: jnp.piecewise(x, [x < 0.5], [jnp.sin, jnp.cos])),
    "jnp.place": ("xy", lambda a, b: jnp.place(a, MASK, b[0], inplace=False)),
    "jnp.put": ("xy", lambda a, b: jnp.put(a, np.array([0, 4]), b[0, :2], inplace=False)),
    "jnp.put_along_axis": (
        "xy", lambda a, b: jnp.put_along_axis(a, IDX[None, :1], b[:1, :1], axis=1, inplace=False)
    ),
    "jnp.ravel": ("x", None),
    "jnp.repeat": ("x", lambda x: jnp.repeat(x, 2, axis=1)),
    "jnp.reshape": ("x", lambda x: jnp.reshape(x, (3, 2))),
    "jnp.resize": ("x", lambda x: jnp.resize(x, (4, 2))),
    "jnp.roll": ("x", lambda x: jnp.roll(x, 1)),
    "jnp.rollaxis": ("x", lambda x: jnp.rollaxis(x, 1)),
    "jnp.rot90": ("x", None),
    "jnp.select": ("x", lambda x: jnp.select([x < 0.3, x < 0.6], [jnp.sin(x), 2.0 * x], x * x)),
    "jnp.sort": ("x", None),
    "jnp.split": ("x", lambda x: jnp.split(x, 3, axis=1)[2]),
    "jnp.squeeze": ("x", lambda x: jnp.squeeze(x[None])),
    "jnp.stack": ("xy", lambda a, b: jnp.stack([a, b])),
    "jnp.swapaxes": ("x", lambda x: jnp.swapaxes(x, 0, 1)),
    "jnp.take": ("x", lambda x: jnp.take(x, IDX, axis=1)),
    "jnp.take_along_axis": ("x", lambda x: jnp.take_along_axis(x, IDX2, axis=1)),
    "jnp.tile": ("x", lambda x: jnp.tile(x, (2, 2))),
    "jnp.transpose": ("x", None),
    "jnp.tril": ("mat", None),
    "jnp.triu": ("mat", None),
    "jnp.unstack": ("x", lambda x: jnp.unstack(x)[1]),
    "jnp.vander": ("vec", lambda x: jnp.vander(x, 3)),
    "jnp.vectorize": ("x", lambda x: jnp.vectorize(jnp.sin)(x)),
    "jnp.vsplit": ("x", lambda x: jnp.vsplit(x, 2)[1]),
    "jnp.vstack": ("xy", lambda a, b: jnp.vstack([a, b])),
    # -- jax.numpy: polynomials ---------------------------------------------------------
    "jnp.poly": ("vec", None),
    "jnp.polyadd": ("vv", None),
    "jnp.polyder": ("vec", None),
    "jnp.polydiv": ("vv", lambda a, b: jnp.polydiv(a, b + 1.0)[0]),
    "jnp.polyfit": ("vv", lambda a, b: jnp.polyfit(jnp.arange(4.0) + a * 0.1, b, 1)),
    "jnp.polyint": ("vec", None),
    "jnp.polymul": ("vv", None),
    "jnp.polysub": ("vv", None),
    "jnp.polyval": ("xy", lambda a, b: jnp.polyval(a[0], b)),
    "jnp.roots": ("vec", lambda x: jnp.real(jnp.roots(x, strip_zeros=False))),
    # -- jax.nn -------------------------------------------------------------------------
    "nn.celu": ("sym", None),
    "nn.dot_product_attention": (
        "xy", lambda a, b: jnn.dot_product_attention(a[None, :, None], b[None, :, None], a[None, :, None])  # noqa: E501
    ),
    "nn.elu": ("sym", None),
    "nn.gelu": ("sym", None),
    "nn.glu": ("xy", lambda a, b: jnn.glu(jnp.concatenate([a, b], axis=1))),
    "nn.hard_sigmoid": ("sym", None),
    "nn.hard_silu": ("sym", None),
    "nn.hard_swish": ("sym", None),
    "nn.hard_tanh": ("sym", lambda x: jnn.hard_tanh(4.0 * x)),
    "nn.identity": ("x", None),
    "nn.leaky_relu": ("sym", None),
    "nn.log1mexp": ("x", None),
    "nn.log_sigmoid": ("sym", None),
    "nn.log_softmax": ("x", None),
    "nn.logmeanexp": ("x", lambda x: jnn.logmeanexp(x, axis=1)),
    "nn.logsumexp": ("x", lambda x: jnn.logsumexp(x, axis=0)),
    "nn.mish": ("sym", None),
    "nn.relu": ("sym", None),
    "nn.relu6": ("sym", lambda x: jnn.relu6(16.0 * x)),
    "nn.selu": ("sym", None),
    "nn.sigmoid": ("sym", None),
    "nn.silu": ("sym", None),
    "nn.soft_sign": ("sym", None),
    "nn.softmax": ("x", None),
    "nn.softplus": ("sym", None),
    "nn.sparse_plus": ("sym", lambda x: jnn.sparse_plus(4.0 * x)),
    "nn.sparse_sigmoid": ("sym", lambda x: jnn.sparse_sigmoid(4.0 * x)),
    "nn.squareplus": ("sym", None),
    "nn.standardize": ("x", None),
    "nn.swish": ("sym", None),
    "nn.tanh": ("sym", None),
    # -- jax.scipy.special --------------------------------------------------------------
    "jsp.bessel_jn": ("x", lambda x: jsp.bessel_jn(x, v=2)[1]),
    "jsp.beta": ("xy", None),
    "jsp.betainc": ("x", lambda x: jsp.betainc(2.0, 3.0, x)),
    "jsp.betaln": ("xy", None),
    "jsp.boxcox": ("xy", None),
    "jsp.boxcox1p": ("xy", None),
    "jsp.comb": ("big2", lambda a, b: jsp.comb(a + 2.0, b)),
    "jsp.dawsn": ("sym", None),
    "jsp.digamma": ("big", None),
    "jsp.entr": ("x", None),
    "jsp.erf": ("sym", None),
    "jsp.erfc": ("sym", None),
    "jsp.erfcx": ("sym", None),
    "jsp.erfinv": ("sym", None),
    "jsp.exp1": ("x", None),
    "jsp.expi": ("x", None),
    "jsp.expit": ("sym", None),
    "jsp.expn": ("x", lambda x: jsp.expn(2, x)),
    "jsp.factorial": ("big", None),
    "jsp.fresnel": ("x", lambda x: jsp.fresnel(x)[0]),
    "jsp.gamma": ("big", None),
    "jsp.gammainc": ("big2", None),
    "jsp.gammaincc": ("big2", None),
    "jsp.gammaln": ("big", None),
    "jsp.gammasgn": ("big", None),
    "jsp.hyp1f1": ("x", lambda x: jsp.hyp1f1(1.5, 2.0, x)),
    "jsp.hyp2f1": ("x", lambda x: jsp.hyp2f1(0.5, 1.5, 2.0, 0.5 * x)),
    "jsp.i0": ("x", None),
    "jsp.i0e": ("x", None),
    "jsp.i1": ("x", None),
    "jsp.i1e": ("x", None),
    "jsp.kl_div": ("xy", None),
    "jsp.log_ndtr": ("sym", None),
    "jsp.log_softmax": ("x", None),
    "jsp.loggamma": ("big", None),
    "jsp.logit": ("x", None),
    "jsp.logsumexp": ("x", lambda x: jsp.logsumexp(x, axis=1)),
    "jsp.multigammaln": ("big", lambda x: jsp.multigammaln(x + 1.0, 2)),
    "jsp.ndtr": ("sym", None),
    "jsp.ndtri": ("x", None),
    "jsp.owens_t": ("xy", None),
    "jsp.poch": ("big2", None),
    "jsp.polygamma": ("big", lambda x: jsp.polygamma(1, x)),
    "jsp.rel_entr": ("xy", None),
    "jsp.sici": ("x", lambda x: jsp.sici(x)[0]),
    "jsp.softmax": ("x", lambda x: jsp.softmax(x, axis=0)),
    "jsp.spence": ("x", None),
    "jsp.xlog1py": ("xy", None),
    "jsp.xlogy": ("xy", None),
    "jsp.zeta": ("big", lambda x: jsp.zeta(3.0, x)),
}
# fmt: on

# Public functions a newer JAX added (0.11.2), swept where this JAX has them.
NEWER = {
    "jnp.minmax": ("x", lambda x: jnp.minmax(x, axis=1)[0] * jnp.minmax(x, axis=1)[1]),
    "jnp.top_k": ("x", lambda x: jnp.top_k(x, 2)[0]),
}
CASES.update({name: case for name, case in NEWER.items() if hasattr(jnp, name[4:])})

_INT = "integer or boolean results"
_CTOR = "a constructor from shapes or integers (no float inputs)"
_QUERY = "a dtype, shape or type query (no array result)"
_IO = "printing, I/O or interop, not a numeric function"
_SET = "a set operation or data-dependent output size (needs concrete values)"
EXCLUDED = {
    **{
        f"jnp.{n}": _INT
        for n in (
            "all any argmax argmin argpartition argsort argwhere bincount bitwise_and "
            "bitwise_count bitwise_invert bitwise_left_shift bitwise_not bitwise_or "
            "bitwise_right_shift bitwise_xor count_nonzero digitize equal flatnonzero gcd "
            "greater greater_equal invert isclose isfinite isin isinf isnan isneginf "
            "isposinf iscomplex isreal lcm left_shift less less_equal lexsort logical_and "
            "logical_not logical_or logical_xor nanargmax nanargmin nonzero not_equal "
            "packbits ravel_multi_index right_shift searchsorted signbit unpackbits "
            "unravel_index allclose array_equal array_equiv"
        ).split()
    },
    **{
        f"jnp.{n}": _CTOR
        for n in (
            "arange bartlett blackman diag_indices diag_indices_from empty empty_like eye hamming "
            "hanning identity indices kaiser mask_indices ones ones_like tri tril_indices "
            "tril_indices_from triu_indices triu_indices_from zeros zeros_like fromfunction ix_"
        ).split()
    },
    **{
        f"jnp.{n}": _QUERY
        for n in (
            "broadcast_shapes can_cast isdtype iscomplexobj isrealobj isscalar "
            "issubdtype iterable ndim promote_types result_type shape size"
        ).split()
    },
    **{
        f"jnp.{n}": _IO
        for n in (
            "array_repr array_str frombuffer fromfile fromiter frompyfunc fromstring from_dlpack "
            "get_printoptions load printoptions save savez set_printoptions einsum_path"
        ).split()
    },
    **{
        f"jnp.{n}": _SET
        for n in (
            "intersect1d setdiff1d setxor1d union1d unique unique_all unique_counts unique_inverse "
            "unique_values trim_zeros"
        ).split()
    },
    "jnp.histogram": "bin counts (integers) and edges",
    "jnp.histogram2d": "bin counts (integers) and edges",
    "jnp.histogramdd": "bin counts (integers) and edges",
    "jnp.histogram_bin_edges": "bin edges of a binning, a piecewise-constant function of the data",
    "jnp.nextafter": "JAX has no derivative rule for nextafter",
    "jnp.spacing": "JAX has no derivative rule for spacing (nextafter)",
    "jnp.sort_complex": "complex results",
    "nn.one_hot": _INT,
    "nn.get_scaled_dot_general_config": "returns a configuration, not a numeric function",
    "nn.scaled_dot_general": "microscaling: quantises to float8 formats, not a float64 function",
    "nn.scaled_matmul": "microscaling: quantises to float8 formats, not a float64 function",
    "jsp.bernoulli": "Bernoulli numbers of an integer n",
    "jsp.sph_harm_y": "complex results",
    "jsp.wofz": "complex results",
}

_FN_ARG = "a library call taking a function: the mapped function passed is k_transform's, not JAX's"
KNOWN_FAILING = {
    "jnp.roots": "eigenvalues of a companion matrix (`eig`, complex): no rule, no complex numbers",
}

# Issue 13 asks for 0.95; the floor is the rate reached, raised as KNOWN_FAILING shrinks.
MIN_PASS_RATE = 0.99

# Functions checked with a looser tolerance, and why.
# (rtol, atol); the default is (1e-7, 1e-10)
TOL = {"nn.dot_product_attention": (1e-5, 1e-6)}  # its softmax runs in float32 under x64
# Where JAX's own second derivative is wrong, the oracle of the second derivative is
# central differences of JAX's first derivative (which matches finite differences):
# jsp.bessel_jn's is off by 1e4 at two of six points; jsp.exp1's and jsp.expn's raise
# a TypeError (their `n` is a tracer under JAX's trace of its own rule).
SECOND_BY_DIFFERENCES = {"jsp.bessel_jn", "jsp.exp1", "jsp.expn"}


def public_callables() -> set[str]:
    """`prefix.name` of every public function of the three namespaces (classes not included)."""
    names = set()
    for prefix, module in NAMESPACES.items():
        for name in dir(module):
            value = getattr(module, name)
            if name.startswith("_") or inspect.ismodule(value) or inspect.isclass(value):
                continue
            if callable(value):
                names.add(f"{prefix}.{name}")
    return names


pytestmark = pytest.mark.usefixtures("x64_eager")


def _library(name):
    prefix, attr = name.split(".")
    return getattr(NAMESPACES[prefix], attr)


def program(fn, n_inputs):
    """`f(x) = sum(sin(fn(x)))` (or of `fn(x, y)`)."""
    if n_inputs == 1:

        def f(x):
            return jnp.sum(jnp.sin(fn(x)))

    else:

        def f(x, y):
            return jnp.sum(jnp.sin(fn(x, y)))

    return f


def _close(got, want, tol=(1e-7, 1e-10)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol[0], atol=tol[1])


def _second_by_differences(f, xs, vs, h=1e-5):
    """d/dt <grad f(x + t v), v> at t = 0, by JAX's first derivative and central differences."""
    at = tuple(range(len(xs)))

    def dfv(t):
        moved = [x + t * v for x, v in zip(xs, vs, strict=True)]
        return sum(jnp.sum(g * v) for g, v in zip(jax.grad(f, at)(*moved), vs, strict=True))

    return (dfv(h) - dfv(-h)) / (2 * h)


def derivatives(f, grad, jvp, at, vs, second: bool):
    """Gradient, jvp and (when `second`) a second derivative (the gradient of
    `<grad f, v>`) of `f`, computed by `grad` and `jvp` (k_transform's or JAX's),
    in one jitted function."""

    def dfv(*args):
        return jnp.sum(grad(f)(*args) * vs[0])

    def run(*xs):
        first = (grad(f, at)(*xs), jvp(f, xs, vs))
        return (*first, grad(dfv, at)(*xs)) if second else first

    return jax.jit(run)


def _jax_grad(fn, at=0):
    return jax.grad(fn, argnums=at)


def check_case(name, second=True):
    """kt.grad, kt.jvp and a second derivative of the case's program against JAX's.

    Each side runs under one `jax.jit` (one XLA compilation per side instead of one
    per library call: compiling dominates the sweep's time)."""
    kind, fn = CASES[name]
    xs = INPUTS[kind]
    f = program(_library(name) if fn is None else fn, len(xs))
    at = tuple(range(len(xs)))
    vs = (V, W)[: len(xs)] if xs[0].shape == V.shape else tuple(np.cos(x + 1.0) for x in xs)
    second = second and name in SECOND_ORDER
    got = derivatives(f, kt.grad, kt.jvp, at, vs, second)(*xs)
    by_differences = second and name in SECOND_BY_DIFFERENCES
    want = derivatives(f, _jax_grad, jax.jvp, at, vs, second and not by_differences)(*xs)
    tol = TOL.get(name, (1e-7, 1e-10))
    if by_differences:
        second = sum(jnp.sum(g * v) for g, v in zip(got[2], vs, strict=True))
        _close(second, _second_by_differences(f, xs, vs), (1e-6, 1e-8))
        got, want = got[:2], want[:2]
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        _close(g, w, tol)


def test_every_public_callable_is_classified():
    unclassified = public_callables() - set(CASES) - set(EXCLUDED)
    assert not unclassified, f"classify these in CASES or EXCLUDED: {sorted(unclassified)}"
    both = set(CASES) & set(EXCLUDED)
    assert not both, f"in both CASES and EXCLUDED: {sorted(both)}"
    stale = (set(CASES) | set(EXCLUDED)) - public_callables()
    assert not stale, f"no longer public callables: {sorted(stale)}"
    assert set(KNOWN_FAILING) <= set(CASES)


def test_pass_rate():
    passing = len(CASES) - len(KNOWN_FAILING)
    assert passing / len(CASES) >= MIN_PASS_RATE, f"{passing} of {len(CASES)} pass"


PASSING = [n for n in CASES if n not in KNOWN_FAILING]
# The second derivative is checked for every fifth function (sorted by name) and the
# ones with a note: `make test` must stay under 15 minutes on 2 cores, and compiling
# the second-order programs was half of this file's time. All 285 passed it in a full
# check (270 in session 5, the 15 fixed in session 6 one by one).
# JAX has no second derivative of the incomplete gamma functions w.r.t. a (nor
# do we: tests/test_incomplete_special30.py checks the refusal)
NO_SECOND_ORDER = {"jsp.gammainc", "jsp.gammaincc"}
SECOND_ORDER = (set(sorted(PASSING)[::5]) | SECOND_BY_DIFFERENCES | set(TOL)) - NO_SECOND_ORDER


@pytest.mark.parametrize("name", PASSING)
def test_matches_jax(name):
    check_case(name)


@pytest.mark.parametrize("name", sorted(KNOWN_FAILING))
def test_known_failing_still_fails(name):
    """A fixed function must leave KNOWN_FAILING (and count as passing)."""
    # a refusal (a KTransformError, never a bare error) or a wrong value (AssertionError);
    # under the user's jax.jit a loop over its stored-carry bound reaches the user as
    # JAX's error around ours (issue 15)
    try:
        check_case(name, second=False)  # failing already at first order or jvp: CI time
    except (kt.KTransformError, AssertionError):
        return
    except jax.errors.JaxRuntimeError as e:
        assert "LoopBoundExceeded" in str(e) and "kt.set_loop_bound" in str(e)
        return
    pytest.fail(f"{name} passes: move it out of KNOWN_FAILING")
