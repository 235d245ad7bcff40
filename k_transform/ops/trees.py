"""Row `i` of pytrees of arrays: the primitives of the `lax.scan`, `lax.map`
and `jax.vmap` models (`k_transform.frontend.lax_models`).

`tree_index(xs, i)` reads row `i` of every leaf, `tree_set(ys, i, y)` writes
it, `tree_stack_at(y, n, i)` starts `n` rows with `y` in row `i`, and
`tree_put(like, i, y)` is zeros like `like` with `y` in row `i`. Each one's
gradient is written with the others, so the rules differentiate again
(jvp, second order). The run time is `k_transform.runtime.trees`.
"""

from __future__ import annotations

from k_transform import runtime as rt
from k_transform.bprop_registry.helpers import rule, zero_gradient
from k_transform.ops.base import elementwise
from k_transform.ops.structural import ZerosLike

TreeIndex = elementwise("TreeIndex", rt.tree_index, "_rt.tree_index", 2, "Row `i` of each leaf.")
TreePut = elementwise(
    "TreePut", rt.tree_put, "_rt.tree_put", 3, "Zeros like `like` with `y` in row `i`."
)
TreeStackAt = elementwise(
    "TreeStackAt", rt.tree_stack_at, "_rt.tree_stack_at", 3, "`n` rows, `y` in row `i`."
)
TreeSet = elementwise("TreeSet", rt.tree_set, "_rt.tree_set", 3, "`ys` with row `i` set to `y`.")
ScanLength = elementwise(
    "ScanLength", rt.scan_length, "_rt.scan_length", 2, "The trip count of `lax.scan`."
)
BatchSize = elementwise(
    "BatchSize", rt.batch_size, "_rt.batch_size", 2, "The mapped axis size of `jax.vmap`."
)

tree_index = TreeIndex()
tree_put = TreePut()
tree_stack_at = TreeStackAt()
tree_set = TreeSet()
scan_length = ScanLength()
batch_size = BatchSize()
zeros_like = ZerosLike()

zero_gradient(ScanLength, BatchSize)


@rule(TreeIndex)
def bprop_tree_index(xs, i, out, dout):
    return tree_put(xs, i, dout), None


@rule(TreePut)
def bprop_tree_put(like, i, y, out, dout):
    return None, None, tree_index(dout, i)


@rule(TreeStackAt)
def bprop_tree_stack_at(y, n, i, out, dout):
    return tree_index(dout, i), None, None


@rule(TreeSet)
def bprop_tree_set(ys, i, y, out, dout):
    dy = tree_index(dout, i)  # read before the write: `dout` is then updated in place
    return tree_set(dout, i, zeros_like(y)), None, dy
