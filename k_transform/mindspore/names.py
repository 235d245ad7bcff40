"""MindSpore 2.x's names -> k_transform's objects: the one table of the drop-in.

Each table maps the names of one MindSpore module to the k_transform objects
that mean the same thing; each module of `k_transform.mindspore` is its table
(`globals().update(TABLE)`) plus `absent.missing`, so a name a table lacks
raises `AttributeError` naming it. What is in a table was checked against
MindSpore 2.10: the name is MindSpore's, its signature binds MindSpore's
calls, and for the primitive classes (`OPERATIONS`) MindSpore-style calls on
small inputs gave MindSpore's values. `OPS_DIFFERS` lists the primitive
classes k_transform has under MindSpore's name with other arguments or
meaning: they are absent here, their error says why (use `k_transform.ops`
for them).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform import common, dataset, nn, ops, train
from k_transform.cell import Parameter, ParameterTuple
from k_transform.common import initializer
from k_transform.common.tensor import tensor
from k_transform.forward_api import derivative, jet, jvp, linearize
from k_transform.jacobians import jacfwd, jacrev
from k_transform.jit_api import jit
from k_transform.mindspore import (
    cells,
    communication,
    context,
    functions,
    loops,
    multitype,
    nn_functions,
)
from k_transform.mindspore.custom import Custom, custom_vjp
from k_transform.nn import wrap
from k_transform.ops.functional import FUNCTIONS
from k_transform.reverse import GradOperation, get_grad, grad, mutable, value_and_grad, vjp


def pick(source, names: str) -> dict:
    """`{name: source.name}` for each of the space-separated `names`."""
    return {name: getattr(source, name) for name in names.split()}


# -- mindspore.common.dtype (`ms.float32`, `mstype.int32`): JAX dtypes
DTYPES = {
    ms_name: getattr(jnp, jax_name)
    for ms_name, jax_name in {
        "bool_": "bool_",
        "bool": "bool_",
        "float16": "float16",
        "half": "float16",
        "bfloat16": "bfloat16",
        "float32": "float32",
        "single": "float32",
        "float": "float32",
        "float64": "float64",
        "double": "float64",
        "int8": "int8",
        "byte": "int8",
        "int16": "int16",
        "short": "int16",
        "int32": "int32",
        "int": "int32",
        "intc": "int32",
        "int64": "int64",
        "long": "int64",
        "intp": "int64",
        "uint8": "uint8",
        "ubyte": "uint8",
        "uint16": "uint16",
        "ushort": "uint16",
        "uint32": "uint32",
        "uintc": "uint32",
        "uint64": "uint64",
        "uintp": "uint64",
        "complex64": "complex64",
        "cfloat": "complex64",
        "complex128": "complex128",
        "cdouble": "complex128",
    }.items()
}

# -- mindspore.ops.operations (`P`): primitive classes, `P.MatMul()(a, b)`
OPERATIONS = pick(
    ops,
    "Abs Add AddN Asinh Assign Atan Atan2 BatchMatMul BitwiseAnd BitwiseOr BitwiseXor Cast "
    "Ceil Concat Cos Cosh Div Equal Erf Exp ExpandDims Expm1 Floor FloorDiv Gelu Greater "
    "GreaterEqual Imag Invert InvertPermutation LeftShift Less LessEqual Log Log1p LogSoftmax "
    "MatMul Maximum Minimum Mod Mul Neg NotEqual OnesLike Pad Pow ReLU Real RealDiv Reciprocal "
    "ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum Reshape RightShift Round Rsqrt Select "
    "Shape Sigmoid Sign Sin Sinh Size Softmax Softplus Sqrt Square Squeeze Stack StopGradient "
    "Sub Tan Tanh TensorAdd Transpose Tril Triu Unstack ZerosLike",
)
OPERATIONS["Mod"] = ops.Fmod  # MindSpore's `Mod` truncates (C's fmod); `FloorMod` is `%`
OPERATIONS["FloorMod"] = ops.Mod
OPERATIONS["Cast"] = ops.MsCast  # MindSpore's gradient: through a cast to an integer too
OPERATIONS["GeLU"] = ops.Gelu  # MindSpore's current name of `Gelu` (tanh approximation)
OPERATIONS.update(pick(loops, "ForiLoop WhileLoop Scan"))  # MindSpore's loops, as Python loops
OPERATIONS["Partial"] = multitype.Partial  # `P.Partial()(fn, *args)`: functools.partial
OPERATIONS["CumSum"] = functions.CumSum  # `CumSum(exclusive, reverse)(x, axis)`

_CONV = (
    "it takes (stride, padding, dilation, group), "
    "MindSpore's (out_channel, kernel_size, mode, pad_mode, ...); use nn.Conv2d"
)
_ARG = "it takes (axis=None, keep_dims) and flattens by default, MindSpore's (axis=-1, output_type)"
_POOL = (
    "its strides default to the kernel size and its third argument is `padding`, "
    "MindSpore's default to 1 and the third is `pad_mode`; use nn.MaxPool2d / nn.AvgPool2d"
)
_DROPOUT = "it takes a PRNG key as an input; use nn.Dropout"
OPS_DIFFERS = {
    "Argmax": _ARG,
    "Argmin": _ARG,
    "AvgPool": _POOL,
    "BatchNorm": "it is (x, gamma, beta) -> (y, mean, var), no running stats; use nn.BatchNorm2d",
    "BroadcastTo": "it takes the shape as an input, BroadcastTo()(x, shape); use ops.broadcast_to",
    "Cholesky": "it has no `upper` attribute",
    "Conv2D": _CONV,
    "Conv2DBackpropInput": _CONV,
    "Conv2DTranspose": _CONV,
    "Dropout": _DROPOUT,
    "DropoutDoMask": _DROPOUT,
    "DropoutGenMask": _DROPOUT,
    "Einsum": "it takes the operands as separate inputs, MindSpore's one tuple",
    "Gather": "it takes `axis` as an attribute, Gather(axis)(x, indices); use ops.gather",
    "IndexAdd": "it adds along axis 0 only (x.at[index].add(value)), MindSpore's along `axis`",
    "Inv": "it is the matrix inverse, MindSpore's the elementwise reciprocal; use ops.reciprocal",
    "MaxPool": _POOL,
    "OneHot": "it is (indices, depth, dtype), without on/off values or `axis`",
    "Primitive": "it is the IR's primitive base class, not MindSpore's custom-op base",
    "Roll": "it is Roll(shift, axis), MindSpore's Roll(shifts, dims)",
    "ScatterAdd": "it returns a new array, MindSpore's updates a Parameter in place",
    "SoftmaxCrossEntropyWithLogits": "it returns the loss only, MindSpore's (loss, dlogits)",
    "Split": "it is Split(sections, axis), MindSpore's Split(axis, output_num)",
    "Tile": "it takes the repetitions as an attribute, Tile(reps)(x); use ops.tile",
    "UnsortedSegmentSum": "it takes `num_segments` as an attribute",
}

# -- mindspore.ops.functional (`F`): MindSpore's functional ops and transforms
TRANSFORMS = {
    "grad": grad,
    "value_and_grad": value_and_grad,
    "vjp": vjp,
    "jvp": jvp,
    "jacrev": jacrev,
    "jacfwd": jacfwd,
    "vmap": jax.vmap,  # MindSpore's `vmap(fn, in_axes=0, out_axes=0)`: batched in parsed code
    "get_grad": get_grad,
}
# ops and ops.functional only (not the top level)
FORWARD = {"linearize": linearize, "jet": jet, "derivative": derivative}
# compositions over jax.numpy (`k_transform/mindspore/functions.py`), parsed as user code
COMPOSED = pick(
    functions,
    "ones zeros full full_like fill eye arange linspace "
    "cat flatten split chunk unbind unsqueeze permute swapaxes flip narrow ravel roll "
    "repeat_interleave index_select gather_elements masked_fill one_hot pad "
    "subtract multiply divide true_divide negative floor_divide remainder floor_mod fmod round "
    "lt gt le ge eq ne isnan isinf isfinite logical_and logical_or logical_not depend "
    "relu6 hardswish hardsigmoid leaky_relu elu selu silu gelu softplus mish logsigmoid softsign "
    "max min std var norm cumprod all any topk sort argsort "
    "clip_by_value clip_by_global_norm clip_by_norm "
    "binary_cross_entropy_with_logits binary_cross_entropy nll_loss cross_entropy "
    "mse_loss l1_loss smooth_l1_loss kl_div cosine_similarity dense",
)
# MindSpore's functional nn ops (`k_transform/mindspore/nn_functions.py`), parsed as user code
COMPOSED.update(
    pick(
        nn_functions,
        "conv1d conv2d max_pool2d avg_pool2d adaptive_avg_pool2d interpolate dropout dropout2d",
    )
)
# `F.partial(fn, *args)`: functools.partial's meaning (HyperMap reads one built in the program)
FUNCTIONAL = {**FUNCTIONS, **COMPOSED, **TRANSFORMS, **FORWARD, "partial": multitype.Partial()}

# -- mindspore.ops.function.grad.grad_func: the transforms and `custom_vjp`
GRAD_FUNC = {
    **TRANSFORMS,
    **FORWARD,
    "stop_gradient": FUNCTIONS["stop_gradient"],
    "custom_vjp": custom_vjp,
}

# -- mindspore.ops.composite (`C`)
COMPOSITE = {
    "GradOperation": GradOperation,
    "dot": FUNCTIONS["dot"],
    **pick(multitype, "MultitypeFuncGraph HyperMap Map"),
}

# -- mindspore.ops
OPS = {**OPERATIONS, **FUNCTIONAL, **COMPOSITE, "Custom": Custom}

# -- mindspore.nn
NN = pick(
    nn,
    "Accuracy Adam AvgPool2d BatchNorm2d Cell CellList Conv2d CosineDecayLR CrossEntropyLoss "
    "Dense Dropout Embedding ExponentialDecayLR Flatten GELU Jvp L1Loss LayerNorm LogSoftmax "
    "MSELoss MaxPool2d Metric Momentum Optimizer PolynomialDecayLR ReLU SGD SequentialCell "
    "Sigmoid Softmax SoftmaxCrossEntropyWithLogits Tanh TrainOneStepCell Vjp WithLossCell "
    "LeakyReLU ELU SiLU PReLU BCELoss BCEWithLogitsLoss NLLLoss SmoothL1Loss KLDivLoss "
    "AdamWeightDecay RMSProp Adagrad Conv1d BatchNorm1d AdaptiveAvgPool2d "
    "RNN GRU LSTM Conv2dTranspose MultiheadAttention TransformerEncoderLayer",
)  # not Softplus: MindSpore 2.10 has ops.softplus but no nn.Softplus
NN["DistributedGradReducer"] = wrap.DistributedGradReducer  # DATA_PARALLEL's all-reduce
NN.update(pick(cells, "GroupNorm LSTMCell"))

# -- mindspore.common.initializer
INITIALIZER = pick(
    initializer,
    "initializer Initializer Normal TruncatedNormal Uniform XavierUniform XavierNormal "
    "HeUniform HeNormal Constant Zero One",
)

# -- mindspore.dataset
DATASET = pick(dataset, "NumpySlicesDataset")

# -- mindspore.train
TRAIN = {
    **pick(train, "Model Callback LossMonitor RunContext"),
    **pick(train, "save_checkpoint load_checkpoint load_param_into_net"),
    **pick(nn, "Accuracy Metric"),
}

# -- mindspore.communication (and .management): the processes of a job, jax.distributed's
COMMUNICATION = pick(
    communication,
    "init release get_rank get_group_size GlobalComm "
    "HCCL_WORLD_COMM_GROUP NCCL_WORLD_COMM_GROUP MCCL_WORLD_COMM_GROUP",
)

# -- mindspore.common
COMMON = {
    **pick(common, "Tensor set_seed"),
    "tensor": tensor,  # MindSpore 2.3+'s function (the docstrings' `mindspore.tensor(...)`)
    "Parameter": Parameter,
    "ParameterTuple": ParameterTuple,
    **DTYPES,
}

# -- mindspore (the top level; its submodules are added by the package)
TOP = {
    **COMMON,
    **pick(context, "set_context get_context GRAPH_MODE PYNATIVE_MODE"),
    **pick(
        context,
        "set_auto_parallel_context get_auto_parallel_context reset_auto_parallel_context "
        "ParallelMode",
    ),
    **TRANSFORMS,
    "jit": jit,
    "mutable": mutable,
    **TRAIN,
}
