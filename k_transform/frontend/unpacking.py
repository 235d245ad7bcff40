"""Parser methods for unpacking (mixed into `GraphBuilder`).

Starred assignment (`h, *rest = xs`: `rest` is a list, as in Python), star
in tuple and list literals (`(*a, b)`), and calls `f(*args, **kwargs)`.
Sequences and dicts built in the graph (or constant) are spliced while
parsing; a last `*seq` or `**d` known only when run is read by position
or key into a user function's parameters (`call_with_tail`,
`keywords_from`), its length or keys checked when run. Anything else, e.g.
a run-time sequence unpacked into a library function, raises
`KTransformError` naming it.
"""

from __future__ import annotations

import functools

import gast

from k_transform import ops
from k_transform import runtime as rt
from k_transform.frontend import sugar
from k_transform.frontend.calls import called_here
from k_transform.frontend.parse_sugar import call_of, maker_of
from k_transform.ir.nodes import Constant, Node
from k_transform.ops import python as prims


def _keys_not_in(d, names: tuple):
    """`for _kt_k in d.keys() if _kt_k not in names` (a comprehension generator)."""
    names_e = gast.Tuple(elts=[gast.Constant(value=n, kind=None) for n in names], ctx=gast.Load())
    test = gast.Compare(left=sugar.name("_kt_k"), ops=[gast.NotIn()], comparators=[names_e])
    keys = gast.Call(
        func=gast.Attribute(value=d, attr="keys", ctx=gast.Load()), args=[], keywords=[]
    )
    return gast.comprehension(target=sugar.name("_kt_k", True), iter=keys, ifs=[test], is_async=0)


class UnpackingBuilder:
    """The methods of `GraphBuilder` for unpacking (see the module docstring)."""

    def unpacking_call(self, e) -> Node:
        """`f(*args, **kwargs)` with sequences and dicts known while parsing."""
        if isinstance(e.func, gast.Attribute):
            receiver = self.expr(e.func.value)
            if not isinstance(receiver, Constant):
                raise self.fp.unsupported("star-unpacking into a method call on a value", e)
            callee = self.attribute_of(receiver, e.func.attr, e.func)
        else:
            called_here(self, e.func)
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
        if tail is not None:
            return self.call_with_tail(callee, args, tail, kwargs, e, unknown)
        partial = isinstance(callee, Constant) and callee.value is functools.partial
        if unknown is not None and partial and args and not kwargs:  # partial(f, **kwargs)
            made = self.partial_closure(args[0], args[1:], {}, unknown, e)
            if made is not None:
                return made
        if unknown is not None:
            kwargs = self.keywords_from(callee, unknown, len(args), kwargs, e)
        return self.call(callee, args, kwargs, e)

    def call_with_tail(self, callee: Node, args: list[Node], seq: Node, kwargs, e, d=None) -> Node:
        """`f(a, *seq)` (and `f(a, *seq, **d)`) for a user function `f` and a
        `seq` of unknown length: each remaining positional parameter is
        `seq[j]` when `seq` is long enough, else its keyword from `d`, else its
        default (`positional_from`; lengths are static when run, so this is a
        Python choice there); the rest of `seq` is `f`'s `*args`."""
        graph = self.callee_graph(callee)
        sig = graph.signature if graph is not None else None
        positional = sig.positional if sig is not None else graph and graph.param_names
        if graph is None or positional is None:
            raise self.fp.unsupported(
                "`f(*args)` with a sequence whose length is not known while parsing, "
                "into a function that is not a user function",
                e,
            )
        names = list(positional[len(args) :])
        if any(k in names for k in kwargs):
            raise self.fp.unsupported("keywords for parameters `*args` may fill", e)
        items = [self.positional_from(seq, j, name, graph, d, e) for j, name in enumerate(names)]
        star = sig.vararg is not None if sig is not None else False
        optional = [graph.defaults.get(n) is not None or d is not None for n in names]
        required = optional.index(True) if True in optional else len(names)
        check = prims.CheckStarArgs(graph.name, len(args), tuple(names), required, star)
        self.apply(check, seq, node=e)
        if d is not None:
            kwargs = self.keywords_from(callee, d, len(positional), kwargs, e, tuple(names))
        fn = Constant(graph, self.debug(e), callee.hint)
        if not star:
            return self.apply(fn, *self.bind_call(graph, [*args, *items], kwargs, e), node=e)
        rest = gast.Subscript(
            value=sugar.name(self.hidden_name(seq)),
            slice=gast.Slice(
                lower=gast.Constant(value=len(names), kind=None), upper=None, step=None
            ),
            ctx=gast.Load(),
        )
        fdef = sugar.collect(sugar.locate(rest, e), False, self.sugar_name("unpack", e), e)
        bound = self.bind_signature(graph, [*args, *items], kwargs, e, self.run_sugar(fdef, e))
        return self.apply(fn, *bound, node=e)

    def positional_from(self, seq: Node, j: int, name: str, graph, d, e) -> Node:
        """Parameter `name` of a call `f(..., *seq, **d)`: `seq[j]` if `seq` has
        it, else `d[name]` if `d` has it, else the parameter's default."""
        default = graph.defaults.get(name)
        if d is None and default is None:
            return self.apply(prims.GetItem(), seq, self.const(j, e), node=e)  # length checked
        hidden_seq = sugar.name(self.hidden_name(seq))
        position = gast.Constant(value=j, kind=None)
        fallback = sugar.name(self.hidden_name(default)) if default is not None else None
        if d is not None:
            hidden, key = sugar.name(self.hidden_name(d)), gast.Constant(value=name, kind=None)
            read = gast.Subscript(value=hidden, slice=key, ctx=gast.Load())
            found = gast.Compare(left=key, ops=[gast.In()], comparators=[hidden])
            fallback = (
                read if fallback is None else gast.IfExp(test=found, body=read, orelse=fallback)
            )
        length = gast.Call(func=sugar.name("len"), args=[hidden_seq], keywords=[])
        has = gast.Compare(left=length, ops=[gast.Gt()], comparators=[position])
        item = gast.Subscript(value=hidden_seq, slice=position, ctx=gast.Load())
        return self.expr(sugar.locate(gast.IfExp(test=has, body=item, orelse=fallback), e))

    def keywords_from(
        self, callee: Node, d: Node, filled: int, kwargs: dict, e, consumed: tuple = ()
    ) -> dict:
        """`f(**d)` for a user function `f` and a dict `d` whose keys are known
        only when run: each parameter `f` takes by keyword (after the `filled`
        positional ones) is `d[name] if name in d else <its default>`; the
        other keys go to `f`'s `**kwargs`, or, without one, are refused."""
        graph = self.callee_graph(callee)
        sig = graph.signature if graph is not None else None
        positional = sig.positional[sig.n_posonly :] if sig else graph and graph.param_names
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
        taken = self.const(tuple([*consumed, *names, *kwargs]), e)
        if sig is not None and sig.kwarg is not None:
            given = positional[: max(filled - sig.n_posonly, 0)]  # (`consumed`: by `*seq` or `d`)
            filled_names = self.const(tuple(n for n in given if n not in consumed), e)
            name = self.const(graph.name, e)  # a key given by position too: Python's TypeError
            fine = self.apply(
                call_of(rt.keys_unfilled, "keys_unfilled"), d, filled_names, name, node=e
            )
            self.apply(
                prims.Assert(), fine, self.const("multiple values for an argument", e), node=e
            )
            rest = gast.DictComp(
                key=sugar.name("_kt_k"),
                value=gast.Subscript(value=hidden, slice=sugar.name("_kt_k"), ctx=gast.Load()),
                generators=[_keys_not_in(hidden, taken.value)],
            )
            out["**"] = self.expr(sugar.locate(rest, e))
            return out
        name = self.const(graph.name, e)  # Python's TypeError names the key
        within = self.apply(call_of(rt.keys_within, "keys_within"), d, taken, name, node=e)
        self.apply(prims.Assert(), within, self.const("unexpected keyword argument", e), node=e)
        return out

    def static_dict(self, d: Node, e, refuse: bool = True) -> list[tuple[str, Node]] | None:
        if isinstance(d, Constant) and isinstance(d.value, dict):
            return [(k, Constant(v, d.debug)) for k, v in d.value.items()]
        if isinstance(maker_of(d), prims.MakeDict):
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
        self.apply(prims.CheckUnpack(len(elts) - 1, at_least=True), value, node=s)
        for j, x in enumerate(elts):
            if j != k:
                index = self.const(j if j < k else j - len(elts), s)
                self.assign(x, self.apply(prims.GetItem(), value, index, node=s), s)
        # `list(value[k:-n_after])`: item `j` of the list is item `k + j` of
        # `value`, which liveness follows (a slice, then a copy), so an item
        # only `rest` holds gets no cotangent where `rest` is never read.
        rest = self.apply(prims.GetItem(), value, self.const(slice(k, -n_after or None), s), node=s)
        self.assign(elts[k].value, self.apply(prims.Copy("list"), rest, node=s), s)
