"""Forward mode through a user's gradient rule: the rule must be linear in `dout`.

Forward mode is double reverse (`forward.double_reverse`): the tangent of a
primitive's output is the transpose of its bprop with respect to `dout`,
linearized at `dout = 0`. For the rules shipped with k_transform that is
exact (each is linear in `dout`). A user's rule need not be: a custom_vjp
whose bwd clips the cotangent (JAX's `clip_gradient`), a registered bprop,
a Cell's `bprop`, a `kt.Primitive`'s rule. Its linearization at zero is
then not the map that reverse mode applies (`jacrev` gives `bprop(e_i)`
row by row), so `jvp` would silently disagree with `grad`. JAX refuses
forward mode on any custom_vjp; MindSpore 2.x uses a linear Cell bprop in
`ops.jvp` and gives zeros or crashes on a nonlinear one.

So before forward mode transposes the users' rules a graph reaches,
`check_rules_linear(primal)` reads each rule's graph and follows `dout`
through it: every operation it reaches must be linear in it (a primitive
of `_ANY`, `_FIRST`, `_ONE` or `_SUM` below, a call of a graph or a
branch that is, under a condition that does not read `dout`); adding a
value that does not depend on `dout` (an affine rule) is not linear
either, unless that value is a zero. Anything else (`clip`, `where` on
`dout`'s sign, a loop over it, an operation this table does not know)
refuses forward mode with a KTransformError naming the rule, the
operation and the user's line. Only where a tangent goes through the
rule: not a call whose result only gives a structure (the `out` a Jacobian
reads), nor one on constants. Reverse mode (grad, jacrev, vjp) is not
affected, nor is forward mode over a gradient of a custom_vjp function
(`hessian`, `jvp(grad(f))`: its fwd and bwd are run there, and
differentiated as code, as JAX does); a primitive's own output still takes
its tangent from its rule there. A custom fprop whose rule is known to be
linear (`FuncGraph.linear_rule`, set by whoever makes it) is not read.
"""

from __future__ import annotations

from k_transform.bprop_registry.registry import bprop_getters
from k_transform.context import TRANSFORM
from k_transform.control.prims import ControlPrimitive, Switch
from k_transform.dfunctor.services import SERVICES
from k_transform.errors import KTransformError
from k_transform.ir.nodes import Constant, FuncGraph, Node
from k_transform.ir.primitive import Primitive
from k_transform.ops import python as prims

# How primitives use a value that depends on `dout` (by class name: the
# table spans ops modules). Jointly linear in all their inputs:
_ANY = {
    "MakeTuple",
    "MakeList",
    "MakeDict",
    "Concat",
    "Stack",
    "Neg",
    "Pos",
    "Real",
    "Imag",
}
# Linear in their first input, the others static (shapes, axes, indices, a divisor):
_FIRST = {
    "GetItem",
    "Reshape",
    "Transpose",
    "ReduceSum",
    "ReduceMean",
    "ExpandDims",
    "Squeeze",
    "BroadcastTo",
    "Cast",
    "MsCast",
    "Unstack",
    "Split",
    "Flip",
    "Roll",
    "MoveAxis",
    "SwapAxes",
    "Tile",
    "TileGrad",
    "SumTo",
    "SpreadLike",
    "Cumsum",
    "Tril",
    "Triu",
    "Copy",
    "Div",
    "RealDiv",
    "InputGrad",
    "Gather",
    "GatherGrad",
    "TakeAlongAxis",
    "TakeAlongAxisGrad",
    "UnsortedSegmentSum",
    "GetItemGrad",
    "Unflatten",
    "AsSequence",
}
# Multilinear: linear in any one input, the others not reading `dout`:
_ONE = {"Mul", "MatMul", "BatchMatMul", "NumpyMatMul", "Dot", "Outer", "Einsum"}
# Sums: linear where every term reads `dout` or is a zero (else affine).
# `Select`'s condition must not read `dout`.
_SUM = {"Add", "Sub", "AddN", "TensorAdd", "AddGrad", "Select"}
# Values that say nothing of `dout`'s value: shapes, identity tests, zeros.
_STATIC = {"Shape", "Size", "Is", "IsNot", "ZerosLike", "OnesLike", "BatchSize", "CheckUnpack"}

_DEP, _ZERO = "dout", "zero"  # a node's kind (absent: a value not reading dout)


class _NotLinear(Exception):
    def __init__(self, what: str, node: Node | None):
        super().__init__(what)
        self.what, self.node = what, node


def check_rules_linear(primal: FuncGraph) -> None:
    """Refuse (KTransformError) where forward mode of `primal` would transpose
    a user's gradient rule that is not linear in its `dout` (module docstring).
    Checked once per graph."""
    done = TRANSFORM.cache("rule_linearity.checked")
    if primal.uid in done:
        return
    for _, nodes in _graphs_differentiated(primal):
        for node in nodes:
            rule, where = _users_rule(node)
            if rule is not None:
                _check_rule(rule, where, node)
    done[primal.uid] = True


def _graphs_differentiated(primal: FuncGraph):
    """`(graph, nodes)`: the graphs K of `primal` transforms and, of each, the
    nodes whose tangent can reach its output (`_tangent_needed`); the bodies
    of functions with their own rule are left out (the rule is used instead)."""
    seen: set[int] = set()
    todo = [primal]
    while todo:
        graph = todo.pop().differentiable()
        if graph.uid in seen:
            continue
        seen.add(graph.uid)
        nodes = _tangent_needed(graph)
        yield graph, nodes
        for node in nodes:
            for a in node.inputs:
                value = a.value if isinstance(a, Constant) else None
                if isinstance(value, FuncGraph) and value.differentiable().custom_fprop is None:
                    todo.append(value)
                elif isinstance(value, ControlPrimitive) and hasattr(value, "subgraphs"):
                    todo.extend(value.subgraphs())
        for child in graph.children():
            if child.differentiable().custom_fprop is None:
                todo.append(child)


def _tangent_needed(graph: FuncGraph) -> list:
    """The nodes of `graph` with a tangent that reaches its output (or a
    closure): computed from a value with one (a parameter, a value of an
    enclosing graph), and read where a gradient goes back (`_needed`)."""
    carries = {id(p) for p in graph.parameters}
    for node in graph.nodes:
        for a in node.inputs:
            if isinstance(a, Constant):
                value = a.value
                if isinstance(value, FuncGraph) and value.parent is not None:
                    carries.add(id(node))  # a closure: it may read a tangent
            elif id(a) in carries or a.graph is not graph:
                carries.add(id(node))
    needed = _needed(graph, set(), {})
    return [n for n in graph.nodes if id(n) in needed and id(n) in carries]


def _needed(graph: FuncGraph, active: set, memo: dict) -> set:
    """The ids of the nodes and parameters of `graph` whose gradient reaches
    its output: not those read only where a rule gives no gradient (`None`:
    the `out` a Jacobian reads for its structure), nor what computes them; an
    argument of a call of a graph, where that graph's parameter gets none."""
    if graph.uid in memo:
        return memo[graph.uid]
    readers = graph.readers()
    needed: set[int] = set()
    active.add(graph.uid)
    for node in [*reversed(graph.nodes), *graph.parameters]:
        for user in readers[id(node)]:
            if user is None or (id(user) in needed and user.fn is node):
                needed.add(id(node))
                break
            if id(user) in needed:
                at = [k for k, a in enumerate(user.args) if a is node]
                if not all(_unused_at(user, k, active, memo) for k in at):
                    needed.add(id(node))
                    break
    active.discard(graph.uid)
    memo[graph.uid] = needed
    return needed


def _unused_at(node, k: int, active: set, memo: dict) -> bool:
    """Whether input `k` of `node` gets no gradient: a call of a closed graph
    whose parameter gets none, or a rule giving it none."""
    fn = node.fn.value if isinstance(node.fn, Constant) else None
    if isinstance(fn, FuncGraph):
        fn = fn.differentiable()
        if fn.custom_fprop is not None or fn.uid in active or fn.free_variables():
            return False
        if len(node.args) != len(fn.parameters):
            return False
        return id(fn.parameters[k]) not in _needed(fn, active, memo)
    return _no_gradient_at(node, k)


def _no_gradient_at(node, k: int) -> bool:
    """Whether the rule of the primitive `node` applies gives its input `k` no
    gradient (a `None` in the tuple its bprop returns)."""
    fn = node.fn.value if isinstance(node.fn, Constant) else None
    if not isinstance(fn, Primitive) or isinstance(fn, ControlPrimitive):
        return False
    if prims.imports_jaxpr(fn) or not bprop_getters.has_rule(fn):
        return False
    try:
        rule = bprop_getters.bprop_graph(fn, len(node.args), SERVICES.parse)
    except KTransformError:
        return False
    if rule.no_gradient:
        return True
    out = rule.output
    fn_out = (
        out.fn.value
        if getattr(out, "fn", None) is not None and isinstance(out.fn, Constant)
        else None
    )
    if not isinstance(fn_out, prims.MakeTuple) or k >= len(out.args):
        return False
    item = out.args[k]
    return isinstance(item, Constant) and item.value is None


def _users_rule(node) -> tuple:
    """`(bprop graph, its dout parameter)` of the user's rule `node` applies, or (None, None)."""
    fn = node.fn.value if isinstance(node.fn, Constant) else None
    if isinstance(fn, FuncGraph):
        fprop = fn.differentiable().custom_fprop
        if fprop is None or getattr(fprop, "linear_rule", False):
            return None, None
        bprop = _bprop_of_fprop(fprop)
        if bprop is None or len(bprop.parameters) != 1:
            raise KTransformError(
                f"forward mode (kt.jvp, jacfwd, hvp) through {fn.name}, which has its own "
                "gradient rule: k_transform cannot check that the rule is linear in its "
                "cotangent (not supported)",
                node.debug,
            )
        bprop.rule_name = bprop.rule_name or f"the custom_vjp rule of {fn.name}"
        return bprop, bprop.parameters[0]
    if not isinstance(fn, Primitive) or prims.imports_jaxpr(fn):
        return None, None
    if not bprop_getters.has_rule(fn):
        return None, None
    try:
        graph = bprop_getters.bprop_graph(fn, len(node.args), SERVICES.parse)
    except KTransformError:
        return None, None  # no usable rule: reported where the jvp graph is built
    if graph.trusted:
        return None, None
    return graph, graph.parameters[-1]


def _bprop_of_fprop(fprop: FuncGraph) -> FuncGraph | None:
    """The bprop closure a custom fprop returns (`out, bprop`), following the
    calls its output is the result of (`frontend/jax_custom.py`)."""
    graph = fprop
    for _ in range(8):
        out = graph.output
        if not isinstance(out, Constant) and getattr(out, "fn", None) is not None:
            fn = out.fn.value if isinstance(out.fn, Constant) else None
            if isinstance(fn, FuncGraph):
                graph = fn
                continue
            if isinstance(fn, prims.MakeTuple) and len(out.args) == 2:
                second = out.args[1]
                if isinstance(second, Constant) and isinstance(second.value, FuncGraph):
                    return second.value
        return None
    return None


_CHECKING: set[int] = set()  # the rules being read (one met again: taken as linear)


def _not_linear(rule: FuncGraph, dout) -> _NotLinear | None:
    """Where `dout` goes through something not linear in `rule`, or None."""
    checked = TRANSFORM.cache("rule_linearity.rules")
    if rule.uid in checked:
        return checked[rule.uid]
    if rule.uid in _CHECKING:
        return None
    found = None
    _CHECKING.add(rule.uid)
    try:
        _Linearity().graph(rule, {id(dout): _DEP})
    except _NotLinear as exc:
        found = exc
    finally:
        _CHECKING.discard(rule.uid)
    checked[rule.uid] = found
    return found


def not_linear_in(graph: FuncGraph, params: list) -> _NotLinear | None:
    """Where a value depending on `params` (parameters of `graph`: a JAX
    custom_jvp rule's tangents, `dfunctor._transposed_rule`) goes through
    something not linear in them (`.what`, `.node`), or None."""
    try:
        _Linearity().graph(graph, {id(p): _DEP for p in params})
    except _NotLinear as exc:
        return exc
    return None


def _check_rule(rule: FuncGraph, dout, site) -> None:
    found = _not_linear(rule, dout)
    if found is None:
        return
    at = found.node.debug if found.node is not None else rule.debug
    name = rule.rule_name or rule.name
    raise KTransformError(
        f"forward mode (kt.jvp, jacfwd, hessian, hvp) through {name}: forward mode "
        "transposes a gradient rule, which needs the rule linear in its cotangent, and here "
        f"the cotangent goes through {found.what}{at.describe()}\n"
        "Its forward-mode derivative would not be what grad and jacrev give (JAX refuses "
        "forward mode on a custom_vjp function too): use reverse mode (kt.grad, kt.jacrev, "
        "kt.vjp), or make the rule linear in the cotangent. The call of it",
        site.debug,
    )


class _Linearity:
    """Follows `dout` through a graph: `kinds` maps a node's id to _DEP (reads
    dout, linearly), _ZERO, or a list of kinds (a tuple, item by item)."""

    def __init__(self):
        self.kinds: dict[int, object] = {}
        self.active: set[tuple] = set()

    def kind(self, node: Node):
        if isinstance(node, Constant):
            value = node.value
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
                return _ZERO
            if value is None:
                return _ZERO
            return None
        return self.kinds.get(id(node))

    def graph(self, graph: FuncGraph, params: dict):
        """The kind of `graph`'s output, given its parameters' kinds."""
        key = (graph.uid, tuple(sorted((k, repr(v)) for k, v in params.items())))
        if key in self.active:
            raise _NotLinear("a recursive call", None)
        self.active.add(key)
        self.kinds.update(params)
        for node in graph.nodes:
            self.node(node)
        self.active.discard(key)
        return self.kind(graph.output)

    def node(self, node) -> None:
        kinds = [self.kind(a) for a in node.args]
        if self.kind(node.fn) is not None:
            raise _NotLinear("a function that depends on it", node)
        fn = node.fn.value if isinstance(node.fn, Constant) else None
        reads = [_reads(k) for k in kinds]
        if isinstance(fn, FuncGraph) and (any(reads) or _captures(fn, self.kinds)):
            params = {id(p): k for p, k in zip(fn.parameters, kinds, strict=False) if k}
            self._set(node, self.graph(fn, params))
            return
        if not any(reads):
            if isinstance(fn, Primitive) and type(fn).__name__ == "ZerosLike":
                self._set(node, _ZERO)
            elif isinstance(fn, prims.MakeTuple) and any(k is not None for k in kinds):
                self._set(node, list(kinds))
            elif isinstance(fn, Switch) and any(
                _captures(g.value, self.kinds) for g in node.args[1:3]
            ):
                self._switch(node, kinds)
            return
        if isinstance(fn, Switch):
            if reads[0]:
                raise _NotLinear("the condition of an `if`", node)
            self._switch(node, kinds)
            return
        if not isinstance(fn, Primitive) or isinstance(fn, ControlPrimitive):
            raise _NotLinear(_what(fn), node)
        if sum(reads) == 1 and _users_linear_primitive(fn, len(node.args)):
            self._set(node, _DEP)
            return
        name = type(fn).__name__
        if name in _STATIC:
            return
        if isinstance(fn, prims.MakeTuple):
            self._set(node, list(kinds))
            return
        if isinstance(fn, prims.GetItem) and not reads[1] and isinstance(kinds[0], list):
            index = node.args[1].value if isinstance(node.args[1], Constant) else None
            if type(index) is int and -len(kinds[0]) <= index < len(kinds[0]):
                self._set(node, kinds[0][index])
                return
        if name in _ANY or (name in _FIRST and not any(reads[1:])):
            self._set(node, _DEP)
            return
        if name in _ONE and sum(reads) == 1:
            self._set(node, _DEP)
            return
        if name in _SUM:
            terms = kinds[1:] if name == "Select" else kinds
            if name == "Select" and reads[0]:
                raise _NotLinear(f"the condition of {_what(fn)}", node)
            if all(_reads(k) or k == _ZERO for k in terms):
                self._set(node, _DEP)
                return
            raise _NotLinear(f"{_what(fn)} with a term that does not depend on it", node)
        raise _NotLinear(_what(fn), node)

    def _switch(self, node, kinds) -> None:
        params = kinds[3:]
        outs = []
        for branch in node.args[1:3]:
            graph = branch.value
            given = {id(p): k for p, k in zip(graph.parameters, params, strict=False) if k}
            outs.append(self.graph(graph, given))
        if all(o is None for o in outs):
            return
        if any(o is None for o in outs):  # one branch a value not reading dout: affine
            raise _NotLinear("an `if` with a branch whose value does not depend on it", node)
        self._set(node, _DEP)

    def _set(self, node, kind) -> None:
        if kind is not None:
            self.kinds[id(node)] = kind


def _users_linear_primitive(prim: Primitive, n: int) -> bool:
    """A rule applying its own primitive to `dout` (`Scale(dout, k)` in the
    rule of `Scale`): linear by the rule's own word (its impl is not read).
    Another primitive of the user's is not taken as linear: one whose rule
    is linear in dout may still be nonlinear (a relu)."""
    if prims.imports_jaxpr(prim) or not bprop_getters.has_rule(prim):
        return False
    try:
        graph = bprop_getters.bprop_graph(prim, n, SERVICES.parse)
    except KTransformError:
        return False
    return not graph.trusted and graph.uid in _CHECKING


def _reads(kind) -> bool:
    if isinstance(kind, list):
        return any(_reads(k) for k in kind)
    return kind == _DEP


def _captures(graph: FuncGraph, kinds: dict) -> bool:
    return graph.parent is not None and any(
        _reads(kinds.get(id(v))) for v in graph.free_variables()
    )


def _what(fn) -> str:
    if isinstance(fn, Primitive):
        return f"`{fn.name or type(fn).__name__}`, which is not linear in it (or not known to be)"
    if isinstance(fn, FuncGraph):
        return f"a call of {fn.name}"
    return f"{type(fn).__name__}, which k_transform cannot check is linear"
