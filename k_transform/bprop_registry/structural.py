"""Rules for the primitives of Python syntax and of AD itself.

Tuples, lists and dicts (variadic: inputs packed, see the registry),
indexing, `not`, and the DFunctor's own helpers (add_grad, zeros_like,
env access, read_param, check_grad), so that K-graphs differentiate again.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform import ops
from k_transform import runtime as rt
from k_transform.bprop_registry.helpers import no_gradient, zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.dfunctor import prims as dp
from k_transform.errors import KTransformError
from k_transform.ir import prims

getitem_grad = ops.GetItemGrad()
sum_to = ops.SumTo()
zeros_like = ops.ZerosLike()
set_item = prims.SetItem()
to_list = prims.Copy("list")
to_tuple = prims.Copy("tuple")


@bprop_getters.register(prims.MakeTuple)
def get_bprop_make_tuple(self):
    def bprop(xs, out, dout):
        return dout

    return bprop


@bprop_getters.register(prims.MakeList)
def get_bprop_make_list(self):
    def bprop(xs, out, dout):
        return dout

    return bprop


@bprop_getters.register(prims.AsSequence)
def get_bprop_as_sequence(self):
    back = prims.AsSequence("tuple" if self.kind == "list" else "list")

    def bprop(x, out, dout):
        return (back(dout),)

    return bprop


@bprop_getters.register(prims.MakeDict)
def get_bprop_make_dict(self):
    def bprop(kv, out, dout):
        grads = ()
        for k in range(0, len(kv), 2):
            grads = grads + (None, dout[kv[k]])
        return grads

    return bprop


# Library functions whose result does not depend smoothly on their inputs:
# sizes, types, constructors from shapes, predicates, integer results.
NON_DIFFERENTIABLE_CALLS = (
    len,
    isinstance,
    range,
    type,
    int,
    bool,
    jnp.shape,
    jnp.ndim,
    jnp.size,
    jnp.zeros,
    jnp.ones,
    jnp.empty,
    jnp.eye,
    jnp.arange,
    jnp.linspace,
    jnp.argmax,
    jnp.argmin,
    jnp.argsort,
    jnp.isnan,
    jnp.isfinite,
    jnp.isinf,
    jnp.logical_and,
    jnp.logical_or,
    jnp.logical_not,
    jnp.equal,
    jnp.not_equal,
    jnp.less,
    jnp.greater,
    jnp.less_equal,
    jnp.greater_equal,
    jnp.floor_divide,
    jnp.result_type,
    jnp.issubdtype,
    jnp.array_equal,
    jnp.allclose,
    jnp.all,
    jnp.any,
    jnp.count_nonzero,
    jax.nn.one_hot,
    jax.random.bernoulli,
    jax.random.normal,
    jax.random.uniform,
    jax.random.split,
    jax.random.PRNGKey,
    rt.insert_position,
    rt.pop_position,
    rt.range_cond,  # the condition of a `for` over a range lowered to `while`
    rt.indices,  # positions, lengths and keys of iteration by position (parse_sugar)
    rt.seq_len,
    rt.zip_length,
    rt.zip_strict_length,
    rt.dict_keys,
    rt.keys_within,
    rt.to_int,
    rt.static_filter,
)


@bprop_getters.register(prims.LibraryCall)
def get_bprop_library_call(self):
    if not any(self.fn is fn for fn in NON_DIFFERENTIABLE_CALLS):
        raise KTransformError(
            f"cannot differentiate the call {self.hint}(...): it has no primitive with a "
            "gradient rule (write it with differentiable operations, or make it a "
            "kt.Primitive with a registered bprop)"
        )
    return no_gradient(lambda xs, out, dout: (None,) * len(xs))


@bprop_getters.register(prims.MethodCall)
def get_bprop_method_call(self):
    raise KTransformError(
        f"cannot differentiate the method call `.{self.method}(...)`: it has no primitive "
        "with a gradient rule (use the jnp function, or a kt.Primitive with a bprop)"
    )


@bprop_getters.register(ops.Assign)
def get_bprop_assign(self):
    # A state update never receives a gradient.
    if self.param is None:
        return no_gradient(lambda param, value, out, dout: (None, None))
    return no_gradient(lambda value, out, dout: (None,))


@bprop_getters.register(ops.IndexAdd)
def get_bprop_index_add(self):
    def bprop(x, index, value, out, dout):
        return dout, None, sum_to(dout[index], value)

    return bprop


@bprop_getters.register(ops.IndexMultiply)
def get_bprop_index_multiply(self):
    def bprop(x, index, value, out, dout):
        scale = jnp.ones_like(x).at[index].set(value)
        return dout * scale, None, sum_to(dout[index] * x[index], value)

    return bprop


@bprop_getters.register(prims.GetItem)
def get_bprop_getitem(self):
    def bprop(x, index, out, dout):
        return getitem_grad(x, index, dout), None

    return bprop


@bprop_getters.register(prims.SetItem)
def get_bprop_setitem(self):
    def bprop(x, index, value, out, dout):
        if isinstance(dout, tuple):  # the gradient of a list may come as a tuple
            dout = to_list(dout)
        dx = set_item(dout, index, zeros_like(value))
        return dx, None, sum_to(dout[index], value)  # value may broadcast

    return bprop


# -- list mutation, made functional (the parser rebinds the list) ---------
@bprop_getters.register(prims.ListAppend)
def get_bprop_list_append(self):
    def bprop(lst, value, out, dout):
        d = to_list(dout)
        return d[: len(lst)], d[len(lst)]

    return bprop


@bprop_getters.register(prims.ListExtend)
def get_bprop_list_extend(self):
    def bprop(lst, seq, out, dout):
        d = to_list(dout)
        rest = d[len(lst) :]
        return d[: len(lst)], (to_tuple(rest) if isinstance(seq, tuple) else rest)

    return bprop


@bprop_getters.register(prims.ListInsert)
def get_bprop_list_insert(self):
    def bprop(lst, index, value, out, dout):
        j = rt.insert_position(len(lst), index)
        d = to_list(dout)
        return d[:j] + d[j + 1 :], None, d[j]

    return bprop


@bprop_getters.register(prims.ListDelete)
def get_bprop_list_delete(self):
    def bprop(lst, index, out, dout):
        j = rt.pop_position(len(lst), index)
        d = to_list(dout)
        return d[:j] + [zeros_value(lst[j])] + d[j:], None

    return bprop


@bprop_getters.register(prims.Copy)
def get_bprop_copy(self):
    def bprop(x, out, dout):
        if isinstance(x, tuple):
            return (to_tuple(dout),)
        if isinstance(x, list):
            return (to_list(dout),)
        if isinstance(dout, (list, tuple)):  # `list(array)`: its rows
            return (jnp.stack(dout),)
        return (dout,)

    return bprop


@bprop_getters.register(ops.GetItemGrad)
def get_bprop_getitem_grad(self):
    def bprop(x, index, dout_, out, dd):
        return zeros_like(x), None, dd[index]

    return bprop


@bprop_getters.register(ops.SumTo)
def get_bprop_sum_to(self):
    tail = self.tail

    def bprop(g, like, out, dout):
        if isinstance(g, (tuple, list)):  # the items of a concatenation `a + b` that `like` took
            rest = zeros_value(g[: len(g) - len(like)] if tail else g[len(like) :])
            return (rest + dout if tail else dout + rest), None
        return _broadcast_like(dout, g), None

    return bprop


zeros_value = dp.ZerosLike()


def _broadcast_like(d, g):
    return jnp.broadcast_to(d, jnp.shape(g)) if d is not None else None


@bprop_getters.register(ops.StopGradient)
def get_bprop_stop_gradient(self):
    def bprop(x, out, dout):
        return (zeros_like(x),)

    return bprop


# Attributes that describe an array rather than compute from it.
STATIC_ATTRIBUTES = ("shape", "ndim", "size", "dtype")


@bprop_getters.register(prims.GetAttr)
def get_bprop_getattr(self):
    if self.attr not in STATIC_ATTRIBUTES:
        raise KTransformError(
            f"cannot differentiate the attribute `.{self.attr}` of a value: it has no "
            "primitive with a gradient rule"
        )
    return no_gradient(lambda x, out, dout: (None,))


@bprop_getters.register(prims.CustomBpropCall)
def get_bprop_custom_cell(self):
    return self.cell.bprop  # the Cell's own bprop(*inputs, out, dout)


@bprop_getters.register(dp.AddGrad)
def get_bprop_add_grad(self):
    def bprop(a, b, out, dout):
        return dout, dout

    return bprop


# -- the DFunctor's own primitives, so K-graphs differentiate again ----------
tree_scale = dp.TreeScale()
tree_vdot = dp.TreeVdot()


@bprop_getters.register(dp.InputGrad)
def get_bprop_input_grad(self):
    return lambda d, arg, out, dout: (dout, None)


@bprop_getters.register(dp.CheckGrad)
def get_bprop_check_grad(self):
    return lambda g, x, out, dout: (dout, None)


@bprop_getters.register(dp.EnvGet)
def get_bprop_env_get(self):
    key = self.key
    return lambda env, like, out, dout: ({key: dout}, None)


@bprop_getters.register(dp.EnvDel)
def get_bprop_env_del(self):
    # The output holds no entry `key`: a gradient under `key` (another
    # recursive frame's node has the same key) belongs to someone else.
    env_del = dp.EnvDel(self.key)

    def bprop(env, out, dout):
        return (env_del(dout),)

    return bprop


@bprop_getters.register(dp.ReadParam)
def get_bprop_read_param(self):
    return lambda out, dout: ()


@bprop_getters.register(dp.TreeVdot)
def get_bprop_tree_vdot(self):
    return lambda a, b, out, dout: (tree_scale(b, dout), tree_scale(a, dout))


@bprop_getters.register(dp.TreeScale)
def get_bprop_tree_scale(self):
    return lambda tree, s, out, dout: (tree_scale(dout, s), tree_vdot(dout, tree))


zero_gradient(
    prims.Not,
    prims.Contains,
    prims.MakeSlice,
    ops.ZerosLike,
    ops.OnesLike,
    dp.ZerosLike,
    dp.OnesLike,
)


# -- stacks (K of loops as IR): push and pop are each other's gradient ----------------
stack_push = dp.StackPush()
stack_pop = dp.StackPop()


@bprop_getters.register(dp.StackPush)
def get_bprop_stack_push(self):
    def bprop(stack, item, out, dout):
        d_item_rest = stack_pop(dout, item)
        return d_item_rest[1], d_item_rest[0]

    return bprop


@bprop_getters.register(dp.StackPop)
def get_bprop_stack_pop(self):
    def bprop(stack, like, out, dout):
        return stack_push(dout[1], dout[0]), None

    return bprop


@bprop_getters.register(dp.StackNew)
def get_bprop_stack_new(self):
    return no_gradient(lambda out, dout: ())


zero_gradient(dp.StackNonEmpty)
