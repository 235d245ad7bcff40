"""Parser methods for iteration sugar (mixed into `GraphBuilder`).

- Comprehensions and the builtins that consume an iterable (`sum`, `min`,
  `max`, `list`, `tuple`) become nested functions (`k_transform.frontend.sugar`)
  called at once: their variables do not leak, as in Python 3.
- `for` over `zip(...)`, `enumerate(...)`, `reversed(...)`, `d.items()`,
  `d.keys()`, `d.values()` (and every `for` of a comprehension) iterates by
  position: a *view* gives the number of items and how to read item `i`
  (`seq[i]`, a tuple of items for `zip`, `(start + i, seq[i])` for
  `enumerate`, `seq[n - 1 - i]` for `reversed`). When the length is known
  while parsing (constants, tuple and list literals) the loop is unrolled;
  otherwise it is a `for_each` over `_rt.indices(n)`, a tuple of Python ints,
  which run time unrolls (lengths are static under `jax.jit`: a tuple's, or
  an array's leading dimension). `zip` stops at the shortest, as Python's.
  An iterable known only when run may be an iterator (`itertools.product(...)`):
  `rt.iterated` takes its items at once (`zip`: as many as its other
  iterables have, `zip_parts`), by a host call a derivative replays; a `for`
  over one takes them one at a time and stops at its `break`
  (`control.runtime.for_each`). A `for` over `zip`/`enumerate` of iterables
  host calls made (a list a function run as Python returned, an
  `itertools.count()`) learns which is which when it runs (`rt.zipped`): where
  one has a length the items are read by position, keeping their gradients.
- Unpacking is `k_transform.frontend.unpacking`; `*args`/`**kwargs` parameters
  `k_transform.frontend.signature`.

A construct whose Python semantics cannot be kept raises `KTransformError`
naming it: iterating a traced number of times (at run time), `zip`,
`enumerate` or `reversed` used as a value (a one-shot iterator), `min`/`max`
with `key=`/`default=`, `isinstance` of a traced value, unpacking into a
call a sequence or dict whose length or keys are not known while parsing.
"""

from __future__ import annotations

import gast
import jax.numpy as jnp

from k_transform import ops
from k_transform import runtime as rt
from k_transform.frontend import sugar
from k_transform.frontend.calls import static_inputs
from k_transform.frontend.desugar import FUNCTION_SCOPES, walk_scope
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node
from k_transform.ops import python as prims

_DICT_VIEWS = ("items", "keys", "values")
CONSUMED = "_kt_consumed"  # marks a generator expression a builtin consumes at once


def consumed(iterable) -> None:
    """Mark `iterable`, if a generator expression, as consumed at once by the
    builtin it is the argument of (`SugarBuilder.expr_GeneratorExp`)."""
    if isinstance(iterable, gast.GeneratorExp):
        setattr(iterable, CONSUMED, True)


class View:
    """An iterable read by position: `length` (a node) and `item(builder, i)`;
    `strict`: the lengths of each `zip(..., strict=True)` in it whose
    iterables may differ in length (checked after the loop: `ZipStrictEnd`)."""

    def __init__(self, length: Node, item, strict: tuple = ()):
        self.length = length
        self.item = item
        self.strict = strict


def maker_of(node: Node):
    return node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None


def call_of(fn, name: str):
    return prims.LibraryCall(fn, f"_rt.{name}")


def cells_of(node: Node) -> Node:
    """A container Cell (`CellList`, `SequentialCell`) as the constant tuple of
    its Cells, for a `for` loop (or `enumerate`, `zip`) to unroll; any other node as it is."""
    value = node.value if isinstance(node, Constant) else None
    if not hasattr(value, "construct"):
        return node
    if hasattr(type(value), "__iter__"):
        return Constant(tuple(value), node.debug, node.hint)
    if hasattr(type(value), "__getitem__") and hasattr(type(value), "__len__"):
        return Constant(tuple(value[k] for k in range(len(value))), node.debug, node.hint)
    return node


def static_keys(d: Node, depth: int = 0) -> tuple | None:
    """The keys of the dict `d`, in order, where they are known while
    parsing: a dict display of constant keys, `dict(k=v)`, a constant dict,
    such a dict with `d[k] = v` at a constant key, or returned by a function
    parsed already; else None."""
    if isinstance(d, Constant):
        return tuple(d.value) if isinstance(d.value, dict) else None
    maker = maker_of(d)
    if isinstance(maker, prims.MakeDict):
        keys = d.args[0::2]
        if all(isinstance(k, Constant) and rt.hashable(k.value) for k in keys):
            return tuple(dict.fromkeys(k.value for k in keys))
    elif isinstance(maker, prims.LibraryCall) and maker.fn is dict:
        if len(maker.kwnames) == len(d.args):  # `dict(s=a, t=b)`
            return tuple(maker.kwnames)
    elif isinstance(maker, FuncGraph) and depth < 8 and maker.output is not None:
        return static_keys(maker.output, depth + 1)  # `d = make(x)`, its result a display
    elif isinstance(maker, prims.SetItem) and isinstance(d.args[1], Constant):
        base, key = static_keys(d.args[0], depth), d.args[1].value
        if base is not None and rt.hashable(key):
            return base if key in base else (*base, key)
    return None


class SugarBuilder:
    """The methods of `GraphBuilder` for the constructs in the module docstring."""

    # -- comprehensions ----------------------------------------------------------
    def expr_ListComp(self, e) -> Node:
        return self.comprehension(e, "listcomp")

    def expr_GeneratorExp(self, e) -> Node:
        """A generator expression is a one-shot, lazy iterator: kept exact
        only as the sole iterable of a builtin that consumes it at once
        (`sum`, `min`, `max`, `any`, `all`, `list`, `tuple`: `consumed`),
        where its items, made eagerly, are the items Python's consumer sees."""
        if not getattr(e, CONSUMED, False):
            raise self.fp.unsupported(
                "a generator expression other than the argument of sum, min, max, any, "
                "all, list or tuple (a lazy, one-shot iterator; use a list comprehension)",
                e,
            )
        return self.comprehension(e, "genexpr")

    def expr_DictComp(self, e) -> Node:
        return self.comprehension(e, "dictcomp")

    def comprehension(self, e, kind: str) -> Node:
        if any(g.is_async for g in e.generators):
            raise self.fp.unsupported("an async comprehension", e)
        if any(isinstance(n, gast.NamedExpr) for n in walk_scope([e], stop=FUNCTION_SCOPES)):
            # It binds in the function around the comprehension, which the
            # comprehension's own function (`sugar.comprehension`) cannot.
            raise self.fp.unsupported("an assignment expression (:=) in a comprehension", e)
        if kind == "genexpr" and _yields_closures_over_targets(e):
            # Lazy: each closure sees the variable's value when it is called,
            # which depends on how far its consumer has advanced the generator.
            raise self.fp.unsupported(
                "a generator expression yielding lambdas that read its own variables", e
            )
        return self.run_sugar(sugar.comprehension(e, self.sugar_name(kind, e)), e)

    def sugar_name(self, kind: str, e) -> str:
        return f"{self.fdef_name()}_{kind}{self.debug(e).line}"

    def run_sugar(self, fdef, e) -> Node:
        """Parse the nested function `fdef` here and call it with no arguments."""
        return self.call(self.built_now(fdef), [], {}, e)

    def hide(self, node: Node):
        """`node` stored under a hidden name; returns how a builder reads it."""
        if isinstance(node, Constant):
            return lambda b: node
        name = self.hidden_name(node)
        return lambda b: b.lookup(name, None)

    def hidden_name(self, node: Node) -> str:
        """Bind `node` to a fresh name user code cannot spell the same way."""
        count = getattr(self.fp, "hidden_count", 0)
        self.fp.hidden_count = count + 1
        name = f"_kt_seq{count}"
        self.vars[name] = node
        return name

    # -- iterating by position -----------------------------------------------------
    def iterates_by_position(self, it) -> bool:
        if not isinstance(it, gast.Call):
            return False
        if isinstance(it.func, gast.Attribute):
            return it.func.attr in _DICT_VIEWS and not it.args and not it.keywords
        if not isinstance(it.func, gast.Name):
            return False
        if it.func.id == sugar.ITERATE:
            return True
        fn = self.read(it.func.id, it)
        return isinstance(fn, Constant) and any(fn.value is f for f in (zip, enumerate, reversed))

    def indexed_for(self, s) -> None:
        it = s.iter
        if isinstance(it.func, gast.Name) and it.func.id == sugar.ITERATE:
            it = it.args[0]
        view = self.view(it, loop=s)
        if view is None:  # the loop is built, over iterators taken item by item
            return
        if isinstance(view.length, Constant):
            carried = self.carried(s, s.body, s.iter, target=s.target)
            items = (view.item(self, self.const(k, s)) for k in range(view.length.value))
            self.unrolled(s, carried, items)
        else:
            positions = self.apply(call_of(rt.indices, "indices"), view.length, node=s)
            self.positional_loop(s, positions, view)
        flag = getattr(s, "break_flag", None)
        for lengths in view.strict if not self.returned else ():  # after the body's effects
            broke = self.read(flag, s) if flag is not None else self.const(False, s)
            self.apply(prims.ZipStrictEnd(), broke, *lengths, node=it)

    def unpacked_view(self, e, targets) -> Node | None:
        """`a, b = d.values()` (`.items()`, `.keys()`): the view's items as a
        tuple, as `tuple(d.values())` reads them (unpacking reads a view
        whole, at once, so a tuple of its items is what the targets see);
        None where `e` is not a dict view or a target is not unpacking."""
        if self.view_kind(e) != "dict" or not all(
            isinstance(t, (gast.Tuple, gast.List)) for t in targets
        ):
            return None
        return self.run_sugar(sugar.collect(e, False, self.sugar_name("view", e), e), e)

    def view(self, it, loop=None) -> View | None:
        """`it` read by position. `loop`: the `for` over `it` itself, which a
        zip or enumerate of iterators only builds (`iterated_loop`: None)."""
        kind = self.view_kind(it)
        if kind is zip:
            return self.zip_view(it, loop)
        if kind is enumerate:
            return self.enumerate_view(it, loop)
        if kind is reversed:
            return self.reversed_view(it)
        if kind == "dict":
            return self.dict_view(it)
        return self.sequence_view(self.expr(it), it)

    def view_kind(self, it):
        """zip, enumerate, reversed, "dict" (a dict view) for the iterables
        read through a view of their own; None for a sequence (`sequence_view`)."""
        if not isinstance(it, gast.Call):
            return None
        if any(isinstance(a, gast.Starred) for a in it.args) or any(
            k.arg is None for k in it.keywords
        ):
            return None
        if self.iterates_by_position(it) and isinstance(it.func, gast.Attribute):
            return "dict"
        fn = None
        if isinstance(it.func, gast.Name):
            callee = self.read(it.func.id, it)
            fn = callee.value if isinstance(callee, Constant) else None
        if fn is reversed and (len(it.args) != 1 or it.keywords):
            return None
        return fn if any(fn is f for f in (zip, enumerate, reversed)) else None

    def iterated_loop(self, loop, fn, args: list[Node], it, strict: bool = False) -> None:
        """The `for` `loop` over `fn(*args)` (zip or enumerate, `strict`: zip's)
        where each iterable a host call made: an iterator maybe, maybe
        unbounded (`itertools.count()`), which Python takes from item by item
        (read by position, it would be taken whole first). `fn` runs when the
        program runs and the loop takes its items one by one (`ForEach`),
        stopping at a `break`. Where one iterable has a length (a list a
        function run as Python returned) the items are read by position, each
        keeping its gradient (`rt.zipped`); a strict zip of such then raises
        Python's ValueError for unequal lengths after the loop (unless it broke)."""
        parts = self.apply(prims.MakeTuple(), *args, node=it)
        items = self.apply(prims.Zipped(fn.__name__, strict), parts, node=it)
        self.for_loop(loop, [items], over_range=False)
        if strict and not self.returned:  # after the body's effects
            flag = getattr(loop, "break_flag", None)
            broke = self.read(flag, loop) if flag is not None else self.const(False, loop)
            sized = call_of(rt.sized_len, "sized_len")
            lengths = [self.apply(sized, a, node=it) for a in args]
            self.apply(prims.ZipStrictEnd(), broke, *lengths, node=it)

    def zip_view(self, it, loop=None) -> View | None:
        """`zip(...)` read by position, as long as its shortest iterable. With
        `strict=True` a loop over it runs that far, then raises Python's
        ValueError for unequal lengths (unless it broke): `View.strict`."""
        parts = self.zip_operands(it)
        strict = self.zip_strict(it)
        if loop is not None and all(self.made_outside_by_host(p, here=True) for p in parts):
            return self.iterated_loop(loop, zip, parts, it, strict)
        parts = self.zip_parts(parts, it)
        lengths = [p.length for p in parts]
        values = [n.value for n in lengths if isinstance(n, Constant)]
        if len(values) == len(lengths):
            length = self.const(min(values, default=0), it)
        else:
            length = self.apply(call_of(rt.zip_length, "zip_length"), *lengths, node=it)
        checks = tuple(c for p in parts for c in p.strict)
        if strict and not (len(values) == len(lengths) and len(set(values)) <= 1):
            checks += (lengths,)

        def item(b, i):
            return b.apply(prims.MakeTuple(), *[p.item(b, i) for p in parts], node=it)

        return View(length, item, checks)

    def zip_operands(self, it) -> list:
        """`zip`'s iterables: a view each, or the node of one known only when run."""
        parts: list = []
        for a in it.args:
            if self.view_kind(a) is not None:
                parts.append(self.view(a))
                continue
            seq = cells_of(self.expr(a))
            known = isinstance(seq, Constant) or self.static_items(seq) is not None
            parts.append(self.sequence_view(seq, a) if known else seq)
        return parts

    def zip_parts(self, parts: list, it) -> list[View]:
        """The views of `zip`'s iterables. One known only when run may be an
        iterator (`itertools.count()`): zip takes from it as many items as
        its other iterables have (`rt.zip_limit`), not all (it may be unbounded)."""
        runtime = [k for k, p in enumerate(parts) if not isinstance(p, View)]
        if not runtime:
            return parts
        sized = call_of(rt.sized_len, "sized_len")
        lengths = [
            p.length if isinstance(p, View) else self.apply(sized, p, node=it) for p in parts
        ]
        limit = self.apply(call_of(rt.zip_limit, "zip_limit"), *lengths, node=it)
        for k in runtime:
            pulls = self.made_outside_by_host(parts[k])
            items = self.apply(prims.IteratedUpTo(pulls), parts[k], limit, node=it.args[k])
            parts[k] = self.sequence_view(items, it.args[k], iterated=True)
        return parts

    def zip_strict(self, it) -> bool:
        if any(k.arg != "strict" for k in it.keywords):
            raise self.fp.error("zip() takes only the keyword argument strict", it)
        flags = [self.expr(k.value) for k in it.keywords]
        if not all(isinstance(f, Constant) for f in flags):
            raise self.fp.unsupported("zip(strict=...) with a value known only when run", it)
        return any(bool(f.value) for f in flags)

    def enumerate_view(self, it, loop=None) -> View | None:
        """`enumerate(seq, start)` read by position (`seq` read once); the
        `loop` over an iterator a host call made is `iterated_loop`'s."""
        if len(it.args) not in (1, 2) or any(k.arg != "start" for k in it.keywords):
            raise self.fp.error("enumerate() takes an iterable and an optional start", it)
        nested = self.view_kind(it.args[0]) is not None
        inner = self.view(it.args[0]) if nested else cells_of(self.expr(it.args[0]))
        start_e = it.args[1] if len(it.args) == 2 else next((k.value for k in it.keywords), None)
        start_node = self.expr(start_e) if start_e is not None else self.const(0, it)
        if not isinstance(inner, View):
            if loop is not None and self.made_outside_by_host(inner, here=True):
                return self.iterated_loop(loop, enumerate, [inner, start_node], it)
            inner = self.sequence_view(inner, it.args[0])
        start = self.hide(start_node)

        def item(b, i):
            index = b.apply(ops.BINARY["add"](), start(b), i, node=it)
            return b.apply(prims.MakeTuple(), index, inner.item(b, i), node=it)

        return View(inner.length, item, inner.strict)

    def reversed_view(self, it) -> View:
        inner = self.view(it.args[0])
        last = self.apply(ops.BINARY["sub"](), inner.length, self.const(1, it), node=it)
        read_last = self.hide(last)

        def item(b, i):
            return inner.item(b, b.apply(ops.BINARY["sub"](), read_last(b), i, node=it))

        return View(inner.length, item, inner.strict)

    def dict_view(self, it) -> View:
        """`d.items()`, `d.keys()`, `d.values()`: item `i` read by its key;
        the keys of a dict whose keys are known while parsing (`static_keys`)
        are constants, so each item is a read at a constant key (which reads
        no other item: `liveness`), the loop unrolled."""
        d = self.expr(it.func.value)
        known = static_keys(d)
        if known is not None:
            keys = Constant(known, d.debug)
        else:
            keys = self.apply(call_of(rt.dict_keys, "dict_keys"), d, node=it)
        read_d, read_keys = self.hide(d), self.hide(keys)
        kind = it.func.attr

        def item(b, i):
            if known is not None and isinstance(i, Constant):
                key = Constant(known[i.value], keys.debug)
            else:
                key = b.apply(prims.GetItem(), read_keys(b), i, node=it)
            if kind == "keys":
                return key
            value = b.apply(prims.GetItem(), read_d(b), key, node=it)
            return value if kind == "values" else b.apply(prims.MakeTuple(), key, value, node=it)

        return View(self.length_of(keys, it), item)

    def sequence_view(self, seq: Node, it, iterated: bool = False) -> View:
        seq = cells_of(seq)
        if isinstance(seq, Constant) and isinstance(seq.value, dict):
            seq = Constant(tuple(seq.value), seq.debug, seq.hint)  # iterating a dict: its keys
        elif not (iterated or isinstance(seq, Constant) or self.static_items(seq) is not None):
            iterated = prims.Iterated(self.made_outside_by_host(seq))
            seq = self.apply(iterated, seq, node=it)  # a dict's keys, an iterator's items
        read = self.hide(seq)

        def item(b, i):
            return b.apply(prims.GetItem(), read(b), i, node=it)

        return View(self.length_of(seq, it), item)

    def length_of(self, seq: Node, e) -> Node:
        """`len(seq)`: a constant when known while parsing."""
        if isinstance(seq, Constant) and isinstance(seq.value, (tuple, list, range, str)):
            return self.const(len(seq.value), e)
        if isinstance(maker_of(seq), (prims.MakeTuple, prims.MakeList)):
            return self.const(len(seq.args), e)
        return self.apply(call_of(rt.seq_len, "seq_len"), seq, node=e)

    def static_items(self, seq: Node) -> list[Node] | None:
        """The items of `seq` as nodes, when its length is known while parsing."""
        if isinstance(seq, Constant) and isinstance(seq.value, (tuple, list)):
            return [Constant(v, seq.debug) for v in seq.value]
        if isinstance(maker_of(seq), (prims.MakeTuple, prims.MakeList)):
            return list(seq.args)
        return None

    # -- builtins ---------------------------------------------------------------------
    def iterable_builtin(self, e) -> Node | None:
        """A call of a builtin in `_BUILTINS`, or None for any other call."""
        if not isinstance(e.func, gast.Name):
            return None
        if e.func.id == sugar.ITERATE:
            raise self.fp.unsupported(f"the name {sugar.ITERATE}", e)
        if e.func.id == sugar.AS_LIST:
            return self.apply(prims.AsSequence("list"), self.expr(e.args[0]), node=e)
        if e.func.id == sugar.FILTER:
            where = self.const(self.where(e), e)
            cond = self.expr(e.args[0])
            return self.apply(call_of(rt.static_filter, "static_filter"), cond, where, node=e)
        fn = self.read(e.func.id, e)
        if not isinstance(fn, Constant) or isinstance(fn.value, (dict, list)):
            return None
        try:
            method = _BUILTINS.get(fn.value)
        except TypeError:  # an unhashable value
            return None
        unpacks = any(isinstance(a, gast.Starred) for a in e.args) or any(
            k.arg is None for k in e.keywords
        )
        if method is None or unpacks:
            return None
        return getattr(self, method)(e, fn)

    def builtin_sum(self, e, fn) -> Node:
        kw = {k.arg: k.value for k in e.keywords}
        if len(e.args) not in (1, 2) or set(kw) - {"start"} or (len(e.args) == 2 and kw):
            raise self.fp.error("sum() takes an iterable and an optional start", e)
        start = e.args[1] if len(e.args) == 2 else kw.get("start", gast.Constant(0, None))
        if isinstance(start, (gast.Constant, gast.Name)):  # nothing runs before it is consumed
            consumed(e.args[0])
        return self.run_sugar(sugar.total(e.args[0], start, self.sugar_name("sum", e), e), e)

    def builtin_extreme(self, e, fn) -> Node:
        is_max = fn.value is max
        if e.keywords:
            raise self.fp.unsupported(f"{fn.value.__name__}() with key= or default=", e)
        if not e.args:
            raise self.fp.error(f"{fn.value.__name__}() expects at least one argument", e)
        it = e.args[0] if len(e.args) == 1 else gast.Tuple(elts=list(e.args), ctx=gast.Load())
        consumed(it)
        name = self.sugar_name(fn.value.__name__, e)
        return self.run_sugar(sugar.extreme(sugar.locate(it, e), is_max, name, e), e)

    def builtin_collect(self, e, fn) -> Node:
        as_list = fn.value is list
        if e.keywords or len(e.args) > 1:
            raise self.fp.error(f"{fn.value.__name__}() takes at most one argument", e)
        if not e.args:
            return self.apply(prims.MakeList() if as_list else prims.MakeTuple(), node=e)
        name = self.sugar_name(fn.value.__name__, e)
        consumed(e.args[0])
        return self.run_sugar(sugar.collect(e.args[0], as_list, name, e), e)

    def builtin_dict(self, e, fn) -> Node | None:
        """`dict(k=v, ...)`: the dict display `{"k": v, ...}`, so that its
        items are known one by one (an item no one reads gets no cotangent:
        `dfunctor.liveness`). `dict(...)` of other arguments is a library call."""
        if e.args:
            return None
        items = [x for k in e.keywords for x in (self.const(k.arg, e), self.expr(k.value))]
        return self.apply(prims.MakeDict(), *items, node=e)

    def builtin_truth(self, e, fn) -> Node:
        """`any(items)` / `all(items)`: Python's on Python values; over traced
        truth values, their traced reduction (`rt.truth_any`), as a value or
        an `if` test. Over a generator expression running host code, refused:
        Python stops at the first decisive item, and would not run the rest."""
        if e.keywords or len(e.args) != 1:
            raise self.fp.error(f"{fn.value.__name__}() takes exactly one argument", e)
        arg = e.args[0]
        if isinstance(arg, gast.GeneratorExp):
            consumed(arg)
            name = self.sugar_name(fn.value.__name__, e)
            items = self.run_sugar(sugar.collect(arg, False, name, e), e)
            maker = maker_of(items)
            if isinstance(maker, FuncGraph) and maker.may_call_host():
                raise self.fp.unsupported(
                    f"{fn.value.__name__}() of a generator expression running host code "
                    "(Python stops at the first decisive item, and runs none of the rest)",
                    e,
                )
        else:
            items = self.expr(arg)
        if isinstance(items, Constant):
            return self.call(fn, [items], {}, e)
        reduce = rt.truth_any if fn.value is any else rt.truth_all
        return self.apply(call_of(reduce, reduce.__name__), items, node=e)

    def builtin_iterator(self, e, fn) -> Node:
        raise self.fp.unsupported(
            f"{fn.value.__name__}(...) used as a value (a one-shot iterator): iterate it in "
            "a `for` or a comprehension, or make it a list with list(...)",
            e,
        )

    def builtin_scalar(self, e, fn) -> Node:
        """`abs`, `float`, `int`, `round`, `isinstance`: folded on constants;
        on a traced value `abs` is `jnp.abs`, `int` truncation (gradient 0),
        `round` `jnp.round`; `float` refused, as JAX's gradient refuses it."""
        args = [self.expr(a) for a in e.args]
        kwargs = {k.arg: self.expr(k.value) for k in e.keywords}
        value = fn.value
        if value is isinstance:
            return self.isinstance_call(fn, args, e)
        if all(isinstance(a, Constant) for a in [*args, *kwargs.values()]) or len(args) != 1:
            return self.call(fn, args, kwargs, e)
        if value in (int, float, bool) and not kwargs:
            # `int(jnp.ceil(alpha * x.shape[0]))`: Python's value (int's has no gradient)
            known = self.concrete(args[0], read_args=value is int)
            if known is not None and value is int:  # (`rt.to_int`: Python's when concrete)
                return self.apply(call_of(rt.to_int, "to_int"), known, node=e)
            if known is not None:
                return self.apply(prims.PythonValueCall(value, value.__name__), known, node=e)
        if value in (abs, round, float) and static_inputs([*args, *kwargs.values()]):
            return self.call(fn, args, kwargs, e)  # on a shape: Python's (`calls.call`)
        if kwargs:
            raise self.fp.unsupported(f"{value.__name__}() of a traced value", e)
        if value is float:  # JAX's gradient raises ConcretizationTypeError
            raise self.fp.unsupported(
                "float() of a traced value (its Python number is not known while tracing: "
                "use x.astype(float), or jax.lax.stop_gradient(x) for a constant)",
                e,
            )
        if value is int:
            return self.apply(call_of(rt.to_int, "to_int"), args[0], node=e)
        if value is bool:  # a traced truth value, as the test of an `if` is
            return self.apply(call_of(rt.to_bool, "to_bool"), args[0], node=e)
        target = jnp.abs if value is abs else jnp.round
        return self.call(self.fp.value_node(target, f"jnp.{target.__name__}", e), args, {}, e)

    def isinstance_call(self, fn, args: list[Node], e) -> Node:
        """`isinstance(x, cls)`: folded on constants; decided at run time for
        containers and arrays; refused for Python scalar types on a run-time
        value (a float argument is traced: it is an array there)."""
        if len(args) != 2:
            raise self.fp.error("isinstance() takes a value and a class", e)
        if all(isinstance(a, Constant) for a in args):
            return self.call(fn, args, {}, e)
        items = self.static_items(args[1]) or [args[1]]
        classes = [c.value for c in items if isinstance(c, Constant)]
        for c in list(classes):
            classes += list(c) if isinstance(c, tuple) else []
        if any(isinstance(c, type) and issubclass(c, (int, float, complex)) for c in classes):
            raise self.fp.unsupported(
                "isinstance() of a traced value against a Python number type", e
            )
        return self.apply(prims.LibraryCall(isinstance, "isinstance"), *args, node=e)


_BUILTINS = {
    sum: "builtin_sum",
    min: "builtin_extreme",
    max: "builtin_extreme",
    list: "builtin_collect",
    tuple: "builtin_collect",
    dict: "builtin_dict",
    zip: "builtin_iterator",
    enumerate: "builtin_iterator",
    reversed: "builtin_iterator",
    abs: "builtin_scalar",
    float: "builtin_scalar",
    int: "builtin_scalar",
    bool: "builtin_scalar",
    any: "builtin_truth",
    all: "builtin_truth",
    round: "builtin_scalar",
    isinstance: "builtin_scalar",
}


def _yields_closures_over_targets(e) -> bool:
    """Whether the element of comprehension `e` holds a lambda reading one of
    the names its `for` clauses bind."""
    targets = {n.id for g in e.generators for n in gast.walk(g.target) if isinstance(n, gast.Name)}
    return any(
        isinstance(n, gast.Lambda)
        and any(isinstance(m, gast.Name) and m.id in targets for m in gast.walk(n.body))
        for n in gast.walk(e.elt)
    )
