"""Primitives the DFunctor emits into fprop and bprop graphs.

They have gradient rules like any primitive (`bprop_registry.grad_prims`),
so K-graphs can be transformed again (grad of grad, jvp).
"""

from __future__ import annotations

from k_transform import runtime as rt
from k_transform import runtime_grad as rtg
from k_transform.ir.control import ControlPrimitive
from k_transform.ir.primitive import Primitive


class _RuntimeCall(Primitive):
    """A primitive computed by one `k_transform.runtime` helper `rt_name`."""

    rt_name = ""

    def impl(self, *args):
        return getattr(rt, self.rt_name)(*args, *self.extra())

    def extra(self) -> list:
        return []

    def emit(self, e, args):
        extra = [repr(v) for v in self.extra()]
        return f"{e.ref(rt, '_rt')}.{self.rt_name}({', '.join([*args, *extra])})"


class AddGrad(_RuntimeCall):
    """`a + b` for gradient values (None is zero; tuples and envs add by item)."""

    n_inputs = 2
    rt_name = "add_grad"

    def __init__(self):
        super().__init__("add_grad")


class ZerosLike(_RuntimeCall):
    """The zero gradient of a value."""

    n_inputs = 1
    rt_name = "zeros_like_value"

    def __init__(self):
        super().__init__("zeros_like")


class OnesLike(_RuntimeCall):
    n_inputs = 1
    rt_name = "ones_like_value"

    def __init__(self):
        super().__init__("ones_like")


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


class EnvGet(_RuntimeCall):
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


class EnvDel(_RuntimeCall):
    n_inputs = 1
    rt_name = "env_del"

    def __init__(self, key: str):
        super().__init__("env_del", key=key)

    def extra(self):
        return [self.key]

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.env_del({args[0]}, {e.value_source(self.key)})"


class CheckGrad(_RuntimeCall):
    """The gradient a rule gave for an input, checked against the input's shape."""

    n_inputs = 2
    rt_name = "check_grad"

    def __init__(self, rule: str):
        super().__init__("check_grad", rule=rule)

    def extra(self):
        return [self.rule]


class ReadParam(_RuntimeCall):
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


class InputGrad(_RuntimeCall):
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


class TreeVdot(_RuntimeCall):
    """<a, b> summed over all leaves of two gradient trees."""

    n_inputs = 2
    rt_name = "tree_vdot"

    def __init__(self):
        super().__init__("tree_vdot")


class TreeScale(_RuntimeCall):
    """A gradient tree times a scalar."""

    n_inputs = 2
    rt_name = "tree_scale"

    def __init__(self):
        super().__init__("tree_scale")


class ControlFprop(Primitive):
    """K of a control primitive: `(out, bprop)` from `runtime_grad.<name>_fprop`,
    with K-graphs in the control primitive's `k_slots`."""

    def __init__(self, control: ControlPrimitive):
        super().__init__(f"{control.name}_fprop", control=control)

    def impl(self, *args):
        return getattr(rtg, self.name)(*args, **self.control.options())

    def emit(self, e, args):
        parts = self.control.call_parts(args)
        return self.control._emit_call(e, self.name, parts, rtg, "_rtg")


# -- stacks: K of loops written as IR (k_transform.dfunctor.loops) ----------------
class StackNew(_RuntimeCall):
    """An empty stack (`k_transform.runtime_stack`)."""

    n_inputs = 0
    rt_name = "stack_new"

    def __init__(self):
        super().__init__("stack_new")


class StackPush(_RuntimeCall):
    """`stack` with `item` on top."""

    n_inputs = 2
    rt_name = "stack_push"

    def __init__(self):
        super().__init__("stack_push")


class StackPop(_RuntimeCall):
    """`(top, rest)`; a zero (None) gradient stack pops zeros like `like`."""

    n_inputs = 2
    rt_name = "stack_pop"

    def __init__(self):
        super().__init__("stack_pop")


class StackNonEmpty(_RuntimeCall):
    n_inputs = 1
    rt_name = "stack_nonempty"

    def __init__(self):
        super().__init__("stack_nonempty")
