"""MindSpore 2.10's functional nn ops in the drop-in: `ops.conv2d`,
`ops.conv1d`, `ops.max_pool2d`, `ops.avg_pool2d`, `ops.adaptive_avg_pool2d`,
`ops.interpolate`, `ops.roll`, `ops.dropout`, `ops.dropout2d`
(`k_transform/mindspore/nn_functions.py`, `functions.py`).

Values are MindSpore 2.10's (CPU, PYNATIVE_MODE), printed for the small
inputs below and pasted here; each is checked eagerly and through
`kt.jit` (the parsed program). Gradients through `ms.grad` are checked
against `jax.grad` of `lax.conv_general_dilated` / `lax.reduce_window`, or of
the same jnp program run by JAX, and at max-pool ties against MindSpore's.
MindSpore itself is not imported.
"""

from __future__ import annotations

import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms
from k_transform.mindspore import ops


def arr(shape, a, b, f=np.sin):
    return f(np.arange(int(np.prod(shape))) * a + b).reshape(shape).astype(np.float32)


X = arr((1, 2, 4, 5), 0.7, 0.3)
W = arr((2, 2, 2, 3), 0.4, 0.1, np.cos)
X6 = arr((1, 2, 5, 6), 0.9, 0.2)
WG = arr((4, 1, 2, 2), 0.3, 0.3)
X3 = arr((1, 2, 3, 4), 0.8, 0.1)
X13 = arr((1, 2, 4), 0.8, 0.1)
X1 = arr((1, 2, 6), 0.7, 0.3)
W1 = arr((2, 2, 3), 0.4, 0.1, np.cos)
B = np.array([0.5, -1.0], np.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# MindSpore 2.10's signatures (`inspect.signature` there)
SIGNATURES = {
    "conv2d": "(input, weight, bias=None, stride=1, pad_mode='valid', padding=0, dilation=1, "
    "groups=1)",
    "conv1d": "(input, weight, bias=None, stride=1, pad_mode='valid', padding=0, dilation=1, "
    "groups=1)",
    "max_pool2d": "(x, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, "
    "ceil_mode=False)",
    "avg_pool2d": "(input_x, kernel_size=1, stride=1, padding=0, ceil_mode=False, "
    "count_include_pad=True, divisor_override=0)",
    "adaptive_avg_pool2d": "(input, output_size)",
    "interpolate": "(input, size=None, scale_factor=None, mode='nearest', align_corners=None, "
    "recompute_scale_factor=None)",
    "roll": "(input, shifts, dims=None)",
    "dropout": "(input, p=0.5, training=True, seed=None)",
    "dropout2d": "(input, p=0.5, training=True)",
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signature_is_mindspores(name):
    assert str(inspect.signature(getattr(ops, name))) == SIGNATURES[name]
    assert getattr(ms.ops.functional, name) is getattr(ops, name)


# name: (the call, MindSpore 2.10's shape, its values, flattened, 6 digits)
MINDSPORE = {
    "conv_valid": (
        lambda: ops.conv2d(X, W),
        (1, 2, 3, 3),
        [
            1.48738,
            2.18013,
            1.84753,
            -1.96053,
            -2.13965,
            -1.31246,
            2.18452,
            1.82725,
            0.61059,
            0.16717,
            -1.31152,
            -2.17338,
            0.62721,
            1.86541,
            2.22628,
            -1.34188,
            -2.18223,
            -1.99625,
        ],
    ),
    "conv_same_s2": (
        lambda: ops.conv2d(X, W, pad_mode="same", stride=2),
        (1, 2, 2, 3),
        [
            0.32517,
            2.18013,
            0.73371,
            1.43158,
            1.82725,
            -0.11326,
            0.55458,
            -1.31152,
            -1.7748,
            -0.34847,
            -2.18223,
            -0.96255,
        ],
    ),
    "conv_groups2_dil2": (
        lambda: ops.conv2d(X6, WG, groups=2, dilation=2),
        (1, 4, 3, 4),
        [
            0.0046,
            0.75864,
            0.93856,
            0.4082,
            -0.74268,
            0.02082,
            0.76856,
            0.93467,
            -0.94734,
            -0.73222,
            0.03703,
            0.77826,
            0.37686,
            1.20032,
            1.1154,
            0.18637,
            -0.71384,
            0.39755,
            1.20808,
            1.10436,
            -1.28301,
            -0.69568,
            0.41812,
            1.2155,
            -0.14641,
            -0.27591,
            -0.19661,
            0.03148,
            0.08949,
            -0.15036,
            -0.27641,
            -0.19329,
            0.26,
            0.08505,
            -0.15426,
            -0.27683,
            -1.17549,
            -0.30014,
            0.80234,
            1.29763,
            -1.17082,
            -1.16608,
            -0.27887,
            0.81938,
            -0.31073,
            -1.18006,
            -1.15634,
            -0.25753,
        ],
    ),
    "conv1d_pad1_s2_bias": (
        lambda: ops.conv1d(X1, W1, B, stride=2, pad_mode="pad", padding=1),
        (1, 2, 3),
        [1.85437, 2.28198, 0.30253, -1.36974, -2.40551, -1.93894],
    ),
    "maxpool_k3_s2_p1": (
        lambda: ops.max_pool2d(-np.abs(X6) - 1, 3, 2, 1),
        (1, 2, 3, 3),
        [
            -1.19867,
            -1.21512,
            -1.22289,
            -1.21512,
            -1.21512,
            -1.20647,
            -1.18999,
            -1.24783,
            -1.24783,
            -1.17345,
            -1.15687,
            -1.28027,
            -1.29637,
            -1.14024,
            -1.12357,
            -1.31239,
            -1.31239,
            -1.10687,
        ],
    ),
    "maxpool_ceil_k3s2": (
        lambda: ops.max_pool2d(X6, 3, 2, 1, ceil_mode=True),
        (1, 2, 3, 4),
        [
            0.89121,
            0.9093,
            0.90217,
            -0.62507,
            0.21512,
            0.90595,
            0.91295,
            0.88716,
            0.18999,
            0.24783,
            0.91968,
            0.91968,
            0.92615,
            0.87114,
            0.28027,
            0.28027,
            0.93236,
            0.93831,
            0.85414,
            -0.56391,
            0.31239,
            0.94399,
            0.94399,
            0.10687,
        ],
    ),
    "maxpool_dil2": (
        lambda: ops.max_pool2d(X6, 2, 1, 0, dilation=2),
        (1, 2, 3, 4),
        [
            0.9093,
            0.90595,
            0.9093,
            0.90595,
            0.89871,
            0.90217,
            0.91295,
            0.90217,
            0.23151,
            0.90595,
            0.89479,
            0.91968,
            0.87927,
            0.93236,
            0.86276,
            0.28027,
            0.93831,
            0.87114,
            0.93831,
            0.85414,
            0.86276,
            0.94399,
            0.86276,
            0.94399,
        ],
    ),
    "avgpool_k3_s2_p1_nocount": (
        lambda: ops.avg_pool2d(X6, 3, 2, 1, count_include_pad=False),
        (1, 2, 3, 3),
        [
            0.16843,
            0.67596,
            -0.14542,
            -0.61203,
            0.13095,
            0.50613,
            -0.52471,
            -0.59973,
            0.44006,
            0.7125,
            -0.18946,
            -0.5889,
            0.46474,
            0.48801,
            -0.38939,
            -0.44196,
            0.47355,
            0.36222,
        ],
    ),
    "avgpool_div3": (
        lambda: ops.avg_pool2d(X6, 2, 2, divisor_override=3),
        (1, 2, 2, 3),
        [
            0.22458,
            0.98314,
            -0.67132,
            -1.08534,
            0.26016,
            0.96712,
            0.95001,
            -0.72713,
            -0.6196,
            0.33039,
            0.93182,
            -0.75381,
        ],
    ),
    "avgpool_pad4": (
        lambda: ops.avg_pool2d(X6, 2, 2, (1, 0, 0, 1)),
        (1, 2, 3, 3),
        [
            0.27247,
            0.28714,
            -0.40295,
            -0.50857,
            0.73459,
            0.17477,
            -0.52471,
            -0.48691,
            0.74597,
            0.26318,
            -0.41553,
            -0.07436,
            0.7565,
            0.12094,
            -0.81146,
            -0.44196,
            0.76619,
            0.0938,
        ],
    ),
    "avgpool_ceil_k3s2p1": (
        lambda: ops.avg_pool2d(X6, 3, 2, 1, ceil_mode=True),
        (1, 2, 3, 4),
        [
            0.07486,
            0.45064,
            -0.09695,
            -0.27083,
            -0.40802,
            0.13095,
            0.50613,
            0.07809,
            -0.23321,
            -0.39982,
            0.29337,
            0.30114,
            0.31667,
            -0.12631,
            -0.3926,
            -0.04727,
            0.30983,
            0.48801,
            -0.38939,
            -0.37675,
            -0.19643,
            0.3157,
            0.24148,
            -0.09894,
        ],
    ),
    "adaptive_24": (
        lambda: ops.adaptive_avg_pool2d(X6, (2, 4)),
        (1, 2, 2, 4),
        [
            -0.1574,
            0.42128,
            0.42553,
            -0.15212,
            -0.6195,
            -0.60691,
            0.43904,
            0.68085,
            0.67979,
            0.38882,
            -0.63299,
            -0.59055,
            -0.08985,
            0.47305,
            0.3698,
            -0.21821,
        ],
    ),
    "interp_nearest_down": (
        lambda: ops.interpolate(X6, size=(3, 4)),
        (1, 2, 3, 4),
        [
            0.19867,
            0.89121,
            0.23925,
            -0.61186,
            -0.63127,
            0.21512,
            0.90217,
            0.22289,
            -0.63811,
            -0.99977,
            0.24783,
            0.91295,
            0.87927,
            0.17345,
            -0.9985,
            -0.57772,
            0.92615,
            0.87114,
            -0.67612,
            -0.99743,
            -0.54994,
            0.31239,
            0.85414,
            0.12357,
        ],
    ),
    "interp_nearest_sf_recompute": (
        lambda: ops.interpolate(X3, scale_factor=(1.5, 2.5), recompute_scale_factor=True)[0, 0, 0],
        (10,),
        [0.09983, 0.09983, 0.09983, 0.78333, 0.78333, 0.99166, 0.99166, 0.99166, 0.59847, 0.59847],
    ),
    "interp_bilinear_down": (
        lambda: ops.interpolate(X6, size=(3, 4), mode="bilinear"),
        (1, 2, 3, 4),
        [
            0.10798,
            0.84579,
            0.26177,
            -0.73963,
            -0.90453,
            0.0191,
            0.90316,
            0.37855,
            -0.25634,
            -0.84265,
            -0.11363,
            0.80172,
            0.77268,
            -0.1911,
            -0.84768,
            -0.18025,
            0.45537,
            0.88016,
            -0.06692,
            -0.91917,
            -0.69799,
            0.33546,
            0.83671,
            0.02948,
        ],
    ),
    "interp_bilinear_size1_ac": (
        lambda: ops.interpolate(X3, size=(1, 2), mode="bilinear", align_corners=True),
        (1, 2, 1, 2),
        [0.09983, 0.59847, -0.27176, -0.44965],
    ),
    "interp_linear_ac": (
        lambda: ops.interpolate(X13, size=7, mode="linear", align_corners=True),
        (1, 2, 7),
        [
            0.09983,
            0.44158,
            0.78333,
            0.8875,
            0.99166,
            0.79507,
            0.59847,
            -0.15775,
            -0.48801,
            -0.81828,
            -0.90036,
            -0.98245,
            -0.76657,
            -0.55069,
        ],
    ),
    "interp_area_sf": (
        lambda: ops.interpolate(X6, scale_factor=0.5, mode="area"),
        (1, 2, 2, 3),
        [
            -0.1574,
            0.68115,
            -0.15212,
            -0.6195,
            -0.13503,
            0.68085,
            0.67979,
            -0.1964,
            -0.59055,
            -0.08985,
            0.67796,
            -0.21821,
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(MINDSPORE))
def test_values_are_mindspores(name):
    call, shape, values = MINDSPORE[name]
    for out in (call(), kt.jit(call)()):  # as Python, then parsed
        assert out.shape == shape
        close(np.ravel(out), values)


def _conv_oracle(x, w, b, stride, pads, dilation=(1, 1), groups=1):
    out = jax.lax.conv_general_dilated(
        x, w, stride, pads, rhs_dilation=dilation, feature_group_count=groups
    )
    return out + jnp.reshape(b, (1, -1, 1, 1))


def test_conv2d_gradients_match_lax_conv():
    def ours(x, w, b):
        return jnp.sum(jnp.sin(ops.conv2d(x, w, b, (2, 1), "pad", (1, 2))))

    def want(x, w, b):
        return jnp.sum(jnp.sin(_conv_oracle(x, w, b, (2, 1), ((1, 1), (2, 2)))))

    got = ms.grad(ours, grad_position=(0, 1, 2))(X, W, B)
    for g, e in zip(got, jax.grad(want, argnums=(0, 1, 2))(X, W, B), strict=True):
        close(g, e, 1e-4)


def test_conv1d_groups_gradient_matches_lax_conv():
    def ours(x, w):
        return jnp.sum(jnp.sin(ops.conv1d(x, w, pad_mode="same", dilation=2, groups=2)))

    def want(x, w):
        out = jax.lax.conv_general_dilated(
            x[:, :, None],
            w[:, :, None],
            (1, 1),
            ((0, 0), (2, 2)),
            rhs_dilation=(1, 2),
            feature_group_count=2,
        )
        return jnp.sum(jnp.sin(out[:, :, 0]))

    w = arr((4, 1, 3), 0.3, 0.3)
    for g, e in zip(ms.grad(ours, (0, 1))(X1, w), jax.grad(want, (0, 1))(X1, w), strict=True):
        close(g, e, 1e-4)


def test_pool_gradients_match_reduce_window():
    # padding 1, and ceil_mode's extra column: 3 windows down (5 + 2 rows), 4 across (6 + 3)
    pads = ((0, 0), (0, 0), (1, 1), (1, 2))

    def ours(x):
        biggest = ops.max_pool2d(x, 3, 2, 1, ceil_mode=True)
        mean = ops.avg_pool2d(x, 3, 2, 1, ceil_mode=True)
        return jnp.sum(jnp.sin(biggest) * jnp.cos(mean))

    def want(x):
        biggest = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 3, 3), (1, 1, 2, 2), pads)
        total = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 1, 3, 3), (1, 1, 2, 2), pads)
        # a window counts the padded input's entries it covers: 2 columns in the overhang
        counts = np.outer([3, 3, 3], [3, 3, 3, 2])
        return jnp.sum(jnp.sin(biggest) * jnp.cos(total / counts))

    close(ours(X6), want(X6))
    close(ms.grad(ours)(X6), jax.grad(want)(X6), 1e-4)


def test_max_pool_gradient_goes_to_the_first_maximum():
    ties = np.array([[1, 1, 0, 2], [1, 0, 2, 2], [3, 3, 1, 0], [3, 3, 0, 1]], np.float32)
    ties = ties[None, None]
    got = ms.grad(lambda x: jnp.sum(ops.max_pool2d(x, 3, 1, 1)))(ties)
    # MindSpore 2.10: ms.grad of ops.max_pool2d(x, 3, 1, 1).sum()
    close(np.ravel(got), [1, 0, 0, 3, 0, 0, 2, 0, 6, 3, 1, 0, 0, 0, 0, 0])


def test_interpolate_and_adaptive_pool_gradients():
    c = arr((1, 2, 5, 7), 0.3, 0.0, np.cos)

    def bilinear(x):
        return jnp.sum(ops.interpolate(x, size=(5, 7), mode="bilinear") * c)

    # MindSpore 2.10: ms.grad of (ops.interpolate(x, size=(5, 7), mode="bilinear") * c).sum()
    mindspore = [
        1.04702,
        0.459672,
        -0.366784,
        -0.979618,
        -0.369312,
        0.116216,
        0.641701,
        0.919286,
        -0.064249,
        -0.768934,
        -1.34084,
        -1.46668,
        0.405627,
        1.05407,
        1.47021,
        1.42609,
        -0.648297,
        -0.966179,
        -1.02734,
        -0.798274,
        1.31955,
        1.51702,
        1.26363,
        0.698192,
    ]
    close(np.ravel(ms.grad(bilinear)(X3)), mindspore)

    def area(x):  # also adaptive_avg_pool2d's path
        return jnp.sum(jnp.sin(ops.interpolate(x, size=(3, 4), mode="area")))

    close(ms.grad(area)(X6), jax.grad(area)(X6), 1e-4)  # oracle: JAX on the jnp program


@pytest.mark.parametrize(
    "call, says",
    [
        (lambda: ops.interpolate(X3, size=(5, 7), mode="bicubic"), "mode 'bicubic'"),
        (lambda: ops.interpolate(X3, scale_factor=2.0), "recompute_scale_factor=True"),
        (lambda: ops.interpolate(X3, size=(5, 7), align_corners=True), "align_corners"),
        (lambda: ops.interpolate(X13, size=5, mode="bilinear"), "4-D input"),
        (lambda: ops.max_pool2d(X6, 2, return_indices=True), "return_indices"),
        (lambda: ops.conv2d(X, W, padding=1), "padding must be 0"),
        (lambda: ops.conv2d(X, W, pad_mode="pad", padding=(1, 0, 2, 1)), "2 ints"),
        (lambda: ops.roll(X, (1, 2)), "one shift"),
        (lambda: ops.dropout(X, p=1.0), "p must be in [0, 1)"),
    ],
)
def test_unsupported_arguments_raise_naming_them(call, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        call()


def test_roll():
    x = jnp.array([0.0, 1.0, 2.0, 3.0, 4.0])
    # MindSpore 2.10's docstring (its CPU build has no Roll kernel to run)
    close(ops.roll(x, shifts=2, dims=0), [3, 4, 0, 1, 2])
    close(ops.roll(x, shifts=-2, dims=0), [2, 3, 4, 0, 1])
    r = jnp.arange(12.0).reshape(3, 4)
    close(ops.roll(r, 5), np.roll(np.asarray(r), 5))  # no dims: the flattened input
    close(ops.roll(r, [1, -1], [0, 1]), np.roll(np.asarray(r), (1, -1), (0, 1)))

    def loss(x):
        return jnp.sum(ops.roll(x, (1, 2), (0, 1)) * jnp.arange(12.0).reshape(3, 4))

    close(ms.grad(loss)(r), jax.grad(loss)(r))


def test_dropout_scales_kept_entries_and_draws_fresh_masks():
    x = jnp.ones((40, 50))
    first, second = np.asarray(ops.dropout(x, p=0.3)), np.asarray(ops.dropout(x, p=0.3))
    assert set(np.unique(first)) <= {0.0, np.float32(1 / 0.7)}
    assert abs((first == 0).mean() - 0.3) < 0.05  # 2000 draws: about 10 sigma
    assert not np.array_equal(first, second)
    assert ops.dropout(x, 0.3, training=False) is x
    close(ops.dropout(x, p=0.0), x)
    jitted = kt.jit(lambda v: ops.dropout(v, p=0.5))
    assert not np.array_equal(np.asarray(jitted(x)), np.asarray(jitted(x)))
    ms.set_seed(5)
    again = np.asarray(ops.dropout(x, p=0.3, seed=2))
    ms.set_seed(5)
    np.testing.assert_array_equal(np.asarray(ops.dropout(x, p=0.3, seed=2)), again)
    assert not np.array_equal(np.asarray(ops.dropout(x, p=0.3, seed=3)), again)


def test_dropout_gradient_is_the_mask_over_keep():
    x = jnp.linspace(0.5, 1.5, 64).reshape(8, 8)
    value, grad = ms.value_and_grad(lambda v: jnp.sum(ops.dropout(v, p=0.25) * 3.0))(x)
    mask = np.asarray(grad) != 0  # the mask drawn, read off the gradient
    close(grad, np.where(mask, 3.0 / 0.75, 0.0))
    close(value, np.sum(np.where(mask, np.asarray(x) * 3.0 / 0.75, 0.0)))


def test_dropout2d_drops_whole_channels():
    x = jnp.ones((4, 6, 3, 2))
    out = np.asarray(ops.dropout2d(x, 0.5))
    assert (out == out[:, :, :1, :1]).all() and set(np.unique(out)) <= {0.0, 2.0}
    assert ops.dropout2d(x, training=False) is x
    with pytest.raises(ValueError, match="N, C, H, W"):
        ops.dropout2d(jnp.ones((2, 3, 4)))
