"""MindSpore's loop operators `ops.ForiLoop`, `ops.WhileLoop`, `ops.Scan`.

Each is the Python loop MindSpore's documentation gives as its meaning,
written in `__call__`: called as Python it runs; in a transformed
`construct` the parser reads `__call__` like any method, so the loop is
one of ours (a `for` over a range, a `while`, a `for` over the items), its
gradient from our loop rules. MindSpore's `unroll` only changes how it
compiles. `Scan` takes `xs` as a tuple or list (or None with `length`) and
returns `(carry, ys)` with `ys` a list, as MindSpore's does.
"""


class ForiLoop:
    """`ForiLoop()(lower, upper, loop_func, init_val, unroll=True)`."""

    def __call__(self, lower, upper, loop_func, init_val, unroll=True):
        value = init_val
        for i in range(lower, upper):
            value = loop_func(i, value)
        return value


class WhileLoop:
    """`WhileLoop()(cond_func, loop_func, init_val)`."""

    def __call__(self, cond_func, loop_func, init_val):
        value = init_val
        while cond_func(value):
            value = loop_func(value)
        return value


class Scan:
    """`Scan()(loop_func, init, xs, length=None, unroll=True)` -> `(carry, ys)`."""

    def __call__(self, loop_func, init, xs, length=None, unroll=True):
        items = [None] * length if xs is None else xs
        carry, ys = init, []
        for item in items:
            carry, y = loop_func(carry, item)
            ys.append(y)
        return carry, ys


__all__ = ["ForiLoop", "Scan", "WhileLoop"]
