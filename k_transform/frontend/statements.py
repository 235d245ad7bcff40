"""Parser methods for simple statements (mixed into `GraphBuilder`).

`block` parses statements in order, stopping after a `return`; each
statement goes to its `stmt_*` method (`GraphBuilder._visit`), or is
refused by name (`UNSUPPORTED_STATEMENTS`). Here: nested `def` (bound as a
closure, `k_transform.frontend.closures`), `return` (a closure that rebinds
`nonlocal` names returns them too), `nonlocal`, `=` (`f = lambda ...` is
bound like a def), `+=`, annotated assignment, expression statements
(docstrings skipped), `pass`, `assert`; and `assign`, which binds a value to
a target: a name, a tuple or list of targets (starred:
`k_transform.frontend.unpacking`), or `a[i]` (rebinding `a` to the updated
container). `if`/`while`/`for` are `k_transform.frontend.control_flow`.
"""

from __future__ import annotations

import copy
import functools
import types

import gast
import jax

from k_transform import ops
from k_transform import runtime as rt
from k_transform.frontend import batching, effects, jax_custom, lax_models, mutability
from k_transform.frontend.calls import called_here
from k_transform.frontend.desugar import loaded_names
from k_transform.frontend.expressions import BINOPS, lambda_def
from k_transform.ir.nodes import Apply, Constant, Node, Parameter
from k_transform.ops import python as prims

UNSUPPORTED_STATEMENTS = {
    gast.Try: "try/except",
    gast.With: "with",
    gast.AsyncWith: "async with",
    gast.AsyncFor: "async for",
    gast.AsyncFunctionDef: "async def",
    gast.Global: "global",
    gast.Delete: "del",
    gast.ClassDef: "class definition",
    gast.Import: "import",
    gast.ImportFrom: "import",
}


class StatementBuilder:
    """The `GraphBuilder` methods for the statements in the module docstring."""

    # -- statements --------------------------------------------------------------------
    def block(self, stmts) -> None:
        for s in stmts:
            if self.returned or self.raised:
                return
            self.statement(s)

    def statement(self, s) -> None:
        self._visit(s, "stmt_", UNSUPPORTED_STATEMENTS, "statement")

    def stmt_FunctionDef(self, s) -> None:
        if s.decorator_list:  # JAX's custom_jvp or custom_vjp, or a rule of one
            if not jax_custom.nested_def(self, s):
                self.decorated_def(s)
            return
        self.bind_closure(s.name, s)

    def decorated_def(self, s) -> None:
        """`@dec def f(...)` of JAX's function transforms (`jax.vmap`,
        `jax.jit`, JAX's `grad`, ..., `functools.partial(jax.vmap, in_axes=...)`):
        `f = dec(<the def>)`, the decorators evaluated first, as Python does.
        Another decorator, or a def whose body reads its own name (Python's
        would reach the decorated function), is refused: the function runs
        as Python."""
        decorators = [self.expr(d) for d in s.decorator_list]
        body_reads = loaded_names(gast.Module(body=s.body, type_ignores=[]))
        if s.name in body_reads or not all(map(_jax_transform, decorators)):
            raise self.fp.unsupported("a decorator on a nested function", s)
        plain = copy.copy(s)
        plain.decorator_list = []
        self.bind_closure(s.name, plain)
        value = self.read(s.name, s)
        for d, decorator in reversed(list(zip(s.decorator_list, decorators, strict=True))):
            call = gast.Call(func=d, args=[gast.Name(s.name, gast.Load(), None, None)], keywords=[])
            gast.copy_location(call, d)
            call.end_lineno, call.end_col_offset = d.end_lineno, d.end_col_offset
            called_here(self, call)  # (`jax.vmap`'s: a value called later, as `vm = jax.vmap(f)`)
            value = self.call(decorator, [value], {}, call)
        self.bind(s.name, value)

    def stmt_Return(self, s) -> None:
        value = self.expr(s.value) if s.value is not None else self.const(None, s)
        value = self.passable(self.current(value), s)
        self.refuse_star_function_values([value], s, "returned")
        if self.nonlocals:  # a closure that rebinds `nonlocal` names returns them too
            values = [self.read(n, s) for n in self.nonlocals]
            value = self.apply(prims.MakeTuple(), value, *values, node=s)
        self.graph.output = value
        self.returned = True

    def stmt_Nonlocal(self, s) -> None:
        return None  # handled by `declare_nonlocals` when the def is built

    def stmt_Assign(self, s) -> None:
        if isinstance(s.value, gast.Lambda) and all(isinstance(t, gast.Name) for t in s.targets):
            for target in s.targets:  # `f = lambda ...`: bound like a def
                self.bind_closure(target.id, lambda_def(s.value, target.id))
            return
        if isinstance(s.value, gast.Call):  # `vm = jax.vmap(f)`: called later, in place
            called_here(self, s.value)
        value = self.unpacked_view(s.value, s.targets)
        value = self.expr(s.value) if value is None else value
        for target in s.targets:
            self.assign(target, value, s)

    def stmt_AugAssign(self, s) -> None:
        op = ops.BINARY[BINOPS[type(s.op)]]()
        load = _as_load(s.target)
        left = self.expr(load)
        merged = self.dict_merge(left, s.value, s) if isinstance(s.op, gast.BitOr) else None
        if merged is not None:  # `d |= {...}`: the items assigned in order
            if isinstance(s.target, gast.Name):  # (in place: refused where `d` is shared)
                self.augmented_in_place(s, left)
            self.assign(s.target, merged, s)
            return
        if isinstance(s.target, gast.Name):
            self.augmented_in_place(s, left)
        elif isinstance(s.target, gast.Subscript):
            self.changed_in_place(s, left, "items", "an item another reference may hold")
        value = self.apply(op, left, self.expr(s.value), node=s)
        self.assign(s.target, value, s)

    def augmented_in_place(self, s, left: Node) -> None:
        """`a op= v` changes a list or a NumPy array in place, a rebinding
        here: refused where another reference may see the object (that
        `check_mutations` found); on a parameter, the caller checks what it
        passes (`FuncGraph.changed_parameters`)."""
        function = self
        while function.closed:
            function = function.parent
        shared, key = function.shared, (s.lineno, s.col_offset)
        if key in shared.parameters and not isinstance(left, Constant):
            d = self.debug(s)
            where = f"{shared.parameters[key]} ({d.file}, line {d.line})"
            entry = ("mutable", where, function.graph.name)
            effects.note_change(function.graph, s.target.id, entry)
        self.changed_in_place(
            s, left, "augmented", f"where another reference to {s.target.id!r} may see the change"
        )

    def changed_in_place(self, s, left: Node, kind: str, where: str) -> None:
        """Refuse `s`, an augmented assignment that `check_mutations` left in
        `Shared.<kind>`, where `left` may be a list or a NumPy array, which
        it changes in place (a JAX array or a number it rebinds)."""
        function = self
        while function.closed:
            function = function.parent
        text = getattr(function.shared, kind).get((s.lineno, s.col_offset))
        if text is not None and self.may_be_mutable(left, s):
            raise self.fp.unsupported(f"{text} (in place on a list or a NumPy array) {where}", s)

    def outer_value(self, node: Node) -> Node:
        """`node`, or where it is a parameter of a branch or loop body being
        built, the value it receives there from the enclosing code (a
        variable's value on entering, a captured variable), followed out."""
        for _ in range(64):
            if not isinstance(node, Parameter):
                return node
            builder = self
            while builder.closed and node.graph is not builder.graph:
                builder = builder.parent
            if node.graph is not builder.graph or not builder.closed:
                return node
            entry = builder.entry_values.get(node)
            if entry is None:
                entry = builder.captures.get(node.name)
            if entry is None or isinstance(entry, tuple):  # ("items", seq): a loop's item
                return node
            node = entry
        return node

    def may_be_mutable(self, node: Node, s) -> bool:
        """`mutability.may_be_mutable`, a loop's parameters standing for the
        values they start as; the function's own parameters are left to
        its caller (`FuncGraph.changed_parameters`), as changed by `s`."""
        function = self
        while function.closed:
            function = function.parent
        d = self.debug(s)
        where = f"`{gast.unparse(s).strip()}` ({d.file}, line {d.line})"

        def resolve(p, items=False):
            builder = self
            while builder.closed and p.graph is not builder.graph:
                builder = builder.parent
            if p.graph is not builder.graph:
                return None
            if builder.closed:
                entry = builder.entry_values.get(p)
                return entry if entry is not None else builder.captures.get(p.name)
            if builder is function:
                condition = "items" if items else "mutable"
                effects.note_change(function.graph, p.name, (condition, where, function.graph.name))
            return None

        return mutability.may_be_mutable(node, prims, resolve=resolve)

    def stmt_AnnAssign(self, s) -> None:
        if s.value is not None:
            self.assign(s.target, self.expr(s.value), s)

    def stmt_Expr(self, s) -> None:
        if isinstance(s.value, gast.Constant) and isinstance(s.value.value, str):
            return  # a docstring
        if self.append_closure(s.value):
            return
        if jax_custom.nested_rule_call(self, s.value, lambda_def):  # `f.defvjp(fwd, bwd)`
            return
        if _is_sort_call(s.value) and not _names_module(self, s.value.func.value):
            # Its value unused: the in-place sort of a list or a NumPy array
            # (a plain function runs as Python, exactly).
            what = gast.unparse(s.value.func.value).strip()
            raise self.fp.unsupported(f"the in-place method call `{what}.sort(...)`", s)
        value = self.expr(s.value)
        if _object_method(value, self.outer_value):
            # its value unused, it can only act by changing its receiver or the host
            raise self.fp.unsupported(
                f"`{gast.unparse(s.value.func).strip()}(...)`, a method call whose value is "
                "unused (it may change its object),",
                s,
            )

    def stmt_Pass(self, s) -> None:
        return None

    def stmt_Raise(self, s) -> None:
        if s.exc is None:
            raise self.fp.unsupported("a bare `raise` (re-raising outside `except`)", s)
        cause = self.expr(s.cause) if s.cause is not None else self.const(None, s)
        self.apply(prims.Raise(s.cause is not None), self.expr(s.exc), cause, node=s)
        self.raised = True  # what follows in this block is never run
        if self.graph.output is None:  # the function's tail: it returns nothing here
            self.graph.output = Constant(rt.UNDEFINED, hint="UNDEFINED")

    def stmt_Assert(self, s) -> None:
        msg = self.expr(s.msg) if s.msg is not None else self.const(None, s)
        self.apply(prims.Assert(), self.expr(s.test), msg, node=s)

    # -- assignment targets ------------------------------------------------------
    def assign(self, target, value: Node, s) -> None:
        if isinstance(target, gast.Name):
            self.bind(target.id, value)
        elif isinstance(target, (gast.Tuple, gast.List)):
            if any(isinstance(e, gast.Starred) for e in target.elts):
                self.assign_starred(target, value, s)
                return
            items = self.static_items(value)
            made_dict = isinstance(value, Constant) and isinstance(value.value, dict)
            if items is None and (made_dict or effects.is_plain_dict(value, prims)):
                value = self.apply(prims.Iterated(), value, node=s)  # `a, b = d`: its keys
            elif items is None and self.made_outside_by_host(value, here=True):
                # a host call's result, maybe an iterator (`a, b = map(f, xs)`): its
                # items, as many as Python takes (one more finds too many)
                limit = self.const(len(target.elts) + 1, s)
                pulls = prims.IteratedUpTo(self.made_outside_by_host(value))
                value = self.apply(pulls, value, limit, node=s)
            if items is None or len(items) != len(target.elts):  # Python's ValueError
                self.apply(prims.CheckUnpack(len(target.elts)), value, node=s)
            for k, elt in enumerate(target.elts):
                item = self.apply(prims.GetItem(), value, self.const(k, s), node=s)
                self.assign(elt, item, s)
        elif isinstance(target, gast.Subscript):
            container = self.expr(_as_load(target.value))
            if isinstance(target.value, gast.Name) and not _known_list(container):
                if not effects.is_plain_dict(container, prims):  # (a list's slice: a copy)
                    self.changed_in_place(s, container, "viewed", "after a view of it was taken")
            index = self.item_index(container, target.slice)
            updated = self.apply(prims.SetItem(), container, index, value, node=s)
            self.assign(_as_store(target.value), updated, s)
        elif isinstance(target, gast.Attribute):
            raise self.fp.unsupported("assignment to an attribute (`obj.attr = ...`)", s)
        else:
            raise self.fp.unsupported(f"assignment to {type(target).__name__}", s)


def _known_list(node) -> bool:
    """Whether the parser's `node` surely is a Python list."""
    if isinstance(node, Constant):
        return isinstance(node.value, list)
    prim = getattr(node.fn, "value", None) if isinstance(node, Apply) else None
    return isinstance(prim, (prims.MakeList, prims.ListAppend, prims.ListExtend, prims.ListInsert))


def _jax_transform(node: Node) -> bool:
    """Whether `node` is one of JAX's function transforms known while
    parsing, or a `functools.partial` of one (`partial(jax.vmap, in_axes=0)`)."""
    value = node.value if isinstance(node, Constant) else None
    value = value.func if isinstance(value, functools.partial) else value
    known = (jax.vmap, jax.jit, *lax_models.SAME_VALUES)
    return any(value is f for f in known) or batching.function_transform(value)


def _may_be_mutable(node) -> bool:
    return mutability.may_be_mutable(node, prims)


def _object_method(node, outer_value) -> bool:
    """A method call of an object the program made (`acc = Acc()`, `s = set()`),
    also where a branch or a loop body receives it (`outer_value`)."""
    prim = getattr(node.fn, "value", None) if isinstance(node, Apply) else None
    if not isinstance(prim, prims.MethodCall):
        return False
    receiver = outer_value(node.args[0])
    if effects.user_class_of(receiver, prims) is not None:
        return True
    return effects.mutable_builtin(receiver, prims) or mutability.may_be_mutable(receiver, prims)


def _as_load(target):
    return _with_ctx(target, gast.Load())


def _as_store(target):
    return _with_ctx(target, gast.Store())


def _with_ctx(target, ctx):
    node = copy.deepcopy(target)
    for n in gast.walk(node):
        if hasattr(n, "ctx"):
            n.ctx = gast.Load()
    node.ctx = ctx
    return node


def _names_module(builder, e) -> bool:
    """Whether `e` is a name bound to a module (`np` of `np.sort(x)`)."""
    if not isinstance(e, gast.Name):
        return False
    value = builder.read(e.id, e)
    return isinstance(value, Constant) and isinstance(value.value, types.ModuleType)


def _is_sort_call(e) -> bool:
    """`x.sort(...)` (a JAX array's returns a new array, so as a statement it
    only means something for a list or a NumPy array, which it sorts in place)."""
    return isinstance(e, gast.Call) and isinstance(e.func, gast.Attribute) and e.func.attr == "sort"
