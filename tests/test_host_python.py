"""Host Python runs when Python would run it (issue 26, item 1).

Without a jit every call of a gradient function runs the user's host code
again (a random generator draws, a counter advances), in program order, as
`jax.grad(f)(x)` does; under `kt.jit` it runs when the function is traced,
as under `jax.jit`; the transform itself runs none of it. A global or
closure name rebound between calls is read anew. Oracle: `jax.grad` /
`jax.jvp` of the same Python function, run the same number of times on a
generator reset to the same seed.
"""

import itertools
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([0.5, -1.0, 2.0])
rs = np.random.RandomState(0)
counter = itertools.count()
py_random = random.Random(0)
scale = 2.0


def reset():
    global rs, counter, py_random
    rs = np.random.RandomState(0)
    counter = itertools.count()
    py_random = random.Random(0)


def noisy(x):
    return jnp.sum(jnp.sin(x) * rs.randn(3))


def discards_a_draw(x):
    rs.randn(2)  # drawn and dropped: the next draw is the third number
    return jnp.sum(x * rs.randn(3))


def counts(x):
    k = next(counter)
    return jnp.sum(x * x) * (k + 1.0)


def stdlib_random(x):
    return jnp.sum(x * py_random.random())


def in_a_loop(x):
    s = 0.0
    for _ in range(3):
        s = s + jnp.sum(x * rs.randn(3))
    return s


def in_a_branch(x):
    if jnp.sum(x) > 0:
        return jnp.sum(jnp.cos(x) * rs.randn(3))
    return jnp.sum(x)


HOST_PROGRAMS = [noisy, discards_a_draw, counts, stdlib_random, in_a_loop, in_a_branch]


def three_calls(fn):
    reset()
    return [jax.tree_util.tree_map(np.asarray, fn()) for _ in range(3)]


@pytest.mark.parametrize("f", HOST_PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_grad_runs_host_code_once_per_call(f, mode):
    kt.set_mode(mode)
    try:
        g = kt.grad(f)
        ours = three_calls(lambda: g(X))
    finally:
        kt.set_mode("graph")
    theirs = three_calls(lambda: jax.grad(f)(X))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert not np.allclose(ours[0], ours[1])  # a second call draws again


@pytest.mark.parametrize("f", [noisy, counts, in_a_loop], ids=lambda f: f.__name__)
def test_jvp_and_value_and_grad_run_host_code_once_per_call(f):
    ours = three_calls(lambda: kt.jvp(f, X, X))
    theirs = three_calls(lambda: jax.jvp(f, (X,), (X,)))
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-6)
    ours = three_calls(lambda: kt.value_and_grad(f)(X))
    theirs = three_calls(lambda: jax.value_and_grad(f)(X))
    for (v1, g1), (v2, g2) in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(v1, v2, rtol=1e-6)
        np.testing.assert_allclose(g1, g2, rtol=1e-6)


def test_a_fresh_gradient_per_call_draws_like_jax():
    ours = three_calls(lambda: kt.grad(noisy)(X))
    theirs = three_calls(lambda: jax.grad(noisy)(X))
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-6)


def test_under_a_jit_host_code_runs_at_trace():
    reset()
    ours = kt.jit(kt.grad(noisy))
    first, second = np.asarray(ours(X)), np.asarray(ours(X))
    reset()
    theirs = jax.jit(jax.grad(noisy))
    np.testing.assert_allclose(first, theirs(X), rtol=1e-6)
    np.testing.assert_allclose(second, theirs(X), rtol=1e-6)  # frozen at trace, as JAX


def test_the_transform_runs_no_host_code():
    reset()
    before = rs.get_state()[2]
    g = kt.grad(discards_a_draw)
    kt.get_source(g)
    kt.get_ir(g)
    assert rs.get_state()[2] == before
    assert next(counter) == 0


def test_a_host_call_given_a_traced_array_is_refused():
    def f(x):
        return jnp.sum(rs.normal(x))  # numpy cannot take a JAX tracer; jax.grad fails too

    with pytest.raises(kt.KTransformError, match="normal"):
        kt.grad(f)(X)


def test_a_rebound_global_is_read_anew():
    global scale

    def helper(x):
        return x * scale

    def f(x):
        return jnp.sum(jnp.sin(helper(x)))

    g, jg = kt.grad(f), kt.jit(kt.grad(f))
    try:
        for value in (2.0, 3.0, 0.5):
            scale = value
            expected = jax.grad(f)(X)
            for ours in (g(X), jg(X), kt.grad(f)(X), kt.jvp(f, X, X)[1]):
                want = expected if ours.shape == X.shape else jnp.dot(expected, X)
                np.testing.assert_allclose(ours, want, rtol=1e-6)
    finally:
        scale = 2.0


def test_a_rebound_closure_cell_is_read_anew():
    def make():
        s = 1.0

        def f(x):
            return jnp.sum(x * x) * s

        def set_s(v):
            nonlocal s
            s = v

        return f, set_s

    f, set_s = make()
    g = kt.grad(f)
    np.testing.assert_allclose(g(X), jax.grad(f)(X))
    set_s(5.0)
    np.testing.assert_allclose(g(X), jax.grad(f)(X))
    np.testing.assert_allclose(g(X), 10.0 * X)


def test_the_clock_is_read_per_call():
    """`time.time()` is a host call: neither folded at transform time nor
    frozen. JAX reads the real clock itself, so the program reads a fake
    `time` whose clock ticks 1, 2, 3: read once per call, as Python reads it."""
    import time
    import types

    from k_transform.ops.host import has_host_effect, is_pure

    assert has_host_effect(time.time) and not is_pure(time.time)
    global clock
    clock = types.SimpleNamespace(time=itertools.count(1).__next__)

    def timed(x):
        return jnp.sum(x * x) * clock.time()

    g = kt.grad(timed)
    ours = [np.asarray(g(X)) for _ in range(3)]
    clock.time = itertools.count(1).__next__
    theirs = [np.asarray(jax.grad(timed)(X)) for _ in range(3)]
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-6)
    np.testing.assert_allclose(ours[2], 3 * 2 * X, rtol=1e-6)


def test_a_rebound_attribute_of_a_config_object_is_read_anew():
    """`cfg.scale` on a plain object (or a user module) is read when the line
    runs: rebinding it is seen by the next call, as by Python."""
    import types

    global cfg
    cfg = types.SimpleNamespace(scale=2.0)

    def f(x):
        return jnp.sum(jnp.sin(x * cfg.scale))

    g = kt.grad(f)
    np.testing.assert_allclose(g(X), jax.grad(f)(X), rtol=1e-6)
    cfg.scale = -0.5
    np.testing.assert_allclose(g(X), jax.grad(f)(X), rtol=1e-6)
    np.testing.assert_allclose(kt.jit(kt.grad(f))(X), jax.grad(f)(X), rtol=1e-6)


# -- host code inside Python control flow: as often as Python runs it --------
ROWS = jnp.stack([X * 0.1 * k for k in range(12)])  # 12 rows: past the parser's unrolling


def draws_over_rows(x):
    y = x
    for row in ROWS + x[0]:  # a loop over a traced array's rows
        y = jnp.tanh(y * rs.randn(3)) + row
    return jnp.sum(y)


def draws_over_a_long_range(x):
    y = x
    for _ in range(30):
        y = jnp.tanh(y * rs.randn(3))
    return jnp.sum(y)


@pytest.mark.parametrize("f", [draws_over_rows, draws_over_a_long_range], ids=lambda f: f.__name__)
def test_a_loop_calling_host_code_under_a_jit_runs_each_iteration(f):
    """Under a jit the body's draws run once per iteration at trace (JAX
    unrolls the Python loop there); a `lax` loop would trace the body once,
    reuse one draw for every iteration, and recompute its reverse with a
    second draw (both seen as wrong gradients)."""
    reset()
    ours = np.asarray(kt.jit(kt.grad(f))(X))
    ours_state = rs.randn()
    reset()
    theirs = np.asarray(jax.jit(jax.grad(f))(X))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
    assert ours_state == rs.randn()  # as many draws, in the same order
    ours = three_calls(lambda: kt.grad(f)(X))
    theirs = three_calls(lambda: jax.grad(f)(X))
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-5, atol=1e-7)


def prints_over_rows(x, sink):
    y = x
    for row in ROWS:
        print("step", file=sink)
        y = jnp.tanh(y) + row
        print("y", y[0], file=sink)  # a traced value under a jit: printed at run time
    return jnp.sum(y)


def test_print_in_a_loop_prints_per_iteration_and_per_call():
    """`print` is host code: a gradient function that prints runs per call,
    its loop's iterations are Python's, and it prints to the `file` given,
    traced values too (a debug callback under `kt.jit`)."""
    import io

    for name, run in [
        ("grad", lambda s: kt.grad(prints_over_rows)(X, s)),
        ("jvp", lambda s: kt.jvp(lambda x: prints_over_rows(x, s), X, X)),
    ]:
        sink = io.StringIO()
        run(sink)
        run(sink)
        theirs = io.StringIO()
        jax.grad(prints_over_rows)(X, theirs)
        jax.grad(prints_over_rows)(X, theirs)
        assert sink.getvalue().count("step") == theirs.getvalue().count("step") == 24, name
        assert sink.getvalue().count("y ") == 24, name
    sink = io.StringIO()
    jg = kt.jit(lambda x: kt.grad(prints_over_rows)(x, sink))
    jg(X)
    jg(X)
    jax.effects_barrier()
    assert sink.getvalue().count("step") == 12  # at trace, once, as under jax.jit
    assert sink.getvalue().count("y ") == 24  # the traced values: at each run


def test_host_code_under_a_traced_test_is_refused():
    """A traced `if`, `while` condition or range whose body calls host code:
    how often Python would run it is not known under a jit (JAX refuses the
    traced test too); eager calls run it as Python."""

    def branch(x):
        if jnp.sum(x) > 0:
            x = x * rs.randn(3)
        return jnp.sum(x)

    def until(x):
        while jnp.sum(x) < 10.0:
            x = x + abs(rs.randn(3))
        return jnp.sum(x)

    def ranged(x, n):
        for _ in range(n):
            x = x * rs.randn(3)
        return jnp.sum(x)

    for f, line in [(branch, "if jnp.sum(x) > 0:"), (until, "while jnp.sum(x) < 10.0:")]:
        reset()
        eager = np.asarray(kt.grad(f)(X))
        reset()
        np.testing.assert_allclose(eager, jax.grad(f)(X), rtol=1e-6)
        with pytest.raises(kt.KTransformError, match="host code") as err:
            kt.jit(kt.grad(f))(X)
        assert line in str(err.value)
    with pytest.raises(kt.KTransformError, match="host code") as err:
        kt.jit(kt.grad(ranged))(X, jnp.int32(3))
    assert "for _ in range(n):" in str(err.value)


def draws_in_nested_loops_and_a_while(x, sink):
    y = x
    for i in range(2):
        for _ in range(9):
            y = y + 0.05 * jnp.cos(y) * rs.randn(3)
        k = 0
        while k < 9:  # a while: its trips are Python's (the body draws)
            if rs.rand() > 0.5:  # a branch on a host value
                y = y * 1.01 + 0.1 * jnp.sin(y)
            else:
                y = y - 0.1 * jnp.cos(y) * (next(counter) % 3)
            print(i, k, file=sink)
            k = k + 1
    return jnp.sum(y**3)


def _printing_to(sink):
    return lambda x: draws_in_nested_loops_and_a_while(x, sink)


class Noisy:
    """A user's object whose method draws: run as Python (its K by tracing)."""

    def __init__(self, seed):
        self.gen = np.random.RandomState(seed)

    def step(self, y):
        return y + 0.1 * jnp.sin(y) * self.gen.randn(3)


def steps_of_an_object(x, obj):
    for _ in range(40):
        x = obj.step(x)
    return jnp.sum(x * x)


V = jnp.array([1.0, 0.5, -0.2])
SECOND = {
    "hvp": (lambda f: kt.hvp(f, X, V), lambda f: jax.jvp(jax.grad(f), (X,), (V,))[1]),
    "grad of a gradient": (
        lambda f: kt.grad(lambda x: jnp.sum(kt.grad(f)(x) ** 2))(X),
        lambda f: jax.grad(lambda x: jnp.sum(jax.grad(f)(x) ** 2))(X),
    ),
    "hessian": (lambda f: kt.hessian(f)(X), lambda f: jax.hessian(f)(X)),
    "hvp under kt.jit": (
        lambda f: kt.jit(lambda x: kt.hvp(f, x, V))(X),
        lambda f: jax.jit(lambda x: jax.jvp(jax.grad(f), (x,), (V,))[1])(X),
    ),
}
# what each second derivative is checked on (all of them on every kind would take long)
SECOND_ON = {
    "hvp": ("rows", "range", "nested", "object"),
    "grad of a gradient": ("range", "nested"),
    "hessian": ("rows",),
    "hvp under kt.jit": ("range", "object"),
}


@pytest.mark.parametrize("name", list(SECOND))
def test_a_second_derivative_of_a_loop_calling_host_code_draws_once(name):
    """A second derivative recomputes each iteration in its reverse loop; the
    recomputation replays the host calls' results recorded when the
    iteration ran (`runtime/host_log.py`), so each draw, `next` and `print`
    runs once, as under JAX. Before, the loop was refused, and a loop over a
    user object's method (not known as host code) silently drew again: an
    hvp of [0.76, 0.18, 0.82] where JAX gives [-0.04, -0.78, -0.20]."""
    import io

    ours, theirs = SECOND[name]
    programs = {"rows": draws_over_rows, "range": draws_over_a_long_range}
    for kind in SECOND_ON[name]:
        if kind in programs:
            reset()
            got, state = np.asarray(ours(programs[kind])), rs.randn()
            reset()
            want = theirs(programs[kind])
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=kind)
            assert state == rs.randn(), kind  # as many draws
        elif kind == "nested":
            seen = []
            for run in (ours, theirs):
                reset()
                sink = io.StringIO()
                got = np.asarray(run(_printing_to(sink)))
                seen.append((got, sink.getvalue(), rs.randn(), next(counter)))
            np.testing.assert_allclose(seen[0][0], seen[1][0], rtol=1e-4, atol=1e-5)
            assert seen[0][1:] == seen[1][1:]  # printed, drawn and counted as often
        else:
            got = ours(lambda x: steps_of_an_object(x, Noisy(3)))
            want = theirs(lambda x: steps_of_an_object(x, Noisy(3)))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=kind)


def test_apis_that_run_a_function_more_than_once_run_its_host_code_once():
    """A Jacobian (one vjp per output leaf, one jvp per input leaf), a vjp and
    its pullback, a jvp's aux values: each ran the user's function again
    (a second draw: `kt.hessian` of one draw gave another function's
    Hessian, `kt.vjp`'s pullback the gradient at another draw). Now one run
    records the host calls and the others replay them, as JAX runs it once."""

    def two_leaves(x):
        return {"a": jnp.sin(x) * rs.randn(3), "b": jnp.sum(x * x * rs.randn(3))}

    def with_aux(x):
        d = rs.randn(3)
        return jnp.sum(jnp.sin(x) * d), d

    cases = [
        (lambda: kt.hessian(noisy)(X), lambda: jax.hessian(noisy)(X)),
        (lambda: kt.jacrev(two_leaves)(X), lambda: jax.jacrev(two_leaves)(X)),
        (lambda: kt.jacfwd(two_leaves)(X), lambda: jax.jacfwd(two_leaves)(X)),
        (
            lambda: kt.jacrev(with_aux, has_aux=True)(X),
            lambda: jax.jacrev(with_aux, has_aux=True)(X),
        ),
        (
            lambda: kt.jacfwd(with_aux, has_aux=True)(X),
            lambda: jax.jacfwd(with_aux, has_aux=True)(X),
        ),
        (
            lambda: kt.jacrev(lambda x, y: two_leaves(x * y), grad_position=(0, 1))(X, X),
            lambda: jax.jacrev(lambda x, y: two_leaves(x * y), argnums=(0, 1))(X, X),
        ),
        (
            lambda: kt.jvp(with_aux, X, X, has_aux=True),
            lambda: jax.jvp(with_aux, (X,), (X,), has_aux=True),
        ),
    ]
    for ours, theirs in cases:
        reset()
        got, state = ours(), rs.randn()
        reset()
        want = theirs()
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), got, want)
        assert state == rs.randn()
    reset()
    out, pullback = kt.vjp(noisy, X)
    grads = [pullback(jnp.float32(1.0))[0], pullback(jnp.float32(2.0))[0]]
    state = rs.randn()
    reset()
    j_out, j_pullback = jax.vjp(noisy, X)
    np.testing.assert_allclose(out, j_out, rtol=1e-6)
    np.testing.assert_allclose(grads[0], j_pullback(jnp.float32(1.0))[0], rtol=1e-6)
    np.testing.assert_allclose(grads[1], j_pullback(jnp.float32(2.0))[0], rtol=1e-6)
    assert state == rs.randn()


def _doubled(d):
    try:  # refused by the parser: runs as Python (host code, per call)
        return d * 2.0
    finally:
        pass


class _TwiceTheGradient(kt.nn.Cell):
    def construct(self, x):
        return jnp.sin(x)

    def bprop(self, x, out, dout):
        return (_doubled(dout) * jnp.cos(x),)


def test_a_pullback_given_another_cotangent_runs_the_backward_again():
    """The runs of one API call replay only host calls given the same
    arguments: a backward part run as Python (here in a Cell's bprop) is
    given each pullback's cotangent. Replayed, the second pullback gave the
    first one's gradient (seen with odeint's adjoint under kt.vjp).
    Oracle: the bprop's closed form 2 u cos(x)."""
    net = _TwiceTheGradient()
    out, pullback = kt.vjp(net, X)
    for u in (jnp.ones(3), jnp.array([1.0, -2.0, 3.0]), jnp.array([0.5, 0.0, -1.0])):
        np.testing.assert_allclose(pullback(u)[0], 2.0 * u * jnp.cos(X), rtol=1e-6)
    np.testing.assert_allclose(kt.jacrev(net)(X), jnp.diag(2.0 * jnp.cos(X)), rtol=1e-6)


def test_a_replay_without_its_record_is_refused():
    """The run time's guard: an iteration run again whose host calls were
    not recorded (a stack rebuilt without its log) raises, never draws again."""
    from k_transform.runtime import host_log

    def body():
        return host_log.host(rs.randn)(3)

    with pytest.raises(kt.KTransformError, match="not recorded"):
        host_log.replay(None, body)
    with host_log.recording() as log:
        first = body()
    np.testing.assert_array_equal(host_log.replay(log, body), first)
    with pytest.raises(kt.KTransformError, match="fewer times"):
        host_log.replay(log, lambda: None)


_SEEN: list = []


def _record(v):
    _SEEN.append(np.asarray(v))


def debug_callback_in_a_loop(x):
    y = jnp.sin(x)
    for _ in range(2):
        jax.debug.callback(_record, y)
        y = y * 2.0
    return jnp.sum(y)


def debug_callback_in_python_code(x):
    try:
        y = jnp.cos(x)
    finally:
        pass
    jax.debug.callback(_record, y)
    return jnp.sum(y * x)


@pytest.mark.parametrize(
    "f", [debug_callback_in_a_loop, debug_callback_in_python_code], ids=lambda f: f.__name__
)
def test_a_debug_callback_runs_as_often_as_under_jax(f):
    """`jax.debug.callback`/`print` is an effect with no result: it runs each
    time JAX runs it (it was dropped as unused, parsed or run as Python), and
    sees the same values."""
    runs = {
        "grad": (kt.grad(f), jax.grad(f)),
        "jit": (kt.jit(kt.grad(f)), jax.jit(jax.grad(f))),
        "jvp": (lambda x: kt.jvp(f, x, X), lambda x: jax.jvp(f, (x,), (X,))),
    }
    for ours, theirs in runs.values():
        seen = []
        for fn in (ours, theirs):
            _SEEN.clear()
            for _ in range(2):
                jax.block_until_ready(fn(X))
            jax.effects_barrier()
            seen.append(list(_SEEN))
        assert len(seen[0]) == len(seen[1]) > 0
        for a, b in zip(*seen, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)


def draws_from_its_argument(x, gen):
    return jnp.sum(jnp.sin(x) * gen.randn(3))


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_a_generator_given_as_an_argument_draws_per_call(mode):
    """`rs.randn(3)` with `rs` an argument: its draw was traced once and
    frozen into every later call (the second call returned the first draw),
    or the compiled program refused the object with a bare TypeError."""
    kt.set_mode(mode)
    try:
        g = kt.grad(draws_from_its_argument)
        ours_rs, theirs_rs = np.random.RandomState(5), np.random.RandomState(5)
        ours = [np.asarray(g(X, ours_rs)) for _ in range(3)]
        theirs = [np.asarray(jax.grad(draws_from_its_argument)(X, theirs_rs)) for _ in range(3)]
    finally:
        kt.set_mode("graph")
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-6)
    assert ours_rs.randn() == theirs_rs.randn()
    with pytest.raises(TypeError):  # jax.jit refuses the object too
        jax.jit(jax.grad(draws_from_its_argument))(X, np.random.RandomState(5))
    with pytest.raises(kt.KTransformError, match="RandomState, which is not an array"):
        kt.jit(kt.grad(draws_from_its_argument))(X, np.random.RandomState(5))


def folded_dtype_test(x):
    scale = jnp.linspace(0.5, 1.5, 3)  # a JAX function of constants: an array, staged
    if jnp.issubdtype(jnp.float32, jnp.floating):  # a Python bool: folded
        return jnp.sum(jnp.sin(x) * scale)
    return jnp.sum(x)


def test_jax_functions_of_constants_fold_without_running_on_the_device():
    """A pure JAX function of constants is evaluated at transform time under
    a throwaway trace (`ops.fold._staged`): `jnp.issubdtype` still folds to
    a Python bool that picks the branch, while `jnp.linspace(...)`, an
    array, is left to the program and compiles nothing (run eagerly, each such call
    compiled an XLA program per shape). Counted: XLA compilations while the
    gradient is transformed and its code generated; oracle jax.grad."""
    compiles = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        g = kt.grad(folded_dtype_test)  # parses
        source = g.__kt_source__
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiles == []
    assert "jnp.sum(x)" not in source  # the branch was picked at transform time
    np.testing.assert_allclose(g(X), jax.grad(folded_dtype_test)(X), rtol=1e-6)


@pytest.mark.parametrize(
    "nested",
    [
        lambda f: kt.jacrev(kt.jacrev(f))(X),
        lambda f: kt.jacfwd(kt.jacrev(f))(X),
    ],
    ids=["jacrev of jacrev", "jacfwd of jacrev"],
)
def test_a_derivative_that_would_run_host_code_again_is_refused(nested):
    """Inside transformed code a Jacobian runs its function again for each
    row (`lowering._primal`, as a vjp does for its vjp function): a function drawing random
    numbers drew anew each time, and `kt.jacrev(kt.jacrev(f))` of
    `draws_over_rows` was 0.06 off JAX's Hessian with no error. Refused
    now; `kt.hessian` (reverse over a gradient, one run) still gives it."""
    reset()
    with pytest.raises(kt.KTransformError, match="calls host code"):
        nested(draws_over_rows)
    reset()
    got, state = np.asarray(kt.hessian(draws_over_rows)(X)), rs.randn()
    reset()
    np.testing.assert_allclose(got, jax.hessian(draws_over_rows)(X), rtol=1e-4, atol=1e-6)
    assert state == rs.randn()


def test_hessian_of_a_vector_function_is_refused_not_summed():
    """JAX's hessian of a vector function has one Hessian per output; ours
    was the Hessian of the outputs' sum, with no error."""

    def vector(w):
        return jnp.sin(w) * w[0]

    with pytest.raises(TypeError, match="scalar output"):
        kt.hessian(vector)(X)
    nested = kt.jacrev(kt.jacrev(vector))(X)  # what the message offers
    np.testing.assert_allclose(nested, jax.hessian(vector)(X), rtol=1e-5, atol=1e-6)
