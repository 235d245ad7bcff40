"""`kt.nn`: MindSpore-style layers, losses, optimizers and training wrappers.

Every layer is a `kt.Cell` whose `construct` is parsed like user code, so its
gradient comes from the registry rules of the primitives it calls.
"""

from k_transform.nn.layers import (
    GELU,
    AvgPool2d,
    BatchNorm2d,
    CellList,
    Conv2d,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    MaxPool2d,
    ReLU,
    SequentialCell,
    Sigmoid,
    Tanh,
)
from k_transform.nn.loss import MSELoss, SoftmaxCrossEntropyWithLogits
from k_transform.nn.optim import SGD, Adam, Momentum
from k_transform.nn.wrap import Jvp, TrainOneStepCell, Vjp, WithLossCell

__all__ = [
    "GELU",
    "SGD",
    "Adam",
    "AvgPool2d",
    "BatchNorm2d",
    "CellList",
    "Conv2d",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "Jvp",
    "LayerNorm",
    "MaxPool2d",
    "MSELoss",
    "Momentum",
    "ReLU",
    "SequentialCell",
    "Sigmoid",
    "SoftmaxCrossEntropyWithLogits",
    "Tanh",
    "TrainOneStepCell",
    "Vjp",
    "WithLossCell",
]
