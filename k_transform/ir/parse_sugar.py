"""Parser methods for iteration sugar and unpacking (mixed into `GraphBuilder`).

- Comprehensions and the builtins that consume an iterable (`sum`, `min`,
  `max`, `list`, `tuple`) become nested functions (`k_transform.ir.sugar`)
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
- Starred assignment (`h, *rest = xs`), star-unpacking in tuple and list
  literals (`(*a, b)`) and in calls (`f(*args, **kwargs)`).

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
from k_transform.ir import prims, sugar
from k_transform.ir.nodes import Apply, Constant, Node

_DICT_VIEWS = ("items", "keys", "values")


def _keys_not_in(d, names: tuple):
    """`for _kt_k in d if _kt_k not in names` (a comprehension generator)."""
    names_e = gast.Tuple(elts=[gast.Constant(value=n, kind=None) for n in names], ctx=gast.Load())
    test = gast.Compare(left=sugar.name("_kt_k"), ops=[gast.NotIn()], comparators=[names_e])
    return gast.comprehension(target=sugar.name("_kt_k", True), iter=d, ifs=[test], is_async=0)


class View:
    """An iterable read by position: `length` (a node) and `item(builder, i)`."""

    def __init__(self, length: Node, item):
        self.length = length
        self.item = item


def _maker(node: Node):
    return node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None


def _call_of(fn, name: str):
    return prims.LibraryCall(fn, f"_rt.{name}")


class SugarBuilder:
    """The methods of `GraphBuilder` for the constructs in the module docstring."""

    # -- comprehensions ----------------------------------------------------------
    def expr_ListComp(self, e) -> Node:
        return self.comprehension(e, "listcomp")

    def expr_GeneratorExp(self, e) -> Node:
        return self.comprehension(e, "genexpr")

    def expr_DictComp(self, e) -> Node:
        return self.comprehension(e, "dictcomp")

    def comprehension(self, e, kind: str) -> Node:
        if any(g.is_async for g in e.generators):
            raise self.fp.unsupported("an async comprehension", e)
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
        view = self.view(it)
        if isinstance(view.length, Constant):
            for k in range(view.length.value):
                self.assign(s.target, view.item(self, self.const(k, s)), s)
                self.block(s.body)
                if self.returned:
                    return
            return
        positions = self.apply(_call_of(rt.indices, "indices"), view.length, node=s)
        self.positional_loop(s, positions, view)

    def view(self, it) -> View:
        fn = None
        if isinstance(it, gast.Call) and isinstance(it.func, gast.Name):
            callee = self.read(it.func.id, it)
            fn = callee.value if isinstance(callee, Constant) else None
        if isinstance(it, gast.Call) and (
            any(isinstance(a, gast.Starred) for a in it.args)
            or any(k.arg is None for k in it.keywords)
        ):
            fn = None
        if fn is zip:
            return self.zip_view(it)
        if fn is enumerate:
            return self.enumerate_view(it)
        if fn is reversed and len(it.args) == 1 and not it.keywords:
            return self.reversed_view(it)
        if self.iterates_by_position(it) and isinstance(it.func, gast.Attribute):
            return self.dict_view(it)
        return self.sequence_view(self.expr(it), it)

    def zip_view(self, it) -> View:
        strict = self.zip_strict(it)
        parts = [self.view(a) for a in it.args]
        lengths = [p.length for p in parts]
        if all(isinstance(n, Constant) for n in lengths):
            values = [n.value for n in lengths]
            if strict and len(set(values)) > 1:
                raise self.fp.error(f"zip(strict=True) of lengths {values}", it)
            length = self.const(min(values, default=0), it)
        else:
            helper = _call_of(rt.zip_strict_length, "zip_strict_length") if strict else None
            helper = helper or _call_of(rt.zip_length, "zip_length")
            length = self.apply(helper, *lengths, node=it)

        def item(b, i):
            return b.apply(prims.MakeTuple(), *[p.item(b, i) for p in parts], node=it)

        return View(length, item)

    def zip_strict(self, it) -> bool:
        if any(k.arg != "strict" for k in it.keywords):
            raise self.fp.error("zip() takes only the keyword argument strict", it)
        flags = [self.expr(k.value) for k in it.keywords]
        if not all(isinstance(f, Constant) for f in flags):
            raise self.fp.unsupported("zip(strict=...) with a value known only when run", it)
        return any(bool(f.value) for f in flags)

    def enumerate_view(self, it) -> View:
        if len(it.args) not in (1, 2) or any(k.arg != "start" for k in it.keywords):
            raise self.fp.error("enumerate() takes an iterable and an optional start", it)
        inner = self.view(it.args[0])
        start_e = it.args[1] if len(it.args) == 2 else next((k.value for k in it.keywords), None)
        start = self.hide(self.expr(start_e) if start_e is not None else self.const(0, it))

        def item(b, i):
            index = b.apply(ops.BINARY["add"](), start(b), i, node=it)
            return b.apply(prims.MakeTuple(), index, inner.item(b, i), node=it)

        return View(inner.length, item)

    def reversed_view(self, it) -> View:
        inner = self.view(it.args[0])
        last = self.apply(ops.BINARY["sub"](), inner.length, self.const(1, it), node=it)
        read_last = self.hide(last)

        def item(b, i):
            return inner.item(b, b.apply(ops.BINARY["sub"](), read_last(b), i, node=it))

        return View(inner.length, item)

    def dict_view(self, it) -> View:
        d = self.expr(it.func.value)
        keys = self.apply(_call_of(rt.dict_keys, "dict_keys"), d, node=it)
        read_d, read_keys = self.hide(d), self.hide(keys)
        kind = it.func.attr

        def item(b, i):
            key = b.apply(prims.GetItem(), read_keys(b), i, node=it)
            if kind == "keys":
                return key
            value = b.apply(prims.GetItem(), read_d(b), key, node=it)
            return value if kind == "values" else b.apply(prims.MakeTuple(), key, value, node=it)

        return View(self.length_of(keys, it), item)

    def sequence_view(self, seq: Node, it) -> View:
        if isinstance(seq, Constant) and isinstance(seq.value, dict):
            seq = Constant(tuple(seq.value), seq.debug, seq.hint)  # iterating a dict: its keys
        read = self.hide(seq)

        def item(b, i):
            return b.apply(prims.GetItem(), read(b), i, node=it)

        return View(self.length_of(seq, it), item)

    def length_of(self, seq: Node, e) -> Node:
        """`len(seq)`: a constant when known while parsing."""
        if isinstance(seq, Constant) and isinstance(seq.value, (tuple, list, range, str)):
            return self.const(len(seq.value), e)
        if isinstance(_maker(seq), (prims.MakeTuple, prims.MakeList)):
            return self.const(len(seq.args), e)
        return self.apply(_call_of(rt.seq_len, "seq_len"), seq, node=e)

    def static_items(self, seq: Node) -> list[Node] | None:
        """The items of `seq` as nodes, when its length is known while parsing."""
        if isinstance(seq, Constant) and isinstance(seq.value, (tuple, list)):
            return [Constant(v, seq.debug) for v in seq.value]
        if isinstance(_maker(seq), (prims.MakeTuple, prims.MakeList)):
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
            return self.apply(_call_of(rt.static_filter, "static_filter"), cond, where, node=e)
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
        return self.run_sugar(sugar.total(e.args[0], start, self.sugar_name("sum", e), e), e)

    def builtin_extreme(self, e, fn) -> Node:
        is_max = fn.value is max
        if e.keywords:
            raise self.fp.unsupported(f"{fn.value.__name__}() with key= or default=", e)
        if not e.args:
            raise self.fp.error(f"{fn.value.__name__}() expects at least one argument", e)
        it = e.args[0] if len(e.args) == 1 else gast.Tuple(elts=list(e.args), ctx=gast.Load())
        name = self.sugar_name(fn.value.__name__, e)
        return self.run_sugar(sugar.extreme(sugar.locate(it, e), is_max, name, e), e)

    def builtin_collect(self, e, fn) -> Node:
        as_list = fn.value is list
        if e.keywords or len(e.args) > 1:
            raise self.fp.error(f"{fn.value.__name__}() takes at most one argument", e)
        if not e.args:
            return self.apply(prims.MakeList() if as_list else prims.MakeTuple(), node=e)
        name = self.sugar_name(fn.value.__name__, e)
        return self.run_sugar(sugar.collect(e.args[0], as_list, name, e), e)

    def builtin_iterator(self, e, fn) -> Node:
        raise self.fp.unsupported(
            f"{fn.value.__name__}(...) used as a value (a one-shot iterator): iterate it in "
            "a `for` or a comprehension, or make it a list with list(...)",
            e,
        )

    def builtin_scalar(self, e, fn) -> Node:
        """`abs`, `float`, `int`, `round`, `isinstance`: folded on constants;
        on a traced value `abs` is `jnp.abs`, `float` a cast to the float type
        (gradient 1), `int` truncation (gradient 0), `round` `jnp.round`."""
        args = [self.expr(a) for a in e.args]
        kwargs = {k.arg: self.expr(k.value) for k in e.keywords}
        value = fn.value
        if value is isinstance:
            return self.isinstance_call(fn, args, e)
        if all(isinstance(a, Constant) for a in [*args, *kwargs.values()]) or len(args) != 1:
            return self.call(fn, args, kwargs, e)
        if kwargs:
            raise self.fp.unsupported(f"{value.__name__}() of a traced value", e)
        if value is float:
            return self.apply(ops.Cast(), args[0], Constant(float, hint="float"), node=e)
        if value is int:
            return self.apply(_call_of(rt.to_int, "to_int"), args[0], node=e)
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

    # -- unpacking -------------------------------------------------------------------
    def unpacking_call(self, e) -> Node:
        """`f(*args, **kwargs)` with sequences and dicts known while parsing."""
        if isinstance(e.func, gast.Attribute):
            receiver = self.expr(e.func.value)
            if not isinstance(receiver, Constant):
                raise self.fp.unsupported("star-unpacking into a method call on a value", e)
            callee = self.attribute_of(receiver, e.func.attr, e.func)
        else:
            callee = self.expr(e.func)
        args: list[Node] = []
        tail = None  # a last `*seq` whose length is known only when run
        for k, a in enumerate(e.args):
            if not isinstance(a, gast.Starred):
                args.append(self.current(self.expr(a)))
                continue
            seq = self.expr(a.value)
            items = self.static_items(seq)
            if items is None and k == len(e.args) - 1:
                tail = seq
                continue
            if items is None:
                raise self.fp.unsupported(
                    "`f(*args)` with a sequence whose length is not known while parsing", e
                )
            args += [self.current(item) for item in items]
        kwargs: dict[str, Node] = {}
        unknown = None  # a last `**d` whose keys are known only when run
        for j, k in enumerate(e.keywords):
            if k.arg is not None:
                kwargs[k.arg] = self.current(self.expr(k.value))
                continue
            d = self.expr(k.value)
            pairs = self.static_dict(d, e, refuse=j < len(e.keywords) - 1)
            if pairs is None:
                unknown = d
            for key, value in pairs or ():
                if key in kwargs:
                    raise self.fp.error(f"got multiple values for keyword argument {key!r}", e)
                kwargs[key] = value
        if unknown is not None:
            filled = len(args) + (1 << 30 if tail is not None else 0)
            kwargs = self.keywords_from(callee, unknown, filled, kwargs, e)
        if tail is not None:
            return self.call_with_tail(callee, args, tail, kwargs, e)
        return self.call(callee, args, kwargs, e)

    def call_with_tail(self, callee: Node, args: list[Node], seq: Node, kwargs, e) -> Node:
        """`f(a, *seq)` for a user function `f` and a `seq` of unknown length:
        `seq[0], seq[1], ...` fill the remaining positional parameters (its
        length is checked when run) and the rest is `f`'s `*args`."""
        graph = self.callee_graph(callee)
        sig = getattr(graph, "signature", None)
        positional = sig.positional if sig is not None else getattr(graph, "param_names", None)
        if graph is None or positional is None:
            raise self.fp.unsupported(
                "`f(*args)` with a sequence whose length is not known while parsing, "
                "into a function that is not a user function",
                e,
            )
        n = max(len(positional) - len(args), 0)
        if any(k in positional[len(args) :] for k in kwargs):
            raise self.fp.unsupported("keywords for parameters `*args` may fill", e)
        items = [self.apply(prims.GetItem(), seq, self.const(j, e), node=e) for j in range(n)]
        star = sig.vararg is not None if sig is not None else False
        self.check_length(seq, n, e, exact=not star)
        fn = Constant(graph, self.debug(e), callee.hint)
        if not star:
            return self.apply(fn, *self.bind_call(graph, [*args, *items], kwargs, e), node=e)
        rest = gast.Subscript(
            value=sugar.name(self.hidden_name(seq)),
            slice=gast.Slice(lower=gast.Constant(value=n, kind=None), upper=None, step=None),
            ctx=gast.Load(),
        )
        fdef = sugar.collect(sugar.locate(rest, e), False, self.sugar_name("unpack", e), e)
        bound = self.bind_signature(graph, [*args, *items], kwargs, e, self.run_sugar(fdef, e))
        return self.apply(fn, *bound, node=e)

    def keywords_from(self, callee: Node, d: Node, filled: int, kwargs: dict, e) -> dict:
        """`f(**d)` for a user function `f` and a dict `d` whose keys are known
        only when run: each parameter `f` takes by keyword (after the `filled`
        positional ones) is `d[name] if name in d else <its default>`; the
        other keys go to `f`'s `**kwargs`, or, without one, are refused."""
        graph = self.callee_graph(callee)
        sig = getattr(graph, "signature", None)
        positional = sig.positional[sig.n_posonly :] if sig else getattr(graph, "param_names", [])
        if graph is None or positional is None:
            raise self.fp.unsupported(
                "`f(**kwargs)` with a dict whose keys are not known while parsing, "
                "into a function that is not a user function",
                e,
            )
        names = [*positional[max(filled - (sig.n_posonly if sig else 0), 0) :]]
        names = [n for n in [*names, *(sig.kwonly if sig else [])] if n not in kwargs]
        hidden = sugar.name(self.hidden_name(d))
        out = dict(kwargs)
        for n in names:
            key = gast.Constant(value=n, kind=None)
            read = gast.Subscript(value=hidden, slice=key, ctx=gast.Load())
            default = graph.defaults.get(n)
            if default is None:
                out[n] = self.expr(sugar.locate(read, e))
                continue
            found = gast.Compare(left=key, ops=[gast.In()], comparators=[hidden])
            other = sugar.name(self.hidden_name(default))
            pick = gast.IfExp(test=found, body=read, orelse=other)
            out[n] = self.expr(sugar.locate(pick, e))
        taken = self.const(tuple([*names, *kwargs]), e)
        if sig is not None and sig.kwarg is not None:
            rest = gast.DictComp(
                key=sugar.name("_kt_k"),
                value=gast.Subscript(value=hidden, slice=sugar.name("_kt_k"), ctx=gast.Load()),
                generators=[_keys_not_in(hidden, taken.value)],
            )
            out["**"] = self.expr(sugar.locate(rest, e))
            return out
        within = self.apply(_call_of(rt.keys_within, "keys_within"), d, taken, node=e)
        self.apply(prims.Assert(), within, self.const("unexpected keyword argument", e), node=e)
        return out

    def static_dict(self, d: Node, e, refuse: bool = True) -> list[tuple[str, Node]] | None:
        if isinstance(d, Constant) and isinstance(d.value, dict):
            return [(k, Constant(v, d.debug)) for k, v in d.value.items()]
        if isinstance(_maker(d), prims.MakeDict):
            keys, values = d.args[0::2], d.args[1::2]
            if all(isinstance(k, Constant) and isinstance(k.value, str) for k in keys):
                return [(k.value, v) for k, v in zip(keys, values, strict=True)]
        if not refuse:
            return None
        raise self.fp.unsupported(
            "`f(**kwargs)` with a dict whose keys are not known while parsing", e
        )

    def starred_literal(self, e, maker) -> Node:
        """`(*a, b)` / `[*a, b]`: runs of items, concatenated."""
        as_list = isinstance(maker, prims.MakeList)
        chunks: list[Node] = []
        run: list[Node] = []
        for x in e.elts:
            if not isinstance(x, gast.Starred):
                run.append(self.expr(x))
                continue
            seq = self.expr(x.value)
            items = self.static_items(seq)
            if items is not None:
                run += items
                continue
            chunks.append(self.apply(maker, *run, node=e))
            run = []
            hidden = sugar.name(self.hidden_name(seq))
            fdef = sugar.collect(sugar.locate(hidden, x), as_list, self.sugar_name("unpack", e), x)
            chunks.append(self.run_sugar(fdef, x))
        chunks.append(self.apply(maker, *run, node=e))
        result = chunks[0]
        for chunk in chunks[1:]:
            result = self.apply(ops.BINARY["add"](), result, chunk, node=e)
        return result

    def assign_starred(self, target, value: Node, s) -> None:
        """`a, *b, c = value`: `b` is a list, as in Python."""
        elts = target.elts
        k = next(j for j, x in enumerate(elts) if isinstance(x, gast.Starred))
        n_after = len(elts) - k - 1
        items = self.static_items(value)
        if items is not None:
            if len(items) < len(elts) - 1:
                raise self.fp.error(
                    f"not enough values to unpack (expected at least {len(elts) - 1}, "
                    f"got {len(items)})",
                    s,
                )
            middle = self.apply(prims.MakeList(), *items[k : len(items) - n_after], node=s)
            parts = [*items[:k], middle, *items[len(items) - n_after :]]
            for x, part in zip(elts, parts, strict=True):
                self.assign(x.value if isinstance(x, gast.Starred) else x, part, s)
            return
        self.check_length(value, len(elts) - 1, s)
        for j, x in enumerate(elts):
            if j != k:
                index = self.const(j if j < k else j - len(elts), s)
                self.assign(x, self.apply(prims.GetItem(), value, index, node=s), s)
        hidden = self.hidden_name(value)
        upper = gast.Constant(value=-n_after if n_after else None, kind=None)
        rest = gast.Subscript(
            value=sugar.name(hidden),
            slice=gast.Slice(lower=gast.Constant(value=k, kind=None), upper=upper, step=None),
            ctx=gast.Load(),
        )
        fdef = sugar.collect(sugar.locate(rest, s), True, self.sugar_name("unpack", s), s)
        self.assign(elts[k].value, self.run_sugar(fdef, s), s)

    def check_length(self, value: Node, n: int, s, exact: bool = False) -> None:
        """Assert (when run) that `value` has `n` items (`exact`) or at least `n`."""
        length = self.apply(_call_of(rt.seq_len, "seq_len"), value, node=s)
        op = ops.BINARY["eq" if exact else "ge"]()
        enough = self.apply(op, length, self.const(n, s), node=s)
        expected = f"{n}" if exact else f"at least {n}"
        message = self.const(f"wrong number of values to unpack (expected {expected})", s)
        self.apply(prims.Assert(), enough, message, node=s)


_BUILTINS = {
    sum: "builtin_sum",
    min: "builtin_extreme",
    max: "builtin_extreme",
    list: "builtin_collect",
    tuple: "builtin_collect",
    zip: "builtin_iterator",
    enumerate: "builtin_iterator",
    reversed: "builtin_iterator",
    abs: "builtin_scalar",
    float: "builtin_scalar",
    int: "builtin_scalar",
    round: "builtin_scalar",
    isinstance: "builtin_scalar",
}


# -- signatures: *args, **kwargs, keyword-only and positional-only parameters --------
def signature_params(args) -> list:
    """A def's parameters in graph order: positional, `*args`, keyword-only, `**kwargs`."""
    star = [args.vararg] if args.vararg else []
    stars = [args.kwarg] if args.kwarg else []
    return [*args.posonlyargs, *args.args, *star, *args.kwonlyargs, *stars]


class Signature:
    """How a call binds to a def with `*args`, `**kwargs`, keyword-only or
    positional-only parameters (`bound_self`: the first is `self`, fixed)."""

    def __init__(self, args, bound_self: bool):
        positional = [a.id for a in [*args.posonlyargs, *args.args]]
        self.n_posonly = len(args.posonlyargs) - bound_self if args.posonlyargs else 0
        self.positional = positional[1:] if bound_self else positional
        self.vararg = args.vararg.id if args.vararg else None
        self.kwonly = [a.id for a in args.kwonlyargs]
        self.kwarg = args.kwarg.id if args.kwarg else None


class SignatureBinding:
    """The `GraphBuilder` methods that bind calls to a `Signature`."""

    def signature_defaults(self, args) -> dict[str, Node]:
        """Defaults of positional and keyword-only parameters."""
        positional = [a.id for a in [*args.posonlyargs, *args.args]]
        pos_names = positional[len(positional) - len(args.defaults) :]
        kw_pairs = [(a.id, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
        if self.parent is None:
            values = self.fp.fn.__defaults__ or ()
            pairs = zip(pos_names, values, strict=True)
            out = {n: self.fp.value_node(v, n, args) for n, v in pairs}
            for n, v in (self.fp.fn.__kwdefaults__ or {}).items():
                out[n] = self.fp.value_node(v, n, args)
            return out
        out = {n: self.parent.expr(d) for n, d in zip(pos_names, args.defaults, strict=True)}
        out.update({n: self.parent.expr(d) for n, d in kw_pairs if d is not None})
        return out

    def bind_signature(self, graph, args: list[Node], kwargs: dict[str, Node], e, star=None):
        """Arguments for `graph`'s parameters; `star`: a tuple node given as
        the rest of the positional arguments (after `args`)."""
        sig: Signature = graph.signature
        name = graph.name
        if len(args) > len(sig.positional) and sig.vararg is None:
            raise self.fp.error(
                f"{name}() takes {len(sig.positional)} positional arguments but "
                f"{len(args)} were given",
                e,
            )
        bound = dict(zip(sig.positional, args, strict=False))
        extra: list[Node] = []
        star_star = kwargs.pop("**", None)
        for k, v in kwargs.items():
            if k in sig.positional[sig.n_posonly :] or k in sig.kwonly:
                if k in bound:
                    raise self.fp.error(f"{name}() got multiple values for argument {k!r}", e)
                bound[k] = v
            elif sig.kwarg is not None:
                extra += [self.const(k, e), v]
            else:
                raise self.fp.error(f"{name}() got an unexpected keyword argument {k!r}", e)
        out = [self.bound_or_default(graph, n, bound, e) for n in sig.positional]
        if sig.vararg is not None:
            rest = self.apply(prims.MakeTuple(), *args[len(sig.positional) :], node=e)
            if star is not None:
                rest = self.apply(ops.BINARY["add"](), rest, star, node=e)
            out.append(rest)
        out += [self.bound_or_default(graph, n, bound, e) for n in sig.kwonly]
        if sig.kwarg is not None:
            given = self.apply(prims.MakeDict(), *extra, node=e)
            out.append(given if star_star is None else self.merged(given, star_star, e))
        return out

    def merged(self, a: Node, b: Node, e) -> Node:
        """`{**a, **b}` (`a` built here, its keys constants)."""
        for key, value in zip(a.args[0::2], a.args[1::2], strict=True) if a.args else ():
            b = self.apply(prims.SetItem(), b, key, value, node=e)
        return b

    def bound_or_default(self, graph, name: str, bound: dict, e) -> Node:
        if name in bound:
            return bound[name]
        if name in graph.defaults:
            return graph.defaults[name]
        raise self.fp.error(f"{graph.name}() missing argument {name!r}", e)
