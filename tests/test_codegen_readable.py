"""Generated gradient source is deterministic and reads well.

- The same function gives byte-identical gradient source whatever was
  transformed before it, in this process or a fresh one (env keys and names
  come from the graph, not from process-global counters).
- Golden files (tests/golden/grad_*.py.txt, reviewed by reading) pin the gradient
  source of small programs with `if`, `while`, `for`, a closure, and a
  second derivative; each case also checks the gradient against jax.grad.
  Rewrite them after an intended change with KT_UPDATE_GOLDEN=1, then read
  the diff.
- `d_<name>` is the gradient of exactly the variable the generated code
  calls `<name>`.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

GOLDENS = pathlib.Path(__file__).parent / "golden"
ROOT = str(pathlib.Path(__file__).resolve().parent.parent)


# -- programs -------------------------------------------------------------------------


def branch(x):
    if x > 0.0:
        y = jnp.sin(x) * x
    else:
        y = jnp.cos(x)
    return y * 2.0


def loop_while(x):
    s = x
    while s < 10.0:
        s = s * 2.0 + jnp.sin(s)
    return s


def loop_for(x, xs):
    acc = x
    for v in xs:
        acc = acc * jnp.cos(v) + v * acc
    return acc


def closure(x, y):
    a = jnp.sin(x)

    def inner(t):
        return t * a + y

    return inner(x) * inner(y)


def second(x):
    s = x * x
    return jnp.sin(s) * x


def closure_loop(x):
    """The determinism subject: a closure and a while loop."""
    a = jnp.cos(x)

    def scale(t):
        return t * a

    s = x
    while s < 4.0:
        s = scale(s) + s * 2.0
    return scale(s)


def unrelated_1(x, y):
    a = jnp.exp(x) * y

    def g(t):
        return t * a

    return g(x) + g(y)


def unrelated_2(x):
    s = x
    for _ in range(2):
        s = jnp.tanh(s) * x
    return s


def unrelated_3(x):
    b = x * 3.0

    def h(t):
        return jnp.sin(t) + b

    return h(h(x))


# -- oracles: jax.grad of the same math, with the control flow taken as it runs --------


def _branch_taken(x):
    return jnp.sin(x) * x * 2.0 if x > 0.0 else jnp.cos(x) * 2.0


def _while_unrolled(x):
    trips, s = 0, float(x)
    while s < 10.0:
        s, trips = s * 2.0 + np.sin(s), trips + 1

    def unrolled(x):
        s = x
        for _ in range(trips):
            s = s * 2.0 + jnp.sin(s)
        return s

    return unrolled


CASES = {
    # name: (transformed gradient, its oracle, arguments)
    "if": (
        lambda: kt.grad(branch),
        lambda x: jax.grad(lambda v: _branch_taken_at(v, x))(x),
        (0.7,),
    ),
    "while": (lambda: kt.grad(loop_while), lambda x: jax.grad(_while_unrolled(x))(x), (1.3,)),
    "for": (lambda: kt.grad(loop_for), jax.grad(loop_for), (0.4, [0.5, -1.0, 2.0])),
    "closure": (
        lambda: kt.grad(closure, grad_position=(0, 1)),
        jax.grad(closure, (0, 1)),
        (0.5, 1.5),
    ),
    "grad_of_grad": (lambda: kt.grad(kt.grad(second)), jax.grad(jax.grad(second)), (0.8,)),
}


_DENSE = kt.nn.Dense(3, 2, activation="tanh", seed=0)


def dense_mse(x, t):
    """A Dense layer, tanh and a mean squared error."""
    return jnp.mean((_DENSE(x) - t) ** 2)


def _dense_mse_oracle(x, t):
    def loss(x, w, b):
        return jnp.mean((jnp.tanh(x @ w.T + b) - t) ** 2)

    d_x, d_w, d_b = jax.grad(loss, (0, 1, 2))(x, _DENSE.weight.data, _DENSE.bias.data)
    return d_x, (d_w, d_b)


def for_if(x, xs):
    for v in xs:
        if v > 0.0:
            x = x * v
    return x


CASES["dense"] = (
    lambda: kt.grad(dense_mse, weights=_DENSE.trainable_params()),
    _dense_mse_oracle,
    (np.linspace(-1.0, 1.0, 12).reshape(4, 3), np.full((4, 2), 0.25)),
)
CASES["for_if"] = (lambda: kt.grad(for_if), jax.grad(for_if), (0.4, [0.5, -1.0, 2.0]))


def _branch_taken_at(v, x):
    """The branch `branch` takes at the point `x`, as a function of `v`."""
    return jnp.sin(v) * v * 2.0 if x > 0.0 else jnp.cos(v) * 2.0


# -- goldens ---------------------------------------------------------------------------


def check_golden(name: str, text: str) -> None:
    """`text` equals tests/golden/<name>.py.txt (rewritten with KT_UPDATE_GOLDEN=1)."""
    path = GOLDENS / f"{name}.py.txt"
    text = text.replace(ROOT, "<root>")
    if os.environ.get("KT_UPDATE_GOLDEN"):
        GOLDENS.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with KT_UPDATE_GOLDEN=1 and read it"
    assert text == path.read_text(), f"{path} differs; KT_UPDATE_GOLDEN=1 rewrites it"


@pytest.mark.parametrize("case", list(CASES))
def test_golden_source_and_gradient(case):
    make, oracle, args = CASES[case]
    g = make()
    check_golden(f"grad_{case}", kt.get_source(g))
    args = [jnp.asarray(a, jnp.float32) for a in args]
    got, want = g(*args), oracle(*args)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)


def test_rules_decide_static_facts_when_the_code_runs():
    """A Dense layer's gradient: the matmul rule's rank tests are Python `if`s
    (ranks are static), never `_ctl.switch` calls, and no absolute path."""
    source = kt.get_source(CASES["dense"][0]())
    assert "switch" not in source
    assert "where='/" not in source and ROOT not in source
    assert ".ndim == 2:" in source


def test_for_with_if_gradient_no_longer_than_tangents():
    """Issue 27: the gradient of the 3-line `for` with an `if` was 124 lines
    in 11 functions; Tangent's is 93."""
    assert len(kt.get_source(kt.grad(for_if)).splitlines()) <= 93


def test_branch_oracle_other_side():
    g = kt.grad(branch)
    x = jnp.float32(-0.6)
    want = jax.grad(lambda v: _branch_taken_at(v, x))(x)
    np.testing.assert_allclose(g(x), want, rtol=2e-5)
    assert np.isclose(_branch_taken(float(x)), branch(x))


# -- determinism -----------------------------------------------------------------------

# A function of the same name elsewhere, with closures of its own: a process-wide
# key counter would number the subject's env keys after this one's.
_NAMESAKE = """
import jax.numpy as jnp


def closure_loop(x):
    a = jnp.sin(x)

    def scale(t):
        return t * a

    return scale(x) + scale(a)
"""

_SCRIPT = """
import importlib.util
import sys
sys.path[:0] = {path!r}
import k_transform as kt
from tests import test_codegen_readable as m
fns = [getattr(m, name) for name in {first}]
if {namesake!r}:
    spec = importlib.util.spec_from_file_location("namesake", {namesake!r})
    namesake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(namesake)
    fns.append(namesake.closure_loop)
for fn in fns:
    kt.get_source(kt.grad(fn))
    kt.get_source(kt.grad(kt.grad(fn)))
g = kt.grad(m.closure_loop)
sys.stdout.write(kt.get_source(g) + "\\n=====\\n" + kt.get_source(kt.grad(g)))
"""


def _sources_in_fresh_process(first: list[str], namesake: str = "") -> str:
    script = _SCRIPT.format(path=[ROOT, *sys.path], first=first, namesake=namesake)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _sources_here() -> str:
    g = kt.grad(closure_loop)
    return kt.get_source(g) + "\n=====\n" + kt.get_source(kt.grad(g))


def _twin_source() -> str:
    """`closure_loop`'s own source, at its own line, for another module: the
    same function name, line and variable names in another file."""
    lines, first = inspect.getsourcelines(closure_loop)
    return "import jax.numpy as jnp\n" + "\n" * (first - 2) + "".join(lines)


def test_same_source_whatever_was_transformed_before(tmp_path):
    namesake = tmp_path / "namesake.py"
    namesake.write_text(_NAMESAKE)
    twin = tmp_path / "twin.py"
    twin.write_text(_twin_source())
    alone = _sources_in_fresh_process([])
    after_others = _sources_in_fresh_process(
        ["unrelated_1", "unrelated_2", "unrelated_3"], namesake=str(namesake)
    )
    assert after_others == alone
    # A same-named function at the same line in another module, transformed first.
    assert _sources_in_fresh_process([], namesake=str(twin)) == alone
    assert str(tmp_path) not in alone and ROOT not in alone
    for fn in (unrelated_3, unrelated_1, closure):  # this process: others first too
        kt.get_source(kt.grad(kt.grad(fn)))
    assert _sources_here() == alone
    # env keys: graph, file (as `where=` shows it), line, name
    assert re.search(r"'closure_loop@tests/test_codegen_readable.py:\d+:a'", alone)


# Two modules, each with a `g` at the same line reading a variable `a` of the
# same name through a closure: env keys name the file, so no two are alike.
_SAME_NAMED = """import jax.numpy as jnp


def g(x, h):
    a = jnp.{fn}(x)

    def inner(t):
        return h(t) * a

    return inner(x) + a
"""


def _module(path: pathlib.Path, name: str, fn: str):
    path.write_text(_SAME_NAMED.format(fn=fn))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_env_keys_unique_per_source_file(tmp_path, monkeypatch):
    # (files under no `sys.path` entry: shown by base name; an earlier test of
    # the run may have put a folder above `tmp_path` on the path)
    outside = [
        p for p in sys.path if not str(tmp_path).startswith(os.path.abspath(p or ".") + os.sep)
    ]
    monkeypatch.setattr(sys, "path", outside)
    (tmp_path / "other").mkdir()
    sin_g = _module(tmp_path / "mod_sin.py", "mod_sin", "sin")
    cos_g = _module(tmp_path / "mod_cos.py", "mod_cos", "cos")
    twin = _module(tmp_path / "other" / "mod_sin.py", "twin", "tanh")  # same file name

    def f(x):
        return sin_g.g(x, lambda t: cos_g.g(t, jnp.exp)) * twin.g(x, jnp.sin)

    sources = [kt.get_source(kt.grad(m.g, grad_position=0)) for m in (sin_g, cos_g, twin)]
    keys = [set(re.findall(r"'(g@[^']*:a)'", s)) for s in sources]
    assert all(keys) and not keys[0] & keys[1] and not keys[0] & keys[2], keys
    assert "'g@mod_sin.py:4:a'" in sources[0] and "'g@mod_cos.py:4:a'" in sources[1]
    assert not any(str(tmp_path) in s for s in sources)  # no machine's path

    def oracle(x):
        def g(fn, x, h):
            a = fn(x)
            return h(x) * a + a

        return g(jnp.sin, x, lambda t: g(jnp.cos, t, jnp.exp)) * g(jnp.tanh, x, jnp.sin)

    x = jnp.float32(0.3)
    np.testing.assert_allclose(kt.grad(f)(x), jax.grad(oracle)(x), rtol=1e-5)


def test_grad_of_grad_runs_and_matches_jax():
    gg = kt.grad(kt.grad(closure_loop))
    x = jnp.float32(0.9)
    trips, s = 0, float(x)
    while s < 4.0:
        s, trips = s * np.cos(float(x)) + s * 2.0, trips + 1

    def unrolled(x):
        s = x
        for _ in range(trips):
            s = s * jnp.cos(x) + s * 2.0
        return s * jnp.cos(x)

    np.testing.assert_allclose(gg(x), jax.grad(jax.grad(unrolled))(x), rtol=1e-4)


# -- d_<name> is the gradient of <name> ------------------------------------------------


def _assigned(fdef: ast.FunctionDef) -> dict[str, ast.expr]:
    """Names assigned directly in `fdef`'s body (not nested defs) -> value."""
    out: dict[str, ast.expr] = {}
    for stmt in fdef.body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Name):
                        out[t.id] = stmt.value
    return out


def _scope_names(fdef: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fdef.args.args} | set(_assigned(fdef))


def test_sensitivity_names_match_the_primal_names():
    source = kt.get_source(kt.grad(loop_while))
    tree = ast.parse(source)
    body = next(
        f
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef) and f.name.endswith("body_fprop")
    )
    assert "s_1" in _assigned(body), "the loop body rebinds s as s_1"
    bprop = next(f for f in body.body if isinstance(f, ast.FunctionDef))
    grads = _assigned(bprop)
    # The body returns (s_1,): the gradient of s_1 is dout[0], named d_s_1.
    assert ast.unparse(grads["d_s_1"]) == f"{bprop.args.args[0].arg}[0]"
    assert ast.unparse(grads["d_s"]) != ast.unparse(grads["d_s_1"])  # d_s: of parameter s


@pytest.mark.parametrize("case", list(CASES))
def test_every_d_name_names_a_variable_in_scope(case):
    """Each `d_<name>` assigned in a bprop names a variable of the fprop
    around it (or of the bprop's own parameters)."""
    tree = ast.parse(kt.get_source(CASES[case][0]()))
    checked = 0
    for fprop in ast.walk(tree):
        if not isinstance(fprop, ast.FunctionDef):
            continue
        for bprop in (s for s in fprop.body if isinstance(s, ast.FunctionDef)):
            visible = _scope_names(fprop) | _scope_names(bprop)
            for name in _assigned(bprop):
                if name.startswith("d_"):
                    assert name[2:] in visible, f"{name} in {bprop.name} names no variable"
                    checked += 1
    assert checked


def test_no_magic_indexing_of_bprop_results_and_no_empty_env():
    source = kt.get_source(kt.grad(closure))
    assert "= {}" not in source
    assert "add_grad({}" not in source
    tree = ast.parse(source)
    calls = {}  # name -> True when bound to a call of a bprop value
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    calls[t.id] = True
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            assert not calls.get(node.value.id), f"indexed call result: {ast.unparse(node)}"


def _comments_by_function(source: str) -> dict[str, list[str]]:
    """The `#` comments directly in each `def` of generated source."""
    found: dict[str, list[str]] = {}
    stack: list[tuple[int, str]] = []
    for line in source.splitlines():
        text, indent = line.strip(), len(line) - len(line.lstrip())
        if text.startswith(("def ", "#")):
            while stack and stack[-1][0] >= indent:
                stack.pop()
        if text.startswith("def "):
            stack.append((indent, text[4:].split("(")[0]))
        elif text.startswith("#") and stack:
            found.setdefault(stack[-1][1], []).append(text)
    return found


@pytest.mark.parametrize("case", ["closure", "while", "if"])
def test_backward_comments_once_per_source_line(case):
    """A bprop says `# grad of line N: <source>` once per source line it
    differentiates; forward code keeps `# line N: <source>`."""
    comments = _comments_by_function(kt.get_source(CASES[case][0]()))
    backward = {f: c for f, c in comments.items() if f.endswith("_bprop")}
    forward = {f: c for f, c in comments.items() if not f.endswith("_bprop")}
    assert backward and all(x.startswith("# grad of line ") for c in backward.values() for x in c)
    assert all(x.startswith("# line ") for c in forward.values() for x in c)
    for c in backward.values():
        assert len(c) == len(set(c)), c


def branch_and(x):
    if x > 0.0 and x < 2.0:
        y = jnp.sin(x) * x
    else:
        y = x + 1.0
    return y * y


def test_nested_tuples_unpacked_in_turn_second_order():
    """K of K of a branch: a pair whose first item is a tuple of results,
    itself unpacked from its name (regression: its names were never bound)."""
    gg = kt.grad(kt.grad(branch_and))
    x = jnp.float32(0.7)
    want = jax.grad(jax.grad(lambda v: (jnp.sin(v) * v) ** 2))(x)
    np.testing.assert_allclose(gg(x), want, rtol=1e-5)
    compile(kt.get_source(gg), "<gg>", "exec")


def test_parameter_keys_are_spelled_by_name_not_by_id():
    w = kt.Parameter(jnp.float32(2.0), name="w")

    def f(x):
        return jnp.sin(x * w)

    g = kt.grad(f, weights=kt.ParameterTuple([w]))
    source = kt.get_source(g)
    assert "param_key(w)" in source and "'param:" not in source
    x = jnp.float32(0.3)
    (d_x, (d_w,)) = g(x)
    np.testing.assert_allclose(d_w, jax.grad(lambda v: jnp.sin(x * v))(jnp.float32(2.0)), rtol=1e-6)
    np.testing.assert_allclose(d_x, jax.grad(lambda v: jnp.sin(v * 2.0))(x), rtol=1e-6)


# -- `_` is the unpacking throwaway, never a variable --------------------------------------
def underscore_loop(x):
    y = x
    for _ in range(12):  # a run-time loop: `_` is read back in K of its reverse
        y = jnp.tanh(y * (_ + 1.0) * 0.1 + x)
    return jnp.sum(y)


def rows_loop(x):
    y = x * 0.5 + 0.1
    for r in jnp.stack((jnp.cos(x[0] * x), jnp.sin(x))):
        y = jnp.tanh(0.2 * jnp.sum(x[1] * y) * x + r)
    return jnp.sum(jnp.cos(y))


@pytest.mark.parametrize("fn", [underscore_loop, rows_loop], ids=lambda f: f.__name__)
def test_regression_underscore_variable_not_clobbered(fn):
    """Codegen unpacks tuples as `a, _, b = t`; a variable named `_` (a user's
    loop index, a reverse loop's step) read later must not be overwritten
    (fuzzer-found: hvp through a loop over array rows raised TypeError)."""
    x, v = np.array([0.3, -0.2, 0.7]), np.array([1.0, 0.5, -1.0])
    with jax.enable_x64(True):
        kt.set_mode("eager")
        try:
            got = kt.hvp(fn, (x,), v)
        finally:
            kt.set_mode("graph")
        want = jax.jvp(jax.grad(fn), (x,), (v,))[1]
        np.testing.assert_allclose(got, want, rtol=1e-9)
        np.testing.assert_allclose(kt.grad(fn)(x), jax.grad(fn)(x), rtol=1e-9)
    assert not re.search(r"^\s*_ = ", kt.get_source(fn), re.M)


# -- common subexpressions (ir/cse.py, codegen/view.py) ----------------------------------


def test_common_subexpressions_computed_once():
    """`s = x * x`: each factor's gradient is `d_s * x` (`mul_grad`, which
    keeps a repeated sequence's gradient apart), written once."""
    source = kt.get_source(kt.grad(second))
    assert source.count("_rt.mul_grad(d_s, x)") == 1, source
    x = jnp.float32(0.8)
    np.testing.assert_allclose(kt.grad(second)(x), jax.grad(second)(x), rtol=1e-6)


def test_effects_and_parameter_reads_are_never_shared():
    """Two prints of one value both print; `x * w` before and after an
    Assign to `w` reads two values of `w` (one read would give 4.0, not 5.0)."""
    w = kt.Parameter(jnp.float32(2.0), name="w")

    def f(x):
        a = x * w
        kt.ops.Assign()(w, w + 1.0)
        b = x * w
        print(a)
        print(a)
        return a + b

    g = kt.grad(f)
    source = kt.get_source(g)
    assert source.count("_rt.print_(a)") == 2 and source.count("_rt.read_param(w)") == 2
    np.testing.assert_allclose(g(jnp.float32(0.5)), 5.0)  # w + (w + 1) at w = 2
    np.testing.assert_allclose(w.data, 3.0)


def _clip_sin(x, hi):
    return jnp.sum(jnp.sin(jnp.clip(x, 0.0, hi)))


def test_a_constant_reaching_a_rules_is_test_is_emitted_as_its_value():
    """clip's rule tests `lo is None`; with `lo` a literal known only as the
    code is written, `0.0 is None` is a SyntaxWarning (an error under -W
    error): its value is written instead."""
    import warnings

    x = jnp.array([-1.0, 0.5, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SyntaxWarning)
        source = kt.get_source(kt.grad(_clip_sin))
        grad = kt.grad(_clip_sin)(x, 1.0)
    assert not re.search(r"[\d.]+ is (not )?None", source)
    np.testing.assert_allclose(grad, jax.grad(_clip_sin)(x, 1.0), rtol=1e-6)
