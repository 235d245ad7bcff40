"""`kt.nn`: MindSpore-style layers, losses, optimizers and training wrappers.

Every layer is a `kt.Cell` whose `construct` is parsed like user code, so its
gradient comes from the registry rules of the primitives it calls.
"""

from k_transform.cell import Cell
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
    LogSoftmax,
    MaxPool2d,
    ReLU,
    SequentialCell,
    Sigmoid,
    Softmax,
    Tanh,
)
from k_transform.nn.loss import (
    CrossEntropyLoss,
    L1Loss,
    MSELoss,
    SoftmaxCrossEntropyWithLogits,
)
from k_transform.nn.metrics import Accuracy, Metric
from k_transform.nn.optim import (
    SGD,
    Adam,
    CosineDecayLR,
    ExponentialDecayLR,
    LearningRateSchedule,
    Momentum,
    Optimizer,
    PolynomialDecayLR,
)
from k_transform.nn.wrap import Jvp, TrainOneStepCell, Vjp, WithLossCell

__all__ = [
    "Accuracy",
    "Cell",
    "CosineDecayLR",
    "CrossEntropyLoss",
    "LogSoftmax",
    "Softmax",
    "ExponentialDecayLR",
    "L1Loss",
    "LearningRateSchedule",
    "Metric",
    "Optimizer",
    "PolynomialDecayLR",
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
