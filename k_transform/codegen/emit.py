"""Codegen: FuncGraph -> readable Python source.

One `def` per graph: a graph with a lexical parent is a nested `def` inside
its parent's function, placed just before the first statement that uses it
(Python closures then see the parent's variables by name); top-level graphs
referenced as constants become module-level functions. Each `Apply` is one
assignment `name = <expression>` where the expression comes from the
primitive's `emit` (or is a call of a function value). Values no output or
effect needs are not emitted. A `# line N: <source>` comment precedes the
statements of each user source line; in a backward pass (a bprop graph) it
reads `# grad of line N: <source>`, once per run of statements from that line.

A `switch` whose condition is static (ranks, shapes, dtypes, Python
constants: `codegen.static`), as a rule's `if y.ndim == 2:`, is written as a
Python `if`/`elif` with each branch's statements inline; its condition's
statements are written into the `if` line.

A tuple whose items are read by constant index (a `(result, bprop)` pair, a
bprop's gradients, the results of a branch or loop: nodes whose length is
known, `view.arity`) is unpacked into the names of its items, `out, bprop =
f_fprop(x)`, `env, _, d_x, *_ = bp(d)`, `[x_1], bp = f_for3_k(xs, x)`,
never read back as `_t5[3]`. A sensitivity (`Node.sens_of`) is named `d_<the name its variable
got>`, so `d_s_1` is the gradient of `s_1`.

The graphs are read through `codegen.view` (changing no graph): common
subexpressions of a graph written once (`ir.cse`), tuples taken apart and
rebuilt written as the tuple, a tuple's gradient from one per item written
as a tuple. A result read only by `return` is written there (`return a,
bp`); an unnamed tuple or item read by one statement is written inside it
(`bp((d_y,))`).

Names come only from the graphs (user names, graph names, numbered
temporaries per function), never from ids or process-wide counters, so the
output is byte-identical for the same graph, whatever was transformed
before. Statements are written as text (expressions are formatted as
`ast.unparse` would); the module is checked when it is compiled as a whole.
"""

from __future__ import annotations

import inspect
import math
import re

import jax
import jax.numpy as jnp
import numpy as np

from k_transform import runtime as rt
from k_transform.codegen.naming import Namer, sanitize
from k_transform.codegen.static import StaticFacts
from k_transform.codegen.view import CodeView
from k_transform.codegen.view import prim_name as _prim_name
from k_transform.context import TRANSFORM
from k_transform.ir.cse import pure_primitive
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node, Parameter, reads_among
from k_transform.ir.primitive import Primitive
from k_transform.protocol import kt_attribute
from k_transform.runtime import host_log

_STANDARD_GLOBALS = {"_rt": rt, "jax": jax, "jnp": jnp, "np": np, "math": math}


class ModuleEmitter:
    """Emits a set of graphs into one module; `ref` names global values."""

    def __init__(self, comments: bool = True):
        self.globals: dict[str, object] = dict(_STANDARD_GLOBALS)
        self.by_id: dict[int, str] = {id(v): k for k, v in _STANDARD_GLOBALS.items()}
        # `_` is the throwaway of tuple unpacking: no variable is ever named so.
        self.module_names = Namer([*self.globals, "_"])
        # The two kinds of graph names (see `module_def` and `graph_name`): a
        # module-level `def`'s name is the graph's for the whole module; a
        # nested `def`'s only for the function being written (and a branch
        # written inline defines its closures afresh: `_forget`).
        self.module_defs: dict[int, str] = {}  # graph uid -> its module-level def
        self.graph_names: dict[int, str] = {}  # nested graph uid -> its def here
        self.pending: list[FuncGraph] = []
        # top-level graphs a `def` line names as a default: defined first
        self.in_headers: set[int] = set()
        self.emitted: set[int] = set()
        self.comments = comments
        self._effects: dict[int, list] = {}  # graph uid -> its nodes with an effect
        self._reads: dict[int, tuple[list, list]] = {}  # graph uid -> (nodes, closures) it reads
        self._free: dict[int, list[Node]] = {}  # graph uid -> its free variables
        self._uses: dict[int, list] = {}  # node id -> its readers (see uses_in)
        self._uses_read: set[int] = set()  # graphs whose reads are in _uses
        self.scope: list[FuncGraph] = []  # the graph being emitted and those enclosing it
        self.static = StaticFacts()  # which switches are written as Python `if`s
        self.view = CodeView()  # the graphs as written: shared subexpressions, tuples
        self.files: dict[str, str] = {}  # generated function name -> its source file
        self.defs: dict[str, FuncGraph] = {}  # a generated def's `__qualname__` -> its graph
        self._def_path: list[str] = []  # the names of the defs being emitted, outermost first

    # -- globals ------------------------------------------------------------------
    def ref(self, value, hint: str = "") -> str:
        """A global name bound to `value` in the generated module."""
        if id(value) in self.by_id:
            return self.by_id[id(value)]
        if hint and "." in hint:
            root, rest = hint.split(".", 1)
            if root in self.globals and _resolves(self.globals[root], rest, value):
                return hint
        name = self.module_names.fresh(hint or getattr(value, "__name__", "") or "c")
        self.globals[name] = value
        self.by_id[id(value)] = name
        return name

    def graph_ref(self, graph: FuncGraph) -> str:
        """The name of a top-level graph, emitted into this module."""
        return self.module_def(graph)

    def module_def(self, graph: FuncGraph) -> str:
        """The name of `graph`'s module-level `def`, written once (queued
        here): a top-level graph, or a copy of a closed nested graph used
        outside its parent. The same name wherever the module calls it, also
        where the graph is a branch written inline too (`_static_if`)."""
        if graph.uid not in self.module_defs:
            self.module_defs[graph.uid] = self.module_names.fresh(graph.name)
            self.pending.append(graph)
        return self.module_defs[graph.uid]

    def graph_name(self, graph: FuncGraph, namer: Namer) -> str:
        """The name of the nested `def` of `graph` in the function being written."""
        if graph.uid not in self.graph_names:
            self.graph_names[graph.uid] = namer.fresh(graph.name)
        return self.graph_names[graph.uid]

    # -- module ----------------------------------------------------------------------
    def emit_module(self, root: FuncGraph) -> tuple[str, str]:
        """Source of `root` and every top-level graph it reaches; its name."""
        name = self.module_def(root)
        chunks = []
        while self.pending:
            graph = self.pending.pop(0)
            if graph.uid in self.emitted:
                continue
            self.emitted.add(graph.uid)
            namer = Namer(outer=self.module_names)
            # nested defs are named afresh in each function (a graph nested in
            # one written before was named by that function's namer)
            self.graph_names.clear()
            fname = self.module_defs[graph.uid]
            chunks.append((graph.uid, "\n".join(self.emit_graph(graph, namer, {}, 0, fname))))
        # a graph a `def` line names as a default is defined before it
        chunks.sort(key=lambda chunk: chunk[0] not in self.in_headers)
        return "\n\n\n".join(text for _, text in chunks) + "\n", name

    # -- one graph --------------------------------------------------------------------
    def emit_graph(
        self, graph: FuncGraph, namer: Namer, names: dict, depth: int, fname: str | None = None
    ) -> list[str]:
        """The `def` of `graph`; `names` maps nodes of enclosing graphs too."""
        self.scope.append(graph)
        try:
            return self._emit_graph(graph, namer, names, depth, fname)
        finally:
            self.scope.pop()

    def _emit_graph(self, graph, namer, names, depth, fname) -> list[str]:
        if fname is None:
            fname = self.graph_name(graph, namer)
        self.files.setdefault(fname, graph.debug.file)  # its `# line N` comments are of it
        self._def_path.append(fname)
        try:
            self.defs[".<locals>.".join(self._def_path)] = graph
            return self._emit_def(graph, namer, names, depth, fname)
        finally:
            self._def_path.pop()

    def _emit_def(self, graph, namer, names, depth, fname) -> list[str]:
        params = [self._name_node(p, namer, names) for p in graph.parameters]
        defaults = graph.defaults
        # Trailing defaults, as far as each has a value here (a default computed
        # in a graph not emitted with this one is left out: calls pass it).
        for k in reversed(range(len(graph.parameters))):
            node = defaults.get(graph.parameters[k].name)
            if node is None or not (isinstance(node, Constant) or id(node) in names):
                break
            params[k] += "=" + self.atom(node, names, namer)
            if isinstance(node, Constant) and isinstance(node.value, FuncGraph):
                self.in_headers.add(node.value.uid)  # (a default is evaluated at `def`)
        pad = "    " * depth
        lines = [pad + f"def {fname}({', '.join(params)}):"]
        comment = _Comments(graph.kind == "bprop", self.comments, graph.debug.file)
        body, out = self._emit_body(graph, namer, names, depth, comment)
        return [*lines, *body, pad + f"    return {out}"]

    def _emit_body(self, graph, namer, names, depth, comment, target=None):
        """The statements of `graph` (indented for a `def` at `depth`) and the
        expression of its result; with a `target` (a branch written inline)
        the statements end by binding the result to it, and the expression is
        None."""
        body_pad = "    " * (depth + 1)
        plan = self._plan(graph, names, target)
        out, returned, unpacks = plan.out, plan.returned, plan.unpacks
        inner_if = target is not None and plan.only_returned and self.static.static_switch(out)
        if target is not None and plan.only_returned and returned is None and "," not in target:
            names.setdefault(id(out), target)  # the result is computed under its name
        defined: set[int] = set()
        lines: list[str] = []
        for node in plan.statements:
            static_if = self.static.static_switch(node)
            inputs = node.inputs[:2] + node.inputs[4:] if static_if else self.view.inputs(node)
            lines += self.emit_children(graph, inputs, defined, namer, names, depth)
            if id(node) in plan.inline:  # written where it is read
                expr = self.expression(node, names, namer)
                tuple_ = _prim_name(self.view.emitted(node)) == "make_tuple"
                names[id(node)] = expr if tuple_ or _is_primary(expr) else f"({expr})"
                continue
            lines += [body_pad + c for c in comment.before(node)]
            if static_if:
                to = target if inner_if and node is out else None
                lines += self._static_if(node, unpacks, namer, names, depth, comment, to)
                continue
            expr = self.expression(node, names, namer)
            lines += [body_pad + line for line in self._assign(node, expr, unpacks, namer, names)]
        tail = [out, *self.view.inputs(returned)] if returned is not None else [out]
        lines += self.emit_children(graph, tail, defined, namer, names, depth)
        if inner_if:
            return lines, None
        if returned is None:
            result = self.atom(out, names, namer)
        elif target is None:  # `return <expression>`
            lines += [body_pad + c for c in comment.before(returned)]
            expr = self.expression(returned, names, namer)
            result = _unparenthesized(expr, self.view.emitted(returned))
        else:
            result = self.expression(returned, names, namer)
        if target is None:
            return lines, result
        if result != target:
            lines.append(body_pad + f"{target} = {result}")
        return lines, None

    def _plan(self, graph: FuncGraph, names: dict, target) -> _BodyPlan:
        """How `graph`'s nodes are written (see `_BodyPlan`)."""
        plan = _BodyPlan()
        plan.live = live = self.live_nodes(graph)
        plan.out = out = self.view.canon(graph.output)
        uses = self.uses_in(graph)
        plan.only_returned = (
            isinstance(out, Apply)
            and out.graph is graph
            and _live_readers(out, uses, graph, live) == [None]
        )
        plan.unpacks = unpacks = self._unpackings(graph, live, uses)
        moved = {id(item) for items, _, _ in unpacks.values() for item in items.values()}
        conditions = self._inline_conditions(graph, live, uses)
        skip = {*unpacks, *moved, *conditions}
        plan.inline = conditions | self._inline_values(graph, live, uses, skip, names)
        plan.statements = [n for n in graph.nodes if id(n) in live and id(n) not in moved]
        written = [n for n in plan.statements if id(n) not in plan.inline]
        if target is not None:
            plan.returned = _returned_tuple(graph, out, live, uses)
        elif (
            any(n is out for n in written)
            and plan.only_returned
            and id(out) not in unpacks
            and not self.static.static_switch(out)
        ):
            if written[-1] is out or self._movable(out):  # nothing is moved across effects
                plan.returned = out
        if plan.returned is not None:
            plan.statements.remove(plan.returned)
        return plan

    def _movable(self, node: Apply) -> bool:
        """Whether `node` may be computed later than where its graph has it:
        a pure primitive reading no Parameter and calling no graph (a tuple
        may hold a graph: it does not call it)."""
        written = self.view.emitted(node)
        prim = written.fn.value if isinstance(written.fn, Constant) else None
        if not isinstance(prim, Primitive) or not pure_primitive(prim):
            return False
        holds_graphs = _prim_name(written) == "make_tuple"
        for a in written.args:
            value = a.value if isinstance(a, Constant) else None
            if kt_attribute(value, "__kt_parameter__", False) is True:
                return False
            if isinstance(value, FuncGraph) and not holds_graphs:
                return False
        return True

    def _named(self, node: Node, names: dict) -> bool:
        """Whether `node` gets a name of its own: a user's, or `d_<name>`."""
        if node.debug.name and not node.debug.name.startswith("d_"):
            return True
        of = self.view.canon(node.sens_of) if node.sens_of is not None else None
        if of is None:
            return node.debug.name.startswith("d_")
        return names.get(id(of), "").isidentifier() and bool(
            of.debug.name or isinstance(of, Parameter)
        )

    def _inline_values(self, graph, live, uses, skip: set, names: dict) -> set[int]:
        """Unnamed tuples and items `t[k]` of `graph` read by exactly one
        statement of `graph`: written inside it (`bp((d_x,))`), not named.
        Pure and reading no Parameter, so where they are computed is not
        seen."""
        found: set[int] = set()
        for node in graph.nodes:
            if id(node) not in live or id(node) in skip or self._named(node, names):
                continue
            written = self.view.emitted(node)
            name = _prim_name(written)
            if name not in ("make_tuple", "getitem") or not self._movable(node):
                continue
            if name == "getitem" and not isinstance(written.args[1], Constant):
                continue
            readers = _live_readers(node, uses, graph, live)
            if len(readers) != 1 or not isinstance(readers[0], Apply):
                continue
            reader = readers[0]
            if (
                reader.graph is graph
                and id(reader) in live
                and not self.static.static_switch(reader)
            ):
                found.add(id(node))
        return found

    def _forget(self, branch: FuncGraph, names: dict) -> None:
        """Drop the names of `branch`'s nodes and of the graphs nested in it,
        so that a branch written inline twice computes into fresh variables
        and defines its closures afresh. The name of a `def` of `branch`
        itself stays: code elsewhere may call the branch by it (a graph is a
        static `if`'s branch in one place and a traced switch's in another,
        as K of a rule whose branch calls the rule's primitive again)."""
        for g in branch.reachable():
            inside = any(a is branch for a in g.ancestors())
            if inside:
                self.graph_names.pop(g.uid, None)
            if g is branch or inside:
                for n in [*g.parameters, *g.nodes]:
                    names.pop(id(n), None)

    def _inline_conditions(self, graph, live, uses) -> set[int]:
        """Nodes of the conditions of `graph`'s static `if`s read only there:
        written into the `if` line (`if x.ndim == 2:`), not named."""
        found: set[int] = set()

        def take(node, user):
            if (
                isinstance(node, Apply)
                and node.graph is graph
                and id(node) in live
                and _live_readers(node, uses, graph, live) == [user]
                and not self.static.static_switch(node)
                and self.static.is_static(node)
            ):
                found.add(id(node))
                for a in self.view.args(node):
                    take(a, node)

        for node in graph.nodes:
            if id(node) in live and self.static.static_switch(node):
                take(self.view.canon(node.args[0]), node)
        return found

    def _static_if(self, node: Apply, unpacks, namer, names, depth, comment, target=None):
        """A switch on a static condition (`codegen.static`) as a Python `if`,
        each branch's statements inline, its result bound to the switch's
        names (or to `target`: the result of an enclosing inline branch)."""
        pad = "    " * (depth + 1)
        cond = _unwrapped(self.atom(node.args[0], names, namer))
        items, whole, arity = unpacks.get(id(node), (None, True, 0))
        if target is None and items is not None and not whole:
            target = self._unpack_target(items, arity, namer, names, unpacks)
        elif target is None:
            target = self._name_node(node, namer, names)
        lines = [pad + f"if {cond}:"]
        for k, branch in enumerate((node.args[1].value, node.args[2].value)):
            if k:
                lines.append(pad + "else:")
            args = node.args[3:]
            bound = {
                id(p): self.static.is_static(a)
                for p, a in zip(branch.parameters, args, strict=True)
            }
            atoms = [self.atom(a, names, namer) for a in args]
            self._forget(branch, names)  # inlined before: fresh names, closures see this copy
            for p, a in zip(branch.parameters, atoms, strict=True):
                names[id(p)] = a
            self.static.bound.update(bound)
            self.scope.append(branch)
            try:
                body, _ = self._emit_body(branch, namer, names, depth + 1, comment.inside(), target)
            finally:
                self.scope.pop()
                for key in bound:
                    self.static.bound.pop(key, None)
                for p in branch.parameters:  # the branch may also be a `def` elsewhere
                    names.pop(id(p), None)
            if k and _one_if(body, pad + "    "):  # else: if ... -> elif ...
                lines.pop()
                body = [line[4:] for line in body]
                body[0] = pad + "el" + body[0][len(pad) :]
            lines += body or [pad + "    pass"]
        if items is not None:
            if whole:
                unpacked = self._unpack_target(items, arity, namer, names, unpacks)
                lines.append(pad + f"{unpacked} = {names[id(node)]}")
            lines += [pad + line for line in self._unpack_items(items, unpacks, namer, names)]
        return lines

    def _assign(self, node: Apply, expr: str, unpacks: dict, namer, names) -> list[str]:
        """`name = expr`, or the tuple unpacked into the names of its items
        (`a, _, b = expr`), and so on for items that are tuples themselves."""
        items, whole, arity = unpacks.get(id(node), (None, True, 0))
        if items is None:
            return [f"{self._name_node(node, namer, names)} = {expr}"]
        unpacked = self._unpack_target(items, arity, namer, names, unpacks)
        if whole:  # the tuple is used as a whole too
            target = self._name_node(node, namer, names)
            lines = [f"{target} = {expr}", f"{unpacked} = {target}"]
        else:
            lines = [f"{unpacked} = {expr}"]
        return lines + self._unpack_items(items, unpacks, namer, names)

    def _unpack_items(self, items: dict[int, Apply], unpacks: dict, namer, names) -> list[str]:
        """Items that are tuples used whole too, unpacked from their names in turn."""
        lines = []
        for k in sorted(items):
            item = items[k]
            if id(item) not in unpacks:
                continue
            inner, whole, arity = unpacks[id(item)]
            if whole:
                unpacked = self._unpack_target(inner, arity, namer, names, unpacks)
                lines.append(f"{unpacked} = {names[id(item)]}")
            lines += self._unpack_items(inner, unpacks, namer, names)
        return lines

    def _unpack_target(
        self, items: dict[int, Apply], arity: int, namer, names, unpacks, nested=False
    ) -> str:
        """`a, _, b` (or `a, _, b, *_` when the length is unknown) for a tuple
        whose items are read only by constant index; an item that is such a
        tuple itself is unpacked in place: `[x_1], bp`, `(a, b), c`."""
        n = arity if arity > 0 else max(items) + 1
        parts = []
        for k in range(n):
            item = items.get(k)
            inner = unpacks.get(id(item)) if item is not None else None
            if item is None:
                parts.append("_")
            elif inner is not None and not inner[1]:  # not used whole: no name of its own
                parts.append(self._unpack_target(*inner[::2], namer, names, unpacks, True))
            else:
                parts.append(self._name_node(item, namer, names))
        if arity < 0:
            parts.append("*_")
        if len(parts) == 1:
            return f"[{parts[0]}]"
        return f"({', '.join(parts)})" if nested else ", ".join(parts)

    def emit_children(self, graph, nodes, defined: set, namer, names, depth) -> list[str]:
        """Nested defs for the graphs of `graph` that `nodes` need, not yet emitted."""
        children = [c for c in self._local_graphs(graph, nodes) if c.uid not in defined]
        for child in children:  # named first: they may call each other
            self.graph_name(child, namer)
            defined.add(child.uid)
        lines = []
        for child in children:
            lines += self.emit_graph(child, namer, names, depth + 1)
        return lines

    def _local_graphs(self, graph: FuncGraph, nodes) -> list[FuncGraph]:
        """Graphs nested in `graph` that `nodes` use, directly or via closures."""
        found: dict[int, FuncGraph] = {}
        seen: set[int] = set()
        todo = [
            n.value for n in nodes if isinstance(n, Constant) and isinstance(n.value, FuncGraph)
        ]
        while todo:
            g = todo.pop()
            if g.uid in seen or g.parent is None:
                continue
            seen.add(g.uid)
            if g.parent is graph:
                found[g.uid] = g
            elif not any(a is graph for a in g.ancestors()):
                continue
            todo += self._graph_reads(g)[1]  # the closures it uses, as written
        return list(found.values())

    def _name_node(self, node: Node, namer: Namer, names: dict[int, str]) -> str:
        if id(node) not in names:
            base = node.name if isinstance(node, Parameter) else node.debug.name
            of = self.view.canon(node.sens_of) if node.sens_of is not None else None
            of_name = names.get(id(of), "") if of is not None else ""
            if of_name.isidentifier() and (of.debug.name or isinstance(of, Parameter)):
                # The gradient of exactly that name, or a temporary.
                names[id(node)] = namer.exact("d_" + of_name) or namer.temp()
            elif of is not None and base.startswith("d_"):  # of a value not named here
                names[id(node)] = namer.temp()
            elif base.startswith("d_") and _made_by_transform(node):  # a sensitivity
                names[id(node)] = namer.exact(base) or namer.temp()
            else:
                names[id(node)] = namer.fresh(base) if base else namer.temp()
        return names[id(node)]

    def expression(self, node: Apply, names, namer) -> str:
        node = self.view.emitted(node)
        args = [self.atom(a, names, namer) for a in node.args]
        fn = node.fn
        if isinstance(fn, Constant) and isinstance(fn.value, Primitive):
            return fn.value.emit(self, args)
        callee = self.atom(fn, names, namer)
        if getattr(node, "calls_value", False):
            # the program calls a function value known only when it runs: the
            # user's Python there is host code (`host_log.called`)
            callee = f"{self.ref(host_log.called, '_called')}({callee})"
        return f"{callee}({', '.join(args)})"

    def atom(self, node: Node, names, namer) -> str:
        """A name or literal for `node`'s value."""
        if node is None:
            return "None"
        node = self.view.canon(node)  # a node written as another (`codegen.view`)
        if not isinstance(node, Constant):
            return names[id(node)]
        value = node.value
        if isinstance(value, FuncGraph):
            nested_here = value.parent is not None and any(g is value.parent for g in self.scope)
            if nested_here and value.uid in self.graph_names:
                return self.graph_names[value.uid]
            # A top-level graph, or a closed graph (no free variables) not
            # nested here, such as a branch of an inlined rule or a loop body
            # that K of a loop calls (k_transform.control.k_loops): a
            # module-level def (for a nested graph, a copy).
            return self.module_def(value)
        if kt_attribute(value, "__kt_parameter__", False):
            # Read when the code runs (bound by gradient functions), never baked in.
            return f"{self.ref(rt, '_rt')}.read_param({self.ref(value, value.name)})"
        return self.value_source(value, node.hint)

    def value_source(self, value, hint: str = "") -> str:
        """Source for a constant value: its own spelling (`kt_source`), a
        literal, or a global name."""
        if hasattr(value, "kt_source"):
            return value.kt_source(self)
        literal = _literal(value)
        return literal if literal is not None else self.ref(value, hint)

    # -- tuples unpacked -------------------------------------------------------------------
    def _unpackings(self, graph, live: set[int], uses: dict) -> dict[int, tuple[dict, bool, int]]:
        """Tuples of `graph` (nodes of a known length: `view.arity`) read
        through distinct constant indices by live `getitem`s of `graph`:
        (index -> item, whether the tuple is used as a whole too, its length
        or -1). `uses`: each node's readers in `graph` and the graphs nested
        in it (None: returned)."""
        found = {}
        for node in graph.nodes:
            if id(node) not in live:
                continue
            arity = self.view.arity(node)
            if not arity:
                continue
            items, whole = self._index_reads(node, arity, uses.get(id(node), []), live)
            if items:
                found[id(node)] = (items, whole, arity)
        return found

    def _index_reads(self, node: Apply, arity: int, users: list, live) -> tuple[dict, bool]:
        items: dict[int, Apply] = {}
        whole = False
        for user in users:
            if isinstance(user, Apply) and user.graph is node.graph and id(user) not in live:
                continue  # not emitted
            args = self.view.args(user) if isinstance(user, Apply) else []
            index = args[1] if len(args) == 2 else None
            ok = (
                isinstance(user, Apply)
                and user.graph is node.graph
                and isinstance(user.fn, Constant)
                and getattr(user.fn.value, "reads_item", False)
                and args[0] is node
                and isinstance(index, Constant)
                and type(index.value) is int
                and 0 <= index.value
                and (arity < 0 or index.value < arity)
                and index.value not in items
            )
            if ok:
                items[index.value] = user
            else:
                whole = True
        return items, whole

    # -- liveness ------------------------------------------------------------------------
    def live_nodes(self, graph: FuncGraph) -> set[int]:
        """Apply nodes of `graph` that the output or an effect needs."""
        live: set[int] = set()
        todo: list[Node] = [self.view.canon(graph.output), *self.effectful(graph)]
        while todo:
            node = todo.pop()
            if node is None or id(node) in live:
                continue
            if isinstance(node, Constant):
                if isinstance(node.value, FuncGraph) and node.value.parent is not None:
                    live.add(id(node))
                    todo += [v for v in self.free_variables(node.value) if v.graph is graph]
                continue
            if node.graph is not graph or not isinstance(node, Apply):
                continue
            live.add(id(node))
            todo += self.view.inputs(node)
        return live

    def free_variables(self, graph: FuncGraph) -> list[Node]:
        """`graph.free_variables()`, each graph's reads collected once per
        module (graphs do not change while they are emitted)."""
        if graph.uid not in self._free:
            self._free[graph.uid] = graph.free_variables(reads=self._graph_reads)
        return self._free[graph.uid]

    def _graph_reads(self, graph: FuncGraph) -> tuple[list, list]:
        """`graph.reads_of()` as written (`view`): what its written nodes read."""
        if graph.uid not in self._reads:
            written = [self.view.inputs(n) for n in graph.nodes if not self.view.is_alias(n)]
            used = [i for inputs in written for i in inputs] + [self.view.canon(graph.output)]
            self._reads[graph.uid] = reads_among(used)
        return self._reads[graph.uid]

    def uses_in(self, graph: FuncGraph) -> dict[int, list]:
        """Each node's readers, from `graph` and the graphs nested in it (None:
        a graph returns it). One map per module, each graph read once: a
        node is only read by its own graph and graphs nested in it."""
        if graph.uid in self._uses_read:
            return self._uses
        for g in graph.reachable():  # all graphs nested in it among them
            if g.uid in self._uses_read:
                continue
            self._uses_read.add(g.uid)
            for user in g.nodes:
                if self.view.is_alias(user):  # not written
                    continue
                for inp in self.view.inputs(user):
                    self._uses.setdefault(id(inp), []).append(user)
            returned = self.view.canon(g.output)
            self._uses.setdefault(id(returned), []).append(None)  # returned: not unpackable
        return self._uses

    def has_effect(self, node: Apply) -> bool:
        fn = node.fn
        if not isinstance(fn, Constant):
            return True  # calling an unknown function value
        if getattr(fn.value, "effectful", False) is True:  # a primitive, or K of a host call
            return True
        return any(self.graph_has_effect(g) for g in _graph_inputs(node))

    def graph_has_effect(self, graph: FuncGraph) -> bool:
        return bool(self.effectful(graph))

    def effectful(self, graph: FuncGraph) -> list[Apply]:
        """The nodes of `graph` with an effect (found once per module)."""
        if graph.uid not in self._effects:
            self._effects[graph.uid] = []  # recursion: assume none
            self._effects[graph.uid] = [n for n in graph.nodes if self.has_effect(n)]
        return self._effects[graph.uid]


class _BodyPlan:
    """How a graph's body is written: its `live` nodes; `statements`, in
    order (unpacked items are written in their tuple's statement); `inline`:
    those written inside the one expression reading them (a static `if`'s
    condition, a tuple passed on); `unpacks` (see `_unpackings`); `out`, the
    result, `only_returned` when nothing else reads it, and `returned`, a
    node written in the `return` line itself (or, for a branch written
    inline, the tuple it returns, bound to the target)."""

    live: set[int]
    statements: list[Apply]
    inline: set[int]
    unpacks: dict
    out: Node
    only_returned: bool
    returned: Apply | None = None


def _live_readers(node: Node, uses: dict, graph: FuncGraph, live: set[int]) -> list:
    """The readers of `node` (None: a `return`) that are written: those of
    `graph` that are live, and any of the graphs nested in it."""
    return [
        user
        for user in uses.get(id(node), [])
        if not (isinstance(user, Apply) and user.graph is graph and id(user) not in live)
    ]


def _unparenthesized(expr: str, node: Apply) -> str:
    """`a, b` for the tuple `(a, b)` a `return` gives."""
    if _prim_name(node) == "make_tuple" and len(node.args) > 1:
        return expr[1:-1]
    return expr


def _made_by_transform(node: Node) -> bool:
    return isinstance(node, Apply) and node.graph.kind in ("fprop", "bprop", "transform")


class _Comments:
    """`# line N: <source>` over the statements of each source line; in a
    bprop `# grad of line N: <source>`, once per run of statements from that
    line (statements without a line of their own stay in the current run).
    Inside a branch written inline, only lines of the function's own file."""

    def __init__(self, backward: bool, enabled: bool, file: str = "", inline: bool = False):
        self.prefix = "grad of line" if backward else "line"
        self.enabled = enabled
        self.file = file
        self.inline = inline
        self.last = None
        self.shown: set[int] = set()  # functions run as Python, whose lines are shown

    def inside(self) -> _Comments:
        """The comments of a branch written inline in this function."""
        inner = _Comments(self.prefix != "line", self.enabled, self.file, inline=True)
        inner.last = self.last
        return inner

    def before(self, node: Apply) -> list[str]:
        debug = node.debug
        if not self.enabled:
            return []
        python = self.python_lines(node)
        if not debug.line or debug.line == self.last:
            return python
        if self.inline and debug.file != self.file:
            return []
        self.last = debug.line
        return [f"# {self.prefix} {debug.line}: {debug.source_line.strip()}".rstrip(), *python]

    def python_lines(self, node: Apply) -> list[str]:
        """The user's own lines of a function the call runs as Python (the
        parser has no model of it: `frontend.python_code`), once per function,
        in the forward code: what runs there is those lines, not ours."""
        value = node.fn.value if isinstance(node.fn, Constant) else None
        fn = getattr(getattr(value, "call", value), "fn", None)
        # `frontend.python_code.reason(fn)`, read where it is kept (codegen is below frontend)
        entry = TRANSFORM.cache("python_code.functions").get(id(fn)) if fn is not None else None
        reason = entry[1] if entry is not None and entry[0] is fn else None
        if reason is None or self.prefix != "line" or id(fn) in self.shown:
            return []
        self.shown.add(id(fn))
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError):
            return []
        where = f"{reason.debug.file}:{reason.debug.line}" if reason.debug else ""
        head = f"# {fn.__name__} runs as Python ({reason.construct}, {where}), its lines:"
        shown = [f"#   {first + k}: {line.rstrip()}".rstrip() for k, line in enumerate(lines)]
        return [head, *shown[:_PYTHON_LINES]] + (["#   ..."] if len(shown) > _PYTHON_LINES else [])


_PYTHON_LINES = 40  # lines of a function run as Python shown in generated code


def _is_primary(expr: str) -> bool:
    """A name, attribute, call or subscript: safe to write inside another
    expression without parentheses."""
    return re.fullmatch(r"[\w.]+(\(.*\)|\[.*\])?", expr) is not None and "(" not in expr[:1]


def _unwrapped(expr: str) -> str:
    """`expr` without the parentheses an inlined condition got (`(a == 2)`)."""
    if expr.startswith("(") and expr.endswith(")"):
        depth = 0
        for k, ch in enumerate(expr):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0 and k < len(expr) - 1:
                return expr
        return expr[1:-1]
    return expr


def _one_if(body: list[str], pad: str) -> bool:
    """Whether `body` (lines indented by `pad`) is one `if` statement."""
    if not body or not body[0].startswith(pad + "if "):
        return False
    top = [line for line in body if not line.startswith(pad + " ")]
    return all(line.startswith((pad + "if ", pad + "elif ", pad + "else:")) for line in top) and (
        sum(line.startswith(pad + "if ") for line in top) == 1
    )


def _returned_tuple(graph: FuncGraph, out: Node, live: set[int], uses: dict) -> Apply | None:
    """The tuple `graph` builds only to return it (written as the result)."""
    fn = out.fn.value if isinstance(out, Apply) and isinstance(out.fn, Constant) else None
    if not (isinstance(fn, Primitive) and fn.name == "make_tuple" and out.graph is graph):
        return None
    return out if _live_readers(out, uses, graph, live) == [None] and id(out) in live else None


def _graph_inputs(node: Apply) -> list[FuncGraph]:
    """FuncGraphs the node calls or passes (branches, loop bodies, closures)."""
    return [
        a.value for a in node.inputs if isinstance(a, Constant) and isinstance(a.value, FuncGraph)
    ]


def _literal(value) -> str | None:
    """Python source for simple constants, else None (then the value is
    referenced by a global name). Only the exact built-in types: a subclass
    (an IntEnum member, a float-mixin Enum, NumPy's float64, a str subclass)
    has a repr that is not a literal, or is one of another type, so it is
    referenced as itself."""
    kind = type(value)
    if value is None or value is Ellipsis or kind in (bool, str, bytes):
        return "..." if value is Ellipsis else repr(value)
    if kind is int:
        return repr(value) if value >= 0 else f"({value!r})"
    if kind is float:
        if math.isnan(value) or math.isinf(value):
            return f"float({str(value)!r})"
        return repr(value) if math.copysign(1, value) > 0 else f"({value!r})"  # -0.0 too
    if kind is tuple:  # not a namedtuple: its items alone would lose its type
        items = [_literal(v) for v in value]
        if any(i is None for i in items):
            return None
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if kind is slice:
        parts = [_literal(p) for p in (value.start, value.stop, value.step)]
        return None if None in parts else f"slice({', '.join(parts)})"
    return None


def _resolves(root, path: str, value) -> bool:
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj is value


__all__ = ["ModuleEmitter", "sanitize"]
