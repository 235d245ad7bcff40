"""JAX's own-gradient functions written by the user: JAX's `custom_vjp`, `custom_jvp`.

A user's `@custom_vjp` (JAX's) function `f` (also one over `@jax.jit`: the
jitted function is read), called in parsed code, is
differentiated by its own rule, as JAX differentiates it. The call is a call
of a graph running `f.fun` (what a plain call runs), whose K is not a
transform of it but the fprop of its rule (`FuncGraph.custom_fprop`, which
the DFunctor gives in its place): `out, residuals = fwd(*inputs)`, and a
bprop of `bwd(residuals, dout)`. That fprop is parsed Python, so at a
higher order fwd is differentiated through its steps and bwd as any code,
as JAX does. `nondiff_argnums` inputs go to bwd first and get no gradient
(zeros); the functions among them are given as the user wrote them, not
their fprops (a closure over the caller's values is refused).

A user's `@custom_jvp` (JAX's) function `f` is, the same way, a call of a
graph running `f.fun`, which carries its jvp rule as a graph `(*inputs,
*tangents) -> (out, tangent_out)` (`FuncGraph.jvp_rule`, `_jvp_rule`)
calling the user's rule as JAX calls it: the `nondiff_argnums` inputs first,
then the tuples of the other inputs and of their tangents; for
`defjvps(*terms)`, JAX's sum over the inputs of `term_k(tangent_k, out,
*inputs)`, built as a graph (JAX's own rule is a closure over its tree
utilities). K of the call transposes the rule (`dfunctor.own_fprop`): the
rule is linear in the tangents, so the vjp is the gradient of the rule's
tangent output w.r.t. the tangents alone, which our reverse mode of the
parsed rule computes (never JAX's). So the rule, not `f`'s steps, gives the
gradient, and at a higher order the rule's steps are differentiated as any
code (a rule calling `f` itself meets `f`'s rule again), as JAX does. A rule
that is not linear in the tangents (`jnp.clip(t, lo, hi)`) is refused when
differentiated, as JAX's reverse mode refuses it (`dfunctor.linearity`);
forward mode (`kt.jvp`, jacfwd) is built from reverse mode, so it gives the
rule's tangent for the rules reverse mode takes.

One defined inside the function differentiated (JAX's `custom_jvp` decorator on a
nested def, its rule a nested def or lambda given by `defjvp`/`defvjp`
there) is a closure whose graph is made the same way where it is called
(`NestedCustom`); one whose body or rule reads a variable of the function
around it is refused (JAX raises where that value has a derivative).

Also refused, never run without the user's rule: `symbolic_zeros=True`, a
function without `defvjp` (`defjvp`), one reading a `kt.Parameter` it is not
given (its rule gives it no gradient: `dfunctor.own_fprop`), and either kind
reached only through a jaxpr
(`frontend/jaxpr.py`: `jax.vmap(f)`, code run as Python). JAX's own
custom_vjp and custom_jvp functions (`jax.nn.relu`, ...) are library calls,
differentiated through their steps with the rules of `frontend/jaxpr.py`.
"""

from __future__ import annotations

import copy
import functools

import gast

from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.frontend.callables import custom_rule_kind, wrapped_target
from k_transform.frontend.closures import ClosureSite
from k_transform.frontend.guards import guards_of, stale
from k_transform.frontend.source import is_user_function
from k_transform.ir.nodes import Constant, FuncGraph
from k_transform.ops import python as prims
from k_transform.ops import structural
from k_transform.ops.structural import EMPTY_ENV, zeros_like


def users_custom_rule(value) -> bool:
    """Whether `value` is a custom_vjp or custom_jvp function the user wrote."""
    if custom_rule_kind(value) is None:
        return False
    fun = wrapped_target(value.fun) or value.fun  # `@custom_vjp @jit def f`: f
    return is_user_function(fun)


def lower_custom(builder, value, args: list, kwargs: dict, e):
    """`f(*args)` for a user's custom_vjp or custom_jvp `f` (module docstring)."""
    name = getattr(value, "__name__", "the function")
    kind = custom_rule_kind(value)
    fun = builder.parse(value.fun, primal_only=True)  # its K is its rule's
    inputs = builder.bind_call(fun, args, kwargs, e)
    rule = (value.fwd, value.bwd) if kind == "custom_vjp" else (value.jvp,)
    if any(f is None for f in rule):
        how = "defvjp(fwd, bwd)" if kind == "custom_vjp" else "defjvp(jvp) or defjvps(...)"
        raise builder.fp.error(
            f"the JAX {kind} function {name} has no rule: call {name}.{how} before using it",
            e,
        )
    if value.symbolic_zeros:
        raise builder.fp.unsupported(f"JAX {kind} with symbolic_zeros=True ({name})", e)
    graph = _with_rule(builder, value, len(inputs))
    return builder.apply(Constant(graph, builder.debug(e), name), *inputs, node=e)


def _with_rule(builder, value, n: int) -> FuncGraph:
    """The graph of `value.fun(*inputs)` for `n` inputs, whose K is made of
    `value`'s rule: the custom fprop of a custom_vjp's fwd and bwd
    (`FuncGraph.custom_fprop`), or a custom_jvp's jvp rule
    (`FuncGraph.jvp_rule`, which K transposes); one per function and arity."""
    made = TRANSFORM.cache("jax_custom.graphs")
    entry = made.get((id(value), n))
    if entry is not None and entry[0] is value and not stale(entry[1].guards):
        return entry[1]
    nondiff = tuple(sorted(k % n for k in value.nondiff_argnums))
    name = getattr(value, "__name__", custom_rule_kind(value))
    fun = builder.parse(value.fun, primal_only=True)  # its K is the rule's
    graph = _calling(fun, n, name, "function", packed=False)
    made[(id(value), n)] = (value, graph)  # before the rule: it may call the function
    try:
        if custom_rule_kind(value) == "custom_jvp":
            terms = _defjvps_terms(value)
            graph.jvp_rule = _jvp_rule(builder, name, value.jvp, terms, graph, nondiff, n)
        else:
            _attach_fprop(builder, graph, name, value.fwd, value.bwd, nondiff)
    except BaseException:
        del made[(id(value), n)]
        raise
    # Stale with its rule: what the rule read, and the rule itself (`defjvp`
    # again replaces it: the graphs made of the old one are then dropped).
    rule = graph.jvp_rule or graph.custom_fprop
    own = [(vars(value), k, v, None) for k, v in vars(value).items() if k in _RULE_ATTRIBUTES]
    graph.guards = (*graph.guards, *guards_of(rule), *own)
    return graph


_RULE_ATTRIBUTES = ("jvp", "fwd", "bwd", "symbolic_zeros", "nondiff_argnums")


def _attach_fprop(builder, graph: FuncGraph, name: str, fwd, bwd, nondiff: tuple) -> None:
    """`graph.custom_fprop`, the fprop of a custom_vjp function of `fwd` and
    `bwd` (Python functions, or the graphs of nested defs)."""
    n = len(graph.parameters)
    where = [None] * n  # each input's place in bwd's result (None: no gradient)
    for j, k in enumerate(k for k in range(n) if k not in nondiff):
        where[k] = j
    fprop = builder.parse(_fprop(fwd, bwd, nondiff, tuple(where)), star_arity=n)
    graph.custom_fprop = _calling(fprop, n, f"{name}_fprop", "fprop", packed=True)
    graph.custom_fprop.is_custom_fprop = True


def _calling(callee: FuncGraph, n: int, name: str, kind: str, packed: bool) -> FuncGraph:
    """A graph of `n` parameters calling `callee` with them (`packed`: as
    one tuple, the `*inputs` of a def parsed for `n` of them)."""
    graph = FuncGraph(name, debug=callee.debug, kind=kind)
    params = [graph.add_parameter(f"x{k}") for k in range(n)]
    graph.param_names, graph.defaults = [p.name for p in params], {}
    args = [graph.apply(Constant(prims.MakeTuple()), *params)] if packed else params
    graph.output = graph.apply(Constant(callee, hint=callee.name), *args)
    graph.guards = guards_of(callee)
    return graph


def _fprop(fwd, bwd, nondiff: tuple, where: tuple):
    """`fprop(*inputs) -> (out, bprop)`, as JAX differentiates a custom_vjp
    function: out and the residuals from fwd (differentiated through its
    steps at a higher order), the gradients from bwd; JAX gives bwd the
    `nondiff` inputs first and takes no gradient for them (zeros here)."""

    def fprop(*inputs):
        out, residuals = fwd(*inputs)

        def bprop(dout):
            kept = ()
            for k in nondiff:
                kept = (*kept, inputs[k])
            grads = bwd(*kept, residuals, dout)
            spread = ()
            for k, j in enumerate(where):
                grad = None if j is None else grads[j]
                spread = (*spread, zeros_like(inputs[k]) if grad is None else grad)
            return (EMPTY_ENV, *spread)

        return out, bprop

    return fprop


def _jvp_rule(builder, name: str, jvp, terms, fn: FuncGraph, nondiff: tuple, n: int) -> FuncGraph:
    """The graph `(*inputs, *tangents) -> (out, tangent_out)` of the jvp
    rule `jvp` (or the `defjvps` `terms`) of the custom_jvp function `name`
    of `n` inputs (its graph `fn`),
    calling it as JAX does: the `nondiff` inputs first, then the tuples of
    the other inputs and of their tangents (the tangents of the `nondiff`
    inputs are not read). Its parameters are one per value, so that K of it
    w.r.t. the tangents alone keeps the inputs constants
    (`dfunctor.own_fprop`). The rule `defjvps` gave is built as JAX builds
    it (`_defjvps_rule`)."""
    graph = FuncGraph(f"{name}_jvp_rule", debug=fn.debug)
    xs = [graph.add_parameter(f"x{k}") for k in range(n)]
    ts = [graph.add_parameter(f"t{k}") for k in range(n)]
    graph.param_names, graph.defaults = [p.name for p in (*xs, *ts)], {}
    if terms is not None:
        graph.output = _defjvps_rule(builder, graph, fn, terms, xs, ts)
        graph.guards = guards_of(fn)
        return graph
    takes = "(" + "nondiff_input, " * len(nondiff) + "primals, tangents)"
    callee = _parsed_rule(builder, jvp, name, takes)
    diff = [k for k in range(n) if k not in nondiff]
    primals = _apply(graph, prims.MakeTuple(), *[xs[k] for k in diff])
    tangents = _apply(graph, prims.MakeTuple(), *[ts[k] for k in diff])
    kept = [xs[k] for k in nondiff]
    pair = graph.apply(Constant(callee, hint=callee.name), *kept, primals, tangents)
    _apply(graph, prims.CheckUnpack(2), pair)  # a pair, as JAX requires
    items = [_apply(graph, prims.GetItem(), pair, Constant(k)) for k in (0, 1)]
    graph.output = _apply(graph, prims.MakeTuple(), *items)
    graph.guards = guards_of(callee)
    return graph


def _defjvps_rule(builder, graph: FuncGraph, fn: FuncGraph, terms, xs, ts):
    """The output of the rule `defjvps(*terms)` makes, as JAX's: `out =
    f(*inputs)`, and the sum over the inputs with a term of `term_k(tangent_k,
    out, *inputs)` (zeros where none has)."""
    name = fn.name
    out = graph.apply(Constant(fn, hint=name), *xs)
    tangent_out = _apply(graph, structural.ZerosLike(), out)
    for k, term in enumerate(terms):
        if term is None:
            continue
        takes = "(tangent, primal_out" + ", primal" * len(xs) + ")"
        callee = _parsed_rule(builder, term, name, takes)
        made = graph.apply(Constant(callee, hint=callee.name), ts[k], out, *xs)
        tangent_out = _apply(graph, structural.AddGrad(), tangent_out, made)
    return _apply(graph, prims.MakeTuple(), out, tangent_out)


def _parsed_rule(builder, rule, name: str, takes: str) -> FuncGraph:
    """The graph of a jvp rule (or a `defjvps` term) of the custom_jvp
    function `name`, which JAX calls with the positional arguments `takes`
    (a Python function, or the graph of a nested def)."""
    callee = rule if isinstance(rule, FuncGraph) else builder.parse(rule)
    n = takes.count(",") + 1
    if callee.signature is not None or len(callee.parameters) != n:
        raise KTransformError(
            f"the jvp rule {callee.name} of the JAX custom_jvp function {name} is called with "
            f"{n} positional arguments {takes}; k_transform reads a rule that takes exactly "
            "those",
            callee.debug,
        )
    return callee


def _apply(graph: FuncGraph, prim, *args):
    return graph.apply(Constant(prim, hint=prim.name), *args)


def _defjvps_terms(value) -> tuple | None:
    """The functions `defjvps(*jvps)` was given for `value` (None for an
    input without one), read from the rule it made (a closure of JAX's, over
    its `jvps`, calling JAX's tree utilities: built again by
    `_defjvps_rule` as code the parser reads); None if `value`'s rule is not
    one `defjvps` made."""
    jvp = value.jvp
    code = getattr(jvp, "__code__", None)
    if code is None or getattr(jvp, "__qualname__", "") != "custom_jvp.defjvps.<locals>.jvp":
        return None
    cells = dict(zip(code.co_freevars, jvp.__closure__ or (), strict=True))
    return tuple(cells["jvps"].cell_contents) if "jvps" in cells else None


# -- one defined inside the function differentiated --------------------------------
# A def decorated with JAX's `custom_jvp` (or `custom_vjp`, or a `functools.partial`
# of one with `nondiff_argnums=...`) nested in parsed code is a closure whose site records
# the kind (`NestedCustom`, `site.custom`); `@f.defjvp def rule`, `f.defjvp(rule)`
# and `f.defvjp(fwd, bwd)` there give it its rule (a nested def or a function).
# A call of `f` is then a call of a graph whose K is the rule's, as for one
# defined at module level (`_with_rule`). Refused: a rule given after `f` was
# used, and a function or rule reading a variable of the function around it
# (JAX's rule gives the values a function closes over no derivative: it raises
# then), `symbolic_zeros`, `defjvps`, defaults and `*args`.
_CUSTOM_KINDS = ("custom_jvp", "custom_vjp")
_RULE_METHODS = {"custom_jvp": ("defjvp",), "custom_vjp": ("defvjp",)}


class NestedCustom:
    """A nested def JAX's decorator made a custom_jvp or custom_vjp
    function: its `kind`, `nondiff_argnums` and rule (`(jvp,)` or `(fwd,
    bwd)`: each a `ClosureSite` or a constant function)."""

    def __init__(self, kind: str, nondiff: tuple):
        self.kind = kind
        self.nondiff = nondiff
        self.rule: tuple | None = None

    def made(self, builder, site: ClosureSite, key, primal: Constant) -> Constant:
        """The call target of `site`'s function (its graph `primal`, built
        over the bindings `key`): a graph running it whose K is the rule's."""
        fun, name = primal.value, site.name
        refuse = functools.partial(_refuse_nested, builder, site.fdef, name, self.kind)
        if self.rule is None:
            how = "defjvp(rule)" if self.kind == "custom_jvp" else "defvjp(fwd, bwd)"
            raise builder.fp.error(
                f"the JAX {self.kind} function {name} is called before {name}.{how} gave it a rule",
                site.fdef,
            )
        if fun.signature is not None or site.defaults:
            refuse("with default values, `*args` or keyword-only parameters")
        n = len(fun.parameters)
        nondiff = tuple(sorted(k % n for k in self.nondiff)) if n else ()
        graph = _calling(fun, n, name, "function", packed=False)
        graph.param_names, graph.defaults = list(fun.param_names), {}
        value = Constant(graph, primal.debug, name)
        site.graphs[key] = value  # before the rule: it may call the function
        rules = [self._graph_of(builder, r) for r in self.rule]
        for g in (fun, *[r for r in rules if isinstance(r, FuncGraph)]):
            if g.free_variables():
                read = g.free_variables()[0]
                refuse(
                    f"whose {'rule' if g is not fun else 'body'} {g.name} reads "
                    f"{read.debug.name or 'a value'} of the function around it",
                    _CLOSED_OVER,
                )
        if self.kind == "custom_jvp":
            graph.jvp_rule = _jvp_rule(builder, name, rules[0], None, graph, nondiff, n)
        else:
            _attach_fprop(builder, graph, name, rules[0], rules[1], nondiff)
        return value

    @staticmethod
    def _graph_of(builder, rule):
        """A rule's graph (a nested def's, over the bindings it sees here)
        or the function itself."""
        if not isinstance(rule, ClosureSite):
            return rule
        view = builder.view_of(rule) or builder
        return view.materialize(rule).value


def _refuse_nested(builder, fdef, name: str, kind: str, what: str, why: str = ""):
    """(Not run as Python instead: the jaxpr import refuses a user's rule.)"""
    raise builder.fp.error(
        f"a JAX {kind} function {name} defined inside the function differentiated, {what}, "
        f"is not supported by k_transform ({why or 'define it at module level'})",
        fdef,
    )


_CLOSED_OVER = (
    "JAX's rule gives no derivative for the values a function closes over, and JAX "
    "raises where they have one: pass such values as arguments, with nondiff_argnums for "
    "non-arrays; or define it at module level"
)


def nested_def(builder, s) -> bool:
    """Bind the decorated nested def `s` if its decorator is JAX's custom_jvp
    or custom_vjp (`NestedCustom`), or the `defjvp` of one (`@f.defjvp`);
    False for any other decorator."""
    if len(s.decorator_list) != 1:
        return False
    decorator = s.decorator_list[0]
    plain = copy.copy(s)
    plain.decorator_list = []
    target = _rule_of(builder, decorator)
    if target is not None:  # `@f.defjvp def rule`: defjvp returns the rule itself
        builder.bind_closure(s.name, plain)
        _give_rule(builder, *target, [builder.vars[s.name]], decorator)
        return True
    made = _decorator_kind(builder, decorator)
    if made is None:
        return False
    builder.bind_closure(s.name, plain)
    builder.vars[s.name].custom = made
    return True


def nested_rule_call(builder, e, lambda_def) -> bool:
    """`f.defjvp(rule)`, `f.defvjp(fwd, bwd)` as a statement, for a nested
    custom function `f`: its rule given; False for any other expression. A
    lambda there is a def (`lambda_def`) whose graph is built where `f` is
    called, as a nested def's."""
    if not isinstance(e, gast.Call):
        return False
    target = _rule_of(builder, e.func)
    if target is None:
        return False
    if e.keywords or any(isinstance(a, gast.Starred) for a in e.args):
        raise builder.fp.unsupported(f"keyword arguments to {target[1]}", e)
    rules = []
    for k, a in enumerate(e.args):
        if isinstance(a, gast.Lambda):
            fdef = lambda_def(a, f"{target[0].name}_rule{k}")
            rules.append(ClosureSite(fdef, fdef.name, builder, builder.eval_defaults(fdef), ()))
            continue
        site = builder.peek(a.id) if isinstance(a, gast.Name) else None
        rules.append(site if isinstance(site, ClosureSite) else builder.expr(a))
    _give_rule(builder, *target, rules, e)
    return True


def _rule_of(builder, e):
    """`(site, method)` for `f.defjvp` / `f.defvjp` / ... of a nested custom
    function `f`, else None."""
    if not (isinstance(e, gast.Attribute) and isinstance(e.value, gast.Name)):
        return None
    site = builder.peek(e.value.id)
    if not isinstance(site, ClosureSite) or site.custom is None:
        return None
    return site, e.attr


def _give_rule(builder, site: ClosureSite, method: str, rules: list, e) -> None:
    custom = site.custom
    if method not in _RULE_METHODS[custom.kind]:
        _refuse_nested(builder, e, site.name, custom.kind, f"given its rule by `{method}`")
    wanted = 1 if custom.kind == "custom_jvp" else 2
    if len(rules) != wanted:
        raise builder.fp.error(f"{site.name}.{method} takes {wanted} functions", e)
    if site.graphs:  # a call already built (Python's would use the rule given then)
        _refuse_nested(builder, e, site.name, custom.kind, "given its rule after it was used")
    for r in rules:  # a nested def, or a function known while parsing
        known = isinstance(r, Constant) and (isinstance(r.value, FuncGraph) or callable(r.value))
        if not (isinstance(r, ClosureSite) or known):
            raise builder.fp.unsupported(f"{site.name}.{method} of a value known when run", e)
    custom.rule = tuple(r.value if isinstance(r, Constant) else r for r in rules)


def _decorator_kind(builder, d) -> NestedCustom | None:
    """JAX's `custom_jvp` or `custom_vjp` class, or `functools.partial(one,
    nondiff_argnums=...)`, as a decorator: its `NestedCustom`; else None."""
    nondiff: tuple = ()
    if isinstance(d, gast.Call):
        maker = builder.expr(d.func) if isinstance(d.func, (gast.Name, gast.Attribute)) else None
        if (
            not (isinstance(maker, Constant) and maker.value is functools.partial)
            or len(d.args) != 1
        ):
            return None
        for k in d.keywords:
            value = builder.expr(k.value)
            if k.arg != "nondiff_argnums" or not isinstance(value, Constant):
                return None
            nondiff = (value.value,) if isinstance(value.value, int) else tuple(value.value)
        d = d.args[0]
    if not isinstance(d, (gast.Name, gast.Attribute)):
        return None
    cls = builder.expr(d)
    value = cls.value if isinstance(cls, Constant) else None
    if not (isinstance(value, type) and value.__name__ in _CUSTOM_KINDS):
        return None
    if not type.__getattribute__(value, "__module__").startswith("jax."):
        return None
    return NestedCustom(value.__name__, nondiff)
