"""Synthetic 10-class images for the LeNet example (numpy only, nothing downloaded).

10 classes of 1x16x16 patterns (bars at four orientations, two crosses, a
ring, a blob, a pair of bars, a corner square), each jittered in position,
width and brightness and buried in noise. `make_dataset(n, seed)` returns
images (n, 1, 16, 16) float32 and labels (n,) int32, balanced; another seed
gives a held-out set.
"""

from __future__ import annotations

import numpy as np

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
