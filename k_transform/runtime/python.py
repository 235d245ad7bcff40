"""Python semantics at run time: operators, f-strings, item assignment, list
mutation made functional, `print`/`assert`, and the iteration helpers of
comprehensions, `zip`/`enumerate`/`reversed` and `for` over `.items()`.
"""

from __future__ import annotations

import builtins
import copy

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.errors import KTransformError
from k_transform.runtime import bounds, host_log
from k_transform.runtime.values import any_traced, describe, is_tracer, zeros_like_value


def hashable(value) -> bool:
    """Whether `value` can be a dict key or a set item."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


def not_(x):
    if is_tracer(x):
        return jnp.logical_not(x)
    return not x


class Formatted:
    """An f-string with traced values, printed later by `jax.debug.print`."""

    def __init__(self, template, values):
        self.template, self.values = template, values


def fstring(template: str, *values):
    if any_traced(values):
        return Formatted(template, values)
    return template.format(*values)


def setitem(x, index, value):
    """`x[index] = value` without mutation: arrays via `.at[].set`, else a copy."""
    if isinstance(x, tuple):
        raise TypeError("'tuple' object does not support item assignment")
    if isinstance(x, list) and is_tracer(index):
        raise KTransformError(
            "a list item assignment `lst[i] = v` with a traced index `i` (a list cannot be "
            "indexed by a traced value: use an array, or a static index)"
        )
    if isinstance(x, (list, dict)):
        new = x.copy()
        new[index] = value
        return new
    if isinstance(x, np.ndarray) and not is_tracer(value):
        new = x.copy()
        new[index] = value
        return new
    return jnp.asarray(x).at[index].set(value)


def array_index(x, index):
    """The index of `x[index]` for a list `index`: where `x` is an array, the
    integer or boolean array NumPy reads the list as (JAX refuses a list);
    for a list, tuple, dict or other object, `index` itself, as Python has it."""
    if not isinstance(index, list) or isinstance(x, (list, tuple, dict)):
        return index
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return index
    if any_traced(index):
        return jnp.asarray(index)
    return np.asarray(index, dtype=np.intp if not index else None)


def written(x, index, kept: bool):
    """Which items of `x[index]` an update `x.at[index]` applies: not one out
    of bounds (dropped, as JAX's scatter drops it), and with `kept` (a `set`)
    only the last of repeated indices, whose value stays. True for a list or
    a dict (every write applies)."""
    if isinstance(x, (list, dict, tuple)):
        return True
    shape = jnp.shape(x)
    inside = jnp.ones(shape, bool).at[index].get(mode="fill", fill_value=False)
    if not kept or jnp.ndim(inside) == 0:  # (a single item cannot be overwritten)
        return inside
    ids = jnp.arange(inside.size).reshape(inside.shape)
    last = jnp.full(shape, -1).at[index].set(ids)[index]
    return inside & (last == ids)


def _need_list(x, method: str):
    if not isinstance(x, list):
        raise KTransformError(
            f"`.{method}(...)` on a {type(x).__name__} is not supported by k_transform "
            "(only on lists)"
        )


def list_append(lst, value):
    """`lst.append(value)` without mutation: the new list."""
    _need_list(lst, "append")
    return [*lst, value]


def list_extend(lst, seq):
    """`lst.extend(seq)` without mutation (a list or tuple `seq`)."""
    _need_list(lst, "extend")
    if not isinstance(seq, (list, tuple)):
        raise KTransformError(
            f"list.extend of a {type(seq).__name__} is not supported (extend with a list or tuple)"
        )
    return [*lst, *seq]


def list_insert(lst, index, value):
    """`lst.insert(index, value)` without mutation."""
    _need_list(lst, "insert")
    new = list(lst)
    new.insert(index, value)
    return new


def list_delete(lst, index):
    """The list `lst.pop(index)` leaves, without mutation."""
    _need_list(lst, "pop")
    new = list(lst)
    new.pop(index)
    return new


def insert_position(n: int, index: int) -> int:
    """Where `insert(index, v)` puts `v` in a list of length `n`."""
    return min(max(index + n, 0), n) if index < 0 else min(index, n)


def pop_position(n: int, index: int) -> int:
    """The position `pop(index)` removes from a list of length `n`."""
    return index + n if index < 0 else index


def assigned_span(n: int, index: slice, n_out: int) -> slice:
    """Where the items `lst[index] = v` assigned sit in the new list, for a
    list of length `n` that has length `n_out` after: a simple slice
    (step 1) replaces `lst[start:stop]` by all of `v`, so the list may grow
    or shrink; an extended slice keeps the length and the positions (`index`
    itself: `indices` of `a[::-1]` gives a stop of -1, which as a slice
    bound would mean the last item)."""
    start, stop, step = index.indices(n)
    if step != 1:
        return index
    stop = max(stop, start)
    return slice(start, start + n_out - n + stop - start)


def copy_value(x):
    """`x.copy()`: a list, dict or numpy array copied; jax arrays are immutable."""
    if isinstance(x, (list, dict, np.ndarray)):
        return x.copy()
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return x
    raise TypeError(f"{type(x).__name__!r} object has no attribute 'copy'")


def to_list(x):
    """`list(x)`: a new list of the items (array rows) of `x`."""
    return list(x)


def to_tuple(x):
    """`tuple(x)`: a tuple of the items (array rows) of `x`."""
    return tuple(x)


def print_(*args, sep=" ", **kwargs):
    """`print(...)`: Python's print of concrete values; of traced ones, a
    debug callback that prints the values at run time, to the same `file`;
    once where a derivative runs the code again (`host_log`)."""
    return host_log.host(_print)(*args, sep=sep, **kwargs)


def _print(*args, sep=" ", **kwargs):
    if not any_traced(args) and not any(isinstance(a, Formatted) for a in args):
        builtins.print(*args, sep=sep, **kwargs)
        return None
    parts, values = [], []
    for a in args:
        if isinstance(a, Formatted):
            parts.append(a.template)
            values.extend(a.values)
        elif isinstance(a, str):
            parts.append(a.replace("{", "{{").replace("}", "}}"))
        else:
            parts.append("{}")
            values.append(a)
    template = (sep if sep is not None else " ").join(parts)
    show = lambda *concrete: builtins.print(template.format(*concrete), **kwargs)  # noqa: E731
    if any_traced(values):
        jax.debug.callback(show, *values)
    else:
        show(*values)
    return None


# -- raise and assert ----------------------------------------------------------
# A `raise` reached while a branch or loop body is traced for `lax` (or an
# `assert` of a traced condition) is raised when the program reaches it at run
# time: a host callback in the branch taken raises `RaisedAtRunTime`, whose
# message carries the user's exception, and `compiled.CompiledGraph` raises
# the user's exception in its place (under the user's own `jax.jit`, JAX's
# runtime error shows the message). Elsewhere Python raises it where it is.
NO_CAUSE = object()  # `raise exc` without `from`


class RaisedAtRunTime(Exception):
    """The error a jitted program's host callback raises for a `raise` it reached."""

    MARK = "k_transform raised at run time #"


_RAISED: dict[int, BaseException] = {}  # key -> the exception, as raised last
# The traced conditions of the `if` branches being traced, innermost last: a
# `raise` in a branch raises only where they hold, for under `jax.vmap` a
# `lax.cond` runs both branches (a `select`) and its callbacks with them.
_TAKEN: list = []


class taken_when:
    """`with taken_when(cond, negated):` the branch traced inside is taken
    where `cond` holds (where it does not, `negated`: the false branch; the
    negation is computed only if a `raise` needs it)."""

    def __init__(self, cond, negated: bool = False):
        self.cond, self.negated = cond, negated

    def __enter__(self):
        _TAKEN.append((self.cond, self.negated))

    def __exit__(self, *exc):
        _TAKEN.pop()
        return False


def assert_(cond, msg):
    if is_tracer(cond):
        failed = jnp.logical_not(jnp.all(cond))
        error = AssertionError(msg) if msg is not None else AssertionError()
        jax.lax.cond(failed, lambda: _raise_at_run_time(error, failed), lambda: None)
        return None
    if not bool(np.all(cond)):
        raise AssertionError(msg) if msg is not None else AssertionError()
    return None


def check_unpack(seq, n: int, at_least: bool = False) -> None:
    """`a, b = seq` (`n` targets; `at_least`: beside a starred one): Python's
    ValueError when `seq` has another number of items. Its length is a Python
    int, under a trace too (a list's, an array's first dimension)."""
    if hasattr(seq, "shape"):
        if len(seq.shape) == 0:
            raise TypeError("iteration over a 0-d array")
        got = seq.shape[0]
    else:
        try:
            got = len(seq)
        except TypeError:  # no length: reading its items says what is wrong
            return
    if got < n:
        expected = f"at least {n}" if at_least else str(n)
        raise ValueError(f"not enough values to unpack (expected {expected}, got {got})")
    if got > n and not at_least:
        raise ValueError(f"too many values to unpack (expected {n})")


def raise_(exc, cause=NO_CAUSE):
    """Python's `raise exc [from cause]`; see above for where it is reached
    inside a traced branch or loop body, or with traced values in its message."""
    exc = _exception(exc)
    if cause is not NO_CAUSE:
        exc.__cause__ = None if cause is None else _exception(cause)
        exc.__suppress_context__ = True
    if not host_log.tracing() and not any_traced(_formatted_values(exc)):
        raise _with_message(exc, ())
    _raise_at_run_time(exc)
    return None


def _exception(exc) -> BaseException:
    if isinstance(exc, type) and issubclass(exc, BaseException):
        return exc()
    if isinstance(exc, BaseException):
        return exc
    raise TypeError("exceptions must derive from BaseException")


def _formatted_values(exc) -> list:
    return [v for a in exc.args if isinstance(a, Formatted) for v in a.values]


def _with_message(exc, values) -> BaseException:
    """`exc` with its f-string arguments (`Formatted`) written with `values`."""
    if not any(isinstance(a, Formatted) for a in exc.args):
        return exc
    it, args = iter(values), []
    for a in exc.args:
        if isinstance(a, Formatted):
            concrete = [next(it) for _ in a.values] if values else a.values
            a = a.template.format(*concrete)
        args.append(a)
    exc.args = tuple(args)
    return exc


def _raise_at_run_time(exc, failed=True) -> None:
    """Raise `exc` when the program reaches this point with `failed` and the
    conditions of the branches around it holding."""
    key = len(_RAISED)
    _RAISED[key] = exc
    bounds.count_check()
    for cond, negated in _TAKEN:
        failed = jnp.logical_and(failed, jnp.logical_not(cond) if negated else cond)

    def raise_now(failed, *values):
        if not bool(np.all(failed)):
            return
        error = _with_message(copy.copy(exc), values)
        _RAISED[key] = error
        raise RaisedAtRunTime(f"{RaisedAtRunTime.MARK}{key}#: {type(error).__name__}: {error}")

    jax.debug.callback(raise_now, failed, *_formatted_values(exc))


bounds.QUIET_MARKS.append(RaisedAtRunTime.MARK)  # JAX's log of the callback dropped


def raised_at_run_time(error: BaseException) -> BaseException | None:
    """The user's exception that `error` (from running a jitted program) stands for."""
    text = str(error)
    at = text.find(RaisedAtRunTime.MARK)
    if at < 0:
        return None
    key = text[at + len(RaisedAtRunTime.MARK) :].split("#", 1)[0]
    return _RAISED.get(int(key)) if key.isdigit() else None


# -- iteration helpers (comprehensions, zip/enumerate/reversed, `for` over `.items()`) --
def indices(n) -> tuple:
    """`(0, 1, ..., n - 1)`: the positions a comprehension or `zip` visits."""
    if is_tracer(n):
        raise KTransformError("cannot iterate a traced number of times into a Python list")
    return tuple(range(int(n)))


def seq_len(seq) -> int:
    """`len(seq)`; the rows of an array (its static leading dimension)."""
    if isinstance(seq, dict):
        raise KTransformError(
            "iterating a dict here is not supported: iterate `d.keys()`, `d.values()` "
            "or `d.items()`"
        )
    if hasattr(seq, "shape") and jnp.ndim(seq) == 0:
        raise KTransformError("cannot iterate over a 0-d array")
    return len(seq)


def trip_count(start, stop, step):
    """`len(range(start, stop, step))`: a Python int when the bounds are static."""
    if any_traced((start, stop, step)):
        return jnp.maximum(0, (stop - start + step - jnp.sign(step)) // step)
    return len(range(int(start), int(stop), int(step)))


def each_count(seq):
    """How many times `for item in seq` runs (a dict iterates its keys)."""
    return seq.shape[0] if hasattr(seq, "shape") else len(seq)


def zip_length(*lengths) -> int:
    """How many items `zip` yields, given its iterables' lengths: the shortest."""
    return min(lengths)


def zip_strict_length(*lengths) -> int:
    """`zip(..., strict=True)`: the common length; unequal lengths raise
    Python's ValueError, with its message: the first iterable to end before
    the others, or the first one left with items once the first has ended."""
    n = min(lengths)
    ended = next(k for k, m in enumerate(lengths) if m == n)
    if ended > 0:
        raise ValueError(f"zip() argument {ended + 1} is shorter than {_arguments(ended)}")
    longer = next((k for k, m in enumerate(lengths) if m > n), None)
    if longer is not None:
        raise ValueError(f"zip() argument {longer + 1} is longer than {_arguments(longer)}")
    return n


def zip_strict_end(broke, *lengths) -> None:
    """After `for ... in zip(..., strict=True)` ran over the shortest of its
    iterables (`lengths`, Python ints): Python's ValueError for unequal
    lengths unless the loop broke first (`broke`, the break flag; traced:
    raised when the program runs without breaking). Under a jit it is
    raised when the program runs, after the prints of the loop's body, which
    print then (a traced value's print is a callback). A length None (an
    iterator's: the loop was over Python's strict zip, `zipped`) checks nothing."""
    if any(n is None for n in lengths):
        return None
    if len(set(lengths)) <= 1 or (not is_tracer(broke) and broke):
        return None
    try:
        zip_strict_length(*lengths)
    except ValueError as error:
        if not is_tracer(broke) and not is_tracer(jnp.zeros((), bool)):  # no trace: now
            raise
        _raise_at_run_time(error, jnp.logical_not(broke))
    return None


def _arguments(k: int) -> str:
    """Python's name for zip's first `k` arguments: "argument 1", "arguments 1-3"."""
    return "argument 1" if k == 1 else f"arguments 1-{k}"


def keys_within(d, names: tuple, fn: str = "function") -> bool:
    """True if every key of `d` is one of `names` (`fn(**d)` without
    `**kwargs`), else Python's TypeError naming the first other key."""
    for k in d:
        if k not in names:
            raise TypeError(f"{fn}() got an unexpected keyword argument {k!r}")
    return True


def keys_unfilled(d, names: tuple, fn: str = "function") -> bool:
    """True if no key of `d` is one of `names` (`fn(a, **d)`: the parameters
    given by position), else Python's TypeError naming the first such key."""
    for k in d:
        if k in names:
            raise TypeError(f"{fn}() got multiple values for argument {k!r}")
    return True


def check_star_args(seq, fn: str, given: int, names: tuple, required: int, star: bool) -> None:
    """`fn(<given positional arguments>, *seq)`: Python's TypeError when `seq`
    leaves one of the first `required` of the parameters `names` (those after
    the given ones) unfilled, or, `fn` taking no `*args`, holds more items
    than `names`. Its length is a Python int, under a trace too."""
    got = seq_len(seq)
    if got < required:
        missing = [repr(n) for n in names[got:required]]
        listing = missing[0] if len(missing) == 1 else ", ".join(missing[:-1])
        if len(missing) > 1:
            listing += ("," if len(missing) > 2 else "") + f" and {missing[-1]}"
        plural = "s" if len(missing) > 1 else ""
        raise TypeError(
            f"{fn}() missing {len(missing)} required positional argument{plural}: {listing}"
        )
    if not star and got > len(names):
        most = given + len(names)
        takes = str(most) if required == len(names) else f"from {given + required} to {most}"
        plural = "" if takes == "1" else "s"
        raise TypeError(
            f"{fn}() takes {takes} positional argument{plural} but {given + got} were given"
        )


def as_sequence(x, kind: str):
    """`list(x)` or `tuple(x)` (`kind`) of a tuple or list; None stays None."""
    if x is None:
        return None
    return list(x) if kind == "list" else tuple(x)


def iterated(seq, limit=None):
    """What `for item in seq` visits, read by position: a dict's keys, in
    order (`list(d)`, `[k for k in d]`), an iterator's items (`taken`, at
    most `limit`), else `seq` itself."""
    if isinstance(seq, dict):
        return tuple(seq)
    return taken(seq, limit) if is_iterator(seq) else seq


def iterated_grad(seq, d):
    """The gradient of `seq` from that of `iterated(seq)`: none for a dict
    (its keys have none) or an iterator (a host object), else `d`."""
    return None if isinstance(seq, dict) or is_iterator(seq) else d


# -- `for` over zip/enumerate of iterables a host call made (`parse_sugar.iterated_loop`) --
# Such an iterable is known only when the program runs: an iterator maybe (maybe
# unbounded: `itertools.count()`), or a sequence (a list a function run as Python
# returned). A sequence's items are read by position, so each keeps its gradient;
# only where every iterable is an iterator is the loop over Python's lazy zip.
def zipped(parts: tuple, kind: str = "zip", strict: bool = False):
    """What `for item in zip(*parts)` (`kind` "zip"; `strict`: zip's keyword) or
    `for item in enumerate(*parts)` (`kind` "enumerate": `parts` is `(seq,
    start)`) takes, where a host call made each iterable. Where one of them
    has a length: its items as a list, each a tuple of items read by
    position, which `zipped_grad` differentiates (an iterator among them gives
    as many items as the shortest sized one, taken now by a host call, as
    `zip_limit` takes; a dict gives its keys). Else (only iterators; or a
    strict zip with one): Python's zip or enumerate object, made by a host
    call, which the loop takes from item by item, stopping at its `break`
    (an iterator's items have no gradient)."""
    limit = _zipped_count(parts, kind, strict)
    if limit is None:
        fn, kwargs = (zip, {"strict": True} if strict else {}) if kind == "zip" else (enumerate, {})
        return host_log.host(fn)(*parts, **kwargs)
    if kind == "enumerate":
        seq, start = parts
        return [(start + k, item) for k, item in enumerate(iterated(seq, limit))]
    return list(zip(*(iterated(p, limit) for p in parts), strict=False))


def _zipped_count(parts: tuple, kind: str, strict: bool):
    """How many items `zipped` reads by position: None where it is Python's
    lazy object (no iterable has a length, or a strict zip has an iterator)."""
    seqs = parts[:1] if kind == "enumerate" else parts
    if not all(is_iterator(p) or _sized(p) for p in seqs):  # an iterable of its own kind
        return None
    lengths = [sized_len(p) for p in seqs]
    if all(n is None for n in lengths) or (strict and None in lengths):
        return None
    return zip_limit(*lengths)


def _sized(seq) -> bool:
    """Whether `seq` has a length (`sized_len`): not an iterable that only
    iterates (a class with `__iter__` alone)."""
    return (
        isinstance(seq, (tuple, list, dict))
        or hasattr(seq, "shape")
        or hasattr(type(seq), "__len__")
    )


def _zipped_slot(kind: str, j: int) -> int | None:
    """Where the items of `parts[j]` stand in an item of `zipped`: None for
    enumerate's start (the counter has no gradient)."""
    if kind == "enumerate":
        return 1 if j == 0 else None
    return j


def _gradable(part) -> bool:
    """An iterable whose items read by position have a gradient: a tuple,
    list or array (not an iterator, a dict's keys, a range or a str)."""
    return isinstance(part, (tuple, list)) or hasattr(part, "shape")


def zipped_grad(parts: tuple, d, kind: str = "zip", strict: bool = False) -> tuple:
    """The gradients of `parts` from the gradient `d` of `zipped(parts, kind,
    strict)`: item `k` of part `j` gets slot `j` of `d[k]` (none for an
    iterator, a dict, Python's lazy object, or `d` None: zero)."""
    from k_transform.runtime.rules import grad_item, items_grad

    n = _zipped_count(parts, kind, strict)
    grads = [None] * len(parts)
    if n is None or d is None:
        return tuple(grads)
    for j, part in enumerate(parts):
        slot = _zipped_slot(kind, j)
        if slot is None or not _gradable(part):
            continue
        douts = [grad_item(grad_item(d, k), slot) for k in range(n)]
        grads[j] = items_grad(part, tuple(range(n)), *douts) if n else zeros_like_value(part)
    return tuple(grads)


def zipped_grad_t(parts: tuple, dd, kind: str = "zip", strict: bool = False):
    """The transpose of `zipped_grad(parts, ., kind, strict)` at `dd` (the
    gradients of `parts`): shaped like `zipped`'s items, slot `j` of item `k`
    read from `dd[j][k]` (none where `zipped_grad` gives none)."""
    from k_transform.runtime.rules import grad_item

    n = _zipped_count(parts, kind, strict)
    if n is None or dd is None:
        return None
    width = 2 if kind == "enumerate" else len(parts)
    slots: list = [None] * width
    for j, part in enumerate(parts):
        slot = _zipped_slot(kind, j)
        if slot is not None and _gradable(part):
            slots[slot] = grad_item(dd, j)
    return [tuple(grad_item(s, k) for s in slots) for k in range(n)]


# -- iterators: one-shot host objects, advanced once, as Python advances them -----
# An iterator (`itertools.count(1)`, `iter(f, None)`, a generator) changes as it is
# read, and a derivative that runs the code again gets the same object back from
# the host call that made it (`host_log`): so its items are taken by host calls
# too, recorded once and replayed. A `for` takes them one at a time and stops at
# its `break` (`control.runtime.for_each`); a comprehension, `list(...)` or `zip`
# takes them all at once (`taken`), at most `ITEMS_CAP` (an unbounded one raises).
ITEMS_CAP = 1_000_000
_END = object()


def is_iterator(x) -> bool:
    """Whether `x` is an iterator (a one-shot object: `iter(x) is x`), not a
    sequence, array or dict (a tracer is none)."""
    return hasattr(type(x), "__next__") and hasattr(type(x), "__iter__") and not is_tracer(x)


def _next_or_end(it):
    return next(it, _END)


def next_item(it):
    """`(True, next(it))`, or `(False, None)` at its end: a host call."""
    item = host_log.host(_next_or_end)(it)
    return (False, None) if item is _END else (True, item)


def _take(it, limit):
    items = []
    while limit is None or len(items) < limit:
        item = next(it, _END)
        if item is _END:
            break
        items.append(item)
        if len(items) > ITEMS_CAP:
            raise KTransformError(
                f"an iterator ({type(it).__name__}) with more than {ITEMS_CAP} items made into "
                "a sequence (a comprehension, list(...), sum(...), zip or enumerate takes all "
                "its items): an unbounded one (itertools.count, cycle, repeat(x)) never ends, "
                "as in Python; iterate it in a `for` loop that breaks, or bound it "
                "(itertools.islice, zip with a sequence)"
            )
    return tuple(items)


def taken(it, limit=None) -> tuple:
    """The items of iterator `it` (at most `limit`), taken now: a host call."""
    return host_log.host(_take)(it, limit)


def sized_len(seq):
    """`len(seq)`, or None for an iterator (`zip` takes as many items from
    it as its other iterables have)."""
    if is_iterator(seq):
        return None
    return len(seq) if isinstance(seq, dict) else seq_len(seq)


def zip_limit(*lengths):
    """How many items `zip` takes from an iterator it reads: the least
    `lengths` of its other iterables (None: an iterator's), all where none
    is known."""
    known = [n for n in lengths if n is not None]
    if any(is_tracer(n) for n in known):
        raise KTransformError("zip of an iterator with an iterable of a traced length")
    return min(known) if known else None


def dict_keys(d) -> tuple:
    """The keys of a dict, in order (`for k, v in d.items()`)."""
    if not isinstance(d, dict):
        raise KTransformError(f"`.keys()`/`.values()`/`.items()` of a {type(d).__name__}")
    return tuple(d.keys())


def to_int(x):
    """`int(x)`: Python's for a concrete value, truncation to int32 for a traced one."""
    if is_tracer(x):
        return jnp.trunc(x).astype(jnp.int32)
    return int(x)


def to_bool(x):
    """`bool(x)`: Python's for a concrete value; for a traced array of one
    item, its traced truth value (an array of more raises, as Python's)."""
    if not is_tracer(x):
        return bool(x)
    if jnp.size(x) != 1:
        raise ValueError(
            "The truth value of an array with more than one element is ambiguous. "
            "Use a.any() or a.all()"
        )
    return jnp.reshape(x, ()).astype(bool)


def truth_any(items):
    """`any(items)`: Python's over concrete items; a traced reduction over
    the traced truth values once no concrete item decides it."""
    return _truth(items, True)


def truth_all(items):
    """`all(items)`: as `truth_any`."""
    return _truth(items, False)


def _truth(items, decisive: bool):
    items = list(items)
    if any(not is_tracer(v) and bool(v) is decisive for v in items):
        return decisive
    traced = [to_bool(v) for v in items if is_tracer(v)]
    if not traced:
        return not decisive
    return (jnp.any if decisive else jnp.all)(jnp.stack(traced))


def static_filter(cond, where: str = ""):
    """A comprehension's `if` filter: concrete, or the list's length would
    depend on data (which a traced program cannot give a Python list)."""
    if is_tracer(cond) or any_traced(cond):
        raise KTransformError(
            "a comprehension filter (`if` in a comprehension) on a traced value: the "
            f"result's length would depend on data{describe(where)}; use jnp.where"
        )
    return cond


def dict_display(*parts):
    """`{**a, "k": v, **b}`: a new dict of the parts' items in order, a later
    key's value replacing an earlier one's (at the earlier key's place); each
    part is read as the display reads a mapping (`keys()`, then its items)."""
    out = {}
    for part in parts:
        if not hasattr(part, "keys"):
            raise TypeError(f"'{type(part).__name__}' object is not a mapping")
        for key in part.keys():
            out[key] = part[key]
    return out


dict_display.__kt_library__ = True  # differentiated through its jaxpr (items moved)


def dict_updated(d: dict, *args, **kwargs) -> dict:
    """A plain dict `d` after `d.update(*args, **kwargs)`, as a new dict."""
    out = dict(d)
    out.update(*args, **kwargs)
    return out


def dict_or(d: dict, other):
    """`d | other` of a plain dict `d` (a new dict)."""
    return d | other


def dict_ior(d: dict, other) -> dict:
    """A plain dict `d` after `d |= other`, as a new dict."""
    out = dict(d)
    out |= other
    return out


dict_updated.__kt_library__ = dict_or.__kt_library__ = dict_ior.__kt_library__ = True


def sort_method(x, where: str, *args, **kwargs):
    """`x.sort(...)`: a JAX array's returns the sorted array; a list's and a
    NumPy array's sort in place, which k_transform does not model."""
    if isinstance(x, (list, np.ndarray)):
        raise KTransformError(
            f"the in-place method call `.sort(...)` of a {type(x).__name__} is not supported "
            f"by k_transform (use sorted(...) or jnp.sort(...)){describe(where)}"
        )
    return x.sort(*args, **kwargs)


sort_method.__kt_library__ = True  # differentiated through its jaxpr (`jnp.sort`'s)


def _given(inputs) -> tuple:
    """The inputs `kt.jvp(fn, inputs, v)` gives: a tuple's or list's items, else `inputs`."""
    return tuple(inputs) if type(inputs) in (tuple, list) else (inputs,)


def bind_inputs(inputs, fills: tuple, api: str, required: int) -> tuple:
    """The values of a function's positional parameters given `inputs` (see
    `ops.python.BindInputs`): its items, then from `fills` the defaults of
    the parameters they leave out (`fills[j]`: parameter `required + j`'s)."""
    items = _given(inputs)
    most = required + len(fills)
    if not required <= len(items) <= most:
        takes = f"{most} input" if required == most else f"{required} to {most} input"
        raise KTransformError(
            f"{api}: the function takes {takes}{'' if most == 1 else 's'} "
            f"but inputs holds {len(items)} values"
        )
    return (*items, *fills[len(items) - required :])


def bind_inputs_grad(inputs, fills: tuple, d: tuple, api: str, required: int) -> tuple:
    """`(d_inputs, d_fills)`, the gradients of `bind_inputs(inputs, fills)`'s
    arguments given `d`, that of its result: `inputs`' items' gradients in
    `inputs`' structure, a default's where it was used (else zeros)."""
    del api
    if d is None:  # a zero
        return zeros_like_value(inputs), zeros_like_value(fills)
    m = len(_given(inputs))
    d_inputs = type(inputs)(d[:m]) if type(inputs) in (tuple, list) else d[0]
    unused = tuple(zeros_like_value(f) for f in fills[: m - required])
    return d_inputs, (*unused, *d[m:])
