"""Forward mode: J(g)(*xs, *vs) -> (out, J v), derived from reverse rules.

`jvp_graph(primal)` (`k_transform.transforms`) asks this module first and
falls back to double reverse of the whole graph (`double_reverse`) where J
does not reach (below). Both give the same numbers; J runs each loop once,
over `(carry, tangent)`, where double reverse runs a recording loop and its
transposed sweep.

J maps each node of `g` to its value and its tangent, in program order:

- primitive applications: a run of them that tangents reach is one
  segment, a closed graph run by `double_reverse` (`bprop(u)` is linear in
  `u`, so its reverse mode with respect to `u` alone gives `J v`): every
  tangent still comes from a registered bprop rule (seed 001's design).
  A function with no control flow is one segment: plain double reverse;
- a call of a graph: a call of its J-graph (a closure's is built inside J
  of the graph that defines it, reading the values and tangents it
  captures there);
- a function value J made (a closure's J-graph, e.g. the bprop closure
  of a gradient: `jvp(grad(f))` is forward over reverse): called with the
  arguments' tangents. Its build-time tangent is `_Fn`; it has no other.
  A closure a called graph returns that the caller only calls, with an
  argument whose tangent is zero there (`bprop(ones_like(out))`), gets a
  J-graph that takes no tangent for it (`calls_of_returned`);
- `switch(c, t, f, *args)`: a switch of the branches' J-graphs, which give
  `(*values, *tangents)` so an undefined value is filled item by item;
- `while_loop`, `for_range`, `for_each`: the same loop over the carries and
  the tangents of those carries that can be non-zero (a fixed point over the
  body), with the body's J-graph as its body; a `for` over a sequence with
  a tangent counts its items and reads that tangent at each (`EachItem`:
  none for a dict, whose items are its keys).

Tangents known to be zero are None at build time and cost nothing: a node
whose inputs all have zero tangents is copied as it is (so is `print`), and
a primitive whose rule gives no gradient (comparisons, shapes) has a zero
tangent. A tuple built for control flow keeps one tangent per item, so a
loop carries tangents only for the carries that have them. Graph outputs
give dense tangents (zeros where zero), so loop carries and both branches
of a switch line up.

Not reached (the whole function then goes by double reverse): a function
value J did not make (an argument, a run-time loop's bprop in a K-graph),
a function passed to a graph or carried by a loop, recursion, `Assign`.
"""

from __future__ import annotations

from k_transform.bprop_registry.registry import bprop_getters
from k_transform.context import TRANSFORM
from k_transform.control.prims import (
    ControlPrimitive,
    EachItem,
    ForEach,
    ForRange,
    Switch,
    WhileLoop,
)
from k_transform.dfunctor.builder import Builder, new_graph
from k_transform.dfunctor.dfunctor import SERVICES, k_graph, own_fprop
from k_transform.errors import KTransformError
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node
from k_transform.ir.primitive import Primitive
from k_transform.ops import python as prims
from k_transform.ops import structural
from k_transform.ops.arithmetic import Add
from k_transform.ops.mapping import primitive_for_value
from k_transform.ops.state import Assign
from k_transform.protocol import kt_attribute


class _Unsupported(Exception):
    """A construct J does not map (the graph goes by double reverse)."""


class _Fn:
    """The build-time tangent of a function value (a closure): under J the
    value is the closure's J-graph `jf.graph`, taking `(*xs, *vs)` and
    returning `(out, J v)`; it has no tangent of its own."""

    def __init__(self, jf: _Forward):
        self.jf = jf

    def __eq__(self, other):
        return isinstance(other, _Fn) and other.jf is self.jf

    def __hash__(self):
        return id(self.jf)


# -- double reverse ---------------------------------------------------------------
def double_reverse(primal: FuncGraph, mask: tuple | None = None) -> FuncGraph:
    """`(out, J v)` for `primal` by double reverse of the whole graph:

        def f_jvp(*xs, *vs):
            (out, bprop_fprop), _ = K(K(f))(*xs)   # the second bprop is never called
            grads, transpose = bprop_fprop(zeros_like(out))
            _, jv = transpose((zeros_like(grads[0]), *vs))   # d u: J v
            return out, jv

    `bprop(u)` is linear in `u`, so its reverse mode with respect to `u`
    alone runs `J v`; the reverse pass of `K(K(f))` is never traced. The
    outer K is passive (`k_graph(..., wrt_inputs=False)`): `transpose` computes
    `d u` only, not the gradients of the residuals `bprop` reads. With
    `mask`, the inputs it flags False have zero tangents (their `v`s are not
    read): the inner K makes them constants, so `bprop` never computes their
    gradients, whose transpose would meet `0 * inf` (NaN where JAX, whose
    zero tangents are symbolic, has a number: `log1p(-c)` at a constant 1)."""
    names = [p.name for p in primal.parameters]
    n = len(names)
    wrt = True if mask is None or all(mask) else tuple(mask)
    k_fprop = k_graph(k_graph(primal, wrt_inputs=wrt), wrt_inputs=False)
    graph, args = new_graph(f"{primal.name}_jvp", primal, names + [f"v_{x}" for x in names])
    b = Builder(graph)
    xs, vs = args[:n], args[n:]
    pair = b.call(Constant(k_fprop, hint=k_fprop.name), *xs, arity=2)
    result = b.item(pair, 0)  # K of (out, bprop)
    result.tuple_arity = 2
    out, bprop_fprop = b.item(result, 0, "out"), b.item(result, 1, "bprop")
    linear = b.call(bprop_fprop, b.prim(structural.ZerosLike(), out), arity=2)
    transpose = b.item(linear, 1, "transpose")
    # The sensitivity of bprop's `(env, d_x...)`: zeros for the env (its keys
    # kept: the transposed code reads them); an input's gradient is
    # `input_grad(d_x, x)` (zeros for an integer input), and so is its tangent.
    env = b.item(b.item(linear, 0, "grads"), 0, "env")
    d_grads = [b.prim(structural.InputGrad(), v, x) for v, x in zip(vs, xs, strict=True)]
    d_sens = b.call(transpose, b.tuple(b.prim(structural.ZerosLike(), env), *d_grads), arity=2)
    graph.output = b.tuple(out, b.item(d_sens, 1, "jv"))
    return graph


# -- tangents: None (zero), a node, or a list (one per item of a built tuple) -------
def _struct(t):
    """The shape of a tangent: False (zero), True (a value), or a tuple of shapes."""
    if t is None:
        return False
    if isinstance(t, list):
        return tuple(_struct(x) for x in t)
    return t if isinstance(t, _Fn) else True


def _join(a, b):
    """The shape both of two tangents fit (the branches of a switch)."""
    if a == b:
        return b
    if isinstance(a, _Fn) or isinstance(b, _Fn):
        raise _Unsupported("branches giving different functions")
    if a is False:
        return b
    if b is False:
        return a
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(_join(x, y) for x, y in zip(a, b, strict=True))
    return True


def _items_of(shape, n: int) -> tuple:
    """The shapes of the `n` items of a tuple whose tangent is shaped `shape`."""
    return shape if isinstance(shape, tuple) and len(shape) == n else (shape is not False,) * n


# -- J of one graph -----------------------------------------------------------------
_BUILDING = object()


def forward_jvp(primal: FuncGraph, mask: tuple | None = None) -> FuncGraph | None:
    """J of `primal` as a jvp graph `(*xs, *vs) -> (out, J v)`, or None where
    J does not reach (see the module docstring). `mask`: the inputs with
    tangents (the others' `v`s are not read: zero tangents)."""
    if not any(_is_control(node) for node in primal.nodes):
        return None  # straight-line code: one segment, the whole graph
    try:
        mask = tuple(mask) if mask is not None else (True,) * len(primal.parameters)
        return _forward(primal, mask, True, top=True).graph
    except _Unsupported:
        return None


def _forward(
    graph: FuncGraph, mask: tuple, want, top: bool = False, flat: int = 0, called: tuple = ()
) -> _Forward:
    """J of `graph` for inputs whose tangents are non-zero where `mask` says,
    its output tangent shaped `want` (None: as it comes). `flat=k`: the
    output is a tuple of k values, given as `(*values, *tangents)` (a
    branch of a switch, which fills undefined values item by item).
    `called`: `(uid, mask)` of the closures `graph` returns that the caller
    calls only with the tangents `mask` flags (`_Forward.closure`)."""
    graph = graph.differentiable()
    if own_fprop(graph) is not None:  # its rule is a bprop: J is double reverse
        raise _Unsupported("a function with its own fprop")
    key = (graph.uid, mask, want, top, flat, called)
    forwards = TRANSFORM.cache("forward.graphs")  # key -> _Forward, _BUILDING or None (J fails)
    found = forwards.get(key)
    if found is _BUILDING:
        raise _Unsupported("recursion")
    if found is None and key in forwards:
        raise _Unsupported("cached")
    if found is None:
        forwards[key] = _BUILDING
        try:
            found = _Forward(graph, mask, want, top, flat, None, called)
        except _Unsupported:
            forwards[key] = None
            raise
        except BaseException:
            del forwards[key]
            raise
        forwards[key] = found
    return found


class _Forward:
    """Builds J of one graph (see the module docstring)."""

    def __init__(
        self, primal: FuncGraph, mask, want, top: bool, flat: int, parent, called: tuple = ()
    ):
        if parent is None and primal.parent is not None and primal.free_variables():
            raise _Unsupported("a closure outside its enclosing function")
        self.parent: _Forward | None = parent  # J of the enclosing graph (a closure's)
        self.children: dict[tuple, object] = {}  # J of closures defined in this graph
        self.mask = mask
        self.called = dict(called)  # closure uid -> the tangents its callers give
        names = [p.name for p in primal.parameters]
        takes = [m or top for m in mask]  # a jvp graph takes every input's tangent
        tangents = [f"v_{x}" for x, t in zip(names, takes, strict=True) if t]
        kind = "transform" if top else primal.kind
        name = f"{primal.name}_jvp" if top else f"{primal.name}_jvp{_mask_text(mask)}"
        self.graph, params = new_graph(name, primal, names + tangents, kind)
        self.graph.parent = parent.graph if parent is not None else None
        self.b = Builder(self.graph)
        self.primal = primal
        self.val: dict[int, Node] = {}
        self.tan: dict[int, object] = {}
        ts = iter(params[len(names) :])
        for p, q, m, t in zip(primal.parameters, params[: len(names)], mask, takes, strict=True):
            v = next(ts) if t else None
            self.val[id(p)], self.tan[id(p)] = q, (v if m else None)
        self.users = primal.readers()
        self.pending: list = []  # primitive nodes waiting to be one segment
        self.pending_ids: set[int] = set()
        self.parts = 0
        for node in primal.nodes:
            self.apply(node)
        self.flush()
        out, t_out = self.jvalue(primal.output), self.jtangent(primal.output)
        self.out_shape = _struct(t_out) if want is None else want
        if flat:
            items = [self.b.item(out, k) for k in range(flat)]
            t_items = self.items(t_out, flat)
            shapes = _items_of(self.out_shape, flat)
            dense = [self.dense(t, s, v) for t, s, v in zip(t_items, shapes, items, strict=True)]
            self.graph.output = self.b.tuple(*items, *dense)
        else:
            self.graph.output = self.b.tuple(out, self.dense(t_out, self.out_shape, out))

    # -- values and tangents ------------------------------------------------
    def value(self, node: Node) -> Node:
        if isinstance(node, Constant):
            _check_constant(node)
            return node
        owner = self.owner(node.graph)
        if id(node) in owner.pending_ids:
            owner.flush()
        return owner.val[id(node)]

    def tangent(self, node: Node):
        if isinstance(node, Constant):
            return None
        owner = self.owner(node.graph)
        if id(node) in owner.pending_ids:
            owner.flush()
        return owner.tan[id(node)]

    def jvalue(self, node: Node) -> Node:
        """`value`, but a function constant is its J-graph (a closure's, bound
        here): where J itself calls or returns it."""
        if isinstance(node, Constant) and isinstance(node.value, FuncGraph):
            jf = self.closure(node.value)
            return Constant(jf.graph, hint=jf.graph.name)
        return self.value(node)

    def jtangent(self, node: Node):
        if isinstance(node, Constant) and isinstance(node.value, FuncGraph):
            return _Fn(self.closure(node.value))
        return self.tangent(node)

    def closure(self, graph: FuncGraph) -> _Forward:
        """J of a function used as a value: every input may have a tangent,
        except those its callers give none (`called`: a bprop called with
        `ones_like(out)`, whose tangent is zero): J of it then takes none for
        them, and never meets `0 * inf` (`dout * (1 / x)` at x = 0, where
        JAX, whose zero tangents are symbolic, has -inf)."""
        return self.j_of(graph, self.called.get(graph.uid, (True,) * len(graph.parameters)))

    def owner(self, graph: FuncGraph) -> _Forward:
        """J of `graph`, this one or one enclosing it."""
        found = self
        while found.primal is not graph:
            found = found.parent
            if found is None:
                raise _Unsupported("a value of a graph J is not inside")
        return found

    def j_of(
        self, graph: FuncGraph, mask: tuple, want=None, flat: int = 0, called: tuple = ()
    ) -> _Forward:
        """J of a called graph: a closed one is shared, a closure's is built
        inside J of the graph that defines it (reading its values there)."""
        if graph.parent is None or not graph.free_variables():
            return _forward(graph, mask, want, flat=flat, called=called)
        owner = self.owner(graph.parent)
        key = (graph.uid, mask, want, flat, called)
        found = owner.children.get(key)
        if found is _BUILDING:
            raise _Unsupported("recursion")
        if found is None:
            owner.children[key] = _BUILDING
            try:
                found = _Forward(graph, mask, want, False, flat, owner, called)
            except BaseException:
                del owner.children[key]
                raise
            owner.children[key] = found
        return found

    def materialize(self, t) -> Node:
        """A tangent as one node (None for a zero one)."""
        if t is None:
            return Constant(None)
        if isinstance(t, list):
            return self.b.tuple(*(self.materialize(x) for x in t))
        if isinstance(t, _Fn):
            raise _Unsupported("a function value where J needs a tangent")
        return t

    def dense(self, t, shape, value: Node) -> Node:
        """The tangent `t` of `value` as a node shaped `shape`: zeros (not None)
        where `shape` says True, None where False."""
        if shape is False or isinstance(shape, _Fn):
            return Constant(None)  # a function value carries its own tangents
        if shape is True:
            return self.b.prim(structural.InputGrad(), self.materialize(t), value)
        items = self.items(t, len(shape))
        return self.b.tuple(
            *(
                self.dense(x, s, self.b.item(value, k))
                for k, (x, s) in enumerate(zip(items, shape, strict=True))
            )
        )

    def items(self, t, n: int) -> list:
        """The tangents of the `n` items of a tuple whose tangent is `t`."""
        if isinstance(t, list):
            return t
        if isinstance(t, _Fn):
            raise _Unsupported("a function value used as a tuple")
        return [None if t is None else self.b.item(t, k) for k in range(n)]

    def unpack(self, node: Node, shape):
        """A tangent node shaped `shape` as a build-time tangent."""
        if shape is False:
            return None
        if shape is True or isinstance(shape, _Fn):
            return node if shape is True else shape
        return [self.unpack(self.b.item(node, k), s) for k, s in enumerate(shape)]

    def _set(self, node: Node, value: Node, t) -> None:
        self.val[id(node)] = value
        self.tan[id(node)] = t

    def copy(self, node, fn: Node, args: list[Node]) -> Node:
        if isinstance(fn, Constant):
            _check_constant(fn)  # a closure reads values J does not pass
        return self.b.call(fn, *args, arity=node.tuple_arity, debug=node.debug)

    def pair(self, node, pair: Node, shape) -> None:
        """`node` is item 0 of `pair`, its tangent item 1 (shaped `shape`)."""
        value = self.b.item(pair, 0)
        value.debug = node.debug
        value.tuple_arity = node.tuple_arity
        tangent = self.b.item(pair, 1, f"t_{node.debug.name}" if node.debug.name else "")
        self._set(node, value, self.unpack(tangent, shape))

    # -- nodes ----------------------------------------------------------------------
    def apply(self, node) -> None:
        if not isinstance(node.fn, Constant):
            self.call_value(node)
            return
        fn = node.fn.value
        if isinstance(fn, FuncGraph):
            self.call_graph(node, fn)
        elif isinstance(fn, Switch):
            self.switch(node, fn)
        elif isinstance(fn, (WhileLoop, ForRange, ForEach)):
            self.loop(node, fn)
        elif isinstance(fn, ControlPrimitive) or not isinstance(fn, Primitive):
            prim = primitive_for_value(fn) if callable(fn) else None
            if prim is None or isinstance(fn, ControlPrimitive):
                raise _Unsupported(f"{fn!r}")
            self.primitive(node, prim, Constant(prim, node.fn.debug, node.fn.hint))
        else:
            self.primitive(node, fn, node.fn)

    def primitive(self, node, prim: Primitive, fn: Node) -> None:
        """A primitive joins the pending segment when a tangent reaches it;
        tuples built for control flow keep one tangent per item."""
        if isinstance(prim, Assign):
            raise _Unsupported("Assign")
        pending = any(id(a) in self.pending_ids for a in node.args)
        if prim.effectful:  # in program order: after the segment before it, alone
            self.flush()
            if any(self.tangent(a) is not None for a in node.args):
                self.pending.append((node, fn))
                self.pending_ids.add(id(node))
                self.flush()
                return
            pending = False
        elif isinstance(prim, prims.MakeTuple) and _only_outside(self.users[id(node)]):
            ts = [self.jtangent(a) for a in node.args]
            self._set(node, self.copy(node, fn, [self.jvalue(a) for a in node.args]), ts)
            return
        elif not pending:
            ts = [self.tangent(a) for a in node.args]
            last = node.args[-1] if node.args else None
            index = last.value if isinstance(last, Constant) else None
            pick = isinstance(prim, prims.GetItem) and len(ts) == 2 and isinstance(ts[0], list)
            if pick and type(index) is int:
                self._set(
                    node, self.copy(node, fn, [self.value(a) for a in node.args]), ts[0][index]
                )
                return
            if any(t is not None for t in ts):
                pending = True
        if not pending:
            self._set(node, self.copy(node, fn, [self.value(a) for a in node.args]), None)
            return
        for a in node.args:
            if isinstance(a, Constant):
                _check_constant(a)
        self.pending.append((node, fn))
        self.pending_ids.add(id(node))

    def flush(self) -> None:
        """The pending segment as one graph, run by double reverse: its values
        and tangents are those of its nodes that are read after it."""
        if not self.pending:
            return
        nodes, self.pending = self.pending, []
        inside = set(self.pending_ids)
        self.pending_ids = set()
        ins: dict[int, Node] = {}
        for node, _ in nodes:
            for a in node.args:
                if not isinstance(a, Constant) and id(a) not in inside:
                    ins.setdefault(id(a), a)
        outs = [
            n for n, _ in nodes if any(u is None or id(u) not in inside for u in self.users[id(n)])
        ]
        self.parts += 1
        part = _segment(self.primal, self.parts, list(ins.values()), nodes, outs)
        inputs = list(ins.values())
        jvp = double_reverse(part, tuple(self.tangent(a) is not None for a in inputs))
        pair = self.b.call(
            Constant(jvp, hint=jvp.name),
            *(self.value(a) for a in inputs),
            *(self.materialize(self.tangent(a)) for a in inputs),
            arity=2,
            debug=nodes[-1][0].debug.named(""),
        )
        values, tangents = self.b.item(pair, 0), self.b.item(pair, 1)
        values.tuple_arity = tangents.tuple_arity = len(outs)
        for k, node in enumerate(outs):
            value = self.b.item(values, k)
            value.debug, value.tuple_arity = node.debug, node.tuple_arity
            fn = node.fn.value
            zero = isinstance(fn, Primitive) and _no_gradient(fn, len(node.args))
            t = None if zero else self.b.item(tangents, k)
            if t is not None and node.debug.name:
                t.debug = t.debug.named(f"t_{node.debug.name}")
            self._set(node, value, t)

    def call_graph(self, node, graph: FuncGraph) -> None:
        self.flush()
        if len(node.args) != len(graph.parameters):
            raise _Unsupported("a call with defaults")
        args = [self.value(a) for a in node.args]
        ts = [self.tangent(a) for a in node.args]
        closure = graph.parent is not None and graph.free_variables()
        if all(t is None for t in ts) and not closure:
            self._set(node, self.copy(node, node.fn, args), None)
            return
        mask = tuple(t is not None for t in ts)
        sub = self.j_of(graph, mask, called=self.calls_of_returned(node, graph))
        pair = self._call_j(Constant(sub.graph, hint=sub.graph.name), args, ts, mask, node)
        self.pair(node, pair, sub.out_shape)

    def calls_of_returned(self, node, graph: FuncGraph) -> tuple:
        """`(uid, mask)` for each closure the graph `node` calls returns in
        its tuple (an fprop's bprop) that this graph only calls, `mask`
        flagging the arguments whose tangent may be non-zero there (not a
        constant nor a primitive with no gradient: `dout = ones_like(out)`)."""
        out = graph.output
        if not (isinstance(out, Apply) and _maker(out) is prims.MakeTuple):
            return ()
        called = []
        for k, item in enumerate(out.args):
            value = item.value if isinstance(item, Constant) else None
            if isinstance(value, FuncGraph) and value.parent is graph:
                mask = self.call_mask(node, k, len(value.parameters))
                if mask is not None and not all(mask):
                    called.append((value.uid, mask))
        return tuple(called)

    def call_mask(self, node, k: int, n: int) -> tuple | None:
        """The tangents the calls of item `k` of `node` in this graph give
        (`calls_of_returned`); None where the item is read otherwise."""
        mask = (False,) * n
        for reader in self.users[id(node)]:
            if reader is None or _maker(reader) is not prims.GetItem:
                return None
            index = reader.args[1]
            if not isinstance(index, Constant) or type(index.value) is not int:
                return None
            if index.value != k:
                continue
            for call in self.users[id(reader)]:
                if call is None or call.fn is not reader or len(call.args) != n:
                    return None
                if any(a is reader for a in call.args):
                    return None
                flags = [not _zero_tangent(a) for a in call.args]
                mask = tuple(m or f for m, f in zip(mask, flags, strict=True))
        return mask

    def call_value(self, node) -> None:
        """A call of a function value that J made (a closure's J-graph)."""
        self.flush()
        fn = self.jtangent(node.fn)
        if not isinstance(fn, _Fn):
            raise _Unsupported("a call of a function value J did not make")
        if len(node.args) != len(fn.jf.primal.parameters):
            raise _Unsupported("a call with defaults")
        args = [self.value(a) for a in node.args]
        ts = [self.tangent(a) for a in node.args]
        mask = fn.jf.mask  # (the tangents its callers give: `closure`)
        if any(t is not None and not m for t, m in zip(ts, mask, strict=True)):
            raise _Unsupported("a tangent for an input J of the closure takes none for")
        pair = self._call_j(self.value(node.fn), args, ts, mask, node)
        self.pair(node, pair, fn.jf.out_shape)

    def _call_j(self, fn: Node, args, ts, mask, node) -> Node:
        tangents = [self.materialize(t) for t, m in zip(ts, mask, strict=True) if m]
        return self.b.call(
            fn,
            *args,
            *tangents,
            arity=2,
            debug=node.debug.named(""),
        )

    def switch(self, node, fn: Switch) -> None:
        self.flush()
        cond, true_g, false_g, *rest = node.args
        args = [self.value(a) for a in rest]
        ts = [self.tangent(a) for a in rest]
        if all(t is None for t in ts):
            self._set(
                node, self.copy(node, node.fn, [self.value(cond), true_g, false_g, *args]), None
            )
            return
        mask = tuple(t is not None for t in ts)
        shape = _join(
            self.j_of(true_g.value, mask).out_shape,
            self.j_of(false_g.value, mask).out_shape,
        )
        k = fn.result_arity(node.args)
        shape = _items_of(shape, k) if k else shape
        graphs = [self.j_of(g.value, mask, shape, k).graph for g in (true_g, false_g)]
        branches = [Constant(g, hint=g.name) for g in graphs]
        tangents = [self.materialize(t) for t in ts if t is not None]
        res = self.b.call(
            node.fn,
            self.value(cond),
            *branches,
            *args,
            *tangents,
            arity=2 * k or 2,
            debug=node.debug,
        )
        if not k:
            self.pair(node, res, shape)
            return
        value = self.b.tuple(*(self.b.item(res, j) for j in range(k)))
        value.debug, value.tuple_arity = node.debug, node.tuple_arity
        t = [self.unpack(self.b.item(res, k + j), s) for j, s in enumerate(shape)]
        self._set(node, value, t)

    def loop(self, node, fn) -> None:
        self.flush()
        n = fn.n_carry
        n_fixed = max(fn.graph_slots) + 1
        heads = 0 if isinstance(fn, WhileLoop) else 1
        fixed, rest = node.args[:n_fixed], node.args[n_fixed:]
        t_seq = self.tangent(fixed[0]) if isinstance(fn, ForEach) else None
        each = t_seq is not None  # items have tangents: count them, index t_seq
        values = [self.value(a) for a in rest]
        ts = [self.tangent(a) for a in rest]
        if all(t is None for t in ts) and not each:
            new_fixed = [a if isinstance(a, Constant) else self.value(a) for a in fixed]
            self._set(node, self.copy(node, node.fn, [*new_fixed, *values]), None)
            return
        body = fixed[-1].value
        carry_mask = tuple(t is not None for t in ts[:n])
        inv_mask = tuple(t is not None for t in ts[n:])
        head_mask = (each,) * heads
        while True:  # the carries whose tangent can be non-zero: a fixed point
            j = self.j_of(body, head_mask + carry_mask + inv_mask)
            grown = tuple(
                a or b is not False
                for a, b in zip(carry_mask, _items_of(j.out_shape, n), strict=True)
            )
            if grown == carry_mask:
                break
            carry_mask = grown
        j = self.j_of(body, head_mask + carry_mask + inv_mask, carry_mask)
        if isinstance(fn, WhileLoop):
            new_fixed = [Constant(_loop_cond(fixed[0].value, n, carry_mask, inv_mask))]
        else:
            new_fixed = [self.value(a) for a in fixed[:-1]]
        new_fixed.append(Constant(_loop_body(j, body, heads, n, carry_mask, inv_mask, each)))
        t_carry = [
            self.dense(t, True, v)
            for t, v, m in zip(ts[:n], values[:n], carry_mask, strict=True)
            if m
        ]
        t_inv = [self.materialize(t) for t, m in zip(ts[n:], inv_mask, strict=True) if m]
        m = len(t_carry)
        count, seq = ([Constant(0)], [new_fixed[0], self.materialize(t_seq)]) if each else ([], [])
        loop = fn.with_carries(n + m + each)
        res = self.b.call(
            Constant(loop, hint=loop.name),
            *new_fixed,
            *values[:n],
            *t_carry,
            *count,
            *values[n:],
            *t_inv,
            *seq,
            arity=-1,
            debug=node.debug,
        )
        value = self.b.tuple(*(self.b.item(res, k) for k in range(n)))
        value.debug = node.debug
        value.tuple_arity = node.tuple_arity
        slots = iter(range(n, n + m))
        self._set(node, value, [self.b.item(res, next(slots)) if c else None for c in carry_mask])


def _is_control(node) -> bool:
    """Calls of graphs, switches and loops: what J maps structurally."""
    fn = node.fn.value if isinstance(node.fn, Constant) else None
    return isinstance(fn, (FuncGraph, Switch, WhileLoop, ForRange, ForEach))


def _mask_text(mask: tuple) -> str:
    return "_" + "".join("1" if m else "0" for m in mask) if not all(mask) else ""


def _maker(node):
    fn = node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None
    return type(fn) if isinstance(fn, Primitive) else None


def _zero_tangent(node: Node) -> bool:
    """Whether `node`'s tangent is zero whatever J meets before it: a
    constant, or the result of a primitive with no gradient (`ones_like`)."""
    if isinstance(node, Constant):
        return not isinstance(node.value, FuncGraph)
    fn = node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None
    return isinstance(fn, Primitive) and not fn.effectful and _no_gradient(fn, len(node.args))


def _no_gradient(prim: Primitive, n: int) -> bool:
    """Whether `prim`'s rule gives no input a gradient (its output has no tangent)."""
    if prims.imports_jaxpr(prim):
        return False
    try:
        return bprop_getters.bprop_graph(prim, n, SERVICES.parse).no_gradient
    except KTransformError:
        return False  # no rule: the jvp graph reports it where it is built


# -- loops: condition and body over (carry, tangents, invariants, tangents) ----------
def _loop_names(graph: FuncGraph, heads, n, carry_mask, inv_mask, each=False) -> list[str]:
    """Parameters of a loop's condition or body under J: the carries and the
    tangents of some, then the invariants and the tangents of some; `each`:
    a `for` over a sequence with a tangent counts its items (`k`) and reads
    the sequence (`seq`) and its tangent (`v_seq`)."""
    names = [p.name for p in graph.parameters]
    carry, inv = names[heads : heads + n], names[heads + n :]
    t_carry = [f"v_{x}" for x, m in zip(carry, carry_mask, strict=True) if m]
    t_inv = [f"v_{x}" for x, m in zip(inv, inv_mask, strict=True) if m]
    count, seq = (["k"], ["seq", "v_seq"]) if each else ([], [])
    return [*names[:heads], *carry, *t_carry, *count, *inv, *t_inv, *seq]


def _split_params(params, heads, n, carry_mask, inv_mask, each=False):
    """`_loop_names`' groups: (heads, carry, t_carry, count, inv, t_inv, seq)."""
    m, k, e = sum(carry_mask), sum(inv_mask), int(each)
    groups, at = [], 0
    for size in (heads, n, m, e, len(params) - heads - n - m - 3 * e - k, k, 2 * e):
        groups.append(params[at : at + size])
        at += size
    return groups


def _loop_cond(cond: FuncGraph, n: int, carry_mask, inv_mask) -> FuncGraph:
    names = _loop_names(cond, 0, n, carry_mask, inv_mask)
    graph, params = new_graph(f"{cond.name}_jvp", cond, names, "loop_cond")
    _, carry, _, _, inv, _, _ = _split_params(params, 0, n, carry_mask, inv_mask)
    graph.output = graph.apply(Constant(cond, hint=cond.name), *carry, *inv, debug=cond.debug)
    return graph


def _loop_body(j: _Forward, body: FuncGraph, heads, n, carry_mask, inv_mask, each):
    names = _loop_names(body, heads, n, carry_mask, inv_mask, each)
    graph, params = new_graph(f"{body.name}_jvp", body, names, "loop_body")
    b = Builder(graph)
    h, carry, t_carry, count, inv, t_inv, seq = _split_params(
        params, heads, n, carry_mask, inv_mask, each
    )
    t_item = [b.prim(EachItem(), seq[1], seq[0], count[0])] if each else []
    pair = b.call(
        Constant(j.graph, hint=j.graph.name),
        *h,
        *carry,
        *inv,
        *t_item,
        *t_carry,
        *t_inv,
        arity=2,
        debug=body.debug,
    )
    out, t_out = b.item(pair, 0), b.item(pair, 1)
    new = [b.item(out, k) for k in range(n)]
    t_new = [b.item(t_out, k) for k in range(n) if carry_mask[k]]
    more = [b.prim(Add(), count[0], Constant(1))] if each else []
    graph.output = b.tuple(*new, *t_new, *more)
    return graph


# -- segments of straight-line code ------------------------------------------------
def _check_constant(node: Constant) -> None:
    value = node.value
    if isinstance(value, FuncGraph) and value.parent is not None and value.free_variables():
        raise _Unsupported("a closure as a value")
    if kt_attribute(value, "__kt_parameter__", False):
        raise _Unsupported("a kt.Parameter")


def _only_outside(users: list) -> bool:
    """Read only as the graph's output or by closures (a tuple J keeps by item)."""
    return bool(users) and all(u is None for u in users)


def _segment(primal: FuncGraph, k: int, ins: list[Node], nodes, outs: list[Node]) -> FuncGraph:
    """A closed graph of `nodes` (primitive applications of `primal`) from
    `ins`, returning the tuple of `outs`."""
    names: list[str] = []
    for a in ins:
        base = a.debug.name or getattr(a, "name", "") or "x"
        name, copy = base, 0
        while name in names:
            copy += 1
            name = f"{base}_{copy}"
        names.append(name)
    graph, params = new_graph(f"{primal.name}_part{k}", primal, names, "function")
    new = {id(a): p for a, p in zip(ins, params, strict=True)}
    for node, fn in nodes:
        args = [a if isinstance(a, Constant) else new[id(a)] for a in node.args]
        copy = graph.apply(fn, *args, debug=node.debug)
        copy.tuple_arity = node.tuple_arity
        new[id(node)] = copy
    graph.output = graph.apply(
        Constant(prims.MakeTuple(), hint="make_tuple"), *(new[id(o)] for o in outs)
    )
    return graph
