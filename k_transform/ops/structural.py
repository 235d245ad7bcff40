"""Structural primitives: shapes of gradients, zeros, stop_gradient, and the
gradient plumbing the DFunctor emits (add_grad, env access, read_param, ...).

`SumTo(g, like)` reduces a broadcast gradient back to `like`'s shape;
`GetItemGrad(x, index, dout)` is the gradient of indexing. They are used by
gradient rules and K-graphs, and have rules themselves (below), so K-graphs
differentiate again (grad of grad, jvp).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform import runtime as rt
from k_transform.bprop_registry.helpers import rule, zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ops.base import JaxPrimitive, RuntimeCall, elementwise
from k_transform.ops.mapping import map_functions


class _WithTail(JaxPrimitive):
    """A two-input helper with a `tail` flag (the end of a concatenation of
    tuples, not its start), spelled out only when set."""

    jax_kwargs = {"tail": "tail"}
    n_inputs = 2

    def __init__(self, tail: bool = False):
        super().__init__(tail=tail)

    def emit(self, e, args):
        tail = ", tail=True" if self.tail else ""
        return f"{e.ref(type(self).jax_fn, self.jax_name)}({args[0]}, {args[1]}{tail})"


class SumTo(_WithTail):
    """`g` summed to the shape of `like` (`rt.sum_to`)."""

    jax_fn = staticmethod(rt.sum_to)
    jax_name = "_rt.sum_to"


class SpreadLike(_WithTail):
    """`d` spread over the shape of `g` (`rt.spread_like`): the transpose of `SumTo`."""

    jax_fn = staticmethod(rt.spread_like)
    jax_name = "_rt.spread_like"


GetItemGrad = elementwise(
    "GetItemGrad", rt.getitem_grad, "_rt.getitem_grad", 3, "Zeros like `x` with `dout` at `index`."
)
GetItemGrad.structure_inputs = (0,)

GradItem = elementwise(
    "GradItem", rt.grad_item, "_rt.grad_item", 2, "`d[index]`, None where the gradient `d` is None."
)


class ItemsGrad(RuntimeCall):
    """`items_grad(x, d_1, ..., d_n)`: the gradient of `x` from those of its
    items read at the constant `indices` (`rt.items_grad`); the DFunctor
    gathers the item gradients of one tuple into one (`DFunctor.total_sens`)."""

    rt_name = "items_grad"
    structure_inputs = (0,)

    def __init__(self, indices: tuple):
        super().__init__("items_grad", indices=indices)

    def impl(self, x, *douts):
        return rt.items_grad(x, self.indices, *douts)

    def emit(self, e, args):
        fn, indices = e.ref(self.module, self.alias), e.value_source(self.indices)
        return f"{fn}.items_grad({args[0]}, {indices}, {', '.join(args[1:])})"


class GradItems(RuntimeCall):
    """`grad_items(d)`: the tuple of the items `indices` of the gradient `d`
    (`rt.grad_items`; `ItemsGrad`'s rule, without a loop over `indices`)."""

    n_inputs = 1
    rt_name = "grad_items"

    def __init__(self, indices: tuple):
        super().__init__("grad_items", indices=indices)

    def extra(self) -> list:
        return [self.indices]


class ItemsGradOf(RuntimeCall):
    """`items_grad_of(x, douts)`: `ItemsGrad` with its item gradients as one
    tuple (`rt.items_grad_of`); `GradItems`' transpose."""

    n_inputs = 2
    rt_name = "items_grad_of"
    structure_inputs = (0,)

    def __init__(self, indices: tuple):
        super().__init__("items_grad_of", indices=indices)

    def impl(self, x, douts):
        return rt.items_grad_of(x, self.indices, douts)

    def emit(self, e, args):
        fn, indices = e.ref(self.module, self.alias), e.value_source(self.indices)
        return f"{fn}.items_grad_of({args[0]}, {indices}, {args[1]})"


ZerosLike = elementwise(
    "ZerosLike", rt.zeros_like_value, "_rt.zeros_like_value", 1, "Zeros like x."
)
OnesLike = elementwise("OnesLike", rt.ones_like_value, "_rt.ones_like_value", 1, "Ones like x.")
ScalarSens = elementwise(
    "ScalarSens", rt.scalar_sens, "_rt.scalar_sens", 1, "1 for a scalar x, else a TypeError."
)


class StopGradient(JaxPrimitive):
    """`x` forward; no gradient flows back."""

    jax_fn = staticmethod(jax.lax.stop_gradient)
    jax_name = "jax.lax.stop_gradient"
    n_inputs = 1


map_functions(
    {
        ZerosLike: (jnp.zeros_like,),
        OnesLike: (jnp.ones_like,),
        StopGradient: (jax.lax.stop_gradient,),
    }
)


# -- the DFunctor's gradient plumbing ----------------------------------------------
class AddGrad(RuntimeCall):
    """`a + b` for gradient values (None is zero; tuples and envs add by item)."""

    n_inputs = 2
    rt_name = "add_grad"

    def __init__(self):
        super().__init__("add_grad")


class RestrictGrad(RuntimeCall):
    """The part of a sum's gradient an operand contributed (`AddGrad`'s rule)."""

    n_inputs = 2
    rt_name = "restrict_grad"

    def __init__(self):
        super().__init__("restrict_grad")


restrict_grad = RestrictGrad()


class ParamKey(str):
    """The env key of a `kt.Parameter` (its name and a process-unique id).

    Generated code spells it `param_key(<parameter>)`, so the text does not
    depend on the id.
    """

    def __new__(cls, param):
        key = super().__new__(cls, f"param:{param.name}:{param.uid}")
        key.param = param
        return key

    def kt_source(self, e) -> str:
        return f"{e.ref(ParamKey, 'param_key')}({e.ref(self.param, self.param.name)})"


EMPTY_ENV: dict = {}  # the env of a bprop that collects nothing (never mutated)


class EnvGet(RuntimeCall):
    """`env[key]`, or zeros like the second input when the key is absent."""

    n_inputs = 2
    rt_name = "env_get"

    def __init__(self, key: str):
        super().__init__("env_get", key=key)

    def impl(self, env, like):
        return rt.env_get(env, self.key, like)

    def emit(self, e, args):
        key = e.value_source(self.key)
        return f"{e.ref(rt, '_rt')}.env_get({args[0]}, {key}, {args[1]})"


class EnvDel(RuntimeCall):
    n_inputs = 1
    rt_name = "env_del"

    def __init__(self, key: str):
        super().__init__("env_del", key=key)

    def extra(self):
        return [self.key]

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.env_del({args[0]}, {e.value_source(self.key)})"


class CheckGrad(RuntimeCall):
    """The gradient a rule gave for an input, checked against the input's shape."""

    n_inputs = 2
    rt_name = "check_grad"

    def __init__(self, rule: str):
        super().__init__("check_grad", rule=rule)

    def extra(self):
        return [self.rule]


class CheckTangent(RuntimeCall):
    """A tangent given to `kt.jvp` / `kt.hvp` inside transformed code, checked
    against its input's structure and shapes when the program runs (traces):
    `(input, tangent) -> tangent` (`rt.check_tangent`)."""

    n_inputs = 2
    rt_name = "check_tangent"

    def __init__(self, api: str, k: int):
        super().__init__("check_tangent", api=api, k=k)

    def extra(self):
        return [self.api, self.k]


class ReadParam(RuntimeCall):
    """The value of a `kt.Parameter` in the current gradient call."""

    n_inputs = 0

    def __init__(self, param, key: str):
        super().__init__("read_param", param=param, key=key)

    def parameters(self):
        return [self.param]

    def impl(self):
        return rt.read_param(self.param)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.read_param({e.ref(self.param, self.param.name)})"


class _KeyedCall(RuntimeCall):
    """A run-time helper given `param_key` (`ParamKey`) as its last argument."""

    def impl(self, *args):
        return getattr(rt, self.rt_name)(*args, ParamKey)

    def emit(self, e, args):
        return (
            f"{e.ref(rt, '_rt')}.{self.rt_name}({', '.join(args)}, {e.ref(ParamKey, 'param_key')})"
        )


class ParamEnv(_KeyedCall):
    """The gradient of a constant that holds Parameters (a Cell given to a
    function) as an env of theirs (`rt.param_env`): the DFunctor adds it to
    the env, as it adds a Parameter's gradient."""

    n_inputs = 2
    rt_name = "param_env"

    def __init__(self):
        super().__init__("param_env")


class ParamEnvT(_KeyedCall):
    """The transpose of `ParamEnv` (its rule)."""

    n_inputs = 3
    rt_name = "param_env_t"

    def __init__(self):
        super().__init__("param_env_t")


class AttrEnv(_KeyedCall):
    """`x.attr`'s part of the gradient of the object `x` when the attribute
    holds Parameters (`rt.attr_env`; GetAttr's rule)."""

    n_inputs = 3
    rt_name = "attr_env"

    def __init__(self):
        super().__init__("attr_env")


class AttrEnvT(_KeyedCall):
    """The transpose of `AttrEnv` (its rule)."""

    n_inputs = 4
    rt_name = "attr_env_t"

    def __init__(self):
        super().__init__("attr_env_t")


class InputGrad(RuntimeCall):
    """The gradient reported for an input (zeros for static and integer inputs;
    `integers`: integer arrays get their gradient in their dtype, MindSpore's
    GradOperation)."""

    n_inputs = 2
    rt_name = "input_grad"

    def __init__(self, integers: bool = False):
        super().__init__("input_grad", integers=integers)

    def extra(self) -> list:
        return [True] if self.integers else []

    def emit(self, e, args):
        flag = ", integers=True" if self.integers else ""
        return f"{e.ref(rt, '_rt')}.input_grad({', '.join(args)}{flag})"


class AuxSens(RuntimeCall):
    """The sensitivity of a `has_aux` output `(value, *aux)`: `first` for the
    value, zeros for the auxiliary values (`rt.aux_sens`)."""

    n_inputs = 2
    rt_name = "aux_sens"

    def __init__(self):
        super().__init__("aux_sens")


class SplitAux(RuntimeCall):
    """`(value, aux)` of a `has_aux` output `(value, *aux)` (`rt.split_aux`)."""

    n_inputs = 1
    rt_name = "split_aux"

    def __init__(self):
        super().__init__("split_aux")


class JoinAux(RuntimeCall):
    """The gradient of a `has_aux` output from that of its split (`rt.join_aux`)."""

    n_inputs = 2
    rt_name = "join_aux"

    def __init__(self):
        super().__init__("join_aux")


# == gradient rules ==============================================================
# Rules of the structural primitives and of the DFunctor's own plumbing, so that
# K-graphs differentiate again.

getitem_grad = GetItemGrad()
grad_item = GradItem()
sum_to = SumTo()
zeros_like = ZerosLike()


@rule(GetItemGrad)
def bprop_getitem_grad(x, index, dout_, out, dd):
    return None, None, grad_item(dd, index)  # x: read for its structure


@rule(GradItem)
def bprop_grad_item(d, index, out, dout):
    return getitem_grad(d, index, dout), None


@bprop_getters.register(ItemsGrad)
def get_bprop_items_grad(self):
    items = GradItems(self.indices)

    def bprop(xs, out, dout):
        return (zeros_like(xs[0]),) + items(dout)

    return bprop


@bprop_getters.register(GradItems)
def get_bprop_grad_items(self):
    back = ItemsGradOf(self.indices)

    def bprop(d, out, dout):
        return (back(d, dout),)

    return bprop


@bprop_getters.register(ItemsGradOf)
def get_bprop_items_grad_of(self):
    items = GradItems(self.indices)

    def bprop(x, douts, out, dout):
        return zeros_like(x), items(dout)

    return bprop


# `sum_to` and `spread_like` are linear and each other's transpose.
@bprop_getters.register(SumTo)
def get_bprop_sum_to(self):
    spread = SpreadLike(self.tail)

    def bprop(g, like, out, dout):
        return spread(dout, g), None

    return bprop


@bprop_getters.register(SpreadLike)
def get_bprop_spread_like(self):
    sum_back = SumTo(self.tail)

    def bprop(d, g, out, dout):
        return sum_back(dout, d), None

    return bprop


@rule(AddGrad)
def bprop_add_grad(a, b, out, dout):
    return restrict_grad(dout, a), restrict_grad(dout, b)


@rule(RestrictGrad)
def bprop_restrict_grad(grad, like, out, dout):
    return dout, None  # keys `like` lacks are zeros of `grad`'s: dout fits it as it is


# -- the DFunctor's own primitives, so K-graphs differentiate again ----------


@rule(InputGrad)
def bprop_input_grad(d, arg, out, dout):
    return (dout, None)


@rule(CheckGrad)
def bprop_check_grad(g, x, out, dout):
    return (dout, None)


@bprop_getters.register(EnvGet)
def get_bprop_env_get(self):
    key = self.key
    return lambda env, like, out, dout: ({key: dout}, None)


@bprop_getters.register(EnvDel)
def get_bprop_env_del(self):
    # The output holds no entry `key`: a gradient under `key` (another
    # recursive frame's node has the same key) belongs to someone else.
    env_del = EnvDel(self.key)

    def bprop(env, out, dout):
        return (env_del(dout),)

    return bprop


@rule(CheckTangent)
def bprop_check_tangent(x, v, out, dout):
    return (None, dout)


@rule(ReadParam)
def bprop_read_param(out, dout):
    return ()


# ParamEnv and ParamEnvT (AttrEnv and AttrEnvT) are linear in the gradient
# and each other's transpose: each is the other's rule.
param_env, param_env_t = ParamEnv(), ParamEnvT()
attr_env, attr_env_t = AttrEnv(), AttrEnvT()


@rule(ParamEnv)
def bprop_param_env(value, grad, out, dout):
    return (None, param_env_t(value, dout, grad))


@rule(ParamEnvT)
def bprop_param_env_t(value, denv, like, out, dout):
    return (None, param_env(value, dout), None)


@rule(AttrEnv)
def bprop_attr_env(x, value, grad, out, dout):
    return (None, None, attr_env_t(x, value, dout, grad))


@rule(AttrEnvT)
def bprop_attr_env_t(x, value, denv, like, out, dout):
    return (None, None, attr_env(x, value, dout), None)


@rule(AuxSens)
def bprop_aux_sens(value, first, out, dout):
    return (None, dout[0])


join_aux = JoinAux()
split_aux = SplitAux()


@rule(SplitAux)
def bprop_split_aux(value, out, dout):
    return (join_aux(value, dout),)


@rule(JoinAux)
def bprop_join_aux(value, d_split, out, dout):
    return (None, split_aux(dout))


zero_gradient(ZerosLike, OnesLike, ScalarSens)
# No gradient, not a zero one: the code stopped is not differentiated at all
# (a zero pushed through it meets 0 * inf = NaN where JAX gives numbers)
zero_gradient(StopGradient)
