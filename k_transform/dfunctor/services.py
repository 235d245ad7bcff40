"""What the DFunctor asks of the layers above it, installed by them
(`k_transform.traced`, at import): a module of its own, so that the
DFunctor's helpers (`rule_linearity`) reach it without importing the
DFunctor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from k_transform.errors import KTransformError
from k_transform.ir.nodes import FuncGraph

if TYPE_CHECKING:
    from k_transform.dfunctor.liveness import Mask
    from k_transform.ops import python as prims


class LibraryK:
    """K^order of a library call with no primitive (`prims.imports_jaxpr`):
    a value the fprop graph calls with the K-values of the call's inputs,
    returning `(result, bprop)` at order 1. Its graph is known only at trace
    time, so the layer that imports jaxprs and compiles makes it
    (`Services.library_k`: `k_transform.traced.TracedCallK`). K of it is the
    same call one order higher, `k(out_used)` (the items of this call's
    result the caller reads: `DFunctor.used_items`)."""

    call: prims.LibraryCall
    order: int

    def k(self, out_used: Mask = None, active: tuple[bool, ...] | None = None) -> LibraryK:
        raise NotImplementedError


class DynamicK:
    """K^order of calling a value known only when the program runs (an
    `Apply` whose function is a node): called with the callee's K-value and
    the arguments' (`DynamicK(order)(callee, *args)`). A K-function (an
    fprop the program made) is called as it is, or made again for the items
    of its result the caller reads where it can be (a function with no free
    variables); another callable (a user object, `getattr(jnp, "sin")`) is
    differentiated through its jaxpr (`Services.dynamic_k`:
    `k_transform.traced.DynamicCallK`). Its bprop returns `(env of the
    callee, *d_args)`, as the callee's own; K of it is the same call one
    order higher, `k(out_used)` (`DFunctor.used_items`). Effectful, as the
    call it differentiates (codegen keeps a call of an unknown value): kept
    in program order, and run even where its result is unused (`fn(v)` as a
    statement, its print or draw)."""

    order: int
    effectful = True

    def k(self, out_used: Mask = None) -> DynamicK:
        raise NotImplementedError


def _not_installed(*args, **kwargs):
    raise KTransformError(
        "internal: the DFunctor's services are not installed (import k_transform.traced)"
    )


@dataclass
class Services:
    """What the DFunctor asks of the layers above it (`install`).

    - `parse(fn)`: a gradient rule's Python function as a FuncGraph (the
      registry caches it: `bprop_getters.bprop_graph(prim, n, parse)`);
    - `library_k(call, order, debug, out_used, active=)`: a `LibraryK` for a
      library call (`out_used`: the items of its result the caller reads, see
      `DFunctor.used_items`; `active`: which arguments may carry a gradient,
      `DFunctor.call_flags`);
    - `dynamic_k(order, debug, out_used)`: a `DynamicK` for a call of a
      run-time value;
    - `is_modelled(value)`: whether the parser reads calls of `value` as a
      Python model (`lax.cond`, `jax.vmap`), so it is no value K can map.
    """

    parse: Callable[..., FuncGraph] = _not_installed
    library_k: Callable[..., object] = _not_installed
    dynamic_k: Callable[..., object] = _not_installed
    is_modelled: Callable[[object], bool] = _not_installed


SERVICES = Services()


def install(
    parse: Callable[..., FuncGraph],
    library_k: Callable[..., object],
    dynamic_k: Callable[..., object],
    is_modelled: Callable[[object], bool],
) -> None:
    """Give the DFunctor its services (once, by `k_transform.traced` at import)."""
    SERVICES.parse, SERVICES.library_k, SERVICES.is_modelled = parse, library_k, is_modelled
    SERVICES.dynamic_k = dynamic_k
