"""Parameters beyond plain positional ones: `*args`, `**kwargs`,
keyword-only and positional-only (mixed into `GraphBuilder`).

A def's graph takes its parameters in the order positional, `*args` (a
tuple), keyword-only, `**kwargs` (a dict); `graph.signature` says which is
which and `bind_signature` matches a call to them as Python does: extra
positional arguments pack into the `*args` tuple, unknown keywords into the
`**kwargs` dict, positional-only parameters refuse keywords.
"""

from __future__ import annotations

import inspect

from k_transform import ops
from k_transform.ir.nodes import Constant, Node
from k_transform.ops import python as prims


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


def signature_of(params: list[inspect.Parameter]) -> Signature:
    """The `Signature` of a function known by `inspect` only (one run as
    Python, `python_code`): its parameters in graph order."""
    sig = Signature.__new__(Signature)
    kind = inspect.Parameter
    positional = (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)
    sig.n_posonly = sum(p.kind is kind.POSITIONAL_ONLY for p in params)
    sig.positional = [p.name for p in params if p.kind in positional]
    sig.vararg = next((p.name for p in params if p.kind is kind.VAR_POSITIONAL), None)
    sig.kwonly = [p.name for p in params if p.kind is kind.KEYWORD_ONLY]
    sig.kwarg = next((p.name for p in params if p.kind is kind.VAR_KEYWORD), None)
    return sig


class SignatureBinding:
    """The `GraphBuilder` methods that bind calls to a `Signature`."""

    def signature_defaults(self, args) -> dict[str, Node]:
        """Defaults of positional and keyword-only parameters, and of a
        `**kwargs` parameter (no keywords): a call of the function as a
        value, which passes its arguments by position, leaves it out."""
        out = self._parameter_defaults(args)
        if args.kwarg is not None:
            out[args.kwarg.id] = Constant({}, self.debug(args), "no_keywords")
        return out

    def _parameter_defaults(self, args) -> dict[str, Node]:
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
