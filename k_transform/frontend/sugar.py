"""Syntax sugar written as plain Python functions the parser then parses.

Python 3 runs a comprehension as a nested function called at once; so does
k_transform. `[elt for t in it if c]` becomes

    def <listcomp>():
        _kt_acc = ()
        for t in _kt_iterate(it):
            if _kt_filter(c):
                _kt_acc = _kt_acc + (elt,)
        return _kt_as_list(_kt_acc)

(a generator expression returns the tuple; a dict comprehension assigns
`_kt_acc[key] = value`). `_kt_filter` refuses a condition traced when run
(the length would depend on data); `_kt_as_list` is `prims.AsSequence`:
tuples, not lists, are concatenated (their rules differentiate to any order).
Its variables stay inside it, as in Python; it
reads the enclosing variables as a closure does. `_kt_iterate(it)` marks a
`for` the parser turns into indexing (`GraphBuilder.indexed_for`): over a
sequence whose length is known when parsing the body is unrolled, otherwise
it is a `for_each` over the positions `0..len(it)-1`, which run time always
unrolls (a comprehension's result is a Python list: its length is static).

The builtins that consume an iterable (`sum`, `min`, `max`, `list`,
`tuple`) are the same kind of function, over the same `_kt_iterate`.
Every node gets the location of the expression it stands for.
"""

from __future__ import annotations

import gast

ITERATE = "_kt_iterate"  # the marker of a `for` that iterates by position
AS_LIST = "_kt_as_list"  # the marker of `prims.AsSequence("list")`
FILTER = "_kt_filter"  # the marker of a comprehension's `if`: must be concrete
_ACC = "_kt_acc"
_FIRST = "_kt_first"
_ITEM = "_kt_item"


def name(id_: str, store: bool = False) -> gast.Name:
    ctx = gast.Store() if store else gast.Load()
    return gast.Name(id=id_, ctx=ctx, annotation=None, type_comment=None)


def _assign(target, value) -> gast.Assign:
    return gast.Assign(targets=[target], value=value, type_comment=None)


def _add(left, right) -> gast.BinOp:
    return gast.BinOp(left=left, op=gast.Add(), right=right)


def _for(target, iterable, body) -> gast.For:
    it = gast.Call(func=name(ITERATE), args=[iterable], keywords=[])
    return gast.For(target=target, iter=it, body=body, orelse=[], type_comment=None)


def _function(fn_name: str, body: list, at, as_list: bool = False) -> gast.FunctionDef:
    args = gast.arguments(
        args=[],
        posonlyargs=[],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )
    fdef = gast.FunctionDef(
        name=fn_name,
        args=args,
        body=[*body, gast.Return(value=_as_list(name(_ACC)) if as_list else name(_ACC))],
        decorator_list=[],
        returns=None,
        type_comment=None,
        type_params=[],
    )
    return locate(fdef, at)


def _as_list(e) -> gast.Call:
    return gast.Call(func=name(AS_LIST), args=[e], keywords=[])


def locate(tree, at):
    """Give every node of `tree` without a location the location of `at`."""
    for n in gast.walk(tree):
        if "lineno" in getattr(n, "_attributes", ()) and getattr(n, "lineno", None) is None:
            gast.copy_location(n, at)
    return tree


def written_at(lines: list[str], at):
    """The statement `lines` (code k_transform writes) parsed, every node
    given the location of `at`, the user's expression it stands for (its own
    line numbers would name lines of the user's file it is not on)."""
    tree = gast.parse("\n".join(lines)).body[0]
    for n in gast.walk(tree):
        if "lineno" in getattr(n, "_attributes", ()):
            gast.copy_location(n, at)
            n.end_lineno = getattr(at, "end_lineno", None)
            n.end_col_offset = getattr(at, "end_col_offset", None)
    return tree


# -- comprehensions -------------------------------------------------------------
def comprehension(e, fn_name: str) -> gast.FunctionDef:
    """The nested function that computes the comprehension `e` (see above)."""
    if isinstance(e, (gast.ListComp, gast.GeneratorExp)):
        init, step = gast.Tuple(elts=[], ctx=gast.Load()), _append_tuple(e.elt)
    else:  # DictComp
        init = gast.Dict(keys=[], values=[])
        target = gast.Subscript(value=name(_ACC), slice=e.key, ctx=gast.Store())
        step = _assign(target, e.value)
    # `_kt_acc = _kt_acc` (a no-op) makes the accumulator a stored name, which
    # is what makes a loop carry it (a subscript assignment alone does not).
    body = [step, _assign(name(_ACC, True), name(_ACC))]
    for gen in reversed(e.generators):
        for cond in reversed(gen.ifs):
            test = gast.Call(func=name(FILTER), args=[cond], keywords=[])
            body = [gast.If(test=test, body=body, orelse=[])]
        body = [_for(gen.target, gen.iter, body)]
    as_list = isinstance(e, gast.ListComp)
    return _function(fn_name, [_assign(name(_ACC, True), init), *body], e, as_list)


def _append_tuple(elt) -> gast.Assign:
    return _assign(name(_ACC, True), _add(name(_ACC), gast.Tuple(elts=[elt], ctx=gast.Load())))


# -- builtins over an iterable -------------------------------------------------------
def collect(iterable, as_list: bool, fn_name: str, at) -> gast.FunctionDef:
    """`list(iterable)` / `tuple(iterable)`."""
    init = gast.Tuple(elts=[], ctx=gast.Load())
    loop = _for(name(_ITEM, True), iterable, [_append_tuple(name(_ITEM))])
    return _function(fn_name, [_assign(name(_ACC, True), init), loop], at, as_list)


def total(iterable, start, fn_name: str, at) -> gast.FunctionDef:
    """`sum(iterable, start)`: `((start + x0) + x1) + ...`, as Python adds."""
    step = _assign(name(_ACC, True), _add(name(_ACC), name(_ITEM)))
    loop = _for(name(_ITEM, True), iterable, [step])
    return _function(fn_name, [_assign(name(_ACC, True), start), loop], at)


def extreme(iterable, is_max: bool, fn_name: str, at) -> gast.FunctionDef:
    """`max(iterable)` / `min(iterable)`: the first of the largest (smallest)
    items, as Python's: an item replaces the best only if strictly better."""
    better = gast.Compare(
        left=name(_ITEM), ops=[gast.Gt() if is_max else gast.Lt()], comparators=[name(_ACC)]
    )
    take = _assign(name(_ACC, True), name(_ITEM))
    first = gast.If(
        test=name(_FIRST),
        body=[take, _assign(name(_FIRST, True), gast.Constant(value=False, kind=None))],
        orelse=[gast.If(test=better, body=[_assign(name(_ACC, True), name(_ITEM))], orelse=[])],
    )
    loop = _for(name(_ITEM, True), iterable, [first])
    init = _assign(name(_FIRST, True), gast.Constant(value=True, kind=None))
    return _function(fn_name, [init, loop], at)
