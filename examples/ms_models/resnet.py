"""A small ResNet on CIFAR-shaped random images (N, 3, 32, 32), MindSpore style.

Two residual blocks (3x3 convolutions, BatchNorm2d, ReLU; a 1x1 strided
convolution where the shape changes), global average pooling and a Dense
classifier; `SoftmaxCrossEntropyWithLogits(sparse=True)` and `Momentum`.
Only the imports below differ between MindSpore and k_transform
(`KT_MINDSPORE=1` picks MindSpore):

    KT_MINDSPORE=1 python examples/ms_models/resnet.py   # MindSpore 2.10
    python examples/ms_models/resnet.py                  # k_transform
"""

import os
import sys

import numpy as np

if os.environ.get("KT_MINDSPORE") == "1":
    import mindspore as ms
    from mindspore import nn, ops
else:
    import k_transform.mindspore as ms
    from k_transform.mindspore import nn, ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_model  # noqa: E402

NUM_CLASSES = 10


def conv3x3(in_channels, out_channels, stride=1):
    return nn.Conv2d(in_channels, out_channels, 3, stride=stride, pad_mode="pad", padding=1)


class ResidualBlock(nn.Cell):
    def __init__(self, in_channels, out_channels, stride=1):
        super().__init__()
        self.conv1 = conv3x3(in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = conv3x3(out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        self.down_sample = stride != 1 or in_channels != out_channels
        if self.down_sample:
            self.down_conv = nn.Conv2d(in_channels, out_channels, 1, stride=stride)
            self.down_bn = nn.BatchNorm2d(out_channels)

    def construct(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.down_sample:
            identity = self.down_bn(self.down_conv(x))
        return self.relu(out + identity)


class ResNet(nn.Cell):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.conv1 = conv3x3(3, 8, stride=2)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.layer1 = ResidualBlock(8, 8)
        self.layer2 = ResidualBlock(8, 16, stride=2)
        self.fc = nn.Dense(16, num_classes)

    def construct(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        x = ops.mean(x, (2, 3))
        return self.fc(x)


def data(steps, seed, batch=8):
    rng = np.random.default_rng(seed)
    batches = [
        (
            rng.standard_normal((batch, 3, 32, 32)).astype(np.float32),
            rng.integers(0, NUM_CLASSES, batch).astype(np.int32),
        )
        for _ in range(steps)
    ]
    return batches, rng.standard_normal((4, 3, 32, 32)).astype(np.float32)


def main(steps=3, seed=0):
    batches, probe = data(steps, seed)
    return run_model(
        ResNet,
        nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        lambda params: nn.Momentum(params, learning_rate=0.05, momentum=0.9),
        batches,
        probe,
        seed,
        "resnet",
    )


if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE)
    for key, value in main().items():
        print(key, np.round(value, 5) if value.dtype.kind == "f" else value)
