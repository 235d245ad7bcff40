"""Which items of a value may get a sensitivity: the masks of the DFunctor.

A zero cotangent is a number, not a symbol: times an infinite slope (`sqrt`'s
at 0, `log`'s second derivative at 0) it is NaN, where JAX, whose zeros are
symbolic, never multiplies. So K sends no cotangent to what the program does
not read: a result read only in part (`s, _ = stats(x)`, `d["s"]`,
`nt.total`) sends none to the other items, and what only they depend on is
not differentiated at all.

A *mask* says which items of a value are read: `((k, sub), ...)`, sorted
(`key_order`), with `sub` the mask of item `k`; None is the whole value, `()`
none of it. A key `k` is an index of a tuple or list (`t[0]`, `t[-1]`), a key
of a dict (`d["s"]`, `d.get("s")`), a `Field` (`nt.total`, an attribute) or
`EACH`, every item (a `for` over a sequence of unknown length).

`liveness(graph, starts, passes_to)` runs backwards over a graph from the
nodes whose sensitivities it starts with (the result's, with the mask its
caller reads) and gives each node that may get a sensitivity its mask:
- a container built of items (`builder_keys`: a tuple, list or NamedTuple,
  a dict of constant keys, `dict(k=v)`) passes on only the items read;
- an item read at a constant key (`x[k]`, `x.name`, `x.get(k)`) reads
  item `k` of `x`, with the reader's own mask below it;
- `d[k] = v` (a str key: a dict) is `v` for item `k`, the rest from `d`;
- `x[a::s]` (a >= 0, s >= 1) reads item `a + k * s` of `x` for its item `k`;
- `x._replace(f=v)` read by field name: field `f` from `v`, the rest from `x`;
- `lst.pop(p)` (a constant `p`) reads the items of `lst` that stay;
  `list(x)`, `tuple(x)`, `x.copy()` read item `k` of `x` for their item
  `k`, `a + b` of tuples or lists of fixed lengths (a comprehension's
  accumulator) item `k` of `a` or `k - len(a)` of `b`;
- a stack (K of a loop as IR, the `lax.scan` model's rows) is read item
  by item: a mask of a stack is that of each item pushed on it, so
  `stack_push`, `stack_pop`, `light` and `heavy` pass it on;
- anything else reads each input it sends a sensitivity (`passes_to`)
  whole, but a call of a graph or a `switch` only the items of it the
  callee's parameter may get one for (`arg_mask`: `x["s"]` of a dict `x`),
  and a loop only the items of its carries that the items read of its
  result, or an iteration, read (`fori_loop(0, n, body, (a, diag))[0]`).
The DFunctor makes K of a call, a `switch`'s branches or a library call for
the mask of its result (`DFunctor.used_items`) and differentiates no node
this finds no sensitivity for. A mask is an over-approximation: reading an
item that gets no cotangent costs time, dropping one that does is a silent
wrong gradient, so every construct not listed reads its inputs whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from k_transform.control import prims as stacks
from k_transform.control.prims import ControlPrimitive, LoopPrimitive
from k_transform.ir.nodes import Apply, Constant, Node, Parameter
from k_transform.ir.primitive import Primitive
from k_transform.ops import python as prims
from k_transform.ops.arithmetic import Add
from k_transform.runtime.python import hashable

Mask = tuple | None

# Masks nest at most this deep: below it an item is read whole (a recursion
# that reads `r(x)[0]` must not make K for ever deeper masks).
MAX_DEPTH = 4


@dataclass(frozen=True)
class Field:
    """`x.name` as a mask key: a NamedTuple's field, never a dict's key."""

    name: str


@dataclass(frozen=True)
class Each:
    """Every item of a sequence as a mask key: `((EACH, sub),)` reads each
    item with `sub` (what a `for` over a sequence whose length the graph
    does not fix reads of it); a container display reads so each of its
    items (`mask_of`), any other node the whole value."""


EACH = Each()


def key_order(key) -> tuple:
    """A total order of mask keys (ints by value, the others by text)."""
    if type(key) is int:
        return (0, key, "")
    return (1, 0, f"{type(key).__name__}:{key!r}")


def sorted_mask(items: dict) -> tuple:
    return tuple(sorted(items.items(), key=lambda item: key_order(item[0])))


def union(a: Mask, b: Mask) -> Mask:
    """The items `a` or `b` reads."""
    if a is None or b is None:
        return None
    items = dict(a)
    for k, sub in b:
        items[k] = union(items[k], sub) if k in items else sub
    return sorted_mask(items)


def depth(mask: Mask) -> int:
    return 0 if not mask else 1 + max(depth(sub) for _, sub in mask)


def item_of(key, mask: Mask) -> Mask:
    """The mask of a value whose item `key` is read with `mask`."""
    return ((key, mask if depth(mask) < MAX_DEPTH else None),)


def _maker(node: Node):
    return node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None


def builder_keys(node: Node) -> dict | None:
    """`{mask key: (key, position)}` where `node` builds its value of items
    (`position`: the input holding item `key`, the key a path into its
    gradient takes): a tuple, list or NamedTuple display (negative indices
    and field names too), a dict display of constant keys, `dict(k=v, ...)`.
    None for other nodes."""
    maker = _maker(node)
    if isinstance(maker, (prims.MakeTuple, prims.MakeList)):
        n = len(node.args)
        keys = {k: (k, k) for k in range(n)}
        keys.update({k - n: (k, k) for k in range(n)})
        return keys
    if isinstance(maker, prims.MakeNode) and issubclass(maker.cls, tuple):
        # A NamedTuple: its arguments are named (`NT(b=y, a=x)`, a field left
        # to its default given none), its items in the class's field order.
        fields = tuple(getattr(maker.cls, "_fields", ()))
        if not set(maker.names) <= set(fields):
            return None
        n, keys = len(fields), {}
        for position, name in enumerate(maker.names):
            k = fields.index(name)
            keys[k] = keys[k - n] = keys[Field(name)] = (k, position)
        return keys
    if isinstance(maker, prims.MakeDict):
        keys_in = node.args[0::2]
        if not all(isinstance(k, Constant) and hashable(k.value) for k in keys_in):
            return None
        keys = {}
        for j, k in enumerate(keys_in):  # `{"b": x, "b": y}` is `{"b": y}`
            keys[k.value] = (k.value, 2 * j + 1)
        return keys
    if isinstance(maker, prims.LibraryCall) and maker.fn is dict:
        if len(maker.kwnames) == len(node.args):  # `dict(s=a, t=b)`
            return {name: (name, k) for k, name in enumerate(maker.kwnames)}
    return None


def mask_of(node: Node, used: Mask) -> Mask:
    """`used` (the items of `node`'s value a reader reads) in the keys of the
    container `node` builds (`builder_keys`), or as it is where K of `node`
    can use it (`uses_mask`); None (all of it) where it reads every item
    whole, reads one the container does not have, or `node` cannot use it
    (a parameter can: the mask is what its callers need give it)."""
    if used is None:
        return None
    keys = builder_keys(node)
    if keys is None:  # (a parameter: what of it is read is what its callers give)
        return used if uses_mask(node) or isinstance(node, Parameter) else None
    items: dict = {}
    for k, sub in _each_item(used, keys):
        slot = keys.get(k) if hashable(k) else None
        if slot is None:  # (a method of the tuple, a key it lacks: read it whole)
            return None
        key, position = slot  # `t[-1]` is `t[n - 1]`; an item read twice is read whole
        items[key] = None if key in items else mask_of(node.args[position], sub)
    positions = {position for _, position in keys.values()}
    if len(items) == len(positions) and all(sub is None for sub in items.values()):
        return None
    return sorted_mask(items)


def _each_item(used: tuple, keys: dict) -> tuple:
    """`used` with `EACH` replaced by the key of each item of the container
    whose `builder_keys` are `keys`."""
    each = dict(used).get(EACH, ())
    if each == ():
        return used
    items = sorted_mask({key: each for key, _ in keys.values()})
    return union(items, tuple((k, sub) for k, sub in used if k != EACH))


def masked(node: Node, used: Mask) -> Iterator[tuple[Node, tuple, Mask]]:
    """`(item, path, mask)` for each part of `node` that `used` (a mask of
    `mask_of`) keeps: the path of keys into `node`'s gradient that reaches
    it, and the mask of it read (None: whole)."""
    keys = builder_keys(node) if used is not None else None
    if keys is None:
        yield node, (), used
        return
    for k, sub in used:
        for item, path, mask in masked(node.args[keys[k][1]], sub):
            yield item, (k, *path), mask


def read_key(node: Apply):
    """`(x, key, exact)` where `node` reads one item of `x` at a constant
    key: `x[k]` (an int or str), `x.name` (a `Field`), `x.get(k)`; else
    None. `exact`: the value of `node` is that item. K of `x.get(k)` (a
    library call's, `LibraryK`: `call` the method) returns it and a bprop
    that reads no other item of `x` either, at every order."""
    maker = _maker(node)
    if isinstance(maker, prims.GetAttr):
        return node.args[0], Field(maker.attr), True
    method = maker if isinstance(maker, prims.MethodCall) else getattr(maker, "call", None)
    is_get = isinstance(method, prims.MethodCall) and method.method == "get"
    if not (isinstance(maker, prims.GetItem) or is_get and not method.kwnames):
        return None
    index = node.args[1] if len(node.args) >= 2 else None
    if isinstance(index, Constant) and type(index.value) in (int, str):
        return node.args[0], index.value, maker is method or not is_get
    return None


def uses_mask(node: Node) -> bool:
    """Whether a mask of `node`'s value can leave something out: K of a call
    (of a graph, a value, a library function), of a `switch` or of a loop
    (its body, for the carries the mask and the iterations read) is made for
    it, a read of an item or a slice, `d[k] = v` or `x._replace(f=v)` passes
    it on."""
    if not isinstance(node, Apply):
        return False
    fn = _maker(node)
    if not isinstance(fn, Primitive):
        return True  # a graph, a run-time value, a `LibraryK`, a `DynamicK`
    if isinstance(fn, ControlPrimitive):
        return fn.k_of_graphs or isinstance(fn, LoopPrimitive)
    passes = read_key(node) is not None or _sets_key(node) is not None
    passes = passes or _read_slice(node) is not None or isinstance(fn, prims.ReplaceFields)
    passes = passes or _stack_parts(node, ()) is not None or _deleted(node, ()) is not None
    passes = passes or _item_parts(node, ()) is not None
    return prims.imports_jaxpr(fn) or passes


def _sets_key(node: Apply):
    """`(d, key, v)` for `d[key] = v` with a constant str key (a dict's)."""
    if not isinstance(_maker(node), prims.SetItem):
        return None
    d, key, v = node.args
    if isinstance(key, Constant) and type(key.value) is str:
        return d, key.value, v
    return None


def _read_slice(node: Apply):
    """`(start, step)` for `x[start::step]` (any stop) with a constant start
    >= 0 and step >= 1: its item `k` is item `start + k * step` of `x`."""
    if not isinstance(_maker(node), prims.GetItem) or len(node.args) != 2:
        return None
    index = node.args[1]
    if not (isinstance(index, Constant) and isinstance(index.value, slice)):
        return None
    start, step = index.value.start or 0, index.value.step or 1
    if type(start) is int and type(step) is int and start >= 0 and step >= 1:
        return start, step
    return None


def _of_slice(mask: Mask, start: int, step: int) -> Mask:
    """The items of `x` that `mask` (of `x[start::step]`) reads; None (all)
    where it reads one from the end (`[-1]`) or by another key."""
    if mask is None or not all(type(k) is int and k >= 0 for k, _ in mask):
        return None
    return sorted_mask({start + k * step: sub for k, sub in mask})


def _replaced(node: Apply, mask: Mask):
    """`[(0, mask of x), (1, mask of values)]` for `x._replace(**fields)`
    (`ReplaceFields`) read by field name only: the fields replaced come from
    `values`, the others from `x`; else None."""
    maker = _maker(node)
    if not isinstance(maker, prims.ReplaceFields) or maker.grad or mask is None:
        return None
    names = maker.names
    if not all(type(n) is str for n in names) or not all(isinstance(k, Field) for k, _ in mask):
        return None
    kept = tuple((k, sub) for k, sub in mask if k.name not in names)
    given = {names.index(k.name): sub for k, sub in mask if k.name in names}
    return [(0, kept), (1, sorted_mask(given))]


def _static_len(node: Node) -> int | None:
    """The length of the tuple or list `node` is, where the graph fixes it:
    a constant, a display, a concatenation or a copy of such; else None."""
    if isinstance(node, Constant):
        return len(node.value) if type(node.value) in (tuple, list) else None
    maker = _maker(node)
    if isinstance(maker, (prims.MakeTuple, prims.MakeList)):
        return len(node.args)
    if isinstance(maker, (prims.AsSequence, prims.Copy)):
        return _static_len(node.args[0])
    if isinstance(maker, Add):
        a, b = (_static_len(x) for x in node.args)
        return a + b if a is not None and b is not None else None
    return None


def _item_parts(node: Apply, mask: Mask) -> list[tuple[int, Mask]] | None:
    """`[(input, mask)]` where item `k` of `node`'s value is an item of an
    input: `list(x)`, `tuple(x)`, `x.copy()` (item `k` of `x`), `a + b` of a
    tuple or list `a` of `n` items and another (`a[k]` for `k < n`, else
    `b[k - n]`: a comprehension collects so). None for other nodes."""
    maker = _maker(node)
    if mask is None:
        return None
    if isinstance(maker, (prims.AsSequence, prims.Copy)):
        return [(0, mask)]
    if not isinstance(maker, Add) or _static_len(node) is None:
        return None
    n, total = _static_len(node.args[0]), _static_len(node)
    if not all(type(k) is int and -total <= k < total for k, _ in mask):
        return None
    first, second = {}, {}
    for k, sub in mask:
        k = k % total
        if k < n:
            first[k] = sub
        else:
            second[k - n] = sub
    return [(0, sorted_mask(first)), (1, sorted_mask(second))]


def _deleted(node: Apply, mask: Mask) -> Mask:
    """For `lst.pop(p)` (`list_delete(lst, p)`, a constant int `p`) read as
    `mask`: the items of `lst` it reads (its item `k` is item `k` of `lst`
    before `p`, `k + 1` after it); None (all) where `mask` reads one whose
    place depends on the list's length."""
    if not isinstance(_maker(node), prims.ListDelete) or mask is None:
        return None
    index = node.args[1]
    p = index.value if isinstance(index, Constant) else None
    if type(p) is not int or not all(type(k) is int for k, _ in mask):
        return None
    items = {}
    for k, sub in mask:
        if k >= 0 and p >= 0:
            items[k if k < p else k + 1] = sub
        elif k >= 0 and p == -1:  # (`lst[:-1]`)
            items[k] = sub
        elif k < 0 and p < 0:  # the last -p - 1 items stay last
            items[k if k > p else k - 1] = sub
        else:
            return None
    return sorted_mask(items)


def _stack_parts(node: Apply, mask: Mask) -> list[tuple[int, Mask]] | None:
    """`[(input, mask)]` where `node` moves items to or from a stack (K of a
    loop as IR, `control.k_loops`; the `lax.scan` model's rows): a mask of
    a stack is that of each of its items, so an item pushed, popped,
    stored `light` or rebuilt `heavy` passes its mask on; a popped
    `(item, rest)` reads the stack for both. None for other nodes."""
    maker = _maker(node)
    if mask is None:
        return None
    if isinstance(maker, (stacks.StackPush, stacks.StackPushOnce, stacks.StackLight)):
        return [(0, mask), (1, mask)][: len(node.args)]
    if isinstance(maker, stacks.StackHeavy):  # (`like`, a list grown, pairs from its start)
        return [(0, mask), (1, None if _from_end(mask) else mask)]
    if isinstance(maker, (stacks.StackRows, stacks.RowsStack)):
        return [(0, mask), *((k, None) for k in range(1, len(node.args)))]
    if isinstance(maker, stacks.StackPop) and all(k in (0, 1) for k, _ in mask):
        item, rest = dict(mask).get(0, ()), dict(mask).get(1, ())
        return [(0, union(item, rest)), (1, None)]
    return None


def _from_end(mask: Mask) -> bool:
    """Whether `mask` reads an item from the end (`x[-1]`), at any depth."""
    return bool(mask) and any(type(k) is int and k < 0 or _from_end(sub) for k, sub in mask)


def _whole(node: Apply, k: int, mask: Mask) -> Mask:
    return None


def input_masks(
    node: Apply,
    mask: Mask,
    passes_to: Callable[[Apply, int], bool],
    arg_mask: Callable[[Apply, int, Mask], Mask] = _whole,
) -> Iterator[tuple[Node, Mask]]:
    """The inputs of `node` that its sensitivity (of the items `mask` of its
    value) may reach, each with the mask of it that may get one (an input
    `k` `passes_to` sends one, of the items `arg_mask` says, given the
    mask of `node`: a callee's parameter read only in part, a loop's carry
    no iteration reads)."""
    yield node.fn, None
    keys = builder_keys(node) if mask is not None else None
    used = mask_of(node, mask) if keys is not None else None
    read, sets = read_key(node), _sets_key(node)
    sliced, replaced = _read_slice(node), _replaced(node, mask)
    stacked, deleted = _stack_parts(node, mask), _deleted(node, mask)
    items = _item_parts(node, mask)
    if used is not None:
        parts = [(keys[k][1], sub) for k, sub in used]
    elif read is not None:
        _, key, exact = read
        parts = [(0, item_of(key, mask if exact else None))]
        parts += [(k, None) for k in range(2, len(node.args))]
    elif sliced is not None:
        parts = [(0, _of_slice(mask, *sliced)), (1, None)]
    elif replaced is not None:
        parts = replaced
    elif stacked is not None:
        parts = stacked
    elif deleted is not None:
        parts = [(0, deleted), (1, None)]
    elif items is not None:
        parts = items
    elif sets is not None and mask is not None and all(type(k) is str for k, _ in mask):
        kept = tuple((k, sub) for k, sub in mask if k != sets[1])
        parts = [(0, kept), *((2, sub) for k, sub in mask if k == sets[1])]
    else:
        parts = [(k, arg_mask(node, k, mask)) for k in range(len(node.args))]
    for k, sub in parts:
        if passes_to(node, k):
            yield node.args[k], sub


def liveness(
    graph,
    starts: list[tuple[Node, Mask]],
    passes_to: Callable[[Apply, int], bool],
    active: Callable[[Node], bool] | None = None,
    arg_mask: Callable[[Apply, int, Mask], Mask] = _whole,
) -> tuple[dict[int, Mask], list[Node]]:
    """Where K of `graph` may send a sensitivity, from `starts` (nodes with
    the mask of them that gets one): each such node's mask, by id (`active`
    nodes only, if given, pass theirs on; `passes_to` and `arg_mask`: see
    `input_masks`), and the inputs and results the sensitivities come
    through, in the order met."""
    live: dict[int, Mask] = {}
    through: list[Node] = []

    def reach(node: Node, mask: Mask) -> None:
        if mask == ():
            return  # none of it read: no sensitivity
        live[id(node)] = union(live[id(node)], mask) if id(node) in live else mask
        through.append(node)

    for node, mask in starts:
        reach(node, mask)
    for node in reversed(graph.nodes):
        if id(node) not in live or (active is not None and not active(node)):
            continue
        for item, mask in input_masks(node, live[id(node)], passes_to, arg_mask):
            reach(item, mask)
    return live, through
