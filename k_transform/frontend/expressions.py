"""Parser methods for expressions other than calls (mixed into `GraphBuilder`).

`expr` sends each expression to its `expr_*` method (`GraphBuilder._visit`)
or refuses it by name (`UNSUPPORTED_EXPRESSIONS`). Operators become the
`ops` primitive of their dunder (`BINOPS`, comparison and unary tables);
`and`/`or`, chained comparisons and `x if c else y` short-circuit through
`switch` unless the condition is known while parsing; `lambda` is a nested
def (`lambda_def`, closures in `k_transform.frontend.closures`); literals,
f-strings (`_rt.fstring`), names, attributes (of constants: read now, and
guarded when a module's or object's attribute may be rebound), subscripts
and slices. Calls are `k_transform.frontend.calls`; comprehensions
`k_transform.frontend.parse_sugar`.
"""

from __future__ import annotations

import inspect
import types

import gast

from k_transform import ops
from k_transform import runtime as rt
from k_transform.cell import Cell
from k_transform.control import prims as control
from k_transform.errors import KTransformError
from k_transform.frontend import guards
from k_transform.frontend.closures import ClosureSite, is_maker
from k_transform.frontend.control_flow import close_graphs, known_truth
from k_transform.frontend.source import is_user_function
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node
from k_transform.ops import python as prims
from k_transform.ops.mapping import adapt_attribute
from k_transform.protocol import kt_attribute

UNSUPPORTED_EXPRESSIONS = {
    gast.Yield: "yield",
    gast.YieldFrom: "yield from",
    gast.Await: "await",
    gast.SetComp: "set comprehension",
    gast.Set: "set literal",
}

BINOPS = {
    gast.Add: "add",
    gast.Sub: "sub",
    gast.Mult: "mul",
    gast.Div: "truediv",
    gast.FloorDiv: "floordiv",
    gast.Mod: "mod",
    gast.Pow: "pow",
    gast.MatMult: "matmul",
    gast.LShift: "lshift",
    gast.RShift: "rshift",
    gast.BitOr: "bitor",
    gast.BitXor: "bitxor",
    gast.BitAnd: "bitand",
}
_CMPOPS = {
    gast.Eq: "eq",
    gast.NotEq: "ne",
    gast.Lt: "lt",
    gast.LtE: "le",
    gast.Gt: "gt",
    gast.GtE: "ge",
    gast.Is: "is_",
    gast.IsNot: "is_not",
}
# Graphs of a part of an expression (`ControlFlowBuilder.subgraph` kinds).
_EXPRESSION_GRAPHS = ("ifexp_true", "ifexp_false", "bool_rhs", "bool_lhs", "while_cond")
_UNARYOPS = {gast.USub: "neg", gast.UAdd: "pos", gast.Invert: "invert"}


class ExpressionBuilder:
    """The `GraphBuilder` methods for the expressions in the module docstring."""

    # -- expressions --------------------------------------------------------------
    def expr(self, e) -> Node:
        return self._visit(e, "expr_", UNSUPPORTED_EXPRESSIONS, "expression")

    def expr_BoolOp(self, e) -> Node:
        # `a and b` is `b if a else a`; `a or b` is `a if a else b` (short-circuit).
        result = self.expr(e.values[0])
        for operand in e.values[1:]:
            result = self.short_circuit(result, operand, isinstance(e.op, gast.And), e)
        return result

    def short_circuit(self, left: Node, right_expr, is_and: bool, e) -> Node:
        truth = known_truth(left)
        if truth is not None:
            keep_left = (not truth) if is_and else truth
            return left if keep_left else self.expr(right_expr)
        evaluate = self.subgraph("bool", e, "rhs")
        evaluate.graph.add_parameter("left")
        evaluate.graph.output = evaluate.expr(right_expr)
        keep = self.subgraph("bool", e, "lhs")
        keep.graph.output = keep.graph.add_parameter("left")
        args = close_graphs([evaluate, keep])
        true_b, false_b = (evaluate, keep) if is_and else (keep, evaluate)
        graphs = [Constant(true_b.graph, hint="then"), Constant(false_b.graph, hint="else")]
        return self.apply(control.Switch(self.where(e)), left, *graphs, left, *args, node=e)

    def expr_BinOp(self, e) -> Node:
        op = ops.BINARY[BINOPS[type(e.op)]]()
        left = self.expr(e.left)
        if isinstance(e.op, gast.BitOr):  # `d | {...}`: a new dict, items assigned in order
            merged = self.dict_merge(left, e.right, e)
            if merged is not None:
                return merged
        return self.apply(op, left, self.expr(e.right), node=e)

    def expr_UnaryOp(self, e) -> Node:
        if isinstance(e.op, gast.Not):
            return self.apply(prims.Not(), self.expr(e.operand), node=e)
        return self.apply(ops.UNARY[_UNARYOPS[type(e.op)]](), self.expr(e.operand), node=e)

    def expr_Lambda(self, e) -> Node:
        name = f"{self.fdef_name()}_lambda{self.debug(e).line}"
        fdef = lambda_def(e, "<lambda>")
        return self.materialize(ClosureSite(fdef, name, self, self.eval_defaults(fdef), ()))

    def expr_NamedExpr(self, e) -> Node:
        """`(name := value)` binds `name` at this point of the evaluation, in
        the scope Python binds it in, and is the value. Where the expression
        is built as a graph of its own (a branch of `x if c else y`, the right
        operand of `and`/`or`, a `while` test other than the loop's own:
        `desugar` moves those into the body), the binding would not reach the
        function's scope: refused there."""
        if self.graph.kind in _EXPRESSION_GRAPHS:
            raise self.fp.unsupported(
                "an assignment expression (:=) inside a conditional expression, the right "
                "operand of and/or, or a loop test",
                e,
            )
        value = self.expr(e.value)
        self.bind(e.target.id, value)
        return value

    def expr_IfExp(self, e) -> Node:
        cond = self.expr(e.test)
        truth = known_truth(cond)
        if truth is not None:
            return self.expr(e.body if truth else e.orelse)
        branches = [self.subgraph("ifexp", e, "true"), self.subgraph("ifexp", e, "false")]
        for builder, part in zip(branches, (e.body, e.orelse), strict=True):
            builder.graph.output = builder.expr(part)
        args = close_graphs(branches)
        graphs = [Constant(b.graph, hint=b.graph.name) for b in branches]
        result = self.apply(control.Switch(self.where(e)), cond, *graphs, *args, node=e)
        self.note_escaping_value(result, [b.graph.output for b in branches], e)
        return result

    def expr_Dict(self, e) -> Node:
        """A dict display; `{**a, "k": v, **b}` is a new dict made of its parts
        in order: one display where the keys of each `**` part are known while
        parsing (a constant dict, a display), else `rt.dict_display` of the parts."""
        parts: list[Node] = []  # dicts merged in order
        items: list[Node] = []  # keys and values of the display being gathered
        for k, v in zip(e.keys, e.values, strict=True):
            if k is not None:
                items += [self.expr(k), self.expr(v)]
                continue
            mapping = self.expr(v)
            known = _known_items(mapping)
            if known is not None:
                items += known
                continue
            if items:
                parts.append(self.apply(prims.MakeDict(), *items, node=e))
                items = []
            parts.append(mapping)
        if not parts:
            return self.apply(prims.MakeDict(), *items, node=e)
        if items:
            parts.append(self.apply(prims.MakeDict(), *items, node=e))
        display = prims.LibraryCall(rt.dict_display, "_rt.dict_display")
        return self.apply(display, *parts, node=e)

    def expr_Compare(self, e) -> Node:
        left = self.expr(e.left)
        result = None
        for op, right_e in zip(e.ops, e.comparators, strict=True):
            right = self.expr(right_e)
            if isinstance(op, (gast.In, gast.NotIn)):
                step = self.apply(prims.Contains(isinstance(op, gast.NotIn)), left, right, node=e)
            else:
                step = self.apply(ops.BINARY[_CMPOPS[type(op)]](), left, right, node=e)
            result = step if result is None else self.and_nodes(result, step, e)
            left = right
        return result

    def and_nodes(self, a: Node, b: Node, e) -> Node:
        """`a and b` for two already-computed values (chained comparisons)."""
        if isinstance(a, Constant):
            return b if a.value else a
        return self.apply(control.Switch(self.where(e)), a, *self._pick_graphs(e), b, a, node=e)

    def _pick_graphs(self, e):
        graphs = []
        for k, part in enumerate(("second", "first")):
            g = FuncGraph(f"{self.fdef_name()}_and{self.debug(e).line}_{part}", self.graph)
            params = [g.add_parameter("b"), g.add_parameter("a")]
            g.output = params[k]
            graphs.append(Constant(g, hint=g.name))
        return graphs

    def expr_FormattedValue(self, e) -> Node:
        raise self.fp.unsupported("a formatted value outside an f-string", e)

    def expr_JoinedStr(self, e) -> Node:
        template, values = [], []
        for part in e.values:
            if isinstance(part, gast.Constant):
                template.append(str(part.value).replace("{", "{{").replace("}", "}}"))
                continue
            spec = ""
            if part.conversion not in (-1, None):
                spec += "!" + chr(part.conversion)
            if part.format_spec is not None:
                inner = part.format_spec.values
                if not all(isinstance(p, gast.Constant) for p in inner):
                    raise self.fp.unsupported("a computed format spec in an f-string", e)
                spec += ":" + "".join(str(p.value) for p in inner)
            template.append("{" + spec + "}")
            values.append(self.expr(part.value))
        fmt = Constant("".join(template), self.debug(e))
        return self.apply(prims.PythonValueCall(rt.fstring, "_rt.fstring"), fmt, *values, node=e)

    def expr_Constant(self, e) -> Node:
        return self.const(e.value, e)

    def expr_Attribute(self, e) -> Node:
        value = self.expr(e.value)
        if isinstance(value, Constant):
            return self.attribute_of(value, e.attr, e)
        return self.value_attribute(value, e.attr, e)

    def value_attribute(self, value: Node, name: str, e) -> Node:
        """`value.name` read where the line runs (`x.T`, `x.shape`, `x.at`)."""
        adapted = adapt_attribute(name, value)
        if adapted is not None:
            return self.apply(adapted[0], *adapted[1], node=e)
        getter = _property_of_made(value, name)
        if getter is not None:  # `p.area` of a NamedTuple made here: its getter runs, parsed
            method = Constant(getter, self.debug(e), f"{getter.__qualname__}")
            return self.call(method, [value], {}, e)
        return self.apply(prims.GetAttr(name), value, node=e)

    def attribute_of(self, value: Constant, name: str, e, default: Node | None = None) -> Node:
        """`value.name` for a constant `value` (a module, a Cell, an object);
        with a `default`, `getattr(value, name, default)`."""
        if isinstance(value.value, FuncGraph):
            raise self.fp.unsupported("attributes of a function", e)
        if _value_attribute(value.value, name):
            # MindSpore's `p.data` is the Parameter itself: its value, read when run
            return value if name == "data" else self.value_attribute(value, name, e)
        hint = f"{value.hint}.{name}" if value.hint else name
        getter = guards.property_getter(value.value, name)
        if getter is not None and self._getter_called(getter, value.value):
            # a property: its getter runs where the line runs, as a method call
            self.fp.guards.read_attribute(value.value, name)  # (the property replaced)
            method = Constant(types.MethodType(getter, value.value), self.debug(e), hint)
            return self.call(method, [], {}, e)
        if guards.uncached_property(value.value, name):
            # its getter runs where the line first runs, as a host call; once
            # it ran, the object's `__dict__` holds the value (the guard fails:
            # parsed again, the value read as any attribute)
            self.fp.guards.read_attribute(value.value, name)
            prim = prims.LibraryCall(getattr, hint, (), True)
            return self.apply(prim, value, Constant(name), node=e)
        try:
            attr = getattr(value.value, name)
        except AttributeError:
            if default is not None:  # while the name stays absent
                self.fp.guards.read_missing(value.value, name)
                return default
            what = value.hint or repr(value.value)
            raise self.fp.error(f"{what} has no attribute {name!r}", e) from None
        self.fp.guards.read_attribute(value.value, name)  # `cfg.scale` may be rebound
        return self.fp.value_node(attr, hint, e)

    def has_attribute(self, value: Constant, name: str, e) -> bool | None:
        """`hasattr(value, name)` for a constant `value` (`jax.nn`, a class, a
        config object): the look-up `value.name` tried while parsing, as
        Python tries it when the line runs, and guarded either way (`cfg.lr =
        0.1` added later makes the graph stale). None where the look-up runs
        a user-written property getter (it runs where the line runs)."""
        if isinstance(value.value, FuncGraph):
            raise self.fp.unsupported("attributes of a function", e)
        if guards.property_getter(value.value, name) is not None:
            return None
        try:
            getattr(value.value, name)
        except AttributeError:
            self.fp.guards.read_missing(value.value, name)
            return False
        self.fp.guards.read_attribute(value.value, name)
        return True

    def _getter_called(self, getter, owner) -> bool:
        """Whether the property's `getter` is called as a method of `owner`
        is: a Cell's the parser refuses (its methods never run as Python)
        is read while parsing instead, as it was before getters were called."""
        if not isinstance(owner, Cell):
            return True
        try:
            self.parse(types.MethodType(getter, owner))
        except KTransformError:
            return False
        return True

    def expr_Subscript(self, e) -> Node:
        value = self.expr(e.value)
        return self.apply(prims.GetItem(), value, self.item_index(value, e.slice), node=e)

    def item_index(self, container: Node, s) -> Node:
        """The index of `container[s]`. A list (a literal, or a name bound to
        one) means NumPy's integer or boolean array index where `container`
        is an array at run time (`rt.array_index`; JAX refuses a list)."""
        index = self.index(s)
        if is_maker(index, prims.MakeList) or (
            isinstance(index, Constant) and isinstance(index.value, list)
        ):
            return self.apply(prims.ArrayIndex(), container, index, node=s)
        return index

    def index(self, s) -> Node:
        if isinstance(s, gast.Slice):
            parts = [
                self.expr(p) if p is not None else self.const(None, s)
                for p in (s.lower, s.upper, s.step)
            ]
            # a bound JAX computes from constants (`x[jnp.argmax(c):]`): concrete
            # when the program runs, as a slice bound must be under jax.jit
            parts = [self.concrete(p, read_args=True) or p for p in parts]
            return self.apply(prims.MakeSlice(), *parts, node=s)
        if isinstance(s, gast.Tuple):
            return self.apply(prims.MakeTuple(), *[self.index(p) for p in s.elts], node=s)
        return self.expr(s)

    def expr_Starred(self, e) -> Node:
        raise self.fp.unsupported("star-unpacking (`*x`)", e)

    def expr_Name(self, e) -> Node:
        return self.read(e.id, e)

    def expr_List(self, e) -> Node:
        if any(isinstance(x, gast.Starred) for x in e.elts):
            return self.starred_literal(e, prims.MakeList())
        return self.apply(prims.MakeList(), *[self.expr(x) for x in e.elts], node=e)

    def expr_Tuple(self, e) -> Node:
        if any(isinstance(x, gast.Starred) for x in e.elts):
            return self.starred_literal(e, prims.MakeTuple())
        return self.apply(prims.MakeTuple(), *[self.expr(x) for x in e.elts], node=e)

    def expr_Slice(self, e) -> Node:
        return self.index(e)


def lambda_def(e, name: str):
    """`lambda args: body` as the FunctionDef `def name(args): return body`."""
    ret = gast.copy_location(gast.Return(value=e.body), e.body)
    fdef = gast.FunctionDef(
        name=name,
        args=e.args,
        body=[ret],
        decorator_list=[],
        returns=None,
        type_comment=None,
        type_params=[],
    )
    return gast.copy_location(fdef, e)


def _property_of_made(value: Node, name: str):
    """The user-written getter of property `name` of the NamedTuple or
    dataclass the program made at `value` (`P(a, b).area`), else None. Its
    fields are read as fields (`prims.GetAttr`, whose rule gives the pytree
    gradient); a property is computed from them, so its gradient is that of
    its getter's code, parsed as a call of the getter on the value."""
    maker = value.fn.value if isinstance(value, Apply) and isinstance(value.fn, Constant) else None
    if isinstance(maker, prims.ReplaceFields):  # `p._replace(a=v)`: the type of `p`
        return _property_of_made(value.args[0], name)
    if not isinstance(maker, prims.MakeNode) or name in maker.names:
        return None
    found = inspect.getattr_static(maker.cls, name, None)
    getter = found.fget if type(found) is property else None
    return getter if is_user_function(getter) else None


def _known_items(mapping: Node) -> list[Node] | None:
    """The keys and values, in order, of a dict whose keys the parser knows
    (a constant dict, a display with constant keys), else None."""
    if isinstance(mapping, Constant) and type(mapping.value) is dict:
        values = mapping.value.values()
        if any(isinstance(v, (list, tuple, dict)) or _is_parameter(v) for v in values):
            return None  # (passed whole, its Parameters read when run: `parameters_read`)
        return [n for k, v in mapping.value.items() for n in (Constant(k), Constant(v))]
    if is_maker(mapping, prims.MakeDict) and all(
        isinstance(k, Constant) for k in mapping.args[0::2]
    ):
        return list(mapping.args)
    return None


def _is_parameter(value) -> bool:
    return kt_attribute(value, "__kt_parameter__", False)


def _value_attribute(value, name: str) -> bool:
    """`p.name` of a `kt.Parameter` `p` that reads its value (`p.T`, `p.at`,
    `p.real`, `p.shape`; `p.data`, which MindSpore's Parameter is itself):
    read where the line runs, as of an array argument, so it has a gradient
    and sees `set_data`, never the value the Parameter held while parsing.
    Its own attributes (`name`, `requires_grad`, `set_data`) stay constants."""
    if not (_is_parameter(value) and hasattr(type(value), "__getattr__")):
        return False
    own = hasattr(type(value), name) or name in getattr(value, "__dict__", {})
    return name == "data" or not own
