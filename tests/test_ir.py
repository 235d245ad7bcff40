"""The IR itself: verifier faults, free variables, printer stability."""

import pytest

import k_transform as kt
from k_transform import ops
from k_transform.control import prims as control
from k_transform.frontend.parser import parse
from k_transform.ir.nodes import Constant, FuncGraph
from k_transform.ir.printer import print_graph
from k_transform.ir.verify import VerifyError, verify
from k_transform.ops import python as prims

ADD = Constant(ops.Add(), hint="add")


def make_graph():
    g = FuncGraph("g")
    x = g.add_parameter("x")
    y = g.apply(ADD, x, x)
    g.output = y
    return g, x, y


def test_verifier_accepts_parsed_corpus_graph():
    def f(a, b):
        def inner(v):
            return v * a

        return inner(b) if a > 0 else b

    verify(parse(f))


def test_use_before_definition_is_caught():
    g, x, y = make_graph()
    z = g.apply(ADD, x, x)
    g.nodes.remove(z)
    g.nodes.insert(0, z)
    z.inputs[1] = y  # z now reads y, which is defined after it
    with pytest.raises(VerifyError, match="used before it is defined"):
        verify(g)


def test_free_variable_must_be_owned_by_an_enclosing_graph():
    g, x, _ = make_graph()
    other = FuncGraph("other")
    stranger = other.add_parameter("s")
    g.apply(ADD, x, stranger)
    with pytest.raises(VerifyError, match="not owned by an enclosing graph"):
        verify(g)


def test_control_primitive_arity_is_checked():
    g, x, _ = make_graph()
    branch = FuncGraph("branch", parent=g)
    branch.add_parameter("a")
    branch.output = branch.parameters[0]
    bad = FuncGraph("bad", parent=g)  # takes no parameter but is given one
    bad.output = Constant(0.0)
    switch = Constant(control.Switch(), hint="switch")
    g.output = g.apply(switch, x, Constant(branch), Constant(bad), x)
    with pytest.raises(VerifyError, match="takes 0 parameters, needs 1"):
        verify(g)


def test_closure_free_variables_are_listed():
    outer = FuncGraph("outer")
    a = outer.add_parameter("a")
    inner = FuncGraph("inner", parent=outer)
    v = inner.add_parameter("v")
    inner.output = inner.apply(ADD, v, a)
    outer.output = outer.apply(Constant(inner), a)
    assert inner.free_variables() == [a]
    assert outer.free_variables() == []
    verify(outer)


def test_printer_is_stable_and_readable():
    g, _, _ = make_graph()
    g.output = g.apply(Constant(prims.MakeTuple(), hint="t"), g.output, g.output)
    text = print_graph(g)
    assert text == print_graph(g)
    assert text.splitlines()[0].startswith("graph g(x)")
    assert "Add(x, x)" in text and "make_tuple(%1, %1)" in text


def test_get_ir_names_user_variables():
    def f(x):
        total = x * 2.0
        return total + 1.0

    text = kt.get_ir(f)
    assert "%total = Mul(x, 2.0)" in text
