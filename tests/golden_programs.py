"""Programs whose IR dump and generated source are pinned by golden files."""

import jax.numpy as jnp


def straight_line(x, y):
    z = jnp.sin(x) * y + 1.0
    a, b = z[0], z[1:]
    return jnp.sum(b) + a


def branches_and_loops(x, n):
    if jnp.sum(x) > 0:
        y = x * 2.0
    else:
        y = -x
    s = 0.0
    for i in range(n):
        s = s + y[i]
    while s < 10.0:
        s = s * 2.0 + 1.0
    return s


def closures(x):
    scale = 3.0

    def inner(v):
        return v * scale + x

    return inner(x) + (lambda t: t * t)(x)


def early_return(x):
    for i in range(3):
        if x[i] > 1.0:
            return x * i
    return x
