"""In-place changes through calls (`k_transform.frontend.effects`): each is
modelled (value and gradient equal JAX's on the same program) or refused with
a KTransformError naming the call and the user's line; a refused plain
function runs as Python, so its numbers are still Python's."""

import collections
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.frontend import python_code
from tests.refusals import line_of, strict_refusal


class Acc:
    def __init__(self):
        self.total = 0.0

    def add(self, v):
        self.total = self.total + v


class AccList:
    def __init__(self):
        self.items = []

    def add(self, v):
        self.items.append(v)


class AccBoth:
    def __init__(self):
        self.total = 0.0
        self.items = []

    def add(self, v):
        self.total = self.total + v
        self.items.append(v)


class Reader:
    def __init__(self):
        self.scale = 3.0

    def scaled(self, v):
        return self.scale * v


def obj_state(x):
    acc = Acc()
    for i in range(3):
        acc.add(x * (i + 1))
    return acc.total + x


def obj_list(x):
    acc = AccList()
    acc.add(x)
    acc.add(2 * x)
    return sum(acc.items) + x


def obj_both(x):
    acc = AccBoth()
    for i in range(3):
        acc.add(x * (i + 1))
    return acc.total + len(acc.items) * x + acc.items[-1]


def obj_reader(x):
    r = Reader()
    return r.scaled(x) + x


def set_total(o, v):
    o.total = v


def helper_writes_argument(x):
    acc = Acc()
    set_total(acc, x * 3)
    return acc.total


def dict_update_keyword(x):
    d = {"a": x, "b": x}
    d.update(a=x**2)
    return d["a"] + d["b"]


def dict_update_display(x):
    cfg = {"scale": 1.0}
    cfg.update({"scale": 3.0})
    return cfg["scale"] * x


def dict_ior(x):
    d = {"a": x}
    d |= {"a": x**2, "b": x}
    return d["a"] + d["b"]


def dict_or(x):
    d = {"a": x}
    e = d | {"b": x**3}
    return e["a"] + e["b"] + len(d)


def dict_update_in_loop(x):
    d = {"s": 0.0}
    for k in range(3):
        d.update(s=d["s"] + x * k)
    return d["s"]


def dict_setdefault(x):
    d = {}
    d.setdefault("a", x * 2)
    d.setdefault("a", x * 5)
    return d["a"]


def dict_update_variable(x):
    d = {"a": x}
    other = {"a": x**2}
    d.update(other)
    return d["a"]


def dict_popitem(x):
    d = {"a": x, "b": 2 * x}
    d.popitem()
    return sum(d.values())


def set_add(x):
    s = set()
    s.add("w")
    s.add("b")
    s.add("w")
    return x * len(s)


def deque_appendleft(x):
    q = collections.deque((1.0,))
    q.appendleft(2.0)
    return x * q[0]


def fill_diagonal(x):
    mask = np.ones((3, 3), bool)
    np.fill_diagonal(mask, False)
    return jnp.sum(jnp.where(mask, x, 0.0) ** 2)


def copyto(x):
    w = np.ones(3, np.float32)
    np.copyto(w, np.array([1.0, 2.0, 3.0], np.float32))
    return jnp.sum(w * x)


def ufunc_out(x):
    w = np.ones(3, np.float32)
    np.multiply(w, 4.0, out=w)
    return jnp.sum(w * x)


def ufunc_at(x):
    w = np.zeros(3, np.float32)
    np.add.at(w, [0, 0, 2], 1.0)
    return jnp.sum(w * x)


def put(x):
    w = np.ones(3, np.float32)
    np.put(w, [1], [7.0])
    return jnp.sum(w * x)


def array_fill(x):
    w = np.ones(3, np.float32)
    w.fill(2.0)
    return jnp.sum(w * x)


def array_sort(x):
    w = np.array([3.0, 1.0, 2.0], np.float32)
    w.sort()
    return jnp.sum(w * x)


X0 = jnp.array(0.7)
X3 = jnp.array([0.5, -1.0, 2.0])
X33 = jnp.arange(9.0).reshape(3, 3) / 4


def dict_pop(x):  # (a list's pop is modelled; a dict's runs as Python)
    d = {"a": x, "b": 2.0 * x}
    v = d.pop("a") + d.pop("c", x)
    return jnp.sum(v * d["b"]) * len(d)


# function, argument, the call the error names (None: modelled, no error)
CASES = [
    (obj_state, X0, "acc.add"),
    (obj_list, X0, "acc.add"),
    (obj_both, X0, "acc.add"),
    (obj_reader, X0, None),
    (helper_writes_argument, X0, None),  # see test_helper_writing_an_argument
    (dict_update_keyword, X0, None),
    (dict_update_display, X0, None),
    (dict_ior, X0, None),
    (dict_or, X0, None),
    (dict_update_in_loop, X0, None),
    (dict_setdefault, X0, "d.setdefault"),
    (dict_update_variable, X0, None),
    (dict_popitem, X0, "d.popitem"),
    (dict_pop, X0, "d.pop"),
    (set_add, X0, "s.add"),
    (deque_appendleft, X0, "q.appendleft"),
    (fill_diagonal, X33, "np.fill_diagonal"),
    (copyto, X3, "np.copyto"),
    (ufunc_out, X3, "np.multiply"),
    (ufunc_at, X3, "np.add.at"),
    (put, X3, "np.put"),
    (array_fill, X3, "w.fill"),
    (array_sort, X3, "w.sort"),
]
IDS = [c[0].__name__ for c in CASES]


@pytest.mark.parametrize("fn, x, call", CASES, ids=IDS)
def test_value_and_gradient_are_pythons_or_refused(fn, x, call):
    """Modelled, or run as Python (a construct the parser has no model of):
    Python's numbers; or refused outright (an in-place method on a local
    variable, as `lst.sort()`), naming the call."""
    try:
        value, grad = kt.value_and_grad(fn)(x)
    except kt.KTransformError as exc:
        assert call is not None and call in str(exc) and "test_mutation_effects.py" in str(exc)
        return
    ref_value, ref_grad = jax.value_and_grad(fn)(x)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6)


@pytest.mark.parametrize(
    "fn, x, call", [c for c in CASES if c[2]], ids=[c[0].__name__ for c in CASES if c[2]]
)
def test_strict_mode_names_the_call_and_line(fn, x, call):
    message = strict_refusal(fn, x)
    assert call in message
    assert __file__ in message or "test_mutation_effects.py" in message
    assert f"line {line_of(fn, call + '(')}" in message


@pytest.mark.parametrize(
    "fn", [dict_update_keyword, dict_ior, dict_or, dict_update_variable], ids=lambda f: f.__name__
)
def test_modelled_dict_changes_have_generated_source(fn):
    assert "def " + fn.__name__ in kt.get_source(fn)


def test_dict_update_seen_through_another_reference_runs_as_python():
    def aliased(x):
        d = {"a": x}
        e = d
        d.update(a=2 * x)
        return e["a"]

    # both names the function's own: run as Python, exactly (strict: refused)
    np.testing.assert_allclose(kt.grad(aliased)(X0), jax.grad(aliased)(X0), rtol=1e-6)
    assert "d.update" in strict_refusal(aliased, X0)


def test_helper_writing_an_argument_is_refused_where_it_writes():
    kt.set_strict(True)
    try:
        with pytest.raises(kt.KTransformError, match=r"obj.attr") as info:
            kt.value_and_grad(helper_writes_argument)(X0)
    finally:
        kt.set_strict(False)
    lines, first = inspect.getsourcelines(set_total)
    assert f"line {first + 1}" in str(info.value)
    assert "o.total = v" in str(info.value)


def test_a_function_run_as_python_changing_an_argument_runs_its_caller_as_python():
    def caller(x):
        acc = Acc()
        set_total(acc, x * 3)
        return acc.total

    value, grad = kt.value_and_grad(caller)(X0)
    np.testing.assert_allclose([value, grad], [2.1, 3.0], rtol=1e-6)
    reason = str(python_code.reason(caller))
    assert (
        "set_total(...)" in reason and "changes an argument" in reason and "o.total = v" in reason
    )


class Tally:
    def __init__(self, scale):
        self.scale = scale
        self.total = 0.0
        self.items = []

    def add(self, v):
        self.total = self.total + v * self.scale
        self.items.append(v)
        return self

    def half(self):
        return self.total * 0.5


def method_in_a_traced_branch(x):
    t = Tally(2.0)
    if jnp.sum(x) < 2.0:
        t.add(jnp.sin(x))  # its value unused: it acts on `t`
    return jnp.sum(t.total) * len(t.items)


def method_result_in_a_traced_branch(x):
    t = Tally(2.0)
    if x[0] < 2.0:
        t = t.add(jnp.sin(x))
    return jnp.sum(t.total)


def pure_method_in_a_traced_branch(x):
    t = Tally(2.0)
    t.total = x
    y = t.half() if jnp.sum(x) < 2.0 else x
    return jnp.sum(y)


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize(
    "fn",
    [method_in_a_traced_branch, method_result_in_a_traced_branch, pure_method_in_a_traced_branch],
    ids=lambda f: f.__name__,
)
def test_a_method_of_the_programs_object_inside_a_branch_is_its_own(fn, mode):
    """In a branch, the object is a parameter of the branch's graph: its
    methods were taken for array methods of the same name (`add`, MindSpore's
    Tensor.add), and a call whose value is unused was dropped (a silently
    wrong number, found by the fuzzer's `objects` class). What the branch
    receives decides now: the user's method, refused where it changes its
    object (the function then runs as Python)."""
    kt.set_mode(mode)
    try:
        value, grad = kt.value_and_grad(fn)(X3)
    finally:
        kt.set_mode("graph")
    ref_value, ref_grad = jax.value_and_grad(fn)(X3)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6)
