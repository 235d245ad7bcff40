"""What the DFunctor asks of the layers above it, installed by them
(`k_transform.traced`, at import): a module of its own, so that the
DFunctor's helpers (`rule_linearity`) reach it without importing the
DFunctor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from k_transform.errors import KTransformError
from k_transform.ir.nodes import FuncGraph


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
