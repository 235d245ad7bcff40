"""Lax primitives with no `ops` twin, one class per lax name.

`k_transform.frontend.jaxpr` imports a jaxpr equation by equation through
`k_transform.ops.lax_map`: an equation whose primitive has an `ops` twin
becomes that primitive (`sin` -> `ops.Sin`); any other becomes an instance
of this module's classes, which hold

- `prim`: the `jax.extend.core.Primitive` object (`lax.gather_p`);
- `params`: the equation's parameters as a sorted tuple of `(name, value)`
  (lists made tuples), so two instances with the same primitive, parameters
  and input avals are equal and share their rule graph;
- `in_avals`: `((shape, dtype), ...)` of the inputs. Imported graphs are
  traced per aval (the caller caches them by aval), so rules can read shapes
  and dtypes statically, as MindSpore's getters read attributes.

Classes (rules keyed by class, as every other primitive's):
- `lax_class(name)`: the class of lax primitive `name` (`LaxCumsum`...,
  made once by a factory); its rule, if any, is registered in
  `ops.lax_rules` / `ops.lax_shape_rules` with `@lax_rule(name)`. A class
  with no rule of its own gets `LaxPrimitive`'s, which refuses, naming the
  primitive (or gives no gradient when no input is a float).
- `IndexArithmetic`: any equation whose results are all integers or
  booleans (comparisons, argmax, index arithmetic): no gradient.
- `FloatFromBits`: the `bitcast_convert_type` that rebuilds a float from
  integer bits computed from a float's bits (the importer follows them): it
  runs as the bitcast does, and its rule refuses (integer arithmetic has no
  gradient, so the float's would be a silent zero).

`impl` is `prim.bind(*args, **params)` (a tuple for primitives with several
results); generated code spells it `lax_<name>_p.bind(x, **<name>_params)`.
`lax_op(name, in_avals, **params)` builds one by name, for rules; a name
with an `ops` twin is refused there (rules use the twin).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.extend import core as jex_core

from k_transform.errors import KTransformError
from k_transform.ir.primitive import Primitive


def _freeze(value):
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def aval_of(x) -> tuple:
    """`(shape, dtype)` of an array, jaxpr variable or literal."""
    aval = getattr(x, "aval", None)
    if aval is None:
        aval = jax.typeof(x)
    return (tuple(aval.shape), np.dtype(aval.dtype))


# Primitives whose rule takes its inputs packed (`bprop(xs, out, dout)`).
VARIADIC = frozenset(
    {
        "concatenate",
        "custom_linear_solve",
        "select_n",
        "dynamic_slice",
        "dynamic_update_slice",
        "sort",
        "optimization_barrier",
        "device_put",
        "stack",
    }
)


class LaxPrimitive(Primitive):
    """One jax primitive with fixed parameters and input avals (see the module)."""

    lax_name = ""  # the lax primitive a `lax_class` stands for

    def __init__(self, prim, params: dict, in_avals: tuple):
        frozen = tuple(sorted((k, _freeze(v)) for k, v in params.items()))
        super().__init__(prim.name, prim=prim, params=frozen, in_avals=tuple(in_avals))
        self.n_inputs = None if prim.name in VARIADIC else len(in_avals)
        self.multiple_results = prim.multiple_results

    @property
    def param(self) -> dict:
        return dict(self.params)

    def impl(self, *args):
        out = self.prim.bind(*args, **self.param)
        return tuple(out) if self.multiple_results else out

    def out_avals(self):
        """The avals of the results (a list when the primitive has several)."""
        structs = [jax.ShapeDtypeStruct(s, d) for s, d in self.in_avals]
        out = jax.eval_shape(lambda *xs: self.prim.bind(*xs, **self.param), *structs)
        if self.multiple_results:
            return [(tuple(o.shape), np.dtype(o.dtype)) for o in out]
        return (tuple(out.shape), np.dtype(out.dtype))

    def emit(self, e, args):
        name = self.prim.name.replace("-", "_")
        parts = list(args)
        if self.params:
            parts.append(f"**{e.ref(self.param_dict(), f'{name}_params')}")
        call = f"{e.ref(self.prim, f'lax_{name}_p')}.bind({', '.join(parts)})"
        return f"tuple({call})" if self.multiple_results else call

    def param_dict(self) -> dict:
        if "_param_dict" not in self.__dict__:
            self.__dict__["_param_dict"] = self.param
        return self.__dict__["_param_dict"]

    def _key(self):
        key = super()._key()
        return (key[0], tuple(item for item in key[1] if item[0] != "_param_dict"))

    def __repr__(self):
        return f"lax.{self.prim.name}"


class FloatFromBits(LaxPrimitive):
    """`bitcast_convert_type` to a float from bits of a float (see the module)."""

    lax_name = "bitcast_convert_type"


class IndexArithmetic(LaxPrimitive):
    """Any lax equation whose results are all integers or booleans: no gradient."""


class EffectCall(IndexArithmetic):
    """An equation with an effect and no float result (the callback of
    `jax.debug.print`): no gradient, kept in program order, never pruned as
    unused; it runs when the program runs (compiled, too)."""

    effectful = True


_CLASSES: dict[str, type] = {}


def lax_class(name: str) -> type:
    """The LaxPrimitive subclass of lax primitive `name` (made once)."""
    if name not in _CLASSES:
        words = name.replace("-", "_").split("_")
        cls_name = "Lax" + "".join(w[:1].upper() + w[1:] for w in words)
        doc = f"`lax.{name}` (imported from a jaxpr; see `k_transform.ops.lax`)."
        attrs = {"lax_name": name, "__doc__": doc, "__module__": __name__}
        _CLASSES[name] = type(cls_name, (LaxPrimitive,), attrs)
    return _CLASSES[name]


def lax_classes() -> dict[str, type]:
    """The classes made so far, by lax name."""
    return dict(_CLASSES)


_BY_NAME: dict[str, object] = {}


def jax_primitive(name: str):
    """The jax primitive object called `name` (from `jax.lax` and friends)."""
    if not _BY_NAME:
        for module in (jax.lax, jax.lax.linalg):
            for value in vars(module).values():
                if isinstance(value, jex_core.Primitive):
                    _BY_NAME.setdefault(value.name, value)
    if name not in _BY_NAME:
        raise KTransformError(f"internal: no jax primitive named {name}")
    return _BY_NAME[name]


# lax names whose equations become `ops` primitives (`ops.lax_map` fills it)
TWINNED: set[str] = set()


def lax_op(name: str, in_avals, **params) -> LaxPrimitive:
    """A lax primitive for rules: `lax_op("pad", [aval, aval], padding_config=...)`."""
    if name in TWINNED:
        raise KTransformError(f"internal: `{name}` has an ops twin; rules use the twin")
    return lax_class(name)(jax_primitive(name), params, tuple(in_avals))


def traced_op(name: str, fn, in_avals) -> LaxPrimitive:
    """The `name` primitive that `fn` lowers to at `in_avals`, with the parameters
    JAX fills in (`scatter-add`'s update jaxpr): rules build gathers and scatters
    this way, so their structured parameters never pass through generated code."""
    structs = [jax.ShapeDtypeStruct(s, d) for s, d in in_avals]
    eqns = [e for e in jax.make_jaxpr(fn)(*structs).jaxpr.eqns if e.primitive.name == name]
    if len(eqns) != 1:
        raise KTransformError(f"internal: expected one `{name}` in the trace of {fn}")
    if name in TWINNED:
        raise KTransformError(f"internal: `{name}` has an ops twin; rules use the twin")
    return lax_class(name)(eqns[0].primitive, dict(eqns[0].params), tuple(in_avals))
