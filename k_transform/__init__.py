"""k_transform: source-to-source automatic differentiation for Python.

The public API (see DESIGN.md). Reads a function's source, builds FuncGraph
IR, transforms it with the DFunctor, and generates Python that JAX compiles.
"""

from k_transform import common, dataset, nn, ode, ops, train
from k_transform.api import compile, draw, get_ir, get_source
from k_transform.bprop_registry import bprop_getters
from k_transform.cell import Cell, Parameter, ParameterTuple
from k_transform.common import Tensor, set_seed
from k_transform.common.tensor import (
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from k_transform.compiled import set_mode
from k_transform.context import clear_caches
from k_transform.control.policy import set_unroll_budget
from k_transform.errors import KTransformError
from k_transform.forward_api import Jvp, jvp
from k_transform.frontend.python_code import set_strict
from k_transform.ir.primitive import Primitive
from k_transform.jacobians import hessian, hvp, jacfwd, jacrev
from k_transform.jit_api import jit
from k_transform.reverse import GradOperation, grad, mutable, stop_gradient, value_and_grad, vjp
from k_transform.runtime.bounds import set_for_checkpoints, set_loop_bound
from k_transform.train import (
    Callback,
    LossMonitor,
    Model,
    RunContext,
    load_checkpoint,
    load_param_into_net,
    save_checkpoint,
)

__all__ = [
    "Callback",
    "Cell",
    "LossMonitor",
    "Model",
    "RunContext",
    "Tensor",
    "bool_",
    "common",
    "dataset",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "load_checkpoint",
    "load_param_into_net",
    "save_checkpoint",
    "set_seed",
    "train",
    "uint8",
    "GradOperation",
    "Jvp",
    "KTransformError",
    "Parameter",
    "ParameterTuple",
    "Primitive",
    "bprop_getters",
    "clear_caches",
    "compile",
    "draw",
    "get_ir",
    "get_source",
    "grad",
    "hessian",
    "hvp",
    "jacfwd",
    "jacrev",
    "jit",
    "jvp",
    "mutable",
    "nn",
    "ode",
    "ops",
    "set_loop_bound",
    "set_for_checkpoints",
    "set_unroll_budget",
    "set_mode",
    "set_strict",
    "stop_gradient",
    "value_and_grad",
    "vjp",
]
