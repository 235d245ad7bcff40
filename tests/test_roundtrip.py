"""Round trip: the code k_transform generates computes what the program computes.

For every corpus program (`tests/corpus.py`) and each of its seeds:

(a) `kt.compile(fn)(*args)` agrees with `fn(*args)` run as plain Python;
(b) `jax.jit(kt.compile(fn), static_argnames=<n, k, flag present>)(*args)`
    agrees with the same plain Python run;

and once per program:

(c) `kt.get_ir(fn)` is a non-empty text naming the function, and
    `kt.get_source(fn)` is Python that compiles and is the same text each time.

Agreement means the same tree structure (tuples, lists) and, leaf by leaf, the
same shape and values within rtol=1e-5, atol=1e-6. Compiled and jitted
callables are built once per program and shared across seeds.
"""

import contextlib
import functools
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from tests.corpus import LEFT_OUT_NEEDS_OPS, PROGRAMS

RTOL = 1e-5
ATOL = 1e-6
CASE_TIME_LIMIT_S = 60

CASES = [
    pytest.param(prog, seed, id=f"{prog.name}-seed{seed}")
    for prog in PROGRAMS.values()
    for seed in prog.seeds
]
PROGRAM_PARAMS = [pytest.param(prog, id=prog.name) for prog in PROGRAMS.values()]

_compiled = {}
_jitted = {}


def compiled(prog):
    """`kt.compile(prog.fn)`, built once per program."""
    if prog.name not in _compiled:
        _compiled[prog.name] = kt.compile(prog.fn)
    return _compiled[prog.name]


def jitted(prog):
    """`jax.jit` of the compiled program, static in n, k and flag; built once per program."""
    if prog.name not in _jitted:
        _jitted[prog.name] = jax.jit(compiled(prog), static_argnames=prog.static_argnames)
    return _jitted[prog.name]


@contextlib.contextmanager
def time_limit(seconds):
    """Turn a hang in Python code (a loop that never ends) into a failing test.

    SIGALRM interrupts Python code only: an endless loop inside XLA still hangs.
    """

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a loop that never ends?")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@functools.cache
def expected(name, seed):
    """The oracle: the program run eagerly as plain Python."""
    prog = PROGRAMS[name]
    return prog.fn(*prog.args(seed))


def assert_same(actual, want):
    """Same tree structure; each leaf the same shape and close in value."""
    got_tree = jax.tree_util.tree_structure(actual)
    want_tree = jax.tree_util.tree_structure(want)
    assert got_tree == want_tree, f"structure {got_tree} != expected {want_tree}"
    got_leaves = jax.tree_util.tree_leaves(actual)
    want_leaves = jax.tree_util.tree_leaves(want)
    for index, (got, value) in enumerate(zip(got_leaves, want_leaves, strict=True)):
        got = np.asarray(got)
        value = np.asarray(value)
        assert got.shape == value.shape, f"leaf {index}: shape {got.shape} != {value.shape}"
        np.testing.assert_allclose(
            got.astype(np.float64),
            value.astype(np.float64),
            rtol=RTOL,
            atol=ATOL,
            err_msg=f"output leaf {index}",
        )


def test_corpus_needs_kt_ops():
    assert not LEFT_OUT_NEEDS_OPS, (
        f"k_transform.ops does not import, so these corpus programs are left out: "
        f"{LEFT_OUT_NEEDS_OPS}"
    )


@pytest.mark.parametrize(("prog", "seed"), CASES)
def test_compiled_matches_python(prog, seed):
    with time_limit(CASE_TIME_LIMIT_S):
        assert_same(compiled(prog)(*prog.args(seed)), expected(prog.name, seed))


@pytest.mark.parametrize(("prog", "seed"), CASES)
def test_jitted_matches_python(prog, seed):
    with time_limit(CASE_TIME_LIMIT_S):
        assert_same(jitted(prog)(*prog.args(seed)), expected(prog.name, seed))


@pytest.mark.parametrize("prog", PROGRAM_PARAMS)
def test_ir_and_source(prog):
    ir = kt.get_ir(prog.fn)
    assert isinstance(ir, str) and ir.strip()
    assert prog.fn.__name__.strip("<>") in ir

    source = kt.get_source(prog.fn)
    assert isinstance(source, str) and source.strip()
    compile(source, "<x>", "exec")
    assert kt.get_source(prog.fn) == source, "generated source is not deterministic"


# ---------------------------------------------------------------------------
# A long loop with a traced condition: must run as a loop, never as recursion
# ---------------------------------------------------------------------------

LONG_TRIPS = 10_000


def long_while(x):
    i = 0.0
    acc = jnp.zeros_like(x)
    while i < 10000.0 * jnp.ones(()):
        acc = acc + 0.5
        i = i + 1.0
    return acc + 2.0 * x, i


def test_long_while():
    x = jnp.asarray([0.5, -1.25, 2.0, 3.5], dtype=jnp.float32)
    want = (0.5 * LONG_TRIPS + 2.0 * x, float(LONG_TRIPS))
    fn = kt.compile(long_while)
    with time_limit(4 * CASE_TIME_LIMIT_S):
        assert_same(fn(x), want)
        assert_same(jax.jit(fn)(x), want)
