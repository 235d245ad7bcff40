"""Train a LeNet-style CNN with BatchNorm on generated images (`make demo`).

The data: 10 classes of 1x16x16 patterns drawn with numpy (bars at four
orientations, two crosses, a ring, a blob, a pair of bars, a corner square),
each jittered in position, width and brightness and buried in noise; nothing
is downloaded (a held-out set from another seed is scored at the end). The
network (Conv2d-BatchNorm2d-ReLU-MaxPool2d twice, then two Dense layers)
trains with `kt.jit(nn.TrainOneStepCell(nn.WithLossCell(net, loss),
nn.Momentum(...)))`: one compiled program per step whose gradients come
from k_transform's rules (convolution, pooling, batch norm, fused cross
entropy), not from jax. Each epoch prints a progress bar, the mean loss and
the training accuracy (measured in eval mode, with BatchNorm's moving
statistics); the loss curve is written as a PNG by a small numpy + zlib
writer.

    python -m k_transform.demo_cnn [--epochs 6] [--png cnn_loss.png]
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
import zlib

import jax
import jax.numpy as jnp
import numpy as np

import k_transform as kt
from k_transform import nn

SIZE = 16
CLASSES = (
    "bar 0",
    "bar 45",
    "bar 90",
    "bar 135",
    "plus",
    "cross",
    "ring",
    "blob",
    "two bars",
    "square",
)


# -- data -----------------------------------------------------------------------------------
def _line(yy, xx, cy, cx, angle, width):
    """Brightness of a line through (cy, cx) at `angle` degrees."""
    t = np.deg2rad(angle)
    distance = (xx - cx) * np.sin(t) - (yy - cy) * np.cos(t)
    return np.exp(-0.5 * (distance / width) ** 2)


def _pattern(label: int, rng: np.random.RandomState) -> np.ndarray:
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    cy, cx = rng.uniform(5.5, 9.5, 2)
    width = rng.uniform(0.7, 1.3)
    if label < 4:
        image = _line(yy, xx, cy, cx, 45 * label, width)
    elif label == 4:
        image = np.maximum(_line(yy, xx, cy, cx, 0, width), _line(yy, xx, cy, cx, 90, width))
    elif label == 5:
        image = np.maximum(_line(yy, xx, cy, cx, 45, width), _line(yy, xx, cy, cx, 135, width))
    elif label == 6:
        radius = np.hypot(yy - cy, xx - cx)
        image = np.exp(-0.5 * ((radius - rng.uniform(3.5, 5.0)) / width) ** 2)
    elif label == 7:
        image = np.exp(-0.5 * (np.hypot(yy - cy, xx - cx) / (2.0 * width)) ** 2)
    elif label == 8:
        gap = rng.uniform(2.5, 3.5)
        image = np.maximum(
            _line(yy, xx, cy - gap, cx, 0, width), _line(yy, xx, cy + gap, cx, 0, width)
        )
    else:
        half = rng.uniform(2.5, 4.0)
        inside = (np.abs(yy - cy) < half) & (np.abs(xx - cx) < half)
        image = inside.astype(np.float32)
    image = image * rng.uniform(0.7, 1.2) + rng.normal(0.0, 0.25, image.shape)
    return image.astype(np.float32)


def make_dataset(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` images (n, 1, 16, 16) float32 and their labels (n,) int32, balanced."""
    rng = np.random.RandomState(seed)
    labels = rng.permutation(np.arange(n) % len(CLASSES)).astype(np.int32)
    images = np.stack([_pattern(int(k), rng) for k in labels])[:, None]
    return images, labels


# -- network --------------------------------------------------------------------------------
class LeNet(kt.Cell):
    def __init__(self, n_classes: int = len(CLASSES)):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, pad_mode="same", seed=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, pad_mode="same", seed=2)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2, 2)
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(16 * 4 * 4, 64, seed=3)
        self.fc2 = nn.Dense(64, n_classes, seed=4)

    def construct(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.pool(self.relu(self.bn2(self.conv2(x))))
        x = self.relu(self.fc1(self.flatten(x)))
        return self.fc2(x)


# -- a loss-curve PNG without matplotlib ------------------------------------------------------
def write_png(path: str, rgb: np.ndarray) -> None:
    """Write an (h, w, 3) uint8 image as a PNG (zlib-compressed scanlines)."""
    h, w, _ = rgb.shape
    rows = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))  # filter 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)))
        f.write(chunk(b"IEND", b""))


def _draw_polyline(image, xs, ys, color, thickness: int = 1) -> None:
    """Straight segments between consecutive points, sampled densely."""
    h, w, _ = image.shape
    points = list(zip(xs, ys, strict=True))
    for (x0, y0), (x1, y1) in zip(points[:-1], points[1:], strict=True):
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 2
        for t in np.linspace(0.0, 1.0, n):
            x, y = int(round(x0 + t * (x1 - x0))), int(round(y0 + t * (y1 - y0)))
            image[
                max(y - thickness + 1, 0) : y + thickness, max(x - thickness + 1, 0) : x + thickness
            ] = color


def plot_curves(path: str, losses, accuracies, width: int = 480, height: int = 280) -> None:
    """Per-step loss (blue, left scale 0..max) and per-epoch accuracy (red,
    0..1), with axes and a light grid."""
    image = np.full((height, width, 3), 255, np.uint8)
    left, right, top, bottom = 40, width - 15, 15, height - 30
    for k in range(5):  # grid at 0, 25, 50, 75, 100 % of the scale
        y = bottom - k * (bottom - top) // 4
        image[y, left:right] = 225
    image[top:bottom, left] = 0
    image[bottom, left:right] = 0
    losses = np.asarray(losses, float)
    xs = left + np.arange(len(losses)) * (right - left) / max(len(losses) - 1, 1)
    ys = bottom - losses / max(losses.max(), 1e-12) * (bottom - top)
    _draw_polyline(image, xs, ys, (30, 90, 200))
    if len(accuracies):
        steps_per_epoch = len(losses) / len(accuracies)
        ax = left + (np.arange(1, len(accuracies) + 1) * steps_per_epoch - 1) * (
            right - left
        ) / max(len(losses) - 1, 1)
        ay = bottom - np.asarray(accuracies) * (bottom - top)
        _draw_polyline(image, ax, ay, (200, 40, 40), 2)
    write_png(path, image)


# -- training -------------------------------------------------------------------------------
def _progress(epoch: int, epochs: int, done: int, total: int, loss: float) -> None:
    filled = int(30 * done / total)
    bar = "#" * filled + "-" * (30 - filled)
    sys.stdout.write(f"\repoch {epoch}/{epochs} [{bar}] {done}/{total} loss {loss:.4f}")
    sys.stdout.flush()


def accuracy(predict, images, labels, batch: int = 500) -> float:
    """Accuracy of `predict` (a `kt.jit` of the network) in eval mode: BatchNorm
    uses its moving statistics, as `net.set_train(False)` does in MindSpore."""
    net = predict.__wrapped__
    training = net.training
    net.set_train(False)
    correct = 0
    for start in range(0, len(images), batch):
        logits = predict(jnp.asarray(images[start : start + batch]))
        correct += int(np.sum(np.argmax(np.asarray(logits), -1) == labels[start : start + batch]))
    net.set_train(training)
    return correct / len(images)


def train(epochs: int = 6, n: int = 2000, batch: int = 50, png: str | None = "cnn_loss.png"):
    images, labels = make_dataset(n)
    test_images, test_labels = make_dataset(n // 4, seed=7)
    net = LeNet()
    net.set_train(False)
    predict = kt.jit(net)  # run in eval mode by `accuracy`
    net.set_train(True)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    step = kt.jit(nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), optimizer))

    rng = np.random.RandomState(1)
    steps = n // batch
    losses, accuracies = [], []
    start = time.time()
    for epoch in range(1, epochs + 1):
        order = rng.permutation(n)
        epoch_losses = []
        for k in range(steps):
            idx = order[k * batch : (k + 1) * batch]
            loss = float(step(jnp.asarray(images[idx]), jnp.asarray(labels[idx])))
            epoch_losses.append(loss)
            if k % 5 == 4 or k == steps - 1:
                _progress(epoch, epochs, k + 1, steps, float(np.mean(epoch_losses)))
        losses.extend(epoch_losses)
        accuracies.append(accuracy(predict, images, labels))
        print(
            f"  | mean loss {np.mean(epoch_losses):.4f}  train accuracy "
            f"{100 * accuracies[-1]:.1f}%  ({time.time() - start:.1f} s)"
        )
    seconds = time.time() - start
    print(f"held-out accuracy {100 * accuracy(predict, test_images, test_labels):.1f}%")
    if png:
        plot_curves(png, losses, accuracies)
        print(f"loss curve (blue) and accuracy (red) written to {png}")
    return accuracies[-1], seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--png", default="cnn_loss.png")
    args = parser.parse_args(argv)
    print(
        f"jax {jax.__version__} on {jax.devices()[0].platform}; {args.samples} images, 10 classes"
    )
    acc, seconds = train(args.epochs, args.samples, png=args.png)
    print(f"final training accuracy {100 * acc:.1f}% in {seconds:.1f} s")


if __name__ == "__main__":
    main()
