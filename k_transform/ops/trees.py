"""Row `i` of pytrees of arrays: the primitives of the loop models of
`jax.vmap` and `jnp.apply_along_axis` (`k_transform.frontend.lax_models`;
`lax.scan` and `lax.map` read and write rows as stacks, `control.prims`).

`tree_index(xs, i)` reads row `i` of every leaf, `tree_set(ys, i, y)` writes
it, `tree_stack_at(y, n, i)` starts `n` rows with `y` in row `i`, and
`tree_put(like, i, y)` is zeros like `like` with `y` in row `i`. Each one's
gradient is written with the others, so the rules differentiate again
(jvp, second order). The run time is `k_transform.runtime.trees`.

Jacobians of pytrees inside transformed code (`k_transform.lowering`) stack
rows of trees and read them as a matrix: `ravel_rows`/`unravel_rows` and
`jacobian_matrix`/`jacobian_blocks` are linear and each pair's rules are the
other one.
"""

from __future__ import annotations

from k_transform import runtime as rt
from k_transform.bprop_registry.helpers import rule, zero_gradient
from k_transform.ops.base import JaxPrimitive, elementwise
from k_transform.ops.structural import ZerosLike

TreeIndex = elementwise("TreeIndex", rt.tree_index, "_rt.tree_index", 2, "Row `i` of each leaf.")
TreePut = elementwise(
    "TreePut", rt.tree_put, "_rt.tree_put", 3, "Zeros like `like` with `y` in row `i`."
)
TreeIndexAt = elementwise(
    "TreeIndexAt", rt.tree_index_at, "_rt.tree_index_at", 3, "Row `i` of the leaves `axes` maps."
)
TreePutAt = elementwise(
    "TreePutAt", rt.tree_put_at, "_rt.tree_put_at", 4, "The transpose of `tree_index_at`."
)
TreeStackAt = elementwise(
    "TreeStackAt", rt.tree_stack_at, "_rt.tree_stack_at", 3, "`n` rows, `y` in row `i`."
)
TreeSet = elementwise("TreeSet", rt.tree_set, "_rt.tree_set", 3, "`ys` with row `i` set to `y`.")
ScanLength = elementwise(
    "ScanLength", rt.scan_length, "_rt.scan_length", 2, "The trip count of `lax.scan`."
)
CarryInit = elementwise(
    "CarryInit", rt.carry_init, "_rt.carry_init", 1, "A loop's first carry, as JAX gives it."
)
BatchSize = elementwise(
    "BatchSize", rt.batch_size, "_rt.batch_size", 2, "The mapped axis size of `jax.vmap`."
)

TreeSize = elementwise("TreeSize", rt.tree_size, "_rt.tree_size", 1, "Numbers in a tree's leaves.")
RavelRows = elementwise("RavelRows", rt.ravel_rows, "_rt.ravel_rows", 1, "Rows of a tree, raveled.")


class UnravelRows(JaxPrimitive):
    """Matrix rows as rows of a tree like `like` (`lead`: `like` is rows already)."""

    jax_fn = staticmethod(rt.unravel_rows)
    jax_name = "_rt.unravel_rows"
    jax_kwargs = {"lead": "lead"}
    n_inputs = 2

    def __init__(self, lead: bool = False):
        super().__init__(lead=lead)


JacobianBlocks = elementwise(
    "JacobianBlocks", rt.jacobian_blocks, "_rt.jacobian_blocks", 3, "A Jacobian nested as JAX's."
)
JacobianMatrix = elementwise(
    "JacobianMatrix", rt.jacobian_matrix, "_rt.jacobian_matrix", 3, "A nested Jacobian as a matrix."
)

tree_index = TreeIndex()
tree_put = TreePut()
tree_index_at = TreeIndexAt()
tree_put_at = TreePutAt()
tree_stack_at = TreeStackAt()
tree_set = TreeSet()
scan_length = ScanLength()
batch_size = BatchSize()
carry_init = CarryInit()
zeros_like = ZerosLike()
tree_size = TreeSize()
ravel_rows = RavelRows()
unravel_rows = UnravelRows()
unravel_like_rows = UnravelRows(lead=True)
jacobian_blocks = JacobianBlocks()
jacobian_matrix = JacobianMatrix()

zero_gradient(ScanLength, BatchSize, TreeSize)


@rule(CarryInit)
def bprop_carry_init(init, out, dout):
    return (dout,)


@rule(RavelRows)
def bprop_ravel_rows(rows, out, dout):
    return (unravel_like_rows(dout, rows),)


@rule(UnravelRows)
def bprop_unravel_rows(m, like, out, dout):
    return ravel_rows(dout), None


@rule(JacobianBlocks)
def bprop_jacobian_blocks(m, o, x, out, dout):
    return jacobian_matrix(dout, o, x), None, None


@rule(JacobianMatrix)
def bprop_jacobian_matrix(blocks, o, x, out, dout):
    return jacobian_blocks(dout, o, x), None, None


@rule(TreeIndex)
def bprop_tree_index(xs, i, out, dout):
    return tree_put(xs, i, dout), None


@rule(TreePut)
def bprop_tree_put(like, i, y, out, dout):
    return None, None, tree_index(dout, i)


@rule(TreeIndexAt)
def bprop_tree_index_at(xs, axes, i, out, dout):
    return tree_put_at(xs, axes, i, dout), None, None


@rule(TreePutAt)
def bprop_tree_put_at(like, axes, i, y, out, dout):
    return None, None, None, tree_index_at(dout, axes, i)


@rule(TreeStackAt)
def bprop_tree_stack_at(y, n, i, out, dout):
    return tree_index(dout, i), None, None


@rule(TreeSet)
def bprop_tree_set(ys, i, y, out, dout):
    dy = tree_index(dout, i)  # read before the write: `dout` is then updated in place
    return tree_set(dout, i, zeros_like(y)), None, dy
